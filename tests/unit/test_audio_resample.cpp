// Audio mix and resampling (src/media/audio_resample.h) against llama.cpp's own output: the mono float32
// samples mtmd-helper.cpp's decode_audio_from_buf (miniaudio 0.11.25's ma_decoder) makes of generated WAV
// files, recorded by tests/compat/audio_cells.py into tests/reference/audio_resample.json. The files are
// integer arithmetic only, so this test makes the same samples and the same WAV bytes (their sha256 is
// checked first) without reading any file but the JSON; it passes the floats libsndfile decodes those WAVs
// to (16-bit s/32768, 8-bit (u-128)/128, 24-bit v/2^23, float as stored) through to_mono_at_rate and asks
// for miniaudio's floats to the bit: the sha256 of all of them and a sampled subset's exact values (the
// largest difference is reported when they differ). Then that the check discriminates: another low-pass
// order or another rate is far off; the length rule; the refusals.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "media/audio_resample.h"
#include "sha256.h"

namespace kestrel::audio_resample_test {

const std::string kCells = std::string(KESTREL_SOURCE_DIR) + "/tests/reference/audio_resample.json";

using test::sha256_hex;

const nlohmann::json& cells() {
  static const nlohmann::json j = [] {
    std::ifstream in(kCells, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + kCells);
    return nlohmann::json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  }();
  return j;
}

// audio_cells.py's generate(): per channel, magic-circle oscillators plus LCG noise, in 24-bit units.
// Python's >> floors, as C++20's >> of a negative value does; the LCG wraps in 64 bits in both.
std::vector<int32_t> generate(const nlohmann::json& p) {
  struct Osc {
    int64_t x, y, e;
  };
  const int channels = p["channels"];
  std::vector<std::vector<Osc>> osc(static_cast<size_t>(channels));
  for (int c = 0; c < channels; c++)
    for (const auto& t : p["tones"][c]) osc[c].push_back({t["amp"].get<int64_t>(), 0, t["e"].get<int64_t>()});
  uint64_t state = p["seed"].get<uint64_t>();
  const int64_t noise = p["noise"];
  const int64_t frames = p["frames"];
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(frames * channels));
  for (int64_t f = 0; f < frames; f++) {
    for (int c = 0; c < channels; c++) {
      int64_t v = 0;
      for (Osc& o : osc[c]) {
        v += o.x;
        o.x -= (o.e * o.y) >> 16;
        o.y += (o.e * o.x) >> 16;
      }
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      v += ((static_cast<int64_t>(state >> 41) - (int64_t{1} << 22)) * noise) >> 8;
      out.push_back(static_cast<int32_t>(std::clamp<int64_t>(v, -(int64_t{1} << 23), (int64_t{1} << 23) - 1)));
    }
  }
  return out;
}

// audio_cells.py's wav_bytes(): a 44-byte header (PCM tag 1, float tag 3) and the samples.
std::vector<uint8_t> wav_bytes(const nlohmann::json& p, const std::vector<int32_t>& v24) {
  const std::string coding = p["coding"];
  const uint32_t channels = p["channels"], rate = p["rate"];
  std::vector<uint8_t> data;
  auto put = [&](uint32_t x, int bytes) {
    for (int i = 0; i < bytes; i++) data.push_back(static_cast<uint8_t>(x >> (8 * i)));
  };
  uint16_t bits = 0, tag = 1;
  for (int32_t v : v24) {
    if (coding == "s16") bits = 16, put(static_cast<uint32_t>(v >> 8), 2);
    else if (coding == "u8") bits = 8, put(static_cast<uint32_t>((v >> 16) + 128), 1);
    else if (coding == "s24") bits = 24, put(static_cast<uint32_t>(v), 3);
    else if (coding == "f32") bits = 32, tag = 3, put(std::bit_cast<uint32_t>(static_cast<float>(v) / 8388608.0f), 4);
    else throw std::runtime_error("unknown coding " + coding);
  }
  std::vector<uint8_t> w;
  auto put_w = [&](uint32_t x, int bytes) {
    for (int i = 0; i < bytes; i++) w.push_back(static_cast<uint8_t>(x >> (8 * i)));
  };
  auto tag4 = [&](const char* s) {
    for (int i = 0; i < 4; i++) w.push_back(static_cast<uint8_t>(s[i]));
  };
  const uint32_t block = channels * bits / 8;
  tag4("RIFF"), put_w(4 + 8 + 16 + 8 + static_cast<uint32_t>(data.size()), 4), tag4("WAVE");
  tag4("fmt "), put_w(16, 4), put_w(tag, 2), put_w(channels, 2), put_w(rate, 4), put_w(rate * block, 4);
  put_w(block, 2), put_w(bits, 2);
  tag4("data"), put_w(static_cast<uint32_t>(data.size()), 4);
  w.insert(w.end(), data.begin(), data.end());
  return w;
}

// The interleaved floats libsndfile's sf_readf_float gives for that WAV (normalised: 16-bit s * 1/0x8000,
// 8-bit (u - 128) * 1/0x80, 24-bit read as s << 8 times 1/0x80000000, float as stored; all exact).
std::vector<float> libsndfile_floats(const nlohmann::json& p, const std::vector<int32_t>& v24) {
  const std::string coding = p["coding"];
  std::vector<float> f;
  f.reserve(v24.size());
  for (int32_t v : v24) {
    if (coding == "s16") f.push_back(static_cast<float>(v >> 8) / 32768.0f);
    else if (coding == "u8") f.push_back(static_cast<float>(v >> 16) / 128.0f);
    else f.push_back(static_cast<float>(v) / 8388608.0f);  // s24, f32
  }
  return f;
}

struct Input {
  std::vector<float> samples;
  int channels = 0, rate = 0;
  AudioSampleCoding coding = AudioSampleCoding::Exact;
};

Input input_of(const std::string& file) {
  const auto& p = cells()["files"][file];
  const std::vector<int32_t> v24 = generate(p);
  const std::vector<uint8_t> wav = wav_bytes(p, v24);
  EXPECT_EQ(sha256_hex(wav.data(), wav.size()), p["wav_sha256"].get<std::string>())
      << file << ": the regenerated WAV is not the one llama.cpp decoded";
  return {libsndfile_floats(p, v24), p["channels"], p["rate"],
          p["coding"] == "u8" ? AudioSampleCoding::Pcm8 : AudioSampleCoding::Exact};
}

struct Comparison {
  bool hash_equal = false, length_equal = false;
  double max_abs = 0;    // over the recorded samples (all of them differ by this or less only if hash_equal)
  size_t differing = 0;  // recorded samples whose bits differ
};

Comparison compare(const nlohmann::json& cell, const std::vector<float>& out) {
  Comparison c;
  c.length_equal = out.size() == cell["frame_count"].get<size_t>();
  c.hash_equal = sha256_hex(out.data(), out.size() * sizeof(float)) == cell["f32_sha256"].get<std::string>();
  const size_t stride = cell["stride"];
  auto check = [&](size_t i, uint32_t bits) {
    const float want = std::bit_cast<float>(bits);
    const float got = i < out.size() ? out[i] : NAN;
    if (std::bit_cast<uint32_t>(got) != bits) c.differing++;
    c.max_abs = std::max(c.max_abs, std::isnan(got) ? INFINITY : std::fabs(static_cast<double>(got) - want));
  };
  const auto& sampled = cell["sampled_bits"];
  for (size_t k = 0; k < sampled.size(); k++) check(k * stride, sampled[k].get<uint32_t>());
  const auto& tail = cell["tail_bits"];
  const size_t n = cell["frame_count"];
  for (size_t k = 0; k < tail.size(); k++) check(n - tail.size() + k, tail[k].get<uint32_t>());
  return c;
}

std::string cell_name(const nlohmann::json& cell) {
  return fmt::format("{} -> {} Hz", cell["file"].get<std::string>(), cell["rate"].get<int>());
}

TEST(AudioResample, MatchesMiniaudioBitForBit) {
  ASSERT_GE(cells()["cells"].size(), 10u);
  for (const auto& cell : cells()["cells"]) {
    SCOPED_TRACE(cell_name(cell));
    const Input in = input_of(cell["file"]);
    const std::vector<float> out = to_mono_at_rate(in.samples, in.channels, in.rate, cell["rate"], in.coding);
    const Comparison c = compare(cell, out);
    EXPECT_TRUE(c.length_equal) << out.size() << " frames, llama.cpp " << cell["frame_count"];
    EXPECT_TRUE(c.hash_equal) << "max abs diff " << c.max_abs << " over the recorded samples, " << c.differing
                              << " of them differ";
    EXPECT_EQ(c.differing, 0u);
    EXPECT_EQ(c.max_abs, 0.0);
    // What miniaudio did not write is zero in llama.cpp's vector, and in ours.
    const size_t read = cell["frames_read"];
    for (size_t i = read; i < out.size(); i++) EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), 0u) << i;
  }
}

// The cells cover what the decoder does differently: the mix (2, 6 and 8 channels), no resampler (equal
// rates), down- and upsampling by integer and non-integer ratios, a trailing zero (frames_read short of
// frame_count), 8-bit's own conversion.
TEST(AudioResample, CellsCoverEveryPath) {
  bool mix_only = false, passthrough = false, down = false, up = false, zero_tail = false, u8 = false;
  for (const auto& cell : cells()["cells"]) {
    const auto& f = cells()["files"][cell["file"].get<std::string>()];
    const int rin = f["rate"], rout = cell["rate"], ch = f["channels"];
    mix_only |= rin == rout && ch > 1;
    passthrough |= rin == rout && ch == 1;
    down |= rin > rout && rin % rout != 0;
    up |= rin < rout && rout % rin != 0;
    zero_tail |= cell["frames_read"] < cell["frame_count"];
    u8 |= f["coding"] == "u8";
  }
  EXPECT_TRUE(mix_only && passthrough && down && up && zero_tail && u8);
}

// The comparison is sharp enough to tell miniaudio's filter and rate from near misses: each of these changes
// the samples by far more than a rounding difference (which would be ~1e-7).
TEST(AudioResample, ADifferentFilterOrRateIsCaught) {
  for (const auto& cell : cells()["cells"]) {
    const int rate = cell["rate"];
    const Input in = input_of(cell["file"]);
    if (in.rate == rate) continue;
    SCOPED_TRACE(cell_name(cell));
    for (int order : {0, 2, 3, 8}) {
      const Comparison c = compare(cell, to_mono_at_rate(in.samples, in.channels, in.rate, rate, in.coding, order));
      EXPECT_FALSE(c.hash_equal) << "order " << order;
      EXPECT_GT(c.max_abs, 1e-3) << "order " << order;
    }
    // 8-bit samples taken as libsndfile's values, not dr_wav's: a difference of up to 1/255 - 1/256.
    if (in.coding == AudioSampleCoding::Pcm8) {
      const Comparison c = compare(cell, to_mono_at_rate(in.samples, in.channels, in.rate, rate));
      EXPECT_FALSE(c.hash_equal);
      EXPECT_GT(c.max_abs, 1e-5);
    }
  }
  // A rate 1 Hz off: another gcd, other filter coefficients and time steps (the length is compared too).
  const auto& cell = cells()["cells"][1];
  const Input in = input_of(cell["file"]);
  std::vector<float> off = to_mono_at_rate(in.samples, in.channels, in.rate + 1, cell["rate"], in.coding);
  off.resize(cell["frame_count"].get<size_t>());
  const Comparison c = compare(cell, off);
  EXPECT_FALSE(c.hash_equal);
  EXPECT_GT(c.max_abs, 1e-3);
}

// ma_calculate_frame_count_after_resampling's length against what the resampler can make: 36000 frames at
// 48 kHz are 12001 frames at 16 kHz of which 12000 are made (one zero), 17641 at 22.05 kHz are 12800 though
// 12801 could be made (the last dropped).
TEST(AudioResample, LengthIsMiniaudios) {
  EXPECT_EQ(miniaudio_output_frames(36000, 48000, 16000), 12001u);
  EXPECT_EQ(miniaudio_output_frames(17641, 22050, 16000), 12800u);
  EXPECT_EQ(miniaudio_output_frames(4801, 8000, 16000), 9602u);
  EXPECT_EQ(miniaudio_output_frames(1000, 16000, 16000), 1000u);
  EXPECT_EQ(miniaudio_output_frames(0, 44100, 16000), 0u);
  for (const auto& cell : cells()["cells"]) {
    const auto& f = cells()["files"][cell["file"].get<std::string>()];
    EXPECT_EQ(miniaudio_output_frames(f["frames"], f["rate"], cell["rate"]), cell["frame_count"].get<size_t>())
        << cell_name(cell);
  }
  // 48 kHz -> 16 kHz: the last of 12001 frames is a zero; the first is always x0 = 0 interpolated at 0.
  std::vector<float> ones(36000, 0.5f);
  const std::vector<float> out = to_mono_at_rate(ones, 1, 48000, 16000);
  ASSERT_EQ(out.size(), 12001u);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_GT(out[11999], 0.4f);
  EXPECT_EQ(out[12000], 0.0f);
}

TEST(AudioResample, MixIsAFloatAverage) {
  // t = 0 + a + b + c; t / 3 in float: not (a + b + c) * (1/3.f), not a double average.
  const std::vector<float> in = {0.1f, 0.7f, -0.3f, 1.0f, 1.0f, 1.0f};
  const std::vector<float> out = to_mono_at_rate(in, 3, 16000, 16000);
  ASSERT_EQ(out.size(), 2u);
  float t = 0;
  t += 0.1f, t += 0.7f, t += -0.3f;
  EXPECT_EQ(std::bit_cast<uint32_t>(out[0]), std::bit_cast<uint32_t>(t / 3.0f));
  EXPECT_EQ(out[1], 1.0f);
  // One channel at its own rate is passed through untouched, -0 included.
  const std::vector<float> mono = {-0.0f, 0.25f};
  const std::vector<float> same = to_mono_at_rate(mono, 1, 16000, 16000);
  EXPECT_EQ(std::bit_cast<uint32_t>(same[0]), std::bit_cast<uint32_t>(-0.0f));
}

TEST(AudioResample, Refusals) {
  const std::vector<float> two(4, 0.0f);
  EXPECT_THROW(to_mono_at_rate(two, 0, 16000, 16000), Error);
  EXPECT_THROW(to_mono_at_rate(two, 9, 16000, 16000), Error);
  EXPECT_THROW(to_mono_at_rate(two, 3, 16000, 16000), Error);  // 4 samples are not whole frames of 3
  EXPECT_THROW(to_mono_at_rate(two, 2, 0, 16000), Error);
  EXPECT_THROW(to_mono_at_rate(two, 2, 16000, 400000), Error);
  EXPECT_THROW(to_mono_at_rate(two, 2, 44100, 16000, AudioSampleCoding::Exact, 9), Error);
  EXPECT_TRUE(to_mono_at_rate({}, 2, 44100, 16000).empty());
}

}  // namespace kestrel::audio_resample_test
