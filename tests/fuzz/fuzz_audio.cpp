// libFuzzer target: any byte string given to the audio decoder must either decode to mono float32 samples at the
// asked rate within the limits or throw kestrel::Error — no crash, no other exception. Decoded samples must be
// finite, and as many as miniaudio's length rule gives for the header's frames.
// (libsndfile, libFLAC and libmpg123 are Debian's shared libraries, not instrumented: the fuzzer's coverage sees
// kestrel's side (the magic bytes, the WAV chunk walk, the limits, the mix and resampler); ASan still sees what
// reaches malloc and memcpy. libsndfile is fuzzed upstream, in OSS-Fuzz.)
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "core/error.h"
#include "media/audio.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kestrel;
  AudioLimits limits;  // small: the run's time goes to the decoders' paths, not to long signals
  limits.max_bytes = size_t{1} << 20;
  limits.max_seconds = 4;
  try {
    AudioInfo info;
    const std::vector<float> s = decode_audio(std::span(data, size), limits, "fuzz", 16000, &info);
    if (s.empty() || info.channels < 1 || info.sample_rate <= 0 ||
        s.size() > static_cast<size_t>(limits.max_seconds * 16000) + 16)
      std::abort();
    for (float v : s)
      if (!std::isfinite(v)) std::abort();
  } catch (const Error&) {
  }
  return 0;
}
