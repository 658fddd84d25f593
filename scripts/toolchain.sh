# shellcheck shell=bash
# Sourced by the other scripts. Installs, idempotently and into ignored project-local paths,
# what the build needs and the machine lacks, then exports where it is:
#   - the CUDA 13.0 toolchain from PyPI, pinned exactly (nvcc, cudart_static, crt, nvvm, cccl);
#   - libclang for bindgen (the PyPI `libclang` wheel, so no root and no apt are needed).
# A user with their own toolkit sets CUDA_HOME or NVCC and nothing CUDA is downloaded.
# Set REPLAYSSM_NO_CUDA_INSTALL=1 to build the emulated backend only.

rssm_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rssm_tc="$rssm_root/.toolchain"
rssm_py_pins="nvidia-cuda-nvcc==13.0.88 nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-cccl==13.0.85"
rssm_clang_pin="libclang==18.1.1"
# SASS inspection (tests/sass.rs): there is no 13.0 wheel of these; 13.2 reads 13.0 cubins.
rssm_sass_pins="nvidia-cuda-cuobjdump==13.2.51 nvidia-cuda-nvdisasm==13.2.51"
# The Python binding's test suite (python/tests, emulated backend): NumPy and pytest with its deps,
# and ml_dtypes (NumPy's bfloat16, so that the bf16 SGLang goldens run through replayssm.sglang
# without torch).
rssm_pytest_pins="numpy==2.2.6 pytest==8.3.5 iniconfig==2.1.0 packaging==25.0 pluggy==1.6.0 ml_dtypes==0.5.4"
# The C/C++ package checks (scripts/test-packages): CMake and pkgconf, neither on the machine or
# in CI. Both wheels carry a prebuilt binary.
rssm_pkg_pins="cmake==3.31.10 pkgconf==2.5.1.post2"

rssm_pip() {
  # pip from whichever python3 the machine has; install pip itself if it is missing.
  if ! python3 -m pip --version >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip >/dev/null
    fi
  fi
  python3 -m pip install --disable-pip-version-check --root-user-action=ignore --no-deps --quiet "$@"
}

rssm_install() { # dir stamp pins...
  local dir=$1 pins=$2
  if [ -f "$dir/.pins" ] && [ "$(cat "$dir/.pins")" = "$pins" ]; then return 0; fi
  echo "replayssm: installing $pins into $dir" >&2
  rm -rf "$dir" && mkdir -p "$dir"
  # shellcheck disable=SC2086
  rssm_pip --target "$dir" $pins || { echo "replayssm: pip install of $pins failed" >&2; return 1; }
  printf '%s' "$pins" >"$dir/.pins"
}

if [ -z "${NVCC:-}" ] && [ -z "${CUDA_HOME:-}" ] && [ "${REPLAYSSM_NO_CUDA_INSTALL:-0}" != 1 ]; then
  if command -v nvcc >/dev/null 2>&1 && nvcc --version 2>/dev/null | grep -q 'release 13\.0'; then
    NVCC=$(command -v nvcc)
  else
    rssm_install "$rssm_tc/cuda" "$rssm_py_pins" || return 1
    NVCC="$rssm_tc/cuda/nvidia/cu13/bin/nvcc"
  fi
  export NVCC
fi

if [ -z "${LIBCLANG_PATH:-}" ]; then
  if ! ldconfig -p 2>/dev/null | grep -q 'libclang\(-[0-9.]*\)\?\.so '; then
    rssm_install "$rssm_tc/libclang" "$rssm_clang_pin" || return 1
    export LIBCLANG_PATH="$rssm_tc/libclang/clang/native"
  fi
fi

if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi

# Installs the Python test dependencies (on demand: only scripts that run pytest call this) and
# prints the PYTHONPATH that finds them and the binding.
rssm_python_test_path() {
  rssm_install "$rssm_tc/pytest" "$rssm_pytest_pins" >&2 || return 1
  printf '%s' "$rssm_root/python:$rssm_tc/pytest"
}

# Installs cuobjdump + nvdisasm (on demand: scripts/test) and exports CUOBJDUMP for tests/sass.rs.
rssm_sass_tools() {
  if [ -n "${CUOBJDUMP:-}" ]; then return 0; fi
  rssm_install "$rssm_tc/sass" "$rssm_sass_pins" || return 1
  export CUOBJDUMP="$rssm_tc/sass/nvidia/cu13/bin/cuobjdump"
}

# Installs CMake and pkgconf (on demand: scripts/test-packages) and exports CMAKE and PKG_CONFIG.
# The binaries are called directly: the wheels' bin/ wrappers need this dir on PYTHONPATH.
rssm_cmake_tools() {
  if [ -n "${CMAKE:-}" ] && [ -n "${PKG_CONFIG:-}" ]; then return 0; fi
  rssm_install "$rssm_tc/pkgtools" "$rssm_pkg_pins" || return 1
  export CMAKE=${CMAKE:-$rssm_tc/pkgtools/cmake/data/bin/cmake}
  export PKG_CONFIG=${PKG_CONFIG:-$rssm_tc/pkgtools/pkgconf/.bin/pkgconf}
}
