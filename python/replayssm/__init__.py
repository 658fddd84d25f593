"""replayssm for Python engines: ctypes over the C ABI (include/replayssm.h), no compiled extension.

Tensors are NumPy arrays (host memory: the emulated backend runs the CUDA kernel source on the
CPU) or PyTorch tensors (CUDA tensors: the CUDA backend, launched on
`torch.cuda.current_stream()` of the tensors' device; CPU tensors: the emulated backend). Every
call checks dtypes, shapes and strides here, then the library checks them again; a refusal raises
a `ReplaySSMError` subclass carrying the status and the library's message. Nothing is
synchronised and nothing is allocated except the outputs you leave as None.

Layouts (NL layers, NS slots, H key heads, HV value heads, W window, L cache length):
  q, k [T, H, K]; v, o [T, HV, V] (act dtype; the token dim may be strided)
  raw gate a [T, HV] (KDA [T, HV, K]), b [T, HV] (act); A_log [HV], dt_bias [HV] (KDA [HV, K]) f32
  precomputed gate g [T, HV] (KDA [T, HV, K]), beta [T, HV] f32
  state [NL, NS, HV, V, K] f32 (recurrent: [NS, HV, V, K])
  spec ring (ring_v [NL, NS, HV, W, V], ring_k [NL, NS, H, W, K] act, ring_g [NL, NS, HV, W(, K)],
             ring_beta [NL, NS, HV, W] f32)
  decode ring (ring_d [NL, NS, HV, L, V], ring_k [NL, NS, H, L, K], ring_g [NL, NS, HV, L(, K)]) f32
  slots [B] int32 (-1 = null row), cu_seqlens [B+1] int32, accept_lens [B] int32 (bonus included)
"""

import ctypes

from ._abi import ABI_VERSION, Backend, CursorOp, DevErr, DType, Status, Variant, load
from . import _abi

__all__ = [
    "ABI_VERSION", "Backend", "CursorOp", "DevErr", "DType", "Status", "Variant",
    "ReplaySSMError", "InvalidArgument", "Unsupported", "CudaError", "EmulatorError", "StructSizeError",
    "BackendUnavailable", "ConfigRefused", "InternalError",
    "version", "backend_available", "validate_config",
    "recurrent", "verify", "fold", "replay", "decode", "decode_materialize", "decode_cursors",
]


class ReplaySSMError(Exception):
    """A call the library (or this binding's checks) refused: `.status` and `.message`."""

    def __init__(self, status, message):
        super().__init__("%s: %s" % (Status(status).name, message))
        self.status = Status(status)
        self.message = message


class InvalidArgument(ReplaySSMError, ValueError):
    pass


class Unsupported(ReplaySSMError):
    pass


class CudaError(ReplaySSMError):
    pass


class EmulatorError(ReplaySSMError):
    pass


class StructSizeError(ReplaySSMError):
    pass


class BackendUnavailable(ReplaySSMError):
    pass


class ConfigRefused(ReplaySSMError):
    pass


class InternalError(ReplaySSMError):
    pass


_ERRORS = {
    Status.INVALID_ARGUMENT: InvalidArgument, Status.UNSUPPORTED: Unsupported, Status.CUDA: CudaError,
    Status.EMULATOR: EmulatorError, Status.STRUCT_SIZE: StructSizeError,
    Status.BACKEND_UNAVAILABLE: BackendUnavailable, Status.CONFIG_REFUSED: ConfigRefused,
    Status.INTERNAL: InternalError,
}

_lib = None


def _library():
    global _lib
    if _lib is None:
        _lib, _ = load()
    return _lib


def _raise(status, message):
    raise _ERRORS.get(Status(status), ReplaySSMError)(status, message)


def _bad(message):
    _raise(Status.INVALID_ARGUMENT, message)


def version():
    """(library version as major*10000+minor*100+patch, C ABI version)."""
    lib = _library()
    return lib.replayssm_version(), lib.replayssm_abi_version()


def backend_available(backend):
    """(True, "") when `backend` (a Backend) can run here, else (False, the reason)."""
    lib = _library()
    st = lib.replayssm_backend_available(int(backend))
    return st == Status.OK, lib.replayssm_last_error_message().decode()


def validate_config(args):
    """Checks engine flags spelled as SGLang spells them (e.g. ["--enable-linear-replayssm-spec",
    "--speculative-algorithm", "EAGLE"]) against the capability gates. Returns the resolved
    configuration as text (warnings as "warning: " lines); raises ConfigRefused with the rule,
    the value and the fix, or InvalidArgument for an unknown flag or value."""
    lib = _library()
    encoded = [str(a).encode() for a in args]
    argv = (ctypes.c_char_p * max(len(encoded), 1))(*encoded)
    out = ctypes.create_string_buffer(16384)
    st = lib.replayssm_validate_config(len(encoded), argv, out, len(out))
    if st != Status.OK:
        _raise(st, out.value.decode() or lib.replayssm_last_error_message().decode())
    return out.value.decode()


# --- tensors --------------------------------------------------------------------------------

class _T:
    """One tensor as the ABI sees it: address, shape, element strides, dtype, device."""

    __slots__ = ("name", "ptr", "shape", "strides", "dtype", "device", "obj")

    def __init__(self, name, obj):
        self.name, self.obj = name, obj
        mod = type(obj).__module__
        if mod.startswith("numpy"):
            import numpy as np
            kinds = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.int32): "i32",
                     np.dtype(np.uint32): "u32"}
            if obj.dtype not in kinds:
                _bad("%s: dtype %s is not supported (float32, float16, int32, uint32; bfloat16 needs torch)"
                     % (name, obj.dtype))
            self.dtype = kinds[obj.dtype]
            self.ptr = obj.ctypes.data
            self.shape = tuple(obj.shape)
            if any(s % obj.itemsize for s in obj.strides):
                _bad("%s: strides %s are not whole elements" % (name, obj.strides))
            self.strides = tuple(s // obj.itemsize for s in obj.strides)
            self.device = ("cpu", None)
        elif mod.startswith("torch"):
            import torch
            kinds = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int32: "i32"}
            if obj.dtype not in kinds:
                _bad("%s: dtype %s is not supported (float32, float16, bfloat16, int32)" % (name, obj.dtype))
            self.dtype = kinds[obj.dtype]
            self.ptr = obj.data_ptr()
            self.shape = tuple(obj.shape)
            self.strides = tuple(obj.stride())
            self.device = ("cuda", obj.device.index) if obj.is_cuda else ("cpu", None)
        else:
            _bad("%s: expected a numpy.ndarray or a torch.Tensor, got %s" % (name, type(obj).__name__))

    def contiguous_from(self, dim):
        """Dims dim.. are C-contiguous."""
        expect = 1
        for size, stride in zip(reversed(self.shape[dim:]), reversed(self.strides[dim:])):
            if size != 1 and stride != expect:
                return False
            expect *= size
        return True


class _Call:
    """Collects a call's tensors, checks them, and picks the backend and stream."""

    def __init__(self, entry):
        self.entry = entry
        self.tensors = []

    def t(self, name, obj, shape, dtypes, token_strided=False, optional=False):
        """A tensor of `shape` (None = any size) and one of `dtypes`; returns its address (0 for None)."""
        if obj is None:
            if optional:
                return None
            _bad("%s: %s is required" % (self.entry, name))
        t = _T(name, obj)
        if len(t.shape) != len(shape) or any(w is not None and w != s for w, s in zip(shape, t.shape)):
            _bad("%s: %s has shape %s, expected %s" % (self.entry, name, list(t.shape),
                                                      ["*" if w is None else w for w in shape]))
        if t.dtype not in dtypes:
            _bad("%s: %s has dtype %s, expected %s" % (self.entry, name, t.dtype, " or ".join(dtypes)))
        if not t.contiguous_from(1 if token_strided else 0):
            _bad("%s: %s must be contiguous%s (strides %s)" % (self.entry, name,
                                                              " within a token" if token_strided else "", t.strides))
        if token_strided and len(t.shape) > 1 and t.shape[0] > 1:
            row = 1
            for s in t.shape[1:]:
                row *= s
            if t.strides[0] < row:
                _bad("%s: %s token stride %d is smaller than its row of %d" % (self.entry, name, t.strides[0], row))
        self.tensors.append(t)
        return t

    def launch(self, params):
        devices = {t.device for t in self.tensors}
        if len(devices) != 1:
            _bad("%s: tensors on different devices: %s" % (self.entry, sorted(str(d) for d in devices)))
        kind, index = devices.pop()
        lib = _library()
        fn = getattr(lib, self.entry)
        if kind == "cpu":
            st = fn(int(Backend.EMULATED), ctypes.byref(params), None)
        else:
            import torch
            with torch.cuda.device(index):
                stream = torch.cuda.current_stream(index).cuda_stream
                st = fn(int(Backend.CUDA), ctypes.byref(params), ctypes.c_void_p(stream))
        if st != Status.OK:
            _raise(st, lib.replayssm_last_error_message().decode())


def _ptr(t):
    return None if t is None else t.ptr


def _act(t):
    return {"f32": DType.F32, "f16": DType.F16, "bf16": DType.BF16}[t.dtype]


def _empty_like(x, shape):
    mod = type(x).__module__
    if mod.startswith("numpy"):
        import numpy as np
        return np.full(shape, np.nan, dtype=x.dtype)
    import torch
    return torch.full(shape, float("nan"), dtype=x.dtype, device=x.device)


def _tokens(c, p, q, k, v, o, gate, rows, scale, qk_l2norm):
    """Checks and fills the token fields R, V and D share; returns (T, H, HV, K, V, kda)."""
    ACT = ("f32", "f16", "bf16")
    unknown = set(gate) - {"a", "b", "A_log", "dt_bias", "g", "beta"}
    if unknown:
        raise TypeError("%s got unexpected keyword argument(s) %s" % (c.entry, ", ".join(sorted(unknown))))
    tq = c.t("q", q, (rows, None, None), ACT, token_strided=True)
    T, H, K = tq.shape
    tk = c.t("k", k, (T, H, K), (tq.dtype,), token_strided=True)
    tv = c.t("v", v, (T, None, None), (tq.dtype,), token_strided=True)
    _, HV, V = tv.shape
    to = c.t("o", o, (T, HV, V), (tq.dtype,), token_strided=True)
    a, b, A_log, dt_bias, g, beta = (gate.get(n) for n in ("a", "b", "A_log", "dt_bias", "g", "beta"))
    raw = any(x is not None for x in (a, b, A_log, dt_bias))
    pre = any(x is not None for x in (g, beta))
    if raw == pre:
        _bad("%s: give exactly one gate form: raw (a, b, A_log, dt_bias) or precomputed (g, beta)" % c.entry)
    if raw:
        ndim = len(getattr(a, "shape", ()))
        kda = ndim == 3
        ta = c.t("a", a, (T, HV, K) if kda else (T, HV), (tq.dtype,), token_strided=True)
        tb = c.t("b", b, (T, HV), (tq.dtype,), token_strided=True)
        tA = c.t("A_log", A_log, (HV,), ("f32",))
        td = c.t("dt_bias", dt_bias, (HV, K) if kda else (HV,), ("f32",))
        p.a, p.b, p.A_log, p.dt_bias = ta.ptr, tb.ptr, tA.ptr, td.ptr
        p.a_stride, p.b_stride = ta.strides[0] if T > 1 else HV * (K if kda else 1), tb.strides[0] if T > 1 else HV
    else:
        kda = len(getattr(g, "shape", ())) == 3
        tg = c.t("g", g, (T, HV, K) if kda else (T, HV), ("f32",))
        tbeta = c.t("beta", beta, (T, HV), ("f32",))
        p.g, p.beta = tg.ptr, tbeta.ptr
    p.q, p.k, p.v, p.o = tq.ptr, tk.ptr, tv.ptr, to.ptr
    stride = lambda t, row: t.strides[0] if T > 1 else row  # noqa: E731
    p.q_stride, p.k_stride = stride(tq, H * K), stride(tk, H * K)
    p.v_stride, p.o_stride = stride(tv, HV * V), stride(to, HV * V)
    p.H, p.HV, p.K, p.V = H, HV, K, V
    p.scale = K ** -0.5 if scale is None else float(scale)
    p.dtype = _act(tq)
    p.variant = Variant.KDA if kda else Variant.GDN
    p.qk_l2norm = int(bool(qk_l2norm))
    return T, H, HV, K, V, kda


def _max_seqlen(cu_seqlens):
    import numpy as np
    host = cu_seqlens.cpu().numpy() if hasattr(cu_seqlens, "cpu") else np.asarray(cu_seqlens)
    return max(int((host[1:] - host[:-1]).max(initial=1)), 1)


def recurrent(q, k, v, *, state, slots, cu_seqlens, o=None, write_state=True, snapshots=None, scale=None,
              qk_l2norm=True, max_seqlen=None, error_word=None, **gate):
    """Kernel R (the recurrent baseline) over ragged requests; returns o. `state` is
    [NS, HV, V, K] f32, updated in place when write_state. `max_seqlen` None reads cu_seqlens
    (a device sync for CUDA tensors: pass it in hot paths)."""
    c = _Call("replayssm_recurrent")
    p = _abi.RecurrentParams(struct_size=ctypes.sizeof(_abi.RecurrentParams))
    if o is None:
        o = _empty_like(q, (q.shape[0], v.shape[1], v.shape[2]))
    T, H, HV, K, V, _ = _tokens(c, p, q, k, v, o, gate, None, scale, qk_l2norm)
    ts = c.t("state", state, (None, HV, V, K), ("f32",))
    tsl = c.t("slots", slots, (None,), ("i32",))
    B = tsl.shape[0]
    tcu = c.t("cu_seqlens", cu_seqlens, (B + 1,), ("i32",))
    msl = _max_seqlen(cu_seqlens) if max_seqlen is None else int(max_seqlen)
    tsn = c.t("snapshots", snapshots, (B, msl, HV, V, K), ("f32",), optional=True)
    tew = c.t("error_word", error_word, (1,), ("u32", "i32"), optional=True)
    p.cu_seqlens, p.slots, p.state, p.snapshots, p.error_word = tcu.ptr, tsl.ptr, ts.ptr, _ptr(tsn), _ptr(tew)
    p.num_tokens, p.batch, p.max_seqlen, p.num_slots = T, B, msl, ts.shape[0]
    p.write_state = int(bool(write_state))
    c.launch(p)
    return o


def _spec_ring(c, ring, NL, NS, HV, V, K, act=None):
    """Checks a spec ring (ring_v, ring_k, ring_g, ring_beta); returns (pointers, H, W, kda, act)."""
    if ring is None or len(ring) != 4:
        _bad("%s: ring must be (ring_v, ring_k, ring_g, ring_beta)" % c.entry)
    rv, rk, rg, rb = ring
    tv = c.t("ring_v", rv, (NL, NS, HV, None, V), (act,) if act else ("f32", "f16", "bf16"))
    W = tv.shape[3]
    tk = c.t("ring_k", rk, (NL, NS, None, W, K), (tv.dtype,))
    kda = len(getattr(rg, "shape", ())) == 5
    tg = c.t("ring_g", rg, (NL, NS, HV, W, K) if kda else (NL, NS, HV, W), ("f32",))
    tb = c.t("ring_beta", rb, (NL, NS, HV, W), ("f32",))
    return (tv.ptr, tk.ptr, tg.ptr, tb.ptr), tk.shape[2], W, kda, tv


def verify(q, k, v, *, state, slots, cu_seqlens, layer, ring=None, parent=None, o=None, scale=None,
           qk_l2norm=True, max_seqlen=None, error_word=None, **gate):
    """Kernel V (VT with `parent`): all draft outputs of layer `layer` from the checkpoint
    (state [NL, NS, HV, V, K], read only) and, with `ring`, the raw inputs written to it."""
    c = _Call("replayssm_verify")
    p = _abi.VerifyParams(struct_size=ctypes.sizeof(_abi.VerifyParams))
    if o is None:
        o = _empty_like(q, (q.shape[0], v.shape[1], v.shape[2]))
    T, H, HV, K, V, kda = _tokens(c, p, q, k, v, o, gate, None, scale, qk_l2norm)
    ts = c.t("state", state, (None, None, HV, V, K), ("f32",))
    NL, NS = ts.shape[:2]
    tsl = c.t("slots", slots, (None,), ("i32",))
    B = tsl.shape[0]
    tcu = c.t("cu_seqlens", cu_seqlens, (B + 1,), ("i32",))
    tpa = c.t("parent", parent, (T,), ("i32",), optional=True)
    tew = c.t("error_word", error_word, (1,), ("u32", "i32"), optional=True)
    p.window = _abi.MAX_VERIFY_WINDOW
    if ring is not None:
        act = {DType.F32: "f32", DType.F16: "f16", DType.BF16: "bf16"}[DType(p.dtype)]
        (p.ring_v, p.ring_k, p.ring_g, p.ring_beta), rh, p.window, rkda, _ = _spec_ring(c, ring, NL, NS, HV, V, K, act)
        if rh != H or rkda != kda:
            _bad("replayssm_verify: the ring's H or gate shape does not match the inputs")
    p.cu_seqlens, p.parent, p.slots, p.state, p.error_word = tcu.ptr, _ptr(tpa), tsl.ptr, ts.ptr, _ptr(tew)
    p.num_tokens, p.batch, p.num_slots, p.num_layers, p.layer = T, B, NS, NL, int(layer)
    p.max_seqlen = _max_seqlen(cu_seqlens) if max_seqlen is None else int(max_seqlen)
    c.launch(p)
    return o


def _ring_problem(c, p, state, ring, qk_l2norm):
    ts = c.t("state", state, (None, None, None, None, None), ("f32",))
    NL, NS, HV, V, K = ts.shape
    ptrs, H, W, kda, tv = _spec_ring(c, ring, NL, NS, HV, V, K)
    p.state = ts.ptr
    p.ring_v, p.ring_k, p.ring_g, p.ring_beta = ptrs
    p.num_slots, p.num_layers, p.window = NS, NL, W
    p.H, p.HV, p.K, p.V = H, HV, K, V
    p.dtype, p.variant, p.qk_l2norm = _act(tv), Variant.KDA if kda else Variant.GDN, int(bool(qk_l2norm))
    return W


def fold(*, state, ring, slots, accept_lens=None, accept_paths=None, track_slots=None, track_steps=None,
         qk_l2norm=True, error_word=None):
    """Kernel F (FT with `accept_paths`): commits each live row's accepted ring records into the
    fp32 checkpoint of every layer, in place, bit-identical to kernel R."""
    c = _Call("replayssm_fold")
    p = _abi.FoldParams(struct_size=ctypes.sizeof(_abi.FoldParams))
    _ring_problem(c, p, state, ring, qk_l2norm)
    tsl = c.t("slots", slots, (None,), ("i32",))
    B = tsl.shape[0]
    tl = c.t("accept_lens", accept_lens, (B,), ("i32",), optional=True)
    tp = c.t("accept_paths", accept_paths, (B, None), ("i32",), optional=True)
    tts = c.t("track_slots", track_slots, (B,), ("i32",), optional=True)
    ttp = c.t("track_steps", track_steps, (B,), ("i32",), optional=True)
    tew = c.t("error_word", error_word, (1,), ("u32", "i32"), optional=True)
    p.slots, p.accept_lens, p.accept_paths = tsl.ptr, _ptr(tl), _ptr(tp)
    p.track_slots, p.track_steps, p.error_word = _ptr(tts), _ptr(ttp), _ptr(tew)
    p.batch, p.path_width = B, (tp.shape[1] if tp is not None else 0)
    c.launch(p)


def replay(*, state, ring, slots, counts, layer, qk_l2norm=True, error_word=None):
    """Kernel P: replays counts[b] ring records of layer `layer` into each live slot's checkpoint."""
    c = _Call("replayssm_replay")
    p = _abi.ReplayParams(struct_size=ctypes.sizeof(_abi.ReplayParams))
    _ring_problem(c, p, state, ring, qk_l2norm)
    tsl = c.t("slots", slots, (None,), ("i32",))
    B = tsl.shape[0]
    tc = c.t("counts", counts, (B,), ("i32",))
    tew = c.t("error_word", error_word, (1,), ("u32", "i32"), optional=True)
    p.slots, p.counts, p.error_word, p.batch, p.layer = tsl.ptr, tc.ptr, _ptr(tew), B, int(layer)
    c.launch(p)


def _decode_ring(c, p, state, decode_ring, kda=None):
    ts = c.t("state", state, (None, None, None, None, None), ("f32",))
    NL, NS, HV, V, K = ts.shape
    if decode_ring is None or len(decode_ring) != 3:
        _bad("%s: decode_ring must be (ring_d, ring_k, ring_g)" % c.entry)
    rd, rk, rg = decode_ring
    td = c.t("ring_d", rd, (NL, NS, HV, None, V), ("f32",))
    L = td.shape[3]
    tk = c.t("ring_k", rk, (NL, NS, None, L, K), ("f32",))
    gk = len(getattr(rg, "shape", ())) == 5
    tg = c.t("ring_g", rg, (NL, NS, HV, L, K) if gk else (NL, NS, HV, L), ("f32",))
    if kda is not None and gk != kda:
        _bad("%s: ring_g's shape does not match the gate's variant" % c.entry)
    p.state, p.ring_d, p.ring_k, p.ring_g = ts.ptr, td.ptr, tk.ptr, tg.ptr
    p.num_slots, p.num_layers, p.cache_len = NS, NL, L
    return NL, NS, HV, V, K, tk.shape[2], gk


def decode(q, k, v, *, state, decode_ring, slots, positions, layer, force_flush=None, o=None, scale=None,
           qk_l2norm=True, error_word=None, **gate):
    """Kernel D for layer `layer`, one token per row (row b = token b); `positions` is this step's
    cursor snapshot (decode_cursors SNAPSHOT). Returns o."""
    c = _Call("replayssm_decode")
    p = _abi.DecodeParams(struct_size=ctypes.sizeof(_abi.DecodeParams))
    if o is None:
        o = _empty_like(q, (q.shape[0], v.shape[1], v.shape[2]))
    T, H, HV, K, V, kda = _tokens(c, p, q, k, v, o, gate, None, scale, qk_l2norm)
    _decode_ring(c, p, state, decode_ring, kda)
    tsl = c.t("slots", slots, (T,), ("i32",))
    tpo = c.t("positions", positions, (T,), ("i32",))
    tff = c.t("force_flush", force_flush, (T,), ("i32",), optional=True)
    tew = c.t("error_word", error_word, (1,), ("u32", "i32"), optional=True)
    p.slots, p.positions, p.force_flush, p.error_word = tsl.ptr, tpo.ptr, _ptr(tff), _ptr(tew)
    p.batch, p.layer = T, int(layer)
    c.launch(p)
    return o


def decode_materialize(*, state, decode_ring, slots, positions, qk_l2norm=True, error_word=None):
    """Replays positions[b] pending records of every layer into slot slots[b]'s checkpoint."""
    c = _Call("replayssm_decode_materialize")
    p = _abi.DecodeParams(struct_size=ctypes.sizeof(_abi.DecodeParams))
    NL, NS, HV, V, K, H, kda = _decode_ring(c, p, state, decode_ring)
    tsl = c.t("slots", slots, (None,), ("i32",))
    B = tsl.shape[0]
    tpo = c.t("positions", positions, (B,), ("i32",))
    tew = c.t("error_word", error_word, (1,), ("u32", "i32"), optional=True)
    p.slots, p.positions, p.error_word, p.batch = tsl.ptr, tpo.ptr, _ptr(tew), B
    p.H, p.HV, p.K, p.V = H, HV, K, V
    p.dtype, p.variant, p.qk_l2norm = DType.F32, Variant.KDA if kda else Variant.GDN, int(bool(qk_l2norm))
    c.launch(p)


def decode_cursors(op, *, cursors, slots, cache_len, positions=None, force_flush=None, error_word=None):
    """The buffered-decode cursor protocol on device-resident cursors ([NS] int32): SNAPSHOT
    (positions <- cursors[slots]), ADVANCE (after the step's last layer), RESET."""
    c = _Call("replayssm_decode_cursors")
    p = _abi.CursorParams(struct_size=ctypes.sizeof(_abi.CursorParams))
    tc = c.t("cursors", cursors, (None,), ("i32",))
    tsl = c.t("slots", slots, (None,), ("i32",))
    B = tsl.shape[0]
    tpo = c.t("positions", positions, (B,), ("i32",), optional=CursorOp(op) == CursorOp.RESET)
    tff = c.t("force_flush", force_flush, (B,), ("i32",), optional=True)
    tew = c.t("error_word", error_word, (1,), ("u32", "i32"), optional=True)
    p.cursors, p.slots, p.positions, p.force_flush, p.error_word = tc.ptr, tsl.ptr, _ptr(tpo), _ptr(tff), _ptr(tew)
    p.batch, p.num_slots, p.cache_len, p.op = B, tc.shape[0], int(cache_len), int(CursorOp(op))
    c.launch(p)
