#!/usr/bin/env python3
"""schemathesis (pinned in tests/clients/requirements.txt) against `kestrel serve`'s own OpenAPI document
(GET /openapi.json): for every operation, a bounded number of generated requests, valid and invalid; no answer
may be a 5xx, every status must be one the document lists, every content type and body must match its schema;
and the server must be alive and serving after. (That every route is described and every described path served
is tests/e2e/test_server_openapi.cpp.)

usage: openapi_test.py KESTREL MODEL [EXAMPLES]"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Server, run_checks  # noqa: E402

KESTREL, MODEL = sys.argv[1], sys.argv[2]
EXAMPLES = sys.argv[3] if len(sys.argv) > 3 else "20"
ST = os.path.join(os.path.dirname(sys.executable), "st")


def test(c):
    # (hypothesis keeps its database in the working directory; the slot actions write theirs in slots/)
    with tempfile.TemporaryDirectory() as work, \
            Server(KESTREL, ["-m", MODEL, "-c", "512", "-t", "2", "--pooling", "mean",
                             "--slot-save-path", os.path.join(work, "slots")]) as s:
        t0 = time.time()
        run = subprocess.run([ST, "run", s.base + "/openapi.json",
                              "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
                                          "response_schema_conformance",
                              "--max-examples", EXAMPLES, "--seed", "59", "--request-timeout", "60",
                              "--continue-on-failure", "--no-color"],
                             cwd=work, capture_output=True, text=True, timeout=600)
        print(run.stdout[-6000:], run.stderr[-2000:])
        print(f"schemathesis: {time.time() - t0:.1f} s")
        c.expect(run.returncode == 0, "schemathesis found no failure")
        summary = [line for line in run.stdout.splitlines() if "generated" in line and "passed" in line]
        c.expect(bool(summary), f"schemathesis reported its cases: {summary}")
        import re
        selected = re.search(r"Selected: (\d+)/(\d+)", run.stdout)
        tested = re.search(r"Tested: (\d+)", run.stdout)
        c.expect(bool(selected and tested) and selected.group(1) == selected.group(2) == tested.group(1)
                 and int(tested.group(1)) >= 25, f"every operation was tested ({selected and selected.group(0)}, "
                 f"{tested and tested.group(0)})")
        c.expect(s.alive(), "the server is alive after the run")
        reply = s.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 4})
        c.expect(len(reply["choices"]) == 1, "and still answers a completion")


run_checks(test)
