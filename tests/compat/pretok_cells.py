#!/usr/bin/env python3
"""This year's families' pre-tokenizers against llama.cpp's own (tests/reference/pretok_cells.json).

No vocabulary of gpt-4o (o200k), Llama 4, Tekken or GLM-4 is at hand (../shared has none, llama.cpp's release
neither), but a pre-tokenizer is only where BPE may not merge across: GPT-2's vocabulary
(../shared/vocab/ggml-vocab-gpt-2.gguf), whose merges cross classes freely (" the", "'s", digits, spaces), with
its tokenizer.ggml.pre replaced, tokenizes a varied text differently under each rule set. llama.cpp's ids
(its own regex engine) are recorded for the GPT-2 test inputs and the extra texts below under each name;
tests/reference/test_vocab.cpp rewrites the vocabulary with each name and compares kestrel's (PCRE2).

    pretok_cells.py record LLAMA_CPP_CHECKOUT SHARED      (rewrites tests/reference/pretok_cells.json)
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEST = os.path.join(HERE, "..", "reference", "pretok_cells.json")
PRES = ["gpt-4o", "llama4", "tekken", "glm4", "chatglm-bpe", "qwen35"]
EXTRA = [
    "HelloWorld and helloWORLD, McDonald's O'Neil I'LL you'D we'Re",
    "1234567890 12 123 1,234,567.89 3.14159 2026-12-04 v1.2.3",
    "don't can't won't it's I'm you're we've they'll he'd",
    "  leading spaces\tand\ttabs   trailing   \n\nnew\r\nlines\n\n\n",
    "CamelCaseWords snake_case_words kebab-case-words ALLCAPS lowercase",
    "Ünïcödé ÀÉÎÕÜ straße ΑΒΓ αβγ Привет МИР こんにちは 世界 안녕하세요 العربية",
    "emoji 🤖🚀 ✨ mixed🙂text and symbols @#$%^&*()_+-=[]{}|;':\",./<>?`~",
    "def f(x):\n    return x**2 + 1  # comment\n\nclass A:\n    pass\n",
    "<|im_start|>user\nhi<|im_end|> [INST] not special here [/INST]",
    "a\u0301 e\u0308 n\u0303 (combining marks) ǅ ǈ ǋ (titlecase) ʰ ˢ (modifier letters)",
]


def build_oracle(llama, tmp):
    exe, bin_dir = os.path.join(tmp, "tokenize_oracle"), os.path.join(llama, "build", "bin")
    subprocess.run([os.environ.get("CXX", "c++"), "-std=c++17", "-O2", os.path.join(HERE, "tokenize_oracle.cpp"),
                    "-I" + os.path.join(llama, "include"), "-I" + os.path.join(llama, "ggml", "include"),
                    "-L" + bin_dir, "-lllama", "-lggml", "-lggml-base", "-Wl,-rpath," + bin_dir, "-o", exe],
                   check=True)
    return exe


def record(llama, shared):
    vocab = os.path.join(shared, "vocab", "ggml-vocab-gpt-2.gguf")
    inputs = open(vocab + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")[:-1]
    texts = inputs + EXTRA
    commit = subprocess.run(["git", "-C", llama, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_oracle(llama, tmp)
        ids = {}
        for pre in PRES:
            r = subprocess.run([exe, vocab, pre], input=json.dumps(texts), capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"{pre}: {r.stderr[-500:]}")
            ids[pre] = json.loads(r.stdout)
            assert len(ids[pre]) == len(texts)
    doc = {"note": "llama.cpp's ids of GPT-2's vocabulary under other pre-tokenizers; see tests/compat/pretok_cells.py",
           "llama_cpp": commit, "vocab": "vocab/ggml-vocab-gpt-2.gguf", "inputs": "its .inp, then extra",
           "extra": EXTRA, "ids": ids}
    with open(DEST, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False)
        f.write("\n")
    differ = sum(1 for i in range(len(texts)) if len({json.dumps(ids[p][i]) for p in PRES}) > 1)
    print(f"{len(texts)} texts x {len(PRES)} pre-tokenizers ({differ} texts tokenized differently by some) -> {DEST}")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "record":
        sys.exit(__doc__)
    record(sys.argv[2], sys.argv[3])
