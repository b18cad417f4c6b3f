#!/usr/bin/env python3
"""Records what llama.cpp gives for the lm-eval tasks of tests/clients/lm_eval_tasks/, the reference
lm_eval_test.py holds Kestrel to. Run by hand with the oracle's llama.cpp build (not in the suite):

  .tools/clients-venv/bin/python tests/clients/record_lm_eval_reference.py LLAMA_DEST MODEL.gguf OUT.json

llama-server refuses `echo` ("Only no echo is supported"), so lm-eval-harness's loglikelihood requests cannot be
sent to it. Instead lm-eval's own `local-completions` class runs unchanged except for where its requests go:
tokenized by llama-server's /tokenize, each token array scored by llama.cpp's logits (the oracle's ref_greedy,
one batch per prompt, float32 KV), the answer shaped as an echoed completion. Generation (the chat task) goes
to llama-server itself. So every number in the reference is llama.cpp's, put through lm-eval's own code."""
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lm_eval_run  # noqa: E402
from common import free_port  # noqa: E402

import lm_eval.utils  # noqa: E402
from lm_eval.api.registry import register_model  # noqa: E402
from lm_eval.models.openai_completions import LocalCompletionsAPI  # noqa: E402

DEST, MODEL, OUT = (os.path.abspath(a) for a in sys.argv[1:4])
ORACLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "tools",
                      "llamacpp-oracle", "oracle.py")


def http(method, url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"}, method=method)
    return json.loads(urllib.request.urlopen(req, timeout=60).read())


class LlamaServerTokenizer(lm_eval.utils.RemoteTokenizer):
    """lm-eval's remote tokenizer, in llama-server's shapes (it has no /tokenizer_info)."""

    def _validate_server(self):
        http("GET", f"{self.base_url}/health")

    @property
    def tokenizer_info(self):
        props = http("GET", f"{self.base_url}/props")
        return {"bos_token": props["bos_token"], "eos_token": props["eos_token"]}

    def encode(self, text):
        return http("POST", f"{self.base_url}/tokenize", {"content": text, "add_special": False})["tokens"]

    def decode(self, tokens):
        return http("POST", f"{self.base_url}/detokenize", {"tokens": tokens})["content"]


lm_eval.utils.RemoteTokenizer = LlamaServerTokenizer
ORACLE_RUNS = []


@register_model("llamacpp-oracle-completions")
class OracleCompletions(LocalCompletionsAPI):
    """local-completions whose loglikelihood requests are answered from llama.cpp's logits."""

    def model_call(self, messages, *, generate=True, gen_kwargs=None, **kwargs):
        assert not generate, "the oracle scores; generation goes to llama-server"
        with tempfile.TemporaryDirectory() as d:
            args = [sys.executable, ORACLE, DEST, MODEL, "-n", "1", "--ctx", "256", "--threads", "2",
                    "--all-logits", os.path.join(d, "l"), "-o", os.path.join(d, "out.json")]
            for ids in messages:
                args += ["-p", " ".join(map(str, ids))]
            subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
            out = json.load(open(os.path.join(d, "out.json")))
            ORACLE_RUNS.append(out["llama_cpp"])
            choices = []
            for i, (ids, run) in enumerate(zip(messages, out["runs"])):
                rows = np.fromfile(run["logits"]["file"], dtype="<f4").reshape(-1, run["n_vocab"]).astype(np.float64)
                rows = rows[:len(ids)]  # one per prompt position
                logp = rows - rows.max(axis=1, keepdims=True)
                logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
                token_lp, top = [None], [None]
                for k in range(1, len(ids)):
                    token_lp.append(float(logp[k - 1, ids[k]]))
                    best = int(np.argmax(logp[k - 1]))
                    top.append({str(best): float(logp[k - 1, best])})
                best = int(np.argmax(logp[-1]))  # the one "generated" token an echoed completion ends with
                token_lp.append(float(logp[-1, best]))
                top.append({str(best): float(logp[-1, best])})
                choices.append({"index": i, "text": "", "logprobs": {"token_logprobs": token_lp, "top_logprobs": top}})
        return {"choices": choices}


def main():
    port = free_port()
    server = subprocess.Popen([os.path.join(DEST, "build", "bin", "llama-server"), "-m", MODEL, "-c", "256",
                               "-t", "2", "--port", str(port), "--chat-template", "chatml", "--no-webui"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                http("GET", base + "/health")
                break
            except OSError:
                time.sleep(0.2)
        served = http("GET", base + "/v1/models")["data"][0]["id"]
        result = lm_eval_run.evaluate(base, served, completions_model="llamacpp-oracle-completions")
    finally:
        server.terminate()
        server.wait()
    sha = hashlib.sha256(open(MODEL, "rb").read()).hexdigest()
    result.update({"model": os.path.basename(MODEL), "sha256": sha, "size": os.path.getsize(MODEL),
                   "llama_cpp": ORACLE_RUNS[0]["commit"], "ggml_cpu": ORACLE_RUNS[0]["ggml_cpu"],
                   "made_by": "tests/clients/record_lm_eval_reference.py: loglikelihoods from llama.cpp's logits "
                              "(oracle.py --all-logits, float32 KV, n_ctx 256) through lm-eval's local-completions; "
                              "generations from llama-server (--chat-template chatml) through local-chat-completions",
                   "lm_eval": __import__("lm_eval").__version__})
    with open(OUT, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({t: v["metrics"] for t, v in result["tasks"].items()}, indent=1))


main()
