"""ctypes mirror of include/replayssm.h: the library, its structs and its enums.

The struct layouts are checked against the library (`replayssm_struct_size`) when it loads, so a
header change without this file fails loudly instead of passing garbage.
"""

import ctypes
import math
import enum
import os
from pathlib import Path

c_void_p = ctypes.c_void_p
i32, i64, u32, f32 = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint32, ctypes.c_float

ABI_VERSION = 3
MAX_VERIFY_WINDOW = 16
# Most records of a decode ring: cache_len's limit (REPLAYSSM_MAX_CACHE_LEN in include/replayssm.h).
MAX_CACHE_LEN = 1 << 16
# Longest spec ring of the buffered speculative verify (REPLAYSSM_MAX_BUFFERED_CACHE_LEN).
MAX_BUFFERED_CACHE_LEN = 64


class Status(enum.IntEnum):
    OK = 0
    INVALID_ARGUMENT = 1
    UNSUPPORTED = 2
    CUDA = 3
    EMULATOR = 4
    STRUCT_SIZE = 5
    BACKEND_UNAVAILABLE = 6
    CONFIG_REFUSED = 7
    INTERNAL = 8
    DEVICE_REPORTED = 9  # the kernels flagged device-side values (replayssm_check_error_word)


class Backend(enum.IntEnum):
    CUDA = 0
    EMULATED = 1


class DType(enum.IntEnum):
    F32 = 0
    F16 = 1
    BF16 = 2


class Variant(enum.IntEnum):
    GDN = 0
    KDA = 1


class CursorOp(enum.IntEnum):
    SNAPSHOT = 0
    ADVANCE = 1
    RESET = 2


class DeferOp(enum.IntEnum):
    COMMIT = 0
    GATHER = 1
    RESET = 2


class BufferedOp(enum.IntEnum):
    COMMIT = 0
    FLUSH = 1
    RESET = 2


class DevErr(enum.IntFlag):
    SLOT_OUT_OF_RANGE = 0x1
    BAD_SEQLENS = 0x2
    BAD_LENGTH = 0x4
    TRACK_SLOT = 0x8
    BAD_TREE = 0x10
    DUPLICATE_SLOT = 0x20
    TRACK_STEP = 0x40


def describe_deverr(lib, bits):
    """The set bits of a device error word, by name and meaning: the library's one table
    (`replayssm_device_error_string`), as Rust and C print it."""
    bits = int(bits) & 0xFFFFFFFF
    n = lib.replayssm_device_error_string(bits, None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    lib.replayssm_device_error_string(bits, buf, n + 1)
    return buf.value.decode()


class FieldRangeError(ValueError):
    """A value that does not fit its C field; ctypes would silently truncate it (2**32 + 1 -> 1)."""


_INT_RANGE = {i32: (-2 ** 31, 2 ** 31 - 1), u32: (0, 2 ** 32 - 1), i64: (-2 ** 63, 2 ** 63 - 1)}
_F32_MAX = 3.4028234663852886e38
_KINDS = {}  # struct class -> {field: ctypes type}


class _Params(ctypes.Structure):
    """Base of the params structs: every integer or float stored into a field is range-checked
    (ctypes truncates ints modulo 2**32 and turns 1e39 into inf without a word). The binding
    checks user values with their real limits first; this is the net behind those checks."""

    def __setattr__(self, name, value):
        kinds = _KINDS.get(type(self))
        if kinds is None:
            kinds = _KINDS[type(self)] = dict(type(self)._fields_)
        if name not in kinds:
            # ctypes would keep a misspelt (or pre-ABI 3: `p.window` for `p.ring.window`) name as a
            # plain attribute, leaving the field it meant at 0 without a word.
            raise AttributeError("%s has no field %r (fields: %s)"
                                 % (type(self).__name__, name, ", ".join(kinds)))
        kind = kinds[name]
        if kind in _INT_RANGE:
            if isinstance(value, bool) or not isinstance(value, int):
                raise FieldRangeError("%s = %r is not an int (%s)" % (name, value, type(value).__name__))
            lo, hi = _INT_RANGE[kind]
            if not lo <= value <= hi:
                raise FieldRangeError("%s = %d does not fit its C field (%s: %d..=%d)"
                                      % (name, value, kind.__name__, lo, hi))
        elif kind is f32:
            v = float(value)
            # NaN and inf are float32 values (whether a field may hold them is the library's
            # rule); a finite value past float32's range or underflowing to 0 would change.
            if math.isfinite(v) and (abs(v) > _F32_MAX or (v != 0 and f32(v).value == 0)):
                raise FieldRangeError("%s = %r does not fit a float32 (|x| <= %g, not underflowing to 0)"
                                      % (name, value, _F32_MAX))
        super().__setattr__(name, value)


_HEADER = [("struct_size", u32), ("flags", u32)]
_DIMS = [(n, i32) for n in ("H", "HV", "K", "V")]
# The checkpoint pool's pitches in elements (0 = packed).
_PITCHES = [("state_slot_stride", i64), ("state_layer_stride", i64)]


def _ptrs(*names):
    return [(n, c_void_p) for n in names]


def _ints(*names):
    return [(n, i32) for n in names]


# ABI 3 composes every kernel's params of one params base and parts (src/capi/params.rs): the
# header, then the base, the token part and the spec ring where the kernel has them, then its own
# fields. The parts are _Params too, so their fields keep the range checks (`p.base.batch = ...`).

class BaseParams(_Params):
    """replayssm_base_params: the pool (slot s of layer l at l * state_layer_stride +
    s * state_slot_stride elements, 0 = packed), the rows, the heads and the device error word."""
    _fields_ = (_ptrs("state", "slots", "error_word") + _PITCHES
                + _ints("batch", "num_slots", "num_layers", "layer") + _DIMS
                + _ints("dtype", "variant", "qk_l2norm", "reserved"))


class TokenParams(_Params):
    """replayssm_token_params: the token inputs and output of R, V and D, strides in elements per
    token; gate raw (a, b, A_log, dt_bias; lower_bound 0 = softplus, negative = the safe gate) or
    precomputed (g, beta)."""
    _fields_ = (_ptrs("q", "k", "v", "a", "b", "A_log", "dt_bias", "g", "beta", "o")
                + [(n, i64) for n in ("q_stride", "k_stride", "v_stride", "a_stride", "b_stride", "o_stride")]
                + [("scale", f32), ("lower_bound", f32)])


class RingParams(_Params):
    """replayssm_ring_params: the spec ring (raw v, k; log decay g, beta) and its window."""
    _fields_ = _ptrs("v", "k", "g", "beta") + _ints("window", "reserved")


_BASE, _TOKENS, _RING = [("base", BaseParams)], [("tokens", TokenParams)], [("ring", RingParams)]


class RecurrentParams(_Params):
    _fields_ = (_HEADER + _BASE + _TOKENS + _ptrs("cu_seqlens", "snapshots")
                + _ints("num_tokens", "max_seqlen", "write_state", "record_dtype"))


class VerifyParams(_Params):
    _fields_ = (_HEADER + _BASE + _TOKENS + _RING + _ptrs("cu_seqlens", "parent")
                + _ints("num_tokens", "max_seqlen"))


class FoldParams(_Params):
    _fields_ = (_HEADER + _BASE + _RING + _ptrs("accept_lens", "track_slots", "track_steps", "accept_paths")
                + _ints("path_width", "reserved"))


class ReplayParams(_Params):
    _fields_ = _HEADER + _BASE + _RING + _ptrs("counts")


class DecodeParams(_Params):
    # D's own ring (ring_d, ring_k of ring_dtype, ring_g f32) is not the spec ring: its fields stay at the top.
    _fields_ = (_HEADER + _BASE + _TOKENS + _ptrs("positions", "force_flush", "ring_d", "ring_k", "ring_g")
                + _ints("cache_len", "ring_dtype"))


class CursorParams(_Params):
    _fields_ = (_HEADER + _ptrs("cursors", "slots", "positions", "force_flush", "error_word")
                + _ints("batch", "num_slots", "cache_len", "op"))


class VerifyFoldParams(_Params):
    # A whole verify, its own header included (verify.struct_size = sizeof(VerifyParams)).
    _fields_ = _HEADER + [("verify", VerifyParams)] + _ptrs("pending", "track_slots", "track_steps")


class DeferParams(_Params):
    _fields_ = (_HEADER + _ptrs("pending", "slots", "accept_lens", "accept_paths", "paths", "error_word")
                + _ints("batch", "num_slots", "window", "path_width", "op", "reserved"))


class VerifyBufferedParams(_Params):
    # A whole verify, its own header included (verify.struct_size = sizeof(VerifyParams)), as VF's.
    _fields_ = _HEADER + [("verify", VerifyParams)] + _ptrs("cursors", "ring_u")


class BufferedParams(_Params):
    _fields_ = (_HEADER + _ptrs("cursors", "slots", "accept_lens", "flush_lens", "error_word")
                + _ints("batch", "num_slots", "cache_len", "window", "op", "reserved"))


# The parts' sizes (the library reports only the top-level structs' through
# replayssm_struct_size; these pin the parts so a layout slip names the part, not just its user).
PART_SIZES = {"replayssm_base_params": (BaseParams, 88), "replayssm_token_params": (TokenParams, 136),
              "replayssm_ring_params": (RingParams, 40)}
for _name, (_struct, _size) in PART_SIZES.items():
    if ctypes.sizeof(_struct) != _size:  # pragma: no cover - a slip in this file
        raise ImportError("%s: the binding's layout is %d bytes, ABI %d's %d"
                          % (_name, ctypes.sizeof(_struct), ABI_VERSION, _size))


STRUCTS = {
    "replayssm_recurrent_params": RecurrentParams,
    "replayssm_verify_params": VerifyParams,
    "replayssm_fold_params": FoldParams,
    "replayssm_replay_params": ReplayParams,
    "replayssm_decode_params": DecodeParams,
    "replayssm_cursor_params": CursorParams,
    "replayssm_verify_fold_params": VerifyFoldParams,
    "replayssm_defer_params": DeferParams,
    "replayssm_verify_buffered_params": VerifyBufferedParams,
    "replayssm_buffered_params": BufferedParams,
}

ENTRIES = {
    "replayssm_recurrent": RecurrentParams,
    "replayssm_verify": VerifyParams,
    "replayssm_fold": FoldParams,
    "replayssm_replay": ReplayParams,
    "replayssm_decode": DecodeParams,
    "replayssm_decode_materialize": DecodeParams,
    "replayssm_decode_cursors": CursorParams,
    "replayssm_verify_fold": VerifyFoldParams,
    "replayssm_defer": DeferParams,
    "replayssm_verify_buffered": VerifyBufferedParams,
    "replayssm_buffered": BufferedParams,
}


def _candidates():
    env = os.environ.get("REPLAYSSM_LIB")
    if env:
        yield Path(env)
        return
    # The copy a wheel carries (`pip install ./python`); a source checkout has none.
    packaged = Path(__file__).resolve().parent / "lib" / "libreplayssm.so"
    if packaged.is_file():
        yield packaged
        return
    root = Path(__file__).resolve().parents[2]
    target = Path(os.environ.get("CARGO_TARGET_DIR", root / "target"))
    if not target.is_absolute():
        target = root / target
    for profile in ("release", "debug"):
        yield target / profile / "libreplayssm.so"


def load():
    """Loads libreplayssm.so and checks its ABI version and every struct size against this
    module: $REPLAYSSM_LIB if set, else the library an installed wheel carries
    (replayssm/lib/libreplayssm.so), else target/{release,debug} of this checkout
    ($CARGO_TARGET_DIR honoured). Returns (library, path)."""
    tried = []
    for path in _candidates():
        tried.append(str(path))
        if path.is_file():
            # Absolute: a bare name ("libreplayssm.so") checked here against the working directory
            # would make dlopen search the system's library path instead, maybe another library.
            path = path.resolve()
            lib = ctypes.CDLL(str(path))
            break
    else:
        raise OSError("libreplayssm.so not found (tried: %s). Install the package with `pip install ./python` "
                      "(it packages the library), build it with `cargo build --lib` in the checkout, or set "
                      "REPLAYSSM_LIB to its path." % ", ".join(tried))
    lib.replayssm_abi_version.restype = u32
    lib.replayssm_version.restype = u32
    lib.replayssm_status_string.restype = ctypes.c_char_p
    lib.replayssm_status_string.argtypes = [i32]
    lib.replayssm_device_error_string.restype = ctypes.c_size_t
    lib.replayssm_device_error_string.argtypes = [u32, ctypes.c_char_p, ctypes.c_size_t]
    lib.replayssm_last_error_message.restype = ctypes.c_char_p
    lib.replayssm_last_cuda_error.restype = i32
    lib.replayssm_backend_available.restype = i32
    lib.replayssm_backend_available.argtypes = [i32]
    lib.replayssm_struct_size.restype = ctypes.c_size_t
    lib.replayssm_struct_size.argtypes = [ctypes.c_char_p]
    lib.replayssm_validate_config.restype = i32
    lib.replayssm_validate_config.argtypes = [i32, ctypes.POINTER(ctypes.c_char_p), ctypes.c_char_p, ctypes.c_size_t]
    for name, struct in ENTRIES.items():
        fn = getattr(lib, name)
        fn.restype = i32
        fn.argtypes = [i32, ctypes.POINTER(struct), c_void_p]
    if lib.replayssm_abi_version() != ABI_VERSION:
        raise OSError("%s implements C ABI %d, this binding ABI %d" % (path, lib.replayssm_abi_version(), ABI_VERSION))
    for name, struct in STRUCTS.items():
        want = lib.replayssm_struct_size(name.encode())
        if ctypes.sizeof(struct) != want:
            raise OSError("%s: the binding's layout is %d bytes, the library's %d" % (name, ctypes.sizeof(struct), want))
    return lib, path
