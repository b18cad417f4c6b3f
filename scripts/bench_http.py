"""What the server benchmarks share (scripts/bench-lora.py, scripts/bench-models.py): a free port, JSON over HTTP,
and waiting for a server to answer."""
import json
import socket
import sys
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def post(url, body, timeout=1200):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_up(url, proc, path="/health", timeout=300):
    """Seconds until GET url+path answers 200; exits if the server process ends or never answers."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            sys.exit(f"server exited: {proc.args}")
        try:
            if get(url + path, 1)[0] == 200:
                return time.time() - t0
        except Exception:
            pass
        time.sleep(0.02)
    sys.exit(f"server did not come up: {proc.args}")
