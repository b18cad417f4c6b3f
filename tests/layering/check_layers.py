#!/usr/bin/env python3
"""Fails on an #include in src/ that points to a folder above the includer's.

The layers, lowest first, are LAYERS below: a folder may include itself and
the folders before it. A layer is a folder under src/ or a folder inside one
("parallel/step" sits above "model" while the rest of "parallel" sits below
it); a file or header belongs to the longest layer its path starts with. Upward includes that exist today are listed, one
"src/path: folder/header.h" per line, in known_upward_includes.txt: debt that
issue 17 pays off. The check fails on a new upward include (name it and fix
the layering instead) and on a listed one that is gone (delete its line, so
the list only shrinks).

Usage: check_layers.py SRC_DIR
"""
import pathlib
import re
import sys

LAYERS = ["core", "media", "hw", "formats", "gguf", "kernels", "backend", "ops", "kv", "parallel", "model", "parallel/step", "tokenizer", "grammar", "jinja", "chat", "runtime", "spec", "mmproj", "serving", "measure",
          "quant", "loadtest", "cli"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+/[^"]+)"', re.M)


def layer_of(relative: str):
    """The longest layer that the path (relative to src/) starts with, or None."""
    best = None
    for layer in LAYERS:
        if relative.startswith(layer + "/") and (best is None or len(layer) > len(best)):
            best = layer
    return best


def upward_includes(src: pathlib.Path):
    found = set()
    for path in sorted(src.rglob("*")):
        if path.suffix not in (".h", ".cpp") or not path.is_file():
            continue
        folder = layer_of(path.relative_to(src).as_posix())
        if folder is None:
            raise SystemExit(f"{path}: its folder has no place in LAYERS; add it to {__file__}")
        for header in INCLUDE.findall(path.read_text(encoding="utf-8")):
            target = layer_of(header)
            if target is None:
                raise SystemExit(f"{path}: includes '{header}', a folder with no place in LAYERS")
            if LAYERS.index(target) > LAYERS.index(folder):
                found.add(f"src/{path.relative_to(src)}: {header}")
    return found


def main():
    src = pathlib.Path(sys.argv[1])
    known_file = pathlib.Path(__file__).with_name("known_upward_includes.txt")
    known = {line.strip() for line in known_file.read_text().splitlines() if line.strip() and not line.startswith("#")}
    found = upward_includes(src)
    new, gone = sorted(found - known), sorted(known - found)
    for line in new:
        print(f"upward include (layers, lowest first: {' < '.join(LAYERS)}): {line}")
    for line in gone:
        print(f"no longer included, delete its line from {known_file.name}: {line}")
    print(f"{len(found)} upward includes, {len(known)} listed as known")
    return 1 if new or gone else 0


if __name__ == "__main__":
    sys.exit(main())
