#!/usr/bin/env python3
"""LiteLLM (pinned in tests/clients/requirements.txt), the gateway teams put in front of model servers, against
`kestrel serve` through its three providers: `openai/` (chat, streaming with usage in the last chunk, forced
tool calls whole and streamed, text completion, embeddings), `anthropic/` (Messages: text, streaming, tools) and
`ollama/` / `ollama_chat/` (generate, chat, embeddings). Each answer is held to the one the server gives the same
request sent directly (greedy, so equal), and a refused request surfaces as LiteLLM's own exception carrying the
server's message.

usage: litellm_test.py KESTREL MODEL"""
import json
import os
import sys

os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # no fetch of the price list from GitHub
os.environ.setdefault("LITELLM_LOG", "ERROR")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Server, run_checks  # noqa: E402

import litellm  # noqa: E402

KESTREL, MODEL = sys.argv[1], sys.argv[2]
litellm.telemetry = False
litellm.num_retries = 0
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Lyon"]}},
                   "required": ["city"]}}}]
ASK = [{"role": "user", "content": "Once upon a time"}]


def test(c):
    with Server(KESTREL, ["-m", MODEL, "-c", "1024", "-t", "2", "--pooling", "mean"]) as s:
        name = s.get("/v1/models")["data"][0]["id"]
        v1 = dict(api_base=s.base + "/v1", api_key="none")
        direct = s.post("/v1/chat/completions", {"model": name, "messages": ASK, "max_tokens": 12, "temperature": 0})
        want = direct["choices"][0]["message"]["content"]

        # openai/: chat, whole and streamed (usage in the last chunk when asked).
        r = litellm.completion(model=f"openai/{name}", messages=ASK, max_tokens=12, temperature=0, **v1)
        c.expect(r.choices[0].message.content == want, f"openai/ chat: {r.choices[0].message.content!r} == {want!r}")
        c.expect(r.usage.prompt_tokens == direct["usage"]["prompt_tokens"], "openai/ chat: the usage")
        chunks = list(litellm.completion(model=f"openai/{name}", messages=ASK, max_tokens=12, temperature=0,
                                         stream=True, stream_options={"include_usage": True}, **v1))
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        c.expect(text == want, f"openai/ stream: {text!r} == {want!r}")
        usage = [getattr(ch, "usage", None) for ch in chunks if getattr(ch, "usage", None)]
        c.expect(bool(usage) and usage[-1].completion_tokens == direct["usage"]["completion_tokens"],
                 f"openai/ stream: usage in the last chunk ({usage[-1] if usage else None})")

        # Forced tool calls, whole and streamed (deltas assembled by LiteLLM's own builder).
        r = litellm.completion(model=f"openai/{name}", messages=[{"role": "user", "content": "Weather in Paris?"}],
                               tools=TOOLS, tool_choice="required", max_tokens=300, temperature=0, **v1)
        calls = r.choices[0].message.tool_calls or []
        c.expect(len(calls) >= 1 and calls[0].function.name == "get_weather", f"openai/ tool call: {calls}")
        if calls:
            c.expect(json.loads(calls[0].function.arguments).get("city") in ("Paris", "Lyon"),
                     f"openai/ tool call arguments: {calls[0].function.arguments}")
            c.expect(r.choices[0].finish_reason == "tool_calls", f"finish_reason {r.choices[0].finish_reason}")
        chunks = list(litellm.completion(model=f"openai/{name}", messages=[{"role": "user", "content": "Weather in Paris?"}],
                                         tools=TOOLS, tool_choice="required", max_tokens=300, temperature=0,
                                         stream=True, **v1))
        built = litellm.stream_chunk_builder(chunks)
        scalls = built.choices[0].message.tool_calls or []
        c.expect(len(scalls) >= 1 and calls and scalls[0].function.arguments == calls[0].function.arguments,
                 f"openai/ streamed tool call assembled: {scalls}")
        # The tool's answer back, and the reply to it.
        if calls:
            back = litellm.completion(model=f"openai/{name}", tools=TOOLS, max_tokens=8, temperature=0, messages=[
                {"role": "user", "content": "Weather in Paris?"}, r.choices[0].message.model_dump(),
                {"role": "tool", "tool_call_id": calls[0].id, "content": "sunny"}], **v1)
            c.expect(back.choices[0].message.content is not None, "openai/ the tool's answer accepted")

        # Text completion and embeddings.
        direct_text = s.post("/v1/completions", {"model": name, "prompt": "Once upon a time", "max_tokens": 8,
                                                 "temperature": 0})["choices"][0]["text"]
        t = litellm.text_completion(model=f"openai/{name}", prompt="Once upon a time", max_tokens=8, temperature=0, **v1)
        c.expect(t.choices[0].text == direct_text, f"openai/ text completion: {t.choices[0].text!r} == {direct_text!r}")
        want_vec = s.post("/v1/embeddings", {"model": name, "input": ["Once upon a time"]})["data"][0]["embedding"]
        e = litellm.embedding(model=f"openai/{name}", input=["Once upon a time"], **v1)
        got_vec = e.data[0]["embedding"]
        c.expect(len(got_vec) == len(want_vec) and max(abs(a - b) for a, b in zip(got_vec, want_vec)) < 1e-6,
                 "openai/ embedding equals the server's")

        # anthropic/: the Messages API (LiteLLM posts to {api_base}/v1/messages).
        direct_a = s.post("/v1/messages", {"model": name, "messages": ASK, "max_tokens": 12, "temperature": 0})
        want_a = direct_a["content"][0]["text"]
        r = litellm.completion(model=f"anthropic/{name}", messages=ASK, max_tokens=12, temperature=0, api_base=s.base,
                               api_key="none")
        c.expect(r.choices[0].message.content == want_a, f"anthropic/: {r.choices[0].message.content!r} == {want_a!r}")
        # Anthropic's input_tokens leave out what the prompt cache read; LiteLLM's prompt_tokens add it back.
        u = direct_a["usage"]
        c.expect(r.usage.prompt_tokens == u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"]
                 and r.usage.prompt_tokens_details.cached_tokens == u["cache_read_input_tokens"],
                 f"anthropic/: the usage ({r.usage} vs {direct_a['usage']})")
        chunks = list(litellm.completion(model=f"anthropic/{name}", messages=ASK, max_tokens=12, temperature=0, stream=True,
                                         api_base=s.base, api_key="none"))
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        c.expect(text == want_a, f"anthropic/ stream: {text!r} == {want_a!r}")
        r = litellm.completion(model=f"anthropic/{name}", messages=[{"role": "user", "content": "Weather in Paris?"}],
                               tools=TOOLS, tool_choice="required", max_tokens=300, temperature=0, api_base=s.base,
                               api_key="none")
        acalls = r.choices[0].message.tool_calls or []
        c.expect(len(acalls) >= 1 and acalls[0].function.name == "get_weather", f"anthropic/ tool call: {acalls}")

        # ollama/ (/api/generate) and ollama_chat/ (/api/chat), and Ollama's /api/embed.
        oname = s.get("/api/tags")["models"][0]["name"]
        direct_g = s.post("/api/generate", {"model": oname, "prompt": "Once upon a time", "stream": False,
                                            "options": {"num_predict": 8, "temperature": 0}})["response"]
        r = litellm.completion(model=f"ollama/{oname}", messages=[{"role": "user", "content": "Once upon a time"}],
                               max_tokens=8, temperature=0, api_base=s.base)
        c.expect(r.choices[0].message.content == direct_g, f"ollama/: {r.choices[0].message.content!r} == {direct_g!r}")
        direct_c = s.post("/api/chat", {"model": oname, "messages": ASK, "stream": False,
                                        "options": {"num_predict": 8, "temperature": 0}})["message"]["content"]
        r = litellm.completion(model=f"ollama_chat/{oname}", messages=ASK, max_tokens=8, temperature=0, api_base=s.base)
        c.expect(r.choices[0].message.content == direct_c, f"ollama_chat/: {r.choices[0].message.content!r} == {direct_c!r}")
        chunks = list(litellm.completion(model=f"ollama_chat/{oname}", messages=ASK, max_tokens=8, temperature=0,
                                         stream=True, api_base=s.base))
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        c.expect(text == direct_c, f"ollama_chat/ stream: {text!r} == {direct_c!r}")
        e = litellm.embedding(model=f"ollama/{oname}", input=["Once upon a time"], api_base=s.base)
        got_vec = e.data[0]["embedding"]
        c.expect(len(got_vec) == len(want_vec) and max(abs(a - b) for a, b in zip(got_vec, want_vec)) < 1e-5,
                 "ollama/ embedding equals the server's")

        # Refusals surface as LiteLLM's exceptions with the server's words.
        try:
            litellm.completion(model="openai/no-such-model", messages=ASK, max_tokens=4, **v1)
            c.expect(False, "an unknown model is refused")
        except litellm.NotFoundError as e:
            c.expect("no-such-model" in str(e), f"the 404 names the model: {e}")
        try:
            litellm.completion(model=f"openai/{name}", messages=ASK, max_tokens=4, top_p=5, **v1)
            c.expect(False, "top_p 5 is refused")
        except litellm.BadRequestError as e:
            c.expect("top_p" in str(e), f"the 400 names top_p: {e}")
        c.expect(s.alive(), "the server is alive after the run")


run_checks(test)
