#!/usr/bin/env bash
# Builds libreplayssm.a, compiles examples/c/fold.c against include/replayssm.h with the system C
# compiler, and runs it (emulated backend: no GPU needed). Exit status = the example's.
# Pass a cargo profile dir as $1 (default: debug). Honours CARGO_TARGET_DIR and
# REPLAYSSM_CARGO_FEATURES (so it reuses the build scripts/test made).
set -euo pipefail
cd "$(dirname "$0")/../.."
profile=${1:-debug}
target=${CARGO_TARGET_DIR:-target}
features=(--features "${REPLAYSSM_CARGO_FEATURES:-}")
# --workspace --tests: resolve features as `cargo test --workspace` does (the tools crate and
# dev-dependencies included), so the dependencies, the build script and the kernel objects of the
# test run are reused instead of rebuilt (without --workspace cargo unified other features and
# rebuilt serde and everything above it: 100 s of scripts/test).
if [ "$profile" = release ]; then
  cargo build --workspace --locked --lib --tests --release "${features[@]}"
else
  cargo build --workspace --locked --lib --tests "${features[@]}"
fi
out="$target/$profile/examples-c"
mkdir -p "$out"
# The static library bundles the kernels, the emulator and cudart_static; the system libraries
# are the ones `cargo rustc --lib --crate-type staticlib -- --print native-static-libs` lists.
${CC:-cc} -std=c11 -Wall -Wextra -Werror -O2 -Iinclude examples/c/fold.c \
  "$target/$profile/libreplayssm.a" -lstdc++ -lpthread -ldl -lm -lrt -lgcc_s -lc \
  -o "$out/fold"
"$out/fold"
