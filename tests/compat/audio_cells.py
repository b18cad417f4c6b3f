#!/usr/bin/env python3
"""Reference cells for audio resampling (src/media/audio_resample.cpp): the mono float32 samples llama.cpp's
libmtmd makes of a WAV file (tools/mtmd/mtmd-helper.cpp's decode_audio_from_buf: miniaudio 0.11.25's
ma_decoder, f32, 1 channel, the model's rate), for small WAV files this script generates.

  audio_cells.py record DEST
      DEST is a llama.cpp checkout (get-llama.sh's DEST; only its vendor/miniaudio/miniaudio.h is used).
      Builds tests/compat/audio_oracle.c against it, writes every WAV of FILES into a temporary directory,
      runs the oracle on each at every rate of CELLS and writes tests/reference/audio_resample.json.

The oracle is built as (what this script runs; $CC defaults to cc):

  cc -std=c99 -O2 -I DEST/vendor tests/compat/audio_oracle.c -o audio_oracle -lm -lpthread -ldl
  audio_oracle FILE.wav 16000 OUT.f32      # prints "frame_count frames_read", OUT.f32 holds frame_count floats

with no -march=native or -mfma: llama.cpp's libmtmd is built for baseline x86-64, where miniaudio's biquad
(y = b0*x + r1; ...) is not contracted into FMAs (an FMA build moves the low bits of most samples).

The signals are integer arithmetic only (no libm), so tests/unit/test_audio_resample.cpp regenerates the same
samples and the same WAV bytes (it checks their sha256) without reading any file: per channel, a sum of
"magic circle" oscillators (x -= (e*y) >> 16; y += (e*x) >> 16, e = round(2 sin(pi f / rate) * 65536), fixed
here and stored in the JSON) plus noise from a 64-bit LCG, in 24-bit units, clamped; then stored as 16-bit
(v >> 8), unsigned 8-bit ((v >> 16) + 128), 24-bit (v) or float (v / 2^23, exact) samples. The noise reaches
the Nyquist frequency, so the resampler's low-pass filter shapes every output sample.

The JSON keeps, per cell, the output length (frame_count), how many frames miniaudio produced (frames_read;
llama.cpp leaves the rest zero), the sha256 of all frame_count floats (little-endian) and every STRIDE-th
sample plus the last TAIL ones as float32 bit patterns (what the test reports a difference from when the
hashes differ).
"""
import hashlib
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = os.path.join(HERE, "..", "reference", "audio_resample.json")
SAMPLED = 600  # about this many sampled values per cell
TAIL = 16

MASK64 = (1 << 64) - 1
LCG_MUL, LCG_ADD = 6364136223846793005, 1442695040888963407


def magic_e(freq, rate):
    return round(2 * math.sin(math.pi * freq / rate) * 65536)


def tone(freq, rate, peak):
    """One oscillator: its step e (Q16) and starting value in 24-bit units (the test reads both from the JSON).
    The magic circle's orbit is an ellipse whose x reaches amp / sqrt(1 - (e/2)^2): amp is scaled so that x
    peaks near `peak`."""
    e = magic_e(freq, rate)
    return {"freq": freq, "e": e, "amp": round(peak * math.sqrt(1 - (e / 131072) ** 2))}


# name -> rate, channels, coding, frames, seed, noise gain (/256 of +-2^22), per-channel tones (freq Hz, peak)
FILES = {
    "mono_16k_s16": (16000, 1, "s16", 8003, 1, 24, [[(440, 2500000), (3100, 900000), (7400, 400000)]]),
    "stereo_44k1_s16": (44100, 2, "s16", 44107, 2, 20,
                        [[(523, 2000000), (6000, 800000), (15000, 600000)],
                         [(1200, 1800000), (7900, 900000), (21000, 500000)]]),
    "stereo_48k_s16": (48000, 2, "s16", 36000, 3, 16,
                       [[(250, 2400000), (8100, 700000)], [(997, 2000000), (11000, 900000), (23000, 400000)]]),
    "mono_8k_s16": (8000, 1, "s16", 4801, 4, 28, [[(300, 2600000), (1700, 1000000), (3900, 500000)]]),
    "mono_22k05_s16": (22050, 1, "s16", 17641, 5, 20, [[(660, 2200000), (5200, 900000), (10500, 600000)]]),
    "stereo_24k_f32": (24000, 2, "f32", 12007, 6, 22,
                       [[(800, 2600000), (7500, 1100000), (11800, 500000)], [(150, 3000000), (9000, 700000)]]),
    "stereo_16k_s16": (16000, 2, "s16", 4800, 7, 18, [[(200, 2000000)], [(3000, 1500000), (7900, 400000)]]),
    "mono_11k025_u8": (11025, 1, "u8", 4411, 8, 30, [[(440, 3000000), (4000, 1500000)]]),
    "six_32k_s24": (32000, 6, "s24", 9601, 9, 12,
                    [[(100 + 97 * c, 1500000), (9000 + 1111 * c, 600000)] for c in range(6)]),
    "eight_96k_s16": (96000, 8, "s16", 28811, 10, 14,
                      [[(180 + 53 * c, 1200000), (12000 + 4000 * c, 500000)] for c in range(8)]),
    "mono_192k_s16": (192000, 1, "s16", 57613, 11, 20, [[(1000, 2000000), (9000, 800000), (60000, 600000)]]),
}

# (file, target rate). 16000 is what llama.cpp's audio models ask (Whisper, Ultravox, Voxtral, Gemma 3n);
# 24000 adds a non-integer upsampling (22050 -> 24000) and a rate-equal float case.
CELLS = [(name, 16000) for name in FILES] + [("mono_22k05_s16", 24000), ("stereo_24k_f32", 24000),
                                             ("mono_8k_s16", 24000), ("stereo_44k1_s16", 24000)]


def file_params(name):
    rate, channels, coding, frames, seed, noise, tones = FILES[name]
    return {"rate": rate, "channels": channels, "coding": coding, "frames": frames, "seed": seed, "noise": noise,
            "tones": [[tone(f, rate, a) for f, a in ch] for ch in tones]}


def generate(p):
    """The interleaved samples in 24-bit units (ints), as the test's generate() makes them."""
    state = p["seed"] & MASK64
    osc = [[[t["amp"], 0, t["e"]] for t in ch] for ch in p["tones"]]
    out = []
    lo, hi = -(1 << 23), (1 << 23) - 1
    for _ in range(p["frames"]):
        for c in range(p["channels"]):
            v = 0
            for o in osc[c]:
                v += o[0]
                o[0] -= (o[2] * o[1]) >> 16
                o[1] += (o[2] * o[0]) >> 16
            state = (state * LCG_MUL + LCG_ADD) & MASK64
            v += (((state >> 41) - (1 << 22)) * p["noise"]) >> 8
            out.append(min(max(v, lo), hi))
    return out


def wav_bytes(p, v24):
    coding, channels, rate = p["coding"], p["channels"], p["rate"]
    if coding == "s16":
        data, bits, tag = struct.pack(f"<{len(v24)}h", *[v >> 8 for v in v24]), 16, 1
    elif coding == "u8":
        data, bits, tag = bytes((v >> 16) + 128 for v in v24), 8, 1
    elif coding == "s24":
        data, bits, tag = b"".join(struct.pack("<i", v)[:3] for v in v24), 24, 1
    elif coding == "f32":
        data, bits, tag = struct.pack(f"<{len(v24)}f", *[v / 8388608.0 for v in v24]), 32, 3
    else:
        raise ValueError(coding)
    block = channels * bits // 8
    fmt = struct.pack("<HHIIHH", tag, channels, rate, rate * block, block, bits)
    return (b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(data)) + b"WAVE" +
            b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data)


def build_oracle(dest, tmp):
    exe = os.path.join(tmp, "audio_oracle")
    subprocess.run([os.environ.get("CC", "cc"), "-std=c99", "-O2", "-I" + os.path.join(dest, "vendor"),
                    os.path.join(HERE, "audio_oracle.c"), "-o", exe, "-lm", "-lpthread", "-ldl"], check=True)
    return exe


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def record(dest):
    commit = subprocess.run(["git", "-C", dest, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = {"note": "llama.cpp's decode_audio_from_buf (miniaudio 0.11.25) on generated WAVs; see audio_cells.py",
           "llama_cpp": commit, "files": {}, "cells": []}
    with tempfile.TemporaryDirectory() as tmp:
        oracle = build_oracle(dest, tmp)
        paths = {}
        for name in FILES:
            p = file_params(name)
            data = wav_bytes(p, generate(p))
            paths[name] = os.path.join(tmp, name + ".wav")
            with open(paths[name], "wb") as f:
                f.write(data)
            out["files"][name] = {**p, "wav_sha256": sha256(data)}
        for name, rate in CELLS:
            res = os.path.join(tmp, "out.f32")
            run = subprocess.run([oracle, paths[name], str(rate), res], capture_output=True, text=True, check=True)
            frame_count, frames_read = map(int, run.stdout.split())
            with open(res, "rb") as f:
                raw = f.read()
            assert len(raw) == 4 * frame_count
            bits = struct.unpack(f"<{frame_count}I", raw)
            stride = max(1, frame_count // SAMPLED)
            out["cells"].append({"file": name, "rate": rate, "frame_count": frame_count, "frames_read": frames_read,
                                 "f32_sha256": sha256(raw), "stride": stride, "sampled_bits": list(bits[::stride]),
                                 "tail_bits": list(bits[-TAIL:])})
            print(f"{name} -> {rate} Hz: {frame_count} frames, {frames_read} read")
    os.makedirs(os.path.dirname(EXPECTED), exist_ok=True)
    with open(EXPECTED, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"{len(out['files'])} files, {len(out['cells'])} cells -> {EXPECTED} ({os.path.getsize(EXPECTED)} bytes)")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "record":
        sys.exit(__doc__)
    record(sys.argv[2])
