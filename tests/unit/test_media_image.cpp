// Image input (src/media/image.h): decoding and preprocessing against llama.cpp's own output on the images
// of tests/data/media/ (tests/reference/media_image_cells.json, recorded by tests/compat/mtmd_image_cells.py:
// sha256 of the decoded RGB8, of img_tool::resize's RGB8 and of the normalised planar floats; PNG and GIF
// bit-exact, JPEG within a recorded distance of llama.cpp's stb_image pixels), then the decoders' refusals:
// every prefix, flipped and random bytes, garbage, the limits; JPEG colour spaces; WebP through libwebp.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <webp/encode.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <jpeglib.h>  // after <cstdio>: it uses FILE

#include "core/error.h"
#include "media/image.h"
#include "sha256.h"

namespace kestrel::media_image_test {

const std::string kMedia = std::string(KESTREL_SOURCE_DIR) + "/tests/data/media/";
const std::string kCells = std::string(KESTREL_SOURCE_DIR) + "/tests/reference/media_image_cells.json";

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(in), {}};
}

using test::sha256_hex;
template <typename T>
std::string sha256_hex(const std::vector<T>& v) {
  return sha256_hex(v.data(), v.size() * sizeof(T));
}

const nlohmann::json& cells() {
  static const nlohmann::json j = nlohmann::json::parse(read_bytes(kCells));
  return j;
}

ResizeAlgo algo_of(const std::string& s) {
  if (s == "bilinear") return ResizeAlgo::Bilinear;
  if (s == "bicubic") return ResizeAlgo::Bicubic;
  if (s == "lanczos") return ResizeAlgo::Lanczos;
  throw std::runtime_error("unknown algo " + s);
}

Pad pad_of(const std::string& s) {
  if (s == "none") return Pad::None;
  if (s == "ceil") return Pad::Ceil;
  if (s == "nearest") return Pad::Nearest;
  throw std::runtime_error("unknown pad " + s);
}

// The message of the kestrel::Error that decoding throws, or "" when it decodes (any other exception fails).
std::string decode_error(std::span<const uint8_t> bytes, const ImageLimits& limits = {}) {
  try {
    (void)decode_image(bytes, limits, "messages[0].content[1]");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

ImageU8 decode_file(const std::string& name) { return decode_image(read_bytes(kMedia + name), {}, name); }

// What llama.cpp decodes from a stored image: the file itself, except a JPEG's, whose stb_image pixels
// kestrel's libjpeg-turbo does not reproduce bit for bit: those are stored losslessly beside it.
bool is_jpeg(const nlohmann::json& image) { return image.contains("llama_rgb_png"); }

ImageU8 llama_pixels(const std::string& name) {
  const auto& image = cells()["images"][name];
  return decode_file(is_jpeg(image) ? image["llama_rgb_png"].get<std::string>() : name);
}

TEST(MediaImage, StoredImagesAreTheRecordedOnes) {
  ASSERT_GE(cells()["images"].size(), 15u);
  for (const auto& [name, image] : cells()["images"].items())
    EXPECT_EQ(sha256_hex(read_bytes(kMedia + name)), image["file_sha256"].get<std::string>()) << name;
}

TEST(MediaImage, DecodesThePixelsLlamaCppDecodes) {
  size_t lossless = 0;
  for (const auto& [name, image] : cells()["images"].items()) {
    if (is_jpeg(image)) continue;
    const ImageU8 img = decode_file(name);
    EXPECT_EQ(img.width, image["size"][0].get<int>()) << name;
    EXPECT_EQ(img.height, image["size"][1].get<int>()) << name;
    EXPECT_EQ(sha256_hex(img.rgb), image["rgb_sha256"].get<std::string>()) << name;
    lossless++;
  }
  EXPECT_GE(lossless, 11u);  // every PNG kind and both GIFs
}

// JPEG: libjpeg-turbo's integer IDCT, fancy upsampling and colour conversion against stb_image's. The
// distance is recorded (mtmd_image_cells.py: djpeg's pixels against llama.cpp's) and asserted here on
// kestrel's own pixels with the recorded margin; the mean stays under one level in every case.
TEST(MediaImage, JpegIsWithinTheRecordedDistanceOfLlamaCpp) {
  size_t jpegs = 0;
  for (const auto& [name, image] : cells()["images"].items()) {
    if (!is_jpeg(image)) continue;
    jpegs++;
    const ImageU8 theirs = llama_pixels(name);
    ASSERT_EQ(sha256_hex(theirs.rgb), image["rgb_sha256"].get<std::string>()) << image["llama_rgb_png"];
    const ImageU8 ours = decode_file(name);
    ASSERT_EQ(ours.width, image["size"][0].get<int>()) << name;
    ASSERT_EQ(ours.height, image["size"][1].get<int>()) << name;
    ASSERT_EQ(ours.rgb.size(), theirs.rgb.size()) << name;
    int max_abs[3] = {0, 0, 0};
    double sum = 0;
    for (size_t i = 0; i < ours.rgb.size(); i++) {
      const int d = std::abs(int{ours.rgb[i]} - int{theirs.rgb[i]});
      max_abs[i % 3] = std::max(max_abs[i % 3], d);
      sum += d;
    }
    const double mean_abs = sum / static_cast<double>(ours.rgb.size());
    const auto& bound = image["libjpeg_turbo_vs_llama"];
    for (int c = 0; c < 3; c++) EXPECT_LE(max_abs[c], bound["max_abs_bound"][c].get<int>()) << name << " channel " << c;
    EXPECT_LE(mean_abs, bound["mean_abs_bound"].get<double>()) << name;
    EXPECT_LE(mean_abs, 1.0) << name;
    // Not bit-exact, but not far either: most pixels are the same.
    EXPECT_NE(sha256_hex(ours.rgb), image["rgb_sha256"].get<std::string>()) << name << ": now bit-exact, tighten";
  }
  EXPECT_GE(jpegs, 4u);  // baseline, progressive, grey, RGB
}

TEST(MediaImage, ResizesAndNormalisesBitForBitAsLlamaCpp) {
  const auto& norms = cells()["norms"];
  ASSERT_GE(cells()["cases"].size(), 20u);
  for (const auto& c : cells()["cases"]) {
    const std::string name = c["image"].get<std::string>() + " " + c["mode"].get<std::string>() + " " +
                             c["numbers"].dump() + " " + c["algo"].get<std::string>() + " " +
                             c["pad"].get<std::string>();
    // A JPEG's cases start from llama.cpp's own pixels of it (the resize is what they prove).
    const ImageU8 img = llama_pixels(c["image"]);
    const auto& n = c["numbers"];
    std::pair<int, int> target{0, 0};
    if (c["mode"] == "resize")
      target = {n[0].get<int>(), n[1].get<int>()};
    else
      target = size_preserved_ratio(img.width, img.height, n[0].get<int>(), n[1].get<int64_t>(), n[2].get<int64_t>());
    EXPECT_EQ(target.first, c["target"][0].get<int>()) << name;
    EXPECT_EQ(target.second, c["target"][1].get<int>()) << name;
    const auto color = c["pad_color"];
    const ImageU8 out = resize_padded(img, target.first, target.second, algo_of(c["algo"]), pad_of(c["pad"]),
                                      {color[0].get<uint8_t>(), color[1].get<uint8_t>(), color[2].get<uint8_t>()});
    ASSERT_EQ(out.rgb.size(), static_cast<size_t>(target.first) * target.second * 3) << name;
    EXPECT_EQ(sha256_hex(out.rgb), c["resized_sha256"].get<std::string>()) << name;
    for (const auto& [key, sha] : c["normalized_sha256"].items()) {
      float mean[3], std_dev[3];
      for (int i = 0; i < 3; i++) {
        mean[i] = norms[key]["mean"][i].get<float>();
        std_dev[i] = norms[key]["std"][i].get<float>();
      }
      EXPECT_EQ(sha256_hex(to_planar_normalized(out, mean, std_dev)), sha.get<std::string>()) << name << " " << key;
    }
  }
}

TEST(MediaImage, SizePreservedRatioIsLlamaCppsFloat32Arithmetic) {
  for (const auto& s : cells()["sizes"]) {
    const auto& in = s["in"];
    const auto got = size_preserved_ratio(in[0].get<int>(), in[1].get<int>(), in[2].get<int>(),
                                          in[3].get<int64_t>(), in[4].get<int64_t>());
    EXPECT_EQ(got.first, s["out"][0].get<int>()) << in.dump();
    EXPECT_EQ(got.second, s["out"][1].get<int>()) << in.dump();
  }
  EXPECT_EQ(size_preserved_ratio(0, 10, 28, 0, 0), std::make_pair(0, 0));
  EXPECT_THROW(size_preserved_ratio(10, 10, 0, 0, 0), Error);
}

TEST(MediaImage, ResizeRefusesBadSizesAndCopiesTheSameSize) {
  const ImageU8 img = decode_file("rgb_37x23.png");
  EXPECT_THROW(resize_pillow(img, 0, 10, ResizeAlgo::Bicubic), Error);
  EXPECT_THROW(resize_pillow(img, 10, 65537, ResizeAlgo::Bicubic), Error);
  EXPECT_THROW(resize_padded(img, -1, 10, ResizeAlgo::Bicubic, Pad::Ceil), Error);
  EXPECT_THROW(resize_pillow(ImageU8{2, 2, std::vector<uint8_t>(5)}, 4, 4, ResizeAlgo::Bilinear), Error);
  EXPECT_EQ(resize_pillow(img, 37, 23, ResizeAlgo::Lanczos).rgb, img.rgb);
  // PAD_NEAREST can round a side to nothing: refused, not an empty image.
  const ImageU8 line{200, 1, std::vector<uint8_t>(600, 7)};
  EXPECT_THROW(resize_padded(line, 10, 10, ResizeAlgo::Bilinear, Pad::Nearest), Error);
  const ImageU8 boxed = resize_padded(line, 10, 10, ResizeAlgo::Bilinear, Pad::Ceil, {1, 2, 3});
  EXPECT_EQ(boxed.rgb[(3 * 10 + 2) * 3 + 1], 2);  // row 3: the pad colour
  EXPECT_EQ(boxed.rgb[(4 * 10 + 2) * 3 + 1], 7);  // row 4 = (10 - 1) / 2: the line, 200 pixels to 10
  EXPECT_EQ(boxed.rgb[(5 * 10 + 2) * 3 + 1], 2);
}

// Every prefix of a file, shorter than the whole, is refused: libpng reads through IEND and its CRC,
// libjpeg-turbo through EOI (its "Premature end of JPEG file" is an error here, not grey rows), giflib
// through the first frame's last row.
TEST(MediaImage, EveryPrefixIsRefusedNamingThePart) {
  const struct {
    const char* file;
    size_t magic;  // shorter than this: not recognised as the format at all
    const char* error;
  } cases[] = {{"gray_13x57.png", 8, "corrupt or truncated PNG image (libpng: "},
               {"adam7_33x21.png", 8, "corrupt or truncated PNG image (libpng: "},
               {"baseline_96x64.jpg", 3, "corrupt or truncated JPEG image (libjpeg-turbo: "},
               {"progressive_96x64.jpg", 3, "corrupt or truncated JPEG image (libjpeg-turbo: "},
               {"frame_48x40.gif", 6, "corrupt or truncated GIF image ("}};
  for (const auto& c : cases) {
    const std::vector<uint8_t> file = read_bytes(kMedia + c.file);
    const ImageU8 full = decode_image(file, {}, "full");
    // A GIF is complete once its first frame is: what follows (frame_48x40.gif's second frame, 4x4 at 0,0,
    // and the trailer) is not read.
    size_t complete = file.size();
    if (c.magic == 6) {
      const uint8_t second[] = {0x2c, 0, 0, 0, 0, 4, 0, 4, 0};
      complete = std::search(file.begin(), file.end(), std::begin(second), std::end(second)) - file.begin();
      ASSERT_LT(complete, file.size());
    }
    size_t refused = 0;
    for (size_t n = 0; n < file.size(); n++) {
      std::string err;
      try {
        const ImageU8 img = decode_image(std::span(file.data(), n), {}, "messages[0].content[1]");
        EXPECT_GE(n, complete) << c.file << ": a prefix of " << n << " bytes decoded";
        EXPECT_EQ(img.rgb, full.rgb) << c.file << " " << n;
        continue;
      } catch (const Error& e) {
        err = e.what();
      }
      refused++;
      EXPECT_EQ(err.rfind("messages[0].content[1]: ", 0), 0u) << err;
      if (n == 0)
        EXPECT_NE(err.find("empty"), std::string::npos) << err;
      else if (n < c.magic)
        EXPECT_NE(err.find("supported: PNG, JPEG, GIF, WebP"), std::string::npos) << err;
      else
        EXPECT_NE(err.find(c.error), std::string::npos) << c.file << " " << n << ": " << err;
    }
    EXPECT_EQ(refused, complete) << c.file;
  }
}

// Decoded to a consistent image or refused with kestrel::Error naming the part: nothing else (ASan and UBSan
// builds of this test and the fuzz target watch the rest).
void expect_pixels_or_error(const std::vector<uint8_t>& bytes, const std::string& name, const ImageLimits& limits) {
  try {
    const ImageU8 img = decode_image(bytes, limits, name);
    EXPECT_GT(img.width, 0) << name;
    EXPECT_GT(img.height, 0) << name;
    EXPECT_LE(int64_t{img.width} * img.height, limits.max_pixels) << name;
    EXPECT_EQ(img.rgb.size(), static_cast<size_t>(img.width) * img.height * 3) << name;
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(name + ": ", 0), 0u) << e.what();
  }
}

TEST(MediaImage, FlippedBytesAreRefusedOrDecodedNeverACrash) {
  const ImageLimits limits{size_t{1} << 20, 1 << 16};
  for (const char* name : {"rgb_37x23.png", "adam7_33x21.png", "palette4_23x15.png", "lzw_40x30.gif",
                           "frame_48x40.gif", "baseline_96x64.jpg", "progressive_96x64.jpg", "gray_96x64.jpg",
                           "rgb_96x64.jpg"}) {
    const std::vector<uint8_t> good = read_bytes(kMedia + name);
    for (size_t i = 0; i < good.size(); i++) {
      std::vector<uint8_t> bad = good;
      bad[i] ^= 0x5a;
      expect_pixels_or_error(bad, name, limits);
    }
  }
  // Checksums are not checked, as stb_image checks none: a wrong CRC (IHDR's, IEND's) still decodes.
  std::vector<uint8_t> png = read_bytes(kMedia + "rgb_37x23.png");
  const ImageU8 good = decode_image(png, {}, "good");
  for (const size_t crc_byte : {size_t{29}, png.size() - 1}) {
    std::vector<uint8_t> bad = png;
    bad[crc_byte] ^= 0xff;
    EXPECT_EQ(decode_image(bad, {}, "bad crc").rgb, good.rgb) << crc_byte;
  }
  // A colour type PNG does not have: refused by name.
  png[25] = 5;
  EXPECT_NE(decode_error(png).find("corrupt or truncated PNG image (libpng: "), std::string::npos) << decode_error(png);
}

// The JPEGs again, each under a few hundred random corruptions of 1 to 8 bytes (a fixed seed): the entropy
// coded data, the tables and the markers of the baseline and progressive decoders.
TEST(MediaImage, RandomlyCorruptedJpegsAreRefusedOrDecodedNeverACrash) {
  const ImageLimits limits{size_t{1} << 20, 1 << 16};
  std::mt19937 rng(20240611);
  size_t refused = 0, decoded = 0;
  for (const char* name : {"baseline_96x64.jpg", "progressive_96x64.jpg", "gray_96x64.jpg", "rgb_96x64.jpg"}) {
    const std::vector<uint8_t> good = read_bytes(kMedia + name);
    for (int trial = 0; trial < 300; trial++) {
      std::vector<uint8_t> bad = good;
      const int flips = 1 + static_cast<int>(rng() % 8);
      for (int k = 0; k < flips; k++) {
        // Half of them in the first 700 bytes, where the tables and frame and scan headers are.
        const size_t span = (rng() % 2) ? std::min<size_t>(bad.size(), 700) : bad.size();
        bad[rng() % span] ^= static_cast<uint8_t>(1 + rng() % 255);
      }
      if (decode_error(bad, limits).empty())
        decoded++;
      else
        refused++;
      expect_pixels_or_error(bad, name, limits);
    }
  }
  EXPECT_GT(refused, 0u);
  EXPECT_GT(decoded, 0u);
}

TEST(MediaImage, GarbageAndEmptyInputAreRefused) {
  const std::vector<uint8_t> empty;
  EXPECT_EQ(decode_error(empty), "messages[0].content[1]: the image is empty (0 bytes)");
  const std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'};
  EXPECT_EQ(decode_error(text),
            "messages[0].content[1]: not an image of a supported format (first bytes 68 65 6c 6c 6f 20 77 6f); "
            "supported: PNG, JPEG, GIF, WebP");
  // BMP is no longer read (nor TGA, PSD, ...).
  const std::vector<uint8_t> bmp = {'B', 'M', 0x36, 0, 0, 0, 0, 0, 0, 0, 0x36, 0, 0, 0, 40, 0};
  EXPECT_EQ(decode_error(bmp),
            "messages[0].content[1]: not an image of a supported format (first bytes 42 4d 36 00 00 00 00 00); "
            "supported: PNG, JPEG, GIF, WebP");
  std::vector<uint8_t> noise = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  uint32_t x = 12345;
  for (int i = 0; i < 500; i++) noise.push_back(static_cast<uint8_t>((x = x * 1103515245 + 12345) >> 16));
  EXPECT_NE(decode_error(noise).find("corrupt or truncated PNG image (libpng: "), std::string::npos);
  for (const std::string& magic :
       {std::string("\xff\xd8\xff"), std::string("GIF89a"), std::string("RIFF\x10\0\0\0WEBP", 12)}) {
    std::vector<uint8_t> b(magic.begin(), magic.end());
    b.insert(b.end(), noise.begin() + 8, noise.end());
    const std::string err = decode_error(b);
    EXPECT_TRUE(err.find("corrupt or truncated") != std::string::npos ||
                err.find("over the limit") != std::string::npos)
        << err;
    // A decoder's reason reaches a JSON reply: printable ASCII only.
    EXPECT_TRUE(std::all_of(err.begin(), err.end(), [](char ch) { return ch >= 0x20 && ch <= 0x7e; })) << err;
  }
}

// A GIF89a screen of w x h with a 2-entry global table, then `records`, then the trailer.
std::vector<uint8_t> gif_with(uint16_t w, uint16_t h, const std::vector<uint8_t>& records) {
  std::vector<uint8_t> b = {'G', 'I', 'F', '8', '9', 'a', static_cast<uint8_t>(w), static_cast<uint8_t>(w >> 8),
                            static_cast<uint8_t>(h), static_cast<uint8_t>(h >> 8), 0x80, 0, 0,
                            0, 0, 0, 255, 255, 255};
  b.insert(b.end(), records.begin(), records.end());
  b.push_back(0x3b);
  return b;
}

// An image descriptor at (x, y) of w x h (w * h <= 4), no local table, with a 2-bit LZW stream: clear, the
// w * h pixels as literals 1, end.
std::vector<uint8_t> gif_frame(uint16_t x, uint16_t y, uint16_t w, uint16_t h) {
  uint32_t bits = 4, nbits = 3;  // the clear code (4), 3 bits a code
  for (int i = 0; i < w * h; i++) bits |= 1u << nbits, nbits += 3;
  bits |= 5u << nbits, nbits += 3;  // end of information
  std::vector<uint8_t> data;
  for (; nbits > 0; nbits = nbits > 8 ? nbits - 8 : 0, bits >>= 8) data.push_back(static_cast<uint8_t>(bits));
  std::vector<uint8_t> b = {0x2c, static_cast<uint8_t>(x), 0, static_cast<uint8_t>(y), 0, static_cast<uint8_t>(w), 0,
                            static_cast<uint8_t>(h), 0, 0, 2, static_cast<uint8_t>(data.size())};
  b.insert(b.end(), data.begin(), data.end());
  b.push_back(0);
  return b;
}

TEST(MediaImage, GifFirstFrameIsCheckedAsStbImageChecksIt) {
  const ImageU8 img = decode_image(gif_with(3, 2, gif_frame(1, 0, 2, 2)), {}, "g");
  EXPECT_EQ(img.width, 3);
  EXPECT_EQ(img.height, 2);
  // Column 0 is not covered and the background index is 0: black. The frame is white (index 1).
  const std::vector<uint8_t> row = {0, 0, 0, 255, 255, 255, 255, 255, 255};
  std::vector<uint8_t> expected = row;
  expected.insert(expected.end(), row.begin(), row.end());
  EXPECT_EQ(img.rgb, expected);
  EXPECT_NE(decode_error(gif_with(3, 2, gif_frame(2, 0, 2, 2))).find("is not within the 3x2 screen"),
            std::string::npos);
  EXPECT_NE(decode_error(gif_with(3, 2, {})).find("it ends before its first image"), std::string::npos);
  std::vector<uint8_t> gce = {0x21, 0xf9, 0x05, 0x01, 0, 0, 1, 0, 0};
  const auto pixel = gif_frame(0, 0, 1, 1);
  gce.insert(gce.end(), pixel.begin(), pixel.end());
  EXPECT_NE(decode_error(gif_with(3, 2, gce)).find("a graphic control extension of 5 bytes, not 4"),
            std::string::npos);
  std::vector<uint8_t> no_table = gif_with(3, 2, gif_frame(0, 0, 1, 1));
  no_table[10] = 0;  // no global table (its 6 bytes are then read as the next records)
  no_table.erase(no_table.begin() + 13, no_table.begin() + 19);
  EXPECT_NE(decode_error(no_table).find("no colour table"), std::string::npos) << decode_error(no_table);
  // The transparent index of a graphic control extension: not drawn, black.
  std::vector<uint8_t> transparent = {0x21, 0xf9, 0x04, 0x01, 0, 0, 1, 0};
  const auto frame = gif_frame(0, 0, 3, 1);
  transparent.insert(transparent.end(), frame.begin(), frame.end());
  EXPECT_EQ(decode_image(gif_with(3, 1, transparent), {}, "g").rgb, std::vector<uint8_t>(9, 0));
}

// libjpeg-turbo decodes the colour spaces stb_image decodes, chosen as stb chooses them, and converts CMYK
// and YCCK to RGB with stb's arithmetic (C * K / 255 on Adobe's inverted values).
std::vector<uint8_t> jpeg_encode(int w, int h, int components, J_COLOR_SPACE in, J_COLOR_SPACE stored, bool adobe,
                                 bool jfif, bool rgb_ids, const std::vector<uint8_t>& samples) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = w;
  c.image_height = h;
  c.input_components = components;
  c.in_color_space = in;
  jpeg_set_defaults(&c);
  jpeg_set_colorspace(&c, stored);
  jpeg_set_quality(&c, 100, TRUE);
  for (int i = 0; i < c.num_components; i++) c.comp_info[i].h_samp_factor = c.comp_info[i].v_samp_factor = 1;
  c.write_Adobe_marker = adobe;
  c.write_JFIF_header = jfif;
  if (rgb_ids)
    for (int i = 0; i < 3; i++) c.comp_info[i].component_id = "RGB"[i];
  jpeg_start_compress(&c, TRUE);
  for (int y = 0; y < h; y++) {
    JSAMPROW row = const_cast<uint8_t*>(&samples[static_cast<size_t>(y) * w * components]);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::vector<uint8_t> out(buf, buf + size);
  std::free(buf);
  return out;
}

TEST(MediaImage, JpegColourSpacesAreStbImagesOnes) {
  const int w = 40, h = 24;
  std::vector<uint8_t> cmyk(w * h * 4), rgb(w * h * 3);
  for (int i = 0; i < w * h; i++) {
    const int x = i % w, y = i / w;
    for (int k = 0; k < 4; k++) cmyk[i * 4 + k] = static_cast<uint8_t>(40 + (x * 4 + y * (k + 2) * 3 + k * 37) % 180);
    for (int k = 0; k < 3; k++) rgb[i * 3 + k] = static_cast<uint8_t>(30 + (x * 5 + y * (k + 1) * 4 + k * 50) % 190);
  }
  const auto max_diff = [&](const ImageU8& img, auto expected) {
    int worst = 0;
    for (int i = 0; i < w * h; i++)
      for (int k = 0; k < 3; k++) worst = std::max(worst, std::abs(int{img.rgb[i * 3 + k]} - expected(i, k)));
    return worst;
  };
  const auto blinn = [&](int i, int k) {  // stb's CMYK: C * K / 255
    return (cmyk[i * 4 + k] * cmyk[i * 4 + 3] + 127) / 255;
  };
  // CMYK (Adobe transform 0) and YCCK (transform 2): C * K / 255, as stb.
  for (const J_COLOR_SPACE stored : {JCS_CMYK, JCS_YCCK}) {
    const ImageU8 img = decode_image(jpeg_encode(w, h, 4, JCS_CMYK, stored, true, false, false, cmyk), {}, "cmyk");
    ASSERT_EQ(img.rgb.size(), size_t{w * h * 3});
    EXPECT_LE(max_diff(img, blinn), 3) << (stored == JCS_CMYK ? "CMYK" : "YCCK");
  }
  // Four components and no Adobe marker: stb reads the first three as YCbCr and ignores the fourth.
  const ImageU8 four = decode_image(jpeg_encode(w, h, 4, JCS_CMYK, JCS_CMYK, false, false, false, cmyk), {}, "four");
  EXPECT_LE(max_diff(four,
                     [&](int i, int k) {
                       const double y = cmyk[i * 4], cb = cmyk[i * 4 + 1] - 128.0, cr = cmyk[i * 4 + 2] - 128.0;
                       const double v = k == 0 ? y + 1.402 * cr : k == 1 ? y - 0.344136 * cb - 0.714136 * cr
                                                                         : y + 1.772 * cb;
                       return std::clamp(static_cast<int>(std::lround(v)), 0, 255);
                     }),
            3);
  // Three components with ids 'R', 'G', 'B' are RGB to stb even beside a JFIF marker (libjpeg alone would
  // read them as YCbCr); an Adobe marker of transform 0 without JFIF is RGB as well.
  const auto same_rgb = [&](int i, int k) { return int{rgb[i * 3 + k]}; };
  EXPECT_LE(max_diff(decode_image(jpeg_encode(w, h, 3, JCS_RGB, JCS_RGB, false, true, true, rgb), {}, "ids"),
                     same_rgb),
            2);
  EXPECT_LE(max_diff(decode_image(jpeg_encode(w, h, 3, JCS_RGB, JCS_RGB, true, false, false, rgb), {}, "adobe"),
                     same_rgb),
            2);
  // Grey: R = G = B.
  std::vector<uint8_t> grey(w * h);
  for (int i = 0; i < w * h; i++) grey[i] = rgb[i * 3];
  const ImageU8 g = decode_image(jpeg_encode(w, h, 1, JCS_GRAYSCALE, JCS_GRAYSCALE, false, true, false, grey), {}, "g");
  EXPECT_LE(max_diff(g, [&](int i, int) { return int{grey[i]}; }), 1);
  for (size_t i = 0; i < g.rgb.size(); i += 3) ASSERT_TRUE(g.rgb[i] == g.rgb[i + 1] && g.rgb[i] == g.rgb[i + 2]);
}

// A progressive file whose last scan is repeated past libjpeg-turbo's 500-scan guard (each repeat is only
// a warning to libjpeg, and a full pass over the coefficients): refused.
TEST(MediaImage, JpegOfTooManyScansIsRefused) {
  const std::vector<uint8_t> jpeg = read_bytes(kMedia + "progressive_96x64.jpg");
  const uint8_t sos[] = {0xff, 0xda};
  const auto last = std::find_end(jpeg.begin(), jpeg.end(), std::begin(sos), std::end(sos));
  ASSERT_NE(last, jpeg.end());
  const std::vector<uint8_t> scan(last, jpeg.end() - 2);  // up to EOI
  std::vector<uint8_t> many(jpeg.begin(), jpeg.end() - 2);
  for (int i = 0; i < 520; i++) many.insert(many.end(), scan.begin(), scan.end());
  many.insert(many.end(), {0xff, 0xd9});
  EXPECT_NE(decode_error(many, {size_t{8} << 20, 1 << 20}).find("(libjpeg-turbo: more than 500 scans)"),
            std::string::npos)
      << decode_error(many, {size_t{8} << 20, 1 << 20});
  // 20 repeats: decoded (libjpeg warns of the bogus progression and goes on).
  std::vector<uint8_t> some(jpeg.begin(), jpeg.end() - 2);
  for (int i = 0; i < 20; i++) some.insert(some.end(), scan.begin(), scan.end());
  some.insert(some.end(), {0xff, 0xd9});
  EXPECT_EQ(decode_error(some), "");
}

// A PNG signature and an IHDR chunk stating width x height, nothing after it.
std::vector<uint8_t> png_header(uint32_t width, uint32_t height) {
  std::vector<uint8_t> b = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
  for (uint32_t v : {width, height})
    for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
  b.insert(b.end(), {8, 2, 0, 0, 0, 0, 0, 0, 0});  // 8-bit RGB, and a CRC that is wrong (checked after the limit)
  return b;
}

TEST(MediaImage, LimitsAreCheckedBeforeDecoding) {
  EXPECT_EQ(decode_error(png_header(100000, 100000)),
            "messages[0].content[1]: PNG image of 100000x100000 = 10000000000 pixels, over the limit of 50000000 "
            "pixels");
  // PNG's largest sides (2^32 - 1, which the spec forbids past 2^31 - 1): the count in 64 bits, no overflow.
  EXPECT_EQ(decode_error(png_header(0xffffffff, 0xffffffff)),
            "messages[0].content[1]: PNG image of 4294967295x4294967295 = 18446744065119617025 pixels, over the "
            "limit of 50000000 pixels");
  // Past libpng's default of 1,000,000 a side but within the pixel limit: libpng's own bound is raised to
  // the limit, so what remains is the missing data after IHDR (here its wrong CRC).
  EXPECT_NE(decode_error(png_header(2000000, 1)).find("corrupt or truncated PNG image (libpng: "), std::string::npos);
  const std::vector<uint8_t> png = read_bytes(kMedia + "rgba_200x150.png");
  EXPECT_NE(decode_error(png, {size_t{1} << 20, 29999}).find("200x150 = 30000 pixels, over the limit of 29999"),
            std::string::npos);
  EXPECT_EQ(decode_error(png, {1000, 1 << 20}),
            fmt::format("messages[0].content[1]: the image is {} bytes, over the limit of 1000 bytes", png.size()));
  // The JPEG's size from its frame header, the GIF's from its logical screen.
  for (const char* name : {"baseline_96x64.jpg", "progressive_96x64.jpg", "lzw_40x30.gif", "frame_48x40.gif"})
    EXPECT_NE(decode_error(read_bytes(kMedia + name), {size_t{1} << 20, 100}).find("over the limit of 100 pixels"),
              std::string::npos)
        << name;
  EXPECT_EQ(decode_error(png, {size_t{1} << 20, 30000}), "");
  // A JPEG frame header (SOF0) stating 65535x65535: the limit's message, not libjpeg-turbo's 65500 bound.
  std::vector<uint8_t> jpeg = read_bytes(kMedia + "baseline_96x64.jpg");
  const uint8_t sof0[] = {0xff, 0xc0};
  const auto sof = std::search(jpeg.begin(), jpeg.end(), std::begin(sof0), std::end(sof0));
  ASSERT_NE(sof, jpeg.end());
  std::fill(sof + 5, sof + 9, 0xff);
  EXPECT_NE(decode_error(jpeg).find("JPEG image of 65535x65535 = 4294836225 pixels, over the limit"),
            std::string::npos);
  // A GIF screen of 65535x65535.
  std::vector<uint8_t> gif = read_bytes(kMedia + "lzw_40x30.gif");
  std::fill(gif.begin() + 6, gif.begin() + 10, 0xff);
  EXPECT_NE(decode_error(gif).find("GIF image of 65535x65535 = 4294836225 pixels, over the limit"),
            std::string::npos);
}

TEST(MediaImage, WebPLosslessDecodesToThePixelsEncoded) {
  const ImageU8 src = decode_file("rgb_37x23.png");
  uint8_t* encoded = nullptr;
  const size_t size = WebPEncodeLosslessRGB(src.rgb.data(), src.width, src.height, src.width * 3, &encoded);
  ASSERT_GT(size, 0u);
  const std::vector<uint8_t> webp(encoded, encoded + size);
  WebPFree(encoded);
  const ImageU8 img = decode_image(webp, {}, "image.webp");
  EXPECT_EQ(img.width, 37);
  EXPECT_EQ(img.height, 23);
  EXPECT_EQ(img.rgb, src.rgb);
  EXPECT_NE(decode_error(webp, {size_t{1} << 20, 100}).find("WebP image of 37x23 = 851 pixels, over the limit"),
            std::string::npos);
  for (size_t n = 0; n < webp.size(); n++) {
    const std::string err = decode_error(std::span(webp.data(), n));
    EXPECT_NE(err.find("messages[0].content[1]: "), std::string::npos) << n << " bytes: " << err;
  }
}

}  // namespace kestrel::media_image_test
