#!/usr/bin/env python3
"""Fails on a function in src/model/ longer than 80 lines.

A family's layer should read on one screen (../shared/STYLE.md); the limit
keeps model/ from growing back into long functions. clang-tidy's
readability-function-size counts the lines (whitespace and comments
included), over the build's compile_commands.json.

Usage: check_function_size.py BUILD_DIR SRC_DIR
"""
import concurrent.futures
import os
import pathlib
import shutil
import subprocess
import sys

LIMIT = 80


def main():
    build, src = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    tidy = shutil.which("clang-tidy")
    if not tidy:
        print("clang-tidy not found (scripts/setup.sh installs it)")
        return 1
    if not (build / "compile_commands.json").exists():
        print(f"{build}/compile_commands.json not found (CMAKE_EXPORT_COMPILE_COMMANDS)")
        return 1
    files = sorted(str(p) for p in (src / "model").rglob("*.cpp"))
    config = "{CheckOptions: [{key: readability-function-size.LineThreshold, value: %d}]}" % LIMIT

    def check(path):
        r = subprocess.run([tidy, "-p", str(build), "--quiet", "--checks=-*,readability-function-size",
                            f"--config={config}", path], capture_output=True, text=True)
        return [line for line in r.stdout.splitlines() if "readability-function-size" in line or "lines including" in line]

    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        found = [line for lines in pool.map(check, files) for line in lines]
    for line in found:
        print(line)
    print(f"{len(files)} files of src/model checked; {sum('warning' in l for l in found)} functions over {LIMIT} lines")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
