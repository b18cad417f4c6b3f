#!/usr/bin/env python3
"""Tensor parallelism with real ranks (mpirun): check_tensor_parallel.py KESTREL SHARED_DIR

- greedy ids of `mpirun -np 2 kestrel run --parallel tp=2` equal llama.cpp's (../shared/reference/compat
  expected.json) on every family the split applies to, and -np 4 over TCP loopback;
- logits equal the single-process run's (float summation order aside);
- perplexity and bench run split; the server answers through rank 0 as one process does;
- splits that cannot be made, and rank counts that do not match, are clear errors, never hangs;
- a rank that hangs (SIGSTOP) or dies (SIGKILL) mid-request: the request gets an error response,
  the job ends non-zero within a bounded time.
Exits non-zero naming every failed check."""
import array
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

KESTREL, SHARED = sys.argv[1], sys.argv[2]
COMPAT = os.path.join(SHARED, "reference", "compat")
# pml ob1 (shared memory or TCP through the btls) is what Open MPI picks on one host anyway; naming it skips
# probing UCX, 0.2 s of each of the ~170 jobs' start-up.
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
           OMPI_MCA_pml="ob1")
TCP = ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"]
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)


def mpirun(n, args, extra=(), timeout=120):
    cmd = ["mpirun", "-np", str(n), *extra, KESTREL, *args]
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout, env=ENV)


def ids_of(out):
    for line in out.splitlines():
        if line.startswith("ids: "):
            return [int(x) for x in line[5:].split()]
    return None


def read_f32(path):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    return a


expected = json.load(open(os.path.join(COMPAT, "expected.json")))
cells = expected["cells"]  # by "family.mix"
ctx = expected.get("ctx", 256)


def run_args(cell, extra=()):
    run = cell["runs"][0]
    n = len(run["ids"])
    return ["run", "-m", os.path.join(COMPAT, cell["file"]), "--prompt-ids", " ".join(map(str, run["prompt"])), "-n",
            str(n), "--temp", "0", "--print-ids", "--ignore-eos", "-c", str(ctx), "-t", "1", *extra]


# 1. Greedy ids against llama.cpp, split over 2 ranks (shared memory), on every family whose heads split.
for name in ["llama32.F16", "qwen3.F16", "mixtral.F16", "phi3.F16", "gemma2.F16", "gemma3.F16", "r1qwen.F16",
             "qwen3moe.F16", "llama32.Q4_0", "llama32.Q5_0", "llama32.IQ4_NL"]:
    cell = cells[name]
    r = mpirun(2, run_args(cell, ["--parallel", "tp=2"]))
    got = ids_of(r.stdout)
    check(r.returncode == 0 and got == cell["runs"][0]["ids"],
          f"tp=2 {name}: greedy ids equal llama.cpp's" + ("" if got == cell["runs"][0]["ids"] else
                                                           f" (got {got}, rc {r.returncode}: {r.stderr[-300:]})"))

# 2. Four ranks over TCP loopback (oversubscribed), KV heads replicated (4 query heads, 1 KV head).
cell = cells["llama32.F16"]
r = mpirun(4, run_args(cell, ["--parallel", "tp=4"]), TCP)
check(r.returncode == 0 and ids_of(r.stdout) == cell["runs"][0]["ids"],
      "tp=4 over TCP llama32.F16: greedy ids equal llama.cpp's" + ("" if r.returncode == 0 else r.stderr[-300:]))
check("tp=4, MPI" in r.stderr and "all-reduces" in r.stderr, "tp=4: rank 0 reports its all-reduce time")

# 2b. Expert parallelism: the experts dealt to 2 or 4 groups, alone and with the heads split in each group.
for split, n in [("ep=2", 2), ("tp=2,ep=2", 4), ("ep=4", 4)]:
    for name in ["qwen3moe.F16", "mixtral.F16"]:
        cell = cells[name]
        r = mpirun(n, run_args(cell, ["--parallel", split]))
        check(r.returncode == 0 and ids_of(r.stdout) == cell["runs"][0]["ids"],
              f"{split} {name}: greedy ids equal llama.cpp's" + ("" if r.returncode == 0 else r.stderr[-300:]))
# 2b, summed by all-to-all instead (each rank sends only the rows its experts computed to the rows'
# owner, then an all-gather): the same ids, with and without overlap, over shared memory and TCP.
A2A = ["--parallel-expert-sum", "all-to-all"]
for split, n, extra, transport in [("ep=2", 2, [], ()), ("tp=2,ep=2", 4, [], ()), ("ep=4", 4, [], TCP),
                                   ("ep=2", 2, ["--parallel-no-overlap"], ())]:
    for name in ["qwen3moe.F16", "mixtral.F16"]:
        cell = cells[name]
        r = mpirun(n, run_args(cell, ["--parallel", split, *A2A, *extra]), transport)
        check(r.returncode == 0 and ids_of(r.stdout) == cell["runs"][0]["ids"] and "expert sums by all-to-all" in r.stderr,
              f"{split} {' '.join(extra)} {name}, experts summed by all-to-all{' over TCP' if transport else ''}: "
              "greedy ids equal llama.cpp's" + ("" if r.returncode == 0 else r.stderr[-300:]))
r = mpirun(2, run_args(cells["qwen3moe.F16"], ["--parallel", "tp=2", *A2A]))
check(r.returncode != 0 and "needs expert parallelism" in r.stderr, "--parallel-expert-sum without ep: refused, by name")
with tempfile.TemporaryDirectory() as tmp:
    # Qwen2-MoE's gated shared expert (runs in expert group 0 only) has no llama.cpp file here: one process is the reference.
    moe = os.path.join(tmp, "qwen2moe.gguf")
    subprocess.run([KESTREL, "synth", "--arch", "qwen2moe", "--preset", "tiny", "-o", moe], check=True, capture_output=True)
    args = ["run", "-m", moe, "-p", "hello world", "-n", "30", "--temp", "0", "--ignore-eos", "--print-ids", "-t", "1"]
    alone = ids_of(subprocess.run([KESTREL, *args], capture_output=True, text=True, errors="replace", env=ENV).stdout)
    for split, n in [("ep=2", 2), ("tp=2,ep=2", 4)]:
        r = mpirun(n, args + ["--parallel", split])
        check(alone is not None and ids_of(r.stdout) == alone, f"{split} qwen2moe synth (shared expert): ids equal one process's")
        r = mpirun(n, args + ["--parallel", split, *A2A])
        check(alone is not None and ids_of(r.stdout) == alone,
              f"{split} qwen2moe synth (shared expert), summed by all-to-all: ids equal one process's")
    # auto (the default) takes the all-to-all for a blocking sum of 64 KiB and more: 300 rows of 64 floats.
    long = ["run", "-m", moe, "--prompt-ids", " ".join(str(3 + i) for i in range(300)), "-c", "512", "-n", "8",
            "--temp", "0", "--ignore-eos", "--print-ids", "-t", "1"]
    alone = ids_of(subprocess.run([KESTREL, *long], capture_output=True, text=True, errors="replace", env=ENV).stdout)
    r = mpirun(2, long + ["--parallel", "ep=2", "--parallel-no-overlap"])
    check(alone is not None and ids_of(r.stdout) == alone and "expert sums by all-to-all: 2 exchanges" in r.stderr,
          "ep=2 auto, a 300-token blocking prefill: its 2 MoE sums by all-to-all, the decode's by all-reduce; ids equal "
          "one process's" + ("" if "all-to-all" in r.stderr else r.stderr[-300:]))

# 2b'. DeepSeek-V2-Lite- and V3-shaped files (MLA: query heads split, the latent cache whole on every
# rank; DeepSeekMoE with V3's sigmoid routing and selection bias; layer ranges) against llama.cpp's greedy ids.
for model in ["deepseek2-lite-tiny", "deepseek3-tiny"]:
    ref = os.path.join(SHARED, "reference", "llama.cpp", model + ".f32")
    meta = json.load(open(ref + ".json"))
    args = ["run", "-m", ref + ".gguf", "--prompt-ids", " ".join(map(str, meta["prompt_ids"])), "-n",
            str(len(meta["greedy_ids"])), "--temp", "0", "--print-ids", "--ignore-eos", "-t", "1"]
    for split, n, extra in [("tp=2", 2, []), ("tp=4", 4, []), ("ep=2", 2, []), ("tp=2,ep=2", 4, []), ("ep=2", 2, A2A),
                            ("pp=2", 2, []), ("pp=3", 3, []), ("tp=2,pp=2", 4, []), ("ep=2,pp=2", 4, [])]:
        r = mpirun(n, args + ["--parallel", split, *extra])
        check(r.returncode == 0 and ids_of(r.stdout) == meta["greedy_ids"],
              f"{split} {' '.join(extra)} {model}: greedy ids equal llama.cpp's" + ("" if r.returncode == 0 else r.stderr[-300:]))
    if model == "deepseek2-lite-tiny":  # 3 layers
        r = mpirun(4, args + ["--parallel", "pp=4"])
        check(r.returncode != 0 and "the model has only 3 layers" in r.stderr, "pp=4 deepseek2 (3 layers): refused, by name")

# 2b''. DeepSeek-V3.2 and GLM-5 (sparse attention: every rank scores with the whole indexer and picks the
# same positions; the query heads split), DeepSeek-V4 (its streams and compressors whole on every rank,
# the heads and output groups split; pipeline stages pass all 4 streams), gpt-oss (sinks split with the
# heads, the output and down biases added by one rank), Mistral 3, GLM-4.5 MoE and Llama 4 on the files synth
# writes, against
# llama.cpp's ids recorded in tests/reference/synth_cells.json.
synth_cells = json.load(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference", "synth_cells.json")))
with tempfile.TemporaryDirectory() as tmp:
    for cell in [c for c in synth_cells["cells"]
                 if c["name"] in ("deepseek32-tiny.f32", "glm-dsa-tiny.f32", "deepseek4-tiny.f32", "gpt-oss-tiny.f32",
                                  "mistral3-tiny.f32", "glm4moe-tiny.f32", "llama4-tiny-seed2.f32",
                                  "gemma4-tiny.f32", "gemma4-tiny-moe.f32")]:
        path = os.path.join(tmp, cell["name"] + ".gguf")
        subprocess.run([KESTREL, "synth", *cell["synth"], "-o", path], check=True, capture_output=True, env=ENV)
        args = ["run", "-m", path, "--prompt-ids", " ".join(map(str, cell["prompt"])), "-n", str(len(cell["ids"])),
                "--temp", "0", "--print-ids", "--ignore-eos", "-t", "1"]
        dense = cell["name"].startswith(("mistral3", "gemma4-tiny."))  # no experts: ep is refused
        for split, n in [("tp=2", 2), ("pp=2", 2)] + ([] if dense else [("ep=2", 2), ("tp=2,ep=2", 4)]):
            r = mpirun(n, args + ["--parallel", split])
            check(r.returncode == 0 and ids_of(r.stdout) == cell["ids"],
                  f"{split} {cell['name']}: greedy ids equal llama.cpp's" + ("" if r.returncode == 0 else r.stderr[-300:]))
        if cell["name"].startswith("deepseek4"):  # 4 layers; 2 output groups
            r = mpirun(4, args + ["--parallel", "pp=4"])
            check(r.returncode == 0 and ids_of(r.stdout) == cell["ids"],
                  "pp=4 deepseek4-tiny: greedy ids equal llama.cpp's" + ("" if r.returncode == 0 else r.stderr[-300:]))
            r = mpirun(4, args + ["--parallel", "tp=4"])
            check(r.returncode != 0 and "2 attention output groups do not split evenly" in r.stderr,
                  "tp=4 deepseek4-tiny (2 output groups): refused, by name")
        if cell["name"].startswith("llama4"):  # 4 layers: chunked x3 and the RoPE-free one, each a stage
            r = mpirun(4, args + ["--parallel", "pp=4"])
            check(r.returncode == 0 and ids_of(r.stdout) == cell["ids"],
                  "pp=4 llama4-tiny: greedy ids equal llama.cpp's" + ("" if r.returncode == 0 else r.stderr[-300:]))
        if cell["name"] == "gemma4-tiny.f32":
            # Sliding layers' 2 KV heads and full layers' 1 copied over 4 ranks; layers 9-11 read layers 7 and 8's
            # caches, which a split in 4 stages would leave on another stage: refused, by name.
            r = mpirun(4, args + ["--parallel", "tp=4"])
            check(r.returncode == 0 and ids_of(r.stdout) == cell["ids"],
                  "tp=4 gemma4-tiny: greedy ids equal llama.cpp's" + ("" if r.returncode == 0 else r.stderr[-300:]))
            r = mpirun(4, args + ["--parallel", "pp=4"])
            check(r.returncode != 0 and "reads layer 7's KV cache, which another stage holds" in r.stderr,
                  "pp=4 gemma4-tiny (shared caches across stages): refused, by name")
        if cell["name"].startswith("gpt-oss"):  # 2 KV heads copied over 4 ranks (sinks split, biases added once)
            for split in ("tp=4", "pp=4"):
                r = mpirun(4, args + ["--parallel", split])
                check(r.returncode == 0 and ids_of(r.stdout) == cell["ids"],
                      f"{split} gpt-oss-tiny: greedy ids equal llama.cpp's" + ("" if r.returncode == 0 else r.stderr[-300:]))
        if cell["name"].startswith("glm-dsa"):  # layers 1 and 3 reuse layers 0 and 2's selection
            r = mpirun(4, args + ["--parallel", "pp=4"])
            check(r.returncode != 0 and "cannot start at layer 1" in r.stderr,
                  "pp=4 glm-dsa: a stage starting at a shared-indexer layer is refused, by name")

# 2c. Pipeline parallelism: layer ranges per rank, micro-batches sent on point to point. It splits
# what tp cannot (Qwen2.5's 5 heads, k-quant blocks).
for name in ["llama32.F16", "llama32.Q4_K_M", "qwen25.F16", "qwen25.Q5_1", "gemma3.F16", "phi3.F16", "qwen3moe.F16"]:
    cell = cells[name]
    r = mpirun(2, run_args(cell, ["--parallel", "pp=2"]))
    check(r.returncode == 0 and ids_of(r.stdout) == cell["runs"][0]["ids"],
          f"pp=2 {name}: greedy ids equal llama.cpp's" + ("" if r.returncode == 0 else r.stderr[-300:]))
stories_args = ["run", "-m", os.path.join(SHARED, "models", "stories260K.gguf"), "-p", "Once upon a time", "-n", "40",
                "--temp", "0", "--ignore-eos", "--print-ids", "-t", "1"]
alone = ids_of(subprocess.run([KESTREL, *stories_args], capture_output=True, text=True, errors="replace", env=ENV).stdout)
for n in (3, 4):  # 5 layers: 2+2+1, 2+1+1+1
    r = mpirun(n, stories_args + ["--parallel", f"pp={n}"])
    check(alone is not None and ids_of(r.stdout) == alone, f"pp={n} stories260K (uneven layer ranges): ids equal one process's")
# Both: 2 stages of 2 tensor-parallel ranks each.
r = mpirun(4, stories_args + ["--parallel", "tp=2,pp=2"])
check(alone is not None and ids_of(r.stdout) == alone, "tp=2,pp=2 stories260K: ids equal one process's")
# Stages of expert groups: 2 stages x 2 groups (the MoE sums over the stage's ranks only), by either
# expert sum, and 2 x 2 x 2 with the heads split too (8 ranks, oversubscribed).
for name, n, split, extra in [("qwen3moe.F16", 4, "ep=2,pp=2", []), ("mixtral.F16", 4, "ep=2,pp=2", A2A),
                              ("qwen3moe.F16", 8, "tp=2,ep=2,pp=2", [])]:
    cell = cells[name]
    r = mpirun(n, run_args(cell, ["--parallel", split, *extra]))
    check(r.returncode == 0 and ids_of(r.stdout) == cell["runs"][0]["ids"],
          f"{split} {' '.join(extra)} {name}: greedy ids equal llama.cpp's" + ("" if r.returncode == 0 else r.stderr[-300:]))
for name in ["llama32.F16", "qwen3.F16"]:
    cell = cells[name]
    r = mpirun(4, run_args(cell, ["--parallel", "tp=2,pp=2"]))
    check(r.returncode == 0 and ids_of(r.stdout) == cell["runs"][0]["ids"],
          f"tp=2,pp=2 {name}: greedy ids equal llama.cpp's" + ("" if r.returncode == 0 else r.stderr[-300:]))

# 2d. Overlap: a prefill's rows in two halves, one's all-reduce in flight while the other computes
# (default), against one blocking all-reduce per sum: the same ids; each rank's profile has the
# transfers on their own track and profile-report gives the overlapped fraction.
with tempfile.TemporaryDirectory() as tmp:
    for name in ["llama32.F16", "qwen3moe.F16"]:
        cell = cells[name]
        r = mpirun(2, run_args(cell, ["--parallel", "tp=2", "--parallel-no-overlap"]))
        check(r.returncode == 0 and ids_of(r.stdout) == cell["runs"][0]["ids"] and "0 of them overlapped" in r.stderr,
              f"tp=2 {name} without overlap: greedy ids equal llama.cpp's")
    trace = os.path.join(tmp, "tp.json")
    r = mpirun(2, run_args(cells["llama32.F16"], ["--parallel", "tp=2", "--profile", trace]))
    overlapped = [l for l in r.stderr.splitlines() if "overlapped with compute" in l]
    check(r.returncode == 0 and overlapped and " 0 of them overlapped" not in overlapped[0],
          "tp=2: the prefill's all-reduces overlap with compute: " + (overlapped[0] if overlapped else r.stderr[-200:]))
    rank1 = os.path.join(tmp, "tp.rank1.json")
    check(os.path.exists(trace) and os.path.exists(rank1), "--profile under tp=2: rank 0's trace and TRACE.rank1.json")
    if os.path.exists(rank1):
        doc = json.load(open(rank1))
        names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("ph") == "M"}
        comm = [e for e in doc["traceEvents"] if e.get("cat") == "communication"]
        check({"rank 1", "communication"} <= names and comm and all(e["pid"] == 2 and e["tid"] == 2 for e in comm),
              f"rank 1's trace: its own process (rank 1) with a communication track ({len(comm)} transfers)")
    rep = subprocess.run([KESTREL, "profile-report", trace], capture_output=True, text=True, errors="replace", env=ENV)
    check(rep.returncode == 0 and "overlapped fraction" in rep.stdout, "profile-report prints the overlapped fraction")

# 2e. The all-reduce benchmark: a row per size, the fit, the per-step table and the prediction for hosts.
stories = os.path.join(SHARED, "models", "stories260K.gguf")
r = mpirun(2, ["allreduce-bench", "-m", stories, "--rows", "1,4,16", "-r", "20", "--hosts", "2,4"])
rows = [l for l in r.stdout.splitlines()
        if l.startswith("| ") and not l.startswith("| ---") and not any(w in l for w in ("Gb/s", "rows", "hosts"))]
fit = [l for l in r.stdout.splitlines() if l.startswith("fit: alpha = ")]
hosts = [l for l in r.stdout.splitlines() if "Gb/s |" in l]
# The MoE table: per size the all-reduce and the all-to-all at 25/50/100% of rows, each with its bytes as a
# share of the all-reduce's (0.63x, 0.75x, 1.00x for 2 ranks and 64-float rows: (h * 65/64 + 1) / 2).
moe = [l for l in rows if "x) |" in l]
shares = [[c.split("(")[1].rstrip("x) ") for c in l.split("|")[3:6]] for l in moe]
check(r.returncode == 0 and len(rows) == 9 and len(moe) == 3 and fit and len(hosts) == 4 and
      all(s == ["0.63", "0.75", "1.01"] for s in shares),
      f"allreduce-bench -np 2: 3 sizes, 3 MoE rows, 3 step rows, a fit, 4 predictions ({len(rows)}, {shares}, {fit}, {len(hosts)})")
r = subprocess.run([KESTREL, "allreduce-bench", "-m", stories], capture_output=True, text=True, errors="replace", env=ENV)
check(r.returncode != 0 and "mpirun -np 2" in r.stderr, "allreduce-bench in one process: a clear error")

# 3. Logits equal the single-process run's (F16: the same products, summed in two halves).
with tempfile.TemporaryDirectory() as tmp:
    for name in ["llama32.F16", "qwen3moe.F16", "gemma2.F16"]:
        cell = cells[name]
        one, two = os.path.join(tmp, "one.bin"), os.path.join(tmp, "two.bin")
        a = subprocess.run([KESTREL, *run_args(cell, ["--dump-logits", one])], capture_output=True, text=True, errors="replace", env=ENV)
        b = mpirun(2, run_args(cell, ["--dump-logits", two, "--parallel", "tp=2"]))
        la, lb = read_f32(one), read_f32(two)
        worst = max(abs(x - y) for x, y in zip(la, lb)) if la and len(la) == len(lb) else float("inf")
        scale = max(abs(x) for x in la) if la else 0
        # Not bit-equal: each half of a row-parallel product is summed apart, and the activations are
        # rounded to the kernels' input precision after that; measured 4.5e-4 (llama32, qwen3moe) to
        # 1.8e-3 (gemma2, soft-capped) of the largest logit, with every greedy id equal.
        check(a.returncode == 0 and b.returncode == 0 and len(la) == len(lb) and worst <= 3e-3 * max(scale, 1),
              f"tp=2 {name}: {len(lb)} logits within {worst:.2e} of one process's (|logit| up to {scale:.1f})")

    # 4. perplexity and bench, split.
    text = os.path.join(tmp, "text.txt")
    with open(text, "w") as f:
        f.write("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " * 6)
    stories = os.path.join(SHARED, "models", "stories260K.gguf")
    ppl = ["perplexity", "-m", stories, "-f", text, "-c", "64", "-t", "1"]
    p1 = subprocess.run([KESTREL, *ppl], capture_output=True, text=True, errors="replace", env=ENV)
    p2 = mpirun(2, ppl + ["--parallel", "tp=2"])

    def ppl_of(out):
        for line in out.splitlines():
            if line.startswith("Final estimate: PPL = "):
                return float(line.split()[4])
        return None
    v1, v2 = ppl_of(p1.stdout), ppl_of(p2.stdout)
    check(v1 is not None and v2 is not None and abs(v1 - v2) <= 1e-3 * v1,
          f"perplexity tp=2 {v2} equals one process's {v1}")
    bench = mpirun(2, ["bench", "-m", stories, "-p", "16", "-n", "8", "-r", "1", "-t", "1", "-o", "jsonl",
                       "--parallel", "tp=2"])
    rows = [json.loads(line) for line in bench.stdout.splitlines() if line.startswith("{")]
    check(bench.returncode == 0 and len(rows) == 2 and all(r["avg_ts"] > 0 for r in rows),
          f"bench tp=2: rank 0 alone prints its two results ({len(rows)} rows, rc {bench.returncode})")

# 5. Splits that cannot be made, and jobs of the wrong size: errors naming the problem, every rank ends.
for n, args, want in [
    (3, run_args(cells["llama32.F16"], ["--parallel", "tp=2"]), "needs 2 ranks but this job has 3"),
    (4, run_args(cells["llama32.F16"], ["--parallel", "pp=4"]), "4 stages: the model has only 3 layers"),
    (2, run_args(cells["llama32.F16"], ["--parallel", "ep=2"]), "needs a mixture-of-experts model; llama is dense"),
    (3, run_args(cells["qwen3moe.F16"], ["--parallel", "ep=3"]), "expert parallelism over 3 groups: 8 experts do not split"),
    (2, run_args(cells["qwen25.F16"], ["--parallel", "tp=2"]), "5 attention heads do not split evenly"),
    (2, run_args(cells["llama32.Q6_K"], ["--parallel", "tp=2"]), "is not whole Q6_K blocks of 256 values"),
]:
    t0 = time.time()
    r = mpirun(n, args, timeout=60)
    check(r.returncode != 0 and want in r.stderr and time.time() - t0 < 30,
          f"-np {n} {' '.join(args[-2:])}: exits {r.returncode} saying '{want}'")
r = subprocess.run([KESTREL, *run_args(cells["llama32.F16"], ["--parallel", "tp=2"])], capture_output=True, text=True, errors="replace",
                   env=ENV, timeout=60)
check(r.returncode != 0 and "needs 2 ranks but this job has 1" in r.stderr, "--parallel without mpirun: a clear error")


# 6. Serving through rank 0, and a rank that hangs or dies mid-request.
def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def post(port, body, timeout=60):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")
    except OSError as e:
        return None, str(e)


def rank_pid(job, rank):
    """The pid of `rank` among the job's processes (mpirun sets OMPI_COMM_WORLD_RANK in each one's environment)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            cmd = open(f"/proc/{pid}/cmdline", "rb").read()
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in env and job.encode() in cmd:
            return int(pid)
    return None


def serve(model, timeout_s, extra=(), split="tp=2", n=2, args_after=()):
    port = free_port()
    args = ["serve", "-m", model, "--port", str(port), "-t", "1", "--parallel", split, "--parallel-timeout",
            str(timeout_s), *args_after]
    proc = subprocess.Popen(["mpirun", "-np", str(n), *extra, KESTREL, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", env=ENV)
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=1)  # 503 (an OSError) while loading
            return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the {split} server did not come up: {proc.communicate()[0][-2000:]}")


stories = os.path.join(SHARED, "models", "stories260K.gguf")
proc, port = serve(stories, 5)
status, body = post(port, {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0})
alone = subprocess.run([KESTREL, "run", "-m", stories, "-p", "Once upon a time", "-n", "40", "--temp", "0", "-t", "1"],
                       capture_output=True, text=True, errors="replace", env=ENV).stdout
check(status == 200 and "Once upon a time" + body["choices"][0]["text"] == alone.strip(),
      f"serve tp=2: a greedy completion equals one process's `run` ({status})")
proc.send_signal(signal.SIGTERM)  # to mpirun, which forwards it (and itself exits 1, being signalled)
try:
    out, _ = proc.communicate(timeout=30)
    check("[kestrel] stopped" in out and rank_pid(f"--port\0{port}", 1) is None,
          "serve tp=2: SIGTERM drains rank 0 and every rank ends")
except subprocess.TimeoutExpired:
    proc.kill()
    check(False, "serve tp=2: SIGTERM stops every rank within 30 s")



def concurrent_ids(port, jobs):
    """Greedy completions of token-id prompts, all at once: each one's generated ids (None on an error)."""
    import concurrent.futures

    def one(job):
        prompt, n = job
        status, body = post(port, {"prompt": prompt, "max_tokens": n, "temperature": 0, "ignore_eos": True,
                                   "logprobs": 0, "return_tokens_as_token_ids": True}, timeout=120)
        if status != 200:
            return None
        return [int(t.split(":")[1]) for t in body["choices"][0]["logprobs"]["tokens"]]
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as ex:
        return list(ex.map(one, jobs))


def metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):  # (series carry the model's label)
            return float(line.split()[-1])
    return None


# 3b. Pipelining across steps (pp): rank 0 starts the next step over other requests while this one is in
# the later stages. Six concurrent requests (both compat prompts, ending at different steps) must each
# generate llama.cpp's ids, with steps actually started while another was in flight — and none with
# --parallel-no-step-pipelining.
def compat_case(name):
    cell = cells[name]
    return name, os.path.join(COMPAT, cell["file"]), [(r["prompt"], r["ids"]) for r in cell["runs"]], ["-c", str(ctx)]


def llama_cpp_case(model):
    ref = os.path.join(SHARED, "reference", "llama.cpp", model + ".f32")
    meta = json.load(open(ref + ".json"))
    return model, ref + ".gguf", [(meta["prompt_ids"], meta["greedy_ids"])], []


for (name, path, runs, ctx_args), split, n, extra, after in [
        (compat_case("llama32.F16"), "pp=2", 2, [], []),
        (compat_case("llama32.F16"), "pp=2", 2, [], ["--parallel-no-step-pipelining"]),
        (compat_case("gemma3.F16"), "pp=3", 3, TCP, []),
        (compat_case("qwen3.F16"), "tp=2,pp=2", 4, [], []),
        (llama_cpp_case("deepseek2-lite-tiny"), "pp=2", 2, [], []),
        (llama_cpp_case("deepseek3-tiny"), "ep=2,pp=2", 4, [], [])]:
    # Six requests: the prompts in turn, each pair 5 tokens shorter than the pair before (they end at different steps).
    jobs = [(runs[i % len(runs)][0], len(runs[i % len(runs)][1]) - (i // 2) * 5) for i in range(6)]
    want = [runs[i % len(runs)][1][:m] for i, (_, m) in enumerate(jobs)]
    proc, port = serve(path, 20, extra, split, n, [*ctx_args, *after])
    got = concurrent_ids(port, jobs)
    pipelined = metric(port, "kestrel_pipelined_steps_total")
    label = f"serve {split} {' '.join(after)} {name}{' (TCP)' if extra else ''}"
    check(got == want, f"{label}: 6 concurrent greedy completions equal llama.cpp's ids" +
          ("" if got == want else f" (got {got}, want {want})"))
    if after:
        check(pipelined == 0, f"{label}: no step started while another was in flight ({pipelined})")
    else:
        check(pipelined is not None and pipelined >= 10, f"{label}: steps started while another was in flight ({pipelined})")
    proc.send_signal(signal.SIGTERM)
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        check(False, f"{label}: SIGTERM stops every rank within 30 s")
r = subprocess.run([KESTREL, "run", "-m", stories, "-p", "x", "-n", "1", "--parallel-no-step-pipelining"],
                   capture_output=True, text=True, errors="replace", env=ENV)
check(r.returncode != 0 and "needs --parallel with pp" in r.stderr, "--parallel-no-step-pipelining without pp: refused")
r = mpirun(2, ["run", "-m", stories, "-p", "x", "-n", "1", "--parallel", "tp=2", "--parallel-no-step-pipelining"])
check(r.returncode != 0 and "has no pp" in r.stderr, "--parallel-no-step-pipelining with tp only: refused")

def ends_non_zero(proc, label):
    try:
        proc.wait(timeout=30)
        check(proc.returncode != 0, f"{label}: the job ends non-zero ({proc.returncode})")
    except subprocess.TimeoutExpired:
        proc.kill()
        check(False, f"{label}: the job ends within 30 s")


with tempfile.TemporaryDirectory() as tmp:
    # A model slow enough to be mid-request when the rank goes (ctx 4096; thousands of tokens).
    mid = os.path.join(tmp, "mid.gguf")
    subprocess.run([KESTREL, "synth", "--arch", "llama", "--dim", "512", "--layers", "8", "--heads", "8", "--kv-heads",
                    "4", "--ffn", "1536", "--ctx", "4096", "--type", "q8_0", "-o", mid], check=True, capture_output=True)
    # SIGSTOP: a hung rank. SIGKILL: a dead one; mpirun then ends the job, so it is told to wait longer
    # than the collective timeout before killing rank 0 (docs/parallel.md).
    for sig, extra in [(signal.SIGSTOP, ()), (signal.SIGKILL, ("--mca", "odls_base_sigkill_timeout", "6"))]:
        proc, port = serve(mid, 2, extra)
        job = f"--port\0{port}"

        def kill_later():
            time.sleep(1.0)
            pid = rank_pid(job, 1)
            if pid:
                os.kill(pid, sig)
        import threading
        threading.Thread(target=kill_later).start()
        t0 = time.time()
        status, body = post(port, {"prompt": "hello", "max_tokens": 3500, "temperature": 0, "ignore_eos": True})
        answered = time.time() - t0
        message = body.get("error", {}).get("message", "") if isinstance(body, dict) else body
        check(status == 500 and "stopped answering" in message and answered < 15,
              f"serve tp=2, rank 1 {sig.name} mid-request: an error response after {answered:.1f} s ({status}: {message[:120]})")
        ends_non_zero(proc, f"serve tp=2, rank 1 {sig.name}")
        pid = rank_pid(job, 1)
        if pid:
            os.kill(pid, signal.SIGKILL)

    # The same under pp=2 with two steps in flight: rank 0 waits for the rows of both; each request gets the error.
    proc, port = serve(mid, 2, (), "pp=2")
    job = f"--port\0{port}"

    def stop_later():
        time.sleep(1.0)
        pid = rank_pid(job, 1)
        if pid:
            os.kill(pid, signal.SIGSTOP)
    threading.Thread(target=stop_later).start()
    import concurrent.futures
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        answers = list(ex.map(lambda p: post(port, {"prompt": p, "max_tokens": 3500, "temperature": 0, "ignore_eos": True}),
                              ["hello", "world"]))
    answered = time.time() - t0
    messages = [b.get("error", {}).get("message", "") if isinstance(b, dict) else b for _, b in answers]
    check(all(st == 500 for st, _ in answers) and all("stopped answering" in m for m in messages) and answered < 15,
          f"serve pp=2, rank 1 SIGSTOP with two steps in flight: both requests get an error response after "
          f"{answered:.1f} s ({[st for st, _ in answers]}: {messages[0][:120]})")
    ends_non_zero(proc, "serve pp=2, rank 1 SIGSTOP")
    pid = rank_pid(job, 1)
    if pid:
        os.kill(pid, signal.SIGKILL)

print(f"{len(failures)} failed" if failures else "all passed")
sys.exit(1 if failures else 0)
