#!/usr/bin/env bash
# Image (or audio) encode time and time to first token with one image (clip): kestrel vs llama.cpp's multimodal
# library (libmtmd, what llama-mtmd-cli runs), same files, same threads, runs interleaved, medians (docs/benchmarks.md).
#   [PROJ=gemma3|qwen35|pixtral|gemma4v|ultravox|gemma4a] scripts/bench-mmproj.sh [LLAMA_DIR] [REPS] [LAYERS]
# The files, by `kestrel synth`, F16 projectors as the converters write them, with LAYERS vision blocks (default 4;
# the time per block is what compares), and a 640x480 PNG:
#   gemma3: a Gemma-3-1B-shaped text model (Q4_0) and a Gemma 3 projector at SigLIP-400M's widths (1152 wide,
#     16 heads, FFN 4304, 896 px: 4096 patches, 256 rows);
#   qwen35: a Qwen3.5-0.8B-shaped text model (Q4_0) and a Qwen3-VL tower at Qwen3.5's widths (1152 wide, 16 heads,
#     FFN 4304, patch 16: the photo is 40x30 patches, 300 rows);
#   pixtral: a Ministral-3-3B-shaped text model (4 of its layers, Q4_0) and a Pixtral tower at Mistral Small
#     3.1's widths (1024 wide, 16 heads, FFN 4096, patch 14, 2x2 merger: the photo is 46x34 patches, 407 rows with
#     the breaks);
#   gemma4v: a Gemma-4-E2B-shaped text model (5 of its layers, none sharing a cache, Q4_0) and Gemma 4's vision
#     tower at the synth `base` preset's widths (768 wide, 12 heads, FFN 3072, patch 16, 3x3 pooling): the photo
#     sized by the projector's own rule to 624x480, 39x30 = 1170 patches, pooled to 13x10 = 130 rows;
#   ultravox: a TinyLlama-1.1B-shaped text model (4 of its layers, Q4_0) and Whisper large-v3's encoder (1280 wide,
#     20 heads, FFN 5120, 128 mel bins) with Ultravox's projector, and a 10 s 16 kHz WAV (one 30 s window: 1500
#     frames through the blocks, 187 rows);
#   gemma4a: a Gemma-4-E2B-shaped text model (5 of its layers, none sharing a cache, Q4_0) and Gemma 4's audio Conformer at the `large`
#     preset's widths (1024 wide, 8 heads, FFN 4096, subsampling channels 128 and 32), the same 10 s WAV (999
#     frames, 250 rows: a Conformer chunk is not padded to 30 s).
# llama.cpp runs its encoder without flash attention (faster on this CPU than with it, measured:
# docs/benchmarks.md) via tests/compat/mtmd_oracle.cpp --time, built against LLAMA_DIR (get-llama.sh's DEST).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA=${1:-$HOME/llama-ref}; REPS=${2:-3}; LAYERS=${3:-4}; T=${THREADS:-2}
PROJ=${PROJ:-gemma3}
case "$PROJ" in
  gemma3) SYNTH=(--arch gemma3 --preset 1b --mmproj-preset siglip-400m); TOWER="SigLIP-400M" ;;
  qwen35) SYNTH=(--arch qwen35 --preset 0.8b --mmproj-preset qwen35); TOWER="Qwen3.5 vision (Qwen3-VL)" ;;
  pixtral) SYNTH=(--arch mistral3 --preset 3b --layers 4 --mmproj-preset small); TOWER="Pixtral (Mistral Small 3.1)" ;;
  gemma4v) SYNTH=(--arch gemma4 --preset e2b --layers 5 --shared-kv 0 --mmproj-preset base)
           TOWER="Gemma 4 vision" ;;
  ultravox) SYNTH=(--arch llama --preset 1b --layers 4 --mmproj-projector ultravox --mmproj-preset whisper-large)
            TOWER="Whisper large-v3 (Ultravox)" ;;
  gemma4a) SYNTH=(--arch gemma4 --preset e2b --layers 5 --shared-kv 0 --mmproj-projector gemma4a --mmproj-preset large)
           TOWER="Gemma 4 audio Conformer" ;;
  *) echo "PROJ: gemma3, qwen35, pixtral, gemma4v, ultravox or gemma4a" >&2; exit 2 ;;
esac
W=${WORK:-build/bench-mmproj-$PROJ-$LAYERS}; mkdir -p "$W"
K=build/kestrel
[ -f "$W/text.gguf" ] || $K synth "${SYNTH[@]}" --type q4_0 --seed 1 -o "$W/text.gguf" \
  --mmproj "$W/mmproj.gguf" --mmproj-type f16 --mmproj-layers "$LAYERS" >/dev/null
MEDIA="$W/photo.png"
case "$PROJ" in ultravox|gemma4a) MEDIA="$W/speech.wav" ;; esac
[ -f "$MEDIA" ] || python3 - "$MEDIA" <<'PY'
import math, struct, sys, zlib
if sys.argv[1].endswith(".wav"):
    n = 160000
    d = b"".join(struct.pack("<h", int(9000 * math.sin(i * 0.07) + 5000 * math.sin(i * 0.31 + math.sin(i * 1e-3)))) for i in range(n))
    open(sys.argv[1], "wb").write(b"RIFF" + struct.pack("<I", 36 + len(d)) + b"WAVEfmt " + struct.pack("<IHHIIHH", 16, 1, 1, 16000, 32000, 2, 16) + b"data" + struct.pack("<I", len(d)) + d)
    sys.exit()
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
  k=$($K bench -m "$W/text.gguf" --mmproj "$W/mmproj.gguf" --image "$MEDIA" -r 1 -t "$T" 2>/dev/null | tail -1)
  echo "| $r | kestrel | $(echo "$k" | awk -F'|' '{print $7}') | $(echo "$k" | awk -F'|' '{print $8}') |"
  l=$("$ORACLE" --threads "$T" --time 1 -n 1 "$W/text.gguf" "$W/mmproj.gguf" "<__media__>Describe this image." "$MEDIA")
  echo "| $r | llama.cpp | $(echo "$l" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(round(d["encode_ms"][0],1), "|", round(d["ttft_ms"][0],1))') |"
done
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $T threads; projector: $LAYERS $TOWER blocks, F16"
