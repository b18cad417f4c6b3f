#!/usr/bin/env python3
"""Tokenizer test vectors of vocabularies ../shared does not hold, reduced to what they use
(tests/reference/vocab_NAME.json).

llama.cpp's release carries vocabularies with their tokenizer test vectors (models/ggml-vocab-NAME.gguf, .inp,
.out: Hugging Face's ids): Gemma 4's (gemma4 model) and Qwen3.5's (qwen35 pre-tokenizer) among them, 15 MB and
7 MB, not in ../shared. This script keeps, of each vocabulary, the tokens the vectors' ids name, every token
and merge that can build them (each merge whose result is such a token, its parts recursively), the byte
tokens (the 256 stand-ins of a byte-level vocabulary, or <0xXX>), and the special and user-defined tokens,
renumbered; the vectors with their ids renumbered. BPE over the kept merges gives the same ids on the vectors:
every merge it applies on them builds (part of) a final token and is kept, and a merge that was never applied
was never the best one available, so dropping it changes no step. tests/reference/test_vocab.cpp writes each
reduced vocabulary as a GGUF and compares kestrel's ids.

    reduced_vocab.py record LLAMA_CPP_CHECKOUT      (rewrites tests/reference/vocab_{gemma-4,qwen35}.json)
"""
import hashlib
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def read_metadata(path, wanted):
    """The GGUF metadata values named in wanted (strings, ints, arrays of them)."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        n = take("Q")
        nonlocal pos
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        return take(scalar[t])

    assert data[:4] == b"GGUF"
    pos = 8
    take("Q")  # tensors
    n_kv = take("Q")
    out = {}
    for _ in range(n_kv):
        key = string()
        v = value(take("I"))
        if key in wanted:
            out[key] = v
    return out


NAMES = ("gemma-4", "qwen35")


def record_one(llama, name):
    base = os.path.join(llama, "models", f"ggml-vocab-{name}.gguf")
    keys = {"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
            "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
            "tokenizer.ggml.add_bos_token"}
    meta = read_metadata(base, keys)
    tokens, types, merges = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"], meta["tokenizer.ggml.merges"]
    token_id = {t: i for i, t in enumerate(tokens)}
    producers = {}  # result -> the merges that make it
    for r, m in enumerate(merges):
        left, right = m.split(" ", 1)
        producers.setdefault(left + right, []).append(r)
    inputs = open(base + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")[:-1]
    outputs = [[int(x) for x in line.split()] for line in open(base + ".out").read().split("\n")[:len(inputs)]]
    byte_level = meta["tokenizer.ggml.model"] == "gpt2"
    keep = set(i for i, t in enumerate(types) if t in (2, 3, 4, 6))  # unknown, control, user-defined, byte
    if byte_level:  # GPT-2's byte stand-ins: the first 256 tokens of these vocabularies
        keep.update(range(256))
    todo = [tokens[i] for ids in outputs for i in ids]
    used_merges, seen = set(), set()
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in token_id:
            keep.add(token_id[t])
        for r in producers.get(t, ()):
            used_merges.add(r)
            todo.extend(merges[r].split(" ", 1))
    keep = sorted(keep)
    new_id = {old: i for i, old in enumerate(keep)}
    doc = {
        "note": f"llama.cpp's {name} vocabulary reduced to what its test vectors use; see tests/compat/reduced_vocab.py",
        "source": f"llama.cpp models/ggml-vocab-{name}.gguf",
        "source_sha256": hashlib.sha256(open(base, "rb").read()).hexdigest(),
        "model": meta["tokenizer.ggml.model"],
        "pre": meta.get("tokenizer.ggml.pre", ""),
        "bos": new_id.get(meta.get("tokenizer.ggml.bos_token_id", -1), -1),
        "eos": new_id.get(meta.get("tokenizer.ggml.eos_token_id", -1), -1),
        "tokens": [tokens[i] for i in keep],
        "types": [types[i] for i in keep],
        "merges": [merges[r] for r in sorted(used_merges)],
        "cases": [{"text": t, "ids": [new_id[i] for i in ids]} for t, ids in zip(inputs, outputs)],
    }
    dest = os.path.join(HERE, "..", "reference", f"vocab_{name}.json")
    with open(dest, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{name}: {len(keep)} tokens, {len(used_merges)} merges, {len(inputs)} cases -> {dest}")


def record(llama):
    for name in NAMES:
        record_one(llama, name)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "record":
        sys.exit(__doc__)
    record(sys.argv[2])
