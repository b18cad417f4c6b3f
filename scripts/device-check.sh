#!/usr/bin/env bash
# The GPU backend on a real GPU (docs/gpu.md), for a machine with no package registry and only what is brought
# along. Two steps:
#
#   scripts/device-check.sh pack [DIR]   on the build machine (Debian 12, after the build): DIR (default
#                                        device-pack/) gets kestrel, the unit-test binary, every shared library
#                                        they load (glibc and the Vulkan loader included, so the GPU machine's
#                                        own versions do not matter) and a loader script; under 64 MiB
#   scripts/device-check.sh run [DIR]    on the GPU machine: `kestrel hw`, the Vulkan operator tests, then
#                                        `kestrel bench --device vulkan` on Llama-3.1-8B-shaped Q4_K_M and Q8_0
#                                        files that synth and quantize write there; prints decode tok/s with
#                                        the fraction of the device's memory bandwidth and prefill TFLOP/s
#                                        with the fraction of its dense fp16 matrix peak
#
# The device's peaks come from the table below by name (H200: 4.8 TB/s, 989 dense fp16 TFLOP/s), or from
# DEVICE_BW_GBS / DEVICE_PEAK_TFLOPS. PRESET (default llama3-8b), PROMPT (512), GEN (128), REPS (3),
# WORK (scratch folder for the model files, default /tmp/kestrel-device-check) and DEVICE (vulkan:0) may be set.
# The vendor's Vulkan driver (its ICD) must be installed on the GPU machine: it comes with the GPU driver.
set -euo pipefail

mode=${1:-}
dir=${2:-device-pack}
root=$(cd "$(dirname "$0")/.." && pwd)

case "$mode" in
pack)
  build=${BUILD_DIR:-$root/build}
  mkdir -p "$dir/lib"
  cp "$build/kestrel" "$build/tests/kestrel_unit_tests" "$dir/"
  # Every library either binary loads, the dynamic loader and libc among them, and the Vulkan loader (which
  # kestrel links but ldd lists only once it is found).
  for bin in "$build/kestrel" "$build/tests/kestrel_unit_tests"; do
    ldd "$bin" | awk '/=> \// {print $3} /^[ \t]*\/lib/ {print $1}'
  done | sort -u | while read -r lib; do cp -L "$lib" "$dir/lib/"; done
  cp -L "$(ldconfig -p | awk '/libvulkan.so.1 / {print $NF; exit}')" "$dir/lib/"
  cat > "$dir/with-libs" <<'EOF'
#!/bin/sh
# Runs a packed binary with the packed libraries and dynamic loader: with-libs BINARY ARGS...
here=$(cd "$(dirname "$0")" && pwd)
bin=$1
shift
exec "$here/lib/ld-linux-x86-64.so.2" --library-path "$here/lib" "$here/$bin" "$@"
EOF
  chmod +x "$dir/with-libs"
  du -sh "$dir"
  size=$(du -sm "$dir" | cut -f1)
  [ "$size" -lt 64 ] || { echo "device-check: the pack is ${size} MiB, over the 64 MiB that may be brought" >&2; exit 1; }
  ;;
run)
  k() { "$dir/with-libs" kestrel "$@"; }
  device=${DEVICE:-vulkan:0}
  preset=${PRESET:-llama3-8b}
  work=${WORK:-/tmp/kestrel-device-check}
  mkdir -p "$work"
  start=$(date +%s)
  echo "== kestrel hw (Vulkan devices)"
  k hw | grep -E '^(cpu|vulkan)' || true
  index=${device#vulkan}
  index=${index#:}
  name=$(k hw | sed -n "s/^vulkan: *\[${index:-0}\] \(.*\) (\(discrete\|integrated\|virtual\|cpu\|other\), .*/\1/p" | head -1)
  echo "device: ${name:-unknown}"
  case "$name" in
    *H200*) bw=4800; peak=989 ;;
    *H100*SXM* | *H100\ 80GB\ HBM3*) bw=3350; peak=989 ;;
    *H100*) bw=2000; peak=756 ;;
    *A100*) bw=2039; peak=312 ;;
    *L40S*) bw=864; peak=362 ;;
    *) bw=0; peak=0 ;;
  esac
  bw=${DEVICE_BW_GBS:-$bw}
  peak=${DEVICE_PEAK_TFLOPS:-$peak}

  echo "== the Vulkan operator tests on $device"
  "$dir/with-libs" kestrel_unit_tests --gtest_filter='*Vulkan*' --gtest_brief=1

  echo "== model files ($preset): synth Q8_0 directly, F16 then quantize --mix Q4_K_M"
  [ -f "$work/q8_0.gguf" ] || k synth --arch llama --preset "$preset" --type q8_0 -o "$work/q8_0.gguf"
  if [ ! -f "$work/q4_k_m.gguf" ]; then
    k synth --arch llama --preset "$preset" --type f16 -o "$work/f16.gguf"
    k quantize "$work/f16.gguf" "$work/q4_k_m.gguf" --mix Q4_K_M
    rm -f "$work/f16.gguf"
  fi
  echo "   ($(($(date +%s) - start)) s so far)"
  echo "== where the backend runs what (prefill on cooperative matrices, or why not)"
  k run -m "$work/q8_0.gguf" -p "Once upon a time" -n 4 --temp 0 --device "$device" 2>&1 >/dev/null | tail -1

  for f in q4_k_m q8_0; do
    echo "== bench --device $device: $f"
    k bench -m "$work/$f.gguf" --device "$device" -p "${PROMPT:-512}" -n "${GEN:-128}" -r "${REPS:-3}" -o jsonl |
      tee "$work/$f.jsonl"
    # One JSON object per test: tok/s, weight bytes and FLOPs per token.
    awk -v bw="$bw" -v peak="$peak" -v model="$f" '
      function field(name,   m) { return match($0, "\"" name "\": *[-0-9.e+]+") ? substr($0, RSTART + length(name) + 3, RLENGTH - length(name) - 3) + 0 : 0 }
      /"test"/ {
        ts = field("avg_ts"); bytes = field("weight_bytes_per_token"); flops = field("flops_per_token")
        if ($0 ~ /"n_prompt": *0/) {
          gbs = ts * bytes / 1e9
          printf "%s decode: %.1f tok/s, %.0f GB/s of weights", model, ts, gbs
          if (bw > 0) printf ", %.2f of the %d GB/s memory bandwidth (goal 0.7)", gbs / bw, bw
          print ""
        } else {
          tf = ts * flops / 1e12
          printf "%s prefill: %.1f tok/s, %.2f TFLOP/s", model, ts, tf
          if (peak > 0) printf ", %.3f of the %d TFLOP/s dense fp16 peak (goal 0.3)", tf / peak, peak
          print ""
        }
      }' "$work/$f.jsonl"
  done
  echo "device-check: done in $(($(date +%s) - start)) s"
  ;;
*)
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
  ;;
esac
