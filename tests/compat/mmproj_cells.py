#!/usr/bin/env python3
"""Reference cells for multimodal projectors (mmproj files) written by `kestrel synth --mmproj`: the text model's
and the projector's synth arguments and sha256, the images, and what llama.cpp's multimodal library (libmtmd, the
code behind llama-mtmd-cli and llama-server) makes of them: the prompt's chunks (text ids, image rows), the
encoder's output rows, and the greedy ids that follow.

  mmproj_cells.py record KESTREL DEST
      write the test images into tests/data/mmproj/, synthesise each cell's files, build mtmd_oracle.cpp against
      get-llama.sh's DEST, run it, and write tests/reference/mmproj_cells.json and each cell's encoder rows
      (tests/reference/mmproj/<cell>.embd.f32, float32, the images' rows in prompt order); llama-mtmd-cli is also
      run once per cell with a chat template, to show that llama.cpp's own tool loads both files (the layout proof).

tests/reference/test_mmproj_cells.cpp regenerates the files, checks their sha256 and compares kestrel's chunks,
rows (within 1e-4), the first and last steps' logits, and ids (a first difference excused only where llama.cpp's
top-2 gap is below 1e-3).

Also recorded (SERVER_CELLS): llama-server (--mmproj, chatml, no flash attention, its KV cache in F32 as Kestrel's)
answering a chat request with an image: its reply's tokens with their logprobs and its prompt's token count, which tests/e2e/test_server_media.cpp
compares with kestrel serve's answer to the same request through the stock clients.
"""
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
EXPECTED = os.path.join(ROOT, "tests", "reference", "mmproj_cells.json")
ROWS_DIR = os.path.join(ROOT, "tests", "reference", "mmproj")
IMAGES_DIR = os.path.join(ROOT, "tests", "data", "mmproj")

G3 = ["--arch", "gemma3", "--preset", "tiny-vision", "--type", "f32"]
Q35 = ["--arch", "qwen35", "--preset", "tiny-vision"]
G4 = ["--arch", "gemma4", "--preset", "tiny"]
PX = ["--arch", "mistral3", "--preset", "tiny"]
UV = ["--arch", "llama", "--preset", "tiny", "--type", "f32", "--mmproj-projector", "ultravox"]
VX = ["--arch", "llama", "--preset", "tiny", "--type", "f32", "--mmproj-projector", "voxtral"]
G4A = ["--arch", "gemma4", "--preset", "tiny", "--mmproj-projector", "gemma4a"]
# name, synth arguments (text model and projector share the seed), prompt, images, tokens to generate[, flags
# given to llama.cpp and kestrel alike]
CELLS = [
    ("gemma3-tiny-seed1", G3 + ["--seed", "1"], "A cat <__media__> sat on", ["gradient-97x61.png"], 16),
    ("gemma3-tiny-seed1-checker", G3 + ["--seed", "1"], "A cat <__media__> sat on", ["checker-40x40.png"], 16),
    ("gemma3-tiny-seed2", G3 + ["--seed", "2"], "A cat <__media__> sat on", ["gradient-97x61.png"], 16),
    # two images, the second tall (letterboxed at the sides), text between and after
    ("gemma3-tiny-seed2-two", G3 + ["--seed", "2"], "<__media__> and then <__media__> look alike",
     ["checker-40x40.png", "stripes-30x90.png"], 12),
    # the converters' F16 projector (the patch kernel and the products in F16, as ggml computes them), and Q8_0
    ("gemma3-tiny-seed3.f16", ["--arch", "gemma3", "--preset", "tiny-vision", "--type", "f16", "--seed", "3",
                               "--mmproj-type", "f16"], "A cat <__media__> sat on", ["checker-40x40.png"], 16),
    ("gemma3-tiny-seed3.q8_0", ["--arch", "gemma3", "--preset", "tiny-vision", "--type", "q8_0", "--seed", "3",
                                "--mmproj-type", "q8_0"], "A cat <__media__> sat on", ["checker-40x40.png"], 16),
    # Qwen3.5 with the Qwen3-VL tower (qwen3vl_merger): aspect-preserving sizes (97x61 -> 96x64: a 6x4 grid; 40x40 ->
    # 48x48; 30x90 -> 32x96, letterboxed), the position grid resized (8x8 -> the image's) or not (64x64), causal
    # rows with M-RoPE positions and the text after them moved on by the grid's longer side.
    ("qwen35-tiny-seed1", Q35 + ["--type", "f32", "--seed", "1"], "A cat <__media__> sat on", ["gradient-97x61.png"], 12),
    ("qwen35-tiny-seed2-two", Q35 + ["--type", "f32", "--seed", "2"], "<__media__> and then <__media__> look alike",
     ["checker-40x40.png", "stripes-30x90.png"], 12),
    ("qwen35-tiny-seed4-square.f16", Q35 + ["--type", "f16", "--seed", "4", "--mmproj-type", "f16"],
     "A cat <__media__> sat on", ["square-64x64.png"], 12),
    ("qwen35-tiny-seed2.q8_0", Q35 + ["--type", "q8_0", "--seed", "2", "--mmproj-type", "q8_0"],
     "A cat <__media__> sat on", ["gradient-97x61.png"], 12),
    # --image-max-tokens 9 (llama.cpp's option, its mtmd_context_params): the 97x61 image shrunk to a 3x2 grid
    ("qwen35-tiny-seed1-max9", Q35 + ["--type", "f32", "--seed", "1"], "A cat <__media__> sat on",
     ["gradient-97x61.png"], 12, ["--image-max-tokens", "9"]),
    # Gemma 4 (gemma4v): images sized by their own within 70..1120 tokens (these small ones grow to ~70), the
    # sandwich-normed tower with its 2-D RoPE and clippable matrices, 3x3 pooling; the rows attended both ways on
    # the sliding-window layers only, their per-layer inputs the padding token's.
    ("gemma4-tiny-seed1", G4 + ["--type", "f32", "--seed", "1"], "A cat <__media__> sat on", ["gradient-97x61.png"], 12),
    ("gemma4-tiny-seed2-two", G4 + ["--type", "f32", "--seed", "2"], "<__media__> and then <__media__> look alike",
     ["checker-40x40.png", "stripes-30x90.png"], 12),
    ("gemma4-tiny-seed3.f16", G4 + ["--type", "f16", "--seed", "3", "--mmproj-type", "f16"], "A cat <__media__> sat on",
     ["square-64x64.png"], 12),
    ("gemma4-tiny-seed3.q8_0", G4 + ["--type", "q8_0", "--seed", "3", "--mmproj-type", "q8_0"],
     "A cat <__media__> sat on", ["gradient-97x61.png"], 12),
    # Pixtral (Mistral Small 3.1's form: patches merged 2x2): the 2-D RoPE in adjacent pairs, SwiGLU, the unfolded
    # merger, [IMG_BREAK] after each row but the last, [IMG_END] after; causal; with mistral3 and llama text models.
    ("pixtral-mistral3-tiny-seed1", PX + ["--type", "f32", "--seed", "1"], "A cat <__media__> sat on",
     ["gradient-97x61.png"], 12),
    ("pixtral-mistral3-tiny-seed2-two", PX + ["--type", "f32", "--seed", "2"], "<__media__> and then <__media__> look alike",
     ["checker-40x40.png", "stripes-30x90.png"], 12),
    ("pixtral-mistral3-tiny-seed3.f16", PX + ["--type", "f16", "--seed", "3", "--mmproj-type", "f16"],
     "A cat <__media__> sat on", ["square-64x64.png"], 12),
    ("pixtral-mistral3-tiny-seed3.q8_0", PX + ["--type", "q8_0", "--seed", "3", "--mmproj-type", "q8_0"],
     "A cat <__media__> sat on", ["gradient-97x61.png"], 12),
    ("pixtral-llama-tiny-seed4", ["--arch", "llama", "--preset", "tiny", "--type", "f32", "--seed", "4"],
     "A cat <__media__> sat on", ["stripes-30x90.png"], 12),
    # Mistral Small 4 (mistral4: MLA attention, experts) takes the same projector
    ("pixtral-mistral4-tiny-seed1", ["--arch", "mistral4", "--preset", "tiny", "--type", "f32", "--seed", "1"],
     "A cat <__media__> sat on", ["gradient-97x61.png"], 12),
    # Audio through Whisper's encoder (the log-mel front end, two convolutions, the blocks) and three projectors:
    # Ultravox (stacked by 8, RMSNorm-SwiGLU-RMSNorm), Voxtral (pooled, stacked by 4, GELU MLP, [BEGIN_AUDIO]) with
    # llama text models, Qwen2-Audio (pooled, one matrix, <|audio_bos|> <|audio_eos|>) with qwen2. A 16 kHz mono WAV
    # and a 22.05 kHz stereo one (miniaudio's mix and resampler, as llama.cpp decodes it).
    ("ultravox-llama-tiny-seed1", UV + ["--seed", "1"], "Listen <__media__> now", ["tone-16k-mono.wav"], 12),
    ("ultravox-llama-tiny-seed2-stereo", UV + ["--seed", "2"], "Listen <__media__> now", ["tones-22k-stereo.wav"], 12),
    ("ultravox-llama-tiny-seed3.f16", ["--arch", "llama", "--preset", "tiny", "--type", "f16", "--seed", "3",
                                       "--mmproj-projector", "ultravox", "--mmproj-type", "f16"],
     "Listen <__media__> now", ["tone-16k-mono.wav"], 12),
    # An MP3 (LAME's, of the mono WAV): llama.cpp decodes it with dr_mp3, Kestrel with libmpg123.
    ("ultravox-llama-tiny-seed1-mp3", UV + ["--seed", "1"], "Listen <__media__> now", ["tone-16k-mono.mp3"], 12),
    ("voxtral-llama-tiny-seed1-two", VX + ["--seed", "1"], "<__media__> then <__media__> said",
     ["tones-22k-stereo.wav", "tone-16k-mono.wav"], 12),
    ("voxtral-llama-tiny-seed2.q8_0", ["--arch", "llama", "--preset", "tiny", "--type", "q8_0", "--seed", "2",
                                       "--mmproj-projector", "voxtral", "--mmproj-type", "q8_0"],
     "Listen <__media__> now", ["tone-16k-mono.wav"], 12),
    ("qwen2a-qwen2-tiny-seed1", ["--arch", "qwen2", "--preset", "tiny", "--type", "f32", "--seed", "1", "--ctx", "2048"],
     "Listen <__media__> now", ["tone-16k-mono.wav"], 12),
    # Gemma 4's audio Conformer (gemma4a): its own front end (HTK mel of the magnitude, semicausal padding, no 30 s
    # padding), two strided 3x3 convolutions, the blocks (half-step FFNs, local attention with relative positions
    # and softcap, the light convolution), clippable products; <|audio> <audio|>, causal. Alone, and beside gemma4v
    # in one file (the released E2B/E4B layout) with an image and a sound in one prompt.
    ("gemma4a-tiny-seed1", G4A + ["--type", "f32", "--seed", "1"], "Listen <__media__> now", ["tone-16k-mono.wav"], 12),
    ("gemma4a-tiny-seed2-two", G4A + ["--type", "f32", "--seed", "2"], "<__media__> then <__media__> said",
     ["tones-22k-stereo.wav", "tone-16k-mono.wav"], 12),
    ("gemma4a-tiny-seed3.f16", G4A + ["--type", "f16", "--seed", "3", "--mmproj-type", "f16"], "Listen <__media__> now",
     ["tones-22k-stereo.wav"], 12),
    ("gemma4a-tiny-seed3.q8_0", G4A + ["--type", "q8_0", "--seed", "3", "--mmproj-type", "q8_0"],
     "Listen <__media__> now", ["tone-16k-mono.wav"], 12),
    # over 30 s: two chunks (30 s and 1.5 s), each its own run of the encoder, their rows one after the other
    ("gemma4a-tiny-seed5-31s", G4A + ["--type", "f32", "--seed", "5"], "Listen <__media__> now",
     ["sweep-8k-u8-31s.wav"], 8),
    ("gemma4-both-tiny-seed4", ["--arch", "gemma4", "--preset", "tiny", "--type", "f32", "--seed", "4",
                                "--mmproj-projector", "gemma4v+gemma4a"], "A cat <__media__> said <__media__> loudly",
     ["gradient-97x61.png", "tone-16k-mono.wav"], 12),
]

# llama-mtmd-cli's chat template for each text architecture (the layout proof wraps the prompt in it).
CHAT_TEMPLATE = {"gemma3": "gemma", "qwen35": "chatml", "gemma4": "gemma", "mistral3": "mistral-v7",
                 "llama": "mistral-v7", "mistral4": "mistral-v7", "qwen2": "chatml"}


# name, the cell whose files serve, the user turn (image parts by file name, then text), max_tokens
SERVER_CELLS = [
    ("chat-image-then-text", "gemma3-tiny-seed2", [("image", "gradient-97x61.png"), ("text", "What is in this picture?")], 12),
    ("chat-text-two-images", "gemma3-tiny-seed2",
     [("text", "Compare"), ("image", "checker-40x40.png"), ("text", "with"), ("image", "stripes-30x90.png")], 10),
    ("qwen35-chat-image-then-text", "qwen35-tiny-seed2-two",
     [("image", "gradient-97x61.png"), ("text", "What is in this picture?")], 12),
    ("qwen35-chat-text-two-images", "qwen35-tiny-seed2-two",
     [("text", "Compare"), ("image", "checker-40x40.png"), ("text", "with"), ("image", "stripes-30x90.png")], 10),
    ("gemma4-chat-image-then-text", "gemma4-tiny-seed1",
     [("image", "gradient-97x61.png"), ("text", "What is in this picture?")], 12),
    ("gemma4-chat-text-two-images", "gemma4-tiny-seed1",
     [("text", "Compare"), ("image", "checker-40x40.png"), ("text", "with"), ("image", "stripes-30x90.png")], 10),
    ("pixtral-chat-image-then-text", "pixtral-mistral3-tiny-seed1",
     [("image", "gradient-97x61.png"), ("text", "What is in this picture?")], 12),
    ("pixtral-chat-text-two-images", "pixtral-mistral3-tiny-seed1",
     [("text", "Compare"), ("image", "checker-40x40.png"), ("text", "with"), ("image", "stripes-30x90.png")], 10),
    ("ultravox-chat-audio-then-text", "ultravox-llama-tiny-seed1",
     [("audio", "tone-16k-mono.wav"), ("text", "What is said?")], 12),
    ("ultravox-chat-text-two-audios", "ultravox-llama-tiny-seed1",
     [("text", "Compare"), ("audio", "tones-22k-stereo.wav"), ("text", "with"), ("audio", "tone-16k-mono.wav")], 10),
    ("qwen2a-chat-audio-then-text", "qwen2a-qwen2-tiny-seed1",
     [("audio", "tone-16k-mono.wav"), ("text", "What is said?")], 12),
    ("qwen2a-chat-text-then-audio", "qwen2a-qwen2-tiny-seed1",
     [("text", "Transcribe"), ("audio", "tones-22k-stereo.wav")], 10),
    ("gemma4-both-chat-audio-then-text", "gemma4-both-tiny-seed4",
     [("audio", "tone-16k-mono.wav"), ("text", "What is said?")], 12),
    ("gemma4-both-chat-image-and-audio", "gemma4-both-tiny-seed4",
     [("text", "Compare"), ("image", "checker-40x40.png"), ("text", "with"), ("audio", "tones-22k-stereo.wav")], 10),
]


def chat_body(parts, max_tokens):
    import base64
    content = []
    for kind, value in parts:
        if kind == "text":
            content.append({"type": "text", "text": value})
        elif kind == "audio":
            with open(os.path.join(IMAGES_DIR, value), "rb") as f:
                data = base64.b64encode(f.read()).decode()
            content.append({"type": "input_audio", "input_audio": {"data": data, "format": "wav"}})
        else:
            with open(os.path.join(IMAGES_DIR, value), "rb") as f:
                data = base64.b64encode(f.read()).decode()
            content.append({"type": "image_url", "image_url": {"url": "data:image/png;base64," + data}})
    return {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0,
            "logprobs": True, "top_logprobs": 1}


def llama_server_answer(dest, model, mmproj, body):
    import socket
    import time
    import urllib.request
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen([os.path.join(dest, "build", "bin", "llama-server"), "-m", model, "--mmproj", mmproj,
                             "--chat-template", "chatml", "-fa", "off", "-c", "8192", "--no-warmup", "-t", "2",
                             "-ctk", "f32", "-ctv", "f32",
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except Exception:
                time.sleep(0.1)
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
        return json.load(urllib.request.urlopen(req, timeout=120))
    finally:
        proc.terminate()
        proc.wait()


def png(path, w, h, f):
    raw = b"".join(b"\x00" + bytes(v for x in range(w) for v in f(x, y)) for y in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    with open(path, "wb") as out:
        out.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
                  chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def write_images():
    os.makedirs(IMAGES_DIR, exist_ok=True)
    png(os.path.join(IMAGES_DIR, "gradient-97x61.png"), 97, 61,
        lambda x, y: ((x * 7 + y * 3) % 256, (x * x + y * 5) % 256, (x * y + 40) % 256))
    png(os.path.join(IMAGES_DIR, "checker-40x40.png"), 40, 40,
        lambda x, y: (255 if (x // 5 + y // 5) % 2 else 0, (x * 6) % 256, (y * 6) % 256))
    png(os.path.join(IMAGES_DIR, "stripes-30x90.png"), 30, 90,
        lambda x, y: ((y * 17) % 256, 200 if (y // 9) % 2 else 30, (x * 8) % 256))
    png(os.path.join(IMAGES_DIR, "square-64x64.png"), 64, 64,
        lambda x, y: ((x * 4) % 256, (y * 4) % 256, ((x ^ y) * 8) % 256))


def wav(path, rate, channels, frames, f):
    """A 16-bit PCM WAV of f(i, channel) in [-1, 1] (integer arithmetic on the rounded value: the bytes are the same
    everywhere)."""
    data = b"".join(struct.pack("<h", max(-32768, min(32767, round(f(i, c) * 32767))))
                    for i in range(frames) for c in range(channels))
    with open(path, "wb") as out:
        out.write(b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " +
                  struct.pack("<IHHIIHH", 16, 1, channels, rate, rate * channels * 2, channels * 2, 16) +
                  b"data" + struct.pack("<I", len(data)) + data)


def wav_u8(path, rate, frames, f):
    """An 8-bit (unsigned) mono PCM WAV of f(i) in [-1, 1]: a long clip in few bytes."""
    data = bytes(max(0, min(255, 128 + round(f(i) * 127))) for i in range(frames))
    with open(path, "wb") as out:
        out.write(b"RIFF" + struct.pack("<I", 36 + len(data)) + b"WAVEfmt " +
                  struct.pack("<IHHIIHH", 16, 1, 1, rate, rate, 1, 8) + b"data" + struct.pack("<I", len(data)) + data)


def write_audio():
    import math
    state = [12345]

    def noise():  # a 31-bit LCG, in [-1, 1)
        state[0] = (state[0] * 1103515245 + 12345) % (1 << 31)
        return state[0] / (1 << 30) - 1.0

    wav(os.path.join(IMAGES_DIR, "tone-16k-mono.wav"), 16000, 1, 19200,  # 1.2 s
        lambda i, c: 0.3 * math.sin(2 * math.pi * 440 * i / 16000) + 0.2 * math.sin(2 * math.pi * 1230 * i / 16000) *
        (i / 19200) + 0.05 * noise())
    # 31.5 s at 8 kHz in 8 bits (miniaudio's u8 mapping, then resampled to 16 kHz): two chunks for Gemma 4's audio
    wav_u8(os.path.join(IMAGES_DIR, "sweep-8k-u8-31s.wav"), 8000, 252000,
           lambda i: 0.5 * math.sin(2 * math.pi * (200 + 1500 * i / 252000) * i / 8000) + 0.05 * noise())
    wav(os.path.join(IMAGES_DIR, "tones-22k-stereo.wav"), 22050, 2, 19845,  # 0.9 s
        lambda i, c: 0.35 * math.sin(2 * math.pi * (300 + 500 * c) * i / 22050) +
        0.15 * math.sin(2 * math.pi * 7000 * i / 22050) + 0.05 * noise())


def write_mp3(work):
    """tests/data/mmproj/tone-16k-mono.mp3 from its WAV by wav_to_mp3.c (libsndfile's LAME writer), when missing: the
    file is kept in the repository, since another LAME could encode other bytes."""
    mp3 = os.path.join(IMAGES_DIR, "tone-16k-mono.mp3")
    if os.path.exists(mp3):
        return
    exe = os.path.join(work, "wav_to_mp3")
    subprocess.run([os.environ.get("CC", "cc"), os.path.join(HERE, "wav_to_mp3.c"), "-lsndfile", "-o", exe], check=True)
    subprocess.run([exe, os.path.join(IMAGES_DIR, "tone-16k-mono.wav"), mp3], check=True)


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def build_oracle(dest, work):
    exe = os.path.join(work, "mtmd_oracle")
    bin_dir = os.path.join(dest, "build", "bin")
    subprocess.run([os.environ.get("CXX", "c++"), "-std=c++17", "-O2", os.path.join(HERE, "mtmd_oracle.cpp"),
                    "-I" + os.path.join(dest, "include"), "-I" + os.path.join(dest, "ggml", "include"),
                    "-I" + os.path.join(dest, "tools", "mtmd"), "-L" + bin_dir, "-lmtmd", "-lllama", "-lggml",
                    "-lggml-base", "-Wl,-rpath," + bin_dir, "-o", exe], check=True)
    return exe


def main():
    if len(sys.argv) != 4 or sys.argv[1] != "record":
        sys.exit(__doc__)
    kestrel, dest = os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3])
    commit = subprocess.run(["git", "-C", dest, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    write_images()
    write_audio()
    os.makedirs(ROWS_DIR, exist_ok=True)
    cells = []
    with tempfile.TemporaryDirectory() as work:
        write_mp3(work)
        oracle = build_oracle(dest, work)
        for name, synth, prompt, images, n, *rest in CELLS:
            flags = rest[0] if rest else []
            model, mmproj = os.path.join(work, name + ".gguf"), os.path.join(work, name + ".mmproj.gguf")
            subprocess.run([kestrel, "synth"] + synth + ["-o", model, "--mmproj", mmproj], check=True,
                           capture_output=True)
            paths = [os.path.join(IMAGES_DIR, i) for i in images]
            rows = os.path.join(ROWS_DIR, name + ".embd.f32")
            r = subprocess.run([oracle, "-n", str(n), "--embd", rows] + flags + [model, mmproj, prompt] + paths,
                               capture_output=True, text=True)
            out = json.loads(r.stdout)
            if "error" in out:
                sys.exit(f"{name}: {out['error']}")
            # llama.cpp's own tool loads both files and answers (its chat template wraps the prompt: text only shown).
            cli = subprocess.run([os.path.join(dest, "build", "bin", "llama-mtmd-cli"), "-m", model, "--mmproj", mmproj,
                                  "--chat-template", CHAT_TEMPLATE[synth[synth.index("--arch") + 1]], "-p", prompt, "--temp", "0", "-n", "4", "-fa", "off",
                                  "--no-warmup", "-c", "2048", "-b", "2048", "-ub", "2048"] + flags + sum((["--image", p] for p in paths), []),
                                 capture_output=True, text=True, errors="replace")
            if cli.returncode != 0:
                sys.exit(f"{name}: llama-mtmd-cli failed: {cli.stderr[-2000:]}")
            cells.append({
                "name": name, "synth": synth, "sha256": sha256(model), "mmproj_sha256": sha256(mmproj),
                "prompt": prompt, "images": images, "flags": flags, "image_sha256": [sha256(p) for p in paths],
                "chunks": out["chunks"], "rows": os.path.relpath(rows, ROOT), "n_embd": out["n_embd"],
                "ids": out["ids"], "gaps": out["gap"], "logits_first": out["logits_first"],
                "logits_last": out["logits_last"], "llama_cpp": commit,
            })
            print(f"{name}: {out['ids']}")
        files = {c[0]: c[1] for c in CELLS}  # (server cells: no flags)
        servers = []
        for name, cell, parts, max_tokens in SERVER_CELLS:
            model, mmproj = os.path.join(work, name + ".gguf"), os.path.join(work, name + ".mmproj.gguf")
            subprocess.run([kestrel, "synth"] + files[cell] + ["-o", model, "--mmproj", mmproj], check=True,
                           capture_output=True)
            answer = llama_server_answer(dest, model, mmproj, chat_body(parts, max_tokens))
            choice = answer["choices"][0]
            servers.append({
                "name": name, "cell": cell, "parts": [list(p) for p in parts], "max_tokens": max_tokens,
                "content": choice["message"]["content"], "prompt_tokens": answer["usage"]["prompt_tokens"],
                "tokens": [t["token"] for t in choice["logprobs"]["content"]],
                "logprobs": [t["logprob"] for t in choice["logprobs"]["content"]], "llama_cpp": commit,
            })
            print(f"{name}: {choice['message']['content']!r} ({answer['usage']['prompt_tokens']} prompt tokens)")
    with open(EXPECTED, "w") as f:
        json.dump({"note": "llama.cpp's libmtmd on files kestrel synth --mmproj writes; see mmproj_cells.py",
                   "cells": cells, "server": servers}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
