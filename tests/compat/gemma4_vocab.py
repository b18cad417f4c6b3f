#!/usr/bin/env python3
"""Gemma 4's tokenizer vectors, reduced to what they use (tests/reference/gemma4_vocab.json).

llama.cpp's release carries Gemma 4's vocabulary with its tokenizer test vectors (models/ggml-vocab-gemma-4.gguf,
.inp, .out: Hugging Face's ids) but ../shared does not, and the file is 15 MB. This script keeps, of its 262144
tokens and 514906 merges, the special tokens, the 256 byte tokens, every token the vectors' ids name and the
merges BPE applies on the way to them (with their order), renumbered; and the vectors with their ids renumbered.
On the vectors, BPE with the kept merges applies exactly the merges it applies with all of them: a merge it applies
is the best-ranked pair available at that step, and dropping merges never applied removes no better one. So the
expected ids stay Hugging Face's. tests/reference/test_vocab.cpp writes the reduced vocabulary as a GGUF and
compares kestrel's ids.

    gemma4_vocab.py record LLAMA_CPP_CHECKOUT      (rewrites tests/reference/gemma4_vocab.json)
"""
import hashlib
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEST = os.path.join(HERE, "..", "reference", "gemma4_vocab.json")
SPACE = "\u2581"


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


def bpe_trace(word, rank):
    """Gemma 4's BPE of one pre-token (llama.cpp's llm_tokenizer_bpe_session with raw UTF-8): its symbols and the
    merges applied, best rank first, leftmost first among equals."""
    syms = list(word)
    applied = []
    while True:
        best = None
        for i in range(len(syms) - 1):
            r = rank.get(syms[i] + " " + syms[i + 1])
            if r is not None and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            return syms, applied
        r, i = best
        applied.append(r)
        syms[i:i + 2] = [syms[i] + syms[i + 1]]


def pre_tokens(text):
    """Spaces as U+2581, then runs of newlines apart from the rest."""
    text = text.replace(" ", SPACE)
    out, cur = [], ""
    for ch in text:
        if cur and (ch == "\n") != (cur[-1] == "\n"):
            out.append(cur)
            cur = ""
        cur += ch
    if cur:
        out.append(cur)
    return out


def record(llama):
    base = os.path.join(llama, "models", "ggml-vocab-gemma-4.gguf")
    meta = read_metadata(base, {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
                                "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"})
    tokens, types, merges = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"], meta["tokenizer.ggml.merges"]
    rank = {m: i for i, m in enumerate(merges)}
    token_id = {t: i for i, t in enumerate(tokens)}
    inputs = open(base + ".inp", encoding="utf-8").read().split("\n__ggml_vocab_test__\n")[:-1]
    outputs = [[int(x) for x in line.split()] for line in open(base + ".out").read().split("\n")[:len(inputs)]]
    keep = set(i for i, t in enumerate(types) if t in (2, 3, 4, 6))  # unknown, control, user-defined, byte
    used_merges = set()
    for text, ids in zip(inputs, outputs):
        keep.update(ids)
        for word in pre_tokens(text):
            if word.strip("\n") == "" and word in token_id:
                continue  # a newline run that is a token: taken whole
            _, applied = bpe_trace(word, rank)
            used_merges.update(applied)
    for r in used_merges:  # the merges' parts and results
        left, right = merges[r].split(" ", 1)
        for piece in (left, right, left + right):
            if piece in token_id:
                keep.add(token_id[piece])
    keep = sorted(keep)
    new_id = {old: i for i, old in enumerate(keep)}
    doc = {
        "note": "Gemma 4's tokenizer, reduced to what llama.cpp's test vectors use; see tests/compat/gemma4_vocab.py",
        "source": "llama.cpp models/ggml-vocab-gemma-4.gguf",
        "source_sha256": hashlib.sha256(open(base, "rb").read()).hexdigest(),
        "bos": new_id[meta["tokenizer.ggml.bos_token_id"]],
        "eos": new_id[meta["tokenizer.ggml.eos_token_id"]],
        "tokens": [tokens[i] for i in keep],
        "types": [types[i] for i in keep],
        "merges": [merges[r] for r in sorted(used_merges)],
        "cases": [{"text": t, "ids": [new_id[i] for i in ids]} for t, ids in zip(inputs, outputs)],
    }
    with open(DEST, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{len(keep)} tokens, {len(used_merges)} merges, {len(inputs)} cases -> {DEST}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "record":
        sys.exit(__doc__)
    record(sys.argv[2])
