#!/usr/bin/env python3
"""Validates generated outputs against their JSON schemas with the jsonschema
package (Debian's python3-jsonschema): the independent check that constrained
decoding produced what the schema allows.

Input (argv[1]): a JSON array of {"name", "schema", "output"} where output is
the generated text. Each must parse as JSON and validate. Prints one line per
failure and a summary; exits 1 if any failed."""
import json
import sys

import jsonschema


def main():
    cases = json.load(open(sys.argv[1], encoding="utf-8"))
    failures = 0
    for case in cases:
        try:
            value = json.loads(case["output"])
        except ValueError as e:
            print(f"{case['name']}: not JSON ({e}): {case['output']!r}")
            failures += 1
            continue
        validator = jsonschema.Draft202012Validator(case["schema"])
        errors = list(validator.iter_errors(value))
        if errors:
            print(f"{case['name']}: {errors[0].message}: {case['output']!r}")
            failures += 1
    print(f"{len(cases) - failures} of {len(cases)} valid")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
