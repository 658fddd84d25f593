"""The Python binding on the emulated backend (NumPy host arrays): kernel results against an
independent float64 reference, the ReplaySSM identities (verify + fold == recurrent, buffered
decode == recurrent, bit for bit), and refusals raised as exceptions with the library's message."""

import ctypes

import ml_dtypes
import numpy as np
import pytest

import replayssm as rs
from replayssm import _abi
from conftest import Problem, delta_rule_reference, envelope


def bits(x):
    return np.ascontiguousarray(x).view(np.uint32 if x.dtype == np.float32 else np.uint16)


def test_library_loads_and_struct_layouts_match():
    lib, path = _abi.load()
    for name, struct in _abi.STRUCTS.items():
        assert ctypes.sizeof(struct) == lib.replayssm_struct_size(name.encode()), name
    version, abi = rs.version()
    assert abi == rs.ABI_VERSION and version > 0


def test_validate_config_refuses_a_ring_on_a_pd_decode_pool():
    with pytest.raises(rs.ConfigRefused) as e:
        rs.validate_config(["--enable-linear-replayssm", "--disaggregation-mode", "decode"])
    assert e.value.status == rs.Status.CONFIG_REFUSED
    assert "A3:" in e.value.message and "--disaggregation-mode='decode'" in e.value.message
    text = rs.validate_config(["--enable-linear-replayssm-spec", "--speculative-algorithm", "EAGLE",
                               "--speculative-eagle-topk", "4"])
    assert "kernels: VT tree verify" in text
    with pytest.raises(rs.InvalidArgument, match="--bogus"):
        rs.validate_config(["--bogus"])


@pytest.mark.parametrize("kda", [False, True])
@pytest.mark.parametrize("dtype,tol", [(np.float32, (1e-5, 1e-4)), (np.float16, (2e-3, 2e-2)),
                                       (ml_dtypes.bfloat16, (1e-2, 8e-2))], ids=["f32", "f16", "bf16"])
def test_recurrent_matches_the_float64_reference(rng, kda, dtype, tol):
    """(bf16: ml_dtypes' NumPy bfloat16, read by the binding as bf16 without torch.)"""
    p = Problem(rng, [3, 5, 2], kda=kda, dtype=dtype, null=(1,))
    state = p.state.copy()
    o = rs.recurrent(p.q, p.k, p.v, g=p.g, beta=p.beta, state=state, slots=p.slots, cu_seqlens=p.cu_seqlens)
    o_ref, state_ref = delta_rule_reference(p.q, p.k, p.v, p.g, p.beta, p.state, p.slots, p.cu_seqlens, p.scale)
    atol, rtol = tol
    assert not np.isnan(o).any(), "unwritten outputs (the output was NaN-poisoned)"
    assert np.all(np.abs(o.astype(np.float64) - o_ref) <= atol + rtol * np.abs(o_ref))
    assert np.all(np.abs(state - state_ref) <= 1e-5 + 1e-4 * np.abs(state_ref))
    # The null request's tokens are zero and the untouched slots keep their bits.
    assert (o[3:8] == 0).all()
    live = set(p.slots[p.slots >= 0].tolist())
    for s in range(len(state)):
        if s not in live:
            assert (bits(state[s]) == bits(p.state[s])).all()


@pytest.mark.parametrize("kda", [False, True])
def test_verify_then_fold_gives_the_recurrent_state_bit_for_bit(rng, kda):
    p = Problem(rng, [4, 2, 3], kda=kda)
    NL, W = 2, 4
    NS = len(p.state)
    pool = np.stack([p.state, p.state])  # [NL, NS, HV, V, K]
    ring = (np.full((NL, NS, p.HV, W, p.V), np.nan, np.float32),
            np.full((NL, NS, p.H, W, p.K), np.nan, np.float32),
            np.full((NL, NS, p.HV, W, p.K) if kda else (NL, NS, p.HV, W), np.nan, np.float32),
            np.full((NL, NS, p.HV, W), np.nan, np.float32))
    for layer in range(NL):
        o = rs.verify(p.q, p.k, p.v, g=p.g, beta=p.beta, state=pool, slots=p.slots, cu_seqlens=p.cu_seqlens,
                      layer=layer, ring=ring)
        o_ref, _ = delta_rule_reference(p.q, p.k, p.v, p.g, p.beta, p.state, p.slots, p.cu_seqlens, p.scale)
        assert np.all(np.abs(o - o_ref) <= 1e-5 + 1e-4 * np.abs(o_ref)), "verify outputs vs float64"
    accept = np.array([4, 2, 3], np.int32)  # everything accepted: the fold must land on R's state
    err = np.zeros(1, np.uint32)
    rs.fold(state=pool, ring=ring, slots=p.slots, accept_lens=accept, error_word=err)
    assert err[0] == 0
    state_r = p.state.copy()
    rs.recurrent(p.q, p.k, p.v, g=p.g, beta=p.beta, state=state_r, slots=p.slots, cu_seqlens=p.cu_seqlens)
    for layer in range(NL):
        assert (bits(pool[layer]) == bits(state_r)).all(), "fold is not bit-identical to kernel R"


@pytest.mark.parametrize("kda,strided", [(False, False), (True, False), (True, True)])
def test_deferred_fold_matches_verify_then_fold_bit_for_bit(rng, kda, strided):
    """Three steps of VF + COMMIT, then a flush (GATHER, fold's path mode, RESET), against V + F on
    the same windows: the same outputs and the same checkpoints, bit for bit. `strided`: VF's pool
    is a page-major view (state_slot_stride / state_layer_stride), V + F's packed."""
    W, NL = 4, 2
    steps = [Problem(rng, [4, 2, 3], kda=kda) for _ in range(3)]
    slots, NS = steps[0].slots, len(steps[0].state)
    pool_f = np.stack([steps[0].state] * NL)
    pool_vf, raw = envelope(pool_f) if strided else (pool_f.copy(), None)

    def ring_of(w):
        return (np.full((NL, NS, steps[0].HV, w, steps[0].V), np.nan, np.float32),
                np.full((NL, NS, steps[0].H, w, steps[0].K), np.nan, np.float32),
                np.full((NL, NS, steps[0].HV, w, steps[0].K) if kda else (NL, NS, steps[0].HV, w), np.nan,
                        np.float32),
                np.full((NL, NS, steps[0].HV, w), np.nan, np.float32))
    ring, ring2 = ring_of(W), ring_of(2 * W)
    pending = np.zeros((NS, 2 + W), np.int32)
    err = np.zeros(1, np.uint32)
    for t, p in enumerate(steps):
        for layer in range(NL):
            kw = dict(g=p.g, beta=p.beta, slots=slots, cu_seqlens=p.cu_seqlens, layer=layer)
            o_v = rs.verify(p.q, p.k, p.v, state=pool_f, ring=ring, **kw)
            o_vf = rs.verify_fold(p.q, p.k, p.v, state=pool_vf, ring=ring2, pending=pending, error_word=err, **kw)
            assert (bits(o_vf) == bits(o_v)).all(), "step %d layer %d: VF outputs != V's" % (t, layer)
        # Before F: VF has folded the previous step.
        assert (bits(pool_vf) == bits(pool_f)).all(), "step %d: VF checkpoints != V + F's" % t
        accept = np.array([[4, 1, 3], [0, 2, 2], [3, 2, 1]][t], np.int32)
        rs.fold(state=pool_f, ring=ring, slots=slots, accept_lens=accept, error_word=err)
        rs.defer(rs.DeferOp.COMMIT, pending=pending, slots=slots, accept_lens=accept, error_word=err)
        assert pending[slots, 0].tolist() == accept.tolist()
    paths = np.zeros((len(slots), W), np.int32)
    rs.defer(rs.DeferOp.GATHER, pending=pending, slots=slots, paths=paths, error_word=err)
    rs.fold(state=pool_vf, ring=ring2, slots=slots, accept_paths=paths, error_word=err)
    rs.defer(rs.DeferOp.RESET, pending=pending, slots=slots, error_word=err)
    assert err[0] == 0 and (pending[:, 0] == 0).all()
    assert (bits(pool_vf) == bits(pool_f)).all(), "flushed VF checkpoints != V + F's"
    if strided:
        assert np.isnan(raw).sum() == raw.size - pool_f.size, "VF wrote outside the checkpoints"
    with pytest.raises(rs.InvalidArgument, match="pending"):
        rs.verify_fold(steps[0].q, steps[0].k, steps[0].v, g=steps[0].g, beta=steps[0].beta, slots=slots,
                       cu_seqlens=steps[0].cu_seqlens, layer=0, state=pool_vf, ring=ring2,
                       pending=np.zeros((NS, 3), np.int32))


@pytest.mark.parametrize("kda", [False, True])
def test_buffered_verify_matches_verify_then_fold(rng, kda):
    """Five steps of VB + COMMIT (+ kernel F on the flush lengths), a forced FLUSH and a RESET,
    against V + F on the same windows: VB's outputs within V's tolerance, the cursors and flush
    lengths the protocol's, and every flushed checkpoint bit-identical to V + F's."""
    T, L, NL = 4, 8, 2
    steps = [Problem(rng, [4, 2, 3], kda=kda) for _ in range(5)]
    p0 = steps[0]
    slots, NS = p0.slots, len(p0.state)
    pool_f = np.stack([p0.state] * NL)
    pool_b = pool_f.copy()

    def ring_of(w):
        return (np.full((NL, NS, p0.HV, w, p0.V), np.nan, np.float32),
                np.full((NL, NS, p0.H, w, p0.K), np.nan, np.float32),
                np.full((NL, NS, p0.HV, w, p0.K) if kda else (NL, NS, p0.HV, w), np.nan, np.float32),
                np.full((NL, NS, p0.HV, w), np.nan, np.float32))
    ring, ring_b = ring_of(T), ring_of(L)
    ring_u = np.full((NL, NS, p0.HV, L, p0.V), np.nan, np.float32)
    cursors = np.zeros(NS, np.int32)
    flush = np.full(len(slots), -1, np.int32)
    err = np.zeros(1, np.uint32)
    hist, flushes = np.zeros(NS, np.int64), 0
    for t, p in enumerate(steps):
        for layer in range(NL):
            kw = dict(g=p.g, beta=p.beta, slots=slots, cu_seqlens=p.cu_seqlens, layer=layer)
            o_v = rs.verify(p.q, p.k, p.v, state=pool_f, ring=ring, **kw)
            o_b = rs.verify_buffered(p.q, p.k, p.v, state=pool_b, ring=ring_b, ring_u=ring_u, cursors=cursors,
                                     error_word=err, **kw)
            assert np.all(np.abs(o_b - o_v) <= 1e-4 + 1e-3 * np.abs(o_v)), "step %d layer %d: VB vs V" % (t, layer)
        accept = np.array([[4, 1, 3], [0, 2, 2], [3, 2, 1], [4, 2, 3], [1, 0, 2]][t], np.int32)
        rs.fold(state=pool_f, ring=ring, slots=slots, accept_lens=accept, error_word=err)
        rs.buffered(rs.BufferedOp.COMMIT, cursors=cursors, slots=slots, cache_len=L, window=T, accept_lens=accept,
                    flush_lens=flush, error_word=err)
        rs.fold(state=pool_b, ring=ring_b, slots=slots, accept_lens=flush, error_word=err)
        for b, s in enumerate(slots):
            nxt = hist[s] + accept[b]
            want = nxt if nxt > L - T else 0
            hist[s] = 0 if want else nxt
            assert flush[b] == want, "step %d row %d: flush length" % (t, b)
            if want:
                flushes += 1
                assert (bits(pool_b[:, s]) == bits(pool_f[:, s])).all(), "step %d: flushed slot %d" % (t, s)
        assert cursors[slots].tolist() == hist[slots].tolist(), "step %d: cursors" % t
    assert flushes > 0, "the chain never flushed at a commit"
    # A forced flush of every live slot: the checkpoints are current, V + F's bits.
    rs.buffered(rs.BufferedOp.FLUSH, cursors=cursors, slots=slots, cache_len=L, window=T, flush_lens=flush,
                error_word=err)
    assert flush.tolist() == hist[slots].tolist()
    rs.fold(state=pool_b, ring=ring_b, slots=slots, accept_lens=flush, error_word=err)
    assert (bits(pool_b) == bits(pool_f)).all(), "flushed VB checkpoints != V + F's"
    cursors[slots[0]] = 3
    rs.buffered(rs.BufferedOp.RESET, cursors=cursors, slots=slots[:1], cache_len=L, window=T, error_word=err)
    assert err[0] == 0 and (cursors == 0).all()
    # A history that leaves no room for the window is refused before the launch, naming it.
    cursors[slots[1]] = L - 1
    with pytest.raises(rs.InvalidArgument, match=r"cursors\[slots\]\[1\] = 7"):
        rs.verify_buffered(p0.q, p0.k, p0.v, g=p0.g, beta=p0.beta, slots=slots, cu_seqlens=p0.cu_seqlens, layer=0,
                           state=pool_b, ring=ring_b, ring_u=ring_u, cursors=cursors)


def test_buffered_decode_with_cursors_gives_the_recurrent_bits(rng):
    steps, L, B = 6, 4, 3
    p = Problem(rng, [steps] * B, null=(2,))
    NS = len(p.state)
    state = p.state[None].copy()  # one layer
    ring = (np.full((1, NS, p.HV, L, p.V), np.nan, np.float32), np.full((1, NS, p.H, L, p.K), np.nan, np.float32),
            np.full((1, NS, p.HV, L), np.nan, np.float32))
    cursors = np.zeros(NS, np.int32)
    positions = np.zeros(B, np.int32)
    o = np.full((B, steps, p.HV, p.V), np.nan, np.float32)
    q, k, v = (x.reshape(B, steps, *x.shape[1:]) for x in (p.q, p.k, p.v))
    g, beta = (x.reshape(B, steps, *x.shape[1:]) for x in (p.g, p.beta))
    err = np.zeros(1, np.uint32)
    for t in range(steps):
        rs.decode_cursors(rs.CursorOp.SNAPSHOT, cursors=cursors, slots=p.slots, positions=positions, cache_len=L)
        # Strided token rows straight out of the [B, steps, ...] arrays; the gate must be dense.
        rs.decode(q[:, t], k[:, t], v[:, t], g=np.ascontiguousarray(g[:, t]), beta=np.ascontiguousarray(beta[:, t]),
                  state=state, decode_ring=ring, slots=p.slots, positions=positions, layer=0, o=o[:, t],
                  error_word=err)
        rs.decode_cursors(rs.CursorOp.ADVANCE, cursors=cursors, slots=p.slots, positions=positions, cache_len=L)
    rs.decode_cursors(rs.CursorOp.SNAPSHOT, cursors=cursors, slots=p.slots, positions=positions, cache_len=L)
    assert positions.tolist() == [steps % L, steps % L, 0]
    rs.decode_materialize(state=state, decode_ring=ring, slots=p.slots, positions=positions, error_word=err)
    rs.decode_cursors(rs.CursorOp.RESET, cursors=cursors, slots=p.slots, cache_len=L)
    assert err[0] == 0 and (cursors == 0).all()
    state_r = p.state.copy()
    o_r = rs.recurrent(p.q, p.k, p.v, g=p.g, beta=p.beta, state=state_r, slots=p.slots, cu_seqlens=p.cu_seqlens)
    assert (bits(o.reshape(o_r.shape)) == bits(o_r)).all()
    assert (bits(state[0]) == bits(state_r)).all()


def test_bad_inputs_raise_with_the_field_named(rng):
    p = Problem(rng, [2, 2])
    kw = dict(g=p.g, beta=p.beta, slots=p.slots, cu_seqlens=p.cu_seqlens)
    with pytest.raises(rs.InvalidArgument, match="k has dtype f16, expected f32"):
        rs.recurrent(p.q.astype(np.float32), p.k.astype(np.float16), p.v, state=p.state.copy(), **kw)
    with pytest.raises(rs.InvalidArgument, match="dtype float64"):
        rs.recurrent(p.q.astype(np.float64), p.k, p.v, state=p.state.copy(), **kw)
    with pytest.raises(rs.InvalidArgument, match="state has shape"):
        rs.recurrent(p.q, p.k, p.v, state=p.state[:, :, :, :16].copy(), **kw)
    with pytest.raises(rs.InvalidArgument, match="state must be contiguous"):
        rs.recurrent(p.q, p.k, p.v, state=np.swapaxes(p.state.copy(), 2, 3), **kw)
    with pytest.raises(rs.InvalidArgument, match="exactly one gate form"):
        rs.recurrent(p.q, p.k, p.v, state=p.state.copy(), slots=p.slots, cu_seqlens=p.cu_seqlens)
    with pytest.raises(rs.InvalidArgument, match="cu_seqlens has shape"):
        rs.recurrent(p.q, p.k, p.v, state=p.state.copy(), g=p.g, beta=p.beta, slots=p.slots,
                     cu_seqlens=p.cu_seqlens[:2])
    # Shapes that only the library refuses: its message comes through.
    q48 = rng.uniform(-1, 1, (4, 2, 48)).astype(np.float32)
    st48 = np.zeros((3, 4, 32, 48), np.float32)
    with pytest.raises(rs.Unsupported, match="K = 48"):
        rs.recurrent(q48, q48.copy(), p.v, g=p.g, beta=p.beta, state=st48, slots=p.slots, cu_seqlens=p.cu_seqlens)
    with pytest.raises(rs.InvalidArgument, match="exactly one of accept_lens"):
        NS = len(p.state)
        ring = (np.zeros((1, NS, 4, 2, 32), np.float32), np.zeros((1, NS, 2, 2, 32), np.float32),
                np.zeros((1, NS, 4, 2), np.float32), np.zeros((1, NS, 4, 2), np.float32))
        rs.fold(state=p.state[None].copy(), ring=ring, slots=p.slots)
    with pytest.raises(TypeError):
        rs.recurrent(p.q, p.k, p.v, state=p.state.copy(), bogus=1, **kw)


def test_cuda_backend_reports_why_it_is_unavailable_or_is_available():
    ok, why = rs.backend_available(rs.Backend.CUDA)
    assert ok or why, "an unavailable backend must say why"
    assert rs.backend_available(rs.Backend.EMULATED) == (True, "")


def test_strided_pools_give_the_packed_pools_bits(rng):
    """R with a slot pitch, P and materialise-free D through a page-major view: the packed pool's
    bits, and nothing between the checkpoints written."""
    p = Problem(rng, [3, 2])
    kw = dict(g=p.g, beta=p.beta, slots=p.slots, cu_seqlens=p.cu_seqlens)
    packed = p.state.copy()
    wide = np.full((len(p.state), 2) + p.state.shape[1:], np.nan, np.float32)
    wide[:, 0] = p.state
    o_p = rs.recurrent(p.q, p.k, p.v, state=packed, **kw)
    o_s = rs.recurrent(p.q, p.k, p.v, state=wide[:, 0], **kw)
    assert (bits(o_p) == bits(o_s)).all() and (bits(packed) == bits(wide[:, 0])).all()
    assert np.isnan(wide[:, 1]).all() and (packed != p.state).any()
    # P of layer 1 from a ring the verify wrote.
    NL, W = 2, 3
    pool = np.stack([p.state] * NL)
    env, raw = envelope(pool)
    NS = len(p.state)
    ring = (np.zeros((NL, NS, p.HV, W, p.V), np.float32), np.zeros((NL, NS, p.H, W, p.K), np.float32),
            np.zeros((NL, NS, p.HV, W), np.float32), np.zeros((NL, NS, p.HV, W), np.float32))
    rs.verify(p.q, p.k, p.v, state=env, layer=1, ring=ring, **kw)
    counts = np.array([2, 1], np.int32)
    rs.replay(state=pool, ring=ring, slots=p.slots, counts=counts, layer=1)
    rs.replay(state=env, ring=ring, slots=p.slots, counts=counts, layer=1)
    assert (bits(pool) == bits(env)).all() and (pool[1] != p.state).any()
    assert np.isnan(raw).sum() == raw.size - pool.size
    # A pitch below one slot: the binding names the tensor and its strides (the library would
    # name state_slot_stride).
    with pytest.raises(rs.InvalidArgument, match=r"state has shape \[3, 4, 32, 32\] and strides \[4, 1024, 32, 1\]: "
                                                 r"its slot dim \(3 entries\) has stride 4, less than one slot"):
        rs.recurrent(p.q, p.k, p.v, state=np.lib.stride_tricks.as_strided(packed, strides=(16,) + packed.strides[1:]),
                     **kw)
