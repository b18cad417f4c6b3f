/* wav_to_mp3: the MP3 a reference cell decodes (tests/compat/mmproj_cells.py makes tests/data/mmproj/*.mp3 with
 * it when missing): libsndfile's MPEG Layer III writer (LAME underneath), constant 64 kbit/s, from a WAV.
 *   cc wav_to_mp3.c -lsndfile -o wav_to_mp3 && ./wav_to_mp3 IN.wav OUT.mp3 */
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: wav_to_mp3 IN.wav OUT.mp3\n");
    return 2;
  }
  SF_INFO in_info = {0};
  SNDFILE* in = sf_open(argv[1], SFM_READ, &in_info);
  if (!in) {
    fprintf(stderr, "%s: %s\n", argv[1], sf_strerror(NULL));
    return 1;
  }
  SF_INFO out_info = {0};
  out_info.samplerate = in_info.samplerate;
  out_info.channels = in_info.channels;
  out_info.format = SF_FORMAT_MPEG | SF_FORMAT_MPEG_LAYER_III;
  SNDFILE* out = sf_open(argv[2], SFM_WRITE, &out_info);
  if (!out) {
    fprintf(stderr, "%s: %s\n", argv[2], sf_strerror(NULL));
    return 1;
  }
  int mode = SF_BITRATE_MODE_CONSTANT;
  sf_command(out, SFC_SET_BITRATE_MODE, &mode, sizeof mode);
  double level = 0.5; /* 64 kbit/s at these rates */
  sf_command(out, SFC_SET_COMPRESSION_LEVEL, &level, sizeof level);
  float buf[4096];
  sf_count_t n;
  while ((n = sf_readf_float(in, buf, 4096 / in_info.channels)) > 0) sf_writef_float(out, buf, n);
  sf_close(out);
  sf_close(in);
  return 0;
}
