/* llama.cpp's audio decoding, for tests/compat/audio_cells.py: tools/mtmd/mtmd-helper.cpp's
 * decode_audio_from_buf on one file at one rate, built against the miniaudio.h llama.cpp vendors (0.11.25)
 * with mtmd-helper.cpp's defines (its lines 23-33).
 *
 *   audio_oracle FILE RATE OUT
 *
 * writes the decoded mono samples to OUT as little-endian float32 (all frame_count of them: llama.cpp keeps
 * the vector at ma_decoder_get_length_in_pcm_frames' length, zeros where fewer frames were read) and prints
 * "frame_count frames_read" on stdout. Exit status 1 where decode_audio_from_buf returns false.
 *
 * Build without -march=native / -mfma (audio_cells.py shows the command): llama.cpp's libmtmd is built for
 * baseline x86-64, where the compiler has no FMA to contract miniaudio's biquad into. */
#define MINIAUDIO_IMPLEMENTATION
#define MA_NO_ENCODING
#define MA_NO_DEVICE_IO
#define MA_NO_RESOURCE_MANAGER
#define MA_NO_NODE_GRAPH
#define MA_NO_ENGINE
#define MA_NO_GENERATION
#define MA_API static
#include "miniaudio/miniaudio.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s FILE RATE OUT\n", argv[0]);
    return 2;
  }
  FILE* f = fopen(argv[1], "rb");
  if (!f) {
    perror(argv[1]);
    return 2;
  }
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char* buf = (unsigned char*)malloc(len > 0 ? (size_t)len : 1);
  if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) {
    fprintf(stderr, "cannot read %s\n", argv[1]);
    return 2;
  }
  fclose(f);
  const int target_sampler_rate = atoi(argv[2]);

  /* decode_audio_from_buf, statement for statement (std::vector -> calloc: resize value-initialises). */
  ma_result result;
  const int channels = 1;
  ma_decoder_config decoder_config = ma_decoder_config_init(ma_format_f32, channels, target_sampler_rate);
  ma_decoder decoder;

  result = ma_decoder_init_memory(buf, (size_t)len, &decoder_config, &decoder);
  if (result != MA_SUCCESS) return 1;

  ma_uint64 frame_count;
  ma_uint64 frames_read = 0;
  result = ma_decoder_get_length_in_pcm_frames(&decoder, &frame_count);
  if (result != MA_SUCCESS) {
    ma_decoder_uninit(&decoder);
    return 1;
  }

  float* pcm = (float*)calloc(frame_count ? (size_t)frame_count : 1, sizeof(float));
  result = ma_decoder_read_pcm_frames(&decoder, pcm, frame_count, &frames_read);
  if (result != MA_SUCCESS) {
    ma_decoder_uninit(&decoder);
    return 1;
  }
  ma_decoder_uninit(&decoder);

  FILE* out = fopen(argv[3], "wb");
  if (!out || fwrite(pcm, sizeof(float), (size_t)frame_count, out) != (size_t)frame_count || fclose(out) != 0) {
    fprintf(stderr, "cannot write %s\n", argv[3]);
    return 2;
  }
  printf("%llu %llu\n", (unsigned long long)frame_count, (unsigned long long)frames_read);
  free(pcm);
  free(buf);
  return 0;
}
