#pragma once
// Images for vision projectors: decoding untrusted bytes to RGB8, and the preprocessing llama.cpp's
// tools/mtmd applies before the encoder, reproduced bit for bit (docs/multimodal.md).
//
// Decoding is by Debian's maintained, OSS-Fuzz-fuzzed libraries, to the RGB8 llama.cpp's stb_image makes
// with stbi_load_from_memory(..., 3): libpng (bit-exact on every PNG kind), libjpeg-turbo (JPEG: another IDCT
// and upsampling than stb's, a mean difference under 0.1 of a level, colour spaces chosen as stb chooses
// them), giflib (the first frame, rendered as stb renders it, bit-exact) and libwebp (llama.cpp reads WebP
// only through ffmpeg). stb_image itself is not used: Debian's v2.27 crashes on hostile JPEGs
// (docs/multimodal.md, "Why not stb_image").
// Resizing is llama.cpp's img_tool (mtmd-image.cpp): Pillow's fixed-point separable resampling and its
// letterbox. tests/compat/mtmd_image_cells.py records llama.cpp's own output for tests/unit/test_media_image.cpp.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace kestrel {

// Interleaved RGB8, row-major, no padding: rgb.size() == width * height * 3.
struct ImageU8 {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;
};

// What an untrusted image may cost before it is decoded.
struct ImageLimits {
  size_t max_bytes = size_t{20} << 20;  // the encoded file
  int64_t max_pixels = 50'000'000;      // width * height from the header, checked before decoding
};

// Decodes PNG, JPEG, GIF (first frame) or WebP (detected by magic bytes) to RGB8: alpha is dropped (not
// composited), grey and palette images expanded, 16-bit samples reduced to their high byte, CMYK and YCCK
// JPEGs converted as stb_image converts them. The header's size is checked against `limits` before anything
// is decompressed. Throws kestrel::Error naming `what` (e.g. "messages[0].content[1]") and the problem on any
// fault of the input (a truncated file included). Thread-safe.
ImageU8 decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits, const std::string& what);

enum class ResizeAlgo { Bilinear, Bicubic, Lanczos };
// How resize_padded fits the image into the target (llama.cpp's pad_style, clip-model.h):
// None stretches to the target; Ceil (llama.cpp's default) keeps the aspect ratio, rounds the scaled
// size up and centres it on the pad colour; Nearest rounds the size and the offsets to nearest.
enum class Pad { None, Ceil, Nearest };

// Pillow's ImagingResample as llama.cpp's img_tool::resize_pillow: separable (horizontal pass, then
// vertical; a pass whose size does not change is skipped), 22-bit fixed-point weights. Both sizes 1..65536.
ImageU8 resize_pillow(const ImageU8& image, int width, int height, ResizeAlgo algo);

// llama.cpp's img_tool::resize: to exactly width x height, stretched or letterboxed (see Pad);
// an image already of that size is copied unchanged.
ImageU8 resize_padded(const ImageU8& image, int width, int height, ResizeAlgo algo, Pad pad,
                      std::array<uint8_t, 3> pad_color = {0, 0, 0});

// llama.cpp's calc_size_preserved_ratio (transformers' "smart_resize"): the size, each side a multiple
// of `align`, that keeps the aspect ratio within [min_pixels, max_pixels] (0 disables a bound), in
// float32 arithmetic as theirs. {0, 0} for an empty input size.
std::pair<int, int> size_preserved_ratio(int width, int height, int align, int64_t min_pixels, int64_t max_pixels);

// Planar CHW float32, as clip uploads an image: f = u8 / 255.0f, then (f - mean[c]) / std_dev[c].
std::vector<float> to_planar_normalized(const ImageU8& image, const float mean[3], const float std_dev[3]);

}  // namespace kestrel
