#!/usr/bin/env bash
# Kestrel against llama.cpp on the same files, threads and machine: the
# Llama-3.2-1B shape from `kestrel synth` (F16), quantized by llama.cpp's own
# llama-quantize to Q4_0, Q4_K_M, Q8_0, IQ4_XS and BF16, then `kestrel bench`
# and `llama-bench` interleaved round by round (pp512 and tg64), printing each
# engine's median tok/s, the ratio, and the CPU and kernel path they ran on.
#
# llama.cpp comes from ../shared/tools/llamacpp-oracle (get-llama.sh, the
# pinned release, built for this CPU's ISA and never with its AMX path).
# --isa avx2 holds both engines to AVX2 on a CPU that has more: kestrel with
# KESTREL_ISA=avx2, llama.cpp built with AVX2/FMA/F16C only (its own folder).
#
# Usage: scripts/bench-vs-llamacpp.sh [--isa native|avx2] [--rounds N] [--threads T]
#          [--types "Q4_0 Q4_K_M Q8_0 IQ4_XS BF16"] [--llama DIR] [--work DIR] [--kestrel BIN]
set -euo pipefail
cd "$(dirname "$0")/.."

isa=native rounds=3 threads=2 types="Q4_0 Q4_K_M Q8_0 IQ4_XS BF16"
llama="" work=${TMPDIR:-/tmp}/kestrel-vs-llamacpp kestrel=build/kestrel
while [ $# -gt 0 ]; do
  case $1 in
    --isa) isa=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --types) types=$2; shift 2 ;;
    --llama) llama=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --kestrel) kestrel=$2; shift 2 ;;
    *) echo "bench-vs-llamacpp: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
case $isa in native|avx2) ;; *) echo "bench-vs-llamacpp: --isa must be native or avx2" >&2; exit 2 ;; esac
[ -x "$kestrel" ] || { echo "bench-vs-llamacpp: $kestrel not built (scripts/build.sh)" >&2; exit 2; }

oracle=../shared/tools/llamacpp-oracle
if [ -z "$llama" ]; then
  llama=$HOME/llama-ref
  [ "$isa" = avx2 ] && llama=$HOME/llama-avx2
fi
if [ ! -x "$llama/build/bin/llama-bench" ]; then
  if [ "$isa" = avx2 ]; then
    ISA_FLAGS="-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
-DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" \
      "$oracle/get-llama.sh" "$llama"
  else
    "$oracle/get-llama.sh" "$llama"
  fi
fi
kenv=()
[ "$isa" = avx2 ] && kenv=(KESTREL_ISA=avx2)
# That build's own libraries (a copied build's libllama keeps its first folder in RUNPATH).
export LD_LIBRARY_PATH=$llama/build/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

mkdir -p "$work"
src=$work/llama3-1b.F16.gguf
[ -f "$src" ] || "$kestrel" synth --arch llama --preset llama3-1b --type f16 -o "$src" >/dev/null
for t in $types; do
  f=$work/llama3-1b.$t.gguf
  [ -f "$f" ] || "$llama/build/bin/llama-quantize" "$src" "$f" "$t" >"$work/quantize-$t.log" 2>&1
done

cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "CPU: $cpu ($(nproc) logical CPUs); threads $threads; rounds $rounds (medians); $(date -u +%F)"
echo "kestrel: $("$kestrel" --version 2>/dev/null || echo "$kestrel"), kernels: $(env "${kenv[@]}" "$kestrel" hw 2>/dev/null |
  sed -n 's/^kernels: *\([a-z0-9 ]*\).*/\1/p' | head -1)"
llama_isa=$(for k in NATIVE AVX AVX2 FMA F16C AVX_VNNI AVX512 AVX512_VNNI AVX512_BF16 AMX_INT8; do
  v=$(sed -n "s/^GGML_$k:BOOL=//p" "$llama/build/CMakeCache.txt"); if [ "$v" = ON ]; then printf "%s " "$k"; fi; done)
echo "llama.cpp: $llama (GGML_ options ON: $llama_isa; NATIVE means -march=native, this CPU's every ISA)"
echo
echo "| type | pp512 kestrel / llama.cpp (tok/s) | ratio | tg64 kestrel / llama.cpp | ratio |"
echo "|---|---|---:|---|---:|"

median() { python3 -c 'import statistics,sys; print(f"{statistics.median(float(x) for x in sys.argv[1:]):.1f}")' "$@"; }
kbench() {  # FILE "-p P -n N" -> tok/s
  env "${kenv[@]}" "$kestrel" bench -m "$1" $2 -t "$threads" -r 1 --json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])'
}
lbench() {
  "$llama/build/bin/llama-bench" -m "$1" $2 -t "$threads" -r 1 -o json 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])'
}
for t in $types; do
  f=$work/llama3-1b.$t.gguf
  row="| $t |"
  for test in "-p 512 -n 0" "-p 0 -n 64"; do
    ks=() ls=()
    for _ in $(seq "$rounds"); do
      ks+=("$(kbench "$f" "$test")")
      ls+=("$(lbench "$f" "$test")")
    done
    k=$(median "${ks[@]}") l=$(median "${ls[@]}")
    row+=" $k / $l | $(python3 -c "print(f'{$k / $l:.2f}x')") |"
  done
  echo "$row"
done
