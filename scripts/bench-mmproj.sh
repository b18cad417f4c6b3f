#!/usr/bin/env bash
# Image encode time and time to first token with one image: kestrel vs llama.cpp's multimodal library (libmtmd,
# what llama-mtmd-cli runs), same files, same threads, runs interleaved, medians (docs/benchmarks.md).
#   scripts/bench-mmproj.sh [LLAMA_DIR] [REPS] [LAYERS]
# The files: `kestrel synth` Gemma-3-1B-shaped text model (Q4_0) and a Gemma 3 projector at SigLIP-400M's widths
# (1152 wide, 16 heads, FFN 4304, 896 px: 4096 patches, 256 rows) with LAYERS blocks (default 4 of its 27; the
# time per block is what compares), F16 as the converter writes it; a 640x480 PNG. llama.cpp runs its encoder
# without flash attention (faster on this CPU than with it, measured: docs/benchmarks.md) via
# tests/compat/mtmd_oracle.cpp --time, built against LLAMA_DIR (get-llama.sh's DEST).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA=${1:-$HOME/llama-ref}; REPS=${2:-3}; LAYERS=${3:-4}; T=${THREADS:-2}
W=${WORK:-build/bench-mmproj}; mkdir -p "$W"
K=build/kestrel
[ -f "$W/text.gguf" ] || $K synth --arch gemma3 --preset 1b --type q4_0 --seed 1 -o "$W/text.gguf" \
  --mmproj "$W/mmproj.gguf" --mmproj-preset siglip-400m --mmproj-type f16 --mmproj-layers "$LAYERS" >/dev/null
[ -f "$W/photo.png" ] || python3 - "$W/photo.png" <<'PY'
import struct, sys, zlib
w, h = 640, 480
raw = b"".join(b"\0" + bytes(v for x in range(w) for v in ((x*7+y*3)%256, (x*x//7+y*5)%256, (x*y//11+40)%256)) for y in range(h))
c = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
open(sys.argv[1], "wb").write(b"\x89PNG\r\n\x1a\n" + c(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) + c(b"IDAT", zlib.compress(raw)) + c(b"IEND", b""))
PY
ORACLE="$W/mtmd_oracle"
[ -x "$ORACLE" ] || c++ -std=c++17 -O2 tests/compat/mtmd_oracle.cpp -I"$LLAMA/include" -I"$LLAMA/ggml/include" \
  -I"$LLAMA/tools/mtmd" -L"$LLAMA/build/bin" -lmtmd -lllama -lggml -lggml-base -Wl,-rpath,"$LLAMA/build/bin" -o "$ORACLE"
echo "| run | engine | encode ms | TTFT ms |"
echo "|---|---|---|---|"
for r in $(seq 1 "$REPS"); do
  k=$($K bench -m "$W/text.gguf" --mmproj "$W/mmproj.gguf" --image "$W/photo.png" -r 1 -t "$T" 2>/dev/null | tail -1)
  echo "| $r | kestrel | $(echo "$k" | awk -F'|' '{print $7}') | $(echo "$k" | awk -F'|' '{print $8}') |"
  l=$("$ORACLE" --threads "$T" --time 1 -n 1 "$W/text.gguf" "$W/mmproj.gguf" "<__media__>Describe this image." "$W/photo.png")
  echo "| $r | llama.cpp | $(echo "$l" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(d["encode_ms"][0],1), "|", round(d["ttft_ms"][0],1))') |"
done
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $T threads; projector: $LAYERS SigLIP-400M blocks, F16"
