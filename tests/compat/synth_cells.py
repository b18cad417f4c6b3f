#!/usr/bin/env python3
"""Reference cells for architectures written by `kestrel synth` (no public file of them is at hand):
the file's synth arguments and sha256, and llama.cpp's greedy ids for a fixed prompt.

  synth_cells.py record KESTREL DEST     synthesise each cell's file, run llama.cpp (get-llama.sh's DEST)
                                         through ../shared/tools/llamacpp-oracle/oracle.py, write tests/reference/synth_cells.json

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
# name, synth arguments, prompt ids, tokens to generate
CELLS = [
    ("mistral4-tiny.f32", ["--arch", "mistral4", "--preset", "tiny", "--type", "f32", "--seed", "1"],
     [3, 17, 42, 99, 7, 64, 120, 5, 11, 200], 12),
    ("deepseek2-lite-form-tiny.f32", ["--arch", "deepseek2", "--preset", "tiny", "--type", "f32", "--seed", "1"],
     [3, 17, 42, 99], 8),
]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def record(kestrel, dest):
    oracle = os.path.join(HERE, "..", "..", "..", "shared", "tools", "llamacpp-oracle", "oracle.py")
    out = {"note": "llama.cpp's greedy ids on files kestrel synth writes; see synth_cells.py", "cells": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name, args, prompt, n in CELLS:
            path = os.path.join(tmp, name + ".gguf")
            subprocess.run([kestrel, "synth", *args, "-o", path], check=True, capture_output=True)
            env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(dest, "build", "bin"))
            res = json.loads(subprocess.run([sys.executable, oracle, dest, path, "-p", " ".join(map(str, prompt)),
                                             "-n", str(n)], check=True, capture_output=True, text=True, env=env).stdout)
            if "error" in res:
                sys.exit(f"{name}: llama.cpp: {res['error']}")
            run = res["runs"][0]
            out["cells"].append({"name": name, "synth": args, "sha256": sha256(path), "prompt": prompt,
                                 "ids": run["ids"], "gaps": [round(g, 5) for g in run["gap"]],
                                 "llama_cpp": res["llama_cpp"]["commit"]})
    os.makedirs(os.path.dirname(EXPECTED), exist_ok=True)
    with open(EXPECTED, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "record":
        sys.exit(__doc__)
    record(sys.argv[2], sys.argv[3])
