#!/usr/bin/env python3
"""Reference cells for image input (src/media/image.cpp): llama.cpp's decoded pixels, its resized pixels
(tools/mtmd's img_tool: Pillow's fixed-point resampling, letterbox) and its normalised planar floats, as
sha256 of the bytes, for small images kept in tests/data/media/.

  mtmd_image_cells.py record DEST
      write the test images into tests/data/media/ (PNG RGB, RGBA, grey, palette, 16-bit, sub-byte grey and
      palette with tRNS, grey+alpha, Adam7-interlaced; two GIFs by a hand-written encoder, one a frame smaller
      than its screen with a local colour table, a transparent index, interlacing and a background colour;
      a baseline, a progressive, a grey and an RGB JPEG through cjpeg of libjpeg-turbo-progs, skipped with a
      note when it is missing), build mtmd_image_oracle.cpp against llama.cpp (get-llama.sh's DEST: its
      tools/mtmd source and build/bin's libmtmd), run it on every image, every case of CASES and every size
      of SIZES, and write tests/reference/media_image_cells.json

The images are made by this file (Python's zlib and struct; no Pillow), deterministically: recording again
writes the same bytes (cjpeg's output depends on its version; the JSON keeps each file's sha256, and the test
checks it before anything else). tests/unit/test_media_image.cpp decodes each file, resizes and normalises it
with kestrel and compares the hashes with llama.cpp's; calc_size_preserved_ratio's float32 arithmetic is
compared on SIZES alone too.

JPEG is lossy and kestrel decodes it with libjpeg-turbo, llama.cpp with stb_image: another IDCT, chroma
upsampling and colour conversion, so a JPEG's pixels are not bit-exact. For each JPEG this file also stores
llama.cpp's decoded pixels as a lossless PNG beside it (NAME.llama.png; the test checks that it decodes to
llama.cpp's sha256, and resizes those pixels for the JPEG's cases, which stay bit-exact), and measures how
far libjpeg-turbo's pixels (djpeg's defaults, which are kestrel's settings: the integer IDCT, fancy
upsampling) are from them: the largest absolute difference per channel and the mean absolute difference.
The test asserts kestrel's own difference within those, plus a small margin (BOUND_MAX, BOUND_MEAN).
"""
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = os.path.join(HERE, "..", "reference", "media_image_cells.json")
MEDIA = os.path.join(HERE, "..", "data", "media")


def f32(x):
    """x rounded to float32, as a Python float (exact, so that the test's float and the oracle's agree)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


# mean, std: 0.5 (Gemma 3, SigLIP) and CLIP's (Qwen-VL, Pixtral use CLIP's too).
NORMS = {"half": ([0.5] * 3, [0.5] * 3),
         "clip": ([0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])}
NORMS = {k: ([f32(x) for x in m], [f32(x) for x in s]) for k, (m, s) in NORMS.items()}


# --- the images -----------------------------------------------------------------------------------------

def pattern(w, h, x, y, c):
    """A deterministic picture: gradients, a disc with a hard edge, stripes and a patch of noise (what makes
    bicubic overshoot and clamp)."""
    v = (x * 255 // max(w - 1, 1) * (c == 0) + y * 255 // max(h - 1, 1) * (c == 1) + (x + y) * 2 * (c == 2)) % 256
    if (x - w * 0.6) ** 2 + (y - h * 0.4) ** 2 < (min(w, h) * 0.3) ** 2:
        v = (40 + 90 * c) % 256
    if x % 7 == 3 and y < h // 2:
        v = 255 - v
    if x < w // 4 and y >= h - h // 4:
        v = (x * 2654435761 + y * 40503 + c * 97) % 251
    return v


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_filter(kind, row, prev, bpp):
    """Row `row` (bytes) under PNG filter `kind` (0 none, 1 sub, 2 up, 3 average, 4 Paeth), `prev` the row above."""
    out = bytearray()
    for i, v in enumerate(row):
        a, b = row[i - bpp] if i >= bpp else 0, prev[i]
        c = prev[i - bpp] if i >= bpp else 0
        if kind == 4:
            p = a + b - c
            pred = a if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c) else b if abs(p - b) <= abs(p - c) else c
        else:
            pred = (0, a, b, (a + b) // 2)[kind]
        out.append((v - pred) % 256)
    return bytes([kind]) + bytes(out)


# Adam7: each pass's first column and row, and its steps.
ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def png(w, h, color_type, rows, depth=8, palette=None, trns=None, interlace=False):
    """`rows`: each row's bytes as stored (samples packed MSB first when depth < 8, big-endian when 16).
    Interlaced (Adam7) only for depth >= 8: each pass is cut from `rows` and filtered on its own."""
    # Each row under one of the five filters in turn, so that the decoder undoes all of them.
    bpp = max(1, {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color_type] * depth // 8)
    rows = [bytes(r) for r in rows]
    if interlace:
        passes = []
        for x0, y0, dx, dy in ADAM7:
            sub = [b"".join(r[x * bpp:(x + 1) * bpp] for x in range(x0, w, dx)) for r in rows[y0::dy]]
            if sub and sub[0]:
                passes.append(sub)
    else:
        passes = [rows]
    raw, k = b"", 0
    for sub in passes:
        for y, r in enumerate(sub):
            raw += png_filter(k % 5, r, sub[y - 1] if y else bytes(len(r)), bpp)
            k += 1
    out = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color_type, 0, 0,
                                                                   1 if interlace else 0))
    if palette:
        out += png_chunk(b"PLTE", bytes(v for rgb in palette for v in rgb))
    if trns is not None:
        out += png_chunk(b"tRNS", trns)
    return out + png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b"")


def pack(samples, depth):
    """Samples of `depth` < 8 bits packed MSB first, the row padded to a whole byte."""
    per = 8 // depth
    samples = list(samples) + [0] * (-len(samples) % per)
    return bytes(sum(v << (8 - depth * (j + 1)) for j, v in enumerate(samples[i:i + per]))
                 for i in range(0, len(samples), per))


def rgb_rows(w, h, channels=3):
    return [[pattern(w, h, x, y, c) if c < 3 else (x * 5 + y * 3) % 256 for x in range(w) for c in range(channels)]
            for y in range(h)]


def palette_image(w, h):
    pal = [((i * 37) % 256, (i * 91) % 256, (255 - i * 13) % 256) for i in range(32)]
    return pal, [[(pattern(w, h, x, y, 0) // 8 + (x // 5)) % 32 for x in range(w)] for y in range(h)]


def lzw_literal(pixels, min_code_size):
    """A GIF LZW stream (the code size byte, then sub-blocks, then the terminator) of literal codes only: a
    clear code every few codes (250 at 8 bits) keeps the code size at min_code_size+1 bits (the decoder's
    table never reaches the next power of two), so no string table is needed to write it."""
    clear, width = 1 << min_code_size, min_code_size + 1
    run = 250 if min_code_size == 8 else max(1, clear - 4)
    codes = []
    for i in range(0, len(pixels), run):
        codes += [clear] + pixels[i:i + run]
    codes.append(clear + 1)
    bits, nbits, stream = 0, 0, bytearray()
    for code in codes:
        bits |= code << nbits
        nbits += width
        while nbits >= 8:
            stream.append(bits & 0xFF)
            bits >>= 8
            nbits -= 8
    if nbits:
        stream.append(bits & 0xFF)
    blocks = b"".join(bytes([len(stream[i:i + 255])]) + stream[i:i + 255] for i in range(0, len(stream), 255))
    return bytes([min_code_size]) + blocks + b"\x00"


def gif(w, h):
    """A 256-colour GIF, one frame covering the screen."""
    pal, idx = palette_image(w, h)
    pal += [(i, i, i) for i in range(256 - len(pal))]
    pixels = [p for row in idx for p in row]
    return (b"GIF89a" + struct.pack("<HHBBB", w, h, 0xF7, 0, 0) + bytes(v for rgb in pal for v in rgb) +
            b"\x2c" + struct.pack("<HHHHB", 0, 0, w, h, 0) + lzw_literal(pixels, 8) + b"\x3b")


def gif_frame(w, h):
    """What stb_image does on a first frame beyond the plain case: a 30x20 frame at (5, 7) of a w x h screen
    whose background index (2) is not 0, a comment and a graphic control extension with a transparent index
    (5) before it, a local colour table of 8 entries while the LZW codes reach 15 (indices past the table),
    interlaced rows; then a second frame that must not be drawn."""
    fw, fh, fx, fy = 30, 20, 5, 7
    glob = [(10, 20, 30), (250, 250, 250), (200, 60, 10), (0, 128, 255)]
    local = [((i * 53) % 256, (i * 101 + 40) % 256, (255 - i * 29) % 256) for i in range(8)]
    idx = [[(x * 3 + y * 5 + (x // 4) * (y // 3)) % 16 for x in range(fw)] for y in range(fh)]
    order = [y for y0, dy in ((0, 8), (4, 8), (2, 4), (1, 2)) for y in range(y0, fh, dy)]
    pixels = [p for y in order for p in idx[y]]
    return (b"GIF89a" + struct.pack("<HHBBB", w, h, 0x91, 2, 0) + bytes(v for rgb in glob for v in rgb) +
            b"\x21\xfe" + b"\x0bkestrel gif" + b"\x00" +
            b"\x21\xf9\x04\x01\x00\x00\x05\x00" +
            b"\x2c" + struct.pack("<HHHHB", fx, fy, fw, fh, 0x80 | 0x40 | 2) + bytes(v for rgb in local for v in rgb) +
            lzw_literal(pixels, 4) +
            b"\x2c" + struct.pack("<HHHHB", 0, 0, 4, 4, 0) + lzw_literal([1] * 16, 2) + b"\x3b")


def write_images(tmp):
    """The test images, name -> bytes; the JPEGs only where cjpeg is installed."""
    images = {
        "rgb_37x23.png": png(37, 23, 2, rgb_rows(37, 23)),
        "rgba_200x150.png": png(200, 150, 6, rgb_rows(200, 150, 4)),
        "gray_13x57.png": png(13, 57, 0, [[pattern(13, 57, x, y, 1) for x in range(13)] for y in range(57)]),
        "palette_64x48.png": png(64, 48, 3, palette_image(64, 48)[1], palette=palette_image(64, 48)[0]),
        # 16 bits a sample: stb keeps the high byte.
        "rgb16_19x11.png": png(19, 11, 2, [[b for v in row for b in ((v * 257 + 3 * i) & 0xFFFF).to_bytes(2, "big")]
                                           for i, row in enumerate(rgb_rows(19, 11))], depth=16),
        # Adam7, RGBA; 2-bit grey with a tRNS colour; 16-bit grey+alpha; 4-bit palette with tRNS alphas.
        "adam7_33x21.png": png(33, 21, 6, rgb_rows(33, 21, 4), interlace=True),
        "gray2_29x7.png": png(29, 7, 0, [pack([pattern(29, 7, x, y, 0) >> 6 for x in range(29)], 2) for y in range(7)],
                              depth=2, trns=b"\x00\x02"),
        "graya16_17x9.png": png(17, 9, 4, [[b for x in range(17)
                                            for v in ((pattern(17, 9, x, y, 1) * 257 + x * 37) & 0xFFFF,
                                                      (x * 3000 + y * 7) & 0xFFFF)
                                            for b in v.to_bytes(2, "big")] for y in range(9)], depth=16),
        "palette4_23x15.png": png(23, 15, 3, [pack([(pattern(23, 15, x, y, 2) // 16) % 12 for x in range(23)], 4)
                                              for y in range(15)], depth=4,
                                  palette=palette_image(1, 1)[0][:12], trns=bytes(range(0, 240, 40))),
        "lzw_40x30.gif": gif(40, 30),
        "frame_48x40.gif": gif_frame(48, 40),
    }
    cjpeg = shutil.which("cjpeg")
    if cjpeg:
        ppm = os.path.join(tmp, "src.ppm")
        with open(ppm, "wb") as f:
            f.write(b"P6 96 64 255\n" + bytes(v for row in rgb_rows(96, 64) for v in row))
        for name, extra in (("baseline_96x64.jpg", []), ("progressive_96x64.jpg", ["-progressive"]),
                            ("gray_96x64.jpg", ["-grayscale"]), ("rgb_96x64.jpg", ["-rgb"])):
            images[name] = subprocess.run([cjpeg, "-quality", "85", *extra, ppm], check=True,
                                          capture_output=True).stdout
    else:
        print("cjpeg not found (apt-get install libjpeg-turbo-progs): the JPEG cells are not recorded", file=sys.stderr)
    os.makedirs(MEDIA, exist_ok=True)
    for name, data in images.items():
        if len(data) > 30_000:
            sys.exit(f"{name}: {len(data)} bytes, keep the stored images small")
        with open(os.path.join(MEDIA, name), "wb") as f:
            f.write(data)
    return images


# --- the cases ------------------------------------------------------------------------------------------

# image, mode and its numbers (resize W H | ratio ALIGN MIN_PX MAX_PX), algo, pad[, pad colour]
CASES = [
    ("rgb_37x23.png", "resize", [64, 64], "bicubic", "ceil"),        # fixed_size's default: up, letterboxed
    ("rgb_37x23.png", "resize", [64, 64], "bilinear", "none"),       # up, stretched
    ("rgb_37x23.png", "resize", [16, 16], "bicubic", "none"),        # down
    ("rgb_37x23.png", "resize", [20, 9], "bilinear", "none"),
    ("rgb_37x23.png", "resize", [37, 50], "bicubic", "none"),        # the vertical pass alone
    ("rgb_37x23.png", "resize", [10, 23], "bicubic", "none"),        # the horizontal pass alone
    ("rgb_37x23.png", "resize", [37, 23], "bicubic", "ceil"),        # the same size: a copy
    ("rgb_37x23.png", "resize", [30, 30], "lanczos", "none"),
    ("rgb_37x23.png", "resize", [48, 48], "bicubic", "nearest"),
    ("rgb_37x23.png", "resize", [50, 40], "bicubic", "ceil", [127, 127, 127]),
    ("rgba_200x150.png", "resize", [224, 224], "bicubic", "ceil"),   # CLIP-like: up, letterboxed
    ("rgba_200x150.png", "resize", [64, 64], "bicubic", "ceil"),     # down, letterboxed
    ("rgba_200x150.png", "resize", [33, 77], "bilinear", "none"),
    ("rgba_200x150.png", "resize", [56, 56], "bilinear", "ceil", [122, 116, 104]),
    ("rgba_200x150.png", "ratio", [28, 3136, 12544], "bicubic", "ceil"),  # dyn_size over max_pixels
    ("rgba_200x150.png", "ratio", [16, 0, 0], "bicubic", "none"),
    ("gray_13x57.png", "resize", [32, 32], "bicubic", "ceil"),
    ("gray_13x57.png", "resize", [7, 100], "bilinear", "none"),
    ("gray_13x57.png", "ratio", [16, 4096, 100000], "bicubic", "ceil"),  # dyn_size under min_pixels
    ("palette_64x48.png", "resize", [96, 96], "bicubic", "ceil"),
    ("palette_64x48.png", "ratio", [14, 0, 1000], "bilinear", "none"),
    ("rgb16_19x11.png", "resize", [24, 24], "bicubic", "ceil"),
    ("adam7_33x21.png", "resize", [16, 16], "bicubic", "ceil"),
    ("graya16_17x9.png", "resize", [24, 24], "bilinear", "none"),
    ("lzw_40x30.gif", "resize", [32, 32], "bicubic", "ceil"),
    ("frame_48x40.gif", "resize", [32, 32], "bicubic", "ceil"),
    ("baseline_96x64.jpg", "resize", [64, 64], "bicubic", "ceil"),
    ("baseline_96x64.jpg", "resize", [40, 30], "bilinear", "none"),
    ("progressive_96x64.jpg", "resize", [64, 64], "bicubic", "ceil"),
    ("progressive_96x64.jpg", "ratio", [28, 3136, 4000], "bicubic", "ceil"),
]

# calc_size_preserved_ratio alone: W H ALIGN MIN_PX MAX_PX (Qwen2.5-VL's 28 / 3136 / 12845056, Gemma 4's
# and Pixtral's patch*merge, odd sizes, both bounds, disabled bounds).
SIZES = [
    [1000, 700, 28, 3136, 12845056], [4000, 3000, 28, 3136, 12845056], [4000, 3000, 28, 3136, 1003520],
    [1, 1, 28, 3136, 12845056], [13, 57, 16, 4096, 100000], [200, 150, 28, 3136, 12544],
    [1920, 1080, 32, 65536, 1048576], [1080, 1920, 32, 65536, 1048576], [33, 4000, 14, 784, 200704],
    [4000, 33, 14, 784, 200704], [640, 480, 28, 0, 0], [641, 481, 28, 0, 200000], [27, 29, 28, 3136, 0],
    [1023, 767, 56, 12544, 262144], [3000, 3000, 16, 0, 589824], [100, 10000, 28, 3136, 50000],
]


def sha256(data):
    return hashlib.sha256(data).hexdigest()


# The bounds the test asserts on kestrel's JPEG pixels against llama.cpp's: the measured difference plus these.
BOUND_MAX, BOUND_MEAN = 2, 0.25


def djpeg_rgb(path):
    """libjpeg-turbo's RGB8 pixels of a JPEG with djpeg's (and kestrel's) default settings."""
    ppm = subprocess.run(["djpeg", "-rgb", "-pnm", path], check=True, capture_output=True).stdout
    fields, pos = [], 0
    while len(fields) < 4:  # P6 W H MAXVAL, whitespace-separated, then one whitespace byte
        while ppm[pos:pos + 1].isspace():
            pos += 1
        end = pos
        while not ppm[end:end + 1].isspace():
            end += 1
        fields.append(ppm[pos:end])
        pos = end
    if fields[0] != b"P6" or fields[3] != b"255":
        sys.exit(f"{path}: djpeg wrote {fields}")
    return ppm[pos + 1:]


def jpeg_difference(ours, theirs):
    """Largest absolute difference per channel and the mean absolute difference of two RGB8 buffers."""
    diffs = [abs(a - b) for a, b in zip(ours, theirs)]
    return [max(diffs[c::3]) for c in range(3)], sum(diffs) / len(diffs)


def build_oracle(dest, tmp):
    exe, bin_dir = os.path.join(tmp, "mtmd_image_oracle"), os.path.join(dest, "build", "bin")
    subprocess.run([os.environ.get("CXX", "c++"), "-std=c++17", "-O3", "-DNDEBUG",
                    os.path.join(HERE, "mtmd_image_oracle.cpp"), "-I" + os.path.join(dest, "tools", "mtmd"),
                    "-I" + os.path.join(dest, "include"), "-I" + os.path.join(dest, "ggml", "include"),
                    "-I" + os.path.join(dest, "vendor"), "-L" + bin_dir, "-lmtmd", "-lllama", "-lggml", "-lggml-base",
                    "-Wl,-rpath," + bin_dir, "-o", exe], check=True)
    return exe


def run_oracle(oracle, args):
    res = json.loads(subprocess.run([oracle, *map(str, args)], capture_output=True, text=True).stdout)
    if "error" in res:
        sys.exit(f"{args}: llama.cpp: {res['error']}")
    return res


def record(dest):
    commit = subprocess.run(["git", "-C", dest, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    out = {"note": "llama.cpp's decoded, resized and normalised pixels (sha256); see mtmd_image_cells.py",
           "llama_cpp": commit, "norms": {k: {"mean": m, "std": s} for k, (m, s) in NORMS.items()},
           "images": {}, "cases": [], "sizes": []}
    with tempfile.TemporaryDirectory() as tmp:
        images = write_images(tmp)
        oracle = build_oracle(dest, tmp)
        references = {}  # llama.cpp's pixels of a JPEG (sha256) -> the PNG that holds them
        for name, data in images.items():
            prefix = os.path.join(tmp, "img")
            res = run_oracle(oracle, [os.path.join(MEDIA, name), prefix, "resize", 1, 1, "bilinear", "none"])
            with open(prefix + ".decoded", "rb") as f:
                pixels = f.read()
            cell = {"file_sha256": sha256(data), "size": res["decoded"], "rgb_sha256": sha256(pixels)}
            if name.endswith(".jpg"):
                w, h = res["decoded"]
                if cell["rgb_sha256"] not in references:
                    ref = name[:-len(".jpg")] + ".llama.png"
                    with open(os.path.join(MEDIA, ref), "wb") as f:
                        f.write(png(w, h, 2, [pixels[y * w * 3:(y + 1) * w * 3] for y in range(h)]))
                    references[cell["rgb_sha256"]] = ref
                cell["llama_rgb_png"] = references[cell["rgb_sha256"]]
                max_abs, mean_abs = jpeg_difference(djpeg_rgb(os.path.join(MEDIA, name)), pixels)
                cell["libjpeg_turbo_vs_llama"] = {
                    "max_abs": max_abs, "mean_abs": round(mean_abs, 4),
                    "max_abs_bound": [m + BOUND_MAX for m in max_abs],
                    "mean_abs_bound": round(mean_abs + BOUND_MEAN, 4)}
            out["images"][name] = cell
        for image, mode, numbers, algo, pad, *color in CASES:
            if image not in images:
                continue
            prefix = os.path.join(tmp, "case")
            args = [os.path.join(MEDIA, image), prefix, mode, *numbers, algo, pad]
            if color:
                args += ["--pad-color", *color[0]]
            for m, s in NORMS.values():
                args += ["--norm", *map(repr, m), *map(repr, s)]
            res = run_oracle(oracle, args)
            cell = {"image": image, "mode": mode, "numbers": numbers, "algo": algo, "pad": pad,
                    "pad_color": color[0] if color else [0, 0, 0], "target": res["target"]}
            with open(prefix + ".resized", "rb") as f:
                cell["resized_sha256"] = sha256(f.read())
            cell["normalized_sha256"] = {}
            for i, k in enumerate(NORMS):
                with open(prefix + f".norm{i}", "rb") as f:
                    cell["normalized_sha256"][k] = sha256(f.read())
            out["cases"].append(cell)
        got = run_oracle(oracle, ["sizes", *[v for s in SIZES for v in s]])["sizes"]
        out["sizes"] = [{"in": s, "out": g} for s, g in zip(SIZES, got)]
    os.makedirs(os.path.dirname(EXPECTED), exist_ok=True)
    with open(EXPECTED, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"{len(out['images'])} images, {len(out['cases'])} cases, {len(out['sizes'])} sizes -> {EXPECTED}")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "record":
        sys.exit(__doc__)
    record(sys.argv[2])
