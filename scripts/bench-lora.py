#!/usr/bin/env python3
"""LoRA adapters' cost (docs/benchmarks.md): decode with one adapter against the base model, and 16 clients spread
over 4 adapters, Kestrel's server against llama-server with the same files, runs interleaved, medians.

  scripts/bench-lora.py [--llama DIR] [--reps N] [--threads T] [--rank R]

The files, by `kestrel synth` into build/bench-lora/: a Llama-3.2-1B-shaped model (Q4_0) and four rank-R adapters
(F16, alpha 2R) on every attention and FFN matrix (q, k, v, o, gate, up, down), as PEFT writes an "all-linear" one.
  decode: `kestrel run` 8 prompt ids then 64 tokens, base and with adapter a, alternating; decode tok/s medians.
  serve:  16 concurrent /completion requests (128-token prompts of their own, 32 tokens each, greedy, ignore_eos),
          request i with adapter i % 4 at scale 1 (the `lora` field), against `kestrel serve` and `llama-server`
          (both --lora x4 --lora-init-without-apply, 16 slots), alternating, each round's prompts new (Kestrel's
          prefix cache finds nothing); generated tokens per second medians.
"""
import argparse
import json
import os
import statistics
import subprocess
import threading
import time

from bench_http import free_port, post, wait_up

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K = os.path.join(ROOT, "build", "kestrel")


def clients(url, salt, n=16, tokens=32):
    """Tokens per second of n concurrent /completion requests over 4 adapters (prompts of their own per salt: no
    prefix of one round is cached for another)."""
    done = [0] * n

    def one(i):
        prompt = [(salt * 7919 + i * 131 + j * 17) % 30000 + 100 for j in range(128)]
        r = post(url + "/completion", {"prompt": prompt, "n_predict": tokens, "temperature": 0, "ignore_eos": True,
                                       "cache_prompt": False, "lora": [{"id": i % 4, "scale": 1.0}]})
        done[i] = r.get("tokens_predicted", 0) or len(r.get("tokens", [])) or tokens
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.time() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama", default=os.path.expanduser("~/llama-ref"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rank", type=int, default=16)
    a = ap.parse_args()
    w = os.path.join(ROOT, "build", "bench-lora")
    os.makedirs(w, exist_ok=True)
    model = os.path.join(w, "l1b.gguf")
    loras = [os.path.join(w, f"r{a.rank}-{c}.gguf") for c in "abcd"]
    for i, path in enumerate(loras):
        if not os.path.exists(path) or not os.path.exists(model):
            subprocess.run([K, "synth", "--arch", "llama", "--preset", "llama3-1b", "--type", "q4_0", "--seed", "1",
                            "-o", model, "--lora", path, "--lora-rank", str(a.rank), "--lora-alpha", str(2 * a.rank),
                            "--lora-type", "f16", "--lora-no-head", "--lora-seed", str(i + 1)],
                           check=True, capture_output=True)
    cpu = subprocess.run(["sh", "-c", "lscpu | sed -n 's/^Model name: *//p'"], capture_output=True, text=True).stdout.strip()
    print(f"CPU: {cpu}; {a.threads} threads; rank {a.rank}")

    # Decode: base and one adapter, alternating.
    def decode(extra):
        out = subprocess.run([K, "run", "-m", model, *extra, "--prompt-ids", "1 2 3 4 5 6 7 8", "-n", "64", "--temp",
                              "0", "--ignore-eos", "-t", str(a.threads)], capture_output=True, text=True).stderr
        return float(out.split("decode ")[1].split(" tok/s")[0])
    base, lora = [], []
    for _ in range(a.reps):
        base.append(decode([]))
        lora.append(decode(["--lora", loras[0]]))
    mb, ml = statistics.median(base), statistics.median(lora)
    print(f"decode: base {mb:.2f} tok/s, one adapter {ml:.2f} tok/s: the adapter's time {mb / ml:.3f}x the base's")

    # Serve: 16 clients over 4 adapters.
    lib = os.path.join(a.llama, "build", "bin")
    kport, lport = free_port(), free_port()
    common = ["--lora-init-without-apply", "-t", str(a.threads)]
    for path in loras:
        common += ["--lora", path]
    ks = subprocess.Popen([K, "serve", "-m", model, "--port", str(kport), "-c", "8192", "--max-batch-size", "16",
                           *common], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ls = subprocess.Popen([os.path.join(lib, "llama-server"), "-m", model, "--port", str(lport), "-c", str(16 * 512),
                           "-np", "16", "--no-warmup", *common], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          env=dict(os.environ, LD_LIBRARY_PATH=lib))
    try:
        kurl, lurl = f"http://127.0.0.1:{kport}", f"http://127.0.0.1:{lport}"
        wait_up(kurl, ks)
        wait_up(lurl, ls)
        clients(kurl, 1000, 4, 4)  # warm-up
        clients(lurl, 1000, 4, 4)
        kt, lt = [], []
        for rep in range(a.reps):
            kt.append(clients(kurl, rep))
            lt.append(clients(lurl, rep))
        mk, ml2 = statistics.median(kt), statistics.median(lt)
        print(f"serve, 16 clients over 4 adapters: kestrel {mk:.1f} tok/s, llama-server {ml2:.1f} tok/s: {mk / ml2:.2f}x")
        print(json.dumps({"decode_base": base, "decode_lora": lora, "kestrel_serve": kt, "llama_server": lt}))
    finally:
        ks.terminate()
        ls.terminate()
        ks.wait()
        ls.wait()


if __name__ == "__main__":
    main()
