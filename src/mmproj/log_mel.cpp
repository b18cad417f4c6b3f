#include "mmproj/log_mel.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace kestrel {

namespace {
constexpr double kPi = 3.14159265358979323846;
}  // namespace

MelFft::MelFft(int n_fft) : n_(n_fft), sin_(static_cast<size_t>(n_fft)), cos_(static_cast<size_t>(n_fft)) {
  for (int i = 0; i < n_fft; i++) {
    const double theta = (2 * kPi * i) / n_fft;
    sin_[static_cast<size_t>(i)] = std::sin(static_cast<float>(theta));
    cos_[static_cast<size_t>(i)] = std::cos(static_cast<float>(theta));
  }
}

void MelFft::dft(const float* in, int n, float* out) const {
  const int step = n_ / n;
  for (int k = 0; k < n; k++) {
    float re = 0, im = 0;
    for (int j = 0; j < n; j++) {
      const int idx = (k * j * step) % n_;
      re += in[j] * cos_[static_cast<size_t>(idx)];
      im += -1.0f * in[j] * sin_[static_cast<size_t>(idx)];
    }
    out[k * 2 + 0] = re * 1.0f;
    out[k * 2 + 1] = im * 1.0f;
  }
}

void MelFft::fft(float* in, int n, float* out) const {
  if (n == 1) {
    out[0] = in[0];
    out[1] = 0.0f;
    return;
  }
  const int half = n / 2;
  if (n - half * 2 == 1) {
    dft(in, n, out);
    return;
  }
  float* even = in + n;
  for (int i = 0; i < half; i++) even[i] = in[2 * i];
  float* even_fft = out + 2 * n;
  fft(even, half, even_fft);
  float* odd = even;
  for (int i = 0; i < half; i++) odd[i] = in[2 * i + 1];
  float* odd_fft = even_fft + n;
  fft(odd, half, odd_fft);
  const int step = n_ / n;
  for (int k = 0; k < half; k++) {
    const int idx = k * step;
    const float re = cos_[static_cast<size_t>(idx)], im = -1.0f * sin_[static_cast<size_t>(idx)];
    const float re_odd = odd_fft[2 * k + 0], im_odd = odd_fft[2 * k + 1];
    out[2 * k + 0] = 1.0f * (even_fft[2 * k + 0] + re * re_odd - im * im_odd);
    out[2 * k + 1] = 1.0f * (even_fft[2 * k + 1] + re * im_odd + im * re_odd);
    out[2 * (k + half) + 0] = 1.0f * (even_fft[2 * k + 0] - re * re_odd + im * im_odd);
    out[2 * (k + half) + 1] = 1.0f * (even_fft[2 * k + 1] - re * im_odd - im * re_odd);
  }
}

std::vector<float> mel_filterbank(int n_mel, int n_fft, int rate, bool htk, bool slaney_area_norm) {
  const double min_log_hz = 1000.0, lin_slope = 3 / 200., min_log_mel = min_log_hz * lin_slope,
               log_step = std::log(6.4) / 27.0;
  auto hz_to_mel = [&](double f) {
    if (htk) return 2595.0 * std::log10(1.0 + f / 700.0);
    return f < min_log_hz ? f * lin_slope : min_log_mel + std::log(f / min_log_hz) / log_step;
  };
  auto mel_to_hz = [&](double m) {
    if (htk) return 700.0 * (std::pow(10.0, m / 2595.0) - 1.0);
    return m < min_log_mel ? m / lin_slope : min_log_hz * std::exp((m - min_log_mel) * log_step);
  };
  const float fmin = 0.0f, fmax = 0.5f * static_cast<float>(rate);
  const double bin_hz = double(rate) / double(n_fft);
  const double m_lo = hz_to_mel(fmin), m_hi = hz_to_mel(fmax);
  std::vector<double> hz(static_cast<size_t>(n_mel + 2));
  for (int i = 0; i < n_mel + 2; i++)
    hz[static_cast<size_t>(i)] = mel_to_hz(m_lo + (m_hi - m_lo) * (double(i) / (n_mel + 1)));
  const int bins = n_fft / 2 + 1;
  std::vector<float> filters(static_cast<size_t>(n_mel) * static_cast<size_t>(bins), 0.0f);
  for (int m = 0; m < n_mel; m++) {
    const double fl = hz[static_cast<size_t>(m)], fc = hz[static_cast<size_t>(m) + 1], fr = hz[static_cast<size_t>(m) + 2];
    const double dl = std::max(1e-30, fc - fl), dr = std::max(1e-30, fr - fc);
    const double enorm = slaney_area_norm ? 2.0 / std::max(1e-30, fr - fl) : 1.0;
    for (int k = 0; k < bins; k++) {
      const double f = k * bin_hz;
      double w = 0.0;
      if (f >= fl && f <= fc) w = (f - fl) / dl;
      else if (f > fc && f <= fr) w = (fr - f) / dr;
      filters[static_cast<size_t>(m) * static_cast<size_t>(bins) + static_cast<size_t>(k)] = static_cast<float>(w * enorm * 1.0f);
    }
  }
  return filters;
}

double mel_bin_sum(const float* s, const float* f, int bins) {
  double sum = 0.0;
  int k = 0;
  for (; k < bins - 3; k += 4) sum += s[k] * f[k] + s[k + 1] * f[k + 1] + s[k + 2] * f[k + 2] + s[k + 3] * f[k + 3];
  for (; k < bins; k++) sum += s[k] * f[k];
  return sum;
}

}  // namespace kestrel
