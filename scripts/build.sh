#!/usr/bin/env bash
# Configures and builds Kestrel (Release) in build/. Extra arguments go to cmake.
# KESTREL_TARGETS: build only these targets (scripts/run.sh: the binary alone,
# not the tests and benchmarks a build dir configured for them would build too).
set -euo pipefail
cd "$(dirname "$0")/.."
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
if [ ! -f build/CMakeCache.txt ]; then
  cmake -S . -B build "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "$@"
else
  cmake -S . -B build "$@" >/dev/null
fi
targets=()
for t in ${KESTREL_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build build --parallel "$(nproc)" "${targets[@]}"
