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
