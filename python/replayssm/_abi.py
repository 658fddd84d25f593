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

ABI_VERSION = 1
MAX_VERIFY_WINDOW = 16


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


class DevErr(enum.IntFlag):
    SLOT_OUT_OF_RANGE = 0x1
    BAD_SEQLENS = 0x2
    BAD_LENGTH = 0x4
    TRACK_SLOT = 0x8
    BAD_TREE = 0x10


_HEADER = [("struct_size", u32), ("flags", u32)]
_TOKENS = [(n, c_void_p) for n in ("q", "k", "v", "a", "b", "A_log", "dt_bias", "g", "beta")]
_STRIDES = [(n, i64) for n in ("q_stride", "k_stride", "v_stride", "a_stride", "b_stride", "o_stride")]
_DIMS = [(n, i32) for n in ("H", "HV", "K", "V")]


def _ptrs(*names):
    return [(n, c_void_p) for n in names]


def _ints(*names):
    return [(n, i32) for n in names]


class RecurrentParams(ctypes.Structure):
    _fields_ = (_HEADER + _TOKENS + _ptrs("cu_seqlens", "slots", "state", "snapshots", "o", "error_word")
                + _STRIDES + _ints("num_tokens", "batch", "max_seqlen", "num_slots") + _DIMS
                + [("scale", f32)] + _ints("dtype", "variant", "qk_l2norm", "write_state", "reserved"))


class VerifyParams(ctypes.Structure):
    _fields_ = (_HEADER + _TOKENS
                + _ptrs("cu_seqlens", "parent", "slots", "state", "o", "ring_v", "ring_k", "ring_g",
                        "ring_beta", "error_word")
                + _STRIDES + _ints("num_tokens", "batch", "max_seqlen", "num_slots", "num_layers", "layer",
                                   "window") + _DIMS
                + [("scale", f32)] + _ints("dtype", "variant", "qk_l2norm", "reserved"))


class FoldParams(ctypes.Structure):
    _fields_ = (_HEADER
                + _ptrs("state", "ring_v", "ring_k", "ring_g", "ring_beta", "slots", "accept_lens", "track_slots",
                        "track_steps", "accept_paths", "error_word")
                + _ints("batch", "num_slots", "num_layers", "window") + _DIMS
                + _ints("dtype", "variant", "qk_l2norm", "path_width"))


class ReplayParams(ctypes.Structure):
    _fields_ = (_HEADER + _ptrs("state", "ring_v", "ring_k", "ring_g", "ring_beta", "slots", "counts", "error_word")
                + _ints("batch", "num_slots", "num_layers", "layer", "window") + _DIMS
                + _ints("dtype", "variant", "qk_l2norm"))


class DecodeParams(ctypes.Structure):
    _fields_ = (_HEADER + _TOKENS
                + _ptrs("slots", "positions", "force_flush", "state", "ring_d", "ring_k", "ring_g", "o", "error_word")
                + _STRIDES + _ints("batch", "num_slots", "num_layers", "layer", "cache_len") + _DIMS
                + [("scale", f32)] + _ints("dtype", "variant", "qk_l2norm", "reserved"))


class CursorParams(ctypes.Structure):
    _fields_ = (_HEADER + _ptrs("cursors", "slots", "positions", "force_flush", "error_word")
                + _ints("batch", "num_slots", "cache_len", "op"))


STRUCTS = {
    "replayssm_recurrent_params": RecurrentParams,
    "replayssm_verify_params": VerifyParams,
    "replayssm_fold_params": FoldParams,
    "replayssm_replay_params": ReplayParams,
    "replayssm_decode_params": DecodeParams,
    "replayssm_cursor_params": CursorParams,
}

ENTRIES = {
    "replayssm_recurrent": RecurrentParams,
    "replayssm_verify": VerifyParams,
    "replayssm_fold": FoldParams,
    "replayssm_replay": ReplayParams,
    "replayssm_decode": DecodeParams,
    "replayssm_decode_materialize": DecodeParams,
    "replayssm_decode_cursors": CursorParams,
}


def _candidates():
    env = os.environ.get("REPLAYSSM_LIB")
    if env:
        yield Path(env)
        return
    root = Path(__file__).resolve().parents[2]
    target = Path(os.environ.get("CARGO_TARGET_DIR", root / "target"))
    if not target.is_absolute():
        target = root / target
    for profile in ("release", "debug"):
        yield target / profile / "libreplayssm.so"


def load():
    """Loads libreplayssm.so ($REPLAYSSM_LIB, else target/{release,debug} of this checkout) and
    checks its ABI version and every struct size against this module."""
    tried = []
    for path in _candidates():
        tried.append(str(path))
        if path.is_file():
            lib = ctypes.CDLL(str(path))
            break
    else:
        raise OSError("libreplayssm.so not found (tried: %s). Build it with `cargo build --lib` or set "
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
