#!/usr/bin/env python3
"""LangChain's OpenAI chat model (langchain-openai, pinned in tests/clients/requirements.txt) against
`kestrel serve`: invoke, stream (usage on the last chunk), bind_tools with a forced call, and structured output
by its schema methods (json_schema, function_calling), each held to the server's own answer or to
the schema.

usage: langchain_test.py KESTREL MODEL"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Server, run_checks  # noqa: E402

from langchain_core.tools import tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402

KESTREL, MODEL = sys.argv[1], sys.argv[2]
ASK = "Once upon a time"


@tool
def get_weather(city: str) -> str:
    """Weather of a city."""
    return "sunny"


STORY = {"title": "Story", "description": "A story's hero.", "type": "object",
         "properties": {"name": {"type": "string", "enum": ["Lily", "Tom"]},
                        "age": {"type": "integer", "enum": [3, 4, 5]}},
         "required": ["name", "age"], "additionalProperties": False}


def valid_story(x):
    return isinstance(x, dict) and x.get("name") in ("Lily", "Tom") and x.get("age") in (3, 4, 5) and len(x) == 2


def test(c):
    with Server(KESTREL, ["-m", MODEL, "-c", "2048", "-t", "2"]) as s:
        name = s.get("/v1/models")["data"][0]["id"]
        llm = ChatOpenAI(model=name, base_url=s.base + "/v1", api_key="none", temperature=0, max_tokens=12,
                         max_retries=0, stream_usage=True)
        want = s.post("/v1/chat/completions", {"model": name, "messages": [{"role": "user", "content": ASK}],
                                               "max_tokens": 12, "temperature": 0})
        text = want["choices"][0]["message"]["content"]

        msg = llm.invoke(ASK)
        c.expect(msg.content == text, f"invoke: {msg.content!r} == {text!r}")
        c.expect(msg.usage_metadata and msg.usage_metadata["output_tokens"] == want["usage"]["completion_tokens"],
                 f"invoke: usage {msg.usage_metadata}")
        chunks = list(llm.stream(ASK))
        joined = "".join(ch.content for ch in chunks if isinstance(ch.content, str))
        c.expect(joined == text, f"stream: {joined!r} == {text!r}")
        total = None
        for ch in chunks:
            total = ch if total is None else total + ch
        c.expect(total.usage_metadata and total.usage_metadata["output_tokens"] == want["usage"]["completion_tokens"],
                 f"stream: usage {total.usage_metadata}")

        tooled = ChatOpenAI(model=name, base_url=s.base + "/v1", api_key="none", temperature=0, max_tokens=300,
                            max_retries=0).bind_tools([get_weather], tool_choice="any", parallel_tool_calls=False)
        m = tooled.invoke("Weather in Paris?")
        c.expect(len(m.tool_calls) == 1 and m.tool_calls[0]["name"] == "get_weather"
                 and isinstance(m.tool_calls[0]["args"].get("city"), str), f"bind_tools: {m.tool_calls}")
        streamed = None
        for ch in tooled.stream("Weather in Paris?"):
            streamed = ch if streamed is None else streamed + ch
        strip = lambda calls: [(t["name"], t["args"]) for t in calls]  # noqa: E731 - ids are fresh per reply
        c.expect(streamed is not None and strip(streamed.tool_calls) == strip(m.tool_calls),
                 f"bind_tools streamed: {streamed.tool_calls if streamed else None} == {m.tool_calls}")

        structured = ChatOpenAI(model=name, base_url=s.base + "/v1", api_key="none", temperature=0, max_tokens=200,
                                max_retries=0)
        # (json_mode, JSON of no given schema, is left out: a 260K-parameter model's free JSON object need not end.)
        for method in ("json_schema", "function_calling"):
            try:
                out = structured.with_structured_output(STORY, method=method).invoke("Who is the hero?")
            except Exception as e:  # noqa: BLE001 - reported as the check's failure
                out = f"raised {type(e).__name__}: {e}"
            c.expect(valid_story(out), f"structured output ({method}): {out}")
        c.expect(s.alive(), "the server is alive after the run")


run_checks(test)
