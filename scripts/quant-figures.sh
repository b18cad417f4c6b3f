#!/usr/bin/env bash
# Measures the quantization tables in docs/quantization.md: for each weight type (and
# AWQ/GPTQ, and each KV-cache type) the file size, bits per weight, KL
# divergence and Δppl against the float32 model (perplexity's method on
# ../shared/eval/stories.txt), and decode speed (bench tg).
#   scripts/quant-figures.sh stories   # stories260K (seconds)
#   scripts/quant-figures.sh 1b        # synthetic 1.1B (tens of minutes; ~15 GB in $WORK)
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/kestrel
SHARED=../shared
TEXT=$SHARED/eval/stories.txt
WORK=${WORK:-/tmp/kestrel-quant-figures}
mkdir -p "$WORK"
which=${1:-stories}

if [ "$which" = stories ]; then
  BASE=$SHARED/models/stories260K.gguf; CTX=128; CHUNKS=0; GEN=128; REPS=5
  TYPES="f16 bf16 q8_0 fp8 q4_0"
  CALIB=tests/data/calib-stories.txt
else
  BASE=$WORK/1b.f32.gguf; CTX=128; CHUNKS=4; GEN=32; REPS=3
  [ -f "$BASE" ] || $K synth --preset 1b --type f32 -o "$BASE" >/dev/null
  TYPES="f16 bf16 q8_0 fp8 q6_k q5_k q4_k q4_0"
  CALIB=""
fi

tensor_bytes() { $K info "$1" 2>/dev/null | awk '$1 == "total" {print $2}'; }
kld_line() {  # model, extra flags -> "KLD dPPL"
  $K perplexity -m "$1" -f $TEXT -c $CTX --chunks $CHUNKS --kl-divergence "$WORK/$which.base.lp" "${@:2}" 2>/dev/null |
    awk '/KL divergence/ {for (i = 1; i <= NF; i++) { if ($i == "mean") k = $(i + 1); if ($i == "PPL") d = $(i + 1) } } END {gsub(",", "", k); print k, d}'
}
tg() {  # model, extra flags -> tok/s median-ish (bench mean)
  $K bench -m "$1" -p 0 -n $GEN -r $REPS -o jsonl "${@:2}" 2>/dev/null | sed -n 's/.*"avg_ts":\([0-9.]*\).*/\1/p' | head -1
}
row() {  # label, model, extra flags
  local size bits k d t
  size=$(stat -c %s "$2")
  bits=$(awk -v s="$(tensor_bytes "$2")" -v p="$N_PARAMS" 'BEGIN {printf "%.2f", 8 * s / p}')
  read -r k d < <(kld_line "$2" "${@:3}")
  t=$(tg "$2" "${@:3}")
  printf '| %s | %s | %.2f MiB | %s | %s | %.1f |\n' "$1" "$bits" "$(awk -v s="$size" 'BEGIN {print s / 1048576}')" "$k" "$d" "$t"
}

$K perplexity -m "$BASE" -f $TEXT -c $CTX --chunks $CHUNKS --save-logprobs "$WORK/$which.base.lp" >/dev/null 2>&1
N_PARAMS=$(awk -v s="$(tensor_bytes "$BASE")" 'BEGIN {print s / 4}')  # every tensor of the base is float32
echo "| weights | bits/weight | file | KLD mean | Δppl | decode tok/s |"
echo "|---|---:|---:|---:|---:|---:|"
row f32 "$BASE"
for t in $TYPES; do
  $K quantize "$BASE" "$WORK/$which.$t.gguf" --type $t >/dev/null 2>&1
  row "$t" "$WORK/$which.$t.gguf"
done
if [ -n "$CALIB" ]; then
  for m in awq gptq awq+gptq; do
    $K quantize "$BASE" "$WORK/$which.q4_0.$m.gguf" --type q4_0 --method $m --calib $CALIB --calib-ctx 64 >/dev/null 2>&1
    row "q4_0 $m" "$WORK/$which.q4_0.$m.gguf"
  done
  $K quantize "$BASE" "$WORK/$which.mixed.gguf" --calib $CALIB --calib-ctx 64 --target-kld 0.02 --types q4_0,q8_0,f16 >/dev/null 2>&1
  row "mixed, --target-kld 0.02" "$WORK/$which.mixed.gguf"
fi
echo
KVMODEL=$BASE
[ "$which" = 1b ] && KVMODEL=$WORK/$which.q4_0.gguf
echo "KV cache types on $(basename "$KVMODEL") (KLD against the same weights with an f32 cache):"
$K perplexity -m "$KVMODEL" -f $TEXT -c $CTX --chunks $CHUNKS --save-logprobs "$WORK/$which.kvbase.lp" >/dev/null 2>&1
echo "| KV cache | KiB/token | KLD mean | Δppl | decode tok/s |"
echo "|---|---:|---:|---:|---:|"
for kv in "f32" "f16" "bf16" "q8_0" "fp8" "q4" "q8_0/q4"; do
  if [ "$kv" = "q8_0/q4" ]; then flags=(--kv-type-k q8_0 --kv-type-v q4); else flags=(--kv-type "$kv"); fi
  read -r k d < <($K perplexity -m "$KVMODEL" -f $TEXT -c $CTX --chunks $CHUNKS --kl-divergence "$WORK/$which.kvbase.lp" "${flags[@]}" 2>/dev/null |
    awk '/KL divergence/ {for (i = 1; i <= NF; i++) { if ($i == "mean") k = $(i + 1); if ($i == "PPL") d = $(i + 1) } } END {gsub(",", "", k); print k, d}')
  line=$($K bench -m "$KVMODEL" -p 0 -n $GEN -r $REPS -o jsonl "${flags[@]}" 2>/dev/null | head -1)
  t=$(echo "$line" | sed -n 's/.*"avg_ts":\([0-9.]*\).*/\1/p')
  kib=$(echo "$line" | sed -n 's/.*"kv_bytes_per_token":\([0-9]*\).*/\1/p')
  printf '| %s | %.2f | %s | %s | %.1f |\n' "$kv" "$(awk -v b="$kib" 'BEGIN {print b / 1024}')" "$k" "$d" "$t"
done
