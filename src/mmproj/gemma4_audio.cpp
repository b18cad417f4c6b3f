// Gemma 4's audio encoder and projector (`clip.audio.projector_type = gemma4a`; the audio half of Gemma 4 E2B and
// E4B's mmproj files, beside gemma4v, or a file of its own): a Conformer.
// The front end (llama.cpp's mtmd_audio_preprocessor_gemma4a): 16 kHz mono cut into 30-second chunks, each its own
// run of the encoder, none padded to length; a chunk padded by 160 zeros in front ("semicausal") and behind to
// PyTorch's frame count ((n + 160 - 321) / 160 + 1 frames); a periodic Hann window of 320 zero-padded to 512, an
// FFT of 512 (mmproj/log_mel.h), the magnitude spectrum through 128 HTK mel filters (not area-normalised),
// ln(max(x, 1e-3)), no normalisation.
// The encoder (tools/mtmd/models/gemma4a.cpp), every RMSNorm and LayerNorm at 1e-6 whatever the file says (llama.cpp
// hard-codes it: its converter wrote a wrong value):
//   two 3x3 convolutions of stride 2 and padding 1 over (mel bin, frame), each followed by a LayerNorm over its
//   channels (weight only) and a ReLU; the channels of each frame's bins flattened (channel fastest), the input
//   projection (+ bias); then the blocks, each
//     x += 0.5 * post(FFN(RMSNorm(x)))                            (up, SiLU, down)
//     x += post(Wo . local_attention(RMSNorm(x)) + bo)            (ops/local_rel_attention.h: 12 keys, relative
//                                                                  positions, softcap 50, per-dim q and k scales)
//     x += pw2(SiLU(norm(causal_dwconv5(GLU(pw1(RMSNorm(x)))))))  (ops/causal_conv1d.h)
//     x += 0.5 * post(FFN_1(RMSNorm(x)))
//     x  = RMSNorm(x) x ln2
//   the output projection (+ bias), RMSNorm x mm.a.soft_emb_norm, mm.a.input_projection. Every product but the
//   relative-position one is "clippable" (its input and output clamped to bounds stored beside the weight).
// Rows: a chunk of f frames gives ((f - 1) / 2 + 1 - 1) / 2 + 1 (750 per 30 s). In the prompt: `<|audio>`, the
// rows, `<audio|>`; causal, ordinary positions. The file's conv_norm is the module's pre-norm and norm_conv the
// one after the depthwise convolution (the converter's names are swapped; llama.cpp reads them so).
// llama.cpp: tools/mtmd/models/gemma4a.cpp, clip.cpp (GEMMA4A), mtmd-audio.cpp; ../shared/specs/multimodal-lora-
// router.md A.1.10.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "formats/block_formats.h"
#include "formats/fp16.h"
#include "gguf/gguf_writer.h"
#include "mmproj/log_mel.h"
#include "mmproj/mmproj.h"
#include "mmproj/vit.h"
#include "model/hparams_reader.h"
#include "model/weight_loader.h"
#include "ops/causal_conv1d.h"
#include "ops/local_rel_attention.h"
#include "ops/sigmoid_gate.h"

namespace kestrel {
namespace gemma4_audio {
namespace {

constexpr int kRate = 16000, kFft = 512, kWindow = 320, kHop = 160;
constexpr int64_t kChunkSamples = int64_t{30} * kRate;
constexpr int kBlock = 12, kPast = 12;  // llama.cpp's chunk_size and max_past_horizon: a query sees 12 keys
constexpr int kTaps = 5;                // the depthwise convolution (the graph pads by 4)
constexpr int64_t kConv0Cols = 32;      // the first subsampling product's columns: its 9 taps padded
constexpr float kEps = 1e-6f, kSoftcap = 50.0f, kResidual = 0.5f, kMelFloor = 0.001f;

// A chunk of n samples (1 .. 30 s) as the preprocessor pads it: its padded length and frames.
struct ChunkFrames {
  int64_t padded = 0, frames = 0;
};
ChunkFrames chunk_frames(int64_t n) {
  const int64_t pad_left = kWindow / 2, with_left = n + pad_left;
  const int64_t pt_frames = (with_left - (kWindow + 1)) / kHop + 1;  // C++ division: toward zero, as theirs
  const int64_t needed = (pt_frames - 1) * kHop + kFft;
  ChunkFrames c;
  c.padded = std::max(needed - n, pad_left) + n;
  const int64_t n_len = c.padded < kFft ? 0 : (c.padded - kFft) / kHop + 1;
  c.frames = std::min(n_len, pt_frames);
  return c;
}

// A stride-2, padding-1, size-3 convolution's output length.
int64_t halved(int64_t n) { return (n - 1) / 2 + 1; }

// The rows of a chunk of n samples; 0 when too short for one frame (llama.cpp refuses such a chunk).
int64_t chunk_rows(int64_t n) {
  const int64_t f = chunk_frames(n).frames;
  return f <= 0 ? 0 : halved(halved(f));
}

class Gemma4Audio final : public AudioEncoder {
 public:
  Gemma4Audio(MmprojSource& src, int64_t d, int64_t heads, int64_t ff, int layers, int n_mel)
      : be_(src.be), d_(d), heads_(heads), ff_(ff), n_mel_(n_mel), filters_(mel_filterbank(n_mel, kFft, kRate, true, false)) {
    const WeightLoader& ld = src.tensors;
    const std::string& path = src.file.path();
    hann_.assign(kFft, 0.0f);
    for (int i = 0; i < kWindow; i++)  // 0.5f - 0.5f * cosf((2.0f * (float)M_PI * i) / 320), in float
      hann_[static_cast<size_t>(i)] =
          0.5f - 0.5f * std::cos((2.0f * static_cast<float>(3.14159265358979323846) * static_cast<float>(i)) /
                                 static_cast<float>(kWindow));
    // The subsampling convolutions: {3, 3, in, out} kernels (F32 as the converter forces them; the product in F16).
    int64_t in_ch = 1;
    for (int i = 0; i < 2; i++) {
      const std::string name = fmt::format("a.conv1d.{}.weight", i);
      const GgufTensorInfo* t = src.file.find_tensor(name);
      if (!t || t->ne.size() != 4 || t->ne[0] != 3 || t->ne[1] != 3 || t->ne[2] != in_ch)
        throw Error(fmt::format("{}: tensor '{}' must be a 3x3 convolution {{3, 3, {}, channels}}", path, name, in_ch));
      const int64_t out_ch = t->ne[3];
      const Weight w = ld.require(name, {3, 3, in_ch, out_ch});
      if (w.type != GgmlType::F32 && w.type != GgmlType::F16 && w.type != GgmlType::BF16)
        throw Error(fmt::format("{}: tensor '{}' is {}: the convolution kernels must be F32, F16 or BF16", path, name,
                                type_name(w.type)));
      bytes_ += static_cast<int64_t>(w.nbytes);
      // (As ggml_conv_2d multiplies it: an F16 im2col, whatever the kernel's type but BF16's.)
      std::vector<float> k(static_cast<size_t>(9 * in_ch * out_ch));
      dequantize_row(w.type, w.data, k.data(), 9 * in_ch * out_ch);
      if (i == 0) {  // {32, out}: the 9 taps and zeros, rounded to F16 (conv_kernel_weight)
        std::vector<float> padded(static_cast<size_t>(kConv0Cols * out_ch), 0.0f);
        for (int64_t o = 0; o < out_ch; o++) std::copy_n(k.begin() + o * 9, 9, padded.begin() + o * kConv0Cols);
        conv0_ = be_.prepare_weight(conv_kernel_weight(Weight{w.name, GgmlType::F32, {kConv0Cols, out_ch},
                                                              padded.data(), padded.size() * 4, nullptr, nullptr},
                                                       kConv0Cols, out_ch));
      } else {
        kernel1_ = std::move(k);
      }
      conv_norm_[i] = ld.optional_vector(fmt::format("a.conv1d.{}.norm.weight", i), out_ch);
      channels_[i] = out_ch;
      in_ch = out_ch;
    }
    freq_[0] = halved(n_mel);
    freq_[1] = halved(freq_[0]);
    auto clippable = [&](const std::string& name, int64_t in, int64_t out) {
      return load_clippable(src, name, in, out, bytes_);
    };
    in_proj_ = clippable("a.input_projection", freq_[1] * channels_[1], d);
    in_proj_b_ = ld.optional_vector("a.input_projection.bias", d);
    const int64_t hd = d / heads;
    for (int l = 0; l < layers; l++) {
      const std::string p = fmt::format("a.blk.{}.", l);
      Block b;
      b.ffn[0].norm = ld.require_vector(p + "ffn_norm.weight", d);
      b.ffn[0].up = clippable(p + "ffn_up", d, ff);
      b.ffn[0].down = clippable(p + "ffn_down", ff, d);
      b.ffn[0].post = ld.optional_vector(p + "ffn_post_norm.weight", d);
      b.ffn[1].norm = ld.require_vector(p + "ffn_norm_1.weight", d);
      b.ffn[1].up = clippable(p + "ffn_up_1", d, ff);
      b.ffn[1].down = clippable(p + "ffn_down_1", ff, d);
      b.ffn[1].post = ld.optional_vector(p + "ffn_post_norm_1.weight", d);
      b.attn_norm = ld.optional_vector(p + "attn_pre_norm.weight", d);
      if (b.attn_norm.empty()) b.attn_norm = ld.optional_vector(p + "ln1.weight", d);
      b.q = clippable(p + "attn_q", d, d);
      b.k = clippable(p + "attn_k", d, d);
      b.v = clippable(p + "attn_v", d, d);
      b.o = clippable(p + "attn_out", d, d);
      b.o_b = ld.optional_vector(p + "attn_out.bias", d);
      b.q_dim = ld.optional_vector(p + "per_dim_scale.weight", hd);
      b.k_dim = ld.optional_vector(p + "per_dim_k_scale.weight", hd);
      if (src.file.find_tensor(p + "attn_k_rel.weight")) {
        b.k_rel = ld.require(p + "attn_k_rel.weight", {d, d});
        bytes_ += static_cast<int64_t>(b.k_rel.nbytes);
        b.k_rel = be_.prepare_weight(std::move(b.k_rel));
      }
      b.attn_post = ld.optional_vector(p + "attn_post_norm.weight", d);
      b.conv_pre = ld.require_vector(p + "conv_norm.weight", d);  // (the converter's names are swapped)
      b.pw1 = clippable(p + "conv_pw1", d, 2 * d);
      b.dw = ld.optional_floats(p + "conv_dw.weight", {kTaps, d});
      if (b.dw.empty()) throw Error(fmt::format("{}: missing tensor '{}conv_dw.weight' {{{}, {}}}", path, p, kTaps, d));
      b.dw_b = ld.optional_vector(p + "conv_dw.bias", d);
      b.conv_post = ld.optional_vector(p + "norm_conv.weight", d);
      b.pw2 = clippable(p + "conv_pw2", d, d);
      b.out_norm = ld.optional_vector(p + "ln2.weight", d);
      blocks_.push_back(std::move(b));
    }
    int64_t w = d;
    if (src.file.find_tensor("a.pre_encode.out.weight")) {
      const GgufTensorInfo* t = src.file.find_tensor("a.pre_encode.out.weight");
      if (t->ne.size() != 2) throw Error(fmt::format("{}: tensor 'a.pre_encode.out.weight' must be a matrix", path));
      out_proj_ = clippable("a.pre_encode.out", d, t->ne[1]);
      w = t->ne[1];
      out_proj_b_ = ld.optional_vector("a.pre_encode.out.bias", w);
      has_out_proj_ = true;
    }
    out_width_ = w;
    soft_norm_ = ld.optional_vector("mm.a.soft_emb_norm.weight", w);
    if (soft_norm_.empty()) soft_norm_.assign(static_cast<size_t>(w), 1.0f);
    const GgufTensorInfo* proj = src.file.find_tensor("mm.a.input_projection.weight");
    if (!proj || proj->ne.size() != 2)
      throw Error(fmt::format("{}: missing tensor 'mm.a.input_projection.weight'", path));
    text_width_ = proj->ne[1];
    proj_ = clippable("mm.a.input_projection", w, text_width_);
    // The relative positions' sinusoid: rows of distance 12, 11, ..., 0 (clip.cpp's pos_emb, in float).
    const int64_t half = d / 2;
    const float step = std::log(10000.0f) / static_cast<float>(std::max<int64_t>(half - 1, 1));
    sinusoid_.assign(static_cast<size_t>((kPast + 1) * d), 0.0f);
    for (int r = 0; r <= kPast; r++) {
      const float pos = static_cast<float>(kPast - r);
      for (int64_t i = 0; i < half; i++) {
        const float scaled = pos * std::exp(-static_cast<float>(i) * step);
        sinusoid_[static_cast<size_t>(r * d + i)] = std::sin(scaled);
        sinusoid_[static_cast<size_t>(r * d + i + half)] = std::cos(scaled);
      }
    }
  }

  int64_t text_width() const override { return text_width_; }
  int64_t weight_bytes() const override { return bytes_; }
  int sample_rate() const override { return kRate; }

  std::string describe() const override {
    return fmt::format("gemma4a (Gemma 4 Conformer): {} layers, {} wide, {} heads, FFN {}, {} mel bins, subsampled "
                       "by 4 ({} and {} channels), {} tokens of {} per 30 s",
                       blocks_.size(), d_, heads_, ff_, n_mel_, channels_[0], channels_[1], chunk_rows(kChunkSamples),
                       text_width_);
  }

  MediaPlacement placement() const override { return {"<|audio>", "<audio|>", false}; }

  int64_t n_tokens(int64_t n_samples) const override {
    int64_t rows = 0;
    for (int64_t off = 0; off < n_samples; off += kChunkSamples) rows += rows_of_chunk(std::min(kChunkSamples, n_samples - off));
    return rows;
  }

  MediaEmbeddings encode(const std::vector<float>& samples) override {
    const int64_t n = static_cast<int64_t>(samples.size());
    MediaEmbeddings all;
    all.width = text_width_;
    for (int64_t off = 0; off < n; off += kChunkSamples) {
      const int64_t len = std::min(kChunkSamples, n - off);
      rows_of_chunk(len);  // (refuses a chunk too short for a frame)
      int64_t frames = 0;
      const std::vector<float> mel = mel_of(samples.data() + off, len, frames);
      MediaEmbeddings e = encode_chunk(mel, frames);
      all.rows.insert(all.rows.end(), e.rows.begin(), e.rows.end());
      all.n_tokens += e.n_tokens;
    }
    return all;
  }

 private:
  struct Ffn {
    std::vector<float> norm, post;
    ClippableMatrix up, down;
  };
  struct Block {
    Ffn ffn[2];
    std::vector<float> attn_norm, o_b, q_dim, k_dim, attn_post, conv_pre, dw, dw_b, conv_post, out_norm;
    ClippableMatrix q, k, v, o, pw1, pw2;
    Weight k_rel;
  };

  static int64_t rows_of_chunk(int64_t len) {
    const int64_t r = chunk_rows(len);
    if (r <= 0)
      throw Error(fmt::format("gemma4a audio: a 30-second chunk of {} sample{} is too short for one frame of the "
                              "spectrogram (llama.cpp refuses it too): trim or pad the audio",
                              len, len == 1 ? "" : "s"));
    return r;
  }

  // The chunk's log-mel spectrogram: n_mel x frames (a bin's frames contiguous).
  std::vector<float> mel_of(const float* x, int64_t len, int64_t& frames) const {
    const ChunkFrames c = chunk_frames(len);
    std::vector<float> p(static_cast<size_t>(c.padded), 0.0f);
    std::copy(x, x + len, p.begin() + kWindow / 2);
    frames = c.frames;
    const int bins = kFft / 2 + 1;
    std::vector<float> mel(static_cast<size_t>(n_mel_ * frames)), fin(2 * kFft, 0.0f), fout(8 * kFft);
    for (int64_t i = 0; i < frames; i++) {
      const int64_t off = i * kHop;
      for (int j = 0; j < kFft; j++) fin[static_cast<size_t>(j)] = hann_[static_cast<size_t>(j)] * p[static_cast<size_t>(off + j)];
      fft_.fft(fin.data(), kFft, fout.data());
      for (int j = 0; j < bins; j++) {
        const float re = fout[2 * static_cast<size_t>(j)], im = fout[2 * static_cast<size_t>(j) + 1];
        fout[static_cast<size_t>(j)] = std::sqrt(re * re + im * im);
      }
      for (int m = 0; m < n_mel_; m++) {
        double sum = mel_bin_sum(fout.data(), filters_.data() + static_cast<size_t>(m) * bins, bins);
        sum = std::max(sum, static_cast<double>(kMelFloor));
        mel[static_cast<size_t>(m * frames + i)] = static_cast<float>(std::log(sum));
      }
    }
    return mel;
  }

  // The subsampling, as ggml_conv_2d computes it: an F16 im2col (out position (t, f) in raster order, time major;
  // columns (channel, tap row (time), tap column (bin))) times the kernel rounded to F16, summed in float; each
  // output LayerNormed over its channels and rectified. Returns the rows (position x channels), read back.
  //
  // The first (one input channel, 9 columns): the im2col as the rows and the kernel as the matrix, both padded to
  // 32 columns by zeros (a product the F16 kernels take whole; 9 exact products and zeros sum the same).
  std::vector<float> subsample0(const std::vector<float>& mel, int64_t frames, int64_t t1) {
    const int64_t f0 = freq_[0], c0 = channels_[0], rows = t1 * f0;
    std::vector<float> cols(static_cast<size_t>(rows * kConv0Cols), 0.0f);
    for (int64_t t = 0; t < t1; t++)
      for (int64_t f = 0; f < f0; f++) {
        float* out = cols.data() + (t * f0 + f) * kConv0Cols;
        for (int64_t kh = 0; kh < 3; kh++) {
          const int64_t ti = 2 * t - 1 + kh;
          if (ti < 0 || ti >= frames) continue;
          for (int64_t kw = 0; kw < 3; kw++) {
            const int64_t fi = 2 * f - 1 + kw;
            if (fi >= 0 && fi < n_mel_) out[kh * 3 + kw] = mel[static_cast<size_t>(fi * frames + ti)];
          }
        }
      }
    ActBuffer x(be_, rows * kConv0Cols), y(be_, rows * c0);
    be_.copy(x, kConv0Cols, be_.host_view(cols.data()), kConv0Cols, rows, kConv0Cols);
    be_.matmul(conv0_, x, rows, y);
    return norm_relu(0, y, rows);
  }

  // The second (c0 input channels): the im2col as the matrix (ggml's src0) and the kernel as the rows it multiplies
  // (its src1, rounded to F16 as ggml rounds it), which gives channels x positions, turned back on the host.
  std::vector<float> subsample1(const std::vector<float>& h0, int64_t t1, int64_t n) {
    const int64_t f0 = freq_[0], f1 = freq_[1], c0 = channels_[0], c1 = channels_[1], k = 9 * c0, rows = n * f1;
    auto bytes = std::make_shared<std::vector<uint8_t>>(row_bytes(GgmlType::F16, k) * static_cast<size_t>(rows));
    auto* cols = reinterpret_cast<uint16_t*>(bytes->data());
    std::fill(cols, cols + rows * k, fp32_to_fp16(0.0f));
    for (int64_t t = 0; t < n; t++)
      for (int64_t f = 0; f < f1; f++) {
        uint16_t* out = cols + (t * f1 + f) * k;
        for (int64_t tap = 0; tap < 9; tap++) {
          const int64_t ti = 2 * t - 1 + tap / 3, fi = 2 * f - 1 + tap % 3;
          if (ti < 0 || ti >= t1 || fi < 0 || fi >= f0) continue;
          const float* in = h0.data() + (ti * f0 + fi) * c0;
          for (int64_t c = 0; c < c0; c++) out[c * 9 + tap] = fp32_to_fp16(in[c]);
        }
      }
    Weight im2col{"a.conv1d.1 (im2col)", GgmlType::F16, {k, rows}, bytes->data(), bytes->size(), nullptr, bytes};
    im2col = be_.prepare_weight(std::move(im2col));
    ActBuffer kx(be_, c1 * k), y(be_, c1 * rows);
    be_.copy(kx, k, be_.host_view(kernel1_.data()), k, c1, k);
    be_.matmul(im2col, kx, c1, y);
    std::vector<float> ct(static_cast<size_t>(rows * c1)), rt(ct.size());
    be_.read(y, ct.data(), rows * c1);
    for (int64_t c = 0; c < c1; c++)
      for (int64_t r = 0; r < rows; r++) rt[static_cast<size_t>(r * c1 + c)] = ct[static_cast<size_t>(c * rows + r)];
    be_.copy(y, c1, be_.host_view(rt.data()), c1, rows, c1);
    return norm_relu(1, y, rows);
  }

  std::vector<float> norm_relu(int i, Act y, int64_t rows) {
    const int64_t c = channels_[i];
    if (!conv_norm_[i].empty()) be_.layernorm(y, conv_norm_[i].data(), nullptr, y, rows, c, kEps);
    std::vector<float> out(static_cast<size_t>(rows * c));
    be_.read(y, out.data(), rows * c);
    for (float& v : out) v = v > 0.0f ? v : 0.0f;  // ggml_relu
    return out;
  }

  MediaEmbeddings encode_chunk(const std::vector<float>& mel, int64_t frames) {
    const int64_t d = d_, t1 = halved(frames), n = halved(t1), f1 = freq_[1], c1 = channels_[1];
    const std::vector<float> h0 = subsample0(mel, frames, t1);
    const std::vector<float> h1 = subsample1(h0, t1, n);
    ensure(n);
    be_.copy(in_, f1 * c1, be_.host_view(h1.data()), f1 * c1, n, f1 * c1);  // each frame's bins' channels
    clippable_matmul(be_, in_proj_, in_, n, x_, clip_);
    if (!in_proj_b_.empty()) be_.add_bias(x_, in_proj_b_.data(), n, d);
    for (size_t l = 0; l < blocks_.size(); l++) {
      be_.annotate_layer(static_cast<int>(l));
      block(blocks_[l], n);
    }
    be_.annotate_layer(-1);
    Act cur = x_;
    if (has_out_proj_) {
      clippable_matmul(be_, out_proj_, x_, n, o_, clip_);
      if (!out_proj_b_.empty()) be_.add_bias(o_, out_proj_b_.data(), n, out_width_);
      cur = o_;
    }
    be_.rmsnorm(cur, soft_norm_.data(), cur, n, out_width_, kEps);
    clippable_matmul(be_, proj_, cur, n, out_, clip_);
    return read_embeddings(be_, out_, n, text_width_);
  }

  // x += 0.5 * post(down(SiLU(up(RMSNorm(x))))).
  void ffn(const Ffn& f, int64_t n) {
    const int64_t d = d_;
    be_.rmsnorm(x_, f.norm.data(), xn_, n, d, kEps);
    clippable_matmul(be_, f.up, xn_, n, ff_buf_, clip_);
    be_.silu_mul(ff_buf_, ones_, n * ff_);
    clippable_matmul(be_, f.down, ff_buf_, n, y_, clip_);
    if (!f.post.empty()) be_.rmsnorm(y_, f.post.data(), y_, n, d, kEps);
    be_.scale(y_, n * d, kResidual);
    be_.add(x_, y_, n * d);
  }

  void block(const Block& b, int64_t n) {
    const int64_t d = d_, hd = d_ / heads_;
    ffn(b.ffn[0], n);
    // Attention over the 12 latest frames, with relative positions.
    if (b.attn_norm.empty()) be_.copy(xn_, d, x_, d, n, d);
    else be_.rmsnorm(x_, b.attn_norm.data(), xn_, n, d, kEps);
    clippable_matmul(be_, b.q, xn_, n, q_, clip_);
    clippable_matmul(be_, b.k, xn_, n, k_, clip_);
    clippable_matmul(be_, b.v, xn_, n, v_, clip_);
    if (b.k_rel.present()) be_.matmul(b.k_rel, pos_, kPast + 1, rel_);
    else be_.fill(rel_, (kPast + 1) * d, 0.0f);
    LocalRelAttentionShape s;
    s.n = n, s.heads = heads_, s.head_dim = hd, s.window = kBlock, s.past = kPast;
    s.q_scale = (1.0f / std::sqrt(static_cast<float>(hd))) / std::log(2.0f);
    s.k_scale = std::log(1.0f + std::exp(1.0f)) / std::log(2.0f);
    s.softcap = kSoftcap;
    s.q_dim = b.q_dim.empty() ? nullptr : b.q_dim.data();
    s.k_dim = b.k_dim.empty() ? nullptr : b.k_dim.data();
    ops::local_rel_attention(be_, {q_, k_, v_, rel_, att_, s});
    clippable_matmul(be_, b.o, att_, n, y_, clip_);
    if (!b.o_b.empty()) be_.add_bias(y_, b.o_b.data(), n, d);
    if (!b.attn_post.empty()) be_.rmsnorm(y_, b.attn_post.data(), y_, n, d, kEps);
    be_.add(x_, y_, n * d);
    // The light convolution: GLU (the first half times the sigmoid of the second), the causal depthwise
    // convolution, its norm, SiLU, pw2.
    be_.rmsnorm(x_, b.conv_pre.data(), xn_, n, d, kEps);
    clippable_matmul(be_, b.pw1, xn_, n, glu_, clip_);
    be_.copy(q_, d, glu_, 2 * d, n, d);
    be_.copy(k_, d, glu_ + d, 2 * d, n, d);
    ops::sigmoid_gate(be_, {q_, k_, n * d, 1});
    ops::causal_conv1d(be_, {q_, v_, b.dw.data(), b.dw_b.empty() ? nullptr : b.dw_b.data(), n, d, kTaps});
    if (!b.conv_post.empty()) be_.rmsnorm(v_, b.conv_post.data(), v_, n, d, kEps);
    be_.silu_mul(v_, ones_, n * d);
    clippable_matmul(be_, b.pw2, v_, n, y_, clip_);
    be_.add(x_, y_, n * d);
    ffn(b.ffn[1], n);
    if (!b.out_norm.empty()) be_.rmsnorm(x_, b.out_norm.data(), x_, n, d, kEps);
  }

  void ensure(int64_t n) {
    if (n <= rows_) return;
    const int64_t d = d_, widest = std::max({ff_, 2 * d, out_width_, freq_[1] * channels_[1]});
    in_ = ActBuffer(be_, n * freq_[1] * channels_[1]);
    x_ = ActBuffer(be_, n * d);
    xn_ = ActBuffer(be_, n * d);
    y_ = ActBuffer(be_, n * d);
    q_ = ActBuffer(be_, n * d);
    k_ = ActBuffer(be_, n * d);
    v_ = ActBuffer(be_, n * d);
    att_ = ActBuffer(be_, n * d);
    glu_ = ActBuffer(be_, n * 2 * d);
    ff_buf_ = ActBuffer(be_, n * ff_);
    ones_ = ActBuffer(be_, n * std::max(ff_, d));
    be_.fill(ones_, n * std::max(ff_, d), 1.0f);
    clip_ = ActBuffer(be_, n * widest);
    o_ = ActBuffer(be_, n * out_width_);
    out_ = ActBuffer(be_, n * text_width_);
    if (!pos_.size()) {
      pos_ = ActBuffer(be_, (kPast + 1) * d);
      rel_ = ActBuffer(be_, (kPast + 1) * d);
      be_.copy(pos_, d, be_.host_view(sinusoid_.data()), d, kPast + 1, d);
    }
    rows_ = n;
  }

  Backend& be_;
  int64_t d_, heads_, ff_;
  int n_mel_;
  MelFft fft_{kFft};
  std::vector<float> hann_, filters_, sinusoid_;
  Weight conv0_;                 // the first subsampling kernel, {32, channels} (the 9 taps, zeros), F16
  std::vector<float> kernel1_;   // the second's, channels x (in, 3, 3)
  std::vector<float> conv_norm_[2];
  int64_t channels_[2] = {0, 0}, freq_[2] = {0, 0};
  ClippableMatrix in_proj_, out_proj_, proj_;
  std::vector<float> in_proj_b_, out_proj_b_, soft_norm_;
  bool has_out_proj_ = false;
  std::vector<Block> blocks_;
  int64_t out_width_ = 0, text_width_ = 0, bytes_ = 0, rows_ = 0;
  ActBuffer in_, x_, xn_, y_, q_, k_, v_, att_, glu_, ff_buf_, ones_, clip_, o_, out_, pos_, rel_;
};

std::unique_ptr<AudioEncoder> make_audio(MmprojSource& src) {
  HparamReader& h = src.keys;
  const int64_t d = h.need_int("audio.embedding_length");
  const int64_t heads = h.need_int("audio.attention.head_count");
  if (heads <= 0 || d % heads != 0)
    throw h.bad("audio.attention.head_count", fmt::format("must divide the width {}", d));
  if (h.int_or("audio.attention.head_dim", d / heads) != d / heads)
    throw h.bad("audio.attention.head_dim", "must be the width over the head count in Gemma 4's Conformer");
  if (h.int_or("audio.attention.head_count_kv", heads) != heads)
    throw h.bad("audio.attention.head_count_kv", "must equal the head count in Gemma 4's Conformer");
  if (d % 2 != 0) throw h.bad("audio.embedding_length", "must be even (the relative positions' sinusoid)");
  const int64_t ff = h.need_int("audio.feed_forward_length");
  const int layers = static_cast<int>(h.need_int("audio.block_count"));
  if (layers <= 0) throw h.bad("audio.block_count", "must be positive");
  // (Read and set aside: llama.cpp computes at 1e-6 whatever the file says, the converter having written a wrong
  // value into released files.)
  (void)h.opt_float("audio.attention.layer_norm_epsilon");
  const int n_mel = static_cast<int>(h.need_int("audio.num_mel_bins"));
  if (n_mel <= 0 || n_mel > 512) throw h.bad("audio.num_mel_bins", "must be 1 to 512");
  return std::make_unique<Gemma4Audio>(src, d, heads, ff, layers, n_mel);
}

MmprojSynthShape synth_shape(int64_t text_width, const std::string& preset) {
  MmprojSynthShape s;
  s.text_width = text_width;
  s.n_mel = 128;
  if (preset == "tiny") {  // 64 wide, 4 heads of 16, subsampling channels 8 and 4, an output projection to 48
    s.width = 64, s.layers = 2, s.heads = 4, s.ffn = 256, s.conv_channels[0] = 8, s.conv_channels[1] = 4, s.hidden = 48;
  } else if (preset == "large") {  // 12 layers of 1024, 8 heads, channels 128 and 32: Gemma 4 E2B's audio tower's order
    // of size (no released file was at hand to confirm its exact shape)
    s.width = 1024, s.layers = 12, s.heads = 8, s.ffn = 4096, s.conv_channels[0] = 128, s.conv_channels[1] = 32,
    s.hidden = 1536;
  } else {
    throw Error(fmt::format("gemma4a mmproj preset '{}': tiny or large", preset));
  }
  return s;
}

// The converter's layout (conversion/gemma.py's Gemma4VisionAudioModel, audio part): no biases; the subsampling's
// norms; per block both FFNs with their post-norms, attn_pre_norm, per-dim scales (softplus applied by the
// converter: positive), attn_k_rel, attn_post_norm, the convolution module's two norms, ln2; a.pre_encode.out,
// mm.a.input_projection. Some products clippable, as in the released files.
void synth(GgufWriter& w, const MmprojSynthShape& s, const SynthAdd& add) {
  w.set_str("clip.audio.projector_type", "gemma4a");
  const int64_t d = s.width, hd = d / s.heads, c0 = s.conv_channels[0], c1 = s.conv_channels[1];
  const int64_t f1 = halved(halved(s.n_mel));
  const float in = 1.0f / std::sqrt(static_cast<float>(d)), res = in / std::sqrt(2.0f * static_cast<float>(s.layers));
  auto bounds = [&](const std::string& name, float lo, float hi, bool out) {
    add(name + (out ? ".output_min" : ".input_min"), {1}, 0.0f, lo);
    add(name + (out ? ".output_max" : ".input_max"), {1}, 0.0f, hi);
  };
  add("a.conv1d.0.weight", {3, 3, 1, c0}, 1.0f / 3.0f, 0);
  add("a.conv1d.0.norm.weight", {c0}, 0.1f, 1.0f);
  add("a.conv1d.1.weight", {3, 3, c0, c1}, 1.0f / std::sqrt(9.0f * static_cast<float>(c0)), 0);
  add("a.conv1d.1.norm.weight", {c1}, 0.1f, 1.0f);
  add("a.input_projection.weight", {f1 * c1, d}, 1.0f / std::sqrt(static_cast<float>(f1 * c1)), 0);
  for (int64_t l = 0; l < s.layers; l++) {
    const std::string p = fmt::format("a.blk.{}.", l);
    for (const char* sfx : {"", "_1"}) {
      add(p + "ffn_norm" + sfx + ".weight", {d}, 0.1f, 1.0f);
      add(p + "ffn_up" + sfx + ".weight", {d, s.ffn}, in, 0);
      add(p + "ffn_down" + sfx + ".weight", {s.ffn, d}, res * std::sqrt(static_cast<float>(d) / static_cast<float>(s.ffn)), 0);
      add(p + "ffn_post_norm" + sfx + ".weight", {d}, 0.1f, 0.5f);
    }
    if (l == 0) bounds(p + "ffn_up", -3.0f, 3.0f, false);
    add(p + "attn_pre_norm.weight", {d}, 0.1f, 1.0f);
    for (const char* m : {"attn_q", "attn_k", "attn_v"}) add(p + m + ".weight", {d, d}, in, 0);
    if (l == 0) bounds(p + "attn_q", -1.5f, 1.5f, false);
    add(p + "per_dim_scale.weight", {hd}, 0.2f, 1.0f);
    add(p + "per_dim_k_scale.weight", {hd}, 0.2f, 1.0f);
    add(p + "attn_k_rel.weight", {d, d}, in, 0);
    add(p + "attn_out.weight", {d, d}, res, 0);
    if (l == 1) bounds(p + "attn_out", -0.05f, 0.05f, true);
    add(p + "attn_post_norm.weight", {d}, 0.1f, 0.5f);
    add(p + "conv_norm.weight", {d}, 0.1f, 1.0f);
    add(p + "conv_pw1.weight", {d, 2 * d}, in, 0);
    add(p + "conv_dw.weight", {kTaps, d}, 0.3f, 0);
    add(p + "norm_conv.weight", {d}, 0.1f, 1.0f);
    add(p + "conv_pw2.weight", {d, d}, res, 0);
    add(p + "ln2.weight", {d}, 0.1f, 1.0f);
  }
  add("a.pre_encode.out.weight", {d, s.hidden}, in, 0);
  add("mm.a.input_projection.weight", {s.hidden, s.text_width}, 1.0f / std::sqrt(static_cast<float>(s.hidden)), 0);
  bounds("mm.a.input_projection", -2.0f, 2.0f, true);
}

}  // namespace
}  // namespace gemma4_audio

const Projector& gemma4a_projector() {
  static const Projector p{"gemma4a",   "Gemma 4 E2B/E4B (audio: a Conformer)", {"gemma4"}, nullptr,
                           gemma4_audio::synth_shape, gemma4_audio::synth, gemma4_audio::make_audio};
  return p;
}

}  // namespace kestrel
