"""ctypes mirror of include/replayssm.h: the library, its structs and its enums.

The struct layouts are checked against the library (`replayssm_struct_size`) when it loads, so a
header change without this file fails loudly instead of passing garbage.
"""

import ctypes
import enum
import os
from pathlib import Path

c_void_p = ctypes.c_void_p
i32, i64, u32, f32 = ctypes.c_int32, ctypes.c_int64, ctypes.c_uint32, ctypes.c_float

ABI_VERSION = 2
MAX_VERIFY_WINDOW = 16
# Most records of a decode ring: cache_len's limit (REPLAYSSM_MAX_CACHE_LEN in include/replayssm.h).
MAX_CACHE_LEN = 1 << 16


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


class DevErr(enum.IntFlag):
    SLOT_OUT_OF_RANGE = 0x1
    BAD_SEQLENS = 0x2
    BAD_LENGTH = 0x4
    TRACK_SLOT = 0x8
    BAD_TREE = 0x10
    DUPLICATE_SLOT = 0x20
    TRACK_STEP = 0x40


# What each device error bit means (the header's REPLAYSSM_DEVERR_* comments), for messages.
DEVERR_MEANING = {
    DevErr.SLOT_OUT_OF_RANGE: "a slot outside -1..num_slots-1; the row was skipped",
    DevErr.BAD_SEQLENS: "cu_seqlens not increasing, beyond num_tokens / max_seqlen, or not from 0 to num_tokens",
    DevErr.BAD_LENGTH: "an accept length, replay count, cursor or position out of range",
    DevErr.TRACK_SLOT: "a track slot out of range, or (verify_fold) with records pending; the track was skipped",
    DevErr.BAD_TREE: "a bad tree parent or accepted path; the request was skipped",
    DevErr.DUPLICATE_SLOT: "live slots or track slots repeated in one launch; those rows were skipped",
    DevErr.TRACK_STEP: "track step outside the committed steps of a tracked row; the track was skipped",
}


def describe_deverr(bits):
    """The set bits of a device error word, by name and meaning (unknown bits in hex)."""
    parts, rest = [], int(bits) & 0xFFFFFFFF
    for flag, meaning in DEVERR_MEANING.items():
        if rest & flag:
            parts.append("%s (%s)" % (flag.name, meaning))
            rest &= ~int(flag)
    if rest:
        parts.append("unknown bits %#x (a newer library than this binding?)" % rest)
    return "; ".join(parts)


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
        kind = kinds.get(name)
        if kind in _INT_RANGE:
            if isinstance(value, bool) or not isinstance(value, int):
                raise FieldRangeError("%s = %r is not an int (%s)" % (name, value, type(value).__name__))
            lo, hi = _INT_RANGE[kind]
            if not lo <= value <= hi:
                raise FieldRangeError("%s = %d does not fit its C field (%s: %d..=%d)"
                                      % (name, value, kind.__name__, lo, hi))
        elif kind is f32:
            v = float(value)
            if not (abs(v) <= _F32_MAX) or (v != 0 and f32(v).value == 0):
                raise FieldRangeError("%s = %r is not a finite float32 (|x| <= %g, not underflowing to 0)"
                                      % (name, value, _F32_MAX))
        super().__setattr__(name, value)


_HEADER = [("struct_size", u32), ("flags", u32)]
_TOKENS = [(n, c_void_p) for n in ("q", "k", "v", "a", "b", "A_log", "dt_bias", "g", "beta")]
_STRIDES = [(n, i64) for n in ("q_stride", "k_stride", "v_stride", "a_stride", "b_stride", "o_stride")]
_DIMS = [(n, i32) for n in ("H", "HV", "K", "V")]
# The checkpoint pool's pitches in elements (0 = packed), at the end of the structs that have a pool.
_PITCHES = [("state_slot_stride", i64), ("state_layer_stride", i64)]


def _ptrs(*names):
    return [(n, c_void_p) for n in names]


def _ints(*names):
    return [(n, i32) for n in names]


class RecurrentParams(_Params):
    _fields_ = (_HEADER + _TOKENS + _ptrs("cu_seqlens", "slots", "state", "snapshots", "o", "error_word")
                + _STRIDES + _ints("num_tokens", "batch", "max_seqlen", "num_slots") + _DIMS
                + [("scale", f32)] + _ints("dtype", "variant", "qk_l2norm", "write_state", "reserved") + _PITCHES[:1])


class VerifyParams(_Params):
    _fields_ = (_HEADER + _TOKENS
                + _ptrs("cu_seqlens", "parent", "slots", "state", "o", "ring_v", "ring_k", "ring_g",
                        "ring_beta", "error_word")
                + _STRIDES + _ints("num_tokens", "batch", "max_seqlen", "num_slots", "num_layers", "layer",
                                   "window") + _DIMS
                + [("scale", f32)] + _ints("dtype", "variant", "qk_l2norm", "reserved") + _PITCHES)


class FoldParams(_Params):
    _fields_ = (_HEADER
                + _ptrs("state", "ring_v", "ring_k", "ring_g", "ring_beta", "slots", "accept_lens", "track_slots",
                        "track_steps", "accept_paths", "error_word")
                + _ints("batch", "num_slots", "num_layers", "window") + _DIMS
                + _ints("dtype", "variant", "qk_l2norm", "path_width") + _PITCHES)


class ReplayParams(_Params):
    _fields_ = (_HEADER + _ptrs("state", "ring_v", "ring_k", "ring_g", "ring_beta", "slots", "counts", "error_word")
                + _ints("batch", "num_slots", "num_layers", "layer", "window") + _DIMS
                + _ints("dtype", "variant", "qk_l2norm") + _PITCHES)


class DecodeParams(_Params):
    _fields_ = (_HEADER + _TOKENS
                + _ptrs("slots", "positions", "force_flush", "state", "ring_d", "ring_k", "ring_g", "o", "error_word")
                + _STRIDES + _ints("batch", "num_slots", "num_layers", "layer", "cache_len") + _DIMS
                + [("scale", f32)] + _ints("dtype", "variant", "qk_l2norm", "reserved") + _PITCHES)


class CursorParams(_Params):
    _fields_ = (_HEADER + _ptrs("cursors", "slots", "positions", "force_flush", "error_word")
                + _ints("batch", "num_slots", "cache_len", "op"))


class VerifyFoldParams(_Params):
    _fields_ = (VerifyParams._fields_ + _ptrs("pending", "track_slots", "track_steps"))


class DeferParams(_Params):
    _fields_ = (_HEADER + _ptrs("pending", "slots", "accept_lens", "accept_paths", "paths", "error_word")
                + _ints("batch", "num_slots", "window", "path_width", "op", "reserved"))


STRUCTS = {
    "replayssm_recurrent_params": RecurrentParams,
    "replayssm_verify_params": VerifyParams,
    "replayssm_fold_params": FoldParams,
    "replayssm_replay_params": ReplayParams,
    "replayssm_decode_params": DecodeParams,
    "replayssm_cursor_params": CursorParams,
    "replayssm_verify_fold_params": VerifyFoldParams,
    "replayssm_defer_params": DeferParams,
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
