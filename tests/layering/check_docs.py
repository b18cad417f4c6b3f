#!/usr/bin/env python3
"""Fails where the docs no longer say what the tree is.

1. Every source path the README, CONTRIBUTING.md and docs/*.md name
   (`src/model/layer_stack.cpp`, `kernels/matmul.h`, `src/model/arch/`, a glob
   such as `kernels/x86/*_avx2.cpp`) must exist under src/.
2. CONTRIBUTING.md's layer list ("core < hw < ... < cli") must be the layering
   check's own list (check_layers.py's LAYERS), in its order.
3. docs/testing.md's list of test folders must name every folder of tests/.

Usage: check_docs.py REPO_ROOT
"""
import glob
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from check_layers import LAYERS  # noqa: E402

FOLDERS = "|".join(LAYERS)
# A path that starts at a source folder (optionally under src/): ends in a
# source file's extension, or in "/" when it names a folder.
PATH = re.compile(r"(?<![\w./<>-])(?:src/)?((?:%s)(?:/[\w.*-]+)*(?:\.(?:cpp|h)\b|/))" % FOLDERS)


def docs(root: pathlib.Path):
    yield root / "README.md"
    yield root / "CONTRIBUTING.md"
    yield from sorted((root / "docs").glob("*.md"))


def missing_paths(root: pathlib.Path):
    src = root / "src"
    bad = []
    for doc in docs(root):
        for n, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for rel in PATH.findall(line):
                if "<" in rel:
                    continue
                target = src / rel
                exists = glob.glob(str(target)) if "*" in rel else target.exists()
                if not exists:
                    bad.append(f"{doc.relative_to(root)}:{n}: names src/{rel}, which does not exist")
    return bad


def layer_list_problems(root: pathlib.Path):
    text = (root / "CONTRIBUTING.md").read_text(encoding="utf-8")
    m = re.search(r"`(core(?:\s*<\s*[a-z_/]+)+)`", text.replace("\n", " "))
    if not m:
        return ["CONTRIBUTING.md: no layer list (`core < hw < ... < cli`) found"]
    listed = [w.strip() for w in m.group(1).split("<")]
    if listed != LAYERS:
        return [f"CONTRIBUTING.md lists the layers as {' < '.join(listed)}; "
                f"tests/layering/check_layers.py has {' < '.join(LAYERS)}"]
    return []


def test_folder_problems(root: pathlib.Path):
    text = (root / "docs" / "testing.md").read_text(encoding="utf-8")
    folders = sorted(p.name for p in (root / "tests").iterdir() if p.is_dir() and not p.name.startswith("."))
    return [f"docs/testing.md does not describe tests/{f}/" for f in folders if f"tests/{f}/" not in text]


def main():
    root = pathlib.Path(sys.argv[1])
    problems = missing_paths(root) + layer_list_problems(root) + test_folder_problems(root)
    for p in problems:
        print(p)
    print(f"{len(problems)} problems in the docs")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
