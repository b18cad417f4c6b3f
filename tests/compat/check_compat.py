#!/usr/bin/env python3
"""Kestrel against llama.cpp on every file of ../shared/reference/compat.

Runs the set's own checker (check.py, its README's matching rule) and
accepts, per cell:
  - a strict match: every greedy id equals llama.cpp's (or its no-repack
    path's), or differs first at a near-tie;
  - for a quantized file, a match under the set's tolerant teacher-forced
    view (check.py --forced --tie-gap-quant 0.1): llama.cpp quantizes
    activations to 8 bits inside every quantized matrix product, so another
    summation order can flip one activation's rounding and move a logit by up
    to ~0.1 in these small models (the set's README, "Numerics");
  - for a file holding a weight type Kestrel does not compute yet (the
    tensor-types issue), the clear "cannot compute with" error naming it.
Anything else fails: a wrong id in an F16 file, a crash, another error.

usage: check_compat.py KESTREL COMPAT_DIR [KESTREL_RUN_FLAGS]
  (e.g. "--device vulkan": every cell through the GPU backend, by the same rule)
"""
import json
import os
import subprocess
import sys
import tempfile


EXTRA = sys.argv[3] if len(sys.argv) > 3 else ""


def run_check(kestrel, compat, args):
    if EXTRA:
        args = args + ["--extra-args=" + EXTRA]
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        proc = subprocess.run([sys.executable, os.path.join(compat, "check.py"), kestrel, "--json-out", out.name] + args,
                              capture_output=True, text=True)
        try:
            with open(out.name) as f:
                return json.load(f), proc.stdout
        except (OSError, ValueError):
            sys.exit(f"check.py wrote no results (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


def main():
    kestrel, compat = sys.argv[1], sys.argv[2]
    expected = json.load(open(os.path.join(compat, "expected.json")))["cells"]
    strict, table = run_check(kestrel, compat, [])
    print(table)
    failures, rows = [], []
    for cell, r in sorted(strict.items()):
        exp = expected[cell]
        if r["status"] in ("match", "tie"):
            rows.append((cell, "match" if r["status"] == "match" else "match up to a near-tie"))
            continue
        if r["status"] == "differs" and exp["mix"] != "F16":
            forced, _ = run_check(kestrel, compat, ["--forced", "--tie-gap-quant", "0.1", "--cells", "^" + cell.replace(".", r"\.") + "$"])
            if forced.get(cell, {}).get("status") in ("match", "tie"):
                rows.append((cell, f"match teacher-forced, {forced[cell]['detail'] or 'every step'} (free-running: {r['detail']})"))
                continue
            failures.append(f"{cell}: {r['detail']}; teacher-forced: {forced.get(cell, {}).get('detail')}")
            continue
        failures.append(f"{cell}: {r['status']}: {r['detail']}")
    for cell, how in rows:
        print(f"{cell:18} {how}")
    if failures:
        print("\nFAILED:\n  " + "\n  ".join(failures))
        return 1
    strict_count = sum(1 for _, how in rows if not how.startswith("match teacher-forced"))
    print(f"\n{len(rows)} cells match llama.cpp: {strict_count} free-running, {len(rows) - strict_count} teacher-forced")
    return 0


if __name__ == "__main__":
    sys.exit(main())
