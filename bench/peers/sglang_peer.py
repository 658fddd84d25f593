"""SGLang's ReplaySSM Triton kernels as a peer: runs them on the CPU under the Triton interpreter,
runs ours (the Python binding over libreplayssm.so, emulated backend) on the same inputs, prints
how the two differ and writes the goldens of tests/cases/sglang/. Run through scripts/sglang-peer,
which sets up the environment (torch, triton, the sglang wheel) and TRITON_INTERPRET=1.

For each scenario (fixed seeds, so the files are deterministic):
  1. SGLang's spec verify (`fused_sigmoid_gating_delta_rule_update` with cache_ring=True,
     disable_state_update=True), layer by layer, into rings that start as zeros: outputs o and
     the ring (raw v, raw k, gate g, beta);
  2. SGLang's all-layer fold of that ring into a copy of state_in (GDN:
     `commit_gdn_replayssm_fold_all_layers`; KDA: `commit_kda_replayssm_spec_all_layers`, checked
     here equal to its per-layer `commit_kda_replayssm_spec` loop);
  3. our verify (`replayssm.verify`, SGLang's slots: the verify has no null block) into zeroed rings of
     the same layout, and SGLang's all-layer fold of *our* ring into a copy of state_in.
Then, for the buffered decode, S steps of SGLang's `fused_recurrent_linear_replayssm_decode` and of
replayssm.sglang's on an f32 state and f32 rings (`<decode scenario>.decode.safetensors`).
The golden holds the inputs in SGLang's shapes and all of these results; `<scenario>.fold` is a
`replayssm check` case (op fold, layer 0, live requests only) whose expectations are SGLang's.
The interpreter's f32 -> bf16 conversion is patched to round to nearest even, as the GPU does
(`--truncating-bf16` leaves the interpreter's truncation, to measure what it did).
"""

import argparse
import importlib.util
import math
import os
import re
import sys
import tempfile
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "python"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
import json  # noqa: E402

import replayssm  # noqa: E402

SGLANG_VERSION = "0.5.23"
LINEAR = "sglang/kernels/ops/attention/linear"


# --- SGLang's kernels on the CPU --------------------------------------------------------------

def _stub_gpu_probes():
    """The two GPU-probing modules the kernel files import, as stubs (no GPU here): no PDL, not
    HIP, no SM90. The kernels' import of sglang's package __init__s is bypassed too (loaded by
    path below)."""
    def package(name):
        m = sys.modules.get(name)
        if m is None:
            m = types.ModuleType(name)
            m.__path__ = []
            sys.modules[name] = m
        return m

    for p in ("sglang", "sglang.srt", "sglang.kernels", "sglang.kernels.jit"):
        package(p)
    srt_utils = types.ModuleType("sglang.srt.utils")
    srt_utils.get_device_sm = lambda: 0
    srt_utils.is_cuda = lambda: False
    srt_utils.is_hip = lambda: False
    srt_utils.is_gfx95_supported = lambda: False
    srt_utils.is_sm90_supported = lambda: False
    sys.modules["sglang.srt.utils"] = srt_utils
    jit_utils = types.ModuleType("sglang.kernels.jit.utils")
    jit_utils.is_arch_support_pdl = lambda: False
    sys.modules["sglang.kernels.jit.utils"] = jit_utils


def _load_kernel(site, name, tmp):
    """SGLang's kernel file `name`, loaded by path with one spelling the interpreter cannot run
    rewritten: `phys = t.to(tl.int64)` (a loop index is a plain int there, with no .to) becomes
    `phys = t` (the same value). The rewritten copy is written to `tmp` so that Triton can read
    the functions' source."""
    src = (site / LINEAR / name).read_text()
    patched, n = re.subn(r"phys = t\.to\(tl\.int64\)", "phys = t", src)
    if name.endswith("_fold.py") or name.startswith("kda_"):
        assert n >= 1, "%s: the loop-index cast to patch is gone (SGLang changed?)" % name
    path = Path(tmp) / name
    path.write_text(patched)
    spec = importlib.util.spec_from_file_location("sglang_peer_" + path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, n


def _interpreter_bf16_rounds_to_nearest_even():
    """Triton 3.8.0's interpreter narrows f32 to bf16 by truncation: `_convert_float` keeps the
    top 16 bits (its RTNE branch rounds half up, without ties to even, and is not taken by a plain
    cast or store anyway), where the GPU's cvt.rn.bf16.f32 rounds to nearest, ties to even.
    Unpatched, about half of SGLang's bf16 outputs come out one ulp toward zero. Every cast and store of
    a kernel reaches the module global `triton.runtime.interpreter._convert_float`, looked up per
    call, so replacing it for f32 -> bf16 gives the GPU's bits (RTZ casts still truncate, NaN
    stays NaN). Checked here on values whose rounding differs."""
    import numpy as np
    import triton.runtime.interpreter as interp
    from triton._C.libtriton import ir

    truncating = interp._convert_float

    def rne(x):
        bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
        odd = (bits >> np.uint32(16)) & np.uint32(1)
        rounded = ((bits + np.uint32(0x7FFF) + odd) >> np.uint32(16)).astype(np.uint16)
        nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
        quiet = ((bits >> np.uint32(16)) | np.uint32(0x40)).astype(np.uint16)
        return np.where(nan, quiet, rounded)

    def convert(values, src, dst, rounding_mode):
        if src == tl.float32 and dst == tl.bfloat16 and rounding_mode != ir.ROUNDING_MODE.RTZ:
            return rne(values).reshape(np.shape(values))
        return truncating(values, src, dst, rounding_mode)

    interp._convert_float = convert

    # The interpreter's tl.dot multiplies its operands' storage: bf16 is stored as uint16 bit
    # patterns, so a bf16 dot (SGLang's buffered decode rebuilds its state with one, over bf16
    # records) is an integer product of bit patterns, off by ~1e8. The GPU's bf16 tensor-core dot
    # takes the bf16 values (exact in f32) and accumulates in f32: widen them and do that.
    dot = interp.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if tl.bfloat16 not in (a.dtype.scalar, b.dtype.scalar):
            return dot(self, a, b, d, input_precision, max_num_imprecise_acc)
        def widen(t):  # each operand by its own dtype: bf16 bits shifted into f32, others cast
            if t.dtype.scalar == tl.bfloat16:
                return (t.data.astype(np.uint32) << np.uint32(16)).view(np.float32)
            return t.data.astype(np.float32)
        return interp.TensorHandle(np.matmul(widen(a), widen(b), dtype=np.float32) + d.data, d.dtype.scalar)

    interp.InterpreterBuilder.create_dot = create_dot
    # Checked through a kernel, as SGLang's reach it: an f32 store into bf16 memory and an explicit
    # cast, on values whose rounding differs (ties both ways, negative, a carry into the exponent,
    # the largest finite value rounding to inf), against torch's CPU conversion (nearest even).
    bits = [0x3F818000, 0x3F808000, 0xBF818000, 0x3F80FFF8, 0x3FFFFFFF, 0x7F7FFFFF, 0xFF800000, 0x40490FDB]
    x = torch.tensor(np.array(bits, np.uint32).view(np.float32))
    stored, cast = torch.empty(8, dtype=torch.bfloat16), torch.empty(8, dtype=torch.bfloat16)
    _bf16_probe[(1,)](x, stored, cast, N=8)
    want = x.to(torch.bfloat16).view(torch.int16)
    for what, got in (("a store", stored), ("a cast", cast)):
        if not torch.equal(got.view(torch.int16), want):
            raise SystemExit("the bf16 rounding patch did not take for %s: %s, want %s" % (
                what, [hex(v & 0xFFFF) for v in got.view(torch.int16).tolist()],
                [hex(v & 0xFFFF) for v in want.tolist()]))


@triton.jit
def _bf16_probe(x_ptr, stored_ptr, cast_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    x = tl.load(x_ptr + offs)
    tl.store(stored_ptr + offs, x)
    tl.store(cast_ptr + offs, x.to(tl.bfloat16))


# --- scenarios ----------------------------------------------------------------------------------

SCENARIOS = {
    # GDN, bf16, GQA (H < HV): a null row with a track entry; two track snapshots, one at the
    # last step of a whole-window accept; slot 3 untouched.
    "gdn_bf16_gqa": dict(
        kda=False, act="bf16", H=2, HV=4, K=32, V=32, NL=2, NS=6, W=8, null=-1, seed=1,
        seqlens=[3, 1, 4, 2], slots=[4, -1, 1, 2], accept=[2, 1, 4, 1],
        track_slots=[5, 3, 0, -1], track_steps=[1, 0, 3, 0],
    ),
    # GDN, f32 act, K != V: a null row; a track slot with step -1 (nothing due); slot 4
    # untouched.
    "gdn_f32_kv": dict(
        kda=False, act="f32", H=2, HV=2, K=64, V=32, NL=2, NS=5, W=8, null=-1, seed=2,
        seqlens=[2, 5, 1, 3], slots=[3, 0, -1, 2], accept=[2, 3, 1, 1],
        track_slots=[1, -1, -1, 4], track_steps=[0, -1, 0, -1],
    ),
    # KDA, bf16, GQA: two null rows (one with a track entry), a track at step 2 and one with
    # step -1 (the same track slot as the null row's: neither is due); slot 1 untouched.
    "kda_bf16_gqa": dict(
        kda=True, act="bf16", H=2, HV=4, K=32, V=32, NL=2, NS=5, W=8, null=-1, seed=3,
        seqlens=[4, 2, 1, 3, 2], slots=[2, -1, 4, -1, 0], accept=[3, 2, 1, 1, 2],
        track_slots=[3, 1, 1, -1, -1], track_steps=[2, 0, -1, -1, 0],
    ),
    # KDA, f32 act, K != V, null_block_id = 0 (SGLang's per-layer KDA default): a request on slot
    # 0 (the null block: SGLang's verify still writes its ring and outputs, its fold skips it),
    # one on -1, a track into slot 0 (skipped as the null block).
    "kda_f32_kv": dict(
        kda=True, act="f32", H=2, HV=2, K=32, V=64, NL=2, NS=5, W=8, null=0, seed=4,
        seqlens=[3, 2, 4, 1], slots=[0, 3, -1, 2], accept=[2, 2, 3, 1],
        track_slots=[4, 1, -1, 0], track_steps=[0, 1, 0, 0],
    ),
    # GDN, f32, GQA, every index tensor int64 (cu_seqlens, slots, accept lengths, track slots and
    # steps), as SGLang's unit tests are reported to pass them: SGLang's kernels take them as they are, the files
    # store them as I64 and the adapter narrows them. A null row; a track with step -1.
    "gdn_f32_i64": dict(
        kda=False, act="f32", H=2, HV=4, K=32, V=32, NL=2, NS=6, W=8, null=-1, seed=5, index="int64",
        seqlens=[4, 2, 3, 1], slots=[5, 2, -1, 0], accept=[3, 2, 1, 1],
        track_slots=[1, 3, -1, 4], track_steps=[2, -1, 0, 0],
    ),
    # KDA's safe gate (Kimi's; SGLang's `lower_bound`): g = lower_bound * sigmoid(exp(A_log) *
    # (a + dt_bias)). f32 act, K != V, null_block_id = 0 as in kda_f32_kv: a request on slot 0
    # (the null block) with a track entry, one on -1, a track mid-window, a whole-window accept.
    "kda_f32_safe": dict(
        kda=True, act="f32", H=2, HV=2, K=32, V=64, NL=2, NS=6, W=8, null=0, seed=6, lower_bound=-5.0,
        seqlens=[3, 2, 4, 2], slots=[1, -1, 0, 3], accept=[2, 1, 3, 2],
        track_slots=[2, -1, 4, 5], track_steps=[1, 0, 2, 1],
    ),
    # The safe gate with bf16 activations and GQA: a null row, a whole-window accept.
    "kda_bf16_safe": dict(
        kda=True, act="bf16", H=2, HV=4, K=32, V=32, NL=2, NS=5, W=8, null=-1, seed=7, lower_bound=-5.0,
        seqlens=[2, 4, 3], slots=[3, -1, 0], accept=[1, 4, 3],
        track_slots=[4, -1, -1], track_steps=[0, 0, -1],
    ),
    # K = 96, the head size of SGLang's batched-fold and ring-fused tests (three channels per lane
    # in ours): GDN bf16 with GQA, a null row, a whole-window accept, a track at the last step.
    "gdn_bf16_k96": dict(
        kda=False, act="bf16", H=1, HV=2, K=96, V=32, NL=2, NS=5, W=8, null=-1, seed=8,
        seqlens=[3, 4, 2], slots=[2, -1, 0], accept=[2, 4, 2],
        track_slots=[4, -1, 1], track_steps=[1, 0, 1],
    ),
    # K = 96, KDA, f32 (so the NumPy adapter runs it too), null_block_id = 0 with a request on
    # slot 0, a null row, a track with step -1.
    "kda_f32_k96": dict(
        kda=True, act="f32", H=1, HV=2, K=96, V=32, NL=2, NS=5, W=8, null=0, seed=9,
        seqlens=[4, 2, 3], slots=[1, 0, -1], accept=[3, 2, 1],
        track_slots=[2, 3, -1], track_steps=[2, -1, 0],
    ),
}

ACT = {"bf16": torch.bfloat16, "f32": torch.float32}
# How SGLang's kernels rounded f32 -> bf16 under the interpreter (recorded in each golden).
BF16_ROUNDING = "nearest even (the interpreter patched to the GPU's rounding)"
# The shipped case files' tolerances for the act dtype (tools/tests/cases).
TOL = {"bf16": (1e-4, 8e-3), "f32": (1e-6, 1e-5)}


def make_inputs(sc):
    g = torch.Generator().manual_seed(1000 + sc["seed"])
    H, HV, K, V, NL, NS, W = (sc[x] for x in ("H", "HV", "K", "V", "NL", "NS", "W"))
    act = ACT[sc["act"]]
    T = sum(sc["seqlens"])
    randn = lambda *s: torch.randn(*s, generator=g, dtype=torch.float32)  # noqa: E731
    gw = K if sc["kda"] else 1
    x = dict(
        q=randn(NL, 1, T, H, K).to(act),
        k=randn(NL, 1, T, H, K).to(act),
        v=randn(NL, 1, T, HV, V).to(act),
        a=randn(NL, T, HV * gw).to(act),
        b=randn(NL, T, HV).to(act),
        A_log=torch.empty(NL, HV).uniform_(math.log(1.0), math.log(16.0), generator=g),
        dt_bias=0.1 * randn(NL, HV * gw),
        state_in=0.1 * randn(NL, NS, HV, V, K),
    )
    if not sc["kda"]:
        x["a"] = x["a"].reshape(NL, T, HV)
    cu = [0]
    for n in sc["seqlens"]:
        cu.append(cu[-1] + n)
    index = torch.int64 if sc.get("index") == "int64" else torch.int32
    i32 = lambda v: torch.tensor(v, dtype=index)  # noqa: E731
    x.update(cu_seqlens=i32(cu), state_indices=i32(sc["slots"]), accept_lens=i32(sc["accept"]),
             track_slots=i32(sc["track_slots"]), track_steps=i32(sc["track_steps"]))
    return x


def zero_ring(sc):
    H, HV, K, V, NL, NS, W = (sc[x] for x in ("H", "HV", "K", "V", "NL", "NS", "W"))
    act = ACT[sc["act"]]
    gshape = (NL, NS, HV, W, K) if sc["kda"] else (NL, NS, HV, W)
    return [torch.zeros(NL, NS, HV, W, V, dtype=act), torch.zeros(NL, NS, H, W, K, dtype=act),
            torch.zeros(gshape, dtype=torch.float32), torch.zeros(NL, NS, HV, W, dtype=torch.float32)]


def sglang_verify(mods, sc, x, ring):
    """SGLang's spec verify of every layer; returns o [NL, 1, T, HV, V] (act)."""
    rec = mods["fused_sigmoid_gating_recurrent.py"]
    outs = []
    for layer in range(sc["NL"]):
        o = rec.fused_sigmoid_gating_delta_rule_update(
            A_log=x["A_log"][layer], a=x["a"][layer], dt_bias=x["dt_bias"][layer],
            softplus_beta=1.0, softplus_threshold=20.0,
            q=x["q"][layer], k=x["k"][layer], v=x["v"][layer], b=x["b"][layer],
            initial_state_source=x["state_in"][layer], initial_state_indices=x["state_indices"],
            scale=sc["K"] ** -0.5, use_qk_l2norm_in_kernel=True, cu_seqlens=x["cu_seqlens"],
            is_kda=sc["kda"], lower_bound=sc.get("lower_bound"), disable_state_update=True, cache_ring=True,
            replayssm_rawv=ring[0][layer], replayssm_rawk=ring[1][layer],
            replayssm_g=ring[2][layer], replayssm_beta=ring[3][layer],
        )
        outs.append(o)
    return torch.stack(outs)


def sglang_fold(mods, sc, x, ring, state):
    """SGLang's all-layer fold of `ring` into `state` (in place); for KDA also its per-layer entry
    on a copy, which must give the same bits."""
    kw = dict(ssm_state_indices=x["state_indices"], accept_lens=x["accept_lens"],
              max_cache_len=sc["W"], num_k_heads=sc["H"], mamba_track_indices=x["track_slots"],
              mamba_steps_to_track=x["track_steps"], use_qk_l2norm_in_kernel=True,
              null_block_id=sc["null"])
    if not sc["kda"]:
        mods["gdn_replayssm_spec_fold.py"].commit_gdn_replayssm_fold_all_layers(
            checkpoint_state=state, rawv_cache=ring[0], rawk_cache=ring[1], g_cache=ring[2],
            beta_cache=ring[3], **kw)
        return None
    kda = mods["kda_replayssm_spec_decode.py"]
    per_layer = state.clone()
    for layer in range(sc["NL"]):
        kda.commit_kda_replayssm_spec(
            checkpoint_state=per_layer[layer], rawv_cache=ring[0][layer], rawk_cache=ring[1][layer],
            gk_cache=ring[2][layer], beta_cache=ring[3][layer], **kw)
    kda.commit_kda_replayssm_spec_all_layers(
        checkpoint_state=state, rawv_cache=ring[0], rawk_cache=ring[1], gk_cache=ring[2],
        beta_cache=ring[3], **kw)
    if not torch.equal(per_layer.view(torch.int32), state.view(torch.int32)):
        raise SystemExit("SGLang's KDA per-layer fold differs from its all-layer fold")
    return True


def our_verify(sc, x, ring):
    # The verify has no null block (SGLang's neither): its slots are SGLang's, -1 a null row.
    # The binding's entries take int32 (the adapter, replayssm.sglang, narrows int64).
    slots = x["state_indices"].int()
    state = x["state_in"].clone()
    outs = []
    for layer in range(sc["NL"]):
        gate = dict(a=x["a"][layer], b=x["b"][layer], A_log=x["A_log"][layer].contiguous(),
                    dt_bias=x["dt_bias"][layer].contiguous(), lower_bound=sc.get("lower_bound"))
        if sc["kda"]:
            gate["a"] = gate["a"].reshape(-1, sc["HV"], sc["K"])
            gate["dt_bias"] = gate["dt_bias"].reshape(sc["HV"], sc["K"])
        o = replayssm.verify(x["q"][layer][0], x["k"][layer][0], x["v"][layer][0], state=state, slots=slots,
                             cu_seqlens=x["cu_seqlens"].int(), layer=layer, ring=tuple(ring), scale=sc["K"] ** -0.5,
                             qk_l2norm=True, **gate)
        outs.append(o)
    if not torch.equal(state, x["state_in"]):
        raise SystemExit("our verify wrote the checkpoint")
    return torch.stack(outs)


# --- comparisons ----------------------------------------------------------------------------------

def ulps(a, b):
    """Largest distance in f32 units in the last place (same-sign ordering of the bit patterns)."""
    def key(t):
        i = t.contiguous().view(torch.int32).to(torch.int64)
        return torch.where(i < 0, -(i & 0x7FFFFFFF), i)
    return int((key(a) - key(b)).abs().max()) if a.numel() else 0


def bytes_equal(a, b):
    return a.contiguous().view(torch.uint8).equal(b.contiguous().view(torch.uint8))


def rel(a, b):
    d = (a.double() - b.double()).abs().max().item()
    return d, d / max(b.double().abs().max().item(), 1e-30)


def act_ulps(a, b):
    """Largest distance in units in the last place of the act dtype (f32, f16 or bf16)."""
    if a.dtype == torch.float32:
        return ulps(a, b)
    def key(t):
        i = t.contiguous().view(torch.int16).to(torch.int64)
        return torch.where(i < 0, -(i & 0x7FFF), i)
    return int((key(a) - key(b)).abs().max()) if a.numel() else 0


def gate_truth(sc, x):
    """Per token, the gate and beta in f64 from the same f32 inputs (x = a + dt_bias added in f32,
    as both kernels do): g = -exp(A_log) softplus(x), softplus linear above 20 (with a
    lower_bound: g = lower_bound sigmoid(exp(A_log) x)); beta = sigmoid(b).
    Returns g [NL, T, HV(, K)] and beta [NL, T, HV] as f64."""
    NL, T, HV, K = sc["NL"], sum(sc["seqlens"]), sc["HV"], sc["K"]
    gw = K if sc["kda"] else 1
    xa = x["a"].float().reshape(NL, T, HV, gw) + x["dt_bias"].reshape(NL, 1, HV, gw)
    xd = xa.double()
    A = torch.exp(x["A_log"].double()).reshape(NL, 1, HV, 1)
    if sc.get("lower_bound") is not None:
        g = sc["lower_bound"] * torch.sigmoid(A * xd)
    else:
        g = -A * torch.where(xd <= 20.0, torch.log1p(torch.exp(xd)), xd)
    beta = torch.sigmoid(x["b"].float().double())
    return (g if sc["kda"] else g[..., 0]), beta


def ring_records(sc, x, ring_t, live):
    """The written ring records of tensor ring_t [NL, NS, HV, W(, K)] in token order (live rows)."""
    cu = x["cu_seqlens"].tolist()
    out = []
    for i in live:
        s = sc["slots"][i]
        for j in range(cu[i + 1] - cu[i]):
            out.append(ring_t[:, s, :, j])
    return torch.stack(out, dim=1)  # [NL, T_live, HV(, K)]


def summary(name, sc, x, o_sg, ring_sg, o_ours, ring_ours, st_sg, st_of_ours):
    # The verify's rows: only a negative slot is a null row there (the fold skips <= null_block_id).
    live = [i for i, s in enumerate(sc["slots"]) if s >= 0]
    cu = x["cu_seqlens"].tolist()
    rows = [t for i in live for t in range(cu[i], cu[i + 1])]
    null_rows = [t for i, s in enumerate(sc["slots"]) if s < 0 for t in range(cu[i], cu[i + 1])]
    lines = ["%s (%s %s, H=%d HV=%d K=%d V=%d, %d layers, %d slots, W=%d, null_block_id=%d):" % (
        name, sc["act"], "kda" if sc["kda"] else "gdn", sc["H"], sc["HV"], sc["K"], sc["V"], sc["NL"],
        sc["NS"], sc["W"], sc["null"])]
    live_slots = sorted(s for s in sc["slots"] if s >= 0)
    sel = lambda t: t[:, live_slots]  # noqa: E731
    for i, p in ((0, "v"), (1, "k")):
        lines.append("  ring %s ours vs SGLang (live slots): %s" % (
            p, "bit-equal" if bytes_equal(sel(ring_sg[i]), sel(ring_ours[i])) else "DIFFERENT"))
    g_true, beta_true = gate_truth(sc, x)
    g_true, beta_true = g_true[:, rows], beta_true[:, rows]
    for i, p, truth in ((2, "g", g_true), (3, "beta", beta_true)):
        a, b = ring_records(sc, x, ring_ours[i], live), ring_records(sc, x, ring_sg[i], live)
        t32 = truth.float()
        n = int((a != b).sum())
        lines.append("  ring %s ours vs SGLang: max %d ulp, %d of %d differ; from the f64 value: ours max %d ulp, "
                     "SGLang's max %d ulp" % (p, ulps(a, b), n, a.numel(), ulps(a, t32), ulps(b, t32)))
    og = o_sg[:, 0, rows]
    oo = o_ours[:, rows]
    d, r = rel(oo.float(), og.float())
    eq = int((oo.reshape(-1) == og.reshape(-1)).sum())
    lines.append("  o (live rows) ours vs SGLang: max |diff| %.3e (%.2e of max |o|), max %d ulp of %s, %d of %d equal" % (
        d, r, act_ulps(oo, og), sc["act"], eq, og.numel()))
    if null_rows:
        z = o_ours[:, null_rows].float()
        lines.append("  o (null rows) ours: %s" % ("all zero" if bool((z == 0).all()) else "NOT ZERO"))
    d, r = rel(st_of_ours, st_sg)
    lines.append("  state: SGLang's fold of our ring vs of its own: max |diff| %.3e (%.2e of max |state|)" % (d, r))
    return "\n".join(lines)


# --- files ----------------------------------------------------------------------------------------

ST_DTYPE = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.int32: "I32", torch.int64: "I64"}


def save(path, tensors, metadata):
    """A safetensors file written byte-deterministically (safetensors' own writer orders the
    metadata by a hash map): header keys sorted, tensors in name order, the header padded with
    spaces to 8 bytes as the format does."""
    header = {"__metadata__": dict(sorted(metadata.items()))}
    blobs, at = [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        b = t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": ST_DTYPE[t.dtype], "shape": list(t.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def write_golden(path, name, sc, x, o_sg, ring_sg, ring_ours, st_sg, st_of_ours, command):
    t = dict(x)
    t.update(o_sglang=o_sg,
             ring_v_sglang=ring_sg[0], ring_k_sglang=ring_sg[1], ring_g_sglang=ring_sg[2],
             ring_beta_sglang=ring_sg[3], state_folded_sglang=st_sg,
             ring_v_ours=ring_ours[0], ring_k_ours=ring_ours[1], ring_g_ours=ring_ours[2],
             ring_beta_ours=ring_ours[3], state_sglang_fold_of_ours=st_of_ours)
    t = {k: v.contiguous() for k, v in t.items()}
    meta = dict(
        format="replayssm-sglang-golden-1", scenario=name, sglang_version=SGLANG_VERSION,
        torch_version=torch.__version__, triton_version=triton.__version__,
        variant="kda" if sc["kda"] else "gdn", act_dtype=sc["act"], H=sc["H"], HV=sc["HV"], K=sc["K"],
        V=sc["V"], num_layers=sc["NL"], num_slots=sc["NS"], window=sc["W"], scale=repr(sc["K"] ** -0.5),
        null_block_id=sc["null"], softplus_beta="1.0", softplus_threshold="20.0", use_qk_l2norm="true",
        index_dtype=sc.get("index", "int32"), bf16_rounding=BF16_ROUNDING, command=command,
    )
    if sc.get("lower_bound") is not None:
        meta["lower_bound"] = repr(sc["lower_bound"])
    save(path, t, {k: str(v) for k, v in meta.items()})


def write_fold_case(path, sc, x, o_sg, st_sg):
    """Our case file (tools/src/case.rs, op fold): layer 0, live requests only (request r in slot
    r), expectations SGLang's outputs (widened to f32) and SGLang's folded layer-0 checkpoints."""
    live = [i for i, s in enumerate(sc["slots"]) if s > sc["null"]]
    cu = x["cu_seqlens"].tolist()
    idx = torch.tensor([t for i in live for t in range(cu[i], cu[i + 1])], dtype=torch.long)
    lcu = [0]
    for i in live:
        lcu.append(lcu[-1] + cu[i + 1] - cu[i])
    HV, K = sc["HV"], sc["K"]
    slots = torch.tensor([sc["slots"][i] for i in live], dtype=torch.long)
    a = x["a"][0][idx]
    t = dict(
        q=x["q"][0, 0][idx], k=x["k"][0, 0][idx], v=x["v"][0, 0][idx],
        a=a.reshape(-1, HV, K) if sc["kda"] else a, b=x["b"][0][idx],
        A_log=x["A_log"][0], dt_bias=x["dt_bias"][0].reshape(HV, K) if sc["kda"] else x["dt_bias"][0],
        cu_seqlens=torch.tensor(lcu, dtype=torch.int32),
        state_in=x["state_in"][0][slots], o=o_sg[0, 0][idx].float(),
        state_out=st_sg[0][slots], accept=x["accept_lens"][torch.tensor(live)].int(),
    )
    t = {k: v.contiguous() for k, v in t.items()}
    atol, rtol = TOL[sc["act"]]
    meta = dict(format="replayssm-case/1", op="fold", variant="kda" if sc["kda"] else "gdn",
                scale=repr(K ** -0.5), qk_l2norm="true", atol="%g" % atol, rtol="%g" % rtol)
    if sc.get("lower_bound") is not None:
        meta["lower_bound"] = repr(sc["lower_bound"])
    save(path, t, meta)


# --- the buffered decode ------------------------------------------------------------------------

DECODE_SCENARIOS = {
    # S one-token steps of B rows on an f32 state and f32 rings of L records (the layout where
    # SGLang's decode ring maps onto ours): cursors cycle 0..L-1 with a flush at L-1, one forced
    # flush mid-ring (row 1, step 5), a null row (slot -1) from step 7 on.
    "decode_gdn_f32_gqa": dict(kda=False, H=2, HV=4, K=32, V=32, NS=4, L=4, S=10, slots=[2, 0], seed=11,
                               force=[(5, 1)], null_from=(7, 1)),
    "decode_kda_f32_kv": dict(kda=True, H=2, HV=2, K=32, V=64, NS=4, L=4, S=10, slots=[3, 1], seed=12,
                              force=[(2, 0)], null_from=(8, 0)),
    # K = 96 (three channels per lane in ours).
    "decode_gdn_f32_k96": dict(kda=False, H=1, HV=2, K=96, V=32, NS=4, L=4, S=10, slots=[1, 3], seed=13,
                               force=[(3, 0)], null_from=(8, 1)),
    # Rings of the activations' 16-bit dtype (SGLang's bf16 decode tests; f16 so that the NumPy
    # adapter, which has no bfloat16, runs one too): d and k rounded to it, g f32, state f32.
    "decode_gdn_bf16_gqa": dict(kda=False, H=2, HV=4, K=32, V=32, NS=4, L=4, S=10, slots=[2, 0], seed=14,
                                force=[(5, 1)], null_from=(7, 1), dtype="bf16"),
    "decode_kda_bf16_kv": dict(kda=True, H=2, HV=2, K=64, V=32, NS=4, L=8, S=16, slots=[3, 1], seed=15,
                               force=[(4, 0)], null_from=(14, 0), dtype="bf16"),
    "decode_gdn_f16_gqa": dict(kda=False, H=2, HV=4, K=32, V=64, NS=4, L=4, S=10, slots=[1, 2], seed=16,
                               force=[(2, 1)], null_from=(8, 0), dtype="f16"),
}

DECODE_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def decode_inputs(sc):
    g = torch.Generator().manual_seed(1000 + sc["seed"])
    H, HV, K, V, NS, L, S = (sc[x] for x in ("H", "HV", "K", "V", "NS", "L", "S"))
    B = len(sc["slots"])
    randn = lambda *s: torch.randn(*s, generator=g, dtype=torch.float32)  # noqa: E731
    gate = (HV, K) if sc["kda"] else (HV,)
    act = DECODE_DTYPES[sc.get("dtype", "f32")]
    x = dict(mixed_qkv=randn(S, B, 2 * H * K + HV * V).to(act), a=randn(S, B, *gate).to(act),
             b=randn(S, B, HV).to(act), A_log=torch.empty(HV).uniform_(math.log(1.0), math.log(16.0), generator=g),
             dt_bias=0.1 * randn(*gate), state_in=0.1 * randn(NS, HV, V, K))
    slots = torch.tensor([sc["slots"]] * S, dtype=torch.int32)
    step, row = sc["null_from"]
    slots[step:, row] = -1
    force = torch.zeros(S, B, dtype=torch.int32)
    for step, row in sc["force"]:
        force[step, row] = 1
    # The caller's cursor protocol: write_pos m pending records; after a flush (m == L-1 or a
    # forced one) it restarts at 0.
    pos = torch.zeros(S, B, dtype=torch.int32)
    for t in range(1, S):
        flushed = (pos[t - 1] == L - 1) | (force[t - 1] != 0)
        pos[t] = torch.where(flushed, torch.zeros_like(pos[t - 1]), pos[t - 1] + 1)
    x.update(slots=slots, write_pos=pos, force_flush=force)
    return x


def run_decode(fn, sc, x):
    """S steps of `fn` (SGLang's or replayssm.sglang's decode); returns (out [S, B, 1, HV, V],
    the state after the last step, the rings (d, k, g) after the last step)."""
    H, HV, K, V, NS, L, S = (sc[k] for k in ("H", "HV", "K", "V", "NS", "L", "S"))
    B = len(sc["slots"])
    act = DECODE_DTYPES[sc.get("dtype", "f32")]
    state = x["state_in"].clone()
    gshape = (NS, HV, L, K) if sc["kda"] else (NS, HV, L)
    d, kc, gc = torch.zeros(NS, HV, L, V, dtype=act), torch.zeros(NS, H, L, K, dtype=act), torch.zeros(gshape)
    outs = []
    for t in range(S):
        out = torch.full((B, 1, HV, V), float("nan"), dtype=act)
        fn(x["mixed_qkv"][t], x["a"][t], x["b"][t], x["A_log"], x["dt_bias"], K ** -0.5, state, d, kc, gc, out,
           x["slots"][t], x["write_pos"][t], force_flush=x["force_flush"][t], use_qk_l2norm_in_kernel=True,
           is_kda=sc["kda"])
        outs.append(out)
    return torch.stack(outs), state, (d, kc, gc)


def decode_golden(mods, name, sc, out_dir, command):
    import replayssm.sglang as ours
    x = decode_inputs(sc)
    o_sg, st_sg, ring_sg = run_decode(mods["fused_recurrent_linear_replayssm.py"].fused_recurrent_linear_replayssm_decode,
                                      sc, x)
    o_us, st_us, ring_us = run_decode(ours.fused_recurrent_linear_replayssm_decode, sc, x)
    live = (x["slots"] >= 0)[:, :, None, None, None].expand_as(o_sg)
    dtype = sc.get("dtype", "f32")
    print("%s (%s %s, H=%d HV=%d K=%d V=%d, %d slots, L=%d, %d steps):" % (
        name, dtype, "kda" if sc["kda"] else "gdn", sc["H"], sc["HV"], sc["K"], sc["V"], sc["NS"], sc["L"], sc["S"]))
    diff = (o_sg.float() - o_us.float())[live].abs()
    print("  o (live rows) ours vs SGLang: max |diff| %.3e (max |o| %.3e, %s ulps at most, %d of %d differ); "
          "null rows: ours %s, SGLang's %s" % (
              diff.max().item(), o_sg.float()[live].abs().max().item(), act_ulps(o_sg[live], o_us[live]),
              int((diff != 0).sum()), diff.numel(), "zero" if bool((o_us[~live] == 0).all()) else "NOT ZERO",
              "zero" if bool((o_sg[~live] == 0).all()) else "nonzero"))
    print("  state after the last step: max |diff| %.3e" % (st_sg - st_us).abs().max().item())
    # The records pending after the last step (the same meaning and layout in both: d, k^, g).
    for what, a, b in zip(("d", "k", "g"), ring_sg, ring_us):
        print("  ring %s (%s) after the last step: %d of %d values differ, %d %s ulps at most" % (
            what, str(a.dtype).replace("torch.", ""), int((a != b).sum()), a.numel(), act_ulps(a, b),
            "f32" if a.dtype == torch.float32 else dtype))
    t = dict(x, out_sglang=o_sg, state_sglang=st_sg, ring_d_sglang=ring_sg[0], ring_k_sglang=ring_sg[1],
             ring_g_sglang=ring_sg[2])
    meta = dict(format="replayssm-sglang-decode-golden-1", scenario=name, sglang_version=SGLANG_VERSION,
                torch_version=torch.__version__, triton_version=triton.__version__,
                variant="kda" if sc["kda"] else "gdn", H=sc["H"], HV=sc["HV"], K=sc["K"], V=sc["V"],
                num_slots=sc["NS"], cache_len=sc["L"], steps=sc["S"], scale=repr(sc["K"] ** -0.5),
                act_dtype=dtype, ring_dtype=dtype,
                use_qk_l2norm="true", bf16_rounding=BF16_ROUNDING, command=command)
    save(out_dir / (name + ".decode.safetensors"), {k: v.contiguous() for k, v in t.items()},
         {k: str(v) for k, v in meta.items()})
    print("  wrote %s.decode.safetensors" % name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--site", required=True, help="the site-packages holding the sglang wheel")
    ap.add_argument("--out", default=str(ROOT / "tests/cases/sglang"))
    ap.add_argument("--only", nargs="*", help="scenario names (default: all)")
    ap.add_argument("--command", default="scripts/sglang-peer")
    ap.add_argument("--truncating-bf16", action="store_true",
                    help="leave the interpreter's truncating f32 -> bf16 casts (to measure what they did)")
    args = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("run with TRITON_INTERPRET=1 (scripts/sglang-peer sets it)")
    global BF16_ROUNDING
    if args.truncating_bf16:
        BF16_ROUNDING = "truncated (the interpreter's own casts)"
    else:
        _interpreter_bf16_rounds_to_nearest_even()
    torch.use_deterministic_algorithms(True)
    _stub_gpu_probes()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print("sglang %s (%s), torch %s, triton %s, libreplayssm %s" % (
        SGLANG_VERSION, args.site, torch.__version__, triton.__version__, replayssm.version()))
    with tempfile.TemporaryDirectory() as tmp:
        mods = {}
        for f in ("fused_sigmoid_gating_recurrent.py", "gdn_replayssm_spec_fold.py", "kda_replayssm_spec_decode.py",
                  "fused_recurrent_linear_replayssm.py"):
            mods[f], n = _load_kernel(Path(args.site), f, tmp)
            print("  loaded %s (%d interpreter patch%s)" % (f, n, "" if n == 1 else "es"))
        for name, sc in SCENARIOS.items():
            if args.only and name not in args.only:
                continue
            t0 = time.time()
            x = make_inputs(sc)
            ring_sg = zero_ring(sc)
            o_sg = sglang_verify(mods, sc, x, ring_sg)
            st_sg = x["state_in"].clone()
            sglang_fold(mods, sc, x, ring_sg, st_sg)
            ring_ours = zero_ring(sc)
            o_ours = our_verify(sc, x, ring_ours)
            st_of_ours = x["state_in"].clone()
            sglang_fold(mods, sc, x, ring_ours, st_of_ours)
            print(summary(name, sc, x, o_sg, ring_sg, o_ours, ring_ours, st_sg, st_of_ours))
            write_golden(out / (name + ".golden.safetensors"), name, sc, x, o_sg, ring_sg, ring_ours, st_sg,
                         st_of_ours, args.command)
            write_fold_case(out / (name + ".fold.safetensors"), sc, x, o_sg, st_sg)
            print("  wrote %s.{golden,fold}.safetensors (%.1f s)" % (name, time.time() - t0))
        for name, sc in DECODE_SCENARIOS.items():
            if not args.only or name in args.only:
                decode_golden(mods, name, sc, out, args.command)


if __name__ == "__main__":
    main()
