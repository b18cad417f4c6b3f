#pragma once
// What llama.cpp's log-mel front ends share (tools/mtmd/mtmd-audio.cpp's mtmd_audio_cache and the worker of
// log_mel_spectrogram), operand for operand: float where theirs is float, double where theirs is double (the
// library is built without FMA contraction, as libmtmd is). Each audio projector keeps its own padding, window,
// spectrum (power or magnitude) and logarithm: mmproj/whisper_audio.cpp (Whisper's), mmproj/gemma4_audio.cpp.
#include <vector>

namespace kestrel {

// The sin/cos table of an FFT of n_fft (fill_sin_cos_table: sinf of the angle computed in double) and fft_impl<false,
// true>: real input split into its even and odd halves down to an odd length, then a DFT from the table.
class MelFft {
 public:
  explicit MelFft(int n_fft);
  int size() const { return n_; }
  // The transform of in's n (n_fft or a divisor) real values into out's n complex ones (interleaved). Scratch: `in`
  // holds 2 n floats, `out` 8 n (as the worker allocates them).
  void fft(float* in, int n, float* out) const;

 private:
  void dft(const float* in, int n, float* out) const;
  int n_;
  std::vector<float> sin_, cos_;
};

// fill_mel_filterbank_matrix(n_mel, n_fft, rate, 0, rate / 2, slaney_area_norm, 1, use_htk): n_mel triangular filters
// over n_fft / 2 + 1 bins, on the HTK or the Slaney mel scale, area-normalised or not.
std::vector<float> mel_filterbank(int n_mel, int n_fft, int rate, bool htk, bool slaney_area_norm);

// One mel bin of a frame: the spectrum's bins times the filter's, summed in double four at a time (the worker's
// unrolled loop).
double mel_bin_sum(const float* spectrum, const float* filter, int bins);

}  // namespace kestrel
