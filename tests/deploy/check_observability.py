#!/usr/bin/env python3
"""Checks the operator's files in deploy/ with the real tools and against a running server.

- deploy/prometheus/kestrel-rules.yml: `promtool check rules`, and its unit tests with `promtool test rules`;
- deploy/grafana/kestrel-dashboard.json: a well-formed dashboard (unique panel ids, panels inside the
  24-column grid, every query on the dashboard's Prometheus variable), and every query valid PromQL (promtool
  checks them as recording rules, with Grafana's variables filled in);
- the rules and the dashboard name only series that `kestrel serve` exposes: a server is started on a model,
  asked a chat and a completion, and its /metrics read.

Usage: check_observability.py KESTREL_BINARY MODEL SOURCE_DIR
"""
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

from common import fail, served_series  # (this folder: the script's own, first on sys.path)

SERIES = re.compile(r"\b((?:kestrel|gen_ai)_[a-z0-9_]+)\b")


def series_named(expr):
    """The kestrel_/gen_ai_ series an expression reads (label names in selectors and by/without left out)."""
    bare = re.sub(r"\{[^}]*\}", "", expr)
    bare = re.sub(r"\b(?:by|without)\s*\([^)]*\)", "", bare)
    return SERIES.findall(bare)


def dashboard_problems(dash):
    problems, ids, exprs = [], set(), []
    for p in dash.get("panels", []):
        pid = p.get("id")
        if pid in ids:
            problems.append(f"dashboard: panel id {pid} twice")
        ids.add(pid)
        g = p.get("gridPos", {})
        if g.get("x", 0) + g.get("w", 0) > 24 or g.get("w", 0) <= 0 or g.get("h", 0) <= 0:
            problems.append(f"dashboard: panel {pid} ('{p.get('title')}') is outside the 24-column grid: {g}")
        if p.get("type") == "row":
            continue
        if not p.get("targets"):
            problems.append(f"dashboard: panel {pid} ('{p.get('title')}') has no query")
        for t in p.get("targets", []):
            if t.get("datasource", {}).get("uid") != "${datasource}":
                problems.append(f"dashboard: panel {pid} query {t.get('refId')} is not on the $datasource variable")
            exprs.append((f"panel {pid} ('{p.get('title')}') query {t.get('refId')}", t.get("expr", "")))
    names = [v["name"] for v in dash.get("templating", {}).get("list", [])]
    if names != ["datasource", "model_name"]:
        problems.append(f"dashboard: variables {names}, expected datasource and model_name")
    return problems, exprs


def main():
    kestrel, model, source = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
    promtool = shutil.which("promtool")
    if not promtool:
        return fail(["promtool is missing: run scripts/setup.sh (Debian's prometheus package)"])
    rules_dir = source / "deploy" / "prometheus"
    problems = []
    for args in (["check", "rules", "kestrel-rules.yml"], ["test", "rules", "kestrel-rules.test.yml"]):
        r = subprocess.run([promtool, *args], cwd=rules_dir, capture_output=True, text=True)
        print(f"promtool {' '.join(args)}: {(r.stdout + r.stderr).strip()}")
        if r.returncode != 0:
            problems.append(f"promtool {' '.join(args)} failed")
    dash = json.loads((source / "deploy" / "grafana" / "kestrel-dashboard.json").read_text())
    more, exprs = dashboard_problems(dash)
    problems += more
    # Every query is PromQL promtool accepts (Grafana's variables filled in as it would).
    with tempfile.TemporaryDirectory() as tmp:
        rules = {"groups": [{"name": "dashboard", "rules": [
            {"record": f"dashboard:query_{i}", "expr": e.replace("$__rate_interval", "5m").replace("$model_name", ".*")}
            for i, (_, e) in enumerate(exprs)]}]}
        path = pathlib.Path(tmp) / "dashboard-queries.yml"
        path.write_text(json.dumps(rules))  # (JSON is YAML)
        r = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
        if r.returncode != 0:
            problems.append(f"dashboard queries are not valid PromQL: {(r.stdout + r.stderr).strip()}")
    served = served_series(kestrel, model)
    for where, e in exprs:
        for name in series_named(e):
            if name not in served:
                problems.append(f"dashboard {where}: {name} is not a series the server exposes")
    rules_text = (rules_dir / "kestrel-rules.yml").read_text()
    for name in sorted(set(series_named(rules_text))):
        if name not in served:
            problems.append(f"kestrel-rules.yml: {name} is not a series the server exposes")
    print(f"{len(exprs)} dashboard queries, {len(served)} series served")
    return fail(problems)


if __name__ == "__main__":
    sys.exit(main())
