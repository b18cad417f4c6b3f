#!/usr/bin/env python3
"""The Vercel AI SDK (npm `ai` + `@ai-sdk/openai-compatible`, pinned in tests/e2e/openai_client/package.json)
against `kestrel serve`: tests/e2e/openai_client/ai_sdk.mjs reports what the SDK saw; here it is held to the
server's own answers to the same requests and to the schema.

usage: ai_sdk_test.py KESTREL MODEL"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Server, run_checks  # noqa: E402

KESTREL, MODEL = sys.argv[1], sys.argv[2]
CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e", "openai_client")


def test(c):
    with Server(KESTREL, ["-m", MODEL, "-c", "2048", "-t", "2"]) as s:
        name = s.get("/v1/models")["data"][0]["id"]
        out = subprocess.run(["node", os.path.join(CLIENT, "ai_sdk.mjs")], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "KESTREL_URL": s.base + "/v1", "KESTREL_MODEL": name})
        if not c.expect(out.returncode == 0, f"ai_sdk.mjs ran: {out.stderr[-2000:]}"):
            return
        seen = json.loads(out.stdout.strip().splitlines()[-1])
        print(json.dumps(seen, indent=1))
        chat = s.post("/v1/chat/completions", {"model": name, "messages": [{"role": "user", "content": "Once upon a time"}],
                                               "max_tokens": 12, "temperature": 0})
        text = chat["choices"][0]["message"]["content"]
        c.expect(seen["text"].get("text") == text, f"generateText: {seen['text']} vs {text!r}")
        c.expect(seen["text"].get("output") == chat["usage"]["completion_tokens"]
                 and seen["text"].get("input") == chat["usage"]["prompt_tokens"], "generateText: usage")
        c.expect(seen["text"].get("finish") == "length", f"generateText: finish {seen['text'].get('finish')}")
        # The SDK's completion model writes a chat as "user:\n...\n\nassistant:\n", stopping at "\nuser:".
        comp = s.post("/v1/completions", {"model": name, "prompt": "user:\nOnce upon a time\n\nassistant:\n",
                                          "max_tokens": 8, "temperature": 0, "stop": ["\nuser:"]})
        c.expect(seen["completion"].get("text") == comp["choices"][0]["text"], f"completion model: {seen['completion']}")
        c.expect(seen["stream"].get("text") == text and seen["stream"].get("parts", 0) > 1,
                 f"streamText: {seen['stream']} vs {text!r}")
        c.expect(seen["stream"].get("output") == chat["usage"]["completion_tokens"], "streamText: usage at the end")
        calls = seen["tool"].get("calls", [])
        c.expect(len(calls) == 1 and calls[0]["name"] == "get_weather" and calls[0]["input"].get("city") in ("Paris", "Lyon"),
                 f"tool call: {seen['tool']}")
        c.expect(seen["tool"].get("finish") == "tool-calls", f"tool call: finish {seen['tool'].get('finish')}")
        c.expect(seen["tool_stream"].get("calls") == calls and seen["tool_stream"].get("deltas", 0) >= 1,
                 f"streamed tool call: {seen['tool_stream']}")
        obj = seen["object"].get("object")
        c.expect(isinstance(obj, dict) and obj.get("name") in ("Lily", "Tom") and obj.get("age") in (3, 4, 5),
                 f"generateObject: {seen['object']}")
        c.expect(seen["refused"].get("status") == 400 and "top_p" in (seen["refused"].get("body") or ""),
                 f"a refusal reaches the SDK as an APICallError with the server's words: {seen['refused']}")
        c.expect(s.alive(), "the server is alive after the run")


run_checks(test)
