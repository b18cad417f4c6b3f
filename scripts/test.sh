#!/usr/bin/env bash
# Every test: install what is missing, build, then the whole suite with the
# libFuzzer target running beside it for a bounded time (clang build in build-fuzz/).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh -DKESTREL_TESTS=ON

fuzz_seconds=${KESTREL_FUZZ_SECONDS:-45}
if command -v clang++ >/dev/null; then
  CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DKESTREL_FUZZ=ON -DKESTREL_FUZZ_SECONDS="$fuzz_seconds" >/dev/null
  cmake --build build-fuzz --parallel "$(nproc)" --target fuzz_gguf fuzz_gguf_replay
else
  echo "test.sh: clang++ not found, libFuzzer run skipped (the corpus replay still runs below)" >&2
  exit 1
fi

# The libFuzzer run (one core for $fuzz_seconds s) goes on beside the suite, its report printed after.
# The suite runs one job more than there are cores: many e2e tests spend their time waiting on a
# server process or a socket (and the thread pool blocks rather than spins when a thread is late).
(cd build-fuzz && ctest --output-on-failure -R fuzz) > build-fuzz/fuzz-run.log 2>&1 &
fuzz_pid=$!
trap 'kill "$fuzz_pid" 2>/dev/null || true' EXIT
suite=0
(cd build && ctest --output-on-failure --parallel $(($(nproc) + 1))) || suite=$?
fuzz=0
wait "$fuzz_pid" || fuzz=$?
echo "== the libFuzzer run (build-fuzz/fuzz-run.log) =="
cat build-fuzz/fuzz-run.log
[ "$fuzz" -eq 0 ] || echo "test.sh: the libFuzzer run failed" >&2
[ "$suite" -eq 0 ] || echo "test.sh: the suite failed" >&2
[ "$suite" -eq 0 ] && [ "$fuzz" -eq 0 ]
