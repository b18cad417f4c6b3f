#pragma once
// Audio for audio projectors (mmproj/whisper_audio.cpp): decoding untrusted bytes to the mono float32 signal at
// the encoder's sample rate that llama.cpp's libmtmd makes with miniaudio 0.11.25 (mtmd-helper.cpp's
// decode_audio_from_buf: WAV, MP3 or FLAC by magic bytes, f32, 1 channel, the model's rate).
//
// Decoding is by Debian's maintained libsndfile (WAV in every PCM and float encoding, FLAC through libFLAC, MP3
// through libmpg123); the mix to mono and the resampling are miniaudio's arithmetic, reproduced in
// audio_resample.h. WAV and FLAC are lossless, so their samples are llama.cpp's to the bit; MP3 decoders differ
// in their last bits (libmpg123 against miniaudio's dr_mp3), docs/multimodal.md gives the measured difference.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kestrel {

// What an untrusted audio file may cost before it is decoded.
struct AudioLimits {
  size_t max_bytes = size_t{64} << 20;  // the encoded file
  double max_seconds = 600;             // its length from the header, checked before decoding
};

struct AudioInfo {
  int sample_rate = 0, channels = 0;
  int64_t frames = 0;
  const char* format = "";  // "WAV", "FLAC" or "MP3"
};

// True when the bytes start as a WAV (RIFF/WAVE), FLAC (fLaC) or MP3 (ID3 or an MPEG frame sync) file does: the
// test llama.cpp's libmtmd uses to tell audio from an image.
bool looks_like_audio(std::span<const uint8_t> bytes);

// Decodes a WAV, FLAC or MP3 file to mono float32 at `rate` Hz (miniaudio's mix and linear resampler, as
// llama.cpp). The header's length is checked against `limits` before anything is decoded. Throws kestrel::Error
// naming `what` (e.g. "messages[0].content[1]") and the problem on any fault of the input (a truncated file
// included). info, when given, receives what the header says. Thread-safe.
std::vector<float> decode_audio(std::span<const uint8_t> bytes, const AudioLimits& limits, const std::string& what,
                                int rate, AudioInfo* info = nullptr);

}  // namespace kestrel
