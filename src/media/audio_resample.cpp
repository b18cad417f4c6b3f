#include "media/audio_resample.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>

#include "core/error.h"

// Line numbers are of llama.cpp's vendor/miniaudio/miniaudio.h (0.11.25). Every float32 and double expression
// below is written as miniaudio's, operand for operand and in its order: the filter coefficients are computed
// in double and rounded once, the filter and the interpolation run in float. A reordered sum, a reciprocal
// instead of a division or an FMA would move the low bits of most output samples. llama.cpp's libmtmd is
// built for baseline x86-64, where nothing is contracted into FMAs; so is this library, and the contraction
// is switched off here besides (GCC's optimize pragma, clang's fp pragma in each function that computes), so
// that a -march=native or an AArch64 build still gives x86-64 llama.cpp's samples (measured: with FMAs, most
// samples move by up to 7.5e-8). tests/unit/test_audio_resample.cpp compares with miniaudio's own, to the bit.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif
#if defined(__clang__)
#define KESTREL_NO_FP_CONTRACT _Pragma("clang fp contract(off)")
#else
#define KESTREL_NO_FP_CONTRACT
#endif

namespace kestrel {

// A named namespace inside the anonymous one: the library is compiled in unity batches, where every file's
// anonymous namespace is one and the same.
namespace {
namespace resample_impl {

constexpr double kPi = 3.14159265358979323846264;  // MA_PI_D (12190)

// ma_cosd (12444) is not cos: sin of (pi/2 - x), which differs from cos(x) in the last bit for some x.
double ma_cos(double x) { return std::sin((kPi * 0.5) - x); }

// A second-order section: ma_lpf2's coefficients (ma_lpf2__get_biquad_config, 47774; normalised by a0 and
// rounded to float in ma_biquad_reinit, 47339) and its transposed direct form II step (47372).
struct Biquad {
  float b0 = 0, b1 = 0, b2 = 0, a1 = 0, a2 = 0;
  float r1 = 0, r2 = 0;

  Biquad(uint32_t sample_rate, double cutoff, double q) {
    const double w = 2 * kPi * cutoff / sample_rate;
    const double s = std::sin(w);
    const double c = ma_cos(w);
    const double a = s / (2 * q);
    const double cb0 = (1 - c) / 2, cb1 = 1 - c, cb2 = (1 - c) / 2;
    const double ca0 = 1 + a, ca1 = -2 * c, ca2 = 1 - a;
    b0 = static_cast<float>(cb0 / ca0);
    b1 = static_cast<float>(cb1 / ca0);
    b2 = static_cast<float>(cb2 / ca0);
    a1 = static_cast<float>(ca1 / ca0);
    a2 = static_cast<float>(ca2 / ca0);
  }

  float step(float x) {
    KESTREL_NO_FP_CONTRACT
    const float y = b0 * x + r1;
    r1 = b1 * x - a1 * y + r2;
    r2 = b2 * x - a2 * y;
    return y;
  }
};

// The first-order section of an odd order (ma_lpf1_reinit, 47663; ma_lpf1_process_pcm_frame_f32, 47688).
// miniaudio's default order (4) has none; it is here so that every order a test may set is miniaudio's.
struct OnePole {
  float a = 0, r1 = 0;

  OnePole(uint32_t sample_rate, double cutoff) : a(static_cast<float>(std::exp(-2 * kPi * cutoff / sample_rate))) {}

  float step(float x) {
    KESTREL_NO_FP_CONTRACT
    const float b = 1 - a;
    const float y = b * x + a * r1;
    r1 = y;
    return y;
  }
};

// ma_lpf (ma_lpf_reinit__internal, 48026): order % 2 first-order sections, then order / 2 biquads whose Q
// place their poles as a Butterworth filter's (48110-48118), applied in that order (ma_lpf_process_pcm_frame_f32,
// 48267). At most 8 (MA_MAX_FILTER_ORDER, 4284): one OnePole and four Biquads, held in place.
class LowPass {
 public:
  LowPass(uint32_t sample_rate, double cutoff, int order)
      : n2_(order / 2), one_pole_(order % 2 == 1), pole_(sample_rate, cutoff),
        bq_{make(sample_rate, cutoff, order, 0), make(sample_rate, cutoff, order, 1),
            make(sample_rate, cutoff, order, 2), make(sample_rate, cutoff, order, 3)} {}

  float step(float x) {
    if (one_pole_) x = pole_.step(x);
    for (int i = 0; i < n2_; i++) x = bq_[i].step(x);
    return x;
  }

 private:
  static Biquad make(uint32_t sample_rate, double cutoff, int order, uint32_t i) {
    const auto o = static_cast<uint32_t>(order);
    // (1 + i*k) and order*k are ma_uint32 in miniaudio, converted to double by the multiplication and division.
    const double a = order % 2 == 1 ? static_cast<double>(1 + i * 1) * (kPi / static_cast<double>(o * 1))
                                    : static_cast<double>(1 + i * 2) * (kPi / static_cast<double>(o * 2));
    const double q = 1 / (2 * ma_cos(a));
    return Biquad(sample_rate, cutoff, q);  // unused sections (i >= order / 2) are never stepped
  }

  int n2_;
  bool one_pole_;
  OnePole pole_;
  Biquad bq_[4];
};

// One input frame as miniaudio's decoder holds it after its channel converter: dr_wav's float sample, then
// ma_channel_converter_process_pcm_frames__mono_out (55721) for more than one channel. One channel is a
// passthrough (the WAV backend's mono map equals the default one, ma_channel_map_get_conversion_path, 54459),
// not "0 + x", which would turn -0 into +0.
class MonoSource {
 public:
  MonoSource(const std::vector<float>& interleaved, int channels, AudioSampleCoding coding)
      : data_(interleaved.data()), channels_(static_cast<size_t>(channels)), coding_(coding) {}

  float operator()(size_t frame) const {
    const float* f = data_ + frame * channels_;
    if (channels_ == 1) return sample(f[0]);
    float t = 0;
    for (size_t c = 0; c < channels_; c++) t += sample(f[c]);
    return t / static_cast<float>(channels_);
  }

 private:
  float sample(float s) const {
    KESTREL_NO_FP_CONTRACT
    if (coding_ == AudioSampleCoding::Exact) return s;
    // libsndfile's (u - 128) / 128 back to u, then ma_dr_wav_u8_to_f32 (84012, without
    // MA_DR_WAV_LIBSNDFILE_COMPAT): u * 0.00784313725490196078f - 1, two float roundings.
    const long u = std::clamp(std::lround(s * 128.0f) + 128, 0L, 255L);
    float x = static_cast<float>(u);
    x = x * 0.00784313725490196078f;
    x = x - 1;
    return x;
  }

  const float* data_;
  size_t channels_;
  AudioSampleCoding coding_;
};

// ma_linear_resampler over the whole signal (process_pcm_frames_f32_downsample, 53514, and _upsample, 53590,
// chosen by the reduced rates, 53670): the rates divided by their greatest common divisor (53097); the time
// is whole input frames (time_int) plus time_frac / out of one; it starts at 1 + 0 so that the first input
// frame is loaded before the first output frame, which is then x0 = 0 interpolated at 0. Loading an input
// frame shifts x1 into x0; when downsampling, each loaded frame goes through the low-pass filter, when
// upsampling each interpolated output does. The low-pass runs at the larger reduced rate with its cutoff at
// half the smaller (53106-53107; lpfNyquistFactor 1, 53041). Interpolation is ma_mix_f32_fast (13978):
// x0 + (x1 - x0) * a with a = (float)time_frac / out (53341).
//
// ma_decoder_read_pcm_frames (67374) feeds the converter in chunks no larger than the resampler's exact
// count of input frames needed (67485) and the resampler keeps its state between chunks, so the chunking
// changes nothing: the output is this loop's, stopped where the input runs out (no zeros are pushed through
// the filter at the end) or at `out.size()`.
size_t resample(const MonoSource& in, size_t frames_in, uint32_t rate_in, uint32_t rate_out, int lpf_order,
                std::vector<float>& out) {
  KESTREL_NO_FP_CONTRACT
  const uint32_t g = std::gcd(rate_in, rate_out);
  const uint32_t rin = rate_in / g, rout = rate_out / g;
  const uint32_t lpf_rate = std::max(rin, rout);
  const double cutoff = static_cast<double>(std::min(rin, rout) * 0.5 * 1.0);
  LowPass lpf(lpf_rate, cutoff, lpf_order);
  const bool down = rin > rout;
  const uint32_t advance_int = rin / rout, advance_frac = rin % rout;
  const auto out_f = static_cast<float>(rout);

  uint64_t time_int = 1;
  uint32_t time_frac = 0;
  float x0 = 0, x1 = 0;
  size_t next_in = 0, made = 0;
  for (; made < out.size(); made++) {
    for (; time_int > 0 && next_in < frames_in; time_int--) {
      x0 = x1;
      x1 = in(next_in++);
      if (down) x1 = lpf.step(x1);
    }
    if (time_int > 0) break;  // out of input
    const float a = static_cast<float>(time_frac) / out_f;
    const float r0 = x1 - x0;
    const float r1 = r0 * a;
    float y = x0 + r1;
    if (!down) y = lpf.step(y);
    out[made] = y;
    time_int += advance_int;
    time_frac += advance_frac;
    if (time_frac >= rout) {
      time_frac -= rout;
      time_int += 1;
    }
  }
  return made;
}

}  // namespace resample_impl
}  // namespace

#undef KESTREL_NO_FP_CONTRACT
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

size_t miniaudio_output_frames(size_t frames_in, int rate_in, int rate_out) {
  // ma_calculate_frame_count_after_resampling(sampleRateOut, sampleRateIn, frameCountIn), operation for
  // operation in 64-bit unsigned arithmetic (17461).
  const uint64_t in = static_cast<uint64_t>(rate_in), out = static_cast<uint64_t>(rate_out);
  const uint64_t n = frames_in;
  if (in == 0 || out == 0 || n == 0) return 0;
  if (in == out) return n;
  uint64_t count = (n * out) / in;
  const uint64_t from_frac = (count * (in / out)) / out;
  const uint64_t whole = (count * (in % out)) + from_frac;
  if (whole <= n) count += 1;
  return static_cast<size_t>(count);
}

std::vector<float> to_mono_at_rate(const std::vector<float>& interleaved, int channels, int rate_in, int rate_out,
                                   AudioSampleCoding coding, int lpf_order) {
  using namespace resample_impl;
  if (channels < 1 || channels > 8)
    throw Error(fmt::format("audio of {} channels: the mix to mono takes 1 to 8", channels));
  if (rate_in < 1 || rate_in > 384000 || rate_out < 1 || rate_out > 384000)
    throw Error(fmt::format("audio resampling from {} Hz to {} Hz: rates must be 1 to 384000 Hz", rate_in, rate_out));
  if (interleaved.size() % static_cast<size_t>(channels) != 0)
    throw Error(fmt::format("audio of {} samples is not whole frames of {} channels", interleaved.size(), channels));
  if (lpf_order < 0 || lpf_order > 8)
    throw Error(fmt::format("low-pass order {}: miniaudio's filters go from 0 to 8", lpf_order));

  const size_t frames_in = interleaved.size() / static_cast<size_t>(channels);
  const MonoSource mono(interleaved, channels, coding);
  // llama.cpp's vector: the decoder's reported length, value-initialised (mtmd-helper.cpp's
  // pcmf32_mono.resize(frame_count)); whatever ma_decoder_read_pcm_frames does not write stays zero.
  std::vector<float> out(miniaudio_output_frames(frames_in, rate_in, rate_out), 0.0f);
  if (rate_in == rate_out) {
    // No resampler (ma_data_converter_config_is_resampler_required, 55945): the mix alone, frame for frame.
    for (size_t i = 0; i < frames_in; i++) out[i] = mono(i);
    return out;
  }
  resample(mono, frames_in, static_cast<uint32_t>(rate_in), static_cast<uint32_t>(rate_out), lpf_order, out);
  return out;
}

}  // namespace kestrel
