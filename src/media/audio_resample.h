#pragma once
// The mix to mono and the resampling of llama.cpp's libmtmd audio input, reproduced bit for bit: what
// mtmd-helper.cpp's decode_audio_from_buf gets from miniaudio 0.11.25's ma_decoder configured for
// ma_format_f32, 1 channel and the model's rate (ma_decoder_config_init, ma_decoder_get_length_in_pcm_frames,
// ma_decoder_read_pcm_frames into a vector of that length).
//
// miniaudio's order (line numbers of llama.cpp's vendor/miniaudio/miniaudio.h): the WAV backend is asked for
// f32 (the decoder's backend config carries the output format, 63144; ma_wav_init_internal takes it, 63421),
// so dr_wav converts the file's samples to float itself, before any mixing; the data converter then has f32
// in and out, no format conversion at all. More than one channel takes its "channels first" path (56197,
// 56753): the channel converter's mono_out path averages the channels in float (55721: t = 0 + c0 + c1 + ...;
// t / channels; not in s16, even for a 16-bit file), then the linear resampler (lpfOrder 4: 62890, 53979) runs
// on the one channel; one channel is resampled alone (56465). Equal rates have no resampler (55945).
//
// `coding` says how the file stored its samples where that changes the floats: libsndfile's and dr_wav's
// float values agree for 16-, 24- and 32-bit PCM and for float WAVs (both scale by a power of two, exactly or
// correctly rounded), but for 8-bit PCM dr_wav computes u * 0.00784313725490196078f - 1 (ma_dr_wav_u8_to_f32)
// where libsndfile gives (u - 128) / 128: pass Pcm8 for such a file and the samples libsndfile decoded.
//
// MP3 and FLAC go through the same converter in libmtmd; whatever decoder made the float samples, this is
// the arithmetic that follows it.
#include <cstddef>
#include <vector>

namespace kestrel {

enum class AudioSampleCoding {
  Exact,  // libsndfile's floats are dr_wav's (16/24/32-bit PCM, float and double WAVs), or a decoder's output
  Pcm8,   // 8-bit unsigned WAV samples, as libsndfile gives them ((u - 128) / 128)
};

// miniaudio's default resampler low-pass order (MA_DEFAULT_RESAMPLER_LPF_ORDER, miniaudio.h 12233).
inline constexpr int kMiniaudioLpfOrder = 4;

// Interleaved samples (`channels` per frame) at rate_in, as miniaudio 0.11.25's ma_decoder outputs them for
// ma_format_f32, 1 channel, rate_out: the mono mix, then linear resampling with its order-4 low-pass filter,
// to the length its ma_decoder_get_length_in_pcm_frames reports (zeros where it reads fewer frames, as
// llama.cpp keeps them). interleaved.size() must be a multiple of channels; channels 1..8, rates 1..384000
// (throws kestrel::Error otherwise). No input gives an empty result (llama.cpp refuses such a file).
// lpf_order (0..8) is there for tests that show a different filter is caught; callers leave it.
// Allocates the result only. Thread-safe.
std::vector<float> to_mono_at_rate(const std::vector<float>& interleaved, int channels, int rate_in, int rate_out,
                                   AudioSampleCoding coding = AudioSampleCoding::Exact,
                                   int lpf_order = kMiniaudioLpfOrder);

// ma_calculate_frame_count_after_resampling (miniaudio.h 17461) with ma_decoder_get_length_in_pcm_frames'
// arguments (67656): the frames llama.cpp's vector holds for `frames_in` input frames. Not the number the
// resampler can make: its estimate of the whole input frames needed swaps the integer and fractional parts of
// the rate ratio, so it can be one more (a trailing zero) or one fewer (a frame dropped) than that.
size_t miniaudio_output_frames(size_t frames_in, int rate_in, int rate_out);

}  // namespace kestrel
