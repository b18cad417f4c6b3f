#!/usr/bin/env bash
# Every test: install what is missing, build, run the libFuzzer target for a
# bounded time (clang build in build-fuzz/), then the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh -DKESTREL_TESTS=ON

fuzz_seconds=${KESTREL_FUZZ_SECONDS:-45}
if command -v clang++ >/dev/null; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DKESTREL_FUZZ=ON -DKESTREL_FUZZ_SECONDS="$fuzz_seconds" >/dev/null
  cmake --build build-fuzz --parallel "$(nproc)" --target fuzz_gguf fuzz_gguf_replay
  (cd build-fuzz && ctest --output-on-failure -R fuzz)
else
  echo "test.sh: clang++ not found, libFuzzer run skipped (the corpus replay still runs below)" >&2
  exit 1
fi

cd build && ctest --output-on-failure --parallel 2
