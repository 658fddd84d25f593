"""replayssm for Python engines: ctypes over the C ABI (include/replayssm.h), no compiled extension.

Tensors are NumPy arrays (host memory: the emulated backend runs the CUDA kernel source on the
CPU) or PyTorch tensors (CUDA tensors: the CUDA backend, launched on
`torch.cuda.current_stream()` of the tensors' device; CPU tensors: the emulated backend). Every
call checks dtypes, shapes, strides, devices, writeability (outputs and in-place buffers must be
writeable; inputs only read may be read-only) and the range and type of every integer argument
here, then the library checks them again; a refusal raises a `ReplaySSMError` subclass carrying
the status and a message naming the argument, its value and the limit.

Device-side indices (slots, cu_seqlens, accept lengths, counts, cursors, positions, tree
parents, track slots) are checked by the kernels, which skip the rows they cannot trust and set
`DevErr` bits in an error word. On the host (emulated) backend they are host memory, so the
library checks them before launching and raises `InvalidArgument` naming the index (nothing is
written); behind that, every call still reads the word: it passes a call-local word, ORs any bit
set into your `error_word` (if given) and raises `DeviceIndexError` naming the bits. On CUDA
nothing is read back (that would synchronise and
break graph capture): pass an `error_word` and call `check_error_word(error_word)` after the
stream (or the CUDA graph replay) has run; it raises `DeviceIndexError` and resets the word.
Nothing is synchronised and nothing is allocated except the outputs you leave as None.

Layouts (NL layers, NS slots, H key heads, HV value heads, W window, L cache length):
  q, k [T, H, K]; v, o [T, HV, V] (act dtype; the token dim may be strided)
  raw gate a [T, HV] (KDA [T, HV, K]), b [T, HV] (act); A_log [HV], dt_bias [HV] (KDA [HV, K]) f32;
        g = -exp(A_log) softplus(a + dt_bias), or with lower_bound=L (finite, negative: Kimi's
        safe gate) g = L sigmoid(exp(A_log) (a + dt_bias))
  precomputed gate g [T, HV] (KDA [T, HV, K]), beta [T, HV] f32
  state [NL, NS, HV, V, K] f32 (recurrent: [NS, HV, V, K]); each slot's [HV, V, K] contiguous, the
        layer and slot dims of any pitch the library accepts (a page-major pool's strided view)
  spec ring (ring_v [NL, NS, HV, W, V], ring_k [NL, NS, H, W, K] act, ring_g [NL, NS, HV, W(, K)],
             ring_beta [NL, NS, HV, W] f32)
  decode ring (ring_d [NL, NS, HV, L, V], ring_k [NL, NS, H, L, K]: f32, or both the act's f16/bf16;
             ring_g [NL, NS, HV, L(, K)] f32)
  buffered spec ring (verify_buffered): the spec ring with W = L positions (the cache length, at most
        64), ring_u [NL, NS, HV, L, V] f32, cursors [NS] int32
  slots [B] int32 (-1 = null row), cu_seqlens [B+1] int32, accept_lens [B] int32 (bonus included)
"""

import collections
import ctypes
import functools
import math
import numbers
import operator

from ._abi import ABI_VERSION, Backend, BufferedOp, CursorOp, DeferOp, DevErr, DType, Status, Variant, load
from . import _abi

__all__ = [
    "ABI_VERSION", "Backend", "BufferedOp", "CursorOp", "DeferOp", "DevErr", "DType", "Status", "Variant",
    "ReplaySSMError", "InvalidArgument", "Unsupported", "CudaError", "EmulatorError", "StructSizeError",
    "BackendUnavailable", "ConfigRefused", "InternalError", "DeviceIndexError",
    "version", "backend_available", "validate_config", "check_error_word",
    "recurrent", "verify", "fold", "replay", "decode", "decode_materialize", "decode_cursors", "verify_fold",
    "defer", "verify_buffered", "buffered",
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


class DeviceIndexError(ReplaySSMError, ValueError):
    """The library accepted the call but the kernels flagged device-side values they could not
    trust (and skipped those rows): `.bits` is the `DevErr` set, `.message` names each bit.
    `.status` is DEVICE_REPORTED, the C ABI's status for the same finding
    (`replayssm_check_error_word`)."""

    def __init__(self, where, bits):
        bits = int(bits) & 0xFFFFFFFF
        message = "%s: the kernels set device error bits %#x: %s" % (where, bits, _abi.describe_deverr(_library(), bits))
        Exception.__init__(self, "DEVICE_REPORTED: " + message)
        self.status = Status.DEVICE_REPORTED
        self.message = message
        self.bits = DevErr(bits)


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


def _entry(fn):
    """A public entry: a value that does not fit its C field becomes an InvalidArgument naming the
    entry (the user-facing checks below catch user values first, with their real limits)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except _abi.FieldRangeError as e:
            _bad("%s: %s" % (fn.__name__, e))
    return wrapper


# --- scalar arguments -----------------------------------------------------------------------
# ctypes stores ints into int32 fields modulo 2**32 and floats into ints by truncation, silently:
# every user-passed scalar is checked here, by type and against its real limit, before that.

def _is_bool(value):
    # bool and numpy.bool_ (which still converts to an index with only a DeprecationWarning).
    return isinstance(value, bool) or type(value).__name__ in ("bool_", "bool")


def _int(where, name, value, lo, hi, why=""):
    """`value` as an int in lo..=hi; refuses bools, floats and anything without __index__."""
    if _is_bool(value):
        _bad("%s: %s = %r is a bool, expected an integer in %d..=%d%s" % (where, name, value, lo, hi, why))
    try:
        v = operator.index(value)
    except TypeError:
        _bad("%s: %s = %r is not an integer (%s), expected an integer in %d..=%d%s"
             % (where, name, value, type(value).__name__, lo, hi, why))
    if not lo <= v <= hi:
        _bad("%s: %s = %d is out of range, must be in %d..=%d%s" % (where, name, v, lo, hi, why))
    return v


def _flag(where, name, value):
    """A boolean option as 0/1: True/False (or 0/1); refuses e.g. the string "false" (truthy)."""
    if _is_bool(value):
        return int(bool(value))
    try:
        v = operator.index(value)
    except TypeError:
        v = None
    if v not in (0, 1):
        _bad("%s: %s = %r is not a bool, expected True/False (or 0/1)" % (where, name, value))
    return v


def _enum(where, name, value, enum):
    values = [int(m) for m in enum]
    v = _int(where, name, value, min(values), max(values), " (%s)" % ", ".join(
        "%d = %s" % (int(m), m.name) for m in enum))
    return enum(v)


def _f32_arg(where, name, value):
    """`value` as the ABI's float32: a real number that float32 represents (a finite one not past
    its range nor flushed to 0). Whether the value is usable is the library's rule."""
    if _is_bool(value) or not isinstance(value, numbers.Real):
        _bad("%s: %s = %r is not a real number (%s)" % (where, name, value, type(value).__name__))
    v = float(value)
    if math.isfinite(v) and (abs(v) > _abi._F32_MAX or (v != 0 and _abi.f32(v).value == 0)):
        _bad("%s: %s = %r is outside float32's range: |%s| must be 0 or in 1.4e-45..=%.8g"
             % (where, name, value, name, _abi._F32_MAX))
    return v


def _scale(where, value):
    return _f32_arg(where, "scale", value)


_I32_MAX = 2 ** 31 - 1


def version():
    """(library version as major*10000+minor*100+patch, C ABI version)."""
    lib = _library()
    return lib.replayssm_version(), lib.replayssm_abi_version()


def backend_available(backend):
    """(True, "") when `backend` (a Backend) can run here, else (False, the reason)."""
    backend = _enum("backend_available", "backend", backend, Backend)
    lib = _library()
    st = lib.replayssm_backend_available(int(backend))
    return st == Status.OK, lib.replayssm_last_error_message().decode()


def validate_config(args):
    """Checks engine flags spelled as SGLang spells them (e.g. ["--enable-linear-replayssm-spec",
    "--speculative-algorithm", "EAGLE"]) against the capability gates. Returns the resolved
    configuration as text (warnings as "warning: " lines); raises ConfigRefused with the rule,
    the value and the fix, or InvalidArgument for an unknown flag or value."""
    lib = _library()
    if isinstance(args, (str, bytes)):
        # A lone string would be split into one-character flags.
        _bad("validate_config: args = %r is a string, expected a list of flags" % (args,))
    encoded = [str(a).encode() for a in args]
    for a, e in zip(args, encoded):
        if b"\0" in e:
            # C strings end at the first NUL: "EAGLE\0junk" would be read as "EAGLE".
            _bad("validate_config: argument %r contains a NUL character" % (a,))
    argv = (ctypes.c_char_p * max(len(encoded), 1))(*encoded)
    out = ctypes.create_string_buffer(16384)
    st = lib.replayssm_validate_config(len(encoded), argv, out, len(out))
    if st != Status.OK:
        _raise(st, out.value.decode() or lib.replayssm_last_error_message().decode())
    return out.value.decode()


# --- tensors --------------------------------------------------------------------------------

class _T:
    """One tensor as the ABI sees it: address, shape, element strides, dtype, device."""

    __slots__ = ("name", "ptr", "shape", "strides", "dtype", "device", "obj", "writeable", "itemsize", "written")

    def __init__(self, name, obj):
        self.name, self.obj = name, obj
        self.written = False
        mod = type(obj).__module__
        if mod.startswith("numpy"):
            import numpy as np
            if not isinstance(obj, np.ndarray):
                _bad("%s: expected a numpy.ndarray, got a %s (%r)" % (name, type(obj).__name__, obj))
            if isinstance(obj, np.ma.MaskedArray):
                # The kernels would read the masked-out values as if they were data.
                _bad("%s: a numpy masked array is not supported (its mask would be ignored): pass .filled(...)"
                     % name)
            kinds = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(np.int32): "i32",
                     np.dtype(np.uint32): "u32"}
            # NumPy has no bfloat16 of its own; ml_dtypes' (JAX's) is read by name, not imported.
            bf16 = obj.dtype.name == "bfloat16" and obj.dtype.itemsize == 2
            if obj.dtype not in kinds and not bf16:
                _bad("%s: dtype %s is not supported (float32, float16, int32, uint32, ml_dtypes' bfloat16; or "
                     "torch tensors)" % (name, obj.dtype))
            if not obj.flags.aligned:
                # e.g. np.frombuffer(..., offset=1): the kernels load whole elements.
                _bad("%s: address %#x is not aligned to its %d-byte elements" % (name, obj.ctypes.data, obj.itemsize))
            self.dtype = "bf16" if bf16 else kinds[obj.dtype]
            self.itemsize = obj.itemsize
            self.ptr = obj.ctypes.data
            self.shape = tuple(obj.shape)
            if any(s % obj.itemsize for s in obj.strides):
                _bad("%s: strides %s are not whole elements" % (name, obj.strides))
            self.strides = tuple(s // obj.itemsize for s in obj.strides)
            self.device = ("cpu", None)
            self.writeable = bool(obj.flags.writeable)
        elif mod.startswith("torch"):
            # No `import torch` here: the checks read only the tensor's own attributes.
            dev = obj.device
            kind = getattr(dev, "type", str(dev))
            if kind not in ("cpu", "cuda"):
                # A meta tensor has no memory (data_ptr 0); other devices' memory is not the
                # host's nor CUDA's: the library would read it as such.
                _bad("%s: a tensor on device %s: only cpu (emulated backend) and cuda tensors are supported"
                     % (name, dev))
            layout = getattr(obj, "layout", None)
            if layout is not None and str(layout) != "torch.strided":
                _bad("%s: layout %s is not supported (dense strided tensors only)" % (name, layout))
            for flag, fix in (("is_neg", "resolve_neg"), ("is_conj", "resolve_conj")):
                # The memory of a lazily negated (conjugated) view holds the un-negated values.
                if getattr(obj, flag, None) is not None and getattr(obj, flag)():
                    _bad("%s: %s() is True (a lazy view: its memory holds the values before the op); "
                         "call .%s() first" % (name, flag, fix))
            kinds = {"torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16", "torch.int32": "i32"}
            if str(obj.dtype) not in kinds:
                _bad("%s: dtype %s is not supported (float32, float16, bfloat16, int32)" % (name, obj.dtype))
            self.dtype = kinds[str(obj.dtype)]
            self.itemsize = 4 if self.dtype in ("f32", "i32") else 2
            self.ptr = obj.data_ptr()
            self.shape = tuple(int(s) for s in obj.shape)
            if not self.ptr:
                _bad("%s: data_ptr() is 0 (a tensor without storage, shape %s): the library needs a real address"
                     % (name, list(self.shape)))
            self.strides = tuple(obj.stride())
            self.device = ("cuda", dev.index) if kind == "cuda" else ("cpu", None)
            self.writeable = True  # torch has no read-only flag
        else:
            _bad("%s: expected a numpy.ndarray or a torch.Tensor, got %s" % (name, type(obj).__name__))

    def span(self):
        """The bytes [lo, hi) between its first and last element."""
        lo = hi = 0
        for size, stride in zip(self.shape, self.strides):
            if size > 1:
                if stride < 0:
                    lo += (size - 1) * stride
                else:
                    hi += (size - 1) * stride
        return self.ptr + lo * self.itemsize, self.ptr + (hi + 1) * self.itemsize

    def runs(self, limit):
        """Its memory as sorted, disjoint byte runs [lo, hi) (its contiguous inner dims make one
        run), or None past `limit` runs."""
        d = len(self.shape)
        while d > 0 and self.contiguous_from(d - 1):
            d -= 1
        block = self.itemsize
        for size in self.shape[d:]:
            block *= size
        offsets = [0]
        for size, stride in zip(self.shape[:d], self.strides[:d]):
            if len(offsets) * size > limit:
                return None
            offsets = [o + i * stride * self.itemsize for o in offsets for i in range(size)]
        return sorted((self.ptr + o, self.ptr + o + block) for o in offsets)

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

    def t(self, name, obj, shape, dtypes, token_strided=False, optional=False, written=False, empty_ok=False,
          pool_dims=0):
        """A tensor of `shape` (None = any size) and one of `dtypes`; returns its address (0 for None).
        `written`: the call writes it (it must be writeable); `empty_ok`: dim 0 may be 0 (zero tokens);
        `pool_dims`: its leading dims (layers, slots of a checkpoint pool) may have any pitch, the
        library checks them (see _pool_pitch_rule and _fill_base)."""
        if obj is None:
            if optional:
                return None
            _bad("%s: %s is required" % (self.entry, name))
        t = _T(name, obj)
        t.written = bool(written)
        if len(t.shape) != len(shape) or any(w is not None and w != s for w, s in zip(shape, t.shape)):
            _bad("%s: %s has shape %s, expected %s" % (self.entry, name, list(t.shape),
                                                      ["*" if w is None else w for w in shape]))
        if t.dtype not in dtypes:
            _bad("%s: %s has dtype %s, expected %s" % (self.entry, name, t.dtype, " or ".join(dtypes)))
        if written and not t.writeable:
            # Writing through ctypes ignores the flag: a read-only memmap segfaults, an array over
            # an immutable bytes object is silently mutated.
            _bad("%s: %s is read-only (flags.writeable is False) and this call writes it: pass a writeable array"
                 % (self.entry, name))
        for dim, size in enumerate(t.shape):
            if size == 0 and not (dim == 0 and empty_ok):
                what = "0 tokens" if token_strided and dim == 0 else "size 0 in dim %d" % dim
                _bad("%s: %s has %s (shape %s): %s" % (self.entry, name, what, list(t.shape),
                                                      "this entry needs at least 1 token" if token_strided and dim == 0
                                                      else "every size must be at least 1"))
        if 0 in t.shape:
            # Nothing is addressed (numpy gives zero-size arrays all-zero strides): no layout to check.
            self.tensors.append(t)
            return t
        if not t.contiguous_from(1 if token_strided else pool_dims):
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

    def launch(self, params, error_word=None):
        """Runs the entry. On the host backend the kernels' error word is always read: a call-local
        word is passed, its bits ORed into `error_word` (the caller's _T, if any), and any bit set
        raises DeviceIndexError. On CUDA the caller's word goes to the kernels as is."""
        devices = {t.device for t in self.tensors}
        if len(devices) != 1:
            _bad("%s: tensors on different devices: %s" % (self.entry, sorted(str(d) for d in devices)))
        kind, index = devices.pop()
        self.check_aliasing()
        lib = _library()
        fn = getattr(lib, self.entry)
        if kind == "cpu":
            scratch = ctypes.c_uint32(0)
            _error_word_holder(params).error_word = ctypes.addressof(scratch)
            st = fn(int(Backend.EMULATED), ctypes.byref(params), None)
        else:
            import torch
            with torch.cuda.device(index):
                stream = torch.cuda.current_stream(index).cuda_stream
                st = fn(int(Backend.CUDA), ctypes.byref(params), ctypes.c_void_p(stream))
        if st != Status.OK:
            _raise(st, lib.replayssm_last_error_message().decode())
        if kind == "cpu" and scratch.value:
            if error_word is not None:
                word = ctypes.c_uint32.from_address(error_word.ptr)
                word.value |= scratch.value
            raise DeviceIndexError(self.entry, scratch.value)


    # A strided view with more runs than this is compared by its first-to-last span alone.
    _MAX_RUNS = 1 << 18

    def check_aliasing(self):
        """Refuses a buffer the call writes that shares memory with any other argument (an output
        passed as an input, the pool passed as the ring, ...): the kernels would read what they
        are writing. Exact for strided views (an envelope pool's slots interleave other state)."""
        live = [t for t in self.tensors if 0 not in t.shape]
        for i, a in enumerate(live):
            for b in live[i + 1:]:
                if not (a.written or b.written):
                    continue
                (alo, ahi), (blo, bhi) = a.span(), b.span()
                if ahi <= blo or bhi <= alo:
                    continue
                ra, rb = a.runs(self._MAX_RUNS), b.runs(self._MAX_RUNS)
                if ra is not None and rb is not None and not _runs_overlap(ra, rb):
                    continue
                w, o = (a, b) if a.written else (b, a)
                _bad("%s: %s (bytes %#x..%#x) shares memory with %s (bytes %#x..%#x): a buffer this call "
                     "writes must not overlap any other argument" % (self.entry, w.name, *w.span(), o.name,
                                                                     *o.span()))


def _runs_overlap(ra, rb):
    """Whether two sorted lists of disjoint byte runs share a byte."""
    i = j = 0
    while i < len(ra) and j < len(rb):
        (alo, ahi), (blo, bhi) = ra[i], rb[j]
        if alo < bhi and blo < ahi:
            return True
        if ahi <= bhi:
            i += 1
        else:
            j += 1
    return False


def _pool_pitch_rule(entry, ts, slot_dim):
    """A checkpoint pool's layer and slot dims (those before `slot_dim` + 1) each at least one
    slot's checkpoint apart. The ABI's pitch 0 means "packed", so a broadcast dim (stride 0: torch
    `expand`, NumPy `broadcast_to`) would be addressed as separate slots past the view: refused,
    naming the tensor and its strides (the library checks the rest of the pitch rule)."""
    slot = 1
    for size in ts.shape[slot_dim + 1:]:
        slot *= size
    for d, what in enumerate(("layer", "slot")[1 - slot_dim:]):
        if ts.shape[d] > 1 and ts.strides[d] < slot:
            _bad("%s: %s has shape %s and strides %s: its %s dim (%d entries) has stride %d, less than one "
                 "slot's checkpoint (%d elements)%s; every %s needs its own memory" % (
                     entry, ts.name, list(ts.shape), list(ts.strides), what, ts.shape[d], ts.strides[d], slot,
                     " (a broadcast view: expand / broadcast_to)" if ts.strides[d] == 0 else "", what))


# What the base's head and type fields hold (from the tokens, or from a ring without tokens).
_Problem = collections.namedtuple("_Problem", "H HV K V dtype variant qk_l2norm")


def _fill_base(b, prob, ts, slot_dim, tsl, tew, layer=0):
    """Fills a params base (`p.base`, VF's `p.verify.base`: replayssm_base_params) from the
    binding's checked objects: the pool `ts` ([NS, ...] with slot_dim 0, one layer: kernel R;
    [NL, NS, ...] with slot_dim 1), its slot (and layer) pitch from its strides (an engine's
    page-major pool, "envelope": one slot holds every layer, is a strided view; 0 where a dim has
    one entry; _pool_pitch_rule checked them), the rows `tsl` (batch = its length), the error word
    `tew` (or None), the layer, and the heads, dtype, variant and qk_l2norm of `prob` (a _Problem)."""
    pitch = lambda d: ts.strides[d] if ts.shape[d] > 1 else 0  # noqa: E731
    b.state, b.slots, b.error_word = ts.ptr, tsl.ptr, _ptr(tew)
    b.state_slot_stride = pitch(slot_dim)
    b.state_layer_stride = pitch(0) if slot_dim == 1 else 0
    b.batch, b.num_slots = tsl.shape[0], ts.shape[slot_dim]
    b.num_layers = ts.shape[0] if slot_dim == 1 else 1
    b.layer = layer
    b.H, b.HV, b.K, b.V = prob.H, prob.HV, prob.K, prob.V
    b.dtype, b.variant, b.qk_l2norm = int(prob.dtype), int(prob.variant), prob.qk_l2norm


def _fill_ring(r, ptrs, window):
    """Fills a spec ring part (`p.ring`: replayssm_ring_params): the four pointers (v, k, g, beta;
    all None without a ring) and its window (1 without a ring)."""
    r.v, r.k, r.g, r.beta = ptrs
    r.window = window


def _error_word_holder(params):
    """The struct whose `error_word` the kernels set: the base (VF, VB: their verify's base), or the
    params themselves (cursors, defer, buffered)."""
    if hasattr(params, "verify"):
        return params.verify.base
    return params.base if hasattr(params, "base") else params


def check_error_word(word):
    """Reads a device error word ([1] uint32 or int32: a NumPy array, a CPU or CUDA tensor), resets
    it to 0 and raises DeviceIndexError naming its bits; returns None when it is 0. Use it with
    CUDA tensors after the stream that ran the calls (or replayed the CUDA graph capturing them)
    has synchronised: a CUDA word is read with `.item()` and zeroed on torch's current stream."""
    c = _Call("check_error_word")
    t = c.t("error_word", word, (1,), ("u32", "i32"), written=True)
    if t.device[0] == "cpu":
        cell = ctypes.c_uint32.from_address(t.ptr)
        bits = cell.value
        cell.value = 0
    else:
        bits = int(word.item()) & 0xFFFFFFFF
        word.zero_()
    if bits:
        raise DeviceIndexError("check_error_word", bits)


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


def _tokens(c, t, q, k, v, o, gate, scale, qk_l2norm, empty_ok):
    """Checks the token arguments R, V and D share and fills the token part `t` (`p.tokens`, VF's
    `p.verify.tokens`: replayssm_token_params); allocates o when None. Returns (o, T, problem): the
    heads, dtype, variant and qk_l2norm the base gets (_fill_base). `empty_ok`: the entry accepts
    zero tokens (the C ABI's num_tokens >= 0)."""
    ACT = ("f32", "f16", "bf16")
    unknown = set(gate) - {"a", "b", "A_log", "dt_bias", "lower_bound", "g", "beta"}
    if unknown:
        raise TypeError("%s got unexpected keyword argument(s) %s" % (c.entry, ", ".join(sorted(unknown))))
    tok = dict(token_strided=True, empty_ok=empty_ok)
    tq = c.t("q", q, (None, None, None), ACT, **tok)
    T, H, K = tq.shape
    tk = c.t("k", k, (T, H, K), (tq.dtype,), **tok)
    tv = c.t("v", v, (T, None, None), (tq.dtype,), **tok)
    _, HV, V = tv.shape
    if o is None:
        o = _empty_like(q, (T, HV, V))
    to = c.t("o", o, (T, HV, V), (tq.dtype,), written=True, **tok)
    a, b, A_log, dt_bias, g, beta = (gate.get(n) for n in ("a", "b", "A_log", "dt_bias", "g", "beta"))
    # Each form given is checked and passed; the library refuses both or neither (one rule).
    raw = any(x is not None for x in (a, b, A_log, dt_bias))
    pre = any(x is not None for x in (g, beta))
    kda = False
    if raw:
        ndim = len(getattr(a, "shape", ()))
        kda = ndim == 3
        ta = c.t("a", a, (T, HV, K) if kda else (T, HV), (tq.dtype,), **tok)
        tb = c.t("b", b, (T, HV), (tq.dtype,), **tok)
        tA = c.t("A_log", A_log, (HV,), ("f32",))
        td = c.t("dt_bias", dt_bias, (HV, K) if kda else (HV,), ("f32",))
        t.a, t.b, t.A_log, t.dt_bias = ta.ptr, tb.ptr, tA.ptr, td.ptr
        t.a_stride, t.b_stride = ta.strides[0] if T > 1 else HV * (K if kda else 1), tb.strides[0] if T > 1 else HV
    if pre:
        kda = kda or len(getattr(g, "shape", ())) == 3
        tg = c.t("g", g, (T, HV, K) if kda else (T, HV), ("f32",), empty_ok=empty_ok)
        tbeta = c.t("beta", beta, (T, HV), ("f32",), empty_ok=empty_ok)
        t.g, t.beta = tg.ptr, tbeta.ptr
    t.q, t.k, t.v, t.o = tq.ptr, tk.ptr, tv.ptr, to.ptr
    stride = lambda x, row: x.strides[0] if T > 1 else row  # noqa: E731
    t.q_stride, t.k_stride = stride(tq, H * K), stride(tk, H * K)
    t.v_stride, t.o_stride = stride(tv, HV * V), stride(to, HV * V)
    t.scale = K ** -0.5 if scale is None else _scale(c.entry, scale)
    # The raw gate's form (None: softplus); its rule (finite, negative, raw gate only) is the library's.
    if gate.get("lower_bound") is not None:
        t.lower_bound = _f32_arg(c.entry, "lower_bound", gate["lower_bound"])
    prob = _Problem(H, HV, K, V, _act(tq), Variant.KDA if kda else Variant.GDN,
                    _flag(c.entry, "qk_l2norm", qk_l2norm))
    return o, T, prob


def _max_seqlen(c, cu_seqlens, max_seqlen):
    """The caller's max_seqlen (an int32; the library checks its range); None reads cu_seqlens
    (a device sync on CUDA)."""
    if max_seqlen is not None:
        return _i32(c.entry, "max_seqlen", max_seqlen)
    import numpy as np
    host = cu_seqlens.cpu().numpy() if hasattr(cu_seqlens, "cpu") else np.asarray(cu_seqlens)
    host = host.astype(np.int64)  # int32 differences of hostile values overflow
    msl = max(int((host[1:] - host[:-1]).max(initial=1)), 1)
    return _i32(c.entry, "max_seqlen (read from cu_seqlens)", msl)


def _error_word(c, error_word):
    return c.t("error_word", error_word, (1,), ("u32", "i32"), optional=True, written=True)


@_entry
def recurrent(q, k, v, *, state, slots, cu_seqlens, o=None, write_state=True, snapshots=None, scale=None,
              qk_l2norm=True, max_seqlen=None, error_word=None, record_dtype=DType.F32, **gate):
    """Kernel R (the recurrent baseline) over ragged requests; returns o. `state` is
    [NS, HV, V, K] f32, updated in place when write_state. `max_seqlen` None reads cu_seqlens
    (a device sync for CUDA tensors: pass it in hot paths). Zero tokens are allowed.
    `record_dtype` (a DType: F32, or q's F16/BF16) rounds each token's corrected delta and key
    as a decode ring of that dtype holds them: the state kernel D with such a ring flushes."""
    c = _Call("replayssm_recurrent")
    p = _abi.RecurrentParams(struct_size=ctypes.sizeof(_abi.RecurrentParams))
    write_state = _flag(c.entry, "write_state", write_state)
    o, T, prob = _tokens(c, p.tokens, q, k, v, o, gate, scale, qk_l2norm, empty_ok=True)
    HV, V, K = prob.HV, prob.V, prob.K
    ts = c.t("state", state, (None, HV, V, K), ("f32",), written=bool(write_state), pool_dims=1)
    _pool_pitch_rule(c.entry, ts, 0)
    tsl = c.t("slots", slots, (None,), ("i32",))
    B = tsl.shape[0]
    tcu = c.t("cu_seqlens", cu_seqlens, (B + 1,), ("i32",))
    msl = _max_seqlen(c, cu_seqlens, max_seqlen)
    tsn = c.t("snapshots", snapshots, (B, msl, HV, V, K), ("f32",), optional=True, written=True)
    tew = _error_word(c, error_word)
    _fill_base(p.base, prob, ts, 0, tsl, tew)  # one layer: num_layers 1, layer 0
    p.cu_seqlens, p.snapshots = tcu.ptr, _ptr(tsn)
    p.num_tokens, p.max_seqlen, p.write_state = T, msl, write_state
    p.record_dtype = _i32(c.entry, "record_dtype", record_dtype)
    c.launch(p, tew)
    return o


def _spec_ring(c, ring, NL, NS, HV, V, K, act=None, written=False):
    """Checks a spec ring (ring_v, ring_k, ring_g, ring_beta); returns (pointers, H, W, kda, act)."""
    if ring is None or len(ring) != 4:
        _bad("%s: ring must be (ring_v, ring_k, ring_g, ring_beta)" % c.entry)
    rv, rk, rg, rb = ring
    w = dict(written=written)
    tv = c.t("ring_v", rv, (NL, NS, HV, None, V), (act,) if act else ("f32", "f16", "bf16"), **w)
    W = tv.shape[3]
    tk = c.t("ring_k", rk, (NL, NS, None, W, K), (tv.dtype,), **w)
    kda = len(getattr(rg, "shape", ())) == 5
    tg = c.t("ring_g", rg, (NL, NS, HV, W, K) if kda else (NL, NS, HV, W), ("f32",), **w)
    tb = c.t("ring_beta", rb, (NL, NS, HV, W), ("f32",), **w)
    return (tv.ptr, tk.ptr, tg.ptr, tb.ptr), tk.shape[2], W, kda, tv


def _i32(where, name, value):
    """`value` as the ABI's int32 field `name`: the type only. Its range is the library's rule
    (src/checks/params.rs), reported with the C ABI's message: one definition of each rule."""
    return _int(where, name, value, -_I32_MAX - 1, _I32_MAX, " (an int32)")


def _layer(c, layer):
    return _i32(c.entry, "layer", layer)


_ACT_NAME = {DType.F32: "f32", DType.F16: "f16", DType.BF16: "bf16"}


@_entry
def verify(q, k, v, *, state, slots, cu_seqlens, layer, ring=None, parent=None, o=None, scale=None,
           qk_l2norm=True, max_seqlen=None, error_word=None, **gate):
    """Kernel V (VT with `parent`): all draft outputs of layer `layer` from the checkpoint
    (state [NL, NS, HV, V, K], read only) and, with `ring`, the raw inputs written to it."""
    c = _Call("replayssm_verify")
    p = _abi.VerifyParams(struct_size=ctypes.sizeof(_abi.VerifyParams))
    o, T, prob = _tokens(c, p.tokens, q, k, v, o, gate, scale, qk_l2norm, empty_ok=True)
    H, HV, V, K = prob.H, prob.HV, prob.V, prob.K
    ts = c.t("state", state, (None, None, HV, V, K), ("f32",), pool_dims=2)
    _pool_pitch_rule(c.entry, ts, 1)
    NL, NS = ts.shape[:2]
    layer = _layer(c, layer)
    tsl = c.t("slots", slots, (None,), ("i32",))
    B = tsl.shape[0]
    tcu = c.t("cu_seqlens", cu_seqlens, (B + 1,), ("i32",))
    tpa = c.t("parent", parent, (T,), ("i32",), optional=True, empty_ok=True)
    tew = _error_word(c, error_word)
    ring_ptrs, window = (None,) * 4, 1  # without a ring: NULL pointers, window 1
    if ring is not None:
        ring_ptrs, rh, window, rkda, _ = _spec_ring(c, ring, NL, NS, HV, V, K, _ACT_NAME[DType(prob.dtype)],
                                                    written=True)
        if rh != H or rkda != (prob.variant == Variant.KDA):
            _bad("replayssm_verify: the ring's H or gate shape does not match the inputs")
    _fill_base(p.base, prob, ts, 1, tsl, tew, layer)
    _fill_ring(p.ring, ring_ptrs, window)
    p.cu_seqlens, p.parent, p.num_tokens = tcu.ptr, _ptr(tpa), T
    p.max_seqlen = _max_seqlen(c, cu_seqlens, max_seqlen)
    c.launch(p, tew)
    return o


def _ring_problem(c, state, ring, qk_l2norm):
    """Checks F's and P's pool and spec ring; returns (pool, problem, ring pointers, W)."""
    ts = c.t("state", state, (None, None, None, None, None), ("f32",), written=True, pool_dims=2)
    _pool_pitch_rule(c.entry, ts, 1)
    NL, NS, HV, V, K = ts.shape
    ptrs, H, W, kda, tv = _spec_ring(c, ring, NL, NS, HV, V, K)
    prob = _Problem(H, HV, K, V, _act(tv), Variant.KDA if kda else Variant.GDN,
                    _flag(c.entry, "qk_l2norm", qk_l2norm))
    return ts, prob, ptrs, W


@_entry
def fold(*, state, ring, slots, accept_lens=None, accept_paths=None, track_slots=None, track_steps=None,
         qk_l2norm=True, error_word=None):
    """Kernel F (FT with `accept_paths`): commits each live row's accepted ring records into the
    fp32 checkpoint of every layer, in place, bit-identical to kernel R."""
    c = _Call("replayssm_fold")
    p = _abi.FoldParams(struct_size=ctypes.sizeof(_abi.FoldParams))
    ts, prob, ring_ptrs, W = _ring_problem(c, state, ring, qk_l2norm)
    tsl = c.t("slots", slots, (None,), ("i32",))
    B = tsl.shape[0]
    tl = c.t("accept_lens", accept_lens, (B,), ("i32",), optional=True)
    tp = c.t("accept_paths", accept_paths, (B, None), ("i32",), optional=True)
    tts = c.t("track_slots", track_slots, (B,), ("i32",), optional=True)
    ttp = c.t("track_steps", track_steps, (B,), ("i32",), optional=True)
    tew = _error_word(c, error_word)
    _fill_base(p.base, prob, ts, 1, tsl, tew)  # all layers: layer 0
    _fill_ring(p.ring, ring_ptrs, W)
    p.accept_lens, p.accept_paths = _ptr(tl), _ptr(tp)
    p.track_slots, p.track_steps = _ptr(tts), _ptr(ttp)
    p.path_width = tp.shape[1] if tp is not None else 0
    c.launch(p, tew)


@_entry
def replay(*, state, ring, slots, counts, layer, qk_l2norm=True, error_word=None):
    """Kernel P: replays counts[b] ring records of layer `layer` into each live slot's checkpoint."""
    c = _Call("replayssm_replay")
    p = _abi.ReplayParams(struct_size=ctypes.sizeof(_abi.ReplayParams))
    ts, prob, ring_ptrs, W = _ring_problem(c, state, ring, qk_l2norm)
    layer = _layer(c, layer)
    tsl = c.t("slots", slots, (None,), ("i32",))
    B = tsl.shape[0]
    tc = c.t("counts", counts, (B,), ("i32",))
    tew = _error_word(c, error_word)
    _fill_base(p.base, prob, ts, 1, tsl, tew, layer)
    _fill_ring(p.ring, ring_ptrs, W)
    p.counts = tc.ptr
    c.launch(p, tew)


def _decode_ring(c, p, state, decode_ring, kda=None, ring_written=False):
    """Checks D's pool and its decode ring (ring_d and ring_k of one dtype, f32 or f16/bf16;
    ring_g f32) and fills D's own ring fields (ring_d, ring_k, ring_g, cache_len, ring_dtype: not
    the spec ring part); returns (pool, H of ring_k, whether ring_g is per K)."""
    ts = c.t("state", state, (None, None, None, None, None), ("f32",), written=True, pool_dims=2)
    _pool_pitch_rule(c.entry, ts, 1)
    NL, NS, HV, V, K = ts.shape
    if decode_ring is None or len(decode_ring) != 3:
        _bad("%s: decode_ring must be (ring_d, ring_k, ring_g)" % c.entry)
    rd, rk, rg = decode_ring
    w = dict(written=ring_written)
    td = c.t("ring_d", rd, (NL, NS, HV, None, V), ("f32", "f16", "bf16"), **w)
    L = td.shape[3]
    tk = c.t("ring_k", rk, (NL, NS, None, L, K), (td.dtype,), **w)
    gk = len(getattr(rg, "shape", ())) == 5
    tg = c.t("ring_g", rg, (NL, NS, HV, L, K) if gk else (NL, NS, HV, L), ("f32",), **w)
    if kda is not None and gk != kda:
        _bad("%s: ring_g's shape does not match the gate's variant" % c.entry)
    p.ring_d, p.ring_k, p.ring_g = td.ptr, tk.ptr, tg.ptr
    p.cache_len = _i32(c.entry, "cache_len (ring_d's dim 3)", L)
    p.ring_dtype = _act(td)  # f32, or the activations' f16/bf16: the library's rule
    return ts, tk.shape[2], gk


@_entry
def decode(q, k, v, *, state, decode_ring, slots, positions, layer, force_flush=None, o=None, scale=None,
           qk_l2norm=True, error_word=None, **gate):
    """Kernel D for layer `layer`, one token per row (row b = token b); `positions` is this step's
    cursor snapshot (decode_cursors SNAPSHOT). Returns o."""
    c = _Call("replayssm_decode")
    p = _abi.DecodeParams(struct_size=ctypes.sizeof(_abi.DecodeParams))
    o, T, prob = _tokens(c, p.tokens, q, k, v, o, gate, scale, qk_l2norm, empty_ok=False)
    ts = _decode_ring(c, p, state, decode_ring, prob.variant == Variant.KDA, ring_written=True)[0]
    layer = _layer(c, layer)
    tsl = c.t("slots", slots, (T,), ("i32",))
    tpo = c.t("positions", positions, (T,), ("i32",))
    tff = c.t("force_flush", force_flush, (T,), ("i32",), optional=True)
    tew = _error_word(c, error_word)
    _fill_base(p.base, prob, ts, 1, tsl, tew, layer)  # batch = T: one token per row
    p.positions, p.force_flush = tpo.ptr, _ptr(tff)
    c.launch(p, tew)
    return o


@_entry
def decode_materialize(*, state, decode_ring, slots, positions, qk_l2norm=True, error_word=None):
    """Replays positions[b] pending records of every layer into slot slots[b]'s checkpoint."""
    c = _Call("replayssm_decode_materialize")
    p = _abi.DecodeParams(struct_size=ctypes.sizeof(_abi.DecodeParams))
    ts, H, kda = _decode_ring(c, p, state, decode_ring)
    _, _, HV, V, K = ts.shape
    tsl = c.t("slots", slots, (None,), ("i32",))
    B = tsl.shape[0]
    tpo = c.t("positions", positions, (B,), ("i32",))
    tew = _error_word(c, error_word)
    prob = _Problem(H, HV, K, V, DType.F32, Variant.KDA if kda else Variant.GDN,
                    _flag(c.entry, "qk_l2norm", qk_l2norm))
    _fill_base(p.base, prob, ts, 1, tsl, tew)  # every layer: layer 0; the token part stays empty
    p.positions = tpo.ptr
    c.launch(p, tew)


@_entry
def decode_cursors(op, *, cursors, slots, cache_len, positions=None, force_flush=None, error_word=None):
    """The buffered-decode cursor protocol on device-resident cursors ([NS] int32): SNAPSHOT
    (positions <- cursors[slots]), ADVANCE (after the step's last layer), RESET."""
    c = _Call("replayssm_decode_cursors")
    p = _abi.CursorParams(struct_size=ctypes.sizeof(_abi.CursorParams))
    op = _enum(c.entry, "op", op, CursorOp)
    cache_len = _i32(c.entry, "cache_len", cache_len)
    snapshot = op == CursorOp.SNAPSHOT
    # SNAPSHOT reads the cursors and writes positions; ADVANCE and RESET write the cursors.
    tc = c.t("cursors", cursors, (None,), ("i32",), written=not snapshot)
    tsl = c.t("slots", slots, (None,), ("i32",))
    B = tsl.shape[0]
    tpo = c.t("positions", positions, (B,), ("i32",), optional=op == CursorOp.RESET, written=snapshot)
    tff = c.t("force_flush", force_flush, (B,), ("i32",), optional=True)
    tew = _error_word(c, error_word)
    p.cursors, p.slots, p.positions, p.force_flush, p.error_word = tc.ptr, tsl.ptr, _ptr(tpo), _ptr(tff), _ptr(tew)
    p.batch, p.num_slots, p.cache_len, p.op = B, tc.shape[0], cache_len, int(op)
    c.launch(p, tew)


def _nested_verify(c, p, q, k, v, o, gate, scale, qk_l2norm, state, state_written, slots, cu_seqlens, layer, ring,
                   parent=None):
    """The verify a VF or VB params nests (`p.verify`, its own header set): checks the tokens, the
    pool (`state_written`: VF writes the fold, VB only reads), the layer, the rows and the spec ring
    (required). Returns (o, prob, pool, rows, ring window, finish); `finish(tew, max_seqlen)` fills
    the verify once the entry's own arguments are checked."""
    pv = p.verify  # a whole verify, its own header included
    pv.struct_size = ctypes.sizeof(_abi.VerifyParams)
    o, T, prob = _tokens(c, pv.tokens, q, k, v, o, gate, scale, qk_l2norm, empty_ok=True)
    H, HV, V, K = prob.H, prob.HV, prob.V, prob.K
    ts = c.t("state", state, (None, None, HV, V, K), ("f32",), written=state_written, pool_dims=2)
    _pool_pitch_rule(c.entry, ts, 1)
    NL, NS = ts.shape[:2]
    layer = _layer(c, layer)
    tsl = c.t("slots", slots, (None,), ("i32",))
    B = tsl.shape[0]
    tcu = c.t("cu_seqlens", cu_seqlens, (B + 1,), ("i32",))
    tpa = c.t("parent", parent, (T,), ("i32",), optional=True, empty_ok=True)
    ring_ptrs, rh, window, rkda, _ = _spec_ring(c, ring, NL, NS, HV, V, K, _ACT_NAME[DType(prob.dtype)],
                                                written=True)
    if rh != H or rkda != (prob.variant == Variant.KDA):
        _bad("%s: the ring's H or gate shape does not match the inputs" % c.entry)

    def finish(tew, max_seqlen):
        _fill_base(pv.base, prob, ts, 1, tsl, tew, layer)
        _fill_ring(pv.ring, ring_ptrs, window)
        pv.cu_seqlens, pv.parent, pv.num_tokens = tcu.ptr, _ptr(tpa), T
        pv.max_seqlen = _max_seqlen(c, cu_seqlens, max_seqlen)

    return o, prob, ts, tsl, window, finish


@_entry
def verify_fold(q, k, v, *, state, slots, cu_seqlens, layer, ring, pending, parent=None, track_slots=None,
                track_steps=None, o=None, scale=None, qk_l2norm=True, max_seqlen=None, error_word=None, **gate):
    """Kernel VF (deferred fold) of layer `layer`: replays each live slot's pending records
    (`pending` [NS, 2 + W] int32) into its checkpoint (state [NL, NS, HV, V, K], written), then
    verifies the new window from that state (VT with `parent`) and writes its raw records into the
    other half of `ring` (ring positions 2 W). Once per step, after sampling (every layer's VF done):
    defer(DeferOp.COMMIT, ...)."""
    c = _Call("replayssm_verify_fold")
    p = _abi.VerifyFoldParams(struct_size=ctypes.sizeof(_abi.VerifyFoldParams))
    o, _, ts, tsl, W2, finish = _nested_verify(c, p, q, k, v, o, gate, scale, qk_l2norm, state, True, slots,
                                               cu_seqlens, layer, ring, parent)
    NS, B = ts.shape[1], tsl.shape[0]
    if W2 % 2 != 0:
        _bad("replayssm_verify_fold: the ring holds two windows: its dim 3 (%d) must be 2 W" % W2)
    tpe = c.t("pending", pending, (NS, 2 + W2 // 2), ("i32",))
    tts = c.t("track_slots", track_slots, (B,), ("i32",), optional=True)
    ttp = c.t("track_steps", track_steps, (B,), ("i32",), optional=True)
    tew = _error_word(c, error_word)
    finish(tew, max_seqlen)
    p.pending, p.track_slots, p.track_steps = tpe.ptr, _ptr(tts), _ptr(ttp)
    c.launch(p, tew)
    return o


@_entry
def verify_buffered(q, k, v, *, state, slots, cu_seqlens, layer, ring, ring_u, cursors, o=None, scale=None,
                    qk_l2norm=True, max_seqlen=None, error_word=None, **gate):
    """Kernel VB (buffered speculative verify) of layer `layer`, linear chains: verifies each live
    request's window from its checkpoint (state [NL, NS, HV, V, K], only read) followed by its
    history (ring positions 0..h-1, h = cursors[slot]: `cursors` [NS] int32, shared by all layers)
    and writes the window's records to `ring` (L positions: the cache length) and their corrections
    to `ring_u` ([NL, NS, HV, L, V] f32) after the history. Returns o. Once per step, after
    sampling (every layer's VB done): buffered(BufferedOp.COMMIT, ...), then
    fold(accept_lens=flush_lens) on the same ring."""
    c = _Call("replayssm_verify_buffered")
    p = _abi.VerifyBufferedParams(struct_size=ctypes.sizeof(_abi.VerifyBufferedParams))
    o, prob, ts, _, L, finish = _nested_verify(c, p, q, k, v, o, gate, scale, qk_l2norm, state, False, slots,
                                               cu_seqlens, layer, ring)
    NL, NS = ts.shape[:2]
    tu = c.t("ring_u", ring_u, (NL, NS, prob.HV, L, prob.V), ("f32",), written=True)
    tc = c.t("cursors", cursors, (NS,), ("i32",))
    tew = _error_word(c, error_word)
    finish(tew, max_seqlen)
    p.cursors, p.ring_u = tc.ptr, tu.ptr
    c.launch(p, tew)
    return o


@_entry
def buffered(op, *, cursors, slots, cache_len, window, accept_lens=None, flush_lens=None, error_word=None):
    """The buffered speculative verify's cursors ([NS] int32) for a ring of `cache_len` (L)
    positions and draft windows of up to `window` (T) tokens: COMMIT after a step's last VB
    (accept_lens [B]), FLUSH before a slot's checkpoint is read, copied or handed out, RESET when a
    slot is handed to a new request or freed. COMMIT and FLUSH write every row's flush length to
    `flush_lens` [B] int32: then fold(accept_lens=flush_lens) on the ring folds the rows that flush."""
    c = _Call("replayssm_buffered")
    p = _abi.BufferedParams(struct_size=ctypes.sizeof(_abi.BufferedParams))
    op = _enum(c.entry, "op", op, BufferedOp)
    cache_len = _i32(c.entry, "cache_len", cache_len)
    window = _i32(c.entry, "window", window)
    tc = c.t("cursors", cursors, (None,), ("i32",), written=True)
    tsl = c.t("slots", slots, (None,), ("i32",))
    B = tsl.shape[0]
    tl = c.t("accept_lens", accept_lens, (B,), ("i32",), optional=True)
    tf = c.t("flush_lens", flush_lens, (B,), ("i32",), optional=True, written=True)
    if op != BufferedOp.COMMIT and tl is not None:
        _bad("replayssm_buffered: accept_lens is read by COMMIT only")
    tew = _error_word(c, error_word)
    p.cursors, p.slots, p.accept_lens, p.flush_lens = tc.ptr, tsl.ptr, _ptr(tl), _ptr(tf)
    p.error_word = _ptr(tew)
    p.batch, p.num_slots, p.cache_len, p.window, p.op = B, tc.shape[0], cache_len, window, int(op)
    c.launch(p, tew)


@_entry
def defer(op, *, pending, slots, accept_lens=None, accept_paths=None, paths=None, error_word=None):
    """The deferred fold's pending table ([NS, 2 + W] int32): COMMIT after a step's last VF
    (accept_lens or accept_paths), GATHER (paths [B, W] <- the slots' pending ring positions, for
    fold(accept_paths=paths) on the 2 W ring: a flush), RESET (after a flush, or a new request)."""
    c = _Call("replayssm_defer")
    p = _abi.DeferParams(struct_size=ctypes.sizeof(_abi.DeferParams))
    op = _enum(c.entry, "op", op, _abi.DeferOp)
    tpe = c.t("pending", pending, (None, None), ("i32",), written=op != _abi.DeferOp.GATHER)
    NS, E = tpe.shape
    W = _int(c.entry, "W (pending's dim 1 minus 2)", E - 2, 1, _abi.MAX_VERIFY_WINDOW)
    tsl = c.t("slots", slots, (None,), ("i32",))
    B = tsl.shape[0]
    commit = op == _abi.DeferOp.COMMIT
    tl = c.t("accept_lens", accept_lens, (B,), ("i32",), optional=True)
    tp = c.t("accept_paths", accept_paths, (B, None), ("i32",), optional=True)
    tpa = c.t("paths", paths, (B, W), ("i32",), optional=op != _abi.DeferOp.GATHER, written=True)
    if not commit and (tl is not None or tp is not None):
        _bad("replayssm_defer: accept_lens / accept_paths are read by COMMIT only")
    tew = _error_word(c, error_word)
    p.pending, p.slots, p.accept_lens, p.accept_paths = tpe.ptr, tsl.ptr, _ptr(tl), _ptr(tp)
    p.paths, p.error_word = _ptr(tpa), _ptr(tew)
    p.batch, p.num_slots, p.window, p.op = B, NS, W, int(op)
    p.path_width = tp.shape[1] if tp is not None else 0
    c.launch(p, tew)
