"""PyTorch CUDA tensors through the binding (CUDA backend, torch's current stream), against the
float64 reference. Skipped, with the reason, where torch or a CUDA device is missing."""

import numpy as np
import pytest

import replayssm as rs
from conftest import Problem, delta_rule_reference

torch = pytest.importorskip("torch", reason="PyTorch is not installed")
if not torch.cuda.is_available():
    pytest.skip("torch.cuda.is_available() is False: no GPU here", allow_module_level=True)
ok, why = rs.backend_available(rs.Backend.CUDA)
if not ok:
    pytest.skip("the library's CUDA backend is unavailable: " + why, allow_module_level=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_recurrent_on_torch_cuda_tensors_matches_the_reference(rng, dtype):
    p = Problem(rng, [3, 5])
    dev = torch.device("cuda")
    t = lambda x, dt=None: torch.from_numpy(np.ascontiguousarray(x)).to(dev, dt or torch.from_numpy(x).dtype)  # noqa
    q, k, v = t(p.q, dtype), t(p.k, dtype), t(p.v, dtype)
    state = t(p.state)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        o = rs.recurrent(q, k, v, g=t(p.g), beta=t(p.beta), state=state, slots=t(p.slots), cu_seqlens=t(p.cu_seqlens),
                         max_seqlen=5)
    stream.synchronize()
    qf, kf, vf = (x.float().cpu().numpy() for x in (q, k, v))
    o_ref, s_ref = delta_rule_reference(qf, kf, vf, p.g, p.beta, p.state, p.slots, p.cu_seqlens, p.scale)
    tol = (1e-4, 8e-3) if dtype == torch.bfloat16 else (1e-5, 1e-4)
    of = o.float().cpu().numpy()
    assert np.all(np.abs(of - o_ref) <= tol[0] + tol[1] * np.abs(o_ref))
    assert np.all(np.abs(state.cpu().numpy() - s_ref) <= 1e-5 + 1e-4 * np.abs(s_ref))


@pytest.mark.parametrize("kda", [False, True])
def test_the_sglang_adapter_on_torch_cuda_tensors_is_the_emulated_call(rng, kda):
    """replayssm.sglang on CUDA tensors (torch's current stream) against the same call on CPU
    tensors (the emulated backend): the verify's outputs and ring, and the folded checkpoint."""
    import replayssm.sglang as sg
    H, HV, K, V, W, NL, NS = 2, 4, 32, 32, 8, 2, 5
    seqlens = [3, 2, 4]
    T = sum(seqlens)
    gen = torch.Generator().manual_seed(int(rng.integers(1 << 30)))
    n = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    cpu = dict(q=n(1, T, H, K).bfloat16(), k=n(1, T, H, K).bfloat16(), v=n(1, T, HV, V).bfloat16(),
               a=n(T, HV * K if kda else HV).bfloat16(), b=n(T, HV).bfloat16(), A_log=torch.rand(HV, generator=gen),
               dt_bias=n(HV * K if kda else HV) * 0.1, cu=torch.tensor([0, 3, 5, 9], dtype=torch.int32),
               slots=torch.tensor([3, -1, 1], dtype=torch.int32), state=n(NL, NS, HV, V, K) * 0.1,
               accept=torch.tensor([2, 0, 4], dtype=torch.int32),
               rv=torch.zeros(NL, NS, HV, W, V, dtype=torch.bfloat16), rk=torch.zeros(NL, NS, H, W, K, dtype=torch.bfloat16),
               rg=torch.zeros((NL, NS, HV, W, K) if kda else (NL, NS, HV, W)), rb=torch.zeros(NL, NS, HV, W))
    gpu = {k: v.cuda() for k, v in cpu.items()}
    outs = []
    for t in (cpu, gpu):
        os_ = [sg.fused_sigmoid_gating_delta_rule_update(
            t["A_log"], t["a"], t["dt_bias"], 1.0, 20.0, t["q"], t["k"], t["v"], t["b"], t["state"][layer], t["slots"],
            use_qk_l2norm_in_kernel=True, cu_seqlens=t["cu"], is_kda=kda, disable_state_update=True, cache_ring=True,
            replayssm_rawv=t["rv"][layer], replayssm_rawk=t["rk"][layer], replayssm_g=t["rg"][layer],
            replayssm_beta=t["rb"][layer], max_seqlen=4) for layer in range(NL)]
        fold = sg.commit_kda_replayssm_spec_all_layers if kda else sg.commit_gdn_replayssm_fold_all_layers
        fold(t["state"], t["rv"], t["rk"], t["rg"], t["rb"], t["slots"], t["accept"], W, H, null_block_id=-1)
        outs.append([o.cpu() for o in os_] + [t[x].cpu() for x in ("rv", "rk", "rg", "rb", "state")])
    torch.cuda.synchronize()
    (c_o0, c_o1, c_rv, c_rk, c_rg, c_rb, c_s), (g_o0, g_o1, g_rv, g_rk, g_rg, g_rb, g_s) = outs
    # Raw v and k are copies: the same bits. The gate and beta come from the device's expf/log1pf
    # (the emulator's from the host libm), so outputs and states agree within rounding.
    assert torch.equal(c_rv, g_rv) and torch.equal(c_rk, g_rk) and c_rv.any()
    for c, g, tol in ((c_rg, g_rg, 1e-6), (c_rb, g_rb, 1e-6), (c_o0, g_o0, 2e-2), (c_o1, g_o1, 2e-2), (c_s, g_s, 1e-5)):
        c, g = c.float(), g.float()
        assert not torch.isnan(g).any()
        assert torch.all((c - g).abs() <= tol + tol * c.abs()), (c - g).abs().max()
