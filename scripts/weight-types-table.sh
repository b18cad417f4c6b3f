#!/usr/bin/env bash
# The weight-type tables of docs/quantization.md and docs/kernels.md, from one script:
#   1. quality: every type and llama-quantize mix Kestrel writes, applied to
#      stories260K (float32), with bits per weight, perplexity and KL
#      divergence against the float32 model on ../shared/eval/stories.txt;
#   2. speed: the 1.1B synthetic model (TinyLlama's shape) in the same types,
#      prefill pp512 and decode tg128 against the measured roofline.
#   2b. quality-iq: the IQ1-IQ3 mixes (and three k-quant mixes to compare),
#      on the compat set's llama32 (random weights, 256-wide rows: stories260K's
#      64-wide rows fit no 256-wide type), KL divergence against its F16 model;
#   scripts/weight-types-table.sh quality     # seconds
#   scripts/weight-types-table.sh quality-iq  # a minute
#   2c. speed-iq: the IQ1-IQ3 mixes of the 1.1B model beside Q4_0;
#   scripts/weight-types-table.sh speed       # ~20 minutes on 2 cores, ~12 GB in $WORK
#   scripts/weight-types-table.sh speed-iq    # ~45 minutes (quantizing), then ~15 (bench)
set -euo pipefail
cd "$(dirname "$0")/.."
K=build/kestrel
SHARED=../shared
TEXT=$SHARED/eval/stories.txt
WORK=${WORK:-/tmp/kestrel-weight-types}
mkdir -p "$WORK"
TYPES="q8_0 q6_k q5_k q5_1 q5_0 q4_k q4_1 q4_0 iq4_nl iq4_xs mxfp4 q3_k q2_k"
MIXES="Q8_0 Q6_K Q5_K_M Q5_K_S Q4_K_M Q4_K_S IQ4_XS IQ4_NL Q3_K_L Q3_K_M Q3_K_S Q2_K"

tensor_bytes() { $K info "$1" 2>/dev/null | awk '$1 == "total" {print $2}'; }
types_of() {  # "Q5_0 29, Q8_0 3, ..." for the quantized tensors of a file
  $K info "$1" 2>/dev/null | awk 'NF >= 4 && $2 ~ /^(Q|IQ|MXFP|F16|BF16|KESTREL)/ && $1 !~ /norm/ {n[$2]++} END {for (t in n) printf "%s %d, ", t, n[t]}' | sed 's/, $//'
}

quality() {
  local base=$SHARED/models/stories260K.gguf ctx=128
  $K imatrix -m "$base" -f "$TEXT" -o "$WORK/stories.imatrix.gguf" -c $ctx -t 2 >/dev/null 2>&1
  $K perplexity -m "$base" -f "$TEXT" -c $ctx --save-logprobs "$WORK/stories.base.lp" >/dev/null 2>&1
  local params; params=$(awk -v s="$(tensor_bytes "$base")" 'BEGIN {print s / 4}')
  echo "| weights | tensors stored as | bits/weight | PPL | KLD mean | same top token |"
  echo "|---|---|---:|---:|---:|---:|"
  row() {  # label, file
    local bits line
    bits=$(awk -v s="$(tensor_bytes "$2")" -v p="$params" 'BEGIN {printf "%.2f", 8 * s / p}')
    line=$($K perplexity -m "$2" -f "$TEXT" -c $ctx --kl-divergence "$WORK/stories.base.lp" 2>/dev/null)
    local ppl kld top
    ppl=$(echo "$line" | sed -n 's/.*PPL = \([0-9.]*\).*/\1/p')
    kld=$(echo "$line" | sed -n 's/.*: mean \([0-9.]*\),.*/\1/p')
    top=$(echo "$line" | sed -n 's/.*same top token \([0-9.]*%\).*/\1/p')
    echo "| $1 | $(types_of "$2") | $bits | $ppl | $kld | $top |"
  }
  row "f32 (the base)" "$base"
  for t in $TYPES; do
    $K quantize "$base" "$WORK/s.$t.gguf" --type "$t" -t 2 >/dev/null 2>&1
    row "--type $t" "$WORK/s.$t.gguf"
  done
  for m in $MIXES; do
    $K quantize "$base" "$WORK/s.$m.gguf" --mix "$m" -t 2 >/dev/null 2>&1
    row "--mix $m" "$WORK/s.$m.gguf"
    case $m in Q4_K_M|IQ4_XS|Q3_K_M|Q2_K)
      $K quantize "$base" "$WORK/s.$m.im.gguf" --mix "$m" --imatrix "$WORK/stories.imatrix.gguf" -t 2 >/dev/null 2>&1
      row "--mix $m --imatrix" "$WORK/s.$m.im.gguf";;
    esac
  done
}

quality_iq() {
  local base=$SHARED/reference/compat/models/llama32.F16.gguf ctx=128
  $K imatrix -m "$base" -f "$TEXT" -o "$WORK/llama32.imatrix.gguf" -c $ctx -t 2 >/dev/null 2>&1
  $K perplexity -m "$base" -f "$TEXT" -c $ctx --save-logprobs "$WORK/llama32.base.lp" >/dev/null 2>&1
  local params; params=$(awk -v s="$(tensor_bytes "$base")" 'BEGIN {print s / 2}')
  echo "| mix (--imatrix) | tensors stored as | bits/weight | KLD mean | same top token |"
  echo "|---|---|---:|---:|---:|"
  for m in Q4_K_M Q3_K_M Q2_K IQ3_M IQ3_S IQ3_XS IQ3_XXS IQ2_M IQ2_S IQ2_XS IQ2_XXS IQ1_M IQ1_S; do
    local f=$WORK/l.$m.gguf bits line
    $K quantize "$base" "$f" --mix "$m" --imatrix "$WORK/llama32.imatrix.gguf" -t 2 >/dev/null 2>&1
    bits=$(awk -v s="$(tensor_bytes "$f")" -v p="$params" 'BEGIN {printf "%.2f", 8 * s / p}')
    line=$($K perplexity -m "$f" -f "$TEXT" -c $ctx --kl-divergence "$WORK/llama32.base.lp" 2>/dev/null)
    echo "| $m | $(types_of "$f") | $bits | $(echo "$line" | sed -n 's/.*: mean \([0-9.]*\),.*/\1/p') |" \
         "$(echo "$line" | sed -n 's/.*same top token \([0-9.]*%\).*/\1/p') |"
  done
}

speed() {
  local f16=$WORK/1b.f16.gguf models=""
  [ -f "$f16" ] || $K synth --preset 1b --type f16 -o "$f16" >/dev/null
  [ -f "$WORK/1b.q4_0.gguf" ] || $K synth --preset 1b --type q4_0 -o "$WORK/1b.q4_0.gguf" >/dev/null
  models="$WORK/1b.q4_0.gguf"
  for m in Q4_K_M Q5_K_M Q6_K Q3_K_M Q2_K IQ4_XS Q4_1 Q5_0 Q5_1 IQ4_NL; do
    [ -f "$WORK/1b.$m.gguf" ] || $K quantize "$f16" "$WORK/1b.$m.gguf" --mix "$m" -t 2 >/dev/null 2>&1
    models="$models,$WORK/1b.$m.gguf"
  done
  $K bench -m "$models" -p 512 -n 128 -t 2 -r 3 --measure 2>/dev/null | grep -E '^\||^  '
}

# The IQ1-IQ3 mixes beside Q4_0 (their base types: IQ2_M's is IQ2_S, IQ2_S's IQ2_XS).
speed_iq() {
  local f16=$WORK/1b.f16.gguf models=""
  [ -f "$f16" ] || $K synth --preset 1b --type f16 -o "$f16" >/dev/null
  [ -f "$WORK/1b.q4_0.gguf" ] || $K synth --preset 1b --type q4_0 -o "$WORK/1b.q4_0.gguf" >/dev/null
  models="$WORK/1b.q4_0.gguf"
  # They need an importance matrix: one from the evaluation text (speed does not depend on it).
  [ -f "$WORK/1b.imatrix.gguf" ] || $K imatrix -m "$f16" -f "$TEXT" -o "$WORK/1b.imatrix.gguf" -c 256 -t 2 >/dev/null 2>&1
  for m in IQ3_S IQ3_XXS IQ2_M IQ2_XS IQ2_XXS IQ1_M IQ1_S; do
    [ -f "$WORK/1b.$m.gguf" ] ||
      $K quantize "$f16" "$WORK/1b.$m.gguf" --mix "$m" --imatrix "$WORK/1b.imatrix.gguf" -t 2 >/dev/null 2>&1
    models="$models,$WORK/1b.$m.gguf"
  done
  $K bench -m "$models" -p 512 -n 128 -t 2 -r 3 --measure 2>/dev/null | grep -E '^\||^  '
}

case ${1:-quality} in
  quality) quality ;;
  quality-iq) quality_iq ;;
  speed) speed ;;
  speed-iq) speed_iq ;;
  *) echo "usage: $0 quality|quality-iq|speed|speed-iq" >&2; exit 2 ;;
esac
