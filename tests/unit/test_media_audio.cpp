// Audio files for audio projectors (media/audio.h): WAV, FLAC and MP3 told apart by their magic bytes as llama.cpp's
// libmtmd tells them; FLAC (lossless) decodes to the very samples of the WAV it was made from; an MP3 (libmpg123)
// follows the signal it was encoded from; every fault of the input is an error naming the part and the problem,
// never a crash or a silent truncation. (The mix and resampling against llama.cpp's own output:
// test_audio_resample.cpp; whole files through the encoders against llama-mtmd-cli: reference/test_mmproj_cells.cpp.)
#include <gtest/gtest.h>
#include <sndfile.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "media/audio.h"
#include "test_support.h"

namespace kestrel::media_audio_test {

// A 16-bit signal: two tones and a ramp, `channels` interleaved.
std::vector<int16_t> signal(int rate, int channels, int frames) {
  std::vector<int16_t> s;
  for (int i = 0; i < frames; i++)
    for (int c = 0; c < channels; c++)
      s.push_back(static_cast<int16_t>(std::lround(
          9000 * std::sin(2 * M_PI * (440 + 220 * c) * i / rate) + 4000 * std::sin(2 * M_PI * 3000 * i / rate) +
          2000.0 * (i % 97) / 97)));
  return s;
}

// The signal written by libsndfile in `format` (a WAV, FLAC or MP3 file's bytes).
std::string encode(test::TempDir& dir, int format, int rate, int channels, const std::vector<int16_t>& s) {
  const std::string path = dir.file("audio.bin");
  SF_INFO info{};
  info.samplerate = rate;
  info.channels = channels;
  info.format = format;
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  EXPECT_NE(f, nullptr) << sf_strerror(nullptr);
  if (!f) return "";
  sf_writef_short(f, s.data(), static_cast<sf_count_t>(s.size() / static_cast<size_t>(channels)));
  sf_close(f);
  return test::read_text(path);
}

std::span<const uint8_t> bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

std::string error_of(const std::string& file, const AudioLimits& limits = {}) {
  try {
    (void)decode_audio(bytes(file), limits, "messages[0].content[2]", 16000);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MediaAudio, FlacDecodesToTheSamplesOfItsWav) {
  test::TempDir dir;
  const auto s = signal(16000, 2, 12000);
  const std::string wav = encode(dir, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 2, s);
  const std::string flac = encode(dir, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 2, s);
  ASSERT_TRUE(looks_like_audio(bytes(wav)));
  ASSERT_TRUE(looks_like_audio(bytes(flac)));
  AudioInfo wi, fi;
  const std::vector<float> a = decode_audio(bytes(wav), {}, "wav", 16000, &wi);
  const std::vector<float> b = decode_audio(bytes(flac), {}, "flac", 16000, &fi);
  EXPECT_STREQ(wi.format, "WAV");
  EXPECT_STREQ(fi.format, "FLAC");
  EXPECT_EQ(fi.channels, 2);
  EXPECT_EQ(fi.frames, 12000);
  ASSERT_EQ(a.size(), 12000u);
  EXPECT_EQ(a, b);
  // Mono at the same rate: the two channels' mean, s / 32768 each (miniaudio's f32 mix).
  for (size_t i = 0; i < a.size(); i += 997) {
    const float want = (0.0f + s[2 * i] / 32768.0f + s[2 * i + 1] / 32768.0f) / 2;
    EXPECT_EQ(a[i], want) << i;
  }
}

TEST(MediaAudio, Mp3DecodesNearItsSignal) {
  test::TempDir dir;
  const int rate = 16000, frames = 16000;
  const auto s = signal(rate, 1, frames);
  const std::string mp3 = encode(dir, SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III, rate, 1, s);
  ASSERT_FALSE(mp3.empty());
  ASSERT_TRUE(looks_like_audio(bytes(mp3)));
  AudioInfo info;
  const std::vector<float> got = decode_audio(bytes(mp3), {}, "mp3", rate, &info);
  EXPECT_STREQ(info.format, "MP3");
  // A lossy codec with its own delay: the best-aligned correlation with the signal is high.
  ASSERT_GT(got.size(), static_cast<size_t>(frames) * 9 / 10);
  double best = 0;
  for (int lag = 0; lag < 3000; lag++) {
    double xy = 0, xx = 0, yy = 0;
    for (int i = 0; i + lag < static_cast<int>(got.size()) && i < frames; i += 3) {
      const double x = s[static_cast<size_t>(i)] / 32768.0, y = got[static_cast<size_t>(i + lag)];
      xy += x * y, xx += x * x, yy += y * y;
    }
    best = std::max(best, xy / std::sqrt(xx * yy + 1e-30));
  }
  EXPECT_GT(best, 0.95);
}

TEST(MediaAudio, EveryFaultIsAnErrorNamingThePart) {
  test::TempDir dir;
  const auto s = signal(16000, 1, 8000);
  const std::string wav = encode(dir, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 1, s);
  const std::string flac = encode(dir, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 16000, 1, s);
  auto has = [](const std::string& e, const std::string& what) {
    EXPECT_NE(e.find("messages[0].content[2]"), std::string::npos) << e;
    EXPECT_NE(e.find(what), std::string::npos) << e;
  };
  has(error_of("OggS\0\0\0\0 and more bytes"), "not a WAV, FLAC or MP3 file");
  has(error_of("RIFF"), "not a WAV, FLAC or MP3 file");  // too short to tell
  has(error_of(wav.substr(0, wav.size() - 1000)), "truncated WAV");
  has(error_of(wav.substr(0, 40)), "WAV");
  has(error_of(flac.substr(0, flac.size() / 2)), "truncated FLAC");
  has(error_of(flac.substr(0, 20)), "FLAC");
  std::string garbage = wav;
  for (size_t i = 12; i < 44; i++) garbage[i] = static_cast<char>(0xA5);
  has(error_of(garbage), "WAV");
  AudioLimits small;
  small.max_bytes = 1000;
  has(error_of(wav, small), "over the limit of 1000 bytes");
  AudioLimits short_clip;
  short_clip.max_seconds = 0.25;
  has(error_of(wav, short_clip), "0.5 s, over the limit of 0.25 s");
  // A header naming zero channels or an absurd rate.
  std::string odd = wav;
  odd[22] = 0, odd[23] = 0;  // channels
  has(error_of(odd), "WAV");
  // Every prefix of a small WAV and FLAC: an error or samples, never a crash.
  for (const std::string* f : {&wav, &flac})
    for (size_t n = 0; n < f->size(); n += 37) {
      try {
        (void)decode_audio(bytes(f->substr(0, n)), {}, "prefix", 16000);
      } catch (const Error&) {
      }
    }
}

}  // namespace kestrel::media_audio_test
