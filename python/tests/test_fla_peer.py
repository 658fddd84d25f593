"""bench/peers/fla_peer.py runs only on a GPU machine with fla-core; here: it imports without
torch, its shapes are the model shapes of tools/src/floor.rs, its arguments are checked, and it says
why it skips."""
import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "peers" / "fla_peer.py"


def load():
    spec = importlib.util.spec_from_file_location("fla_peer", SCRIPT)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def test_shapes_match_the_floor_model():
    floor = (ROOT / "tools" / "src" / "floor.rs").read_text()
    m = load()
    for name, (h, hv, k, v, variant) in m.SHAPES.items():
        assert '"%s"' % name in floor
        assert "dims(%d, %d, %d, %d)" % (h, hv, k, v) in floor, name
        assert hv % h == 0


def test_arguments_are_checked():
    m = load()
    a = m.parse_args(["--batches", "1,8", "--windows", "1,4"])
    assert a.batches == [1, 8] and a.windows == [1, 4]
    with pytest.raises(SystemExit):
        m.parse_args(["--shapes", "nope"])
    with pytest.raises(SystemExit):
        m.parse_args(["--windows", "0"])


def test_without_the_peer_stack_it_skips_with_its_reason():
    try:
        import torch  # noqa: F401
        import fla  # noqa: F401
        pytest.skip("torch and fla are installed here: the script would run for real")
    except ImportError:
        pass
    r = subprocess.run([sys.executable, str(SCRIPT), "--batches", "1"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "skipped" in r.stderr
