"""SGLang 0.5.23's ReplaySSM kernel calls, with SGLang's names, signatures and tensor layouts,
backed by replayssm's kernels: swap the import and keep the call sites (docs/sglang.md).

    from replayssm.sglang import (fused_sigmoid_gating_delta_rule_update,
        commit_gdn_replayssm_fold_all_layers, commit_kda_replayssm_spec,
        commit_kda_replayssm_spec_all_layers, fused_recurrent_linear_replayssm_decode)

Torch CUDA tensors run on replayssm's CUDA backend on `torch.cuda.current_stream()`; CPU torch
tensors and NumPy arrays run on the emulated backend (the CUDA kernel source on the CPU).

What is covered and what is refused (every refusal happens before anything is written):
  - `fused_sigmoid_gating_delta_rule_update`: the spec verify (`disable_state_update=True`, with
    or without `cache_ring=True`) runs kernel V; the plain update (`disable_state_update=False`,
    no ring) runs kernel R, either with SGLang's safe gate (`lower_bound`, negative). SGLang's
    other options (`match_cutedsl_decode`, `lower_bound=0`,
    `intermediate_states_buffer`, `intermediate_state_indices`, `cache_steps`,
    `retrieve_parent_token`, a softplus other than beta 1 / threshold 20, no initial state)
    raise `NotImplementedError` naming the option.
  - the folds (`commit_gdn_replayssm_fold_all_layers`, `commit_kda_replayssm_spec`,
    `commit_kda_replayssm_spec_all_layers`) run kernel F, track slots included.
  - `fused_recurrent_linear_replayssm_decode` runs kernel D on an f32 state and f32 rings, or
    d/k rings of the activations' f16/bf16 (records rounded as SGLang rounds them).
  - Pools: a checkpoint pool may have any slot and layer pitch the library accepts (`stride(0)`
    of a per-layer view, `stride(1)` / `stride(0)` of an all-layer one: SGLang's page-major
    "envelope" pools included); a ring whose slot pitch is not exactly one slot is refused (SGLang
    allocates its rings packed).

Semantic differences (docs/sglang.md lists them all): a null row (slot -1, or a slot <=
`null_block_id` in the folds) gets zero outputs (SGLang computes them from a zero state); indices
SGLang would silently skip or read out of bounds (a slot past the pool, a negative accept length,
a request longer than the ring, a track step outside the accepted prefix) are refused: on host
memory (emulated backend) the library reads them before launching and raises
`replayssm.InvalidArgument` naming the index, writing nothing; on CUDA the kernels skip those rows
and set a bit in the error word: pass `error_word=` (a [1] int32 tensor, our extension) and
`replayssm.check_error_word` it after the step.
Index tensors may be int32 or int64 (narrowed, range-checked on the host; docs/sglang.md).
The committed checkpoint is bit-identical to replayssm's recurrent kernel R (SGLang's fold can
differ from its own verify by an ulp). `max_seqlen=` (our extension) bounds the draft tokens
per request; without it the CPU path reads `cu_seqlens`, the CUDA path uses the ring length
(or, without a ring, reads `cu_seqlens`: a device sync).
"""

import math
import numbers

from . import _T, _abi, _bad, _f32_arg, _flag, _int, _is_bool, _pool_pitch_rule, _scale
from . import fold as _rs_fold, recurrent as _recurrent, verify as _verify, decode as _decode

SGLANG_VERSION = "0.5.23"

__all__ = [
    "SGLANG_VERSION", "fused_sigmoid_gating_delta_rule_update", "commit_gdn_replayssm_fold_all_layers",
    "commit_kda_replayssm_spec", "commit_kda_replayssm_spec_all_layers", "fused_recurrent_linear_replayssm_decode",
    "patch_sglang",
]

# Where SGLang 0.5.23 looks each function up at call time: (module, name).
_SGLANG_SITES = [
    ("sglang.srt.layers.attention.linear.kernels.gdn_triton", "fused_sigmoid_gating_delta_rule_update"),
    ("sglang.kernels.ops.attention.linear.gdn_replayssm_spec_fold", "commit_gdn_replayssm_fold_all_layers"),
    ("sglang.kernels.ops.attention.linear.kda_replayssm_spec_decode", "commit_kda_replayssm_spec"),
    ("sglang.kernels.ops.attention.linear.kda_replayssm_spec_decode", "commit_kda_replayssm_spec_all_layers"),
    ("sglang.kernels.ops.attention.linear.fused_recurrent_linear_replayssm", "fused_recurrent_linear_replayssm_decode"),
]


def patch_sglang():
    """Rebinds SGLang's ReplaySSM kernel calls to this module's (docs/sglang.md, section 1): imports
    each SGLang module and replaces the name its call sites look up. Call it before the model
    builds its attention backends. Returns the "module.name" strings it replaced; raises
    ImportError naming the module if SGLang (or one of the modules) is not importable."""
    import importlib
    import sys
    done = []
    this = sys.modules[__name__]
    for module, name in _SGLANG_SITES:
        mod = importlib.import_module(module)
        if not hasattr(mod, name):
            raise ImportError("replayssm.sglang.patch_sglang: %s has no %s (not SGLang %s?)"
                              % (module, name, SGLANG_VERSION))
        setattr(mod, name, getattr(this, name))
        done.append("%s.%s" % (module, name))
    return done


def _unsupported(fn, option, value, why):
    raise NotImplementedError("replayssm.sglang.%s: %s = %r is not supported: %s (docs/sglang.md)"
                              % (fn, option, value, why))


# --- tensors ----------------------------------------------------------------------------------

def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _info(fn, name, x, ndims, dtypes=None):
    """`x` as the binding sees it, with SGLang's argument name in the errors."""
    if x is None:
        _bad("%s: %s is required" % (fn, name))
    t = _T(name, x)
    if len(t.shape) not in ndims:
        _bad("%s: %s has %d dims (shape %s), expected %s" % (fn, name, len(t.shape), list(t.shape),
                                                              " or ".join(str(n) for n in ndims)))
    if dtypes is not None and t.dtype not in dtypes:
        _bad("%s: %s has dtype %s, expected %s" % (fn, name, t.dtype, " or ".join(dtypes)))
    return t


def _shape(fn, name, t, want):
    if len(t.shape) != len(want) or any(w is not None and w != s for w, s in zip(want, t.shape)):
        _bad("%s: %s has shape %s, expected %s" % (fn, name, list(t.shape), ["*" if w is None else w for w in want]))


def _one_slot_pitch(fn, name, t, slot_dim):
    """A ring: dims after `slot_dim` contiguous and the slot pitch exactly one slot (dims before
    it, the layers, follow at a pitch of all the slots), as SGLang allocates its rings: the only
    ring layout the ABI addresses (checkpoint pools may be strided: _pool)."""
    if 0 in t.shape:
        _bad("%s: %s has shape %s: every size must be at least 1" % (fn, name, list(t.shape)))
    if not t.contiguous_from(slot_dim + 1):
        _bad("%s: %s must be contiguous within a slot (shape %s, strides %s)" % (fn, name, list(t.shape), list(t.strides)))
    if not t.contiguous_from(0):
        blk = math.prod(t.shape[slot_dim + 1:])
        _unsupported(fn, "%s.stride()" % name, tuple(t.strides),
                     "replayssm addresses a ring's slots at a pitch of exactly one slot (%d elements) and its "
                     "layers at a pitch of all the slots (as SGLang allocates them); this is a strided view. "
                     "Allocate the ring as its own [layers, slots, ...] tensor" % blk)


def _pool(fn, name, t, slot_dim):
    """A checkpoint pool: each slot contiguous; the slot (and layer) pitch is any the library
    accepts, SGLang's page-major "envelope" pools included (it checks the pitches)."""
    if 0 in t.shape:
        _bad("%s: %s has shape %s: every size must be at least 1" % (fn, name, list(t.shape)))
    if not t.contiguous_from(slot_dim + 1):
        _bad("%s: %s must be contiguous within a slot (shape %s, strides %s)" % (fn, name, list(t.shape), list(t.strides)))
    _pool_pitch_rule(fn, t, slot_dim)


def _f32_param(fn, name, x, shape):
    """A_log / dt_bias as f32: SGLang loads them as f32 from any float dtype, so the widening of
    an f16 or bf16 parameter is exact (an f64 one would be rounded: refused)."""
    t = _info(fn, name, x, (len(shape),) if len(shape) == 1 else (1, len(shape)))
    if t.dtype not in ("f32", "f16", "bf16"):
        _bad("%s: %s has dtype %s, expected float32, float16 or bfloat16" % (fn, name, t.dtype))
    if len(t.shape) != len(shape):  # KDA's dt_bias [HV*K] is the same memory as [HV, K]
        _shape(fn, name, t, (math.prod(shape),))
        x = x.reshape(shape)
    _shape(fn, name, _T(name, x), shape)
    if t.dtype == "f32":
        return x
    return x.float() if _is_torch(x) else x.astype("float32")


_I32_MIN, _I32_MAX = -(2 ** 31), 2 ** 31 - 1


def _is_int64(x):
    return str(getattr(x, "dtype", "")) in ("int64", "torch.int64")


def _index(fn, name, x, n=None, flag=False):
    """An index tensor as SGLang passes it, int32 or int64, as the library's int32: `(x32, t)`.
    An int64 one is narrowed into a new tensor (the caller's is never written). On the host every
    value is checked first (one outside int32 is refused by name). On CUDA a check would be a
    device sync, so the values are clamped to int32's range instead of wrapping into it: a clamped
    value is past every bound the kernels check (a slot, length, position or seqlen is flagged; a
    track step below int32 is negative, "no snapshot", as SGLang reads any negative step). A flag
    (`flag=True`: force_flush) is read as nonzero on both paths."""
    dtype = str(getattr(x, "dtype", ""))
    if x is not None and dtype not in ("int32", "torch.int32", "int64", "torch.int64"):
        _bad("%s: %s has dtype %s, expected int32 or int64 (an index tensor)" % (fn, name, dtype or type(x).__name__))
    if x is not None and _is_int64(x):
        if flag:
            x = (x != 0).int() if _is_torch(x) else (x != 0).astype("int32")
        elif _is_torch(x) and x.device.type != "cpu":
            x = x.clamp(_I32_MIN, _I32_MAX).int()
        else:
            host = x.numpy() if _is_torch(x) else x
            bad = [i for i, v in enumerate(host.reshape(-1).tolist()) if not _I32_MIN <= v <= _I32_MAX]
            if bad:
                i = bad[0]
                _bad("%s: %s[%d] = %d does not fit the library's int32 indices (must be in %d..=%d)"
                     % (fn, name, i, host.reshape(-1)[i], _I32_MIN, _I32_MAX))
            x = x.int() if _is_torch(x) else x.astype("int32")
    t = _info(fn, name, x, (1,), ("i32",))
    if n is not None and t.shape[0] != n:
        _bad("%s: %s has %d entries, expected %d (one per request)" % (fn, name, t.shape[0], n))
    return x, t


def _where(idx, cond, value):
    """idx with `value` where cond (a new int32 array/tensor: the caller's is never written)."""
    if _is_torch(idx):
        import torch
        return torch.where(cond, torch.full_like(idx, value), idx)
    import numpy as np
    return np.where(cond, np.int32(value), idx).astype(np.int32)


def _null_slots(idx, null_block_id):
    """SGLang skips a slot <= null_block_id; replayssm's null row is -1 and other negative slots
    are flagged. Slots -1..null_block_id become -1; a slot < -1 stays (and is flagged)."""
    if null_block_id == -1:
        return idx
    return _where(idx, (idx >= -1) & (idx <= null_block_id), -1)


def _arange_seqlens(q, B, T):
    if _is_torch(q):
        import torch
        return torch.arange(0, (B + 1) * T, T, dtype=torch.int32, device=q.device)
    import numpy as np
    return np.arange(0, (B + 1) * T, T, dtype=np.int32)


# --- the verify / recurrent update ------------------------------------------------------------

def fused_sigmoid_gating_delta_rule_update(
        A_log, a, dt_bias, softplus_beta, softplus_threshold, q, k, v, b, initial_state_source,
        initial_state_indices, scale=None, use_qk_l2norm_in_kernel=False, cu_seqlens=None, is_kda=False,
        lower_bound=None, disable_state_update=False, intermediate_states_buffer=None,
        intermediate_state_indices=None, cache_steps=None, retrieve_parent_token=None, cache_ring=False,
        replayssm_rawv=None, replayssm_rawk=None, replayssm_g=None, replayssm_beta=None,
        match_cutedsl_decode=False, *, max_seqlen=None, error_word=None):
    """SGLang's fused gated delta-rule update. With `disable_state_update=True` it is replayssm's
    verify (kernel V): outputs of every draft token from the checkpoint, which is only read, and,
    with `cache_ring=True`, the raw inputs written to the per-layer ring views. With
    `disable_state_update=False` (no ring) it is the recurrent update (kernel R), state written.
    Returns o [B, T, HV, V] (B = 1 with `cu_seqlens`)."""
    fn = "fused_sigmoid_gating_delta_rule_update"
    if _flag(fn, "match_cutedsl_decode", match_cutedsl_decode):
        _unsupported(fn, "match_cutedsl_decode", match_cutedsl_decode, "replayssm does not reproduce FlashInfer's "
                     "CuTe DSL decode (its ex2/lg2.approx gate and bf16 state rounding)")
    for option, value in (("intermediate_states_buffer", intermediate_states_buffer),
                          ("intermediate_state_indices", intermediate_state_indices),
                          ("retrieve_parent_token", retrieve_parent_token)):
        if value is not None:
            _unsupported(fn, option, "<tensor>" if hasattr(value, "shape") else value,
                         "replayssm does not implement this option (a tree verify is replayssm.verify(parent=...))"
                         if option == "retrieve_parent_token" else "replayssm does not implement this option")
    if cache_steps not in (None, 0):
        _unsupported(fn, "cache_steps", cache_steps, "per-draft state snapshots are what the ring replaces")
    if any(_is_bool(x) or not isinstance(x, numbers.Real) for x in (softplus_beta, softplus_threshold)):
        _bad("%s: softplus_beta = %r, softplus_threshold = %r: expected real numbers" % (
            fn, softplus_beta, softplus_threshold))
    if lower_bound is not None:
        # SGLang's safe gate, g = lower_bound * sigmoid(exp(A_log) * (a + dt_bias)) (its softplus
        # parameters unused). SGLang takes any float; replayssm's rule (finite, negative) is the
        # library's, but 0 must be refused here: the C ABI reads it as the softplus gate, SGLang
        # as a gate of 0 (no decay).
        lower_bound = _f32_arg(fn, "lower_bound", lower_bound)
        if not _flag(fn, "is_kda", is_kda):
            _unsupported(fn, "lower_bound", lower_bound, "replayssm's safe gate is KDA's (is_kda=True); "
                         "its GDN kernels compile the softplus gate alone")
        if lower_bound == 0:
            _unsupported(fn, "lower_bound", lower_bound, "SGLang's gate would be 0 (no decay); replayssm's safe "
                         "gate takes a finite negative bound (and lower_bound=None is the softplus gate)")
    elif softplus_beta != 1.0 or softplus_threshold != 20.0:
        _unsupported(fn, "(softplus_beta, softplus_threshold)", (softplus_beta, softplus_threshold),
                     "replayssm's gate is softplus with beta 1.0, linear above 20.0 (design §3)")
    if initial_state_source is None:
        _unsupported(fn, "initial_state_source", None, "replayssm reads a checkpoint pool (pass a zeroed one)")
    kda = _flag(fn, "is_kda", is_kda)
    ring = _flag(fn, "cache_ring", cache_ring)
    no_update = _flag(fn, "disable_state_update", disable_state_update)
    qk_l2norm = _flag(fn, "use_qk_l2norm_in_kernel", use_qk_l2norm_in_kernel)
    if ring and not no_update:
        _unsupported(fn, "(cache_ring, disable_state_update)", (True, False),
                     "the ring is written by the verify, which never writes the checkpoint (the fold commits it)")
    if scale is not None:
        scale = _scale(fn, scale)
        if scale <= 0:
            _bad("%s: scale = %r must be positive (as SGLang asserts)" % (fn, scale))

    tq = _info(fn, "q", q, (4,), ("f32", "f16", "bf16"))
    B, T, H, K = tq.shape
    tv = _info(fn, "v", v, (4,), (tq.dtype,))
    _shape(fn, "v", tv, (B, T, None, None))
    HV, V = tv.shape[2:]
    _shape(fn, "k", _info(fn, "k", k, (4,), (tq.dtype,)), (B, T, H, K))
    N = B
    if cu_seqlens is not None:
        if B != 1:
            _bad("%s: with cu_seqlens, q must be [1, T, H, K] (got batch %d)" % (fn, B))
        cu_seqlens, tcu = _index(fn, "cu_seqlens", cu_seqlens)
        N = tcu.shape[0] - 1
        if N < 1:
            _bad("%s: cu_seqlens needs at least 2 entries" % fn)
    else:
        cu_seqlens = _arange_seqlens(q, B, T)
        if max_seqlen is None:
            max_seqlen = T
    initial_state_indices, _ = _index(fn, "initial_state_indices", initial_state_indices, N)
    rows = B * T
    # SGLang walks the token axis of a and b by stride()[-2]; they are the rows of [B*T, ...].
    gate_w = HV * K if kda else HV
    # SGLang walks a and b by their token stride: [tokens, width] or [B, T, width] (KDA also
    # [B, T, HV, K]); the leading dims hold the B*T tokens.
    ta = _info(fn, "a", a, (2, 3, 4) if kda else (2, 3), (tq.dtype,))
    lead = 2 if kda and len(ta.shape) == 4 else 1
    width = (HV, K) if lead == 2 else (gate_w,)
    if tuple(ta.shape[-lead:]) != width or math.prod(ta.shape[:-lead]) != rows:
        _bad("%s: a has shape %s, expected [%d tokens (or B=%d, T=%d), %s]" % (
            fn, list(ta.shape), rows, B, T, "HV*K = %d (KDA; or HV, K)" % gate_w if kda else "HV = %d" % HV))
    tb = _info(fn, "b", b, (2, 3), (tq.dtype,))
    if tb.shape[-1] != HV or math.prod(tb.shape[:-1]) != rows:
        _bad("%s: b has shape %s, expected [%d tokens (or B=%d, T=%d), HV = %d]" % (fn, list(tb.shape), rows, B, T, HV))
    gate = dict(a=a.reshape((rows, HV, K) if kda else (rows, HV)), b=b.reshape(rows, HV),
                A_log=_f32_param(fn, "A_log", A_log, (HV,)),
                dt_bias=_f32_param(fn, "dt_bias", dt_bias, (HV, K) if kda else (HV,)), lower_bound=lower_bound)
    q3, k3, v3 = q.reshape(rows, H, K), k.reshape(rows, H, K), v.reshape(rows, HV, V)

    ts = _info(fn, "initial_state_source", initial_state_source, (4,))
    if ts.dtype != "f32":
        _unsupported(fn, "initial_state_source.dtype", ts.dtype, "replayssm keeps an fp32 checkpoint")
    _shape(fn, "initial_state_source", ts, (None, HV, V, K))
    _pool(fn, "initial_state_source", ts, 0)
    state = initial_state_source
    common = dict(slots=initial_state_indices, cu_seqlens=cu_seqlens, scale=scale, qk_l2norm=qk_l2norm,
                  error_word=error_word, **gate)
    if not no_update:
        o = _recurrent(q3, k3, v3, state=state, write_state=True, max_seqlen=max_seqlen, **common)
        return o.reshape(B, T, HV, V)

    rings = None
    if ring:
        names = ("replayssm_rawv", "replayssm_rawk", "replayssm_g", "replayssm_beta")
        tr = [_info(fn, n, x, (4, 3) if n in ("replayssm_g", "replayssm_beta") else (4,))
              for n, x in zip(names, (replayssm_rawv, replayssm_rawk, replayssm_g, replayssm_beta))]
        _shape(fn, "replayssm_rawv", tr[0], (None, HV, None, V))
        NSr, _, W, _ = tr[0].shape
        _shape(fn, "replayssm_rawk", tr[1], (NSr, H, W, K))
        # The gate ring's rank follows the model, as in SGLang's memory pool.
        _shape(fn, "replayssm_g", tr[2], (NSr, HV, W, K) if kda else (NSr, HV, W))
        _shape(fn, "replayssm_beta", tr[3], (NSr, HV, W))
        for n, t in zip(names, tr):
            _one_slot_pitch(fn, n, t, 0)
            want = tq.dtype if n in ("replayssm_rawv", "replayssm_rawk") else "f32"
            if t.dtype != want:
                _bad("%s: %s has dtype %s, expected %s (%s)" % (fn, n, t.dtype, want, "the activations' dtype"
                                                                if want == tq.dtype else "f32 gate and beta records"))
        # One slot index addresses the pool and the ring: a slot past the smaller of the two is
        # flagged (SGLang would read or write past it).
        NS = min(NSr, ts.shape[0])
        state = state[:NS]
        rings = tuple(x[:NS][None] for x in (replayssm_rawv, replayssm_rawk, replayssm_g, replayssm_beta))
        on_host = not _is_torch(q) or q.device.type == "cpu"
        if max_seqlen is None and not on_host:
            # Without a sync the ring length bounds the draft tokens (a longer request is
            # flagged); on the host the binding reads cu_seqlens exactly.
            max_seqlen = min(W, _abi.MAX_VERIFY_WINDOW, rows)
    if max_seqlen is not None:
        max_seqlen = _int(fn, "max_seqlen", max_seqlen, 1, _abi.MAX_VERIFY_WINDOW, " (MAX_VERIFY_WINDOW)")
    o = _verify(q3, k3, v3, state=state[None], layer=0, ring=rings, max_seqlen=max_seqlen, **common)
    return o.reshape(B, T, HV, V)


# --- the folds --------------------------------------------------------------------------------

def _commit(fn, kda, layered, checkpoint_state, rawv_cache, rawk_cache, g_cache, beta_cache, ssm_state_indices,
          accept_lens, max_cache_len, num_k_heads, mamba_track_indices, mamba_steps_to_track,
          use_qk_l2norm_in_kernel, null_block_id, error_word):
    g_name = "gk_cache" if kda else "g_cache"
    lead = 2 if layered else 1
    ts = _info(fn, "checkpoint_state", checkpoint_state, (lead + 3,))
    if ts.dtype != "f32":
        _unsupported(fn, "checkpoint_state.dtype", ts.dtype, "replayssm keeps an fp32 checkpoint")
    HV, V, K = ts.shape[lead:]
    pool = ts.shape[:lead]
    names = ("rawv_cache", "rawk_cache", g_name, "beta_cache")
    tr = [_info(fn, n, x, (lead + 2, lead + 3) if n == g_name else (lead + 3,) if n != "beta_cache" else (lead + 2,))
          for n, x in zip(names, (rawv_cache, rawk_cache, g_cache, beta_cache))]
    if not kda and len(tr[2].shape) != lead + 2:
        _bad("%s: %s has %d dims (shape %s): a GDN gate ring is [%sslots, HV, L] (a KDA ring's gate is per K)"
             % (fn, g_name, len(tr[2].shape), list(tr[2].shape), "layers, " if layered else ""))
    _shape(fn, "rawv_cache", tr[0], pool + (HV, None, V))
    W = tr[0].shape[-2]
    H = _int(fn, "num_k_heads", num_k_heads, 1, HV)
    if tr[1].shape[lead] != H:
        _bad("%s: num_k_heads = %d but rawk_cache has %d key heads (shape %s)" % (fn, H, tr[1].shape[lead],
                                                                              list(tr[1].shape)))
    _shape(fn, "rawk_cache", tr[1], pool + (H, W, K))
    _shape(fn, g_name, tr[2], pool + ((HV, W, K) if kda else (HV, W)))
    _shape(fn, "beta_cache", tr[3], pool + (HV, W))
    if tr[1].dtype != tr[0].dtype or tr[0].dtype not in ("f32", "f16", "bf16"):
        _bad("%s: rawv_cache and rawk_cache have dtypes %s and %s, expected one activation dtype"
             % (fn, tr[0].dtype, tr[1].dtype))
    for n, t in zip(names[2:], tr[2:]):
        if t.dtype != "f32":
            _bad("%s: %s has dtype %s, expected f32" % (fn, n, t.dtype))
    # SGLang indexes the ring with max_cache_len: anything but the ring's own length misreads it.
    _int(fn, "max_cache_len", max_cache_len, W, W, " (replayssm reads rawv_cache.shape[-2] = %d)" % W)
    nb = _int(fn, "null_block_id", null_block_id, -1, ts.shape[lead - 1] - 1, " (slot -1 or a slot of the pool)")
    _pool(fn, "checkpoint_state", ts, lead - 1)
    for n, t in zip(names, tr):
        _one_slot_pitch(fn, n, t, lead - 1)
    ssm_state_indices, tidx = _index(fn, "ssm_state_indices", ssm_state_indices)
    B = tidx.shape[0]
    accept_lens, _ = _index(fn, "accept_lens", accept_lens, B)
    if (mamba_track_indices is None) != (mamba_steps_to_track is None):
        _bad("%s: mamba_track_indices and mamba_steps_to_track go together (SGLang ignores one alone)" % fn)
    slots = _null_slots(ssm_state_indices, nb)
    track = {}
    if mamba_track_indices is not None:
        mamba_track_indices, _ = _index(fn, "mamba_track_indices", mamba_track_indices, B)
        mamba_steps_to_track, _ = _index(fn, "mamba_steps_to_track", mamba_steps_to_track, B)
        # SGLang snapshots only when the step is >= 0 and the slot past the null block: a track
        # step of -1 means "no snapshot" there, where replayssm would flag a set track slot.
        # A row on a null slot is not a request: SGLang returns before its track as well.
        null_row = (ssm_state_indices >= -1) & (ssm_state_indices <= nb)
        tslots = _where(mamba_track_indices, (mamba_steps_to_track < 0) | null_row
                        | ((mamba_track_indices <= nb) & (mamba_track_indices >= -1)), -1)
        track = dict(track_slots=tslots, track_steps=mamba_steps_to_track)
    lift = (lambda x: x) if layered else (lambda x: x[None])
    _rs_fold(state=lift(checkpoint_state), ring=tuple(lift(x) for x in (rawv_cache, rawk_cache, g_cache, beta_cache)),
          slots=slots, accept_lens=accept_lens, qk_l2norm=_flag(fn, "use_qk_l2norm_in_kernel", use_qk_l2norm_in_kernel),
          error_word=error_word, **track)


def commit_gdn_replayssm_fold_all_layers(checkpoint_state, rawv_cache, rawk_cache, g_cache, beta_cache,
                                         ssm_state_indices, accept_lens, max_cache_len, num_k_heads,
                                         mamba_track_indices=None, mamba_steps_to_track=None,
                                         use_qk_l2norm_in_kernel=True, null_block_id=-1, *, error_word=None):
    """Folds every layer's accepted ring prefix into the fp32 checkpoint [NL, NS, HV, V, K] in place
    (kernel F), snapshotting the state after `mamba_steps_to_track` into the track slots."""
    _commit("commit_gdn_replayssm_fold_all_layers", False, True, checkpoint_state, rawv_cache, rawk_cache, g_cache,
          beta_cache, ssm_state_indices, accept_lens, max_cache_len, num_k_heads, mamba_track_indices,
          mamba_steps_to_track, use_qk_l2norm_in_kernel, null_block_id, error_word)


def commit_kda_replayssm_spec(checkpoint_state, rawv_cache, rawk_cache, gk_cache, beta_cache, ssm_state_indices,
                              accept_lens, max_cache_len, num_k_heads, mamba_track_indices=None,
                              mamba_steps_to_track=None, use_qk_l2norm_in_kernel=True, null_block_id=0, *,
                              error_word=None):
    """One KDA layer's fold: checkpoint [NS, HV, V, K], per-layer rings (SGLang's default
    null_block_id is 0 here: slot 0 is the null block)."""
    _commit("commit_kda_replayssm_spec", True, False, checkpoint_state, rawv_cache, rawk_cache, gk_cache, beta_cache,
          ssm_state_indices, accept_lens, max_cache_len, num_k_heads, mamba_track_indices, mamba_steps_to_track,
          use_qk_l2norm_in_kernel, null_block_id, error_word)


def commit_kda_replayssm_spec_all_layers(checkpoint_state, rawv_cache, rawk_cache, gk_cache, beta_cache,
                                         ssm_state_indices, accept_lens, max_cache_len, num_k_heads,
                                         mamba_track_indices=None, mamba_steps_to_track=None,
                                         use_qk_l2norm_in_kernel=True, null_block_id=0, *, error_word=None):
    """Every KDA layer's fold in one launch: checkpoint [NL, NS, HV, V, K], rings [NL, NS, ...]."""
    _commit("commit_kda_replayssm_spec_all_layers", True, True, checkpoint_state, rawv_cache, rawk_cache, gk_cache,
          beta_cache, ssm_state_indices, accept_lens, max_cache_len, num_k_heads, mamba_track_indices,
          mamba_steps_to_track, use_qk_l2norm_in_kernel, null_block_id, error_word)


# --- the buffered decode ----------------------------------------------------------------------

def fused_recurrent_linear_replayssm_decode(mixed_qkv, a, b, A_log, dt_bias, scale, initial_state, d_cache, k_cache,
                                            g_cache, out, ssm_state_indices, write_pos, force_flush=None,
                                            use_qk_l2norm_in_kernel=False, is_kda=False, block_v=None, num_warps=1,
                                            num_stages=3, nk=2, *, error_word=None):
    """SGLang's buffered decode (one token per row) as replayssm's kernel D: reads the checkpoint
    and the `write_pos` pending records, appends this token's record, and on a flush step
    (write_pos == L-1 or force_flush) writes the checkpoint. The caller advances write_pos as with
    SGLang. The rings are replayssm's records: do not switch kernels on a ring with records
    pending (flush first). `block_v`, `num_warps`, `num_stages`, `nk` choose SGLang's Triton tiles
    and are ignored. Returns (out, initial_state)."""
    fn = "fused_recurrent_linear_replayssm_decode"
    kda = _flag(fn, "is_kda", is_kda)
    for option, value in (("block_v", block_v), ("num_warps", num_warps), ("num_stages", num_stages), ("nk", nk)):
        if value is not None:
            _int(fn, option, value, 1, 1 << 16)
    tm = _info(fn, "mixed_qkv", mixed_qkv, (2,), ("f32", "f16", "bf16"))
    ts = _info(fn, "initial_state", initial_state, (4,))
    if ts.dtype != "f32":
        _unsupported(fn, "initial_state.dtype", ts.dtype, "replayssm's decode keeps an fp32 checkpoint")
    NS, HV, V, K = ts.shape
    B, qkv = tm.shape
    qdim = (qkv - HV * V) // 2
    if qdim <= 0 or qdim % K != 0 or 2 * qdim + HV * V != qkv:
        _bad("%s: mixed_qkv's last dim %d is not 2*H*K + HV*V for HV=%d, V=%d, K=%d" % (fn, qkv, HV, V, K))
    H = qdim // K
    if HV % H != 0:
        _bad("%s: H = %d (from mixed_qkv) does not divide HV = %d" % (fn, H, HV))
    td = _info(fn, "d_cache", d_cache, (4,))
    _shape(fn, "d_cache", td, (None, HV, None, V))
    L = td.shape[2]
    tk = _info(fn, "k_cache", k_cache, (4,))
    _shape(fn, "k_cache", tk, (td.shape[0], H, L, K))
    tg = _info(fn, "g_cache", g_cache, (4 if kda else 3,))
    _shape(fn, "g_cache", tg, (td.shape[0], HV, L, K) if kda else (td.shape[0], HV, L))
    # d and k records: f32, or the activations' f16/bf16 (rounded to nearest even, as SGLang
    # stores them); g stays f32, as SGLang requires.
    if td.dtype not in ("f32", tm.dtype):
        _unsupported(fn, "d_cache.dtype", td.dtype, "replayssm's decode ring holds f32 records or records of the "
                     "activations' dtype (%s)" % tm.dtype)
    if tk.dtype != td.dtype:
        _unsupported(fn, "(d_cache.dtype, k_cache.dtype)", (td.dtype, tk.dtype),
                     "replayssm's decode ring holds d and k in one dtype")
    if tg.dtype != "f32":
        _unsupported(fn, "g_cache.dtype", tg.dtype, "the ring's log decays are f32 (as SGLang requires)")
    _pool(fn, "initial_state", ts, 0)
    for n, t in (("d_cache", td), ("k_cache", tk), ("g_cache", tg)):
        _one_slot_pitch(fn, n, t, 0)
    to = _info(fn, "out", out, (4,), (tm.dtype,))
    _shape(fn, "out", to, (B, 1, HV, V))
    ssm_state_indices, _ = _index(fn, "ssm_state_indices", ssm_state_indices, B)
    write_pos, _ = _index(fn, "write_pos", write_pos, B)
    if force_flush is not None:
        force_flush, _ = _index(fn, "force_flush", force_flush, B, flag=True)
    if scale is None:
        _bad("%s: scale is required (SGLang's signature has no default)" % fn)
    _info(fn, "a", a, (3 if kda else 2,), (tm.dtype,))
    # One slot index addresses the pool and the rings: a slot past the smaller is flagged.
    ns = min(NS, td.shape[0])
    rows = (lambda x: x[:ns][None])
    q = mixed_qkv[:, :qdim].reshape(B, H, K)
    k = mixed_qkv[:, qdim:2 * qdim].reshape(B, H, K)
    v = mixed_qkv[:, 2 * qdim:].reshape(B, HV, V)
    _decode(q, k, v, state=rows(initial_state), decode_ring=(rows(d_cache), rows(k_cache), rows(g_cache)),
            slots=ssm_state_indices, positions=write_pos, layer=0, force_flush=force_flush, o=out[:, 0],
            scale=scale, qk_l2norm=_flag(fn, "use_qk_l2norm_in_kernel", use_qk_l2norm_in_kernel),
            error_word=error_word, a=a, b=b, A_log=_f32_param(fn, "A_log", A_log, (HV,)),
            dt_bias=_f32_param(fn, "dt_bias", dt_bias, (HV, K) if kda else (HV,)))
    return out, initial_state
