"""Hostile input through the Python binding (issue 19, items 7, 8, 9 and 10/12): every bad input
must be refused with an exception that names the argument (its value and the limit where it has
one), or, for device-side indices, be flagged as a DeviceIndexError: never a crash of the
interpreter, never a silent success. Each bad input fed is counted; conftest.py prints the tally
("python hostile inputs: N inputs, 0 crashes, 0 silent accepts") at the end of the run.

Everything runs on the emulated backend (NumPy, and duck-typed fake torch tensors: torch is not
a test dependency; the real-torch tests skip, with the reason, where it is missing)."""

import re
import subprocess
import sys
import textwrap
import types

import numpy as np
import pytest

import replayssm as rs
from replayssm import _abi
from conftest import Problem, envelope

# The tally conftest.py prints: bad inputs fed, interpreter crashes, silent accepts.
TALLY = {"inputs": 0, "crashes": 0, "silent": 0}

IDX = (rs.InvalidArgument, getattr(rs, "DeviceIndexError", rs.InvalidArgument))


def refused(call, exc=rs.InvalidArgument, match=None):
    """Feeds one bad input: `call()` must raise `exc` whose text matches `match` (a regex)."""
    TALLY["inputs"] += 1
    try:
        call()
    except exc as e:
        if match is not None:
            assert re.search(match, str(e)), "refused, but the message %r does not match %r" % (str(e), match)
        return e
    TALLY["silent"] += 1
    pytest.fail("bad input silently accepted (expected %s matching %r)" % (exc, match))


def readonly(x):
    x = np.array(x, copy=True)
    x.flags.writeable = False
    return x


def over_bytes(x):
    """x's contents as an array over an immutable bytes object (np.frombuffer: read-only)."""
    return np.frombuffer(np.ascontiguousarray(x).tobytes(), dtype=x.dtype).reshape(x.shape)


# --- a small valid call of every entry ------------------------------------------------------

H, HV, K, V = 2, 4, 32, 32
NL, W, L = 2, 4, 4


def calls(rng, kda=False):
    """entry name -> (function, keyword arguments) of a valid call; fresh arrays each time."""
    p = Problem(rng, [2, 3], H=H, HV=HV, K=K, V=V, kda=kda)  # T = 5, NS = 3, B = 2
    NS = len(p.state)
    gshape = (NL, NS, HV, W, K) if kda else (NL, NS, HV, W)
    ring = (np.zeros((NL, NS, HV, W, V), np.float32), np.zeros((NL, NS, H, W, K), np.float32),
            np.zeros(gshape, np.float32), np.zeros((NL, NS, HV, W), np.float32))
    dgshape = (NL, NS, HV, L, K) if kda else (NL, NS, HV, L)
    dring = (np.zeros((NL, NS, HV, L, V), np.float32), np.zeros((NL, NS, H, L, K), np.float32),
             np.zeros(dgshape, np.float32))
    pool = np.stack([p.state] * NL)
    tokens = dict(q=p.q, k=p.k, v=p.v, g=p.g, beta=p.beta)
    dtok = {n: np.ascontiguousarray(x[:2]) for n, x in tokens.items()}
    # Outputs given (not allocated by the binding): a fake torch tensor cannot be allocated.
    tokens["o"], dtok["o"] = np.full((5, HV, V), np.nan, np.float32), np.full((2, HV, V), np.nan, np.float32)
    i32 = lambda *x: np.array(x, np.int32)  # noqa: E731
    # The deferred fold: a ring of two halves of W positions; each slot's pending entry [n, half,
    # W positions] holds 2 records of half 0; row 0 snapshots its step 1 into the spare slot.
    ring2 = (np.zeros((NL, NS, HV, 2 * W, V), np.float32), np.zeros((NL, NS, H, 2 * W, K), np.float32),
             np.zeros(gshape[:3] + (2 * W,) + gshape[4:], np.float32), np.zeros((NL, NS, HV, 2 * W), np.float32))
    pending = np.tile(np.array([2, 0, 0, 1] + [-1] * (W - 2), np.int32), (NS, 1))
    spare = int(np.setdiff1d(np.arange(NS), p.slots)[0])
    pending[spare] = [0, 0] + [-1] * W  # the track target: nothing pending (else refused)
    # The buffered verify: a ring of LB = 2 W positions, ring_u, and the cursors (row 0's slot holds
    # a history of 1 record, so its window of 2 goes to positions 1..2; row 1's of 3 to 0..2).
    LB = 2 * W
    ringb = (np.zeros((NL, NS, HV, LB, V), np.float32), np.zeros((NL, NS, H, LB, K), np.float32),
             np.zeros(gshape[:3] + (LB,) + gshape[4:], np.float32), np.zeros((NL, NS, HV, LB), np.float32))
    ring_u = np.zeros((NL, NS, HV, LB, V), np.float32)
    cursors = np.zeros(NS, np.int32)
    cursors[p.slots[0]] = 1
    return {
        "recurrent": (rs.recurrent, dict(tokens, state=p.state.copy(), slots=p.slots, cu_seqlens=p.cu_seqlens)),
        "verify": (rs.verify, dict(tokens, state=pool.copy(), slots=p.slots, cu_seqlens=p.cu_seqlens, layer=1,
                                   ring=ring)),
        "fold": (rs.fold, dict(state=pool.copy(), ring=ring, slots=p.slots, accept_lens=i32(2, 3))),
        "replay": (rs.replay, dict(state=pool.copy(), ring=ring, slots=p.slots, counts=i32(1, 2), layer=0)),
        "decode": (rs.decode, dict(dtok, state=pool.copy(), decode_ring=dring, slots=p.slots, positions=i32(0, 0),
                                   layer=0)),
        "decode_materialize": (rs.decode_materialize, dict(state=pool.copy(), decode_ring=dring, slots=p.slots,
                                                           positions=i32(1, 0))),
        "decode_cursors": (rs.decode_cursors, dict(op=rs.CursorOp.SNAPSHOT, cursors=np.zeros(NS, np.int32),
                                                   slots=p.slots, positions=i32(0, 0), cache_len=L)),
        "verify_fold": (rs.verify_fold, dict(tokens, state=pool.copy(), slots=p.slots, cu_seqlens=p.cu_seqlens, layer=1,
                                             ring=ring2, pending=pending.copy(), track_slots=i32(spare, -1),
                                             track_steps=i32(1, -1))),
        "defer": (rs.defer, dict(op=rs.DeferOp.COMMIT, pending=pending.copy(), slots=p.slots, accept_lens=i32(2, 3))),
        "verify_buffered": (rs.verify_buffered, dict(tokens, state=pool.copy(), slots=p.slots, cu_seqlens=p.cu_seqlens,
                                                     layer=1, ring=ringb, ring_u=ring_u, cursors=cursors.copy())),
        "buffered": (rs.buffered, dict(op=rs.BufferedOp.COMMIT, cursors=cursors.copy(), slots=p.slots, cache_len=LB,
                                       window=W, accept_lens=i32(2, 3), flush_lens=np.zeros(2, np.int32))),
    }


def run(rng, entry, **changes):
    """The valid call of `entry` with `changes` applied (a value of DROP removes the argument)."""
    fn, kw = calls(rng)[entry]
    kw.update(changes)
    return fn(**{n: x for n, x in kw.items() if x is not DROP})


DROP = object()


def test_the_valid_calls_succeed(rng):
    # The baseline every hostile case corrupts one argument of: it must pass as is.
    for entry, (fn, kw) in calls(rng).items():
        fn(**kw)
    for entry, (fn, kw) in calls(rng, kda=True).items():
        fn(**kw)


# --- item 7: outputs and in-place buffers must be writeable ---------------------------------

def _ring_with(i, x):
    return lambda kw: tuple(x(r) if j == i else r for j, r in enumerate(kw["ring"]))


def _dring_with(i, x):
    return lambda kw: tuple(x(r) if j == i else r for j, r in enumerate(kw["decode_ring"]))


def _arg(name, x):
    return lambda kw: x(kw[name])


WRITTEN = [
    # (entry, argument, how to make it read-only, extra changes)
    ("recurrent", "state", _arg("state", readonly), {}),
    ("recurrent", "state", _arg("state", over_bytes), {}),
    ("recurrent", "o", lambda kw: readonly(np.zeros((5, HV, V), np.float32)), {}),
    ("recurrent", "snapshots", lambda kw: over_bytes(np.zeros((2, 3, HV, V, K), np.float32)), {}),
    ("recurrent", "error_word", lambda kw: over_bytes(np.zeros(1, np.uint32)), {}),
    ("verify", "o", lambda kw: over_bytes(np.zeros((5, HV, V), np.float32)), {}),
    ("verify", "ring", _ring_with(0, readonly), {"what": "ring_v"}),
    ("verify", "ring", _ring_with(1, over_bytes), {"what": "ring_k"}),
    ("verify", "ring", _ring_with(2, readonly), {"what": "ring_g"}),
    ("verify", "ring", _ring_with(3, readonly), {"what": "ring_beta"}),
    ("fold", "state", _arg("state", over_bytes), {}),
    ("fold", "error_word", lambda kw: readonly(np.zeros(1, np.int32)), {}),
    ("replay", "state", _arg("state", readonly), {}),
    ("decode", "state", _arg("state", readonly), {}),
    ("decode", "o", lambda kw: readonly(np.zeros((2, HV, V), np.float32)), {}),
    ("decode", "decode_ring", _dring_with(0, readonly), {"what": "ring_d"}),
    ("decode", "decode_ring", _dring_with(1, over_bytes), {"what": "ring_k"}),
    ("decode", "decode_ring", _dring_with(2, readonly), {"what": "ring_g"}),
    ("decode_materialize", "state", _arg("state", over_bytes), {}),
    ("decode_cursors", "positions", _arg("positions", readonly), {}),
    ("decode_cursors", "cursors", _arg("cursors", readonly), {"op": rs.CursorOp.ADVANCE}),
    ("decode_cursors", "cursors", _arg("cursors", over_bytes), {"op": rs.CursorOp.RESET, "positions": DROP}),
    ("verify_fold", "state", _arg("state", readonly), {}),  # VF writes the fold (V does not)
    ("verify_fold", "state", _arg("state", over_bytes), {}),
    ("verify_fold", "o", lambda kw: over_bytes(np.zeros((5, HV, V), np.float32)), {}),
    ("verify_fold", "ring", _ring_with(0, readonly), {"what": "ring_v"}),
    ("verify_fold", "ring", _ring_with(1, over_bytes), {"what": "ring_k"}),
    ("verify_fold", "ring", _ring_with(2, readonly), {"what": "ring_g"}),
    ("verify_fold", "ring", _ring_with(3, over_bytes), {"what": "ring_beta"}),
    ("verify_buffered", "ring", _ring_with(0, readonly), {"what": "ring_v"}),
    ("verify_buffered", "ring", _ring_with(3, over_bytes), {"what": "ring_beta"}),
    ("verify_buffered", "ring_u", _arg("ring_u", readonly), {}),
    ("verify_buffered", "o", lambda kw: over_bytes(np.zeros((5, HV, V), np.float32)), {}),
    ("buffered", "cursors", _arg("cursors", readonly), {}),
    ("buffered", "flush_lens", _arg("flush_lens", over_bytes), {"op": rs.BufferedOp.FLUSH, "accept_lens": DROP}),
    ("verify_fold", "error_word", lambda kw: readonly(np.zeros(1, np.uint32)), {}),
    ("defer", "pending", _arg("pending", readonly), {}),  # COMMIT writes the entries
    ("defer", "pending", _arg("pending", over_bytes), {"op": rs.DeferOp.RESET, "accept_lens": DROP}),
    ("defer", "paths", lambda kw: readonly(np.zeros((2, W), np.int32)), {"op": rs.DeferOp.GATHER, "accept_lens": DROP}),
    ("defer", "error_word", lambda kw: over_bytes(np.zeros(1, np.uint32)), {}),
]


@pytest.mark.parametrize("entry,arg,make,extra", WRITTEN,
                         ids=["%s-%s-%d" % (e, x.get("what", a), i) for i, (e, a, _, x) in enumerate(WRITTEN)])
def test_a_read_only_output_or_in_place_buffer_is_refused(rng, entry, arg, make, extra):
    fn, kw = calls(rng)[entry]
    extra = dict(extra)
    what = extra.pop("what", arg)
    kw.update(extra)
    kw[arg] = make(kw)
    before = [np.array(x, copy=True) for x in (kw[arg] if isinstance(kw[arg], tuple) else (kw[arg],))]
    refused(lambda: fn(**{n: x for n, x in kw.items() if x is not DROP}),
            match=r"%s is read-only .*writes it" % what)
    # Refused before the launch: the read-only memory (an immutable bytes object) is untouched.
    after = kw[arg] if isinstance(kw[arg], tuple) else (kw[arg],)
    for b, a in zip(before, after):
        assert np.array_equal(b, a, equal_nan=True)


def test_read_only_inputs_that_are_only_read_are_accepted(rng):
    # Not hostile: inputs the call only reads may be read-only (e.g. mapped from a file).
    fn, kw = calls(rng)["recurrent"]
    for n in ("q", "k", "v", "g", "beta", "slots", "cu_seqlens", "state"):
        kw[n] = readonly(kw[n])
    fn(write_state=False, **kw)  # state is only read without write_state
    fn, kw = calls(rng)["verify"]
    fn(**dict(kw, state=readonly(kw["state"])))  # verify never writes the checkpoint
    fn, kw = calls(rng)["fold"]
    fn(**dict(kw, ring=tuple(readonly(r) for r in kw["ring"]), slots=readonly(kw["slots"])))
    fn, kw = calls(rng)["decode_materialize"]
    fn(**dict(kw, decode_ring=tuple(over_bytes(r) for r in kw["decode_ring"])))
    fn, kw = calls(rng)["decode_cursors"]
    fn(**dict(kw, cursors=readonly(kw["cursors"])))  # SNAPSHOT only reads the cursors
    fn, kw = calls(rng)["verify_fold"]
    fn(**dict(kw, pending=readonly(kw["pending"]), track_slots=over_bytes(kw["track_slots"]),
              track_steps=readonly(kw["track_steps"])))  # VF reads the table; COMMIT writes it
    fn, kw = calls(rng)["defer"]
    fn(**dict(kw, slots=readonly(kw["slots"]), accept_lens=over_bytes(kw["accept_lens"])))
    fn(rs.DeferOp.GATHER, pending=readonly(kw["pending"]), slots=kw["slots"], paths=np.zeros((2, W), np.int32))


# A read-only np.memmap is mapped PROT_READ: a write through it is a SIGSEGV, so these run in a
# subprocess, where a regression kills only the child and is reported here as a crash.
MEMMAP_SCRIPT = textwrap.dedent("""
    import sys, numpy as np, replayssm as rs
    sys.path.insert(0, sys.argv[3])
    from test_hostile import calls
    entry, arg, path = sys.argv[1], sys.argv[2], sys.argv[4]
    fn, kw = calls(np.random.default_rng(7))[entry]
    x = kw[arg]
    x.tofile(path)
    kw[arg] = np.memmap(path, dtype=x.dtype, mode="r", shape=x.shape)
    if entry == "decode_cursors":
        kw["op"] = rs.CursorOp.RESET
    if entry == "defer":
        kw["op"] = rs.DeferOp.RESET
        del kw["accept_lens"]
    try:
        fn(**kw)
        print("SILENT")
    except rs.InvalidArgument as e:
        print("REFUSED", e)
""")


@pytest.mark.parametrize("entry,arg", [("recurrent", "state"), ("fold", "state"), ("decode_cursors", "cursors"),
                                       ("verify_fold", "state"), ("defer", "pending")])
def test_a_read_only_memmap_output_is_refused_not_a_segfault(tmp_path, entry, arg):
    TALLY["inputs"] += 1
    here = str(__import__("pathlib").Path(__file__).parent)
    r = subprocess.run([sys.executable, "-c", MEMMAP_SCRIPT, entry, arg, here, str(tmp_path / "x.bin")],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        TALLY["crashes"] += 1
        pytest.fail("the interpreter died (exit %d) on a read-only memmap %s: %s"
                    % (r.returncode, arg, r.stderr[-2000:]))
    if "SILENT" in r.stdout:
        TALLY["silent"] += 1
    assert re.search(r"REFUSED .*%s is read-only" % arg, r.stdout), r.stdout + r.stderr


# --- item 8: integers are range- and type-checked before they reach an int32 field ----------

INTS = [
    # (entry, changes, message): ctypes would store 2**32 + 1 as 1, int(1.5) is 1, int(True) is 1.
    ("verify", dict(layer=2 ** 32 + 1), r"layer = 4294967297 is out of range, must be in -2147483648\.\.=2147483647 \(an int32\)"),
    ("verify", dict(layer=-2 ** 32), r"layer = -4294967296 is out of range, must be in -2147483648\.\.=2147483647 \(an int32\)"),
    ("verify", dict(layer=1.5), r"layer = 1\.5 is not an integer \(float\)"),
    ("verify", dict(layer=True), r"layer = True is a bool"),
    ("verify", dict(layer="1"), r"layer = '1' is not an integer \(str\)"),
    ("verify", dict(layer=np.float64(1.0)), r"layer = .*1\.0.* is not an integer"),
    ("verify", dict(layer=2), r"layer = 2, must be in 0\.\.=1"),
    ("verify", dict(max_seqlen=2 ** 32 + 3), r"max_seqlen = 4294967299 is out of range, must be in -2147483648\.\.=2147483647 \(an int32\)"),
    ("verify", dict(max_seqlen=3.0), r"max_seqlen = 3\.0 is not an integer"),
    ("replay", dict(layer=2 ** 32), r"layer = 4294967296 is out of range, must be in -2147483648\.\.=2147483647 \(an int32\)"),
    ("replay", dict(layer=np.bool_(False)), r"layer = .*False.* is a bool"),
    ("decode", dict(layer=2 ** 32 + 1), r"layer = 4294967297 is out of range, must be in -2147483648\.\.=2147483647 \(an int32\)"),
    ("decode", dict(layer=0.0), r"layer = 0\.0 is not an integer"),
    ("recurrent", dict(max_seqlen=2 ** 40), r"max_seqlen = 1099511627776 is out of range, must be in -2147483648\.\.=2147483647 \(an int32\)"),
    ("recurrent", dict(max_seqlen=2 ** 32 + 5), r"max_seqlen = 4294967301 is out of range"),
    ("recurrent", dict(max_seqlen=True), r"max_seqlen = True is a bool"),
    ("recurrent", dict(max_seqlen=0), r"max_seqlen = 0, must be at least 1"),
    ("decode_cursors", dict(cache_len=2 ** 32 + 4), r"cache_len = 4294967300 is out of range, must be in -2147483648\.\.=2147483647 \(an int32\)"),
    ("decode_cursors", dict(cache_len=4.0), r"cache_len = 4\.0 is not an integer"),
    ("decode_cursors", dict(cache_len=True), r"cache_len = True is a bool"),
    ("decode_cursors", dict(op=True), r"op = True is a bool"),
    ("decode_cursors", dict(op=1.0), r"op = 1\.0 is not an integer"),
    ("decode_cursors", dict(op=2 ** 32 + 1), r"op = 4294967297 is out of range, must be in 0\.\.=2"),
    ("decode_cursors", dict(op=3), r"op = 3 is out of range, must be in 0\.\.=2"),
    # Flags: bool("false") is True.
    ("recurrent", dict(qk_l2norm="false"), r"qk_l2norm = 'false' is not a bool"),
    ("recurrent", dict(write_state="no"), r"write_state = 'no' is not a bool"),
    ("fold", dict(qk_l2norm=2), r"qk_l2norm = 2 is not a bool"),
    ("decode_materialize", dict(qk_l2norm=0.5), r"qk_l2norm = 0\.5 is not a bool"),
    # scale: a finite real that float32 holds.
    ("recurrent", dict(scale="0.5"), r"scale = '0\.5' is not a real number \(str\)"),
    ("recurrent", dict(scale=True), r"scale = True is not a real number"),
    ("recurrent", dict(scale=float("nan")), r"scale = NaN is not finite"),
    ("verify", dict(scale=float("-inf")), r"scale = -inf is not finite"),
    ("decode", dict(scale=1e39), r"scale = 1e\+39 is outside float32's range"),
    ("decode", dict(scale=1e-50), r"scale = 1e-50 is outside float32's range"),
    ("recurrent", dict(scale=1j), r"scale = 1j is not a real number \(complex\)"),
    # The deferred fold: max_seqlen is bounded by W (one half of the ring), W by the table's width.
    ("verify_fold", dict(layer=2 ** 32 + 1), r"layer = 4294967297 is out of range, must be in -2147483648\.\.=2147483647 \(an int32\)"),
    ("verify_fold", dict(layer=-1), r"layer = -1, must be in 0\.\.=1"),
    ("verify_fold", dict(layer=True), r"layer = True is a bool"),
    ("verify_fold", dict(layer=1.0), r"layer = 1\.0 is not an integer \(float\)"),
    ("verify_fold", dict(max_seqlen=W + 1),
     r"max_seqlen = 5 exceeds W = 4 \(window / 2\)"),
    ("verify_fold", dict(max_seqlen=2 ** 32 + 3), r"max_seqlen = 4294967299 is out of range, must be in -2147483648\.\.=2147483647 \(an int32\)"),
    ("verify_fold", dict(max_seqlen="3"), r"max_seqlen = '3' is not an integer \(str\)"),
    ("verify_fold", dict(qk_l2norm="yes"), r"qk_l2norm = 'yes' is not a bool"),
    ("verify_fold", dict(scale=float("inf")), r"scale = inf is not finite"),
    ("verify_fold", dict(scale=-1e40), r"scale = -1e\+40 is outside float32's range"),
    ("defer", dict(op=3), r"op = 3 is out of range, must be in 0\.\.=2"),
    ("defer", dict(op=-1), r"op = -1 is out of range, must be in 0\.\.=2"),
    ("defer", dict(op=2 ** 32), r"op = 4294967296 is out of range, must be in 0\.\.=2"),
    ("defer", dict(op=True), r"op = True is a bool"),
    ("defer", dict(op=0.0), r"op = 0\.0 is not an integer"),
    ("defer", dict(op="COMMIT"), r"op = 'COMMIT' is not an integer \(str\)"),
    ("defer", dict(pending=np.zeros((3, 19), np.int32)),
     r"W \(pending's dim 1 minus 2\) = 17 is out of range, must be in 1\.\.=16"),
    ("defer", dict(pending=np.zeros((3, 2), np.int32)),
     r"W \(pending's dim 1 minus 2\) = 0 is out of range, must be in 1\.\.=16"),
    # The buffered verify: L (the ring's positions) at most 64 and at least 2 T; T a verify window.
    ("verify_buffered", dict(layer=2), r"layer = 2, must be in 0\.\.=1"),
    ("verify_buffered", dict(max_seqlen=17), r"max_seqlen \(draft tokens per request\) = 17, must be in 1\.\.=16"),
    ("verify_buffered", dict(max_seqlen=2 ** 32), r"max_seqlen = 4294967296 is out of range"),
    ("buffered", dict(op=3), r"op = 3 is out of range, must be in 0\.\.=2"),
    ("buffered", dict(op="FLUSH"), r"op = 'FLUSH' is not an integer \(str\)"),
    ("buffered", dict(window=17), r"window \(T, the longest draft window of a step\) = 17, must be in 1\.\.=16"),
    ("buffered", dict(window=0), r"window \(T, the longest draft window of a step\) = 0"),
    ("buffered", dict(cache_len=65), r"cache_len = 65, must be in 1\.\.=64"),
    ("buffered", dict(cache_len=7), r"cache_len = 7 is below 2 T = 8"),
    ("buffered", dict(cache_len=2 ** 31), r"cache_len = 2147483648 is out of range"),
]


@pytest.mark.parametrize("entry,changes,message", INTS, ids=["%s-%s" % (e, "-".join(c)) for e, c, _ in INTS])
def test_a_bad_integer_or_scalar_is_refused_with_its_value_and_limit(rng, entry, changes, message):
    refused(lambda: run(rng, entry, **changes), match=message)


def test_integers_of_numpy_types_in_range_are_accepted(rng):
    run(rng, "verify", layer=np.int64(1), max_seqlen=np.int32(3))
    run(rng, "verify_fold", layer=np.int16(0), max_seqlen=np.int64(W))
    run(rng, "defer", op=np.int32(2), accept_lens=DROP)
    run(rng, "decode_cursors", cache_len=np.int16(L), op=np.int64(0))
    run(rng, "recurrent", scale=np.float32(0.25), qk_l2norm=np.bool_(False), write_state=0)


def test_backend_and_config_arguments_are_not_truncated():
    # int32 argtypes truncate too: 2**32 + 1 was backend 1, EMULATED, "available".
    refused(lambda: rs.backend_available(2 ** 32 + 1),
            match=r"backend = 4294967297 is out of range, must be in 0\.\.=1")
    refused(lambda: rs.backend_available(True), match=r"backend = True is a bool")
    refused(lambda: rs.backend_available(1.0), match=r"backend = 1\.0 is not an integer")
    assert rs.backend_available(1) == (True, "")
    # A C string ends at its first NUL: "EAGLE\0junk" was validated as "EAGLE".
    refused(lambda: rs.validate_config(["--enable-linear-replayssm-spec", "--speculative-algorithm", "EAGLE\0junk"]),
            match=r"'EAGLE\\x00junk' contains a NUL")
    refused(lambda: rs.validate_config("--enable-linear-replayssm-spec"), match=r"is a string, expected a list")


def _field(p, path):
    """(the struct holding the field at dotted `path` in params `p`, the field's name)."""
    *parts, name = path.split(".")
    for part in parts:
        p = getattr(p, part)
    return p, name


def test_the_params_structs_refuse_values_their_fields_cannot_hold():
    # The net behind the checks above: no struct field truncates silently, in the params base and
    # parts (ABI 3) as at the top.
    p = _abi.RecurrentParams()
    for path, value in (("base.batch", 2 ** 31), ("num_tokens", -2 ** 31 - 1), ("tokens.q_stride", 2 ** 63),
                        ("flags", -1), ("base.layer", 1.5), ("max_seqlen", True), ("base.state_slot_stride", 2 ** 63),
                        ("tokens.lower_bound", -1e39)):
        TALLY["inputs"] += 1
        holder, name = _field(p, path)
        with pytest.raises(_abi.FieldRangeError, match=name):
            setattr(holder, name, value)
    for value in (1e39, 1e-50):  # NaN is a float32; the library refuses it as a scale
        TALLY["inputs"] += 1
        with pytest.raises(_abi.FieldRangeError, match="scale"):
            p.tokens.scale = value
    p.base.batch, p.tokens.q_stride, p.tokens.scale = 2 ** 31 - 1, 2 ** 40, 0.125
    assert (p.base.batch, p.tokens.q_stride, p.tokens.scale) == (2 ** 31 - 1, 2 ** 40, 0.125)
    for cls, path, value in ((_abi.VerifyFoldParams, "verify.ring.window", 2 ** 32 + 8),
                             (_abi.VerifyFoldParams, "verify.base.layer", True),
                             (_abi.VerifyParams, "ring.reserved", 2 ** 31), (_abi.FoldParams, "path_width", 2.0),
                             (_abi.DeferParams, "op", 2 ** 31), (_abi.DeferParams, "window", 4.0),
                             (_abi.DeferParams, "reserved", -2 ** 31 - 1), (_abi.DeferParams, "flags", 2 ** 32)):
        TALLY["inputs"] += 1
        holder, name = _field(cls(), path)
        with pytest.raises(_abi.FieldRangeError, match=name):
            setattr(holder, name, value)


def test_the_params_structs_refuse_a_field_they_do_not_have():
    # ctypes keeps an unknown name as a plain attribute: an ABI 2 spelling (`p.window`, `p.ring_v`,
    # `p.state` at the top) would leave the ABI 3 field it meant at 0 without a word.
    for cls, name in ((_abi.VerifyParams, "window"), (_abi.VerifyParams, "ring_v"), (_abi.FoldParams, "state"),
                      (_abi.RecurrentParams, "q"), (_abi.RingParams, "ring_v"), (_abi.DecodeParams, "window")):
        TALLY["inputs"] += 1
        with pytest.raises(AttributeError, match=r"has no field '%s'" % name):
            setattr(cls(), name, 1)


def test_the_params_are_one_base_and_parts():
    # ABI 3 (src/capi/params.rs): the base, token and ring parts at their sizes, nested by the
    # kernels that have them, VF holding a whole verify (its own header included).
    import ctypes
    assert [ctypes.sizeof(c) for c in (_abi.BaseParams, _abi.TokenParams, _abi.RingParams)] == [88, 136, 40]
    has = {name: [n for n, _ in cls._fields_ if n in ("base", "tokens", "ring", "verify")]
           for name, cls in _abi.STRUCTS.items()}
    assert has == {
        "replayssm_recurrent_params": ["base", "tokens"], "replayssm_verify_params": ["base", "tokens", "ring"],
        "replayssm_fold_params": ["base", "ring"], "replayssm_replay_params": ["base", "ring"],
        "replayssm_decode_params": ["base", "tokens"], "replayssm_cursor_params": [],
        "replayssm_verify_fold_params": ["verify"], "replayssm_defer_params": [],
        "replayssm_verify_buffered_params": ["verify"], "replayssm_buffered_params": [],
    }
    assert _abi.VerifyFoldParams.verify.offset == 8 and _abi.RecurrentParams.base.offset == 8
    assert _abi.VerifyBufferedParams.verify.offset == 8


# Each entry's reserved fields as the library names them in its refusal (VF: inside its verify).
RESERVED = [
    ("recurrent", "base.reserved"),
    ("verify", "base.reserved"), ("verify", "ring.reserved"),
    ("fold", "base.reserved"), ("fold", "ring.reserved"), ("fold", "reserved"),
    ("replay", "base.reserved"), ("replay", "ring.reserved"),
    ("decode", "base.reserved"),
    ("decode_materialize", "base.reserved"),
    ("verify_fold", "verify.base.reserved"),
    ("verify_fold", "verify.ring.reserved"),
    ("defer", "reserved"),
    ("verify_buffered", "verify.base.reserved"),
    ("verify_buffered", "verify.ring.reserved"),
    ("buffered", "reserved"),
]


@pytest.mark.parametrize("entry,path", RESERVED, ids=["%s-%s" % r for r in RESERVED])
def test_a_reserved_field_set_reaches_the_library_and_is_refused_by_name(rng, monkeypatch, entry, path):
    # The binding never sets a reserved field; a caller of the C ABI might. Poked into the params
    # of a valid call just before the launch, the library refuses it naming the field and nothing
    # is written.
    launch = rs._Call.launch

    def poked(self, params, error_word=None):
        holder, name = _field(params, path)
        setattr(holder, name, 5)
        return launch(self, params, error_word)

    monkeypatch.setattr(rs._Call, "launch", poked)
    fn, kw = calls(rng)[entry]
    kept = {n: np.array(x, copy=True) for n, x in kw.items() if isinstance(x, np.ndarray)}
    refused(lambda: fn(**kw), match=r"(?<![\w.])%s = 5: it must be 0" % re.escape(path))
    for n, x in kept.items():
        assert np.array_equal(x, kw[n], equal_nan=True), "%s %s: %s written" % (entry, path, n)


# --- item 9: bad device-side values are never silent on the host backend --------------------
# The C ABI may refuse some of these before the launch (InvalidArgument); otherwise the kernels
# skip the row and set a DevErr bit, which the binding must raise as DeviceIndexError. Never a
# silent success.

def _i32(*x):
    return np.array(x, np.int32)


DEVICE = [
    # (entry, changes, the DevErr bit the kernels set)
    ("recurrent", dict(slots=_i32(7, 0)), "SLOT_OUT_OF_RANGE"),
    ("recurrent", dict(slots=_i32(-5, 0)), "SLOT_OUT_OF_RANGE"),
    ("recurrent", dict(cu_seqlens=_i32(0, 4, 2)), "BAD_SEQLENS"),
    ("recurrent", dict(cu_seqlens=_i32(0, 2, 9)), "BAD_SEQLENS"),
    ("verify", dict(slots=_i32(0, 3)), "SLOT_OUT_OF_RANGE"),
    ("verify", dict(cu_seqlens=_i32(0, 3, 1)), "BAD_SEQLENS"),
    ("verify", dict(parent=_i32(-1, 5, -1, 0, 1)), "BAD_TREE"),
    ("fold", dict(slots=_i32(2 ** 31 - 1, 0)), "SLOT_OUT_OF_RANGE"),
    ("fold", dict(accept_lens=_i32(W + 3, 1)), "BAD_LENGTH"),
    ("fold", dict(accept_lens=_i32(-1, 1)), "BAD_LENGTH"),
    ("fold", dict(track_slots=_i32(9, -1), track_steps=_i32(0, 0)), "TRACK_SLOT"),
    ("fold", dict(accept_lens=DROP, accept_paths=np.array([[0, 9], [0, 1]], np.int32)), "BAD_TREE"),
    ("replay", dict(counts=_i32(W + 1, 0)), "BAD_LENGTH"),
    ("replay", dict(slots=_i32(3, 0)), "SLOT_OUT_OF_RANGE"),
    ("decode", dict(positions=_i32(L + 2, 0)), "BAD_LENGTH"),
    ("decode", dict(slots=_i32(0, 99)), "SLOT_OUT_OF_RANGE"),
    ("decode_materialize", dict(positions=_i32(-1, 0)), "BAD_LENGTH"),
    ("decode_materialize", dict(slots=_i32(1, 3)), "SLOT_OUT_OF_RANGE"),
    ("decode_cursors", dict(cursors=_i32(99, 99, 99)), "BAD_LENGTH"),
    ("decode_cursors", dict(op=rs.CursorOp.ADVANCE, positions=_i32(-3, 0)), "BAD_LENGTH"),
    ("decode_cursors", dict(slots=_i32(0, 3)), "SLOT_OUT_OF_RANGE"),
    # The deferred fold's pending entries ([n, half, W positions] per slot, every slot's here).
    ("verify_fold", dict(slots=_i32(0, 3)), "SLOT_OUT_OF_RANGE"),
    ("verify_fold", dict(slots=_i32(1, 1)), "DUPLICATE_SLOT"),
    ("verify_fold", dict(cu_seqlens=_i32(0, 3, 1)), "BAD_SEQLENS"),
    ("verify_fold", dict(parent=_i32(-1, 5, -1, 0, 1)), "BAD_TREE"),
    ("verify_fold", dict(pending=np.tile(_i32(W + 1, 0, 0, 1, 2, 3), (3, 1))), "BAD_LENGTH"),
    ("verify_fold", dict(pending=np.tile(_i32(-1, 0, 0, 1, 2, 3), (3, 1))), "BAD_LENGTH"),
    ("verify_fold", dict(pending=np.tile(_i32(2, 2, 0, 1, -1, -1), (3, 1))), "BAD_LENGTH"),
    ("verify_fold", dict(pending=np.tile(_i32(2, 0, 1, 0, -1, -1), (3, 1))), "BAD_TREE"),
    ("verify_fold", dict(pending=np.tile(_i32(2, 1, 0, 1, -1, -1), (3, 1))), "BAD_TREE"),
    ("verify_fold", dict(pending=np.tile(_i32(1, 0, 2 * W, -1, -1, -1), (3, 1))), "BAD_TREE"),
    ("verify_fold", dict(track_slots=_i32(9, -1)), "TRACK_SLOT"),
    ("verify_fold", dict(track_steps=_i32(2, -1)), "TRACK_STEP"),
    ("defer", dict(slots=_i32(0, 3)), "SLOT_OUT_OF_RANGE"),
    ("defer", dict(slots=_i32(2, 2)), "DUPLICATE_SLOT"),
    ("defer", dict(accept_lens=_i32(W + 1, 0)), "BAD_LENGTH"),
    ("defer", dict(accept_lens=_i32(0, -2)), "BAD_LENGTH"),
    ("defer", dict(accept_lens=DROP, accept_paths=np.array([[0, 9], [0, 1]], np.int32)), "BAD_TREE"),
    ("defer", dict(pending=np.tile(_i32(0, 7, -1, -1, -1, -1), (3, 1))), "BAD_LENGTH"),
    ("defer", dict(op=rs.DeferOp.GATHER, accept_lens=DROP, paths=np.zeros((2, W), np.int32),
                   pending=np.tile(_i32(W + 2, 0, 0, 1, 2, 3), (3, 1))), "BAD_LENGTH"),
    ("defer", dict(op=rs.DeferOp.GATHER, accept_lens=DROP, paths=np.zeros((2, W), np.int32),
                   pending=np.tile(_i32(3, 1, 4, 6, 5, -1), (3, 1))), "BAD_TREE"),
    # The buffered verify's cursors: the window must fit after the history (L = 2 W here).
    ("verify_buffered", dict(cursors=_i32(7, 7, 7)), "BAD_LENGTH"),
    ("verify_buffered", dict(cursors=_i32(-1, -1, -1)), "BAD_LENGTH"),
    ("verify_buffered", dict(slots=_i32(0, 3)), "SLOT_OUT_OF_RANGE"),
    ("verify_buffered", dict(slots=_i32(1, 1)), "DUPLICATE_SLOT"),
    ("verify_buffered", dict(cu_seqlens=_i32(0, 3, 1)), "BAD_SEQLENS"),
    ("buffered", dict(cursors=_i32(5, 5, 5)), "BAD_LENGTH"),
    ("buffered", dict(accept_lens=_i32(W + 1, 0)), "BAD_LENGTH"),
    ("buffered", dict(slots=_i32(2, 2)), "DUPLICATE_SLOT"),
    ("buffered", dict(op=rs.BufferedOp.FLUSH, accept_lens=DROP, cursors=_i32(-4, -4, -4)), "BAD_LENGTH"),
]


@pytest.mark.parametrize("entry,changes,bit", DEVICE, ids=["%s-%s-%s" % (e, "-".join(c), b) for e, c, b in DEVICE])
@pytest.mark.parametrize("with_word", [False, True], ids=["no-word", "word"])
def test_a_bad_device_index_is_never_silent(rng, entry, changes, bit, with_word):
    word = np.zeros(1, np.uint32)
    if with_word:
        changes = dict(changes, error_word=word)
    fn, kw = calls(rng)[entry]
    kw.update(changes)
    kw = {n: x for n, x in kw.items() if x is not DROP}
    kept = {n: kw[n].copy() for n in ("state", "cursors", "pending") if n in kw}
    e = refused(lambda: fn(**kw), exc=IDX)
    if isinstance(e, rs.DeviceIndexError):
        # The message decodes the bits by name; the caller's word gets them ORed in.
        assert bit in str(e) and e.bits & rs.DevErr[bit], str(e)
        assert not with_word or word[0] & rs.DevErr[bit]
    else:
        # A refusal before the launch (the C ABI's own check) names the corrupted argument (in
        # the singular or plural) and leaves the in-place buffers bit-identical.
        assert any(n.rstrip("s") in str(e) for n in changes if n not in ("error_word", "op")), str(e)
        for n, x in kept.items():
            assert np.array_equal(x.view(np.uint32), kw[n].view(np.uint32)), n


def test_the_callers_word_keeps_earlier_bits_and_a_clean_call_does_not_raise(rng):
    word = np.array([rs.DevErr.TRACK_SLOT], np.uint32)  # a bit left from an earlier call
    run(rng, "recurrent", error_word=word)  # clean: the binding judges this call's own bits
    assert word[0] == rs.DevErr.TRACK_SLOT
    e = refused(lambda: run(rng, "replay", counts=_i32(W + 1, 0), error_word=word), exc=IDX)
    if isinstance(e, rs.DeviceIndexError):
        assert word[0] == rs.DevErr.TRACK_SLOT | rs.DevErr.BAD_LENGTH
        assert "TRACK_SLOT" not in str(e)


def test_check_error_word_decodes_every_bit_and_resets_the_word():
    assert rs.DevErr.DUPLICATE_SLOT == 0x20 and rs.DevErr.TRACK_STEP == 0x40
    word = np.array([0x61], np.uint32)
    e = refused(lambda: rs.check_error_word(word), exc=rs.DeviceIndexError)
    assert word[0] == 0, "check_error_word must reset the word"
    assert e.bits == rs.DevErr.SLOT_OUT_OF_RANGE | rs.DevErr.DUPLICATE_SLOT | rs.DevErr.TRACK_STEP
    for name in ("SLOT_OUT_OF_RANGE", "DUPLICATE_SLOT", "TRACK_STEP", "repeated in one launch",
                 "outside the steps its row commits"):
        assert name in e.message
    assert rs.check_error_word(word) is None  # now clean
    word = np.array([-2 ** 31 | 0x8], np.int32)  # an int32 word, with a bit this binding does not know
    e = refused(lambda: rs.check_error_word(word), exc=rs.DeviceIndexError)
    assert "TRACK_SLOT" in e.message and "unknown bits 0x80000000" in e.message and word[0] == 0
    refused(lambda: rs.check_error_word(readonly(np.ones(1, np.uint32))), match="error_word is read-only")
    refused(lambda: rs.check_error_word(np.zeros(2, np.uint32)), match=r"error_word has shape \[2\]")


# --- items 10/12: zero sizes, odd numpy objects, torch views and devices --------------------

def test_zero_tokens_are_allowed_where_the_c_abi_allows_them(rng):
    # Not hostile: num_tokens = 0 is valid for R and V (every request empty); numpy gives a
    # zero-size array all-zero strides, which were reported as "must be contiguous".
    z = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    tokens = dict(q=z(0, H, K), k=z(0, H, K), v=z(0, HV, V), g=z(0, HV), beta=z(0, HV))
    state = rng.uniform(-1, 1, (3, HV, V, K)).astype(np.float32)
    kept = state.copy()
    o = rs.recurrent(**tokens, state=state, slots=_i32(0, 2), cu_seqlens=_i32(0, 0, 0))
    assert o.shape == (0, HV, V) and np.array_equal(state.view(np.uint32), kept.view(np.uint32))
    pool = np.stack([state, state])
    rs.verify(**tokens, state=pool, slots=_i32(0, 2), cu_seqlens=_i32(0, 0, 0), layer=0)


ZERO = [
    ("decode", lambda kw: {n: kw[n][:0] for n in ("q", "k", "v", "o", "g", "beta", "slots", "positions")},
     r"q has 0 tokens \(shape \[0, 2, 32\]\): this entry needs at least 1 token"),
    ("recurrent", lambda kw: dict(state=kw["state"][:0]), r"state has size 0 in dim 0 \(shape \[0, 4, 32, 32\]\)"),
    ("recurrent", lambda kw: dict(slots=kw["slots"][:0], cu_seqlens=kw["cu_seqlens"][:1]),
     r"slots has size 0 in dim 0"),
    ("fold", lambda kw: dict(slots=kw["slots"][:0], accept_lens=kw["accept_lens"][:0]), r"slots has size 0 in dim 0"),
    ("fold", lambda kw: dict(ring=tuple(r[..., :0, :] if r.ndim == 5 else r[..., :0] for r in kw["ring"])),
     r"ring_v has size 0 in dim 3"),
    ("decode_cursors", lambda kw: dict(cursors=kw["cursors"][:0]), r"cursors has size 0 in dim 0"),
    ("verify", lambda kw: dict(v=kw["v"][:, :, :0]), r"v has size 0 in dim 2"),
    ("verify_fold", lambda kw: dict(pending=kw["pending"][:0]), r"pending has shape \[0, 6\], expected \[3, 6\]"),
    ("verify_fold", lambda kw: dict(state=kw["state"][:, :0], pending=kw["pending"][:0]), r"state has size 0 in dim 1"),
    ("defer", lambda kw: dict(slots=kw["slots"][:0], accept_lens=kw["accept_lens"][:0]), r"slots has size 0 in dim 0"),
    ("defer", lambda kw: dict(pending=kw["pending"][:0]), r"pending has size 0 in dim 0"),
]


@pytest.mark.parametrize("entry,change,message", ZERO, ids=["%s-%d" % (e, i) for i, (e, _, _) in enumerate(ZERO)])
def test_a_zero_size_argument_is_named_with_its_zero_dim(rng, entry, change, message):
    fn, kw = calls(rng)[entry]
    kw.update(change(kw))
    refused(lambda: fn(**{n: x for n, x in kw.items() if x is not DROP}), match=message)


DEFERRED = [
    # (entry, changes, message): the shapes and argument sets only the deferred fold has.
    ("verify_fold", dict(ring="ring-of-W"), r"ring holds two windows: its dim 3 \(9\) must be 2 W"),
    ("verify_fold", dict(pending=np.zeros((3, 2 + W + 1), np.int32)), r"pending has shape \[3, 7\], expected \[3, 6\]"),
    ("verify_fold", dict(pending=np.zeros((4, 2 + W), np.int32)), r"pending has shape \[4, 6\], expected \[3, 6\]"),
    ("verify_fold", dict(pending=np.zeros((3, 2 + W), np.int64)), r"pending: dtype int64 is not supported"),
    ("verify_fold", dict(pending=None), r"replayssm_verify_fold: pending is required"),
    ("verify_fold", dict(track_steps=DROP), r"track_slots and track_steps: set both or neither"),
    ("defer", dict(op=rs.DeferOp.GATHER, paths=np.zeros((2, W), np.int32)),
     r"accept_lens / accept_paths are read by COMMIT only"),
    ("defer", dict(op=rs.DeferOp.GATHER, accept_lens=DROP), r"paths is required"),
    ("defer", dict(accept_lens=DROP), r"COMMIT: give exactly one of accept_lens and accept_paths"),
    ("defer", dict(accept_paths=np.zeros((2, 2), np.int32)),
     r"COMMIT: give exactly one of accept_lens and accept_paths"),
    ("defer", dict(accept_lens=DROP, accept_paths=np.zeros((2, W + 1), np.int32)),
     r"path_width \(columns of accept_paths\) = 5, must be in 1\.\.=4"),
    ("defer", dict(accept_lens=_i32(1, 1, 1)), r"accept_lens has shape \[3\]"),
    ("defer", dict(pending=np.zeros(6, np.int32)), r"pending has shape \[6\], expected \["),
]


@pytest.mark.parametrize("entry,changes,message", DEFERRED,
                         ids=["%s-%d" % (e, i) for i, (e, _, _) in enumerate(DEFERRED)])
def test_a_bad_deferred_fold_argument_is_refused_by_name(rng, entry, changes, message):
    fn, kw = calls(rng)[entry]
    if changes.get("ring") == "ring-of-W":
        # An odd ring (2 W + 1 positions): one half of it cannot be told from the other.
        changes = dict(changes, ring=tuple(np.zeros(r.shape[:3] + (2 * W + 1,) + r.shape[4:], np.float32)
                                           for r in kw["ring"]))
    kw.update(changes)
    kept = {n: kw[n].copy() for n in ("state", "pending") if isinstance(kw.get(n), np.ndarray)}
    refused(lambda: fn(**{n: x for n, x in kw.items() if x is not DROP}), exc=rs.InvalidArgument,
            match=message)
    for n, x in kept.items():
        assert np.array_equal(x.view(np.uint32), kw[n].view(np.uint32)), n


def test_odd_numpy_objects_are_refused_by_name(rng):
    # A numpy scalar is not an array (it has no .ctypes: an AttributeError before).
    refused(lambda: run(rng, "fold", error_word=np.uint32(0)),
            match=r"error_word: expected a numpy\.ndarray, got a uint32")
    # A masked array's mask would be ignored.
    refused(lambda: run(rng, "recurrent", slots=np.ma.masked_array(_i32(0, 1), mask=[True, False])),
            match=r"slots: a numpy masked array")
    # Misaligned f32 elements (frombuffer at an odd offset): the kernels load whole elements.
    fn, kw = calls(rng)["recurrent"]
    raw = bytearray(kw["state"].nbytes + 1)
    state = np.frombuffer(raw, np.uint8)[1:].view(np.float32).reshape(kw["state"].shape)
    refused(lambda: fn(**dict(kw, state=state)), match=r"state: address 0x[0-9a-f]+ is not aligned to its 4-byte")
    # A list is not a tensor; q as a list failed on `q.shape` (AttributeError) before.
    refused(lambda: run(rng, "recurrent", q=[[[0.0]]], o=None),
            match=r"q: expected a numpy\.ndarray or a torch\.Tensor")


# Duck-typed torch tensors: the binding recognises torch by type(x).__module__ and must check a
# tensor from its own attributes, without importing torch (absent here). Backed by NumPy memory,
# so a fake CPU tensor really runs on the emulated backend.

class FakeDtype:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "torch." + self.name

    __str__ = __repr__


FLOAT32, INT32, COMPLEX64 = FakeDtype("float32"), FakeDtype("int32"), FakeDtype("complex64")


class FakeDevice:
    def __init__(self, type, index=None):
        self.type, self.index = type, index

    def __str__(self):
        return self.type if self.index is None else "%s:%d" % (self.type, self.index)


class FakeTensor:
    def __init__(self, array, device="cpu", neg=False, conj=False, ptr=None, layout="torch.strided"):
        self.array = np.ascontiguousarray(array)
        self.dtype = {np.dtype(np.float32): FLOAT32, np.dtype(np.int32): INT32}.get(self.array.dtype, COMPLEX64)
        self.shape = self.array.shape
        self.device = FakeDevice(device)
        self.is_cuda = device == "cuda"
        self.layout = layout
        self._neg, self._conj, self._ptr = neg, conj, ptr

    def stride(self):
        return tuple(s // self.array.itemsize for s in self.array.strides)

    def data_ptr(self):
        return self.array.ctypes.data if self._ptr is None else self._ptr

    def is_neg(self):
        return self._neg

    def is_conj(self):
        return self._conj

    def cpu(self):
        return self

    def numpy(self):
        return self.array


FakeTensor.__module__ = "torch._fake"


@pytest.fixture
def fake_torch(monkeypatch):
    # Where torch is missing, a stand-in module (dtypes only), so that a binding which imports
    # torch to read a tensor's dtype gets that far; the checks under test must not need it.
    try:
        import torch  # noqa: F401
    except ImportError:
        mod = types.ModuleType("torch")
        mod.float32, mod.float16, mod.bfloat16, mod.int32 = FLOAT32, FakeDtype("float16"), FakeDtype("bfloat16"), INT32
        monkeypatch.setitem(sys.modules, "torch", mod)


def _fake(kw, **tensor_opts):
    """kw with every array a fake CPU tensor over the same memory; tensor_opts[name] = options."""
    wrap = lambda n, x: FakeTensor(x, **tensor_opts.get(n, {})) if isinstance(x, np.ndarray) else x  # noqa: E731
    return {n: tuple(wrap(n, r) for r in x) if isinstance(x, tuple) else wrap(n, x) for n, x in kw.items()}


def _fake_call(rng, entry, **tensor_opts):
    """The valid call with every array a fake CPU tensor."""
    fn, kw = calls(rng)[entry]
    return fn, _fake(kw, **tensor_opts)


def test_fake_cpu_torch_tensors_run_on_the_emulated_backend(rng, fake_torch):
    # Not hostile: the checks accept a good torch-like tensor, and the results are NumPy's bits.
    fn, kw = calls(rng)["recurrent"]
    state = kw["state"].copy()
    o_ref = fn(**kw)
    o = np.zeros((5, HV, V), np.float32)
    fn(**_fake(dict(kw, state=state, o=o)), max_seqlen=3)
    assert np.array_equal(o_ref.view(np.uint32), o.view(np.uint32))
    assert np.array_equal(kw["state"].view(np.uint32), state.view(np.uint32))


TORCH = [
    # (entry, argument, FakeTensor options, message)
    ("recurrent", "state", dict(device="meta", ptr=0), r"state: a tensor on device meta: only cpu .* and cuda"),
    ("fold", "slots", dict(device="xpu"), r"slots: a tensor on device xpu"),
    ("recurrent", "q", dict(neg=True), r"q: is_neg\(\) is True .*resolve_neg\(\)"),
    ("decode", "k", dict(conj=True), r"k: is_conj\(\) is True .*resolve_conj\(\)"),
    ("recurrent", "state", dict(ptr=0),
     r"state: data_ptr\(\) is 0 \(a tensor without storage, shape \[3, 4, 32, 32\]\)"),
    ("decode_cursors", "cursors", dict(ptr=0), r"cursors: data_ptr\(\) is 0"),
    ("verify", "v", dict(layout="torch.sparse_coo"), r"v: layout torch\.sparse_coo is not supported"),
    ("verify_fold", "pending", dict(device="xpu"), r"pending: a tensor on device xpu"),
    ("verify_fold", "state", dict(ptr=0), r"state: data_ptr\(\) is 0"),
    ("verify_fold", "q", dict(neg=True), r"q: is_neg\(\) is True"),
    ("defer", "pending", dict(device="meta", ptr=0), r"pending: a tensor on device meta"),
    ("defer", "accept_lens", dict(conj=True), r"accept_lens: is_conj\(\) is True"),
    ("defer", "slots", dict(ptr=0), r"slots: data_ptr\(\) is 0"),
]


@pytest.mark.parametrize("entry,arg,opts,message", TORCH,
                         ids=["%s-%s-%s" % (e, a, "-".join(o)) for e, a, o, _ in TORCH])
def test_a_bad_torch_tensor_is_refused_by_name(rng, fake_torch, entry, arg, opts, message):
    fn, kw = _fake_call(rng, entry, **{arg: opts})
    if entry == "recurrent":
        kw["max_seqlen"] = 3  # the fake cu_seqlens would do, but keep the call lean
    refused(lambda: fn(**kw), match=message)


def test_a_torch_dtype_outside_the_table_is_refused_without_importing_torch(rng, fake_torch):
    fn, kw = _fake_call(rng, "fold")
    kw["accept_lens"] = FakeTensor(np.zeros(2, np.complex64))
    refused(lambda: fn(**kw), match=r"accept_lens: dtype torch\.complex64 is not supported")


class TestRealTorch:
    """The same refusals with real torch tensors (CPU and meta: no GPU needed)."""

    @pytest.fixture(autouse=True)
    def torch(self):
        return pytest.importorskip("torch", reason="PyTorch is not installed: the fake-tensor tests above cover it")

    def test_meta_neg_and_storage_less_tensors(self, rng, torch):
        fn, kw = calls(rng)["recurrent"]
        t = {n: torch.from_numpy(x) if isinstance(x, np.ndarray) else x for n, x in kw.items()}
        refused(lambda: fn(**dict(t, state=t["state"].to("meta"), max_seqlen=3)),
                match=r"state: a tensor on device meta")
        if hasattr(torch, "_neg_view"):  # a lazily negated view, as torch makes for conj-of-neg ops
            refused(lambda: fn(**dict(t, q=torch._neg_view(t["q"]), max_seqlen=3)), match=r"q: is_neg\(\) is True")
        refused(lambda: fn(**dict(t, q=torch.empty(0, H, K)[:0], max_seqlen=3)), match=r"q: data_ptr\(\) is 0")
        fn(**dict(t, max_seqlen=3))


# --- round two: broadcast pools, buffers sharing memory, tokens outside every request --------

def _broadcast(x, dim):
    """x with dim `dim` a broadcast of its first entry (stride 0, as torch's expand): writeable,
    so a writing call is not stopped by the read-only check first."""
    strides = list(x.strides)
    strides[dim] = 0
    return np.lib.stride_tricks.as_strided(x, x.shape, strides, writeable=True)


# (entry, pool dim broadcast): every entry that takes a checkpoint pool, each of its pool dims.
BROADCAST = [("recurrent", 0)] + [(e, d) for e in ("verify", "fold", "replay", "decode", "decode_materialize",
                                                   "verify_fold") for d in (0, 1)]


@pytest.mark.parametrize("entry,dim", BROADCAST, ids=["%s-dim%d" % b for b in BROADCAST])
def test_a_broadcast_pool_is_refused_naming_its_strides(rng, entry, dim):
    # Its stride 0 reached the C ABI as "packed": a writing call wrote past the view (a SIGSEGV
    # with one real slot expanded to 4096), verify read past it.
    fn, kw = calls(rng)[entry]
    pool = _broadcast(kw["state"], dim)
    before = pool.copy()
    what = "slot" if dim == len(kw["state"].shape) - 4 else "layer"
    refused(lambda: fn(**dict(kw, state=pool)),
            match=r"state has shape \[.*\] and strides \[.*\]: its %s dim \(\d entries\) has stride 0, less than "
                  r"one slot's checkpoint .*broadcast" % what)
    assert np.array_equal(pool, before)


def test_a_pool_pitch_below_one_slot_is_refused_by_the_binding(rng):
    fn, kw = calls(rng)["fold"]
    st = kw["state"]
    overlapping = np.lib.stride_tricks.as_strided(st, st.shape, (st.strides[0], st.strides[4] * 8) + st.strides[2:])
    refused(lambda: fn(**dict(kw, state=overlapping)), match=r"state has shape .*its slot dim \(3 entries\) has stride 8")


def _inside(base, shape, offset=0):
    """An array of `shape` over base's memory from element `offset` (base must be large enough)."""
    flat = base.reshape(-1)
    n = int(np.prod(shape))
    return flat[offset:offset + n].reshape(shape)


# (entry, what, changes(kw) -> dict, the written argument named, the other argument named)
ALIASED = [
    ("recurrent", "o = v", lambda kw: dict(o=kw["v"]), "o", "v"),
    ("recurrent", "o inside the pool", lambda kw: dict(o=_inside(kw["state"], (5, HV, V), 100)), "state|o", "o|state"),
    ("recurrent", "o inside snapshots", lambda kw: (lambda sn: dict(snapshots=sn, o=_inside(sn, (5, HV, V), 64),
                                                                    max_seqlen=3))(np.zeros((2, 3, HV, V, K), np.float32)),
     "o|snapshots", "snapshots|o"),
    ("verify", "o inside ring_v", lambda kw: dict(o=_inside(kw["ring"][0], (5, HV, V), 7)), "o|ring_v", "ring_v|o"),
    ("verify", "the pool as ring_k", lambda kw: dict(ring=(kw["ring"][0], _inside(kw["state"], kw["ring"][1].shape),
                                                           kw["ring"][2], kw["ring"][3])), "ring_k", "state"),
    ("fold", "the pool as the ring", lambda kw: dict(ring=(_inside(kw["state"], kw["ring"][0].shape),) +
                                                     tuple(kw["ring"][1:])), "state", "ring_v"),
    ("replay", "counts inside the pool", lambda kw: dict(counts=_inside(kw["state"].view(np.int32), (2,))), "state",
     "counts"),
    ("decode", "o = v", lambda kw: dict(o=kw["v"]), "o", "v"),
    ("decode_cursors", "positions = cursors", lambda kw: dict(positions=kw["cursors"][:2]), "positions", "cursors"),
    ("verify_fold", "pending inside o", lambda kw: dict(pending=_inside(kw["o"].view(np.int32), (3, 2 + W))),
     "o|pending", "pending|o"),
    ("defer", "paths inside pending", lambda kw: dict(op=rs.DeferOp.GATHER, accept_lens=DROP,
                                                      paths=_inside(kw["pending"], (2, W))), "paths", "pending"),
    ("recurrent", "error_word inside o", lambda kw: dict(error_word=_inside(kw["o"].view(np.uint32), (1,), 3)),
     "o|error_word", "error_word|o"),
]


@pytest.mark.parametrize("entry,what,make,written,other", ALIASED, ids=["%s-%s" % (a[0], a[1]) for a in ALIASED])
def test_a_written_buffer_sharing_memory_with_another_argument_is_refused(rng, entry, what, make, written, other):
    # Accepted before: the kernels read what they were writing (silently wrong answers).
    fn, kw = calls(rng)[entry]
    kw.update(make(kw))
    kw = {n: x for n, x in kw.items() if x is not DROP}
    kept = {n: np.array(x, copy=True) for n, x in kw.items() if isinstance(x, np.ndarray)}
    e = refused(lambda: fn(**kw), match=r"shares memory with .*a buffer this call writes must not overlap")
    if written is not None:
        assert re.search(r"(%s) \(bytes 0x[0-9a-f]+\.\.0x[0-9a-f]+\) shares memory with (%s) " % (written, other),
                         str(e)), str(e)
    for n, x in kept.items():
        assert np.array_equal(x.view(np.uint8), kw[n].view(np.uint8)), "%s: a refused call wrote %s" % (what, n)


def test_interleaved_views_that_share_no_byte_are_accepted(rng):
    # Exact, not by span: an envelope pool's slots interleave other memory (the conv state), which
    # another argument may occupy; only a shared byte is refused.
    raw = np.zeros((6, 10), np.float32)
    a, b = rs._T("a", raw[:, :7]), rs._T("b", raw[:, 7:])
    assert not rs._runs_overlap(a.runs(1 << 18), b.runs(1 << 18))
    assert rs._runs_overlap(a.runs(1 << 18), rs._T("c", raw[5:, 6:]).runs(1 << 18))
    fn, kw = calls(rng)["fold"]
    pool, _ = envelope(kw["state"])
    fn(**dict(kw, state=pool))


# Tokens outside every request came back as NaN with no error: refused, naming cu_seqlens.
UNCOVERED = [
    ("recurrent", _i32(1, 2, 5)),
    ("recurrent", _i32(0, 2, 4)),
    ("verify", _i32(0, 2, 4)),
    ("verify", _i32(1, 3, 5)),
    ("verify_fold", _i32(1, 3, 5)),
    ("verify_fold", _i32(0, 1, 3)),
]


@pytest.mark.parametrize("entry,cu", UNCOVERED, ids=["%s-%s" % (e, "-".join(map(str, c))) for e, c in UNCOVERED])
def test_tokens_outside_every_request_are_refused(rng, entry, cu):
    fn, kw = calls(rng)[entry]
    kw["cu_seqlens"] = cu
    refused(lambda: fn(**kw), match=r"cu_seqlens\[0\] = %d and cu_seqlens\[2\] = %d: they must be 0 and num_tokens = 5"
            % (cu[0], cu[2]))
    assert np.isnan(kw["o"]).all(), "a refused call wrote o"


def test_a_track_slot_with_records_pending_is_refused(rng):
    # They would stay under its new snapshot, and the next verify_fold on it would replay them.
    fn, kw = calls(rng)["verify_fold"]
    spare = int(kw["track_slots"][0])
    kw["pending"][spare] = [1, 0, 0] + [-1] * (W - 1)
    refused(lambda: fn(**kw), match=r"track_slots\[0\] = %d has 1 records pending \(pending\[%d\]\[0\] = 1\)"
            % (spare, spare))


# --- issue 28, class 2: the emulator's environment and resources (appended) ----------------
# REPLAYSSM_EMU_THREADS / REPLAYSSM_EMU_SEED are read once per process and an address-space
# limit applies to a whole process, so each case runs in a child interpreter: a regression
# (an abort when threads or memory run out) kills only the child and is reported as a crash.
EMU_ENV_SCRIPT = textwrap.dedent("""
    import resource, sys, numpy as np
    sys.path.insert(0, sys.argv[1])
    resource.setrlimit(resource.RLIMIT_AS, (3000000 * 1024, 3000000 * 1024))  # ulimit -v 3000000
    import replayssm as rs
    from test_hostile import calls
    fn, kw = calls(np.random.default_rng(7))["recurrent"]
    try:
        fn(**kw)
        print("RESULT ok")
    except rs.EmulatorError as e:
        print("RESULT EmulatorError", e)
""")


@pytest.mark.parametrize("var,value,accepted", [
    ("REPLAYSSM_EMU_THREADS", None, True),
    ("REPLAYSSM_EMU_THREADS", "1000", True),  # clamped to 64
    ("REPLAYSSM_EMU_THREADS", "-1", False),
    ("REPLAYSSM_EMU_THREADS", "2x", False),
    ("REPLAYSSM_EMU_SEED", "0x10", True),
    ("REPLAYSSM_EMU_SEED", "-3", False),
])
def test_emulator_environment_under_3_gb_runs_or_is_refused_by_name(var, value, accepted):
    import os
    TALLY["inputs"] += 1
    env = {k: x for k, x in os.environ.items() if k not in ("REPLAYSSM_EMU_THREADS", "REPLAYSSM_EMU_SEED")}
    if value is not None:
        env[var] = value
    here = str(__import__("pathlib").Path(__file__).parent)
    r = subprocess.run([sys.executable, "-c", EMU_ENV_SCRIPT, here], capture_output=True, text=True, timeout=300,
                       env=env)
    if r.returncode != 0:
        TALLY["crashes"] += 1
        pytest.fail("the interpreter died (exit %d) with %s=%r under 3 GB: %s"
                    % (r.returncode, var, value, r.stderr[-2000:]))
    if accepted:
        assert "RESULT ok" in r.stdout, r.stdout + r.stderr
    else:
        if "RESULT ok" in r.stdout:
            TALLY["silent"] += 1
        assert re.search(r"RESULT EmulatorError .*%s = \"%s\" is not an integer in" % (var, re.escape(value)),
                         r.stdout), r.stdout + r.stderr


# What each entry's valid call writes (the campaign below pairs each with every other array).
WRITTEN = {
    "recurrent": {"o", "state"}, "verify": {"o", "ring[0]", "ring[1]", "ring[2]", "ring[3]"},
    "fold": {"state"}, "replay": {"state"}, "decode": {"o", "state"}, "decode_materialize": {"state"},
    "decode_cursors": {"positions"}, "verify_fold": {"o", "state", "ring[0]", "ring[1]", "ring[2]", "ring[3]"},
    "defer": {"pending"},
}


def _arrays(kw):
    """name -> array of a call's arguments, a tuple's members as name[i]."""
    out = {}
    for n, x in kw.items():
        if isinstance(x, np.ndarray):
            out[n] = x
        elif isinstance(x, tuple):
            out.update(("%s[%d]" % (n, i), r) for i, r in enumerate(x) if isinstance(r, np.ndarray))
    return out


def _replace(kw, name, x):
    if "[" not in name:
        return dict(kw, **{name: x})
    n, i = name[:-1].split("[")
    t = list(kw[n])
    t[int(i)] = x
    return dict(kw, **{n: tuple(t)})


def test_a_seeded_campaign_of_arguments_sharing_memory(rng):
    # Every entry, every (written, other) pair: the smaller of the two carved out of the larger's
    # memory at a random element offset, holding its own values (so every other check passes):
    # refused, naming both, nothing written. Then all arguments carved from one buffer at
    # disjoint offsets: accepted, with the bits of separate arrays.
    n = 0
    for entry, written in WRITTEN.items():
        fn, kw0 = calls(rng)[entry]
        names = sorted(_arrays(kw0))
        for w in sorted(written):
            for other in names:
                if other == w:
                    continue
                fn, kw = calls(rng)[entry]
                arrs = _arrays(kw)
                small, big = (w, other) if arrs[w].nbytes <= arrs[other].nbytes else (other, w)
                a, b = arrs[small], arrs[big]
                words = b.nbytes // a.itemsize
                off = int(rng.integers(0, words - a.size + 1))
                view = b.view(np.uint8).reshape(-1)[:words * a.itemsize].view(a.dtype)[off:off + a.size]
                view = view.reshape(a.shape)
                view[...] = a
                kw = _replace(kw, small, view)
                kept = {k: np.array(x, copy=True) for k, x in _arrays(kw).items()}
                e = refused(lambda: fn(**kw), match=r"shares memory with")
                assert w.split("[")[0] in str(e) or w in str(e) or "ring" in str(e), str(e)
                for k, x in _arrays(kw).items():
                    assert np.array_equal(kept[k].view(np.uint8), x.view(np.uint8)), "%s %s~%s wrote %s" % (
                        entry, w, other, k)
                n += 1
        # Disjoint carvings of one buffer are not aliases: accepted, the same bits as separate arrays.
        fn, kw = calls(rng)[entry]
        arrs = _arrays(kw)
        raw = np.zeros(sum(x.nbytes // 64 * 64 + 128 for x in arrs.values()), np.uint8)
        at, carved = 0, dict(kw)
        for k in names:
            x = arrs[k]
            v = raw[at:at + x.nbytes].view(x.dtype).reshape(x.shape)
            v[...] = x
            carved = _replace(carved, k, v)
            at += x.nbytes // 64 * 64 + 128
        fn(**kw)
        fn(**carved)
        got = _arrays(carved)
        for k in written:
            assert np.array_equal(arrs[k].view(np.uint8), got[k].view(np.uint8)), "%s: %s differs" % (entry, k)
    assert n > 100, n


def test_a_bare_file_name_in_replayssm_lib_loads_that_file(tmp_path):
    # REPLAYSSM_LIB=libreplayssm.so was checked in the working directory but handed to dlopen as
    # a bare name, which searches the system's library path (another library, or none) instead.
    import os
    import shutil
    src = rs._abi.load()[1]
    shutil.copy(src, tmp_path / "libreplayssm.so")
    env = dict(os.environ, REPLAYSSM_LIB="libreplayssm.so")
    code = "import replayssm._abi as a; print(a.load()[1])"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str((tmp_path / "libreplayssm.so").resolve()), r.stdout
