#!/usr/bin/env bash
# Two kestrel binaries on the same files, interleaved round by round so that
# both see the same machine state; prints each round's tok/s and the medians.
# Usage: scripts/bench_ab.sh OLD_BINARY NEW_BINARY ROUNDS MODEL... (pp512 and tg128, 2 threads)
set -euo pipefail
old=$1 new=$2 rounds=$3
shift 3
for m in "$@"; do
  for test in "-p 512 -n 0" "-p 0 -n 128"; do
    o=() n=()
    for r in $(seq "$rounds"); do
      for which in old new; do
        bin=$old; [ "$which" = new ] && bin=$new
        ts=$("$bin" bench -m "$m" $test -t 2 -r 1 --json 2>/dev/null |
             python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["avg_ts"])')
        [ "$which" = old ] && o+=("$ts") || n+=("$ts")
      done
    done
    python3 - "$m" "$test" "${#o[@]}" "${o[@]}" "${n[@]}" <<'PY'
import statistics, sys
m, test, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
o = [float(x) for x in sys.argv[4:4 + k]]; n = [float(x) for x in sys.argv[4 + k:]]
mo, mn = statistics.median(o), statistics.median(n)
print(f"{m.split('/')[-1]:32s} {test:12s} old {mo:8.2f} new {mn:8.2f} tok/s  new/old {mn / mo:.3f}   "
      f"(old {' '.join(f'{x:.1f}' for x in o)}; new {' '.join(f'{x:.1f}' for x in n)})")
PY
  done
done
