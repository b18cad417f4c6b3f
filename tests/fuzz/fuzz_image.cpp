// libFuzzer target: any byte string given to the image decoder must either decode to an RGB8 image within
// the limits or throw kestrel::Error — no crash, no other exception. What decodes is also preprocessed as a
// request's image is: letterboxed to a fixed size, resized to an aspect-preserving size, normalised.
// (libpng, libjpeg-turbo, giflib and libwebp are Debian's shared libraries, not instrumented: the fuzzer's
// coverage guidance sees kestrel's side of the calls (the header checks, the colour-space choice, the GIF
// canvas); ASan still sees what reaches malloc and memcpy. The libraries themselves are fuzzed upstream, in
// OSS-Fuzz.)
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "core/error.h"
#include "media/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kestrel;
  // Small limits: the run's time goes to the decoders' paths, not to large buffers.
  const ImageLimits limits{size_t{1} << 20, int64_t{1} << 18};
  try {
    const ImageU8 img = decode_image(std::span(data, size), limits, "fuzz");
    if (img.width <= 0 || img.height <= 0 || int64_t{img.width} * img.height > limits.max_pixels ||
        img.rgb.size() != static_cast<size_t>(img.width) * img.height * 3)
      std::abort();
    const ImageU8 boxed = resize_padded(img, 24, 24, ResizeAlgo::Bicubic, Pad::Ceil);
    const auto [w, h] = size_preserved_ratio(img.width, img.height, 8, 64, 4096);
    (void)resize_padded(img, w, h, ResizeAlgo::Bilinear, Pad::None);
    const float mean[3] = {0.5f, 0.5f, 0.5f}, std_dev[3] = {0.5f, 0.5f, 0.5f};
    (void)to_planar_normalized(boxed, mean, std_dev);
  } catch (const Error&) {
  }
  return 0;
}
