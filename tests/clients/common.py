"""What the client tests share: a `kestrel serve` on a free port for the length of a `with`, and the report."""
import json
import os
import re
import subprocess
import sys
import threading
import urllib.request

SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared")


class Server:
    """`kestrel serve ARGS --port 0`, its port read from its start-up line; the log kept (tail() shows it)."""

    def __init__(self, kestrel, args):
        self.proc = subprocess.Popen([kestrel, "serve", "--port", "0", *args], stderr=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, text=True,
                                     errors="replace")  # (a log line may quote a request's bytes)
        self.log = []
        port = None
        for line in self.proc.stderr:
            self.log.append(line)
            m = re.search(r"serving '.*' on http://127\.0\.0\.1:([0-9]+)", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            raise SystemExit("kestrel serve did not start:\n" + "".join(self.log[-20:]))
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()
        self.base = f"http://127.0.0.1:{port}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def alive(self):
        """The server still answers, and the process did not die."""
        if self.proc.poll() is not None:
            return False
        try:
            return urllib.request.urlopen(self.base + "/health", timeout=10).status == 200
        except OSError:
            return False

    def tail(self, n=20):
        return "".join(self.log[-n:])

    def get(self, path):
        return json.loads(urllib.request.urlopen(self.base + path, timeout=60).read())

    def post(self, path, body):
        req = urllib.request.Request(self.base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(req, timeout=120).read())


class Checks:
    """Named expectations; the test fails with every failed one listed."""

    def __init__(self):
        self.failed = []
        self.passed = 0

    def expect(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed.append(what)
            print("FAILED:", what, flush=True)
        return ok

    def done(self):
        print(f"{self.passed} checks passed, {len(self.failed)} failed")
        for f in self.failed:
            print("  -", f)
        return 1 if self.failed else 0


def run_checks(fn):
    """Runs fn(checks) and exits with the report's status; an exception is a failure with its trace."""
    checks = Checks()
    try:
        fn(checks)
    except Exception:  # noqa: BLE001 - the trace is the report
        import traceback
        traceback.print_exc()
        checks.failed.append("raised: " + traceback.format_exc().strip().splitlines()[-1])
    sys.exit(checks.done())


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
