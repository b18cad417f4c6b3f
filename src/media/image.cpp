#include "media/image.h"

#include <fmt/format.h>
#include <gif_lib.h>
#include <png.h>
#include <webp/decode.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

// jpeglib.h wants size_t and FILE declared first (<cstddef>, <cstdio> above).
#include <jerror.h>
#include <jpeglib.h>

#include "core/error.h"

// Every expression below that llama.cpp computes in float32 or double is written as theirs, operand for
// operand: a reordered sum, a multiplication by a reciprocal or an FMA would move a weight by one unit in the
// last place and a pixel by one. The library is built for baseline x86-64 (no FMA to contract into), as
// llama.cpp's libmtmd is.
//
// The decoders: libpng and libjpeg report errors through a callback that must not return, so it longjmps
// back to the setjmp of the function that called into the library. Those functions (png_*_phase, jpeg_*_phase)
// hold no object with a destructor, keep their state in a context struct reached through a pointer, and
// throw nothing: the C++ around them (limits, allocation, kestrel::Error) runs between the phases.

namespace kestrel {

// A named namespace inside the anonymous one: the library is compiled in unity batches, where every file's
// anonymous namespace is one and the same.
namespace {
namespace image_impl {

enum class Format { Unknown, Png, Jpeg, Gif, WebP };

const char* format_name(Format f) {
  switch (f) {
    case Format::Png: return "PNG";
    case Format::Jpeg: return "JPEG";
    case Format::Gif: return "GIF";
    case Format::WebP: return "WebP";
    case Format::Unknown: break;
  }
  return "unknown";
}

Format detect_format(std::span<const uint8_t> b) {
  auto starts = [&](const char* magic, size_t at = 0) {
    const size_t n = std::strlen(magic);
    return b.size() >= at + n && std::memcmp(b.data() + at, magic, n) == 0;
  };
  if (starts("\x89PNG\r\n\x1a\n")) return Format::Png;
  if (starts("\xff\xd8\xff")) return Format::Jpeg;
  if (starts("GIF87a") || starts("GIF89a")) return Format::Gif;
  if (starts("RIFF") && starts("WEBP", 8)) return Format::WebP;
  return Format::Unknown;
}

std::string first_bytes_hex(std::span<const uint8_t> b) {
  std::string s;
  for (size_t i = 0; i < std::min<size_t>(b.size(), 8); i++) s += fmt::format("{}{:02x}", i ? " " : "", b[i]);
  return s;
}

// w and h are below 2^32 (PNG's 32-bit sides are the largest): their product is exact in 64 unsigned bits.
void check_pixels(int64_t w, int64_t h, Format f, const ImageLimits& limits, const std::string& what) {
  if (w <= 0 || h <= 0)
    throw Error(fmt::format("{}: corrupt or truncated {} image (its header says {}x{} pixels)", what,
                            format_name(f), w, h));
  const uint64_t pixels = static_cast<uint64_t>(w) * static_cast<uint64_t>(h);
  if (limits.max_pixels < 0 || pixels > static_cast<uint64_t>(limits.max_pixels))
    throw Error(fmt::format("{}: {} image of {}x{} = {} pixels, over the limit of {} pixels", what, format_name(f), w,
                            h, pixels, limits.max_pixels));
}

// A decoder's reason, made safe for a JSON reply and a log line: printable ASCII only, no trailing newline.
std::string printable(const char* s) {
  std::string out = s ? s : "";
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  for (char& c : out)
    if (c < 0x20 || c > 0x7e) c = '?';
  return out.empty() ? std::string("the data is cut off or corrupt") : out;
}

[[noreturn]] void corrupt(const std::string& what, Format f, const char* library, const char* reason) {
  throw Error(fmt::format("{}: corrupt or truncated {} image ({}: {})", what, format_name(f), library,
                          printable(reason)));
}

uint32_t le16(const uint8_t* p) { return p[0] | p[1] << 8; }
uint32_t be16(const uint8_t* p) { return uint32_t{p[0]} << 8 | p[1]; }
uint32_t be32(const uint8_t* p) { return be16(p) << 16 | be16(p + 2); }

// A JPEG's size from its frame header (SOF0..SOF15, not DHT, JPG or DAC), found by walking the markers.
std::optional<std::pair<int64_t, int64_t>> jpeg_size(std::span<const uint8_t> b) {
  size_t i = 2;  // after SOI
  while (i + 4 <= b.size()) {
    if (b[i] != 0xff) return std::nullopt;
    const uint8_t m = b[i + 1];
    if (m == 0xff) {  // fill byte
      i++;
      continue;
    }
    if (m == 0x01 || (m >= 0xd0 && m <= 0xd9)) {  // markers without a length
      i += 2;
      continue;
    }
    const size_t len = be16(&b[i + 2]);
    if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) {
      if (i + 9 > b.size()) return std::nullopt;
      return std::pair<int64_t, int64_t>{be16(&b[i + 7]), be16(&b[i + 5])};
    }
    if (len < 2) return std::nullopt;
    i += 2 + len;
  }
  return std::nullopt;
}

// The size a header states, read from the bytes before any library sees them: the limit is checked first,
// so that an oversized image is refused with the limit's message, not a library's own bound ("Image width
// exceeds user limit", "Maximum supported image dimension is 65500 pixels") or another fault further on.
std::optional<std::pair<int64_t, int64_t>> header_size(std::span<const uint8_t> b, Format f) {
  const uint8_t* p = b.data();
  if (f == Format::Jpeg) return jpeg_size(b);
  if (f == Format::Png && b.size() >= 24 && std::memcmp(p + 12, "IHDR", 4) == 0)
    return std::pair<int64_t, int64_t>{be32(p + 16), be32(p + 20)};
  if (f == Format::Gif && b.size() >= 10) return std::pair<int64_t, int64_t>{le16(p + 6), le16(p + 8)};
  return std::nullopt;
}

// ---- PNG: libpng ------------------------------------------------------------------------------------------

struct PngContext {
  const uint8_t* data = nullptr;
  size_t size = 0, pos = 0;
  char message[256] = "";
  // From the header phase:
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0, interlace = 0;
  // From the transform phase:
  size_t rowbytes = 0;
  int channels = 0, out_depth = 0, passes = 1;
  uint8_t* out = nullptr;  // height rows of rowbytes
};

void png_read_cb(png_structp png, png_bytep out, size_t n) {
  auto* c = static_cast<PngContext*>(png_get_io_ptr(png));
  if (n > c->size - c->pos) png_error(png, "the data is cut off");
  std::memcpy(out, c->data + c->pos, n);
  c->pos += n;
}

void png_error_cb(png_structp png, png_const_charp msg) {
  auto* c = static_cast<PngContext*>(png_get_error_ptr(png));
  std::snprintf(c->message, sizeof c->message, "%s", msg ? msg : "");
  png_longjmp(png, 1);
}

void png_warning_cb(png_structp, png_const_charp) {}

// The signature and the chunks up to the first IDAT.
bool png_header_phase(png_structp png, png_infop info, PngContext* c, png_uint_32 max_side) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, c, png_read_cb);
  // libpng's own bounds: each side may reach the pixel limit (its default is 1,000,000 a side); ancillary
  // chunks stay within its default 8 MB each.
  png_set_user_limits(png, max_side, max_side);
  // Only IHDR, PLTE, tRNS, IDAT and IEND are read, as stb_image reads them: every other chunk (gAMA, sRGB,
  // iCCP, text, ...) is skipped without being parsed, and an unknown critical chunk is refused.
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, nullptr, -1);
  // A zlib header that understates its window (some encoders write one) still inflates, as in stb_image.
  (void)png_set_option(png, PNG_MAXIMUM_INFLATE_WINDOW, PNG_OPTION_ON);
  // Nor are the checksums checked, as stb_image checks neither: the chunks' CRCs and zlib's Adler-32. A file
  // llama.cpp accepts is not refused for a wrong checksum (its data is still read through).
  png_set_crc_action(png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
  (void)png_set_option(png, PNG_IGNORE_ADLER32, PNG_OPTION_ON);
  png_read_info(png, info);
  png_get_IHDR(png, info, &c->width, &c->height, &c->bit_depth, &c->color_type, &c->interlace, nullptr, nullptr);
  return true;
}

// To RGB8 as stb_image's stbi_load(..., 3): palette expanded (its tRNS alpha dropped), grey of 1, 2 or 4 bits
// scaled to 8 (x 255, 85, 17), grey replicated to R = G = B, 16-bit samples cut to their high byte (a chop,
// not libpng's rounding png_set_scale_16), alpha stripped (not composited). No gamma: nothing calls
// png_set_gamma and gAMA, sRGB, iCCP are skipped unread. tRNS on grey or RGB is not expanded to alpha.
bool png_transform_phase(png_structp png, png_infop info, PngContext* c) {
  if (setjmp(png_jmpbuf(png))) return false;
  if (c->color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (c->color_type == PNG_COLOR_TYPE_GRAY && c->bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (c->bit_depth == 16) png_set_strip_16(png);
  if (!(c->color_type & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(png);
  png_set_strip_alpha(png);
  c->passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  c->rowbytes = png_get_rowbytes(png, info);
  c->channels = png_get_channels(png, info);
  c->out_depth = png_get_bit_depth(png, info);
  return true;
}

// Every row, in each pass of an interlaced image (png_read_image's loop, without its array of row pointers:
// a tall image's would outweigh its pixels), then the chunks after the image through IEND and its CRC: a
// file cut anywhere is refused.
bool png_pixels_phase(png_structp png, PngContext* c) {
  if (setjmp(png_jmpbuf(png))) return false;
  for (int pass = 0; pass < c->passes; pass++)
    for (png_uint_32 y = 0; y < c->height; y++) png_read_row(png, c->out + y * c->rowbytes, nullptr);
  png_read_end(png, nullptr);
  return true;
}

ImageU8 decode_png(std::span<const uint8_t> bytes, const ImageLimits& limits, const std::string& what) {
  PngContext c;
  c.data = bytes.data();
  c.size = bytes.size();
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &c, png_error_cb, png_warning_cb);
  if (!png) throw Error(fmt::format("{}: out of memory decoding a PNG image", what));
  png_infop info = png_create_info_struct(png);
  struct Destroy {
    png_structp* png;
    png_infop* info;
    ~Destroy() { png_destroy_read_struct(png, info, nullptr); }
  } destroy{&png, &info};
  if (!info) throw Error(fmt::format("{}: out of memory decoding a PNG image", what));
  const auto fail = [&] { corrupt(what, Format::Png, "libpng", c.message); };
  const png_uint_32 side = static_cast<png_uint_32>(std::clamp<int64_t>(limits.max_pixels, 1, PNG_UINT_31_MAX));
  if (!png_header_phase(png, info, &c, side)) fail();
  check_pixels(c.width, c.height, Format::Png, limits, what);
  if (!png_transform_phase(png, info, &c)) fail();
  if (c.channels != 3 || c.out_depth != 8 || c.rowbytes != static_cast<size_t>(c.width) * 3)
    throw Error(fmt::format("{}: PNG image of colour type {} and bit depth {} did not convert to RGB8", what,
                            c.color_type, c.bit_depth));
  ImageU8 out{static_cast<int>(c.width), static_cast<int>(c.height), {}};
  out.rgb.resize(static_cast<size_t>(c.width) * c.height * 3);
  c.out = out.rgb.data();
  if (!png_pixels_phase(png, &c)) fail();
  return out;
}

// ---- JPEG: libjpeg-turbo (its libjpeg API) ----------------------------------------------------------------

// More scans than any encoder writes (libjpeg's progressive script has 10; TurboJPEG's scan limit for
// untrusted input is 500): a progressive file of thousands of tiny scans costs a full pass over the
// coefficients each.
constexpr int kJpegMaxScans = 500;

struct JpegContext {
  jpeg_error_mgr err{};
  jpeg_progress_mgr progress{};
  std::jmp_buf jump{};
  char message[JMSG_LENGTH_MAX + 64] = "";
  // From the header phase:
  int width = 0, height = 0, components = 0;
  int component_ids[4] = {};
  bool jfif = false;
  int adobe_transform = -1;
  // Chosen between the phases:
  J_COLOR_SPACE in_space = JCS_UNKNOWN, out_space = JCS_RGB;
  enum class Convert { None, Cmyk, InvertedRgb } convert = Convert::None;
  uint8_t* out = nullptr;  // width * height * 3
  uint8_t* row = nullptr;  // width * 4, for CMYK
};

JpegContext* jpeg_context(j_common_ptr cinfo) { return reinterpret_cast<JpegContext*>(cinfo->err); }

void jpeg_error_cb(j_common_ptr cinfo) {
  JpegContext* c = jpeg_context(cinfo);
  if (cinfo->err->msg_code == JERR_NO_BACKING_STORE)  // what libjpeg says when max_memory_to_use is reached
    std::snprintf(c->message, sizeof c->message, "it needs more memory than its size allows");
  else
    (*cinfo->err->format_message)(cinfo, c->message);
  std::longjmp(c->jump, 1);
}

// Warnings (level -1) pass, as in libjpeg's own tools (corrupt entropy data, extraneous bytes), all but one:
// the file ending before the image does (libjpeg would fill the rest with grey) is an error.
void jpeg_message_cb(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) jpeg_error_cb(cinfo);
}

void jpeg_progress_cb(j_common_ptr cinfo) {
  if (!cinfo->is_decompressor) return;
  if (reinterpret_cast<j_decompress_ptr>(cinfo)->input_scan_number > kJpegMaxScans) {
    JpegContext* c = jpeg_context(cinfo);
    std::snprintf(c->message, sizeof c->message, "more than %d scans", kJpegMaxScans);
    std::longjmp(c->jump, 1);
  }
}

// APP0 and APP14 are kept (their first 16 bytes) to choose the colour space as stb_image does.
bool jpeg_header_phase(j_decompress_ptr cinfo, const uint8_t* data, size_t size) {
  JpegContext* c = jpeg_context(reinterpret_cast<j_common_ptr>(cinfo));
  if (setjmp(c->jump)) return false;
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_save_markers(cinfo, JPEG_APP0, 16);
  jpeg_save_markers(cinfo, JPEG_APP0 + 14, 16);
  (void)jpeg_read_header(cinfo, TRUE);
  c->width = static_cast<int>(cinfo->image_width);
  c->height = static_cast<int>(cinfo->image_height);
  c->components = cinfo->num_components;
  for (int i = 0; i < std::min(c->components, 4); i++) c->component_ids[i] = cinfo->comp_info[i].component_id;
  for (jpeg_saved_marker_ptr m = cinfo->marker_list; m; m = m->next) {
    if (m->marker == JPEG_APP0 && m->original_length >= 5 && m->data_length >= 5 &&
        std::memcmp(m->data, "JFIF\0", 5) == 0)
      c->jfif = true;
    if (m->marker == JPEG_APP0 + 14 && m->original_length >= 12 && m->data_length >= 12 &&
        std::memcmp(m->data, "Adobe\0", 6) == 0)
      c->adobe_transform = m->data[11];
  }
  return true;
}

// stbi__blinn_8x8: x * y / 255, rounded.
uint8_t blinn_8x8(unsigned x, unsigned y) {
  const unsigned t = x * y + 128;
  return static_cast<uint8_t>((t + (t >> 8)) >> 8);
}

// The whole image, scanline by scanline, into c->out; then the rest of the file through EOI.
// JDCT_ISLOW and fancy upsampling (libjpeg's defaults) come closest to stb_image (docs/multimodal.md).
bool jpeg_pixels_phase(j_decompress_ptr cinfo) {
  JpegContext* c = jpeg_context(reinterpret_cast<j_common_ptr>(cinfo));
  if (setjmp(c->jump)) return false;
  cinfo->jpeg_color_space = c->in_space;
  cinfo->out_color_space = c->out_space;
  cinfo->dct_method = JDCT_ISLOW;
  cinfo->do_fancy_upsampling = TRUE;
  (void)jpeg_start_decompress(cinfo);
  if (static_cast<int>(cinfo->output_width) != c->width || static_cast<int>(cinfo->output_height) != c->height ||
      cinfo->output_components != (c->convert == JpegContext::Convert::None ? 3 : 4)) {
    std::snprintf(c->message, sizeof c->message, "decoded to an unexpected size or colour layout");
    return false;
  }
  const size_t stride = static_cast<size_t>(c->width) * 3;
  while (cinfo->output_scanline < cinfo->output_height) {
    uint8_t* dst = c->out + cinfo->output_scanline * stride;
    JSAMPROW row = c->convert == JpegContext::Convert::None ? dst : c->row;
    if (jpeg_read_scanlines(cinfo, &row, 1) != 1) {
      std::snprintf(c->message, sizeof c->message, "the data is cut off");
      return false;
    }
    if (c->convert == JpegContext::Convert::Cmyk) {
      for (int x = 0; x < c->width; x++) {
        const uint8_t* p = c->row + x * 4;
        dst[x * 3 + 0] = blinn_8x8(p[0], p[3]);
        dst[x * 3 + 1] = blinn_8x8(p[1], p[3]);
        dst[x * 3 + 2] = blinn_8x8(p[2], p[3]);
      }
    } else if (c->convert == JpegContext::Convert::InvertedRgb) {
      for (int x = 0; x < c->width; x++)
        for (int k = 0; k < 3; k++) dst[x * 3 + k] = static_cast<uint8_t>(255 - c->row[x * 4 + k]);
    }
  }
  (void)jpeg_finish_decompress(cinfo);
  return true;
}

ImageU8 decode_jpeg(std::span<const uint8_t> bytes, const ImageLimits& limits, const std::string& what) {
  JpegContext c;
  jpeg_decompress_struct cinfo{};
  cinfo.err = jpeg_std_error(&c.err);  // c.err is JpegContext's first member: jpeg_context() casts back
  c.err.error_exit = jpeg_error_cb;
  c.err.emit_message = jpeg_message_cb;
  if (setjmp(c.jump)) corrupt(what, Format::Jpeg, "libjpeg-turbo", c.message);  // jpeg_create_decompress only
  jpeg_create_decompress(&cinfo);
  struct Destroy {
    jpeg_decompress_struct* cinfo;
    ~Destroy() { jpeg_destroy_decompress(cinfo); }
  } destroy{&cinfo};
  c.progress.progress_monitor = jpeg_progress_cb;
  cinfo.progress = &c.progress;
  // libjpeg's whole memory: the coefficients of a progressive image (2 bytes each, 64 a block: 2 bytes a
  // pixel and component, four components at most at full resolution) and its row buffers.
  cinfo.mem->max_memory_to_use =
      static_cast<long>(std::min<int64_t>(limits.max_pixels, int64_t{1} << 40) * 8 + (int64_t{64} << 20));
  if (!jpeg_header_phase(&cinfo, bytes.data(), bytes.size())) corrupt(what, Format::Jpeg, "libjpeg-turbo", c.message);
  check_pixels(c.width, c.height, Format::Jpeg, limits, what);
  // The colour space as stb_image decides it (load_jpeg_image), not libjpeg's own guess: three components are
  // RGB when their ids are 'R', 'G', 'B' or an Adobe marker says "no transform" and there is no JFIF marker,
  // YCbCr otherwise; four are CMYK (Adobe transform 0) or YCCK (2), each multiplied by K as stb does
  // (C * K / 255, Adobe's inverted CMYK), else YCbCr with the fourth component ignored.
  using Convert = JpegContext::Convert;
  switch (c.components) {
    case 1: c.in_space = JCS_GRAYSCALE; break;
    case 3: {
      const bool rgb_ids = c.component_ids[0] == 'R' && c.component_ids[1] == 'G' && c.component_ids[2] == 'B';
      c.in_space = rgb_ids || (c.adobe_transform == 0 && !c.jfif) ? JCS_RGB : JCS_YCbCr;
      break;
    }
    case 4:
      c.out_space = JCS_CMYK;
      c.in_space = c.adobe_transform == 0 ? JCS_CMYK : JCS_YCCK;  // libjpeg turns YCCK into (255 - RGB, K)
      c.convert = c.adobe_transform == 0 || c.adobe_transform == 2 ? Convert::Cmyk : Convert::InvertedRgb;
      break;
    default:
      throw Error(fmt::format("{}: JPEG image of {} colour components is not supported (1, 3 or 4)", what,
                              c.components));
  }
  ImageU8 out{c.width, c.height, std::vector<uint8_t>(static_cast<size_t>(c.width) * c.height * 3)};
  std::vector<uint8_t> row(c.convert == Convert::None ? 0 : static_cast<size_t>(c.width) * 4);
  c.out = out.rgb.data();
  c.row = row.data();
  if (!jpeg_pixels_phase(&cinfo)) corrupt(what, Format::Jpeg, "libjpeg-turbo", c.message);
  return out;
}

// ---- GIF: giflib, the first frame as stb_image renders it ------------------------------------------------

struct GifInput {
  const uint8_t* data;
  size_t size, pos;
};

int gif_read_cb(GifFileType* gif, GifByteType* out, int n) {
  auto* in = static_cast<GifInput*>(gif->UserData);
  const size_t k = std::min(static_cast<size_t>(std::max(n, 0)), in->size - in->pos);
  std::memcpy(out, in->data + in->pos, k);
  in->pos += k;
  return static_cast<int>(k);
}

// stb_image's first frame (stbi__gif_load_next), reproduced on giflib's records:
// - the canvas is the logical screen, starting black (stb's canvas is zeroed RGBA);
// - the frame's pixels are its colour table's RGB (the local table, else the global one); a pixel whose index
//   is the transparent one of the last graphic control extension, or past the table's end, is not drawn and
//   stays black;
// - if the screen's background index is not 0, every canvas pixel the frame does not cover gets the global
//   table's entry at that index, with R and B swapped (stb copies its BGRA palette entry as is), black when
//   there is no global table or the index is past its end.
ImageU8 decode_gif(std::span<const uint8_t> bytes, const ImageLimits& limits, const std::string& what) {
  GifInput in{bytes.data(), bytes.size(), 0};
  int error = 0;
  std::unique_ptr<GifFileType, void (*)(GifFileType*)> gif(DGifOpen(&in, gif_read_cb, &error), [](GifFileType* g) {
    int e = 0;
    (void)DGifCloseFile(g, &e);
  });
  const auto fail = [&](int code) {
    corrupt(what, Format::Gif, "giflib", code ? GifErrorString(code) : "the data is cut off or corrupt");
  };
  const auto refuse = [&](const std::string& why) {
    throw Error(fmt::format("{}: corrupt or truncated GIF image ({})", what, why));
  };
  if (!gif) fail(error);
  const int sw = gif->SWidth, sh = gif->SHeight;
  check_pixels(sw, sh, Format::Gif, limits, what);
  const ColorMapObject* global = gif->SColorMap;
  int transparent = -1;
  for (;;) {
    GifRecordType type = UNDEFINED_RECORD_TYPE;
    if (DGifGetRecordType(gif.get(), &type) == GIF_ERROR) fail(gif->Error);
    if (type == TERMINATE_RECORD_TYPE) refuse("it ends before its first image");
    if (type == EXTENSION_RECORD_TYPE) {
      int code = 0;
      GifByteType* ext = nullptr;
      if (DGifGetExtension(gif.get(), &code, &ext) == GIF_ERROR) fail(gif->Error);
      if (code == GRAPHICS_EXT_FUNC_CODE && ext) {
        if (ext[0] != 4) refuse(fmt::format("a graphic control extension of {} bytes, not 4", ext[0]));
        transparent = (ext[1] & 0x01) ? ext[4] : -1;
      }
      while (ext)
        if (DGifGetExtensionNext(gif.get(), &ext) == GIF_ERROR) fail(gif->Error);
      continue;
    }
    if (type != IMAGE_DESC_RECORD_TYPE) refuse("an unknown record");
    if (DGifGetImageDesc(gif.get()) == GIF_ERROR) fail(gif->Error);
    const GifImageDesc& d = gif->Image;
    if (d.Left < 0 || d.Top < 0 || d.Width < 0 || d.Height < 0 || int64_t{d.Left} + d.Width > sw ||
        int64_t{d.Top} + d.Height > sh)
      refuse(fmt::format("its first frame, {}x{} at {},{}, is not within the {}x{} screen", d.Width, d.Height, d.Left,
                         d.Top, sw, sh));
    const ColorMapObject* table = d.ColorMap ? d.ColorMap : global;
    if (!table) refuse("no colour table");
    ImageU8 out{sw, sh, std::vector<uint8_t>(static_cast<size_t>(sw) * sh * 3, 0)};
    std::vector<uint8_t> drawn(static_cast<size_t>(sw) * sh, 0);
    if (d.Width > 0 && d.Height > 0) {
      std::vector<GifPixelType> line(d.Width);
      const auto put_row = [&](int y) {
        if (DGifGetLine(gif.get(), line.data(), d.Width) == GIF_ERROR) fail(gif->Error);
        const size_t at = static_cast<size_t>(d.Top + y) * sw + d.Left;
        for (int x = 0; x < d.Width; x++) {
          const int index = line[x];
          drawn[at + x] = 1;
          if (index == transparent || index >= table->ColorCount) continue;
          const GifColorType& rgb = table->Colors[index];
          uint8_t* p = &out.rgb[(at + x) * 3];
          p[0] = rgb.Red;
          p[1] = rgb.Green;
          p[2] = rgb.Blue;
        }
      };
      if (d.Interlace) {
        static constexpr int kStart[4] = {0, 4, 2, 1}, kStep[4] = {8, 8, 4, 2};
        for (int pass = 0; pass < 4; pass++)
          for (int y = kStart[pass]; y < d.Height; y += kStep[pass]) put_row(y);
      } else {
        for (int y = 0; y < d.Height; y++) put_row(y);
      }
    }
    const int bg = gif->SBackGroundColor;
    if (bg > 0) {
      uint8_t fill[3] = {0, 0, 0};
      if (global && bg < global->ColorCount) {
        fill[0] = global->Colors[bg].Blue;
        fill[1] = global->Colors[bg].Green;
        fill[2] = global->Colors[bg].Red;
      }
      for (size_t i = 0; i < drawn.size(); i++)
        if (!drawn[i]) std::copy(fill, fill + 3, &out.rgb[i * 3]);
    }
    return out;
  }
}

// ---- WebP: libwebp ----------------------------------------------------------------------------------------

ImageU8 decode_webp(std::span<const uint8_t> bytes, const ImageLimits& limits, const std::string& what) {
  WebPBitstreamFeatures features;
  const VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (status != VP8_STATUS_OK)
    throw Error(fmt::format("{}: corrupt or truncated WebP image (libwebp: {})", what,
                            status == VP8_STATUS_NOT_ENOUGH_DATA ? "not enough data" : "bad header"));
  if (features.has_animation)
    throw Error(fmt::format("{}: animated WebP images are not supported (send one frame as PNG or JPEG)", what));
  check_pixels(features.width, features.height, Format::WebP, limits, what);
  int w = 0, h = 0;
  std::unique_ptr<uint8_t, void (*)(void*)> pixels(WebPDecodeRGB(bytes.data(), bytes.size(), &w, &h), WebPFree);
  if (!pixels) throw Error(fmt::format("{}: corrupt or truncated WebP image (libwebp could not decode it)", what));
  check_pixels(w, h, Format::WebP, limits, what);
  ImageU8 out{w, h, {}};
  out.rgb.assign(pixels.get(), pixels.get() + static_cast<size_t>(w) * h * 3);
  return out;
}

void check_image(const ImageU8& image, const char* who) {
  if (image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != static_cast<size_t>(image.width) * static_cast<size_t>(image.height) * 3)
    throw Error(fmt::format("{}: invalid image ({}x{} with {} bytes of RGB)", who, image.width, image.height,
                            image.rgb.size()));
}

void check_target(int width, int height, const char* who) {
  if (width <= 0 || width > 65536 || height <= 0 || height > 65536)
    throw Error(fmt::format("{}: target size {}x{} is out of range (1..65536 each side)", who, width, height));
}

// Pillow's fixed point: 32 bits less 8 for a pixel, less 2 of headroom for the sum of the weights.
constexpr int kPrecisionBits = 32 - 8 - 2;

double filter_support(ResizeAlgo algo) {
  switch (algo) {
    case ResizeAlgo::Bilinear: return 1.0;
    case ResizeAlgo::Bicubic: return 2.0;
    case ResizeAlgo::Lanczos: return 3.0;
  }
  throw Error("resize: unknown resampling filter");
}

// The filter's weight at distance x (in source pixels, scaled) from the output pixel's centre.
double filter_weight(ResizeAlgo algo, double x) {
  if (algo == ResizeAlgo::Lanczos) {
    if (-3.0 <= x && x < 3.0) {
      auto sinc = [](double v) {
        if (v == 0.0) return 1.0;
        const double pi_v = v * 3.141592653589793238462643383279502884;
        return std::sin(pi_v) / pi_v;
      };
      return sinc(x) * sinc(x / 3.0);
    }
    return 0.0;
  }
  if (x < 0.0) x = -x;
  if (algo == ResizeAlgo::Bilinear) return x < 1.0 ? 1.0 - x : 0.0;
  constexpr double a = -0.5;  // Pillow's bicubic (PyTorch and ggml use -0.75)
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// One axis's filter: for output pixel i, `count[i]` input pixels from `first[i]`, weighted by
// weights[i * ksize + k] (22-bit fixed point).
struct AxisKernel {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> weights;
};

AxisKernel axis_kernel(int in_size, int out_size, ResizeAlgo algo) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;  // widened only when downsampling
  const double support = filter_support(algo) * filterscale;
  AxisKernel k;
  k.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  k.first.resize(out_size);
  k.count.resize(out_size);
  std::vector<double> w(static_cast<size_t>(out_size) * k.ksize, 0.0);
  for (int xx = 0; xx < out_size; xx++) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    const int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    double* row = &w[static_cast<size_t>(xx) * k.ksize];
    double ww = 0.0;
    for (int x = 0; x < xmax; x++) {
      row[x] = filter_weight(algo, (x + xmin - center + 0.5) * ss);
      ww += row[x];
    }
    if (ww != 0.0)
      for (int x = 0; x < xmax; x++) row[x] /= ww;
    k.first[xx] = xmin;
    k.count[xx] = xmax;
  }
  // To fixed point as Pillow rounds: +/-0.5, then truncate toward zero.
  const double one = std::ldexp(1.0, kPrecisionBits);
  k.weights.resize(w.size());
  for (size_t i = 0; i < w.size(); i++) k.weights[i] = static_cast<int32_t>(w[i] * one + (w[i] < 0 ? -0.5 : 0.5));
  return k;
}

uint8_t clip8(int32_t v) { return static_cast<uint8_t>(v < 0 ? 0 : v > 255 ? 255 : v); }

// The sums stay within int32: 255 * the weights' absolute sum (< 2 for these filters) * 2^22 < 2^31.
std::vector<uint8_t> resample_rows(const uint8_t* src, int in_w, int h, int out_w, const AxisKernel& k) {
  std::vector<uint8_t> out(static_cast<size_t>(out_w) * h * 3);
  for (int y = 0; y < h; y++) {
    const uint8_t* src_row = src + static_cast<size_t>(y) * in_w * 3;
    uint8_t* dst = out.data() + static_cast<size_t>(y) * out_w * 3;
    for (int xx = 0; xx < out_w; xx++) {
      const int32_t* wt = &k.weights[static_cast<size_t>(xx) * k.ksize];
      const uint8_t* p = src_row + static_cast<size_t>(k.first[xx]) * 3;
      int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int x = 0; x < k.count[xx]; x++, p += 3) {
        s0 += p[0] * wt[x];
        s1 += p[1] * wt[x];
        s2 += p[2] * wt[x];
      }
      dst[xx * 3 + 0] = clip8(s0 >> kPrecisionBits);
      dst[xx * 3 + 1] = clip8(s1 >> kPrecisionBits);
      dst[xx * 3 + 2] = clip8(s2 >> kPrecisionBits);
    }
  }
  return out;
}

std::vector<uint8_t> resample_columns(const uint8_t* src, int w, int out_h, const AxisKernel& k) {
  const size_t row_elems = static_cast<size_t>(w) * 3;
  std::vector<uint8_t> out(row_elems * out_h);
  std::vector<int32_t> acc(row_elems);
  for (int yy = 0; yy < out_h; yy++) {
    const int32_t* wt = &k.weights[static_cast<size_t>(yy) * k.ksize];
    std::fill(acc.begin(), acc.end(), 1 << (kPrecisionBits - 1));
    for (int y = 0; y < k.count[yy]; y++) {
      const uint8_t* src_row = src + static_cast<size_t>(k.first[yy] + y) * row_elems;
      for (size_t i = 0; i < row_elems; i++) acc[i] += src_row[i] * wt[y];
    }
    uint8_t* dst = out.data() + static_cast<size_t>(yy) * row_elems;
    for (size_t i = 0; i < row_elems; i++) dst[i] = clip8(acc[i] >> kPrecisionBits);
  }
  return out;
}

}  // namespace image_impl
}  // namespace

ImageU8 decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits, const std::string& what) {
  if (bytes.empty()) throw Error(fmt::format("{}: the image is empty (0 bytes)", what));
  if (bytes.size() > limits.max_bytes || bytes.size() > static_cast<size_t>(INT_MAX))
    throw Error(fmt::format("{}: the image is {} bytes, over the limit of {} bytes", what, bytes.size(),
                            std::min<size_t>(limits.max_bytes, INT_MAX)));
  using image_impl::Format;
  const Format f = image_impl::detect_format(bytes);
  if (f == Format::Unknown)
    throw Error(fmt::format("{}: not an image of a supported format (first bytes {}); supported: PNG, JPEG, GIF, "
                            "WebP",
                            what, image_impl::first_bytes_hex(bytes)));
  if (const auto size = image_impl::header_size(bytes, f); size && size->first > 0 && size->second > 0)
    image_impl::check_pixels(size->first, size->second, f, limits, what);
  switch (f) {
    case Format::Png: return image_impl::decode_png(bytes, limits, what);
    case Format::Jpeg: return image_impl::decode_jpeg(bytes, limits, what);
    case Format::Gif: return image_impl::decode_gif(bytes, limits, what);
    case Format::WebP: return image_impl::decode_webp(bytes, limits, what);
    case Format::Unknown: break;
  }
  throw Error(fmt::format("{}: not an image of a supported format", what));
}
ImageU8 resize_pillow(const ImageU8& image, int width, int height, ResizeAlgo algo) {
  image_impl::check_image(image, "resize");
  image_impl::check_target(width, height, "resize");
  const bool horizontal = width != image.width, vertical = height != image.height;
  if (!horizontal && !vertical) return image;
  using image_impl::AxisKernel, image_impl::axis_kernel;
  const AxisKernel kx = horizontal ? axis_kernel(image.width, width, algo) : AxisKernel{};
  const AxisKernel ky = vertical ? axis_kernel(image.height, height, algo) : AxisKernel{};
  ImageU8 out{width, height, {}};
  if (horizontal && vertical) {
    const std::vector<uint8_t> rows = image_impl::resample_rows(image.rgb.data(), image.width, image.height, width, kx);
    out.rgb = image_impl::resample_columns(rows.data(), width, height, ky);
  } else if (horizontal) {
    out.rgb = image_impl::resample_rows(image.rgb.data(), image.width, image.height, width, kx);
  } else {
    out.rgb = image_impl::resample_columns(image.rgb.data(), image.width, height, ky);
  }
  return out;
}

ImageU8 resize_padded(const ImageU8& image, int width, int height, ResizeAlgo algo, Pad pad,
                      std::array<uint8_t, 3> pad_color) {
  image_impl::check_image(image, "resize");
  image_impl::check_target(width, height, "resize");
  if (width == image.width && height == image.height) return image;
  if (pad == Pad::None) return resize_pillow(image, width, height, algo);
  // float32, as llama.cpp's img_tool::resize.
  const float scale = std::min(static_cast<float>(width) / image.width, static_cast<float>(height) / image.height);
  int new_w, new_h, x0, y0;
  if (pad == Pad::Nearest) {
    new_w = std::min(static_cast<int>(std::round(image.width * scale)), width);
    new_h = std::min(static_cast<int>(std::round(image.height * scale)), height);
    x0 = static_cast<int>(std::round((width - new_w) / 2.0f));
    y0 = static_cast<int>(std::round((height - new_h) / 2.0f));
  } else {
    new_w = std::min(static_cast<int>(std::ceil(image.width * scale)), width);
    new_h = std::min(static_cast<int>(std::ceil(image.height * scale)), height);
    x0 = (width - new_w) / 2;
    y0 = (height - new_h) / 2;
  }
  const ImageU8 inner = resize_pillow(image, new_w, new_h, algo);
  ImageU8 out{width, height, std::vector<uint8_t>(static_cast<size_t>(width) * height * 3)};
  for (size_t i = 0; i < out.rgb.size(); i += 3) std::copy(pad_color.begin(), pad_color.end(), &out.rgb[i]);
  for (int y = 0; y < new_h; y++) {
    const int dy = y + y0;
    if (dy < 0 || dy >= height) continue;
    for (int x = 0; x < new_w; x++) {
      const int dx = x + x0;
      if (dx < 0 || dx >= width) continue;
      std::copy_n(&inner.rgb[(static_cast<size_t>(y) * new_w + x) * 3], 3,
                  &out.rgb[(static_cast<size_t>(dy) * width + dx) * 3]);
    }
  }
  return out;
}

std::pair<int, int> size_preserved_ratio(int width, int height, int align, int64_t min_pixels, int64_t max_pixels) {
  if (align <= 0) throw Error(fmt::format("image size: the alignment must be positive (got {})", align));
  if (width <= 0 || height <= 0) return {0, 0};
  const float f = static_cast<float>(align);
  auto round_by = [&](float x) { return static_cast<int>(std::round(x / f)) * align; };
  auto ceil_by = [&](float x) { return static_cast<int>(std::ceil(x / f)) * align; };
  auto floor_by = [&](float x) { return static_cast<int>(std::floor(x / f)) * align; };
  int w_bar = std::max(align, round_by(static_cast<float>(width)));
  int h_bar = std::max(align, round_by(static_cast<float>(height)));
  if (max_pixels > 0 && static_cast<int64_t>(h_bar) * w_bar > max_pixels) {
    const float beta = std::sqrt(static_cast<float>(height) * width / static_cast<float>(max_pixels));
    h_bar = std::max(align, floor_by(height / beta));
    w_bar = std::max(align, floor_by(width / beta));
  } else if (min_pixels > 0 && static_cast<int64_t>(h_bar) * w_bar < min_pixels) {
    const float beta = std::sqrt(static_cast<float>(min_pixels) / (static_cast<float>(height) * width));
    h_bar = ceil_by(height * beta);
    w_bar = ceil_by(width * beta);
  }
  return {w_bar, h_bar};
}

std::vector<float> to_planar_normalized(const ImageU8& image, const float mean[3], const float std_dev[3]) {
  image_impl::check_image(image, "normalize");
  const size_t n = static_cast<size_t>(image.width) * image.height;
  std::vector<float> out(n * 3);
  for (size_t i = 0; i < n; i++)
    for (size_t c = 0; c < 3; c++) {
      const float v = static_cast<float>(image.rgb[i * 3 + c]) / 255.0f;
      out[c * n + i] = (v - mean[c]) / std_dev[c];
    }
  return out;
}

}  // namespace kestrel
