"""bench/peers/sglang_timing.py runs only on a GPU machine with torch, triton and the sglang wheel;
here: its shapes are the floor model's, its arguments are checked, and without the stack it says why
it skips."""
import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "peers" / "sglang_timing.py"


def load():
    spec = importlib.util.spec_from_file_location("sglang_timing", SCRIPT)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def fake_site(tmp_path):
    (tmp_path / "sglang" / "kernels" / "ops" / "attention" / "linear").mkdir(parents=True, exist_ok=True)
    return str(tmp_path)


def test_shapes_match_the_floor_model():
    floor = (ROOT / "tools" / "src" / "floor.rs").read_text()
    for name, (h, hv, k, v, variant) in load().SHAPES.items():
        assert '"%s"' % name in floor
        assert "dims(%d, %d, %d, %d)" % (h, hv, k, v) in floor, name


def test_arguments_are_checked(tmp_path):
    m = load()
    a = m.parse_args(["--site", fake_site(tmp_path), "--batches", "1,8", "--windows", "2,4"])
    assert a.batches == [1, 8] and a.windows == [2, 4]
    for bad in (["--shapes", "nope"], ["--windows", "1"], ["--windows", "17"], ["--batches", "x"]):
        with pytest.raises(SystemExit):
            m.parse_args(["--site", fake_site(tmp_path)] + bad)
    with pytest.raises(SystemExit):
        m.parse_args(["--site", str(tmp_path / "missing")])


def test_without_the_peer_stack_it_skips_with_its_reason(tmp_path):
    try:
        import torch
        if torch.cuda.is_available():
            pytest.skip("torch sees a GPU here: the script would run for real")
    except ImportError:
        pass
    r = subprocess.run([sys.executable, str(SCRIPT), "--site", fake_site(tmp_path), "--batches", "1"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "skipped" in r.stderr
