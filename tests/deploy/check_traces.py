#!/usr/bin/env python3
"""OTLP traces from `kestrel serve` into a real OpenTelemetry Collector (its file exporter writes what it got).

- a streamed chat request with the client's W3C traceparent: one SERVER span "chat <model>" in the client's
  trace under the client's span, with the gen_ai request/response/usage attributes and latencies; under it
  queue, prefill (a child per prefill step: 75 prompt tokens at --prefill-chunk 16 are 5 steps) and decode,
  each inside its parent's time;
- a request without traceparent starts a trace of its own; one whose traceparent is not sampled is not
  recorded; a refused request (400) is a SERVER span with an error status and its HTTP status;
- a dead collector: requests are served as fast as before, and the spans that could not be sent are counted
  in kestrel_otlp_spans_dropped_total{reason="export_failed"}.

Usage: check_traces.py KESTREL_BINARY MODEL SOURCE_DIR
"""
import json
import pathlib
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from common import fail, free_port  # noqa: E402

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"



def post(base, path, body, headers=None):
    req = urllib.request.Request(base + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def spans_in(path):
    out = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            resource = {a["key"]: a["value"] for a in rs["resource"]["attributes"]}
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    s["attrs"] = {a["key"]: next(iter(a["value"].values())) for a in s.get("attributes", [])}
                    s["resource"] = resource
                    out.append(s)
    return out


def main():
    kestrel, model, source = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
    collector = source / ".tools" / "otelcol" / "build" / "otelcol-kestrel"
    if not collector.exists():
        print(f"{collector} is missing: run scripts/setup.sh (it builds the OpenTelemetry Collector)")
        return 1
    problems = []

    def check(ok, what):
        if not ok:
            problems.append(what)

    with tempfile.TemporaryDirectory(prefix="kestrel-traces-") as tmp:
        tmp = pathlib.Path(tmp)
        otlp_port, port = free_port(), free_port()
        spans_file = tmp / "spans.json"
        (tmp / "collector.yaml").write_text(f"""
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{otlp_port}
exporters:
  file:
    path: {spans_file}
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
""")
        col = subprocess.Popen([str(collector), "--config", str(tmp / "collector.yaml")], stdout=subprocess.DEVNULL,
                               stderr=open(tmp / "collector.log", "w"))
        for _ in range(100):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", otlp_port)) == 0:
                    break
            time.sleep(0.1)
        server = subprocess.Popen([kestrel, "serve", "-m", model, "--port", str(port), "-t", "2", "-c", "512",
                                   "--prefill-chunk", "16", "--otlp-endpoint", f"http://127.0.0.1:{otlp_port}"],
                                  stdout=subprocess.DEVNULL, stderr=open(tmp / "serve.log", "w"))
        base = f"http://127.0.0.1:{port}"
        try:
            for _ in range(300):
                try:
                    if urllib.request.urlopen(base + "/ready", timeout=1).status == 200:
                        break
                except OSError:
                    time.sleep(0.1)
            prompt = ("The dog ran to the park and saw a big red ball near the tree, and he was very happy about it")
            status, body = post(base, "/v1/chat/completions",
                                {"messages": [{"role": "user", "content": prompt}], "max_tokens": 8, "stream": True,
                                 "temperature": 0.7, "top_p": 0.9},
                                {"traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"})
            check(status == 200 and "[DONE]" in body, f"the streamed chat failed: {status} {body[:300]}")
            post(base, "/v1/completions", {"prompt": "Once", "max_tokens": 2})  # no traceparent: a trace of its own
            post(base, "/v1/completions", {"prompt": "Not sampled", "max_tokens": 2},
                 {"traceparent": "00-11111111111111111111111111111111-2222222222222222-00"})
            status, _ = post(base, "/v1/chat/completions", {"messages": [], "max_tokens": 2})
            check(status == 400, f"the empty chat was not refused ({status})")
            spans = []
            for _ in range(100):  # the exporter sends every second
                spans = spans_in(spans_file)
                if len([s for s in spans if s["kind"] == 2]) >= 3:
                    break
                time.sleep(0.1)
            servers = [s for s in spans if s["kind"] == 2]
            chat = [s for s in servers if s["traceId"] == TRACE_ID]
            check(len(chat) == 1, f"{len(chat)} server spans in the client's trace: {[s['name'] for s in servers]}")
            if chat:
                c = chat[0]
                a = c["attrs"]
                check(c["name"] == "chat stories260K.gguf", f"server span name {c['name']}")
                check(c.get("parentSpanId") == CLIENT_SPAN, f"server span parent {c.get('parentSpanId')}")
                expect = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "kestrel",
                          "gen_ai.request.model": "stories260K.gguf", "gen_ai.response.model": "stories260K.gguf",
                          "gen_ai.request.max_tokens": "8", "gen_ai.usage.output_tokens": "8",
                          "http.request.method": "POST", "url.path": "/v1/chat/completions",
                          "http.response.status_code": "200"}
                for k, v in expect.items():
                    check(a.get(k) == v, f"server span {k} = {a.get(k)!r}, expected {v!r}")
                check(abs(a.get("gen_ai.request.temperature", 0) - 0.7) < 1e-6, f"temperature {a.get('gen_ai.request.temperature')}")
                check(abs(a.get("gen_ai.request.top_p", 0) - 0.9) < 1e-6, f"top_p {a.get('gen_ai.request.top_p')}")
                check(re.fullmatch(r"chatcmpl-\d+", a.get("gen_ai.response.id", "")) is not None,
                      f"response id {a.get('gen_ai.response.id')}")
                reasons = [v["stringValue"] for v in a.get("gen_ai.response.finish_reasons", {}).get("values", [])]
                check(reasons == ["length"], f"finish reasons {reasons}")
                check(int(a.get("gen_ai.usage.input_tokens", 0)) > 60, f"input tokens {a.get('gen_ai.usage.input_tokens')}")
                check("gen_ai.usage.cache_read.input_tokens" in a, "no cached-token count")
                for k in ("gen_ai.latency.time_in_queue", "gen_ai.latency.time_to_first_token", "gen_ai.latency.e2e"):
                    check(isinstance(a.get(k), float) and a[k] >= 0, f"{k} = {a.get(k)}")
                check(c["resource"].get("service.name") == {"stringValue": "kestrel"}, f"resource {c['resource']}")
                kids = {s["name"]: s for s in spans if s.get("parentSpanId") == c["spanId"]}
                check(sorted(kids) == ["decode", "prefill", "queue"], f"the server span's children: {sorted(kids)}")
                inside = lambda s, p: int(p["startTimeUnixNano"]) <= int(s["startTimeUnixNano"]) <= \
                    int(s["endTimeUnixNano"]) <= int(p["endTimeUnixNano"])
                for k in kids.values():
                    check(inside(k, c), f"{k['name']} is not inside the server span's time")
                if "prefill" in kids:
                    steps = [s for s in spans if s.get("parentSpanId") == kids["prefill"]["spanId"]]
                    n = int(kids["prefill"]["attrs"].get("kestrel.prefill.steps", 0))
                    prompt_tokens = int(a.get("gen_ai.usage.input_tokens", 0))
                    check(n == len(steps) == -(-prompt_tokens // 16),
                          f"{len(steps)} prefill step spans, kestrel.prefill.steps {n}, for {prompt_tokens} prompt "
                          "tokens in chunks of 16")
                    for s in steps:
                        check(inside(s, kids["prefill"]), "a prefill step is not inside the prefill span")
                if "decode" in kids:
                    check(kids["decode"]["attrs"].get("gen_ai.usage.output_tokens") == "8", "decode's output tokens")
            own = [s for s in servers if s["name"] == "text_completion stories260K.gguf"]
            check(len(own) == 1 and "parentSpanId" not in own[0] and own[0]["traceId"] != TRACE_ID,
                  f"the request without traceparent: {[(s['traceId'], s.get('parentSpanId')) for s in own]}")
            check(not any(s["traceId"] == "11111111111111111111111111111111" for s in spans),
                  "a span of the unsampled trace was recorded")
            refused = [s for s in servers if s["attrs"].get("http.response.status_code") == "400"]
            check(len(refused) == 1 and refused[0].get("status", {}).get("code") in (2, "STATUS_CODE_ERROR")
                  and "must be a non-empty array" in refused[0].get("status", {}).get("message", "")
                  and refused[0]["attrs"].get("error.type") == "400",
                  f"the refused request's span: {[ (s['name'], s.get('status'), s['attrs']) for s in refused]}")
            metrics = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
            exported = re.search(r'^kestrel_otlp_spans_exported_total\{[^}]*\} (\S+)$', metrics, re.M)
            check(exported and float(exported.group(1)) >= len(spans), f"exported count {exported and exported.group(1)}")

            # The collector dies: requests go on at their speed, and the lost spans are counted.
            col.kill()
            col.wait()
            t0 = time.time()
            for _ in range(3):
                status, _ = post(base, "/v1/completions", {"prompt": "Once", "max_tokens": 4})
                check(status == 200, f"a request failed with the collector gone: {status}")
            elapsed = time.time() - t0
            check(elapsed < 2.0, f"3 small requests took {elapsed:.2f} s with the collector gone")
            dropped = None
            for _ in range(60):
                metrics = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
                m = re.search(r'^kestrel_otlp_spans_dropped_total\{[^}]*reason="export_failed"[^}]*\} (\S+)$', metrics, re.M)
                dropped = float(m.group(1)) if m else None
                if dropped:
                    break
                time.sleep(0.1)
            check(dropped and dropped >= 3, f"spans dropped for the dead collector: {dropped}")
            print(f"{len(spans)} spans received; with the collector gone, 3 requests in {elapsed:.2f} s, "
                  f"{dropped} spans dropped")
        finally:
            server.terminate()
            server.wait(timeout=30)
            if col.poll() is None:
                col.kill()
        if problems:
            print((tmp / "serve.log").read_text()[-2000:])
    return fail(problems)


if __name__ == "__main__":
    sys.exit(main())
