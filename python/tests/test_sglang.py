"""replayssm.sglang: SGLang 0.5.23's calls on SGLang-shaped arguments (NumPy, emulated backend).

Two kinds of evidence:
  - the goldens in tests/cases/sglang (written by scripts/sglang-peer running SGLang's own Triton
    kernels): the adapter, called as SGLang's call sites call SGLang, gives SGLang's outputs, the
    ring SGLang's verify writes and the checkpoints SGLang's fold commits, every golden (bf16 ones
    as ml_dtypes' NumPy bfloat16, a pinned test dependency: no torch); tools/tests/
    sglang_conformance.rs checks every golden through the Rust API too.
  - synthetic inputs: the adapter agrees with the binding's own entries, and refuses every option
    it does not implement and every bad tensor with an error naming it, writing nothing.
"""
import json
import math
import pathlib
import struct

import ml_dtypes
import numpy as np
import pytest

import replayssm as rs
import replayssm.sglang as sg
from conftest import envelope

ROOT = pathlib.Path(__file__).resolve().parents[2]
GOLDENS = sorted((ROOT / "tests" / "cases" / "sglang").glob("*.golden.safetensors"))


# --- goldens ----------------------------------------------------------------------------------

def read_safetensors(path):
    """(tensors, metadata) of a safetensors file; BF16 as ml_dtypes' bfloat16."""
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = raw[8 + n:]
    kinds = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "BF16": ml_dtypes.bfloat16}
    out = {}
    for name, h in header.items():
        lo, hi = h["data_offsets"]
        out[name] = np.frombuffer(body[lo:hi], dtype=kinds[h["dtype"]]).reshape(h["shape"]).copy()
    return out, meta


def goldens():
    return [pytest.param(t, m, id=p.name.split(".")[0]) for p, t, m in ((p, *read_safetensors(p)) for p in GOLDENS)]


def test_the_goldens_are_there():
    # The golden tests below must not pass by having nothing to run.
    assert len(GOLDENS) >= 4, GOLDENS
    assert len(sorted((ROOT / "tests" / "cases" / "sglang").glob("*.decode.safetensors"))) >= 2
    acts = {p.values[1]["act_dtype"] for p in goldens()}
    assert {"f32", "bf16"} <= acts, "the adapter must run an f32 and a bf16 golden: %s" % acts
    # SGLang's unit tests are reported to pass int64 indices: one golden ran SGLang's kernels on them, and the
    # adapter gets them as int64 below.
    wide = [t for t, m in (read_safetensors(p) for p in GOLDENS) if m.get("index_dtype") == "int64"]
    assert wide and all(t[n].dtype == np.int64 for t in wide for n in ("cu_seqlens", "state_indices", "accept_lens",
                                                                       "track_slots", "track_steps"))
    assert all(m.get("bf16_rounding", "").startswith("nearest even") for _, m in map(read_safetensors, GOLDENS))
    # K = 96, the head size of SGLang's batched-fold and ring-fused tests: a verify/fold golden the
    # adapter runs (f32) and a buffered-decode one.
    k96 = [m for _, m in map(read_safetensors, GOLDENS) if m["K"] == "96"]
    assert any(m["act_dtype"] == "f32" for m in k96) and any(m["act_dtype"] == "bf16" for m in k96), k96
    assert any(read_safetensors(p)[1]["K"] == "96" for p in DECODES)


def ulps(a, b):
    ia = a.astype(np.float32).view(np.int32).astype(np.int64)
    ib = b.astype(np.float32).view(np.int32).astype(np.int64)
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return np.abs(ia - ib)


def close(got, want, atol, rtol):
    assert got.shape == want.shape
    assert not np.isnan(got).any() and not np.isnan(want).any()
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    bad = err > atol + rtol * np.abs(want.astype(np.float64))
    assert not bad.any(), "max error %g at %s" % (err.max(), np.argwhere(bad)[0])


def meta_ints(m, *keys):
    return [int(m[k]) for k in keys]


def run_verify(t, m, layer, ring):
    kda = m["variant"] == "kda"
    return sg.fused_sigmoid_gating_delta_rule_update(
        t["A_log"][layer], t["a"][layer], t["dt_bias"][layer], float(m["softplus_beta"]),
        float(m["softplus_threshold"]), t["q"][layer], t["k"][layer], t["v"][layer], t["b"][layer],
        t["state_in"][layer], t["state_indices"], scale=float(m["scale"]), use_qk_l2norm_in_kernel=True,
        cu_seqlens=t["cu_seqlens"], is_kda=kda, disable_state_update=True, cache_ring=True,
        replayssm_rawv=ring[0][layer], replayssm_rawk=ring[1][layer], replayssm_g=ring[2][layer],
        replayssm_beta=ring[3][layer], lower_bound=float(m["lower_bound"]) if "lower_bound" in m else None)


def empty_ring(t):
    return [np.zeros_like(t[n]) for n in ("ring_v_sglang", "ring_k_sglang", "ring_g_sglang", "ring_beta_sglang")]


@pytest.mark.parametrize("t,m", goldens())
def test_the_verify_writes_sglangs_ring_and_outputs(t, m):
    NL, = meta_ints(m, "num_layers")
    before = t["state_in"].copy()
    ring = empty_ring(t)
    # The verify has no null block: only negative slots are null rows there (the fold skips
    # slots <= null_block_id).
    live = t["state_indices"] >= 0
    cu = t["cu_seqlens"]
    rows = np.zeros(cu[-1], bool)
    for r in range(len(live)):
        rows[cu[r]:cu[r + 1]] = live[r]
    for layer in range(NL):
        o = run_verify(t, m, layer, ring)
        want = t["o_sglang"][layer]
        assert o.shape == want.shape
        close(o[0][rows], want[0][rows], 2e-5, 2e-4)
        # SGLang computes a null row's outputs from a zero state; replayssm writes zeros.
        assert (o[0][~rows] == 0).all()
    assert np.array_equal(t["state_in"], before), "the verify wrote the checkpoint"
    names = ("ring_v", "ring_k", "ring_g", "ring_beta")
    for n, ours in zip(names, ring):
        assert np.array_equal(ours, t[n + "_ours"]), "%s differs from the ring the golden recorded as ours" % n
    assert np.array_equal(ring[0], t["ring_v_sglang"]) and np.array_equal(ring[1], t["ring_k_sglang"])
    assert ring[0].any() and ring[1].any()
    # g: SGLang's softplus is log(1 + exp(x)) in f32, up to 15 ulp from its f64 value (ours,
    # log1pf, within 2: tools/tests/sglang_conformance.rs); the safe gate amplifies the rounding
    # of exp(A_log) * x by its size (measured 31 ulp apart, SAFE_MAX_G_ULP there); beta: a couple of ulp.
    assert ulps(ring[2], t["ring_g_sglang"]).max() <= (48 if "lower_bound" in m else 16)
    assert ulps(ring[3], t["ring_beta_sglang"]).max() <= 2


def fold_call(t, m, state, ring):
    kda = m["variant"] == "kda"
    W = ring[0].shape[-2]
    H = ring[1].shape[2]
    args = (state, *ring, t["state_indices"], t["accept_lens"], W, H, t["track_slots"], t["track_steps"])
    kw = dict(use_qk_l2norm_in_kernel=True, null_block_id=int(m["null_block_id"]))
    if not kda:
        sg.commit_gdn_replayssm_fold_all_layers(*args, **kw)
        return
    sg.commit_kda_replayssm_spec_all_layers(*args, **kw)


@pytest.mark.parametrize("t,m", goldens())
@pytest.mark.parametrize("whose", ["sglang", "ours"])
def test_the_fold_commits_what_sglangs_fold_commits(t, m, whose):
    ring = [t["%s_%s" % (n, whose)].copy() for n in ("ring_v", "ring_k", "ring_g", "ring_beta")]
    want = t["state_folded_sglang"] if whose == "sglang" else t["state_sglang_fold_of_ours"]
    state = t["state_in"].copy()
    fold_call(t, m, state, ring)
    changed = (state != t["state_in"]).any(axis=(2, 3, 4))
    assert changed.any(), "the fold wrote nothing"
    # Slots SGLang did not touch are bit-equal; the others within a few float32 roundings.
    untouched = (want == t["state_in"]).all(axis=(2, 3, 4))
    assert (state[untouched] == t["state_in"][untouched]).all()
    close(state, want, 1e-6, 1e-5)


@pytest.mark.parametrize("t,m", [p for p in goldens() if p.values[1]["variant"] == "kda"])
def test_the_per_layer_kda_fold_is_the_all_layer_fold(t, m):
    ring = [t[n + "_sglang"] for n in ("ring_v", "ring_k", "ring_g", "ring_beta")]
    all_layers = t["state_in"].copy()
    fold_call(t, m, all_layers, ring)
    per_layer = t["state_in"].copy()
    for layer in range(int(m["num_layers"])):
        sg.commit_kda_replayssm_spec(per_layer[layer], *(r[layer] for r in ring), t["state_indices"],
                                     t["accept_lens"], ring[0].shape[-2], ring[1].shape[2], t["track_slots"],
                                     t["track_steps"], null_block_id=int(m["null_block_id"]))
    assert np.array_equal(per_layer, all_layers)


DECODES = sorted((ROOT / "tests" / "cases" / "sglang").glob("*.decode.safetensors"))
# What the adapter's decode gives against SGLang's (tools/tests/sglang_conformance.rs's
# decode_tolerance, as docs/sglang.md reports the goldens): f32 rings and activations, or 16-bit
# rings and activations, where SGLang rebuilds the state with a 16-bit tensor-core dot and ours
# in f32 from the same rounded records.
DECODE_TOLERANCE = {"f32": dict(o=(1e-6, 1e-5), state=(2.5e-7, 1e-6)),
                    "f16": dict(o=(1.5e-4, 1e-3), state=(1e-3, 2e-3)),
                    "bf16": dict(o=(1e-3, 4e-3), state=(5e-3, 1e-2))}
RECORDS = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


def test_16_bit_decode_ring_goldens_run_here():
    rings = {read_safetensors(p)[1].get("ring_dtype", "f32") for p in DECODES}
    assert {"f32", "f16", "bf16"} <= rings, rings


@pytest.mark.parametrize("path", DECODES, ids=[p.name.split(".")[0] for p in DECODES])
def test_the_buffered_decode_gives_sglangs_outputs_and_checkpoints(path):
    """SGLang's buffered decode, step by step (cursors, flushes at L-1, a forced flush, a null
    row), against the adapter on the same f32 state and rings of the golden's record dtype."""
    t, m = read_safetensors(path)
    kda = m["variant"] == "kda"
    S, NS, L, H, HV, K, V = meta_ints(m, "steps", "num_slots", "cache_len", "H", "HV", "K", "V")
    act = m.get("act_dtype", "f32")
    rec = RECORDS[m.get("ring_dtype", "f32")]
    tol = DECODE_TOLERANCE[act]
    B = t["slots"].shape[1]
    state = t["state_in"].copy()
    d = np.zeros((NS, HV, L, V), rec)
    kc = np.zeros((NS, H, L, K), rec)
    gc = np.zeros((NS, HV, L, K) if kda else (NS, HV, L), np.float32)
    flushes = 0
    for step in range(S):
        out = np.full((B, 1, HV, V), np.nan, t["mixed_qkv"].dtype)
        sg.fused_recurrent_linear_replayssm_decode(
            t["mixed_qkv"][step], t["a"][step], t["b"][step], t["A_log"], t["dt_bias"], float(m["scale"]), state, d,
            kc, gc, out, t["slots"][step], t["write_pos"][step], force_flush=t["force_flush"][step],
            use_qk_l2norm_in_kernel=True, is_kda=kda)
        live = t["slots"][step] >= 0
        close(out[live].astype(np.float32), t["out_sglang"][step][live].astype(np.float32), *tol["o"])
        assert (out[~live] == 0).all()
        flushes += int(((t["write_pos"][step] == L - 1) | (t["force_flush"][step] != 0))[live].sum())
    assert flushes >= 3
    written = (t["state_sglang"] != t["state_in"]).any(axis=(1, 2, 3))
    assert written.any() and (state[~written] == t["state_in"][~written]).all()
    close(state, t["state_sglang"], *tol["state"])
    if "ring_k_sglang" in t and rec is not np.float32:
        # The pending keys are SGLang's bytes: k^ rounded to the ring's dtype from the same f32
        # value (a division by the norm in ours, a product with its reciprocal in SGLang's: the
        # two f32 values may differ by an ulp, which the rounding hides but for a rare tie).
        assert np.mean(kc == t["ring_k_sglang"]) > 0.99


# --- synthetic: the adapter is the binding --------------------------------------------------------

class Spec:
    """A small SGLang-shaped verify/fold problem: 3 requests (one null), GQA, 2 layers."""

    def __init__(self, rng, kda=False, dtype=np.float32, K=32, V=32, H=2, HV=4, W=8, seqlens=(3, 2, 4)):
        T = sum(seqlens)
        self.kda, self.H, self.HV, self.K, self.V, self.W = kda, H, HV, K, V, W
        self.NL, self.NS = 2, 5
        n = lambda *s: rng.standard_normal(s).astype(dtype)  # noqa: E731
        self.q, self.k, self.v = n(1, T, H, K), n(1, T, H, K), n(1, T, HV, V)
        self.a = n(T, HV * K) if kda else n(T, HV)
        self.b = n(T, HV)
        self.A_log = rng.uniform(0, 2.7, HV).astype(np.float32)
        self.dt_bias = (rng.standard_normal(HV * K if kda else HV) * 0.1).astype(np.float32)
        self.cu = np.concatenate([[0], np.cumsum(seqlens)]).astype(np.int32)
        self.slots = np.array([3, -1, 1], np.int32)[:len(seqlens)]
        self.state = (rng.standard_normal((self.NL, self.NS, HV, V, K)) * 0.1).astype(np.float32)
        ring_v = np.zeros((self.NL, self.NS, HV, W, V), dtype)
        ring_k = np.zeros((self.NL, self.NS, H, W, K), dtype)
        ring_g = np.zeros((self.NL, self.NS, HV, W, K) if kda else (self.NL, self.NS, HV, W), np.float32)
        ring_b = np.zeros((self.NL, self.NS, HV, W), np.float32)
        self.ring = [ring_v, ring_k, ring_g, ring_b]
        self.accept = np.array([2, 0, 4], np.int32)[:len(seqlens)]

    def verify_args(self, layer=0, **kw):
        args = dict(A_log=self.A_log, a=self.a, dt_bias=self.dt_bias, softplus_beta=1.0, softplus_threshold=20.0,
                    q=self.q, k=self.k, v=self.v, b=self.b, initial_state_source=self.state[layer],
                    initial_state_indices=self.slots, use_qk_l2norm_in_kernel=True, cu_seqlens=self.cu,
                    is_kda=self.kda, disable_state_update=True, cache_ring=True,
                    replayssm_rawv=self.ring[0][layer], replayssm_rawk=self.ring[1][layer],
                    replayssm_g=self.ring[2][layer], replayssm_beta=self.ring[3][layer])
        args.update(kw)
        return args

    def binding_gate(self):
        T = self.q.shape[1]
        a = self.a.reshape(T, self.HV, self.K) if self.kda else self.a
        dt = self.dt_bias.reshape(self.HV, self.K) if self.kda else self.dt_bias
        return dict(a=a, b=self.b, A_log=self.A_log, dt_bias=dt)

    def fold_args(self, **kw):
        fn = sg.commit_kda_replayssm_spec_all_layers if self.kda else sg.commit_gdn_replayssm_fold_all_layers
        args = dict(checkpoint_state=self.state, rawv_cache=self.ring[0], rawk_cache=self.ring[1],
                    beta_cache=self.ring[3], ssm_state_indices=self.slots, accept_lens=self.accept,
                    max_cache_len=self.W, num_k_heads=self.H, null_block_id=-1)
        args["gk_cache" if self.kda else "g_cache"] = self.ring[2]
        args.update(kw)
        return fn, args


@pytest.mark.parametrize("kda", [False, True])
def test_verify_and_fold_are_the_bindings_verify_and_fold(rng, kda):
    s = Spec(rng, kda=kda)
    for layer in range(s.NL):
        o = sg.fused_sigmoid_gating_delta_rule_update(**s.verify_args(layer))
        ring = [np.zeros_like(r) for r in s.ring]
        want = rs.verify(s.q[0], s.k[0], s.v[0], state=s.state, slots=s.slots, cu_seqlens=s.cu, layer=layer,
                         ring=ring, scale=s.K ** -0.5, **s.binding_gate())
        assert np.array_equal(o[0], want)
        for r, w in zip(s.ring, ring):
            assert np.array_equal(r[layer], w[layer])
    before = s.state.copy()
    state = s.state.copy()
    rs.fold(state=state, ring=s.ring, slots=s.slots, accept_lens=s.accept)
    fn, args = s.fold_args()
    fn(**args)
    assert np.array_equal(s.state, state) and (state != before).any()


def test_a_non_varlen_batch_is_the_varlen_call(rng):
    s = Spec(rng, seqlens=(3, 3, 3))
    varlen = sg.fused_sigmoid_gating_delta_rule_update(**s.verify_args(cache_ring=False))
    B, T = 3, 3
    batched = sg.fused_sigmoid_gating_delta_rule_update(**s.verify_args(
        cache_ring=False, cu_seqlens=None, q=s.q.reshape(B, T, s.H, s.K), k=s.k.reshape(B, T, s.H, s.K),
        v=s.v.reshape(B, T, s.HV, s.V), a=s.a.reshape(B, T, s.HV), b=s.b.reshape(B, T, s.HV)))
    assert batched.shape == (B, T, s.HV, s.V)
    assert np.array_equal(batched.reshape(varlen.shape), varlen)


def test_the_plain_update_is_kernel_r(rng):
    s = Spec(rng)
    st = s.state[0].copy()
    o = sg.fused_sigmoid_gating_delta_rule_update(**s.verify_args(disable_state_update=False, cache_ring=False,
                                                                  initial_state_source=st))
    want_state = s.state[0].copy()
    want = rs.recurrent(s.q[0], s.k[0], s.v[0], state=want_state, slots=s.slots, cu_seqlens=s.cu,
                        scale=s.K ** -0.5, **s.binding_gate())
    assert np.array_equal(o[0], want) and np.array_equal(st, want_state) and (st != s.state[0]).any()


def test_track_steps_of_minus_one_and_the_null_block_are_no_snapshot(rng):
    s = Spec(rng)
    for layer in range(s.NL):
        sg.fused_sigmoid_gating_delta_rule_update(**s.verify_args(layer))
    # Row 0 tracks its step 1 into slot 4; row 2 has a track slot but step -1 (SGLang: none).
    tracks = np.array([4, -1, 2], np.int32)
    steps = np.array([1, -1, -1], np.int32)
    state = s.state.copy()
    fn, args = s.fold_args(checkpoint_state=state, mamba_track_indices=tracks, mamba_steps_to_track=steps)
    fn(**args)
    want = s.state.copy()
    rs.fold(state=want, ring=s.ring, slots=s.slots, accept_lens=s.accept,
            track_slots=np.array([4, -1, -1], np.int32), track_steps=np.array([1, -1, -1], np.int32))
    assert np.array_equal(state, want) and (state[:, 4] != s.state[:, 4]).any()
    assert (state[:, 2] == s.state[:, 2]).all()
    # null_block_id = 0: slot 0 is SGLang's null block (a row on it commits nothing).
    state = s.state.copy()
    fn, args = s.fold_args(checkpoint_state=state, ssm_state_indices=np.array([3, 0, 1], np.int32), null_block_id=0)
    fn(**args)
    want = s.state.copy()
    rs.fold(state=want, ring=s.ring, slots=s.slots, accept_lens=s.accept)
    assert np.array_equal(state, want)


@pytest.mark.parametrize("act", [np.float32, np.float16, ml_dtypes.bfloat16], ids=["f32", "f16", "bf16"])
def test_the_buffered_decode_is_kernel_d_and_flushes_to_kernel_r(rng, act):
    """f32 rings flush to kernel R's state; f16/bf16 rings (records rounded as SGLang's 16-bit
    rings round them) to the state of R with that record_dtype, bit for bit, and not to the f32 R's."""
    H, HV, K, V, L, NS, B = 2, 4, 32, 32, 4, 3, 2
    records = {np.float16: rs.DType.F16, ml_dtypes.bfloat16: rs.DType.BF16}.get(act, rs.DType.F32)
    state = (rng.standard_normal((NS, HV, V, K)) * 0.1).astype(np.float32)
    ref = state.copy()
    unrounded = state.copy()
    d = np.zeros((NS, HV, L, V), act)
    kc = np.zeros((NS, H, L, K), act)
    g = np.zeros((NS, HV, L), np.float32)
    slots = np.array([2, 0], np.int32)
    A_log = rng.uniform(0, 2, HV).astype(np.float32)
    dt_bias = (rng.standard_normal(HV) * 0.1).astype(np.float32)
    pos = np.zeros(B, np.int32)
    for step in range(2 * L):
        mixed = rng.standard_normal((B, 2 * H * K + HV * V)).astype(act)
        a = rng.standard_normal((B, HV)).astype(act)
        b = rng.standard_normal((B, HV)).astype(act)
        out = np.full((B, 1, HV, V), np.nan, act)
        o, st = sg.fused_recurrent_linear_replayssm_decode(mixed, a, b, A_log, dt_bias, K ** -0.5, state, d, kc, g,
                                                           out, slots, pos, use_qk_l2norm_in_kernel=True)
        assert o is out and st is state
        q = mixed[:, :H * K].reshape(B, H, K)
        k = mixed[:, H * K:2 * H * K].reshape(B, H, K)
        v = mixed[:, 2 * H * K:].reshape(B, HV, V)
        args = dict(slots=slots, cu_seqlens=np.arange(B + 1, dtype=np.int32), scale=K ** -0.5, a=a, b=b, A_log=A_log,
                    dt_bias=dt_bias)
        want = rs.recurrent(q, k, v, state=ref, record_dtype=records, **args)
        rs.recurrent(q, k, v, state=unrounded, **args)
        assert np.array_equal(out[:, 0], want)  # D's outputs are R's (design §6)
        pos = (pos + 1) % L
        if step % L == L - 1:
            # A flush step wrote the checkpoint: bit-identical to R (R = D, design §6).
            assert np.array_equal(state[slots], ref[slots])
            # An f16 ring's R is not the f32 R: the rounding happened.
            assert np.array_equal(state[slots], unrounded[slots]) == (act == np.float32)


def test_an_envelope_pool_gives_the_packed_pools_bits(rng):
    """SGLang's unified (page-major) pools: the verify reads and the fold writes the checkpoints
    through strided views, with the packed pool's bits and nothing else of the entry touched."""
    s = Spec(rng)
    orig = s.state.copy()
    env, raw = envelope(orig)
    nan_before = np.isnan(raw).sum()
    outs = []
    for state in (s.state, env):
        ring = [np.zeros_like(r) for r in s.ring]
        os_ = [sg.fused_sigmoid_gating_delta_rule_update(**s.verify_args(layer, initial_state_source=state[layer],
                                                                        replayssm_rawv=ring[0][layer],
                                                                        replayssm_rawk=ring[1][layer],
                                                                        replayssm_g=ring[2][layer],
                                                                        replayssm_beta=ring[3][layer]))
               for layer in range(s.NL)]
        fn, args = s.fold_args(checkpoint_state=state, rawv_cache=ring[0], rawk_cache=ring[1], beta_cache=ring[3],
                               g_cache=ring[2], mamba_track_indices=np.array([4, -1, -1], np.int32),
                               mamba_steps_to_track=np.array([1, -1, -1], np.int32))
        fn(**args)
        outs.append((os_, ring, np.array(state)))
    (o_p, r_p, st_p), (o_e, r_e, st_e) = outs
    assert all(np.array_equal(a, b) for a, b in zip(o_p, o_e))
    assert all(np.array_equal(a, b) for a, b in zip(r_p, r_e))
    assert np.array_equal(st_p, st_e) and (st_p != orig).any()
    assert np.isnan(raw).sum() == nan_before, "the fold wrote outside the checkpoints of the entry"


def test_the_buffered_decode_on_an_envelope_pool(rng):
    H, HV, K, V, L, NS, B = 2, 4, 32, 32, 2, 3, 2
    packed = (rng.standard_normal((1, NS, HV, V, K)) * 0.1).astype(np.float32)
    env, raw = envelope(packed)
    results = []
    for state in (packed[0].copy(), env[0]):
        d, kc, g = (np.zeros((NS, HV, L, V), np.float32), np.zeros((NS, H, L, K), np.float32),
                    np.zeros((NS, HV, L), np.float32))
        step_rng = np.random.default_rng(7)
        pos = np.zeros(B, np.int32)
        outs = []
        for step in range(2 * L):
            mixed = step_rng.standard_normal((B, 2 * H * K + HV * V)).astype(np.float32)
            a, b = (step_rng.standard_normal((B, HV)).astype(np.float32) for _ in range(2))
            out = np.zeros((B, 1, HV, V), np.float32)
            sg.fused_recurrent_linear_replayssm_decode(mixed, a, b, np.ones(HV, np.float32), np.zeros(HV, np.float32),
                                                       K ** -0.5, state, d, kc, g, out, np.array([2, 0], np.int32),
                                                       pos, use_qk_l2norm_in_kernel=True)
            outs.append(out)
            pos = (pos + 1) % L
        results.append((np.stack(outs), np.array(state)))
    assert np.array_equal(results[0][0], results[1][0]) and np.array_equal(results[0][1], results[1][1])
    assert (results[0][1] != packed[0]).any()


# --- refusals ---------------------------------------------------------------------------------

def snapshot(s):
    return [x.copy() for x in [s.state, s.q, s.k, s.v, s.a, s.b, *s.ring]]


def untouched(s, before):
    return all(np.array_equal(x, y, equal_nan=True) for x, y in zip([s.state, s.q, s.k, s.v, s.a, s.b, *s.ring],
                                                                     before))


UNSUPPORTED = [
    ("match_cutedsl_decode", dict(match_cutedsl_decode=True)),
    # SGLang's gate would be 0 (no decay); the C ABI reads 0 as the softplus gate.
    ("lower_bound", dict(lower_bound=0.0)),
    ("intermediate_states_buffer", dict(intermediate_states_buffer=np.zeros(4, np.float32))),
    ("intermediate_state_indices", dict(intermediate_state_indices=np.zeros(3, np.int32))),
    ("cache_steps", dict(cache_steps=4)),
    ("retrieve_parent_token", dict(retrieve_parent_token=np.zeros((3, 4), np.int32))),
    ("softplus_beta", dict(softplus_beta=2.0)),
    ("softplus_threshold", dict(softplus_threshold=10.0)),
    ("initial_state_source", dict(initial_state_source=None)),
    ("cache_ring, disable_state_update", dict(disable_state_update=False)),
    ("initial_state_source.dtype", "f16_state"),
    ("replayssm_rawv.stride", "strided_ring"),
]


@pytest.mark.parametrize("name,kw", UNSUPPORTED, ids=[u[0] for u in UNSUPPORTED])
def test_every_unsupported_verify_option_is_refused_by_name(rng, name, kw):
    s = Spec(rng)
    if kw == "f16_state":
        kw = dict(initial_state_source=s.state[0].astype(np.float16))
    elif kw == "strided_ring":
        # A ring whose slots are not packed (SGLang allocates its rings packed; the ABI needs that).
        wide = np.zeros((s.NS, 2, s.HV, s.W, s.V), np.float32)
        kw = dict(replayssm_rawv=wide[:, 0])
    before = snapshot(s)
    with pytest.raises(NotImplementedError, match=name.split(".")[0].replace("(", r"\(")):
        sg.fused_sigmoid_gating_delta_rule_update(**s.verify_args(**kw))
    assert untouched(s, before)


BAD_VERIFY = [
    ("q", lambda s: dict(q=s.q[0])),
    ("k", lambda s: dict(k=s.k[:, :, :1])),
    ("v", lambda s: dict(v=s.v.astype(np.float16))),
    ("a", lambda s: dict(a=s.a[:-1])),
    ("a", lambda s: dict(a=np.ascontiguousarray(s.a.T))),  # [HV, T]: the same size, not a layout
    ("b", lambda s: dict(b=s.b[:, :-1])),
    ("softplus_beta", lambda s: dict(softplus_beta=True)),
    ("A_log", lambda s: dict(A_log=s.A_log.astype(np.float64))),
    ("dt_bias", lambda s: dict(dt_bias=s.dt_bias[:-1])),
    ("cu_seqlens", lambda s: dict(cu_seqlens=s.cu.astype(np.int16))),
    ("initial_state_indices", lambda s: dict(initial_state_indices=s.slots[:2])),
    ("initial_state_source", lambda s: dict(initial_state_source=s.state[0][:, :, :, :16])),
    # A broadcast (expanded) pool: its stride 0 would reach the library as "packed".
    ("initial_state_source", lambda s: dict(initial_state_source=np.lib.stride_tricks.as_strided(
        s.state[0], strides=(0,) + s.state[0].strides[1:]))),
    ("replayssm_rawv", lambda s: dict(replayssm_rawv=s.ring[0][0].astype(np.float16))),
    ("replayssm_rawk", lambda s: dict(replayssm_rawk=s.ring[1][0][:, :1])),
    ("replayssm_g", lambda s: dict(replayssm_g=np.zeros((s.NS, s.HV, s.W, s.K), np.float32))),
    ("replayssm_beta", lambda s: dict(replayssm_beta=s.ring[3][0][:, :, :4])),
    ("scale", lambda s: dict(scale=-1.0)),
    ("is_kda", lambda s: dict(is_kda="no")),
]


@pytest.mark.parametrize("name,make", BAD_VERIFY, ids=[b[0] for b in BAD_VERIFY])
def test_every_bad_verify_tensor_is_refused_by_name(rng, name, make):
    s = Spec(rng)
    kw = make(s)
    before = snapshot(s)
    with pytest.raises(rs.InvalidArgument, match=name):
        sg.fused_sigmoid_gating_delta_rule_update(**s.verify_args(**kw))
    assert untouched(s, before)


BAD_LOWER_BOUND = [
    # The library's rule (finite, negative), and the binding's (a real number float32 holds).
    ("lower_bound = 2, must be 0", 2.0),
    ("lower_bound = NaN, must be 0", float("nan")),
    ("lower_bound = -1e\\+39", -1e39),
    ("lower_bound = 'x'", "x"),
]


@pytest.mark.parametrize("name,value", BAD_LOWER_BOUND, ids=[str(b[1]) for b in BAD_LOWER_BOUND])
def test_a_bad_safe_gate_bound_is_refused_by_name(rng, name, value):
    s = Spec(rng, kda=True)
    before = snapshot(s)
    with pytest.raises(rs.InvalidArgument, match=name):
        sg.fused_sigmoid_gating_delta_rule_update(**s.verify_args(lower_bound=value))
    assert untouched(s, before)


def test_the_safe_gate_is_kdas_and_reaches_the_kernel(rng):
    # GDN's kernels compile the softplus gate alone: SGLang's GDN + lower_bound is refused by name.
    s = Spec(rng)
    before = snapshot(s)
    with pytest.raises(NotImplementedError, match="lower_bound"):
        sg.fused_sigmoid_gating_delta_rule_update(**s.verify_args(lower_bound=-5.0))
    assert untouched(s, before)
    # KDA: the bound reaches the kernel (other outputs than the softplus gate's on the same
    # inputs) and the ring's g records lie in [lower_bound, 0]. (Against SGLang's own kernels:
    # the kda_*_safe goldens, test_the_verify_writes_sglangs_ring_and_outputs.)
    s = Spec(rng, kda=True)
    o = sg.fused_sigmoid_gating_delta_rule_update(**s.verify_args(lower_bound=-5.0))
    g = s.ring[2][0][s.slots[0], :, :3]  # request 0's 3 records, layer 0
    soft = Spec(rng, kda=True)
    for n in ("q", "k", "v", "a", "b", "A_log", "dt_bias", "state"):
        setattr(soft, n, getattr(s, n).copy())
    o_soft = sg.fused_sigmoid_gating_delta_rule_update(**soft.verify_args())
    live = np.repeat(s.slots >= 0, np.diff(s.cu))
    assert np.isfinite(o[0][live]).all() and not np.array_equal(o[0][live], o_soft[0][live])
    assert ((g >= -5.0) & (g <= 0)).all() and (g < 0).any()


BAD_FOLD = [
    ("max_cache_len", lambda s: dict(max_cache_len=s.W + 1), rs.InvalidArgument),
    ("num_k_heads", lambda s: dict(num_k_heads=s.H + 1), rs.InvalidArgument),
    ("g_cache", lambda s: dict(g_cache=np.zeros((s.NL, s.NS, s.HV, s.W, s.K), np.float32)), rs.InvalidArgument),
    ("beta_cache", lambda s: dict(beta_cache=s.ring[3].astype(np.float16)), rs.InvalidArgument),
    ("accept_lens", lambda s: dict(accept_lens=s.accept[:2]), rs.InvalidArgument),
    ("ssm_state_indices", lambda s: dict(ssm_state_indices=s.slots.astype(np.float32)), rs.InvalidArgument),
    ("mamba_track_indices", lambda s: dict(mamba_track_indices=np.full(3, -1, np.int32)), rs.InvalidArgument),
    ("null_block_id", lambda s: dict(null_block_id=-2), rs.InvalidArgument),
    ("checkpoint_state", lambda s: dict(checkpoint_state=s.state.astype(np.float16)), NotImplementedError),
    ("checkpoint_state", lambda s: dict(checkpoint_state=np.zeros((s.NL, s.NS, s.HV, s.V, 2 * s.K),
                                                                  np.float32)[..., ::2]), rs.InvalidArgument),
    # Overlapping pitches: the library names them (two layers 1 slot apart in a 5-slot pool).
    ("state_layer_stride", lambda s: dict(checkpoint_state=np.lib.stride_tricks.as_strided(
        s.state, strides=(s.state.strides[1],) + s.state.strides[1:])), rs.InvalidArgument),
    ("rawv_cache", lambda s: dict(rawv_cache=s.ring[0][:, :, :, :, :16]), rs.InvalidArgument),
    ("checkpoint_state", lambda s: dict(checkpoint_state=np.lib.stride_tricks.as_strided(
        s.state, strides=(s.state.strides[0], 0) + s.state.strides[2:])), rs.InvalidArgument),
]


def test_an_adapter_argument_sharing_memory_with_a_written_one_is_refused(rng):
    # The ring passed inside the pool the fold writes: the kernels would read what they write.
    s = Spec(rng)
    for layer in range(s.NL):
        sg.fused_sigmoid_gating_delta_rule_update(**s.verify_args(layer))
    inside = s.state.reshape(-1)[:s.ring[0].size].reshape(s.ring[0].shape)
    fn, args = s.fold_args(rawv_cache=inside)
    before = snapshot(s)
    with pytest.raises(rs.InvalidArgument, match=r"shares memory with .*must not overlap any other argument"):
        fn(**args)
    assert untouched(s, before)


@pytest.mark.parametrize("name,make,err", BAD_FOLD, ids=["%s-%d" % (b[0], i) for i, b in enumerate(BAD_FOLD)])
def test_every_bad_fold_argument_is_refused_by_name(rng, name, make, err):
    s = Spec(rng)
    for layer in range(s.NL):
        sg.fused_sigmoid_gating_delta_rule_update(**s.verify_args(layer))
    fn, args = s.fold_args(**make(s))
    before = snapshot(s)
    with pytest.raises(err, match=name):
        fn(**args)
    assert untouched(s, before)


def test_a_garbage_slot_is_refused_not_skipped(rng):
    # SGLang would skip slot -7 silently.
    s = Spec(rng)
    for layer in range(s.NL):
        sg.fused_sigmoid_gating_delta_rule_update(**s.verify_args(layer))
    fn, args = s.fold_args(ssm_state_indices=np.array([3, -7, 1], np.int32))
    before = snapshot(s)
    # On host memory the library reads the indices before launching: refused by name, nothing
    # written (on CUDA the kernel skips the row and sets the error word's bit).
    with pytest.raises(rs.InvalidArgument, match=r"slots\[1\] = -7"):
        fn(**args)
    assert untouched(s, before)


def test_int64_indices_as_sglang_passes_them_give_the_int32_bits(rng):
    """SGLang's unit tests are reported to pass slots, track indices and steps as int64: the adapter narrows them
    (the caller's arrays untouched) and commits the same bits as with int32."""
    i64 = lambda x: np.asarray(x, np.int64)  # noqa: E731
    results = []
    for wide in (False, True):
        s = Spec(np.random.default_rng(7))
        cast = i64 if wide else (lambda x: np.asarray(x, np.int32))  # noqa: E731
        outs = [sg.fused_sigmoid_gating_delta_rule_update(**s.verify_args(
            layer, initial_state_indices=cast(s.slots), cu_seqlens=cast(s.cu))) for layer in range(s.NL)]
        idx = dict(ssm_state_indices=cast(s.slots), accept_lens=cast(s.accept), mamba_track_indices=cast([4, -1, 2]),
                   mamba_steps_to_track=cast([1, -1, -1]))
        kept = {k: v.copy() for k, v in idx.items()}
        fn, args = s.fold_args(**idx)
        fn(**args)
        assert all(np.array_equal(idx[k], kept[k]) and idx[k].dtype == kept[k].dtype for k in idx), "an input moved"
        results.append((outs, s.state.copy()))
    (o32, st32), (o64, st64) = results
    assert all(np.array_equal(a, b) for a, b in zip(o32, o64))
    assert np.array_equal(st32, st64)
    # The buffered decode's slots, positions and flush flags.
    H, HV, K, V, L, NS, B = 2, 4, 32, 32, 4, 3, 2
    mixed = rng.standard_normal((B, 2 * H * K + HV * V)).astype(np.float32)
    ab = [rng.standard_normal((B, HV)).astype(np.float32) for _ in range(2)]
    A_log, dt_bias = rng.uniform(0, 2, HV).astype(np.float32), (rng.standard_normal(HV) * 0.1).astype(np.float32)
    state0 = (rng.standard_normal((NS, HV, V, K)) * 0.1).astype(np.float32)
    got = []
    # Slots [2, 1]: int64 bytes misread as int32 would give [2, 0]. A flag of 2**40 is nonzero
    # (it would wrap to 0 as int32).
    for dt, flags in ((np.int32, [1, 0]), (np.int64, [2 ** 40, 0])):
        state, out = state0.copy(), np.full((B, 1, HV, V), np.nan, np.float32)
        rings = (np.zeros((NS, HV, L, V), np.float32), np.zeros((NS, H, L, K), np.float32),
                 np.zeros((NS, HV, L), np.float32))
        sg.fused_recurrent_linear_replayssm_decode(mixed, *ab, A_log, dt_bias, K ** -0.5, state, *rings, out,
                                                   np.array([2, 1], dt), np.array([0, 0], dt),
                                                   force_flush=np.array(flags, dt))
        got.append((out, state))
    assert np.array_equal(got[0][0], got[1][0]) and np.array_equal(got[0][1], got[1][1])
    assert (got[1][1][2] != state0[2]).any(), "the forced flush did not write slot 2"
    assert (got[1][1][1] == state0[1]).all(), "slot 1 was not due a flush"


@pytest.mark.parametrize("value", [2 ** 31, -(2 ** 31) - 1, 2 ** 32 + 3])
def test_an_int64_index_outside_int32_is_refused_by_name_not_wrapped(rng, value):
    # 2**32 + 3 would wrap to slot 3, a live request's.
    s = Spec(rng)
    for layer in range(s.NL):
        sg.fused_sigmoid_gating_delta_rule_update(**s.verify_args(layer))
    fn, args = s.fold_args(ssm_state_indices=np.array([3, value, 1], np.int64))
    before = snapshot(s)
    with pytest.raises(rs.InvalidArgument, match=r"ssm_state_indices\[1\] = %d does not fit the library's int32"
                       % value):
        fn(**args)
    assert untouched(s, before)
    with pytest.raises(rs.InvalidArgument, match=r"ssm_state_indices has dtype"):
        fn(**s.fold_args(ssm_state_indices=np.array([3, 0, 1], np.int16))[1])


def test_the_adapter_imports_without_torch_and_names_sglangs_version():
    assert sg.SGLANG_VERSION == "0.5.23"
    for name in sg.__all__:
        assert hasattr(sg, name)


def test_patch_sglang_rebinds_the_names_sglangs_call_sites_use(monkeypatch):
    import sys
    import types
    fakes = {}
    for module, name in sg._SGLANG_SITES:
        mod = fakes.setdefault(module, types.ModuleType(module))
        setattr(mod, name, "sglang's")
    for module, mod in fakes.items():
        monkeypatch.setitem(sys.modules, module, mod)
    done = sg.patch_sglang()
    assert len(done) == 5
    for module, name in sg._SGLANG_SITES:
        assert getattr(fakes[module], name) is getattr(sg, name)
    # A module without the name (another SGLang version) is refused by name.
    delattr(fakes[sg._SGLANG_SITES[0][0]], sg._SGLANG_SITES[0][1])
    with pytest.raises(ImportError, match="gdn_triton has no fused_sigmoid_gating_delta_rule_update"):
        sg.patch_sglang()


# --- a campaign of bad arguments ----------------------------------------------------------------

def _mutants(x, rng):
    """Bad stand-ins for one argument: other dtypes, ranks, sizes and layouts, non-tensors."""
    if isinstance(x, np.ndarray):
        out = [x.astype(np.float64), x.astype(np.int64), x[..., :1], x[None], x.ravel()[:1], x.tolist(), None, 3]
        if x.ndim >= 2:
            out += [np.swapaxes(x, 0, 1), x[:, ::2] if x.shape[1] > 1 else x[:, :0]]
        if x.dtype == np.float32:
            out.append(x.astype(np.float16))
        if x.dtype == np.int32:
            out += [np.full_like(x, 1 << 20), np.full_like(x, -5)]
        return out
    if isinstance(x, bool):
        return ["yes", 2, None]
    if isinstance(x, (int, float)):
        return [True, "8", float("nan"), -(1 << 40), 1e30, None]
    return [object()]


def test_a_campaign_of_bad_arguments_is_refused_by_name_and_writes_nothing(rng):
    """Every argument of every entry, replaced by each of its mutants: the call either runs (a
    mutant that is still valid) or raises ReplaySSMError / NotImplementedError, and a refused call
    leaves every array as it was."""
    s = Spec(rng, kda=True)
    fn_fold, fold_args = s.fold_args(mamba_track_indices=np.array([4, -1, -1], np.int32),
                                     mamba_steps_to_track=np.array([1, -1, -1], np.int32))
    entries = [(sg.fused_sigmoid_gating_delta_rule_update, s.verify_args()), (fn_fold, fold_args)]
    calls = refused = 0
    for fn, args in entries:
        for name in sorted(args):
            for bad in _mutants(args[name], rng):
                before = snapshot(s)
                try:
                    fn(**dict(args, **{name: bad}))
                    print("accepted: %s %s = %r" % (fn.__name__, name, getattr(bad, "shape", bad)))
                except (rs.ReplaySSMError, NotImplementedError):
                    refused += 1
                    assert untouched(s, before), "%s: %s = %r was refused after writing" % (fn.__name__, name,
                                                                                           type(bad))
                calls += 1
                s.state[...] = before[0]
                for r, b in zip(s.ring, before[6:]):
                    r[...] = b
    print("sglang adapter campaign: %d calls, %d refused" % (calls, refused))
    assert calls > 150 and refused > 0.8 * calls, (calls, refused)
