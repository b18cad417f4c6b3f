// Gemma 4's vision tower and projector (`clip.vision.projector_type = gemma4v`; Gemma 4 E2B/E4B/26B-A4B/31B's
// mmproj files):
//   the image resized keeping its aspect ratio to sides that are multiples of patch_size * 3 within 70 .. 1120
//   tokens (llama.cpp's dyn_size preprocessor: bicubic, letterboxed by its PAD_CEIL default), normalised by
//   image_mean/std, then x * 2 - 1;
//   patches by a convolution without bias; + the position tables' rows of the patch's column and row;
//   the blocks: RMSNorm, q, k, v (no biases), RMSNorm of each q and k head (weighted) and of each v head
//   (unweighted), a 2-D RoPE (NeoX, theta 100: each head's first half turns by the column, its second half by the
//   row), attention at scale 1, the output, post-norm; RMSNorm, a gated FFN (GELU-quick unless clip.use_gelu),
//   post-norm; the residual times out_scale. Each matrix may be "clippable": its input and output clamped to the
//   bounds stored beside it (`<name>.input_min` ...);
//   3x3 average pooling (clip.vision.projector.scale_factor), x sqrt(width); (x - v.std_bias) * v.std_scale when
//   given; RMSNorm (unweighted), then mm.input_projection.
// In the prompt: `<|image>`, the rows, `<image|>`; the rows attend to each other both ways on the text model's
// sliding-window layers only (llama.cpp's SWA_ONLY), except for the E2B and E4B models (text width 1536 or 2560),
// where they are causal; their per-layer inputs take the padding token's row (model/arch/gemma4.cpp).
// llama.cpp: tools/mtmd/models/gemma4v.cpp, clip.cpp (build_vit, GEMMA4V), mtmd.cpp;
// ../shared/specs/multimodal-lora-router.md A.1.5.
#include <fmt/format.h>

#include <cmath>
#include <tuple>

#include "core/error.h"
#include "gguf/gguf_writer.h"
#include "mmproj/mmproj.h"
#include "mmproj/vit.h"
#include "model/hparams_reader.h"
#include "model/weight_loader.h"
#include "ops/gelu_quick.h"

namespace kestrel {
namespace gemma4_vision {
namespace {

constexpr int64_t kMinTokens = 70, kMaxTokens = 1120;  // clip.cpp's set_limit_image_tokens for Gemma 4 (defaults)
constexpr float kRopeTheta = 100.0f;

class Gemma4Vision final : public VisionEncoder {
 public:
  Gemma4Vision(MmprojSource& src, const VitConfig& cfg, int patch, int merge, const float* mean, const float* std)
      : be_(src.be), cfg_(cfg), patch_(patch), merge_(merge), size_{patch, merge, kMinTokens, kMaxTokens} {
    for (int c = 0; c < 3; c++) mean_[c] = mean[c], std_[c] = std[c];
    const WeightLoader& ld = src.tensors;
    const int64_t d = cfg.width, hd = cfg.head_dim, ff = cfg.n_ff;
    const Weight pe = ld.require("v.patch_embd.weight", {patch, patch, 3, d});
    bytes_ += static_cast<int64_t>(pe.nbytes);
    patch_embd_ = be_.prepare_weight(conv_kernel_weight(pe, static_cast<int64_t>(patch) * patch * 3, d));
    const GgufTensorInfo* pos = src.file.find_tensor("v.position_embd.weight");
    if (!pos || pos->ne.size() != 3 || pos->ne[0] != d || pos->ne[2] != 2)
      throw Error(fmt::format("{}: tensor 'v.position_embd.weight' must be {{{}, positions, 2}} (the column and row "
                              "tables)",
                              src.file.path(), d));
    pos_size_ = pos->ne[1];
    pos_embd_ = ld.optional_floats("v.position_embd.weight", {d, pos_size_, 2});
    auto clippable = [&](const std::string& name, int64_t in, int64_t out) {
      return load_clippable(src, name, in, out, bytes_);
    };
    for (int l = 0; l < cfg.n_layer; l++) {
      const std::string p = fmt::format("v.blk.{}.", l);
      Block b;
      b.q = clippable(p + "attn_q", d, d);
      b.k = clippable(p + "attn_k", d, d);
      b.v = clippable(p + "attn_v", d, d);
      b.o = clippable(p + "attn_out", d, d);
      b.gate = clippable(p + "ffn_gate", d, ff);
      b.up = clippable(p + "ffn_up", d, ff);
      b.down = clippable(p + "ffn_down", ff, d);
      b.ln1 = ld.require_vector(p + "ln1.weight", d);
      b.ln2 = ld.require_vector(p + "ln2.weight", d);
      b.q_norm = ld.require_vector(p + "attn_q_norm.weight", hd);
      b.k_norm = ld.require_vector(p + "attn_k_norm.weight", hd);
      b.attn_post = ld.require_vector(p + "attn_post_norm.weight", d);
      b.ffn_post = ld.require_vector(p + "ffn_post_norm.weight", d);
      const std::vector<float> scale = ld.optional_floats(p + "out_scale.weight", {1});
      b.out_scale = scale.empty() ? 1.0f : scale[0];
      b.has_out_scale = !scale.empty();
      blocks_.push_back(std::move(b));
    }
    std_bias_ = ld.optional_vector("v.std_bias", d);
    std_scale_ = ld.optional_vector("v.std_scale", d);
    if (std_bias_.empty() != std_scale_.empty())
      throw Error(fmt::format("{}: v.std_bias and v.std_scale come together", src.file.path()));
    const GgufTensorInfo* proj = src.file.find_tensor("mm.input_projection.weight");
    if (!proj || proj->ne.size() != 2)
      throw Error(fmt::format("{}: missing tensor 'mm.input_projection.weight'", src.file.path()));
    text_width_ = proj->ne[1];
    proj_ = clippable("mm.input_projection", d, text_width_);
    ones_.assign(static_cast<size_t>(std::max(d, hd)), 1.0f);
    for (RopeParams& r : rope_) {
      r.style = RopeStyle::NeoX;
      r.n_rot = static_cast<int>(hd / 2);
      r.freq_base = kRopeTheta;
    }
  }

  int64_t text_width() const override { return text_width_; }

  void set_token_limits(const ImageTokenLimits& l) override { size_.set_limits(l); }

  std::string describe() const override {
    return fmt::format("gemma4v (Gemma 4): {} layers, {} wide, {} heads, FFN {} ({}), patch {}, pooled {}x{}, "
                       "{}..{} tokens of {}",
                       cfg_.n_layer, cfg_.width, cfg_.n_head, cfg_.n_ff,
                       cfg_.act == VitConfig::Act::Gelu ? "GeGLU" : "GELU-quick gated", patch_, merge_, merge_,
                       size_.min_tokens, size_.max_tokens, text_width_);
  }
  // E2B and E4B (text widths 1536 and 2560) take images causally (llama.cpp's mtmd_decode_use_non_causal).
  MediaPlacement placement() const override {
    return {"<|image>", "<image|>", text_width_ != 1536 && text_width_ != 2560};
  }

  int64_t n_tokens(int width, int height) const override {
    const auto [gx, gy] = size_.grid(width, height);
    return gx * gy;
  }
  int64_t weight_bytes() const override { return bytes_; }

  std::vector<float> preprocess(const ImageU8& img, int& w, int& h) const override {
    std::vector<float> planar = size_.preprocess(img, mean_, std_, w, h);
    for (float& v : planar) v = v * 2.0f + -1.0f;  // the graph's ggml_scale_bias(x, 2, -1)
    return planar;
  }

  MediaEmbeddings encode(const ImageU8& img) override {
    int w = 0, h = 0;
    const std::vector<float> planar = preprocess(img, w, h);
    const int64_t d = cfg_.width, nx = w / patch_, ny = h / patch_, n = nx * ny;
    if (nx > pos_size_ || ny > pos_size_)
      throw Error(fmt::format("an image of {}x{} patches, but the position tables hold {}", nx, ny, pos_size_));
    ensure(n);
    embed_patches(be_, patch_embd_, planar, w, h, patch_, 1, cols_, x_);
    // + the column table's row, then the row table's (ggml_get_rows, two adds in that order).
    std::vector<float> tx(static_cast<size_t>(n * d)), ty(static_cast<size_t>(n * d));
    pos_x_.resize(static_cast<size_t>(n));
    pos_y_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i++) {
      pos_x_[static_cast<size_t>(i)] = static_cast<int32_t>(i % nx);
      pos_y_[static_cast<size_t>(i)] = static_cast<int32_t>(i / nx);
      std::copy_n(pos_embd_.begin() + (i % nx) * d, d, tx.begin() + i * d);
      std::copy_n(pos_embd_.begin() + (pos_size_ + i / nx) * d, d, ty.begin() + i * d);
    }
    be_.copy(y_, d, be_.host_view(tx.data()), d, n, d);
    be_.add(x_, y_, n * d);
    be_.copy(y_, d, be_.host_view(ty.data()), d, n, d);
    be_.add(x_, y_, n * d);
    for (size_t l = 0; l < blocks_.size(); l++) {
      be_.annotate_layer(static_cast<int>(l));
      block(blocks_[l], n);
    }
    be_.annotate_layer(-1);
    // The pooler: merge x merge average, times sqrt(width).
    const int64_t m = (nx / merge_) * (ny / merge_);
    avg_pool_rows(be_, x_, nx, ny, merge_, d, pool_, y_);
    be_.scale(pool_, m * d, std::sqrt(static_cast<float>(d)));
    if (!std_bias_.empty()) {  // (x - std_bias) * std_scale per channel, on the host (m rows)
      std::vector<float> rows(static_cast<size_t>(m * d));
      be_.read(pool_, rows.data(), m * d);
      for (int64_t r = 0; r < m; r++)
        for (int64_t j = 0; j < d; j++) {
          float& v = rows[static_cast<size_t>(r * d + j)];
          v = (v - std_bias_[static_cast<size_t>(j)]) * std_scale_[static_cast<size_t>(j)];
        }
      be_.copy(pool_, d, be_.host_view(rows.data()), d, m, d);
    }
    be_.rmsnorm(pool_, ones_.data(), pool_, m, d, cfg_.eps);
    matmul(proj_, pool_, m, out_);
    return read_embeddings(be_, out_, m, text_width_);
  }

 private:
  struct Block {
    ClippableMatrix q, k, v, o, gate, up, down;
    std::vector<float> ln1, ln2, q_norm, k_norm, attn_post, ffn_post;
    float out_scale = 1.0f;
    bool has_out_scale = false;
  };

  void matmul(const ClippableMatrix& c, Act x, int64_t n, Act y) { clippable_matmul(be_, c, x, n, y, clip_); }

  // Each head's first half turned by the column, its second half by the row (ggml_rope_ext with n_dims hd/2 and,
  // for the second half, ggml_rope_set_offset).
  void rope_halves(Act x, int64_t n) {
    const int32_t* const pos[2] = {pos_x_.data(), pos_y_.data()};
    rope_head_halves(be_, x, n, cfg_.n_head, cfg_.head_dim, pos, rope_, half_);
  }

  void block(const Block& b, int64_t n) {
    const int64_t d = cfg_.width, hd = cfg_.head_dim, heads = cfg_.n_head, ff = cfg_.n_ff;
    be_.rmsnorm(x_, b.ln1.data(), xn_, n, d, cfg_.eps);
    matmul(b.q, xn_, n, q_);
    matmul(b.k, xn_, n, k_);
    matmul(b.v, xn_, n, v_);
    be_.rmsnorm(q_, b.q_norm.data(), q_, n * heads, hd, cfg_.eps);
    be_.rmsnorm(k_, b.k_norm.data(), k_, n * heads, hd, cfg_.eps);
    rope_halves(q_, n);
    rope_halves(k_, n);
    be_.rmsnorm(v_, ones_.data(), v_, n * heads, hd, cfg_.eps);
    attend_whole_image(be_, q_, k_, v_, att_, n, heads, hd, 1.0f, last_);  // scale 1: llama.cpp's kq_scale (q, k normed)
    matmul(b.o, att_, n, y_);
    be_.rmsnorm(y_, b.attn_post.data(), y_, n, d, cfg_.eps);
    be_.add(x_, y_, n * d);
    be_.rmsnorm(x_, b.ln2.data(), xn_, n, d, cfg_.eps);
    matmul(b.gate, xn_, n, ff_gate_);
    matmul(b.up, xn_, n, ff_up_);
    if (cfg_.act == VitConfig::Act::Gelu) {
      be_.gelu_mul(ff_gate_, ff_up_, n * ff);
    } else {
      ops::gelu_quick_mul(be_, {ff_gate_, ff_up_, n * ff});
    }
    matmul(b.down, ff_gate_, n, y_);
    be_.rmsnorm(y_, b.ffn_post.data(), y_, n, d, cfg_.eps);
    be_.add(x_, y_, n * d);
    if (b.has_out_scale) be_.scale(x_, n * d, b.out_scale);
  }

  void ensure(int64_t n) {
    if (n <= rows_) return;
    const int64_t d = cfg_.width, ff = cfg_.n_ff;
    cols_ = ActBuffer(be_, n * patch_ * patch_ * 3);
    x_ = ActBuffer(be_, n * d);
    xn_ = ActBuffer(be_, n * d);
    y_ = ActBuffer(be_, n * d);
    q_ = ActBuffer(be_, n * d);
    k_ = ActBuffer(be_, n * d);
    v_ = ActBuffer(be_, n * d);
    att_ = ActBuffer(be_, n * d);
    half_ = ActBuffer(be_, n * d / 2);
    ff_gate_ = ActBuffer(be_, n * ff);
    ff_up_ = ActBuffer(be_, n * ff);
    clip_ = ActBuffer(be_, n * std::max(d, ff));
    pool_ = ActBuffer(be_, n * d);
    out_ = ActBuffer(be_, n * text_width_);
    rows_ = n;
  }

  Backend& be_;
  VitConfig cfg_;
  int patch_, merge_;
  DynamicImageSize size_;
  int64_t pos_size_ = 0;
  float mean_[3], std_[3];
  Weight patch_embd_;
  ClippableMatrix proj_;
  std::vector<Block> blocks_;
  std::vector<float> pos_embd_, std_bias_, std_scale_, ones_;
  RopeParams rope_[2];
  std::vector<int32_t> pos_x_, pos_y_, last_;
  int64_t text_width_ = 0, bytes_ = 0, rows_ = 0;
  ActBuffer cols_, x_, xn_, y_, q_, k_, v_, att_, half_, ff_gate_, ff_up_, clip_, pool_, out_;
};

std::unique_ptr<VisionEncoder> make_vision(MmprojSource& src) {
  HparamReader& h = src.keys;
  const VitConfig cfg = read_vit_config(h, "gemma4v", /*gelu_quick_default=*/true);
  if (cfg.head_dim % 4 != 0)
    throw h.bad("vision.attention.head_count", fmt::format("= {}: heads of {} do not split into the 2-D RoPE's "
                                                           "halves of NeoX pairs",
                                                           cfg.n_head, cfg.head_dim));
  const int patch = static_cast<int>(h.need_int("vision.patch_size"));
  const int merge = static_cast<int>(h.int_or("vision.projector.scale_factor", 3));
  if (patch <= 0) throw h.bad("vision.patch_size", "must be positive");
  if (merge <= 0) throw h.bad("vision.projector.scale_factor", "must be positive");
  h.need_int("vision.image_size");  // (the converter's placeholder 224: Gemma 4 sizes images by their own)
  float mean[3], std[3];
  read_image_norm(src, mean, std);
  return std::make_unique<Gemma4Vision>(src, cfg, patch, merge, mean, std);
}

MmprojSynthShape synth_shape(int64_t text_width, const std::string& preset) {
  MmprojSynthShape s;
  s.text_width = text_width;
  if (preset == "tiny") {  // patches of 8 pooled 3x3: 24 px a token; position tables of 64
    s.width = 64, s.layers = 2, s.heads = 4, s.ffn = 128, s.image_size = 224, s.patch_size = 8, s.merge = 3;
  } else if (preset == "base") {  // a mid-size tower of this layout: 768 wide, 12 heads, FFN 3072, patch 16
    s.width = 768, s.layers = 16, s.heads = 12, s.ffn = 3072, s.image_size = 224, s.patch_size = 16, s.merge = 3;
  } else {
    throw Error(fmt::format("gemma4v mmproj preset '{}': tiny or base", preset));
  }
  return s;
}

// The converter's layout (conversion/gemma.py's Gemma4VisionAudioModel, vision part): no biases, the sandwich
// norms, out_scale, the two position tables; the first block's q and the second's FFN down "clippable", the
// projection's output too.
void synth(GgufWriter& w, const MmprojSynthShape& s, const SynthAdd& add) {
  w.set_str("clip.vision.projector_type", "gemma4v");
  w.set_f32("clip.vision.attention.layer_norm_epsilon", 1e-6f);
  if (s.merge != 3) w.set_u32("clip.vision.projector.scale_factor", static_cast<uint32_t>(s.merge));
  const int64_t d = s.width, hd = d / s.heads, table = s.patch_size == 8 ? 64 : 256;  // patches a side at most
  const float in = 1.0f / std::sqrt(static_cast<float>(d)), res = in / std::sqrt(2.0f * static_cast<float>(s.layers));
  add("v.patch_embd.weight", {s.patch_size, s.patch_size, 3, d}, 1.0f / std::sqrt(3.0f * s.patch_size * s.patch_size), 0);
  add("v.position_embd.weight", {d, table, 2}, 0.5f, 0);
  auto bounds = [&](const std::string& name, float lo, float hi, bool out) {
    add(name + (out ? ".output_min" : ".input_min"), {1}, 0.0f, lo);
    add(name + (out ? ".output_max" : ".input_max"), {1}, 0.0f, hi);
  };
  for (int64_t l = 0; l < s.layers; l++) {
    const std::string p = fmt::format("v.blk.{}.", l);
    add(p + "ln1.weight", {d}, 0.1f, 1.0f);
    for (const char* m : {"attn_q", "attn_k", "attn_v"}) add(p + m + ".weight", {d, d}, in, 0);
    if (l == 0) bounds(p + "attn_q", -1.5f, 1.5f, false);
    add(p + "attn_q_norm.weight", {hd}, 0.1f, 1.0f);
    add(p + "attn_k_norm.weight", {hd}, 0.1f, 1.0f);
    add(p + "attn_out.weight", {d, d}, res, 0);
    add(p + "attn_post_norm.weight", {d}, 0.1f, 0.5f);
    add(p + "ln2.weight", {d}, 0.1f, 1.0f);
    add(p + "ffn_gate.weight", {d, s.ffn}, in, 0);
    add(p + "ffn_up.weight", {d, s.ffn}, in, 0);
    add(p + "ffn_down.weight", {s.ffn, d}, res * std::sqrt(static_cast<float>(d) / static_cast<float>(s.ffn)), 0);
    if (l == 1) bounds(p + "ffn_down", -0.05f, 0.05f, true);
    add(p + "ffn_post_norm.weight", {d}, 0.1f, 0.5f);
    add(p + "out_scale.weight", {1}, 0.0f, 0.8f);
  }
  add("mm.input_projection.weight", {d, s.text_width}, in, 0);
  bounds("mm.input_projection", -2.0f, 2.0f, true);
}

}  // namespace
}  // namespace gemma4_vision

const Projector& gemma4v_projector() {
  static const Projector p{"gemma4v", "Gemma 4 E2B/E4B/26B-A4B/31B (vision)", {"gemma4"}, gemma4_vision::make_vision,
                           gemma4_vision::synth_shape, gemma4_vision::synth};
  return p;
}

}  // namespace kestrel
