#!/usr/bin/env python3
"""The container image, built by scripts/container.sh and run by a real container runtime.

Builds the image from this build's binary, reads its configuration from the docker archive (non-root user,
the `kestrel serve` entrypoint with flags from KESTREL_* variables, port, volume, HEALTHCHECK), converts it to
an OCI layout (skopeo), unpacks it into a runtime bundle (umoci) and runs it under runc with a read-only root
filesystem, the models directory mounted read-only and the host's network: /ready must answer 200, a chat
request must be served from inside the container, the image's HEALTHCHECK command must pass when run in it,
the server must run as uid 10001, and SIGTERM must drain and stop it with status 0. A machine that cannot run
containers fails this test with the reason; it is not skipped.

Usage: check_container.py BUILD_DIR MODELS_DIR SOURCE_DIR
"""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from common import fail, free_port  # noqa: E402



def get(url, timeout=5):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return None, ""


def main():
    build, models, source = (pathlib.Path(a).resolve() for a in sys.argv[1:4])
    missing = [t for t in ("mmdebstrap", "buildah", "skopeo", "umoci", "runc") if not shutil.which(t)]
    if missing:
        print(f"cannot run containers here: {', '.join(missing)} missing (scripts/setup.sh installs them)")
        return 1
    if os.geteuid() != 0:
        print("cannot run containers here: the image is unpacked and run as root (runc, umoci), and this is uid "
              f"{os.geteuid()}")
        return 1
    problems = []
    with tempfile.TemporaryDirectory(prefix="kestrel-container-") as tmp:
        tmp = pathlib.Path(tmp)
        out = tmp / "image"
        t0 = time.time()
        r = subprocess.run([str(source / "scripts" / "container.sh"), str(build), str(out)], capture_output=True,
                           text=True)
        if r.returncode != 0:
            print(f"scripts/container.sh failed:\n{r.stdout}{r.stderr}")
            return 1
        print(r.stdout.strip())
        print(f"built in {time.time() - t0:.1f} s")

        # The image's configuration, as docker and podman read it.
        with tarfile.open(out / "kestrel.tar") as t:
            manifest = json.load(t.extractfile("manifest.json"))[0]
            config = json.load(t.extractfile(manifest["Config"]))["config"]
        expect = {
            "User": "10001:10001",
            "Entrypoint": ["/usr/local/bin/kestrel", "serve"],
            "ExposedPorts": {"8080/tcp": {}},
            "Volumes": {"/models": {}},
        }
        for k, v in expect.items():
            if config.get(k) != v:
                problems.append(f"image config {k} is {config.get(k)!r}, expected {v!r}")
        health = config.get("Healthcheck") or {}
        if health.get("Test") != ["CMD", "/usr/local/bin/kestrel", "probe", "--path", "/health"]:
            problems.append(f"image HEALTHCHECK is {health!r}")
        for e in ("KESTREL_HOST=0.0.0.0", "KESTREL_PORT=8080", "KESTREL_MODEL=/models/model.gguf"):
            if e not in config.get("Env", []):
                problems.append(f"image environment lacks {e}")

        # Into a runtime bundle, and run.
        subprocess.run(["skopeo", "copy", "-q", f"docker-archive:{out / 'kestrel.tar'}", f"oci:{tmp / 'layout'}:kestrel"],
                       check=True)
        subprocess.run(["umoci", "unpack", "--image", f"{tmp / 'layout'}:kestrel", str(tmp / "bundle")], check=True,
                       capture_output=True)
        cfg_path = tmp / "bundle" / "config.json"
        cfg = json.loads(cfg_path.read_text())
        port = free_port()
        cfg["linux"]["namespaces"] = [n for n in cfg["linux"]["namespaces"] if n["type"] != "network"]
        cfg["root"]["readonly"] = True
        cfg["process"]["terminal"] = False
        cfg["process"]["env"] = [e for e in cfg["process"]["env"] if not e.startswith(("KESTREL_PORT=", "KESTREL_MODEL="))]
        cfg["process"]["env"] += [f"KESTREL_PORT={port}", "KESTREL_MODEL=/models/stories260K.gguf",
                                  "KESTREL_CTX_SIZE=256", "KESTREL_THREADS=2"]
        cfg["mounts"] += [{"destination": "/models", "type": "bind", "source": str(models), "options": ["rbind", "ro"]},
                          {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                           "options": ["nosuid", "nodev", "mode=1777"]}]
        cfg_path.write_text(json.dumps(cfg))
        name = f"kestrel-test-{os.getpid()}"
        log = open(tmp / "container.log", "w")
        proc = subprocess.Popen(["runc", "run", "--bundle", str(tmp / "bundle"), name], stdout=log, stderr=log,
                                stdin=subprocess.DEVNULL)
        try:
            status, body = None, ""
            for _ in range(300):
                status, body = get(f"http://127.0.0.1:{port}/ready", timeout=2)
                if status == 200 or proc.poll() is not None:
                    break
                time.sleep(0.1)
            if status != 200:
                problems.append(f"the container never became ready ({status} {body}): "
                                f"{(tmp / 'container.log').read_text()[-2000:]}")
            else:
                req = urllib.request.Request(
                    f"http://127.0.0.1:{port}/v1/chat/completions",
                    json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}).encode(),
                    {"Content-Type": "application/json"})
                answer = json.load(urllib.request.urlopen(req, timeout=30))
                if answer["usage"]["completion_tokens"] != 8 or answer["model"] != "stories260K.gguf":
                    problems.append(f"the container's answer: {answer}")
                probe = subprocess.run(["runc", "exec", name, "/usr/local/bin/kestrel", "probe", "--path", "/health"],
                                       capture_output=True, text=True)
                if probe.returncode != 0 or not probe.stdout.startswith("200 "):
                    problems.append(f"the HEALTHCHECK command failed in the container: {probe.stdout}{probe.stderr}")
                state = json.loads(subprocess.run(["runc", "state", name], capture_output=True, text=True,
                                                  check=True).stdout)
                uid = next(line.split()[1] for line in open(f"/proc/{state['pid']}/status")
                           if line.startswith("Uid:"))
                if uid != "10001":
                    problems.append(f"the server runs as uid {uid}, not 10001")
            subprocess.run(["runc", "kill", name, "TERM"], capture_output=True)
            try:
                code = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                code = None
            text = (tmp / "container.log").read_text()
            if code != 0 or "draining" not in text or "stopped" not in text:
                problems.append(f"SIGTERM did not drain and stop the server (exit {code}): {text[-1500:]}")
        finally:
            if proc.poll() is None:
                subprocess.run(["runc", "kill", name, "KILL"], capture_output=True)
                proc.wait(timeout=10)
            subprocess.run(["runc", "delete", "--force", name], capture_output=True)
    return fail(problems)


if __name__ == "__main__":
    sys.exit(main())
