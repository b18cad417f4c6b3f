#!/usr/bin/env python3
"""An independent oracle for byte-level BPE pre-tokenization.

The split rules below are the `pre_tokenizer` regexes of the models' public
tokenizer.json files (Hugging Face `Split` with behavior "Isolated": each
regex splits every current piece into its matches and the gaps between
them), keyed by the `tokenizer.ggml.pre` names llama.cpp's converter writes.
They are evaluated with the third-party `regex` module (Debian's
python3-regex), not with the engine's PCRE2 code. Where a model's
tokenizer.json uses non-regex pre-tokenizers (Falcon's Punctuation step,
StarCoder's Digits), the regex form is llama.cpp's conversion of them.

usage: pretokenizer_oracle.py IN.json OUT.json
  IN:  {"name": [text, ...], ...}    OUT: {"name": [[piece, ...], ...], ...}
"""
import json
import sys

import regex

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# meta-llama/Llama-3.1-8B tokenizer.json
LLAMA3 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
# Qwen/Qwen2.5-7B tokenizer.json (also DeepSeek-R1-Distill-Qwen, Qwen3)
QWEN2 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
# Qwen3.5 tokenizer.json
QWEN35 = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
# o200k (GPT-4o; Llama 4)
GPT4O = (r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"""
         r"""|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"""
         r"""|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
# mistralai tekken.json
TEKKEN = (r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"""
          r"""|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"""
          r"""|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
# deepseek-ai/DeepSeek-V3 tokenizer.json (Sequence of three Splits)
DEEPSEEK_V3 = [r"\p{N}{1,3}", r"[一-龥぀-ゟ゠-ヿ]+",
               r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""]
# deepseek-ai/deepseek-coder tokenizer.json
DEEPSEEK_CODER = [r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", r"[一-龥ࠀ-一가-퟿]+", r"\p{N}"]

# GLM-4 (tokenizer.ggml.pre "glm4" / "chatglm-bpe"): llama.cpp's CHATGLM4 regex, as its llama-vocab.cpp has it
GLM4 = r"""(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

RULES = {
    "gpt-2": [GPT2],
    "starcoder": [r"\p{N}", GPT2],    # bigcode/starcoder: Digits(individual) then ByteLevel
    "refact": [r"\p{N}", GPT2],
    "command-r": [r"\p{N}", GPT2],
    "smollm": [r"\p{N}", GPT2],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"],
    "llama-bpe": [LLAMA3],
    "llama3": [LLAMA3],
    "qwen2": [QWEN2],
    "deepseek-r1-qwen": [QWEN2],
    "qwen35": [QWEN35],
    "gpt-4o": [GPT4O],
    "tekken": [TEKKEN],
    "deepseek-v3": DEEPSEEK_V3,
    "deepseek-coder": DEEPSEEK_CODER,
    "glm4": [GLM4],
    "chatglm-bpe": [GLM4],
}


def split(text, patterns):
    pieces = [text] if text else []
    for pattern in patterns:
        compiled = regex.compile(pattern)
        out = []
        for piece in pieces:
            last = 0
            for m in compiled.finditer(piece):
                if m.end() == m.start():
                    continue
                if m.start() > last:
                    out.append(piece[last:m.start()])
                out.append(m.group())
                last = m.end()
            if last < len(piece):
                out.append(piece[last:])
        pieces = out
    return pieces


def main():
    cases = json.load(open(sys.argv[1], encoding="utf-8"))
    result = {name: [split(t, RULES[name]) for t in texts] for name, texts in cases.items()}
    json.dump(result, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)


if __name__ == "__main__":
    main()
