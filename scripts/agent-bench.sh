#!/usr/bin/env bash
# The agent workload (kestrel loadtest --conversations) against Kestrel with its prefix cache tiers and against
# llama-server with its host-RAM prompt cache, on the same model file, threads and KV pool (one conversation's
# worth: the conversations alternate, so each turn's prefix has been pushed out of the pool by the others), and
# the disk tier's restore against recomputing. Prints a Markdown table (docs/benchmarks.md).
#
#   scripts/agent-bench.sh [LLAMA_SERVER] [WORKDIR]
#
# LLAMA_SERVER: llama.cpp's llama-server (default /work/llama-ref/build/bin/llama-server; built by
# ../shared/tools/llamacpp-oracle/get-llama.sh). WORKDIR: where the model and logs go (default /tmp/agent-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
K=$PWD/build/kestrel
LLAMA=${1:-/work/llama-ref/build/bin/llama-server}
W=${2:-/tmp/agent-bench}
CONV=${CONV:-3} TURNS=${TURNS:-8} SYSTEM=${SYSTEM:-600} TURN=${TURN:-40} OUT=${OUT:-64} CTX=${CTX:-4096}
mkdir -p "$W"
# TinyLlama's shape with an 8K training context (llama-server caps a slot at the training context).
MODEL=$W/synth-1b-8k.q4_0.gguf
[ -f "$MODEL" ] || "$K" synth --preset 1b --type q4_0 --ctx 8192 -o "$MODEL" >/dev/null
# KV for CTX tokens in f16 (both engines' type here): 22 layers x 2 x 4 KV heads x 64 x 2 bytes = 22.5 KiB/token.
POOL_MIB=$(( CTX * 22 * 2 * 256 * 2 / 1048576 + 1 ))
load() { "$K" loadtest --url "http://127.0.0.1:$1" --conversations "$CONV" --turns "$TURNS" --system-len "$SYSTEM" \
           --turn-len "$TURN" --output-len "$OUT" --timeout 600 --json "$2" > "$2.txt" || true; }
wait_up() { for _ in $(seq 600); do curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && \
            ! curl -s "http://127.0.0.1:$1/health" | grep -q loading && return 0; sleep 0.5; done; return 1; }

# ONLY=disk: the disk part alone (the rest from an earlier run in WORKDIR).
if [ "${ONLY:-}" != disk ]; then
# Kestrel, tiers on (RAM; a disk tier too, as a restart would need).
rm -rf "$W/cache"
"$K" serve -m "$MODEL" -t 2 -c "$CTX" --port 18431 --kv-type f16 --kv-cache-mem "$POOL_MIB" --max-batch-size 4 \
    --cache-ram 2G --cache-dir "$W/cache" > "$W/kestrel.log" 2>&1 &
KP=$!
wait_up 18431
load 18431 "$W/kestrel.json"
curl -s localhost:18431/cache > "$W/kestrel-cache.json"
kill $KP; wait $KP || true

# llama-server: the same pool (-c, one unified KV cache for the -np slots, each slot allowed all of it), its
# prompt cache in RAM at the default 8 GiB.
LD_LIBRARY_PATH=$(dirname "$LLAMA") "$LLAMA" -m "$MODEL" -t 2 -c "$CTX" -np "$CONV" -kvu \
    --port 18432 --jinja \
    > "$W/llama.log" 2>&1 &
LP=$!
wait_up 18432
load 18432 "$W/llama.json"
kill $LP; wait $LP || true
fi

# The disk tier: one conversation's first turn recomputed (an empty cache) and then restored after a restart.
rm -rf "$W/cache1"
disk_turn() {
  "$K" serve -m "$MODEL" -t 2 -c "$CTX" --port 18433 --kv-type f16 --kv-cache-mem "$POOL_MIB" --cache-ram 0 \
      --cache-dir "$W/cache1" > "$W/disk-$1.log" 2>&1 &
  local p=$!
  wait_up 18433
  "$K" loadtest --url http://127.0.0.1:18433 --conversations 1 --turns 1 --system-len $(( SYSTEM * 2 )) \
      --output-len 1 --json "$W/disk-$1.json" > /dev/null
  kill $p; wait $p || true
}
disk_turn cold
disk_turn restored

python3 - "$W" <<'EOF'
import json, sys
w = sys.argv[1]
k, l = json.load(open(f"{w}/kestrel.json")), json.load(open(f"{w}/llama.json"))
print("| turn | prompt tokens | Kestrel cached | llama-server cached | Kestrel TTFT p50 / p99 (ms) | llama-server TTFT p50 / p99 (ms) | p99 ratio |")
print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for a, b in zip(k["turns"], l["turns"]):
    n = a["requests"] - a["failed"]
    print(f"| {a['turn']} | {a['prompt_tokens'] / max(n, 1):.0f} | {100 * a['cached_fraction']:.1f}% | {100 * b['cached_fraction']:.1f}% "
          f"| {a['ttft_p50_ms']:.0f} / {a['ttft_p99_ms']:.0f} | {b['ttft_p50_ms']:.0f} / {b['ttft_p99_ms']:.0f} "
          f"| {a['ttft_p99_ms'] / b['ttft_p99_ms']:.2f} |")
def p99(d, first):
    v = sorted(r["ttft_ms"] for r in d["requests"] if (r["turn"] == 1) == first and r["ok"])
    import math
    return v[min(len(v) - 1, math.ceil(0.99 * len(v)) - 1)] if v else float("nan")
print(f"\nTurns 2-{len(k['turns'])}: TTFT p99 Kestrel {p99(k, False):.0f} ms, llama-server {p99(l, False):.0f} ms "
      f"(ratio {p99(k, False) / p99(l, False):.2f}); failed: Kestrel {sum(not r['ok'] for r in k['requests'])}, "
      f"llama-server {sum(not r['ok'] for r in l['requests'])}")
c = json.load(open(f"{w}/kestrel-cache.json"))
print(f"Kestrel's tiers: RAM {c['ram']['entries']} entries, {c['ram']['bytes'] / 2**20:.0f} MiB, {c['ram']['hits']} hits; "
      f"disk {c['disk']['entries']} entries, {c['disk']['bytes'] / 2**20:.0f} MiB")
cold, warm = (json.load(open(f"{w}/disk-{s}.json"))["requests"][0] for s in ("cold", "restored"))
per_k = lambda r, cached: r["ttft_ms"] / (r["prompt_tokens"] / 1000)
print(f"Disk tier: a {cold['prompt_tokens']}-token first turn computed in {cold['ttft_ms']:.0f} ms "
      f"({per_k(cold, 0):.0f} ms per 1K tokens); after a restart, {warm['cached_tokens']} of them from disk, "
      f"TTFT {warm['ttft_ms']:.0f} ms ({per_k(warm, 1):.0f} ms per 1K tokens): {cold['ttft_ms'] / warm['ttft_ms']:.1f}x faster")
EOF
