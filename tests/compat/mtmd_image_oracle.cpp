// mtmd_image_oracle: llama.cpp's own image decoding and preprocessing (tools/mtmd) on one file — the
// reference that tests/unit/test_media_image.cpp compares kestrel's src/media/image.cpp with
// (mtmd_image_cells.py builds and runs it, and records hashes of what it writes; of a JPEG, whose pixels
// kestrel's libjpeg-turbo does not reproduce bit for bit, it also keeps OUT.decoded itself, as a PNG).
//
// Decoding is libmtmd's mtmd_helper_bitmap_init_from_file (llama.cpp's vendored stb_image v2.30, as
// llama-server and llama-mtmd-cli decode); resizing is mtmd-image.cpp's img_tool itself, compiled into this
// file (it is local to that file, so it is #included, not linked); normalisation is clip-impl.h's
// clip_image_f32::from_u8 + normalize, laid out planar as clip.cpp uploads it.
//
// Build (a llama.cpp checkout and its CMake build with shared libraries, as get-llama.sh makes; the same
// flags libmtmd's mtmd-image.cpp is compiled with):
//   c++ -std=c++17 -O3 -DNDEBUG mtmd_image_oracle.cpp -I$LLAMA/tools/mtmd -I$LLAMA/include
//       -I$LLAMA/ggml/include -I$LLAMA/vendor -L$LLAMA_BIN -lmtmd -lllama -lggml -lggml-base
//       -Wl,-rpath,$LLAMA_BIN -o mtmd_image_oracle
// Run:
//   mtmd_image_oracle IMAGE OUT resize W H ALGO PAD [--pad-color R G B] [--norm M0 M1 M2 S0 S1 S2]...
//   mtmd_image_oracle IMAGE OUT ratio ALIGN MIN_PX MAX_PX ALGO PAD [--pad-color R G B] [--norm ...]...
//   mtmd_image_oracle sizes W H ALIGN MIN_PX MAX_PX [W H ALIGN MIN_PX MAX_PX]...
// ALGO: bilinear, bicubic or lanczos; PAD: none, ceil or nearest. `resize` is the fixed_size preprocessor's
// img_tool::resize to W x H, `ratio` the dyn_size one's (calc_size_preserved_ratio's size, then resize).
// Writes OUT.decoded (the decoded RGB8), OUT.resized (RGB8) and OUT.norm<i> (float32, planar CHW, one per
// --norm); prints {"decoded": [w, h], "target": [w, h]}. `sizes` prints {"sizes": [[w, h], ...]}.
// On failure {"error": "..."} and exit 1.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mtmd-helper.h"
#include "mtmd-image.cpp"  // NOLINT: img_tool lives in this file only

namespace {

[[noreturn]] void fail(const std::string& msg) {
  std::printf("{\"error\": \"%s\"}\n", msg.c_str());
  std::exit(1);
}

resize_algo parse_algo(const std::string& s) {
  if (s == "bilinear") return RESIZE_ALGO_BILINEAR;
  if (s == "bicubic") return RESIZE_ALGO_BICUBIC;
  if (s == "lanczos") return RESIZE_ALGO_LANCZOS;
  fail("unknown algo " + s);
}

pad_style parse_pad(const std::string& s) {
  if (s == "none") return PAD_NONE;
  if (s == "ceil") return PAD_CEIL;
  if (s == "nearest") return PAD_NEAREST;
  fail("unknown pad " + s);
}

void write_file(const std::string& path, const void* data, size_t n) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(data, 1, n, f) != n) fail("cannot write " + path);
  std::fclose(f);
}

int sizes(int argc, char** argv) {
  std::string out = "{\"sizes\": [";
  for (int i = 2; i + 4 < argc; i += 5) {
    const clip_image_size s = img_tool::calc_size_preserved_ratio(
        {std::atoi(argv[i]), std::atoi(argv[i + 1])},
        {/* align_size */ std::atoi(argv[i + 2]), /* min_pixels */ std::atoi(argv[i + 3]),
         /* max_pixels */ std::atoi(argv[i + 4]), /* longest_edge */ 0});
    out += (i > 2 ? ", [" : "[") + std::to_string(s.width) + ", " + std::to_string(s.height) + "]";
  }
  std::printf("%s]}\n", out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "sizes") return sizes(argc, argv);
  if (argc < 4) fail("usage: mtmd_image_oracle IMAGE OUT (resize W H | ratio ALIGN MIN MAX) ALGO PAD [...]");
  const std::string image = argv[1], out = argv[2], mode = argv[3];
  mtmd_helper_log_set([](ggml_log_level, const char*, void*) {}, nullptr);

  const mtmd_helper_bitmap_wrapper bw =
      mtmd_helper_bitmap_init_from_file(nullptr, image.c_str(), false, mtmd_helper_init_opt_default());
  if (!bw.bitmap) fail("llama.cpp could not decode " + image);
  const int nx = static_cast<int>(mtmd_bitmap_get_nx(bw.bitmap)), ny = static_cast<int>(mtmd_bitmap_get_ny(bw.bitmap));
  const unsigned char* px = mtmd_bitmap_get_data(bw.bitmap);
  clip_image_u8 src;
  src.set_size({nx, ny}, false);
  src.cpy_buf(std::vector<uint8_t>(px, px + mtmd_bitmap_get_n_bytes(bw.bitmap)));
  mtmd_bitmap_free(bw.bitmap);
  write_file(out + ".decoded", src.get_ro_buf().data(), src.get_ro_buf().size());

  int i = 4;
  clip_image_size target;
  if (mode == "resize" && argc >= 8) {
    target = {std::atoi(argv[4]), std::atoi(argv[5])};
    i = 6;
  } else if (mode == "ratio" && argc >= 9) {
    target = img_tool::calc_size_preserved_ratio(
        src.get_size(), {/* align_size */ std::atoi(argv[4]), /* min_pixels */ std::atoi(argv[5]),
                         /* max_pixels */ std::atoi(argv[6]), /* longest_edge */ 0});
    i = 7;
  } else {
    fail("bad mode or too few arguments");
  }
  const resize_algo algo = parse_algo(argv[i]);
  const pad_style pad = parse_pad(argv[i + 1]);
  i += 2;
  std::array<uint8_t, 3> pad_color = {0, 0, 0};
  std::vector<std::array<float, 6>> norms;
  for (; i < argc; i++) {
    const std::string a = argv[i];
    if (a == "--pad-color" && i + 3 < argc) {
      for (int c = 0; c < 3; c++) pad_color[c] = static_cast<uint8_t>(std::atoi(argv[++i]));
    } else if (a == "--norm" && i + 6 < argc) {
      std::array<float, 6> n;
      for (int c = 0; c < 6; c++) n[c] = std::strtof(argv[++i], nullptr);
      norms.push_back(n);
    } else {
      fail("bad argument " + a);
    }
  }

  clip_image_u8 resized;
  try {
    img_tool::resize(src, resized, target, algo, pad, pad_color);
  } catch (const std::exception& e) {
    fail(std::string("resize: ") + e.what());
  }
  write_file(out + ".resized", resized.get_ro_buf().data(), resized.get_ro_buf().size());

  for (size_t k = 0; k < norms.size(); k++) {
    clip_image_f32 f;
    f.from_u8(resized);
    f.normalize(norms[k].data(), norms[k].data() + 3);
    // clip.cpp's upload (clip_image_batch_encode): interleaved RGB to planes R, G, B.
    const auto& buf = f.get_ro_buf();
    const size_t n = static_cast<size_t>(f.nx()) * f.ny();
    std::vector<float> planar(3 * n);
    for (size_t p = 0; p < n; p++)
      for (size_t c = 0; c < 3; c++) planar[c * n + p] = buf[3 * p + c];
    write_file(out + ".norm" + std::to_string(k), planar.data(), planar.size() * sizeof(float));
  }
  std::printf("{\"decoded\": [%d, %d], \"target\": [%d, %d]}\n", nx, ny, resized.get_size().width,
              resized.get_size().height);
  return 0;
}
