#!/usr/bin/env python3
"""Reference cells for LoRA adapters and control vectors: a `kestrel synth` model, `kestrel synth --lora` adapters
and `kestrel synth --control-vector` vectors, and llama.cpp's greedy ids with them applied at the cell's scales
(llama_adapter_lora_init + llama_set_adapters_lora, as --lora-scaled does; common_control_vector_load +
llama_set_adapter_cvec on the cell's layer range, as --control-vector-scaled and --control-vector-layer-range do;
lora_oracle.cpp).

  lora_cells.py record KESTREL DEST
      synthesise each cell's model and adapters, build lora_oracle.cpp against DEST (get-llama.sh's), run it,
      write tests/reference/lora_cells.json

Each cell keeps the files' sha256, the prompt, and per generated token llama.cpp's id, top-2 gap and best logit.
tests/reference/test_lora_cells.cpp regenerates the files, checks the sha256, and compares kestrel's ids (by the
compat rule: a first difference only at a step whose gap is below 1e-3) and best logits (within 2e-3).

DeepSeek-V2's cell names only FFN matrices: llama.cpp multiplies by its MLA projections and output head without
the adapters (raw ggml_mul_mat, deepseek2.cpp), so an adapter on those loads there and does nothing.
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = os.path.join(HERE, "..", "reference", "lora_cells.json")
P = [1, 5, 9, 13, 200, 17, 33, 2, 99, 7, 64]
A = ["--lora-rank", "8", "--lora-alpha", "16"]                         # f32, rank 8, alpha 16
B = ["--lora-rank", "4", "--lora-type", "f16", "--lora-seed", "7"]     # f16, rank 4, no alpha
C = ["--lora-rank", "16", "--lora-alpha", "8", "--lora-seed", "9"]    # f32, rank 16, alpha 8


def model(arch, seed="2", preset="tiny"):
    return ["--arch", arch, "--preset", preset, "--type", "f32", "--seed", seed]


V = ["--control-vector-sd", "0.5"]
V2 = ["--control-vector-sd", "0.3", "--control-vector-seed", "5"]


# name, model synth arguments, [(adapter synth arguments, scale)], prompt, tokens[, control vectors
# [(synth arguments, scale)], their layer range (None: the default)]
CELLS = [
    ("llama-a", model("llama"), [(A, 1.0)], P, 12),
    ("llama-b-scaled", model("llama", "3"), [(B, 0.7)], P, 12),
    ("llama-embedding", model("llama"), [(C + ["--lora-embedding"], 1.0)], P, 12),
    ("llama-two", model("llama"), [(B, 0.7), (C, 1.0)], P, 12),
    ("qwen3-a", model("qwen3"), [(A, 8.0)], P, 12),
    ("gemma3-a", model("gemma3"), [(A, 1.0)], P, 12),
    ("gemma3-b", model("gemma3", "3"), [(B, 4.0)], P, 12),
    ("qwen2-b", model("qwen2"), [(B, 1.0)], P, 12),
    ("mistral3-c", model("mistral3"), [(C, 1.0)], P, 12),
    ("gemma4-a", model("gemma4"), [(A, 1.0)], P, 12),
    ("qwen35-b", model("qwen35"), [(B, 0.7)], P, 12),
    ("qwen3moe-a", model("qwen3moe"), [(A, 1.0)], P, 12),
    ("gpt-oss-c", model("gpt-oss"), [(C, 1.0)], P, 12),
    ("deepseek2-ffn", model("deepseek2"), [(A + ["--lora-only", "ffn_"], 1.0)], P, 12),
    # The hybrid families' linear-attention projections (attn_qkv, attn_gate, ssm_ba / ssm_beta and ssm_alpha,
    # ssm_out; 200x: their updates are small beside the attention's), Gemma 4's per-layer input projections,
    # DeepSeek-V4's attention (its attn_output_a, split per group, is refused) and shared experts.
    ("qwen3next-b", model("qwen3next"), [(B, 1.0)], P, 12),
    ("qwen35-linear", model("qwen35"), [(B + ["--lora-only", "attn_qkv,attn_gate,ssm_beta,ssm_alpha,ssm_out"], 200.0)],
     P, 12),
    ("gemma4-per-layer", model("gemma4"), [(A + ["--lora-only", "inp_gate,proj."], 1.0)], P, 12),
    ("deepseek4-a", model("deepseek4"),
     [(A + ["--lora-only", "attn_q_a,attn_q_b,attn_kv.,attn_output_b,shexp"], 1.0)], P, 12),
    # DeepSeek-V4's compressors and indexer (300x: small updates), over a prompt past two blocks of 4.
    ("deepseek4-compressors", model("deepseek4"),
     [(B + ["--lora-only", "attn_compressor_kv,indexer_compressor_kv,indexer.attn_q_b,indexer.proj"], 300.0)],
     P + [3, 17, 42, 99, 7, 64, 120, 5, 11], 12),
    ("glm4moe-a", model("glm4moe"), [(A, 1.0)], P, 12),
    # Routed experts (build_lora_mm_id: 3-D pairs, each expert's slice on its rows).
    ("qwen3moe-experts", model("qwen3moe"), [(B + ["--lora-only", "_exps"], 1.0)], P, 12),
    ("qwen35moe-experts", model("qwen35moe"), [(A + ["--lora-only", "_exps,shexp"], 1.0)], P, 12),
    ("gpt-oss-experts", model("gpt-oss"), [(A + ["--lora-only", "_exps"], 1.0)], P, 12),
    ("glm4moe-experts", model("glm4moe"), [(C + ["--lora-only", "_exps"], 1.0)], P, 12),
    # Gemma 4's fused gate|up experts: each half's rows of B (its ffn_down_exps under an adapter is refused: llama.cpp
    # adds the update after the per-expert scale).
    ("gemma4-moe-gate-up", model("gemma4", preset="tiny-moe"), [(B + ["--lora-only", "ffn_gate_up_exps"], 1.0)], P, 12),
    ("llama4-c", model("llama4"), [(C, 1.0)], P, 12),
    ("llama-cvec", model("llama"), [], P, 12, [(V, 0.8)], None),
    ("llama-cvec-two-range", model("llama", "3"), [], P, 12, [(V, 0.5), (V2, -1.5)], (1, 1)),
    ("llama-a-cvec", model("llama"), [(A, 1.0)], P, 12, [(V, 0.8)], None),
    ("gemma4-cvec", model("gemma4"), [], P, 12, [(V, 0.8)], None),
    ("qwen35-cvec", model("qwen35"), [], P, 12, [(V, 0.8)], None),
    ("deepseek4-cvec", model("deepseek4"), [], P, 12, [(V, 0.8)], None),
    ("gpt-oss-cvec", model("gpt-oss"), [], P, 12, [(V, 0.8)], None),
    ("mistral3-cvec", model("mistral3"), [], P, 12, [(V, 0.8)], (1, 5)),
]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def build_oracle(dest, tmp):
    exe, bin_dir = os.path.join(tmp, "lora_oracle"), os.path.join(dest, "build", "bin")
    subprocess.run([os.environ.get("CXX", "c++"), "-std=c++17", "-O2", os.path.join(HERE, "lora_oracle.cpp"),
                    "-I" + os.path.join(dest, "include"), "-I" + os.path.join(dest, "ggml", "include"),
                    "-I" + os.path.join(dest, "common"), "-L" + bin_dir, "-lllama-common", "-lllama", "-lggml",
                    "-lggml-base", "-Wl,-rpath," + bin_dir, "-o", exe],
                   check=True)
    return exe


def commit(dest):
    try:
        return subprocess.run(["git", "-C", dest, "rev-parse", "HEAD"], check=True, capture_output=True,
                              text=True).stdout.strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return "unknown"


def record(kestrel, dest):
    out = {"note": "llama.cpp's greedy ids with kestrel synth's LoRA adapters applied; see lora_cells.py",
           "llama_cpp": commit(dest), "cells": []}
    with tempfile.TemporaryDirectory() as tmp:
        oracle = build_oracle(dest, tmp)
        for name, margs, adapters, prompt, n, *cv in CELLS:
            vectors, layer_range = cv if cv else ([], None)
            path = os.path.join(tmp, name + ".gguf")
            oracle_args = []
            subprocess.run([kestrel, "synth", *margs, "-o", path], check=True, capture_output=True)

            def files(items, kind, synth_flag, oracle_flag):
                out = []
                for i, (args, scale) in enumerate(items):
                    fpath = os.path.join(tmp, f"{name}.{kind}{i}.gguf")
                    subprocess.run([kestrel, "synth", *margs, "-o", path, synth_flag, fpath, *args], check=True,
                                   capture_output=True)
                    out.append({"synth": args, "scale": scale, "sha256": sha256(fpath)})
                    oracle_args.extend([oracle_flag, fpath, str(scale)])
                return out
            cell_vectors = files(vectors, "cvec", "--control-vector", "--cvec")
            if layer_range:
                oracle_args += ["--cvec-range", str(layer_range[0]), str(layer_range[1])]
            cell_adapters = files(adapters, "lora", "--lora", "--lora")
            res = json.loads(subprocess.run([oracle, "-n", str(n), *oracle_args, path, " ".join(map(str, prompt))],
                                            check=True, capture_output=True, text=True).stdout)
            if "error" in res:
                sys.exit(f"{name}: llama.cpp: {res['error']}")
            cell = {"name": name, "synth": margs, "sha256": sha256(path), "adapters": cell_adapters,
                    "prompt": prompt, "ids": res["ids"], "gaps": [round(g, 5) for g in res["gap"]], "best": res["best"]}
            if cell_vectors:
                cell["control_vectors"] = cell_vectors
                if layer_range:
                    cell["layer_range"] = list(layer_range)
            out["cells"].append(cell)
            print(f"{name}: {res['ids']}")
    with open(EXPECTED, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "record":
        sys.exit(__doc__)
    record(sys.argv[2], sys.argv[3])
