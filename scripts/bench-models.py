#!/usr/bin/env python3
"""The model manager's costs (docs/benchmarks.md, docs/serving.md "Many models"): model switch time, the latency
routing adds, and memory, for Kestrel's one process against llama-server's router (a child process per model), runs
interleaved, medians.

  scripts/bench-models.py [--llama DIR] [--reps N] [--threads T]

The files, by `kestrel synth` into build/bench-models/: a Llama-3.2-1B-shaped model and a Qwen3-0.6B-shaped one
(Q4_0), read once first (so every load is from the page cache).
  switch:  a server with both in --models-dir and --models-max 1; requests alternate between them (a one-token
           completion each), so each one unloads the other model and loads its own; its time minus the same
           request's time with the model loaded is the switch. Kestrel and llama-server's router, alternating.
  start:   a fresh `kestrel serve -m` process until it answers (what a process per model pays per switch).
  routing: 200 one-token completions and 1000 /tokenize requests to a loaded model, one at a time, through the
           manager (--models-dir) and to a server of that model alone (-m); the median difference is what routing
           adds. The same for llama-server's router against llama-server alone.
  memory:  resident memory of the manager with no model loaded (what each extra process of a process-per-model
           design would duplicate), and with the 1B model loaded, against `kestrel serve -m` of it; llama-server's
           router and its child.
"""
import argparse
import os
import signal
import statistics
import subprocess
import time

from bench_http import free_port, post, wait_up

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
K = os.path.join(ROOT, "build", "kestrel")


def rss(pid):
    """Resident bytes of a process and its children (llama-server's router and its model processes)."""
    total = 0
    pids = [pid]
    try:
        pids += [int(p) for p in subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()]
    except Exception:
        pass
    for p in pids:
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except FileNotFoundError:
            pass
    return total


class Server:
    def __init__(self, args, ready_path="/health"):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(args + ["--port", str(self.port)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        self.started = wait_up(self.url, self.proc, ready_path)

    def stop(self):
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def one_token(url, model, prompt="Hello there"):
    t0 = time.perf_counter()
    post(url + "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 1, "temperature": 0})
    return time.perf_counter() - t0


def kestrel_manager(d, t, extra=()):
    return Server([K, "serve", "--models-dir", d, "-t", str(t), "-c", "2048", *extra])


def llama_router(llama, d, t):
    return Server([os.path.join(llama, "build", "bin", "llama-server"), "--models-dir", d, "--models-max", "1", "-t",
                   str(t), "-c", "2048", "-np", "1"])


def switch_times(server, names, reps):
    """Per request: the time to a model that must be loaded (the other unloaded) minus the time loaded."""
    out = []
    one_token(server.url, names[0])
    for i in range(reps):
        for n in names[1:] + names[:1]:
            cold = one_token(server.url, n)
            warm = one_token(server.url, n)
            out.append(cold - warm)
    return out


def tokenize(url, model):
    t0 = time.perf_counter()
    post(url + "/tokenize", {"model": model, "content": "Hello there, how are you?"})
    return time.perf_counter() - t0


def routing(url, model, n=200):
    """Medians of a one-token completion and of a /tokenize (the routing's cost without the model's step)."""
    for _ in range(5):
        one_token(url, model)
        tokenize(url, model)
    return (statistics.median(one_token(url, model) for _ in range(n)),
            statistics.median(tokenize(url, model) for _ in range(5 * n)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama", default="/work/llama-ref")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    t = a.threads
    d = os.path.join(ROOT, "build", "bench-models")
    os.makedirs(d, exist_ok=True)
    files = {"llama1b": ("llama", "llama3-1b"), "qwen06b": ("qwen3", "0.6b")}
    for name, (arch, preset) in files.items():
        path = os.path.join(d, name + ".gguf")
        if not os.path.exists(path):
            subprocess.run([K, "synth", "--arch", arch, "--preset", preset, "--type", "q4_0", "-o", path], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(path, "rb") as f:  # (into the page cache)
            while f.read(1 << 24):
                pass
    names = list(files)
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    cpu = next((l.split(":", 1)[1].strip() for l in lscpu.splitlines() if l.startswith("Model name")), "?")
    print(f"CPU: {cpu}, {t} threads, {a.reps} rounds")
    llama = os.path.join(a.llama, "build", "bin", "llama-server")
    have_llama = os.path.exists(llama)

    # Switch: Kestrel's manager with --models-max 1, then llama-server's router, each round in turn.
    ks, ls = [], []
    for r in range(a.reps):
        s = kestrel_manager(d, t, ["--models-max", "1"])
        ks += switch_times(s, names, 1)
        s.stop()
        if have_llama:
            s = llama_router(a.llama, d, t)
            ls += switch_times(s, names, 1)
            s.stop()
    print(f"switch (load from page cache, the other unloaded): Kestrel {statistics.median(ks):.3f} s"
          + (f", llama-server router {statistics.median(ls):.3f} s" if ls else ""))

    # A fresh process per model: start to answering, and to its first token.
    starts = []
    for r in range(a.reps):
        t0 = time.time()
        s = Server([K, "serve", "-m", os.path.join(d, "llama1b.gguf"), "-t", str(t), "-c", "2048"], "/ready")
        one_token(s.url, "llama1b.gguf")
        starts.append(time.time() - t0)
        s.stop()
    print(f"a fresh `kestrel serve -m` process to its first token: {statistics.median(starts):.3f} s")

    # Routing: through the manager against the model's own server; llama-server's router against llama-server.
    rows = []
    for r in range(a.reps):
        s = kestrel_manager(d, t)
        one_token(s.url, "llama1b")
        via = routing(s.url, "llama1b")
        idle = rss(s.proc.pid)
        s.stop()
        s = Server([K, "serve", "-m", os.path.join(d, "llama1b.gguf"), "-t", str(t), "-c", "2048"], "/ready")
        direct = routing(s.url, "llama1b.gguf")
        alone_rss = rss(s.proc.pid)
        s.stop()
        row = {"kestrel_via": via[0], "kestrel_direct": direct[0], "kestrel_via_tok": via[1],
               "kestrel_direct_tok": direct[1], "kestrel_manager_rss": idle, "kestrel_alone_rss": alone_rss}
        if have_llama:
            s = llama_router(a.llama, d, t)
            one_token(s.url, "llama1b")
            row["llama_via"], row["llama_via_tok"] = routing(s.url, "llama1b")
            row["llama_router_rss"] = rss(s.proc.pid)
            s.stop()
            s = Server([llama, "-m", os.path.join(d, "llama1b.gguf"), "-t", str(t), "-c", "2048", "-np", "1"])
            row["llama_direct"], row["llama_direct_tok"] = routing(s.url, "llama1b")
            row["llama_alone_rss"] = rss(s.proc.pid)
            s.stop()
        rows.append(row)
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    print(f"one-token completion, loaded model: Kestrel via the manager {med['kestrel_via'] * 1e3:.2f} ms, alone "
          f"{med['kestrel_direct'] * 1e3:.2f} ms (routing adds {(med['kestrel_via'] - med['kestrel_direct']) * 1e3:.2f} ms)")
    print(f"/tokenize: Kestrel via the manager {med['kestrel_via_tok'] * 1e3:.3f} ms, alone "
          f"{med['kestrel_direct_tok'] * 1e3:.3f} ms (routing adds {(med['kestrel_via_tok'] - med['kestrel_direct_tok']) * 1e3:.3f} ms)")
    if have_llama:
        print(f"/tokenize: llama-server via its router {med['llama_via_tok'] * 1e3:.3f} ms, alone "
              f"{med['llama_direct_tok'] * 1e3:.3f} ms (routing adds {(med['llama_via_tok'] - med['llama_direct_tok']) * 1e3:.3f} ms)")
        print(f"                                   llama-server via its router {med['llama_via'] * 1e3:.2f} ms, alone "
              f"{med['llama_direct'] * 1e3:.2f} ms (routing adds {(med['llama_via'] - med['llama_direct']) * 1e3:.2f} ms)")
    print(f"resident memory with the 1B model loaded: Kestrel manager {med['kestrel_manager_rss'] / 2**20:.0f} MiB, "
          f"Kestrel alone {med['kestrel_alone_rss'] / 2**20:.0f} MiB"
          + (f"; llama-server router + child {med['llama_router_rss'] / 2**20:.0f} MiB, alone "
             f"{med['llama_alone_rss'] / 2**20:.0f} MiB" if have_llama else ""))
    s = kestrel_manager(d, t)
    print(f"resident memory of the manager with no model loaded: {rss(s.proc.pid) / 2**20:.0f} MiB")
    s.stop()
    if have_llama:
        s = llama_router(a.llama, d, t)
        print(f"resident memory of llama-server's router with no model loaded: {rss(s.proc.pid) / 2**20:.0f} MiB")
        s.stop()


if __name__ == "__main__":
    main()
