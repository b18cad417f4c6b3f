"""What the deploy checks share: the report of their problems, a free port, and the series a running
`kestrel serve` declares (the names dashboards, rules and autoscalers may read)."""
import json
import re
import socket
import subprocess
import urllib.request


def fail(problems):
    for p in problems:
        print(p)
    print(f"{len(problems)} problems")
    return 1 if problems else 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def served_series(kestrel, model):
    """The sample names a running server exposes (histograms' _bucket/_sum/_count included)."""
    proc = subprocess.Popen([kestrel, "serve", "-m", model, "--port", "0", "-t", "2", "-c", "256"],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        port = None
        for line in proc.stderr:
            m = re.search(r"serving '.*' on http://127\.0\.0\.1:([0-9]+)", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            raise SystemExit("kestrel serve did not start")
        base = f"http://127.0.0.1:{port}"

        def post(path, body):
            req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
            urllib.request.urlopen(req, timeout=60).read()

        post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        post("/v1/completions", {"prompt": "Once", "max_tokens": 4})
        text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # Every family the server declares (a labelled counter has no series before its first count), with a
    # histogram's sample names.
    names = set()
    for line in text.splitlines():
        m = re.match(r"# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (\w+)$", line)
        if m:
            names |= {m.group(1) + s for s in ("_bucket", "_sum", "_count")} if m.group(2) == "histogram" else {m.group(1)}
    return names
