#include "media/audio.h"

#include <fmt/format.h>
#include <sndfile.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "media/audio_resample.h"

namespace kestrel {
namespace {
namespace audio_impl {

enum class Format { Unknown, Wav, Flac, Mp3 };

// mtmd-helper.cpp's is_audio_file, format by format.
Format detect(std::span<const uint8_t> b) {
  if (b.size() < 12) return Format::Unknown;
  if (std::memcmp(b.data(), "RIFF", 4) == 0 && std::memcmp(b.data() + 8, "WAVE", 4) == 0) return Format::Wav;
  if (std::memcmp(b.data(), "fLaC", 4) == 0) return Format::Flac;
  if (std::memcmp(b.data(), "ID3", 3) == 0 || (b[0] == 0xFF && (b[1] & 0xE0) == 0xE0)) return Format::Mp3;
  return Format::Unknown;
}

const char* name(Format f) {
  switch (f) {
    case Format::Wav: return "WAV";
    case Format::Flac: return "FLAC";
    case Format::Mp3: return "MP3";
    case Format::Unknown: break;
  }
  return "unknown";
}

// libsndfile reads through these callbacks from the bytes in memory (SF_VIRTUAL_IO).
struct Memory {
  std::span<const uint8_t> bytes;
  sf_count_t at = 0;
};

sf_count_t mem_length(void* u) { return static_cast<sf_count_t>(static_cast<Memory*>(u)->bytes.size()); }

sf_count_t mem_seek(sf_count_t offset, int whence, void* u) {
  auto* m = static_cast<Memory*>(u);
  const auto size = static_cast<sf_count_t>(m->bytes.size());
  sf_count_t to = whence == SEEK_SET ? offset : whence == SEEK_CUR ? m->at + offset : size + offset;
  m->at = std::clamp<sf_count_t>(to, 0, size);
  return m->at;
}

sf_count_t mem_read(void* dst, sf_count_t n, void* u) {
  auto* m = static_cast<Memory*>(u);
  const sf_count_t left = static_cast<sf_count_t>(m->bytes.size()) - m->at;
  const sf_count_t k = std::clamp<sf_count_t>(n, 0, left);
  if (k > 0) std::memcpy(dst, m->bytes.data() + m->at, static_cast<size_t>(k));
  m->at += k;
  return k;
}

sf_count_t mem_write(const void*, sf_count_t, void*) { return 0; }
sf_count_t mem_tell(void* u) { return static_cast<Memory*>(u)->at; }

struct Closer {
  void operator()(SNDFILE* f) const { sf_close(f); }
};

// A WAV whose data chunk says it holds more bytes than the file has: cut off (libsndfile reads what is there and
// says nothing). The RIFF chunks walked from the start; a streamed WAV's unknown size (0xFFFFFFFF) is not checked.
bool wav_cut_off(std::span<const uint8_t> b) {
  auto u32 = [&](size_t at) {
    return static_cast<uint32_t>(b[at]) | static_cast<uint32_t>(b[at + 1]) << 8 | static_cast<uint32_t>(b[at + 2]) << 16 |
           static_cast<uint32_t>(b[at + 3]) << 24;
  };
  size_t at = 12;
  while (at + 8 <= b.size()) {
    const uint32_t size = u32(at + 4);
    if (std::memcmp(b.data() + at, "data", 4) == 0) return size != 0xFFFFFFFFu && size > b.size() - at - 8;
    at += 8 + static_cast<size_t>(size) + (size & 1);
  }
  return true;  // no data chunk before the end
}

// The most samples (frames x channels) decoded from one file: 600 s of 48 kHz stereo fits.
constexpr int64_t kMostSamples = int64_t{64} << 20;

}  // namespace audio_impl
}  // namespace

bool looks_like_audio(std::span<const uint8_t> bytes) { return audio_impl::detect(bytes) != audio_impl::Format::Unknown; }

std::vector<float> decode_audio(std::span<const uint8_t> bytes, const AudioLimits& limits, const std::string& what,
                                int rate, AudioInfo* info) {
  using namespace audio_impl;
  if (bytes.size() > limits.max_bytes)
    throw Error(fmt::format("{}: audio file of {} bytes, over the limit of {} bytes", what, bytes.size(),
                            limits.max_bytes));
  const Format f = detect(bytes);
  if (f == Format::Unknown)
    throw Error(fmt::format("{}: not a WAV, FLAC or MP3 file (unrecognised header)", what));
  Memory mem{bytes};
  SF_VIRTUAL_IO io{mem_length, mem_seek, mem_read, mem_write, mem_tell};
  SF_INFO si{};
  std::unique_ptr<SNDFILE, Closer> file(sf_open_virtual(&io, SFM_READ, &si, &mem));
  if (!file)
    throw Error(fmt::format("{}: corrupt or truncated {} audio (libsndfile: {})", what, name(f), sf_strerror(nullptr)));
  if (si.channels < 1 || si.channels > 8 || si.samplerate < 1000 || si.samplerate > 384000)
    throw Error(fmt::format("{}: {} audio of {} channels at {} Hz: Kestrel takes 1 to 8 channels at 1 to 384 kHz",
                            what, name(f), si.channels, si.samplerate));
  if (si.frames < 0 || si.frames == SF_COUNT_MAX)
    throw Error(fmt::format("{}: {} audio of unknown length", what, name(f)));
  const double seconds = static_cast<double>(si.frames) / si.samplerate;
  if (seconds > limits.max_seconds || si.frames * si.channels > kMostSamples)
    throw Error(fmt::format("{}: {} audio of {:.1f} s, over the limit of {:g} s", what, name(f), seconds,
                            limits.max_seconds));
  if (si.frames == 0) throw Error(fmt::format("{}: {} audio holds no samples", what, name(f)));
  if (f == Format::Wav && wav_cut_off(bytes))
    throw Error(fmt::format("{}: corrupt or truncated WAV audio (its data chunk runs past the end of the file)", what));
  if (info) *info = {si.samplerate, si.channels, si.frames, name(f)};
  std::vector<float> samples(static_cast<size_t>(si.frames * si.channels));
  const sf_count_t got = sf_readf_float(file.get(), samples.data(), si.frames);
  // A lossless file that ends before its header says is cut off; an MP3's length is the decoder's estimate.
  if (got <= 0 || (got < si.frames && f != Format::Mp3))
    throw Error(fmt::format("{}: corrupt or truncated {} audio ({} of {} frames decoded{}{})", what, name(f),
                            std::max<sf_count_t>(got, 0), si.frames, sf_error(file.get()) ? ": " : "",
                            sf_error(file.get()) ? sf_strerror(file.get()) : ""));
  samples.resize(static_cast<size_t>(got * si.channels));
  // (dr_wav maps unsigned 8-bit samples to floats by u * 2/255 - 1, libsndfile by (u - 128) / 128.)
  const bool pcm8 = (si.format & SF_FORMAT_SUBMASK) == SF_FORMAT_PCM_U8;
  return to_mono_at_rate(samples, si.channels, si.samplerate, rate,
                         pcm8 ? AudioSampleCoding::Pcm8 : AudioSampleCoding::Exact);
}

}  // namespace kestrel
