#!/usr/bin/env python3
"""lm-eval-harness (the real package, pinned in tests/clients/requirements.txt) against `kestrel serve`:
local-completions with the server's tokenizer (multiple choice, loglikelihood, rolling loglikelihood) and
local-chat-completions (generate_until), on the local tasks of tests/clients/lm_eval_tasks/. Every per-item
loglikelihood within 1e-3 of llama.cpp's, the same greedy flags and accuracies, the same generated texts as
llama-server (tests/reference/lm_eval/, recorded by record_lm_eval_reference.py with the file's sha256).

usage: lm_eval_test.py KESTREL MODEL REFERENCE.json"""
import hashlib
import json
import math
import sys
import time

import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Server, run_checks  # noqa: E402
import lm_eval_run  # noqa: E402

KESTREL, MODEL, REFERENCE = sys.argv[1], sys.argv[2], sys.argv[3]


def test(c):
    ref = json.load(open(REFERENCE))
    sha = hashlib.sha256(open(MODEL, "rb").read()).hexdigest()
    if not c.expect(sha == ref["sha256"], f"{MODEL} is not the file the reference was recorded on ({ref['sha256']})"):
        return
    with Server(KESTREL, ["-m", MODEL, "-c", "256", "-t", "2"]) as server:
        name = server.get("/v1/models")["data"][0]["id"]
        t0 = time.time()
        ours = lm_eval_run.evaluate(server.base, name)
        print(f"lm-eval: {time.time() - t0:.1f} s for {sum(len(t['items']) for t in ours['tasks'].values())} documents")
        c.expect(server.alive(), "the server is alive after the run")
    for task, theirs in ref["tasks"].items():
        mine = ours["tasks"].get(task)
        if not c.expect(mine is not None, f"{task} ran"):
            continue
        print(task, "kestrel:", mine["metrics"], "llama.cpp:", theirs["metrics"])
        c.expect(len(mine["items"]) == len(theirs["items"]), f"{task}: {len(theirs['items'])} documents")
        worst = 0.0
        for i, (a, b) in enumerate(zip(mine["items"], theirs["items"])):
            for x, y in zip(a["resps"], b["resps"]):
                if isinstance(y, str):
                    c.expect(x == y, f"{task} #{i}: generated {x!r}, llama-server {y!r} (raw {a['raw']} / {b['raw']})")
                    continue
                ll_x, ll_y = (x[0], x[1]) if isinstance(x, list) else (x, None), (y[0], y[1]) if isinstance(y, list) else (y, None)
                worst = max(worst, abs(ll_x[0] - ll_y[0]))
                c.expect(abs(ll_x[0] - ll_y[0]) <= 1e-3, f"{task} #{i}: loglikelihood {ll_x[0]} vs llama.cpp's {ll_y[0]}")
                c.expect(ll_x[1] == ll_y[1], f"{task} #{i}: greedy {ll_x[1]} vs llama.cpp's {ll_y[1]}")
        print(f"{task}: largest loglikelihood difference {worst:.2e}")
        for metric, value in theirs["metrics"].items():
            got = mine["metrics"].get(metric)
            if metric.startswith(("acc", "exact_match")) or metric == "sample_len":
                c.expect(got == value, f"{task} {metric}: {got} vs llama.cpp's {value}")
            else:
                c.expect(got is not None and math.isclose(got, value, rel_tol=1e-3),
                         f"{task} {metric}: {got} vs llama.cpp's {value}")
    # Independent of the reference: the model tells the stories' endings from the distractors.
    c.expect(ours["tasks"]["kestrel_stories_mc"]["metrics"]["acc,none"] >= 0.75, "multiple-choice accuracy well above chance")


run_checks(test)
