#!/usr/bin/env python3
"""Accuracy under quantization: lm-eval-harness's local tasks (tests/clients/lm_eval_tasks/) and perplexity on
../shared/eval/stories.txt for stories260K across weight types and KV cache types, as the markdown table of
docs/benchmarks.md ("Accuracy under quantization"). Every row is a fresh `kestrel serve` of one file and one
--kv-type, driven by the real lm_eval (tests/clients/lm_eval_run.py).

  .tools/clients-venv/bin/python scripts/lm-eval-table.py            # ~2 minutes on 2 cores
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "clients"))
import lm_eval_run  # noqa: E402
from common import Server  # noqa: E402

K = os.path.join(ROOT, "build", "kestrel")
MODEL = os.path.abspath(os.path.join(ROOT, "..", "shared", "models", "stories260K.gguf"))
TEXT = os.path.abspath(os.path.join(ROOT, "..", "shared", "eval", "stories.txt"))
WEIGHTS = [("F32", None), ("F16", ["--type", "f16"]), ("Q8_0", ["--mix", "Q8_0"]), ("Q4_K_M", ["--mix", "Q4_K_M"]),
           ("IQ4_XS", ["--mix", "IQ4_XS"])]
KV = ["f32", "f16", "q8_0", "fp8", "q4"]


def tensor_types(path):
    """'Q5_0 29, F16 5' for the file's matrices (norms and other vectors left out)."""
    out = subprocess.run([K, "info", path], capture_output=True, text=True).stdout
    n = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 4 and re.match(r"^(F32|F16|BF16|Q|IQ|MXFP)", f[1]) and "x" in f[2]:
            n[f[1]] = n.get(f[1], 0) + 1
    return ", ".join(f"{t} {c}" for t, c in sorted(n.items(), key=lambda x: -x[1]))


def perplexity(path, kv):
    out = subprocess.run([K, "perplexity", "-m", path, "-f", TEXT, "-c", "128", "-t", "2", "--kv-type", kv],
                         capture_output=True, text=True)
    m = re.search(r"PPL\s*=\s*([0-9.]+)", out.stdout + out.stderr)
    return float(m.group(1)) if m else float("nan")


def mc_lls(result):
    return [x[0] for item in result["tasks"]["kestrel_stories_mc"]["items"] for x in item["resps"]]


def main():
    work = tempfile.mkdtemp(prefix="kestrel-lm-eval-")
    rows, base = [], None
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    for name, args in WEIGHTS:
        path = MODEL
        if args:
            path = os.path.join(work, f"stories260K-{name}.gguf")
            subprocess.run([K, "quantize", *args, MODEL, path], check=True, capture_output=True)
        for kv in KV:
            with Server(K, ["-m", path, "-c", "256", "-t", "2", "--kv-type", kv]) as s:
                served = s.get("/v1/models")["data"][0]["id"]
                r = lm_eval_run.evaluate(s.base, served, tasks=lm_eval_run.COMPLETION_TASKS, chat=False)
            lls = mc_lls(r)
            if base is None:
                base = lls
            m = {t: v["metrics"] for t, v in r["tasks"].items()}
            rows.append({"weights": name, "tensors": tensor_types(path), "bytes": os.path.getsize(path), "kv": kv,
                         "mc_acc": m["kestrel_stories_mc"]["acc,none"], "mc_acc_norm": m["kestrel_stories_mc"]["acc_norm,none"],
                         "ll_acc": m["kestrel_stories_ll"]["acc,none"], "ll_ppl": m["kestrel_stories_ll"]["perplexity,none"],
                         "word_ppl": m["kestrel_stories_ppl"]["word_perplexity,none"],
                         "dll": sum(abs(a - b) for a, b in zip(lls, base)) / len(base),
                         "ppl": perplexity(path, kv)})
            print(json.dumps(rows[-1]), flush=True)
    print(f"\nstories260K on {cpu}, lm_eval {__import__('lm_eval').__version__}, 2 threads\n")
    print("| weights (tensors) | file | KV | MC acc | MC acc_norm | last word acc | last word PPL | word PPL (rolling) "
          "| mean abs Δ loglik vs F32/f32 | PPL stories.txt (c 128) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['weights']} ({r['tensors']}) | {r['bytes'] / 1024:.0f} KiB | {r['kv']} | {r['mc_acc']:.4f} | "
              f"{r['mc_acc_norm']:.4f} | {r['ll_acc']:.4f} | {r['ll_ppl']:.3f} | {r['word_ppl']:.3f} | {r['dll']:.4f} | "
              f"{r['ppl']:.4f} |")


main()
