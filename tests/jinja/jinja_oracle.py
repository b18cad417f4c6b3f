#!/usr/bin/env python3
"""Renders templates with Python's jinja2 set up as Hugging Face transformers
sets it up for chat templates (utils/chat_template_utils.py): the oracle
Kestrel's own Jinja interpreter is tested against.

usage: jinja_oracle.py IN.json OUT.json
IN.json:  [{"template": "...", "vars": {...}}, ...]
OUT.json: [{"output": "..."} or {"error": "..."}, ...] in the same order.
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIXED_NOW = datetime(2026, 1, 15, 10, 30, 0)  # what the tests pass as --now


class TemplateRaised(Exception):
    pass


def raise_exception(message):
    raise TemplateRaised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return FIXED_NOW.strftime(format)


class AssistantTracker(Extension):
    """transformers' {% generation %} tag: its body renders unchanged."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.filters["from_json"] = json.loads  # transformers' chat environment (DeepSeek-V3.2/V4 templates use it)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    cases = json.load(open(sys.argv[1], encoding="utf-8"))
    env = environment()
    out = []
    for case in cases:
        try:
            out.append({"output": env.from_string(case["template"]).render(**case["vars"])})
        except Exception as e:  # the test compares only that both engines refuse
            out.append({"error": f"{type(e).__name__}: {e}"})
    json.dump(out, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)


if __name__ == "__main__":
    main()
