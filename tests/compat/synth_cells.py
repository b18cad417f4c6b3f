#!/usr/bin/env python3
"""Reference cells for architectures written by `kestrel synth` (no public file of them is at hand):
the file's synth arguments and sha256, and llama.cpp's greedy ids for a fixed prompt.

  synth_cells.py record KESTREL DEST [PREFIX...]
      synthesise each cell's file, run llama.cpp (get-llama.sh's DEST) through
      ../shared/tools/llamacpp-oracle/oracle.py, write tests/reference/synth_cells.json; with prefixes, only
      the cells whose names start with one are recorded again (the others kept as they are in the file)

A quantized cell is the F32 file put through `kestrel quantize --mix` (the test makes it without llama.cpp);
recording also runs llama.cpp's own llama-quantize with the same mix and requires the same tensors (names,
types, bytes — for the k-quant mixes of K_MIXES the types only) and metadata (gguf-py from DEST reads both;
only the order of tensors and keys differs), then
records llama.cpp's ids on kestrel's file. Its ids are compared by the compat set's rule (reference/compat/README.md): a first
difference is excused only at a step whose llama.cpp top-2 gap is below tie_gap (0.1 for quantized files,
whose activations llama.cpp rounds to 8 bits in another order; 1e-3 for F32).

For the cells of MTP_CELLS (files with a multi-token-prediction block) recording also builds mtp_oracle.cpp
against DEST and keeps llama.cpp's MTP prediction for every prompt row (row p: token p+1 and the trunk's
h_nextn at p), compared row by row by the same rule.

tests/reference/test_synth_cells.cpp regenerates each file, checks the sha256 and compares kestrel's ids.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = os.path.join(HERE, "..", "reference", "synth_cells.json")
# name, synth arguments, prompt ids, tokens to generate[, llama-quantize mix]
DS32 = ["--arch", "deepseek32", "--preset", "tiny", "--type", "f32"]
GLM5 = ["--arch", "glm-dsa", "--preset", "tiny", "--type", "f32"]
GPT_OSS = ["--arch", "gpt-oss", "--preset", "tiny", "--type", "f32"]
MISTRAL3 = ["--arch", "mistral3", "--preset", "tiny", "--type", "f32"]
GLM4MOE = ["--arch", "glm4moe", "--preset", "tiny", "--type", "f32"]
LLAMA4 = ["--arch", "llama4", "--preset", "tiny", "--type", "f32"]
GEMMA4 = ["--arch", "gemma4", "--preset", "tiny", "--type", "f32"]
GEMMA4_MOE = ["--arch", "gemma4", "--preset", "tiny-moe", "--type", "f32"]
QWEN35 = ["--arch", "qwen35", "--preset", "tiny", "--type", "f32"]
QWEN35MOE = ["--arch", "qwen35moe", "--preset", "tiny", "--type", "f32"]
QWEN3NEXT = ["--arch", "qwen3next", "--preset", "tiny", "--type", "f32"]
# 8250 ids: past Llama 4's first chunk of 8192 positions and the temperature's first step (p + 1 = 8192).
PAST_8K = [(i * 37 + 11) % 512 for i in range(8250)]
DSV4 = ["--arch", "deepseek4", "--preset", "tiny", "--type", "f32"]
# 150 ids: past the first block of 128 (the ratio-128 layer's first compressed key) and 37 blocks of 4.
LONG = [(i * 37 + 11) % 512 for i in range(150)]
CELLS = [
    ("mistral4-tiny.f32", ["--arch", "mistral4", "--preset", "tiny", "--type", "f32", "--seed", "1"],
     [3, 17, 42, 99, 7, 64, 120, 5, 11, 200], 12),
    ("mistral4-tiny.q4_k_m", ["--arch", "mistral4", "--preset", "tiny", "--type", "f32", "--seed", "1"],
     [3, 17, 42, 99, 7, 64, 120, 5, 11, 200], 12, "Q4_K_M"),
    ("deepseek2-lite-form-tiny.f32", ["--arch", "deepseek2", "--preset", "tiny", "--type", "f32", "--seed", "1"],
     [3, 17, 42, 99], 8),
    # DeepSeek-V3.2: top-k 4, so from the fifth prompt token on every query attends to a selection.
    ("deepseek32-tiny.f32", DS32 + ["--seed", "1"], [3, 17, 42, 99, 7, 64, 120, 5, 11, 200, 301, 77], 12),
    ("deepseek32-tiny-seed2.f32", DS32 + ["--seed", "2"], [500, 2, 260, 31, 31, 9, 444, 128, 64, 1, 8, 19, 300, 45], 10),
    ("deepseek32-tiny-topk6.f32", DS32 + ["--seed", "3", "--top-k", "6"], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], 12),
    ("deepseek32-tiny.q8_0", DS32 + ["--seed", "1"], [3, 17, 42, 99, 7, 64, 120, 5, 11, 200, 301, 77], 12, "Q8_0"),
    ("deepseek32-tiny.q4_k_m", DS32 + ["--seed", "1"], [3, 17, 42, 99, 7, 64, 120, 5, 11, 200, 301, 77], 12, "Q4_K_M"),
    # GLM-5: layers 1 and 3 reuse the selection of layers 0 and 2; the indexer rotates adjacent pairs.
    ("glm-dsa-tiny.f32", GLM5 + ["--seed", "1"], [3, 17, 42, 99, 7, 64, 120, 5, 11, 200, 301, 77], 12),
    ("glm-dsa-tiny-seed2.f32", GLM5 + ["--seed", "2"], [500, 2, 260, 31, 31, 9, 444, 128, 64, 1, 8, 19, 300, 45], 10),
    ("glm-dsa-tiny.q8_0", GLM5 + ["--seed", "1"], [3, 17, 42, 99, 7, 64, 120, 5, 11, 200, 301, 77], 12, "Q8_0"),
    ("glm-dsa-tiny.q4_k_m", GLM5 + ["--seed", "1"], [3, 17, 42, 99, 7, 64, 120, 5, 11, 200, 301, 77], 12, "Q4_K_M"),
    # DeepSeek-V4: a window of 8 raw keys, top-3 of the blocks of 4, every block of 128, one hash-routed layer.
    # The top-k-all cell (every block selected) gives other ids from step 3 on the same weights and prompt.
    ("deepseek4-tiny.f32", DSV4 + ["--seed", "1"], LONG, 16),
    ("deepseek4-tiny-seed2.f32", DSV4 + ["--seed", "2"], [500, 2, 260, 31, 31, 9, 444, 128, 64, 1, 8, 19, 300, 45, 77, 6, 90], 12),
    ("deepseek4-tiny-topk-all.f32", DSV4 + ["--seed", "1", "--top-k", "1000"], LONG, 16),
    # The MTP block in a file of its own, as llama.cpp's converter publishes V4 (synth --mtp-file).
    ("deepseek4-tiny-mtp-file.f32", DSV4 + ["--seed", "1"], LONG, 16),
    ("deepseek4-tiny.q8_0", DSV4 + ["--seed", "1"], LONG, 16, "Q8_0"),
    # The published files' form: routed experts MXFP4, the rest Q8_0.
    ("deepseek4-tiny.mxfp4_moe", DSV4 + ["--seed", "1"], LONG, 16, "MXFP4_MOE"),
    # Q4_K_M: the hyper-connection mixes (256 wide) in Q4_K, the rest (64 wide) in its Q5_0/Q8_0 fallbacks.
    ("deepseek4-tiny.q4_k_m", DSV4 + ["--seed", "1"], LONG, 16, "Q4_K_M"),
    # gpt-oss: windows of 8 on layers 0 and 2, sinks, YaRN over an original context of 64 (the long prompt
    # runs past it), top-4 of 8 biased experts.
    ("gpt-oss-tiny.f32", GPT_OSS + ["--seed", "1"], LONG, 16),
    ("gpt-oss-tiny-seed2.f32", GPT_OSS + ["--seed", "2"], [500, 2, 260, 31, 31, 9, 444, 128, 64, 1, 8, 19, 300, 45, 77, 6, 90], 12),
    # The published files' form: experts MXFP4, the rest Q8_0.
    ("gpt-oss-tiny.mxfp4_moe", GPT_OSS + ["--seed", "1"], LONG, 16, "MXFP4_MOE"),
    ("gpt-oss-tiny.q8_0", GPT_OSS + ["--seed", "1"], LONG, 16, "Q8_0"),
    ("gpt-oss-tiny.q4_k_m", GPT_OSS + ["--seed", "1"], LONG, 16, "Q4_K_M"),
    # Mistral 3: YaRN x4 over 16 positions with a log multiplier, a query temperature from position 16 on.
    ("mistral3-tiny.f32", MISTRAL3 + ["--seed", "1"], LONG, 16),
    ("mistral3-tiny-seed2.f32", MISTRAL3 + ["--seed", "2"], [500, 2, 260, 31, 31, 9, 444, 128, 64, 1, 8, 19, 300, 45, 77, 6, 90], 12),
    ("mistral3-tiny.q8_0", MISTRAL3 + ["--seed", "1"], LONG, 16, "Q8_0"),
    ("mistral3-tiny.q4_k_m", MISTRAL3 + ["--seed", "1"], LONG, 16, "Q4_K_M"),
    # GLM-4.5 MoE: q/k norms (tiny) or none (tiny-air), half the head rotated, a dense first layer, sigmoid
    # routing with the selection bias + a shared expert; the MTP block (recorded row by row).
    ("glm4moe-tiny.f32", GLM4MOE + ["--seed", "1"], LONG, 16),
    ("glm4moe-tiny-seed2.f32", GLM4MOE + ["--seed", "2"], [500, 2, 260, 31, 31, 9, 444, 128, 64, 1, 8, 19, 300, 45, 77, 6, 90], 12),
    ("glm4moe-tiny-air.f32", ["--arch", "glm4moe", "--preset", "tiny-air", "--type", "f32", "--seed", "1"], LONG, 16),
    ("glm4moe-tiny.q8_0", GLM4MOE + ["--seed", "1"], LONG, 16, "Q8_0"),
    ("glm4moe-tiny.q4_k_m", GLM4MOE + ["--seed", "1"], LONG, 16, "Q4_K_M"),
    # Llama 4: chunks of 8192 on layers 0-2, layer 3 without RoPE and with the query temperature, top-1 experts
    # weighting their input on layers 1 and 3, Scout's q/k norms; the long prompt crosses 8192.
    ("llama4-tiny.f32", LLAMA4 + ["--seed", "1"], PAST_8K, 8),
    ("llama4-tiny-seed2.f32", LLAMA4 + ["--seed", "2"], [500, 2, 260, 31, 31, 9, 444, 128, 64, 1, 8, 19, 300, 45, 77, 6, 90], 12),
    ("llama4-tiny.q8_0", LLAMA4 + ["--seed", "1"], PAST_8K, 8, "Q8_0"),
    # Gemma 4: windows of 8 on two layers of three, 16-dim sliding heads (2 KV heads) and 32-dim full ones (1 KV
    # head, a quarter rotated by rope_freqs); layers 9-11 read layers 7 and 8's caches; per-layer embeddings;
    # double-wide FFNs on those layers; norm weights varied (not 1). tiny-moe: top-2 of 8 GeGLU experts beside
    # every dense FFN, v from k on the full layers.
    ("gemma4-tiny.f32", GEMMA4 + ["--seed", "1"], LONG, 16),
    ("gemma4-tiny-seed2.f32", GEMMA4 + ["--seed", "2"], [500, 2, 260, 31, 31, 9, 444, 128, 64, 1, 8, 19, 300, 45, 77, 6, 90], 12),
    ("gemma4-tiny.q8_0", GEMMA4 + ["--seed", "1"], LONG, 16, "Q8_0"),
    ("gemma4-tiny.q4_k_m", GEMMA4 + ["--seed", "1"], LONG, 16, "Q4_K_M"),
    ("gemma4-tiny-moe.f32", GEMMA4_MOE + ["--seed", "1"], LONG, 16),
    ("gemma4-tiny-moe-seed2.f32", GEMMA4_MOE + ["--seed", "2"], [500, 2, 260, 31, 31, 9, 444, 128, 64, 1, 8, 19, 300, 45, 77, 6, 90], 12),
    ("gemma4-tiny-moe.q8_0", GEMMA4_MOE + ["--seed", "1"], LONG, 16, "Q8_0"),
    # Linear-attention hybrids: 150 ids (above the Gated DeltaNet's chunk of 64 rows) over 6 linear and 2 gated
    # attention blocks; 4 value heads over 2 key heads (tiled for qwen35/qwen35moe, repeat-interleaved for
    # qwen3next); the MTP block after the trunk.
    ("qwen35-tiny.f32", QWEN35 + ["--seed", "1"], LONG, 16),
    ("qwen35-tiny-seed2.f32", QWEN35 + ["--seed", "2"], [500, 2, 260, 31, 31, 9, 444, 128, 64, 1, 8, 19, 300, 45, 77, 6, 90], 12),
    ("qwen35-tiny.q8_0", QWEN35 + ["--seed", "1"], LONG, 16, "Q8_0"),
    ("qwen35-tiny.q4_k_m", QWEN35 + ["--seed", "1"], LONG, 16, "Q4_K_M"),
    ("qwen35moe-tiny.f32", QWEN35MOE + ["--seed", "1"], LONG, 16),
    ("qwen35moe-tiny.q8_0", QWEN35MOE + ["--seed", "1"], LONG, 16, "Q8_0"),
    ("qwen3next-tiny.f32", QWEN3NEXT + ["--seed", "1"], LONG, 16),
    ("qwen3next-tiny-seed2.f32", QWEN3NEXT + ["--seed", "2"], [500, 2, 260, 31, 31, 9, 444, 128, 64, 1, 8, 19, 300, 45, 77, 6, 90], 12),
    ("qwen3next-tiny.q8_0", QWEN3NEXT + ["--seed", "1"], LONG, 16, "Q8_0"),
    # No Q4_K_M cell: its Q5_0 fallbacks (these widths are not multiples of 256) leave llama.cpp's logits by
    # 0.03-0.4 from the second position on (as Q4_0/Q5_0 do on a synth llama: docs/models.md), and its ids
    # at step 7 by a gap of 0.116, above the rule's 0.1. Q8_0's logits are bit-identical.
]


# The F32 cells whose MTP block's row predictions are recorded too (mtp_oracle.cpp).
MTP_CELLS = ("deepseek32-tiny.f32", "deepseek32-tiny-seed2.f32", "glm-dsa-tiny.f32", "deepseek4-tiny.f32",
             "deepseek4-tiny-seed2.f32", "deepseek4-tiny-mtp-file.f32", "glm4moe-tiny.f32", "glm4moe-tiny-seed2.f32",
             "qwen35-tiny.f32", "qwen35moe-tiny.f32", "qwen3next-tiny.f32")
# ...of which these split it into a file of its own (`synth --mtp-file`), which llama.cpp loads as a second model.
MTP_FILE_CELLS = ("deepseek4-tiny-mtp-file.f32",)


def build_mtp_oracle(dest, tmp):
    exe, bin_dir = os.path.join(tmp, "mtp_oracle"), os.path.join(dest, "build", "bin")
    subprocess.run([os.environ.get("CXX", "c++"), "-std=c++17", "-O2", os.path.join(HERE, "mtp_oracle.cpp"),
                    "-I" + os.path.join(dest, "include"), "-I" + os.path.join(dest, "ggml", "include"),
                    "-I" + os.path.join(dest, "src"), "-L" + bin_dir, "-lllama", "-lggml", "-lggml-base",
                    "-Wl,-rpath," + bin_dir, "-o", exe], check=True)
    return exe


# Mixes with k-quant tensors: the types must equal llama-quantize's, the bytes may not (see same_content).
K_MIXES = ("Q4_K_M",)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def same_content(dest, a, b, types_only=False):
    """What differs between two GGUF files but the order of their tensors and keys ('' when nothing); with
    types_only, tensor bytes may differ (kestrel's k-quant writer fits its scales its own way, not ggml's)."""
    sys.path.insert(0, os.path.join(dest, "gguf-py"))
    import gguf  # noqa: E402 (llama.cpp's reader, needs numpy)
    ra, rb = gguf.GGUFReader(a), gguf.GGUFReader(b)
    ta, tb = {t.name: t for t in ra.tensors}, {t.name: t for t in rb.tensors}
    if set(ta) != set(tb):
        return f"tensors {sorted(set(ta) ^ set(tb))}"
    for n, t in ta.items():
        if t.tensor_type != tb[n].tensor_type or (not types_only and t.data.tobytes() != tb[n].data.tobytes()):
            return f"tensor {n} ({t.tensor_type.name} vs {tb[n].tensor_type.name})"
    fa = {f.name: f.parts[-1].tobytes() for f in ra.fields.values() if not f.name.startswith("GGUF.")}
    fb = {f.name: f.parts[-1].tobytes() for f in rb.fields.values() if not f.name.startswith("GGUF.")}
    if fa != fb:
        return f"keys {sorted(k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k))}"
    return ""


def record(kestrel, dest, prefixes=()):
    kept = {}
    if prefixes:
        with open(EXPECTED) as f:
            kept = {c["name"]: c for c in json.load(f)["cells"]}
    oracle = os.path.join(HERE, "..", "..", "..", "shared", "tools", "llamacpp-oracle", "oracle.py")
    out = {"note": "llama.cpp's greedy ids on files kestrel synth writes; see synth_cells.py", "cells": []}
    with tempfile.TemporaryDirectory() as tmp:
        mtp_oracle = build_mtp_oracle(dest, tmp)
        for name, args, prompt, n, *mix in CELLS:
            if prefixes and not name.startswith(tuple(prefixes)):
                if name not in kept:
                    sys.exit(f"{name}: not recorded yet (record it too)")
                out["cells"].append(kept[name])
                continue
            path = os.path.join(tmp, name + ".gguf")
            mtp_file = path + ".mtp.gguf" if name in MTP_FILE_CELLS else None
            subprocess.run([kestrel, "synth", *args, "-o", path] + (["--mtp-file", mtp_file] if mtp_file else []),
                           check=True, capture_output=True)
            env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(dest, "build", "bin"))
            if mix:
                theirs, ours = path + ".llama.gguf", path + ".kestrel.gguf"
                subprocess.run([os.path.join(dest, "build", "bin", "llama-quantize"), path, theirs, mix[0]], check=True,
                               capture_output=True, env=env)
                subprocess.run([kestrel, "quantize", path, ours, "--mix", mix[0]], check=True, capture_output=True)
                differs = same_content(dest, theirs, ours, types_only=mix[0] in K_MIXES)
                if differs:
                    sys.exit(f"{name}: kestrel quantize --mix {mix[0]} differs from llama-quantize's: {differs}")
                path = ours
            res = json.loads(subprocess.run([sys.executable, oracle, dest, path, "-p", " ".join(map(str, prompt)),
                                             "-n", str(n), "--ctx", str(max(512, len(prompt) + n))], check=True, capture_output=True, text=True, env=env).stdout)
            if "error" in res:
                sys.exit(f"{name}: llama.cpp: {res['error']}")
            run = res["runs"][0]
            cell = {"name": name, "synth": args, "sha256": sha256(path), "prompt": prompt,
                    "ids": run["ids"], "gaps": [round(g, 5) for g in run["gap"]],
                    "llama_cpp": res["llama_cpp"]["commit"]}
            if mix:
                cell.update({"quantize": ["--mix", mix[0]], "tie_gap": 0.1, "ggml_cpu": res["llama_cpp"]["ggml_cpu"]})
            if name in MTP_CELLS:
                mtp = json.loads(subprocess.run([mtp_oracle] + (["--mtp-model", mtp_file] if mtp_file else []) +
                                                [path, " ".join(map(str, prompt))], check=True,
                                                capture_output=True, text=True, env=env).stdout)
                if "error" in mtp:
                    sys.exit(f"{name}: llama.cpp's MTP: {mtp['error']}")
                cell["mtp"] = {"ids": mtp["ids"], "gaps": [round(g, 5) for g in mtp["gap"]]}
                if mtp_file:
                    cell["mtp"]["file_sha256"] = sha256(mtp_file)
            out["cells"].append(cell)
    os.makedirs(os.path.dirname(EXPECTED), exist_ok=True)
    with open(EXPECTED, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] != "record":
        sys.exit(__doc__)
    record(sys.argv[2], sys.argv[3], sys.argv[4:])
