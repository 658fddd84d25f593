"""One source of host checks: every row of tests/callers/fold_refusals.txt (the table the Rust API
and the C ABI are held to in tests/callers.rs) and of tests/callers/refusals.txt (every entry; the
C ABI and the kernel layer are held to it in tests/hostile.rs, the Rust API in tests/callers.rs) is
refused through Python with the same words, and a refusal writes nothing."""

from pathlib import Path

import numpy as np
import pytest

import replayssm as rs

TABLE = Path(__file__).resolve().parents[2] / "tests" / "callers" / "fold_refusals.txt"
SHARED = TABLE.with_name("refusals.txt")
SLOTS, WINDOW, H, HV, V = 4, 4, 1, 2, 32


def rows():
    out = []
    for line in TABLE.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        f = [x.strip() for x in line.split("|")]
        assert len(f) == 7, line
        ints = lambda s: None if s == "-" else np.array([int(x) for x in s.split(",")], dtype=np.int32)
        out.append(pytest.param(int(f[1]), ints(f[2]), ints(f[3]), ints(f[4]), ints(f[5]), f[6], id=f[0]))
    assert len(out) >= 10, "the table lost rows"
    return out


@pytest.mark.parametrize("K,slots,lens,track_slots,track_steps,says", rows())
def test_python_refuses_every_row_with_the_tables_words(K, slots, lens, track_slots, track_steps, says):
    rng = np.random.default_rng(3)
    state = rng.uniform(-0.5, 0.5, (1, SLOTS, HV, V, K)).astype(np.float32)
    before = state.copy()
    ring = (
        rng.uniform(-0.5, 0.5, (1, SLOTS, HV, WINDOW, V)).astype(np.float32),
        rng.uniform(-0.5, 0.5, (1, SLOTS, H, WINDOW, K)).astype(np.float32),
        np.full((1, SLOTS, HV, WINDOW), -0.1, np.float32),
        np.full((1, SLOTS, HV, WINDOW), 0.5, np.float32),
    )
    with pytest.raises(rs.ReplaySSMError) as e:
        rs.fold(state=state, ring=ring, slots=slots, accept_lens=lens, track_slots=track_slots,
                track_steps=track_steps)
    assert says in e.value.message, e.value.message
    assert np.array_equal(state, before), "a refusal wrote the pool"


TREE_FORMS = {"verify_tree": "verify", "fold_tree": "fold"}


def shared_rows():
    out = []
    for line in SHARED.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        entry, edit, says = [x.strip() for x in line.split("|")]
        out.append(pytest.param(entry, edit, says, id="%s: %s" % (entry, edit)))
    assert len(out) >= 20, "the table lost rows"
    return out


@pytest.mark.parametrize("entry,edit,says", shared_rows())
def test_python_refuses_every_row_of_the_shared_table_with_its_words(rng, entry, edit, says):
    from test_hostile import calls

    fn, kw = calls(rng)[TREE_FORMS.get(entry, entry)]
    if entry == "verify_tree":  # V with parent: each request a chain
        cu = kw["cu_seqlens"]
        kw["parent"] = np.concatenate([np.arange(cu[r + 1] - cu[r]) - 1 for r in range(len(cu) - 1)]).astype(np.int32)
    if entry == "fold_tree":  # F with accepted paths [B, W] instead of accept_lens
        del kw["accept_lens"]
        kw["accept_paths"] = np.array([[0, 1, -1, -1], [0, -1, -1, -1]], np.int32)
    name, value = [x.strip() for x in edit.split("=")]
    if "[" in name:
        name, i = name.rstrip("]").split("[")
        arr = np.array(kw[name], copy=True)
        if name == "cursors":  # the cursor of row i's slot: every cursor starts at 0
            arr[:] = 0
            i = kw["slots"][int(i)]
        arr.reshape(-1)[int(i)] = int(value)  # i counts in memory order
        kw[name] = arr
    else:
        kw[name] = float(value) if name in ("scale", "lower_bound") else int(value)
    before = {n: x.copy() for n, x in kw.items() if isinstance(x, np.ndarray) and n not in ("o",)}
    with pytest.raises(rs.ReplaySSMError) as e:
        fn(**kw)
    assert says in e.value.message, e.value.message
    for n, x in before.items():
        assert np.array_equal(kw[n], x, equal_nan=True), "a refusal wrote %s" % n
