#!/usr/bin/env python3
"""What --cache-type costs in accuracy: stories260K served with a KV pool of ~320 tokens and the RAM tier; each of
N prompts from ../shared/eval/stories.txt (~200 tokens) is answered once computed, then (after the other prompts
pushed it out of the pool) again from the tier's entries, greedy with the top-5 logprobs. With entries in the
pool's own type the second answer must equal the first exactly; in a smaller type, the difference is the cost.

usage: cache-type-accuracy.py KESTREL SHARED [TYPES...]   (TYPES default: f32 f16 q8_0 fp8 q4)"""
import json, os, sys, urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "clients"))
from common import Server  # noqa: E402  (kestrel serve on a free port, stopped on leaving)

KESTREL, SHARED = sys.argv[1], sys.argv[2]
TYPES = sys.argv[3:] or ["f32", "f16", "q8_0", "fp8", "q4"]
text = open(f"{SHARED}/eval/stories.txt").read().split()
prompts = [" ".join(text[i * 90:(i + 1) * 90]) for i in range(8)]


def post(base, body):
    req = urllib.request.Request(base + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=120).read())


print("| entries | tokens equal | max logprob difference | mean logprob difference | cached share |")
print("| --- | ---: | ---: | ---: | ---: |")
for t in TYPES:
    with Server(KESTREL, ["-m", f"{SHARED}/models/stories260K.gguf", "-t", "2", "-c", "512", "--kv-cache-mem", "0.4",
                          "--cache-type", t]) as s:
        ask = lambda prompt: post(s.base, {"prompt": prompt, "max_tokens": 24, "temperature": 0, "logprobs": 5})
        first = [ask(x) for x in prompts]
        again = [ask(x) for x in prompts]
    equal = sum(a["choices"][0]["logprobs"]["tokens"] == b["choices"][0]["logprobs"]["tokens"] for a, b in zip(first, again))
    diffs = [abs(x - y) for a, b in zip(first, again)
             for x, y in zip(a["choices"][0]["logprobs"]["token_logprobs"], b["choices"][0]["logprobs"]["token_logprobs"])]
    cached = sum(b["usage"]["prompt_tokens_details"]["cached_tokens"] for b in again) / sum(b["usage"]["prompt_tokens"] for b in again)
    print(f"| {t} | {equal}/{len(prompts)} | {max(diffs):.2e} | {sum(diffs) / len(diffs):.2e} | {100 * cached:.0f}% |")
