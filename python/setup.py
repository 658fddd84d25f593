"""Puts libreplayssm.so into the wheel (metadata: pyproject.toml).

The library is taken, in order, from $REPLAYSSM_LIB, else the newest of
<repo>/$CARGO_TARGET_DIR/{release,debug}/libreplayssm.so (default target/), else built with
`cargo build --release --lib --locked` in the repository. The repository is this file's parent
directory, or $REPLAYSSM_ROOT (for a build from a copy of python/, such as an sdist).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

LIB = "libreplayssm.so"


def _log(message):
    print("replayssm setup.py: " + message, file=sys.stderr, flush=True)


def _fail(message):
    raise SystemExit("replayssm setup.py: " + message)


def _repo_root():
    """The Cargo workspace holding the replayssm crate, or None (a copy of python/ alone)."""
    env = os.environ.get("REPLAYSSM_ROOT")
    candidates = [Path(env)] if env else [Path(__file__).resolve().parent.parent, Path.cwd().parent]
    for root in candidates:
        try:
            if 'name = "replayssm"' in (root / "Cargo.toml").read_text():
                return root.resolve()
        except OSError:
            pass
    if env:
        _fail("REPLAYSSM_ROOT=%s has no Cargo.toml of the replayssm crate" % env)
    return None


def _target_dir(root):
    # Relative CARGO_TARGET_DIR: relative to the repository, as the project's scripts use it.
    target = Path(os.environ.get("CARGO_TARGET_DIR") or "target")
    return target if target.is_absolute() else root / target


def _find_library():
    env = os.environ.get("REPLAYSSM_LIB")
    if env:
        if not Path(env).is_file():
            _fail("REPLAYSSM_LIB=%s is not a file" % env)
        _log("using REPLAYSSM_LIB=%s" % env)
        return Path(env)
    root = _repo_root()
    if root is None:
        _fail("cannot find the replayssm repository from %s (building from a copy of python/?): set "
              "REPLAYSSM_LIB to a built libreplayssm.so, or REPLAYSSM_ROOT to the repository"
              % Path(__file__).resolve().parent)
    target = _target_dir(root)
    built = [p for p in (target / "release" / LIB, target / "debug" / LIB) if p.is_file()]
    if built:
        newest = max(built, key=lambda p: p.stat().st_mtime)
        _log("using %s (the newest of %s)" % (newest, ", ".join(map(str, built))))
        return newest
    cmd = ["cargo", "build", "--release", "--lib", "--locked"]
    if os.environ.get("REPLAYSSM_CARGO_FEATURES"):
        cmd += ["--features", os.environ["REPLAYSSM_CARGO_FEATURES"]]
    _log("no %s under %s/{release,debug} and REPLAYSSM_LIB unset: building it in %s with `%s` "
         "(after scripts/toolchain.sh, which installs nvcc and libclang if missing)"
         % (LIB, target, root, " ".join(cmd)))
    script = '. scripts/toolchain.sh && exec "$@"'
    try:
        subprocess.run(["bash", "-c", script, "bash"] + cmd, cwd=root, check=True,
                       stdout=sys.stderr)
    except (OSError, subprocess.CalledProcessError) as e:
        _fail("building the library failed (%s): build it with `cargo build --release --lib` in %s, "
              "or set REPLAYSSM_LIB to a built libreplayssm.so" % (e, root))
    lib = target / "release" / LIB
    if not lib.is_file():
        _fail("cargo finished but %s is missing" % lib)
    return lib


class BuildPy(build_py):
    def run(self):
        # An editable install imports from the source tree, which finds the build tree itself.
        if getattr(self, "editable_mode", False):
            return super().run()
        # python/build persists between builds: start clean so a removed module cannot linger.
        shutil.rmtree(Path(self.build_lib) / "replayssm", ignore_errors=True)
        super().run()
        src = _find_library()
        dst = Path(self.build_lib) / "replayssm" / "lib" / LIB
        dst.parent.mkdir(parents=True, exist_ok=True)
        # Always copied: copy_file would keep a previous build's library that looks newer.
        _log("packaging %s as replayssm/lib/%s" % (src, LIB))
        shutil.copyfile(src, dst)
        dst.chmod(0o755)


class BinaryDistribution(Distribution):
    """The wheel carries a native library: platform-specific, never `none-any`."""

    def has_ext_modules(self):
        return True


class BdistWheel(bdist_wheel):
    def get_tag(self):
        # Loaded with ctypes, not a CPython extension: any Python 3, one platform (py3-none-linux_x86_64).
        _, _, plat = super().get_tag()
        return "py3", "none", plat


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
