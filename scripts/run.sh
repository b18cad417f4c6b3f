#!/usr/bin/env bash
# The main job: install what is missing, build, import the TinyStories model
# from ../shared and tell a story with it.
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${KESTREL_SHARED_DIR:-../shared}
scripts/setup.sh
KESTREL_TARGETS=kestrel scripts/build.sh  # the binary only; scripts/test.sh builds the tests and benchmarks
mkdir -p models
if [ ! -f models/stories260K.gguf ]; then
  build/kestrel convert --llama2c "$shared/models/stories260K.bin" --tokenizer "$shared/models/tok512.bin" \
    -o models/stories260K.gguf
fi
build/kestrel run -m models/stories260K.gguf -p "${1:-Once upon a time}" -n "${2:-200}" --temp 0.8 --seed 42
