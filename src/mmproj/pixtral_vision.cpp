// Pixtral's vision tower and projector (`clip.projector_type = pixtral`; Pixtral-12B, Mistral Small 3.1/3.2/4 and
// Mistral 3's mmproj files):
//   the image resized keeping its aspect ratio to sides that are multiples of patch_size * merge within 8 .. 1024
//   tokens (llama.cpp's dyn_size preprocessor: bicubic, letterboxed by its PAD_CEIL default), normalised;
//   patches by a convolution (no bias), RMSNorm v.pre_ln;
//   the blocks: RMSNorm, q, k, v, a 2-D RoPE in adjacent pairs (theta 10000, hard-coded as llama.cpp has it: each
//   head's first half turns by the patch's row at 10000^(-4k/d), its second half by its column at
//   10000^(-(4k+2)/d)), the output; RMSNorm, SwiGLU (clip.use_silu; GELU with use_gelu);
//   Mistral Small's patch merger when the file has one: RMSNorm x mm.input_norm, each merge x merge block unfolded
//   as (channel, y, x) (torch's unfold, ggml_im2col), times mm.patch_merger;
//   mm.1 (+ bias), GELU, mm.2 (+ bias); after each row of tokens but the last, the [IMG_BREAK] token's embedding
//   (v.token_embd.img_break).
// In the prompt: the rows (causal, one position each), then `[IMG_END]`.
// llama.cpp: tools/mtmd/models/pixtral.cpp, clip.cpp (build_vit, build_rope_2d, PIXTRAL), mtmd.cpp;
// ../shared/specs/multimodal-lora-router.md A.1.8.
#include <fmt/format.h>

#include <cmath>
#include <tuple>

#include "core/error.h"
#include "gguf/gguf_writer.h"
#include "mmproj/mmproj.h"
#include "mmproj/vit.h"
#include "model/hparams_reader.h"
#include "model/weight_loader.h"
#include "ops/gelu.h"

namespace kestrel {
namespace pixtral_vision {
namespace {

constexpr int64_t kMinTokens = 8, kMaxTokens = 1024;  // clip.cpp's set_limit_image_tokens for Pixtral (defaults)
constexpr float kRopeTheta = 10000.0f;                 // clip.cpp's, whatever the file says

class PixtralVision final : public VisionEncoder {
 public:
  PixtralVision(MmprojSource& src, const VitConfig& cfg, int patch, int merge, const float* mean, const float* std)
      : be_(src.be), cfg_(cfg), patch_(patch), merge_(merge), size_{patch, merge, kMinTokens, kMaxTokens} {
    for (int c = 0; c < 3; c++) mean_[c] = mean[c], std_[c] = std[c];
    const WeightLoader& ld = src.tensors;
    const int64_t d = cfg.width, ff = cfg.n_ff;
    auto matrix = [&](const std::string& name, int64_t in, int64_t out) {
      Weight w = ld.require(name, {in, out});
      bytes_ += static_cast<int64_t>(w.nbytes);
      return be_.prepare_weight(std::move(w));
    };
    const Weight pe = ld.require("v.patch_embd.weight", {patch, patch, 3, d});
    bytes_ += static_cast<int64_t>(pe.nbytes);
    patch_embd_ = be_.prepare_weight(conv_kernel_weight(pe, static_cast<int64_t>(patch) * patch * 3, d));
    patch_bias_ = ld.optional_vector("v.patch_embd.bias", d);
    pre_ln_ = ld.require_vector("v.pre_ln.weight", d);
    for (int l = 0; l < cfg.n_layer; l++) {
      const std::string p = fmt::format("v.blk.{}.", l);
      Block b;
      b.q = matrix(p + "attn_q.weight", d, d);
      b.k = matrix(p + "attn_k.weight", d, d);
      b.v = matrix(p + "attn_v.weight", d, d);
      b.o = matrix(p + "attn_out.weight", d, d);
      b.qb = ld.optional_vector(p + "attn_q.bias", d);
      b.kb = ld.optional_vector(p + "attn_k.bias", d);
      b.vb = ld.optional_vector(p + "attn_v.bias", d);
      b.ob = ld.optional_vector(p + "attn_out.bias", d);
      b.ln1 = ld.require_vector(p + "ln1.weight", d);
      b.ln2 = ld.require_vector(p + "ln2.weight", d);
      b.gate = matrix(p + "ffn_gate.weight", d, ff);
      b.up = matrix(p + "ffn_up.weight", d, ff);
      b.down = matrix(p + "ffn_down.weight", ff, d);
      blocks_.push_back(std::move(b));
    }
    if (ld.has("mm.patch_merger.weight")) {
      merger_ = matrix("mm.patch_merger.weight", d * merge * merge, d);
      input_norm_ = ld.require_vector("mm.input_norm.weight", d);
    } else if (merge != 1) {
      throw Error(fmt::format("{}: clip.vision.spatial_merge_size is {} but there is no mm.patch_merger.weight",
                              src.file.path(), merge));
    }
    const GgufTensorInfo* mm2 = src.file.find_tensor("mm.2.weight");
    const GgufTensorInfo* mm1 = src.file.find_tensor("mm.1.weight");
    if (!mm1 || !mm2 || mm1->ne.size() != 2 || mm2->ne.size() != 2)
      throw Error(fmt::format("{}: missing tensor 'mm.1.weight' or 'mm.2.weight'", src.file.path()));
    hidden_ = mm1->ne[1];
    text_width_ = mm2->ne[1];
    mm1_ = matrix("mm.1.weight", d, hidden_);
    mm2_ = matrix("mm.2.weight", hidden_, text_width_);
    mm1_b_ = ld.optional_vector("mm.1.bias", hidden_);
    mm2_b_ = ld.optional_vector("mm.2.bias", text_width_);
    img_break_ = ld.require_vector("v.token_embd.img_break", text_width_);
    // build_rope_2d: NORMAL (adjacent) pairs over each half; the second half's frequencies shifted by
    // freq_scale = 10000^(-2/d).
    for (RopeParams& r : rope_) {
      r.style = RopeStyle::Adjacent;
      r.n_rot = static_cast<int>(cfg.head_dim / 2);
      r.freq_base = kRopeTheta;
    }
    rope_[1].freq_scale = std::pow(kRopeTheta, -2.0f / static_cast<float>(cfg.head_dim));
  }

  int64_t text_width() const override { return text_width_; }

  void set_token_limits(const ImageTokenLimits& l) override { size_.set_limits(l); }

  std::string describe() const override {
    return fmt::format("pixtral: {} layers, {} wide, {} heads, FFN {} ({}), patch {}, merge {}x{}, {}..{} tokens of {} "
                       "(+ [IMG_BREAK] a row)",
                       cfg_.n_layer, cfg_.width, cfg_.n_head, cfg_.n_ff, cfg_.act == VitConfig::Act::Silu ? "SwiGLU" : "GeGLU", patch_, merge_,
                       merge_, size_.min_tokens, size_.max_tokens, text_width_);
  }
  MediaPlacement placement() const override { return {"", "[IMG_END]", false}; }

  int64_t n_tokens(int width, int height) const override {
    const auto [px, py] = size_.grid(width, height);
    return px * py + py - 1;
  }
  int64_t weight_bytes() const override { return bytes_; }

  std::vector<float> preprocess(const ImageU8& img, int& w, int& h) const override {
    return size_.preprocess(img, mean_, std_, w, h);
  }

  MediaEmbeddings encode(const ImageU8& img) override {
    int w = 0, h = 0;
    const std::vector<float> planar = preprocess(img, w, h);
    const int64_t d = cfg_.width, nx = w / patch_, ny = h / patch_, n = nx * ny;
    ensure(n);
    embed_patches(be_, patch_embd_, planar, w, h, patch_, 1, cols_, x_);
    if (!patch_bias_.empty()) be_.add_bias(x_, patch_bias_.data(), n, d);
    be_.rmsnorm(x_, pre_ln_.data(), x_, n, d, cfg_.eps);
    pos_h_.resize(static_cast<size_t>(n));
    pos_w_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i++) {
      pos_h_[static_cast<size_t>(i)] = static_cast<int32_t>(i / nx);
      pos_w_[static_cast<size_t>(i)] = static_cast<int32_t>(i % nx);
    }
    for (size_t l = 0; l < blocks_.size(); l++) {
      be_.annotate_layer(static_cast<int>(l));
      block(blocks_[l], n);
    }
    be_.annotate_layer(-1);
    const int64_t px = nx / merge_, py = ny / merge_, m = px * py;
    Act rows = x_;
    if (merge_ > 1) {  // RMSNorm x input_norm, each block unfolded as (channel, y, x), the merger
      be_.rmsnorm(x_, input_norm_.data(), xn_, n, d, cfg_.eps);
      std::vector<float> grid(static_cast<size_t>(n * d)), unfolded(static_cast<size_t>(n * d));
      be_.read(xn_, grid.data(), n * d);
      const int64_t kk = static_cast<int64_t>(merge_) * merge_;
      for (int64_t by = 0; by < py; by++)
        for (int64_t bx = 0; bx < px; bx++) {
          float* out = &unfolded[static_cast<size_t>((by * px + bx) * d * kk)];
          for (int64_t c = 0; c < d; c++)
            for (int ky = 0; ky < merge_; ky++)
              for (int kx = 0; kx < merge_; kx++)
                out[c * kk + ky * merge_ + kx] =
                    grid[static_cast<size_t>(((by * merge_ + ky) * nx + bx * merge_ + kx) * d + c)];
        }
      be_.copy(y_, d * kk, be_.host_view(unfolded.data()), d * kk, m, d * kk);
      be_.matmul(merger_, y_, m, x_);
      rows = x_;
    }
    be_.matmul(mm1_, rows, m, hid_);
    if (!mm1_b_.empty()) be_.add_bias(hid_, mm1_b_.data(), m, hidden_);
    ops::gelu(be_, {hid_, m * hidden_});
    be_.matmul(mm2_, hid_, m, out_);
    if (!mm2_b_.empty()) be_.add_bias(out_, mm2_b_.data(), m, text_width_);
    std::vector<float> projected(static_cast<size_t>(m * text_width_));
    be_.read(out_, projected.data(), m * text_width_);
    // Each row of px tokens, then [IMG_BREAK] but after the last.
    MediaEmbeddings e;
    e.n_tokens = m + py - 1;
    e.width = text_width_;
    e.rows.reserve(static_cast<size_t>(e.n_tokens * text_width_));
    for (int64_t r = 0; r < py; r++) {
      const auto first = projected.begin() + r * px * text_width_;
      e.rows.insert(e.rows.end(), first, first + px * text_width_);
      if (r + 1 < py) e.rows.insert(e.rows.end(), img_break_.begin(), img_break_.end());
    }
    return e;
  }

 private:
  struct Block {
    Weight q, k, v, o, gate, up, down;
    std::vector<float> qb, kb, vb, ob, ln1, ln2;
  };

  void block(const Block& b, int64_t n) {
    const int64_t d = cfg_.width, hd = cfg_.head_dim, heads = cfg_.n_head, ff = cfg_.n_ff;
    be_.rmsnorm(x_, b.ln1.data(), xn_, n, d, cfg_.eps);
    const Weight* qkv[3] = {&b.q, &b.k, &b.v};
    const Act outs[3] = {q_, k_, v_};
    be_.matmul_many(qkv, 3, xn_, n, outs);
    if (!b.qb.empty()) be_.add_bias(q_, b.qb.data(), n, d);
    if (!b.kb.empty()) be_.add_bias(k_, b.kb.data(), n, d);
    if (!b.vb.empty()) be_.add_bias(v_, b.vb.data(), n, d);
    const int32_t* const pos[2] = {pos_h_.data(), pos_w_.data()};
    rope_head_halves(be_, q_, n, heads, hd, pos, rope_, half_);
    rope_head_halves(be_, k_, n, heads, hd, pos, rope_, half_);
    attend_whole_image(be_, q_, k_, v_, att_, n, heads, hd, 1.0f / std::sqrt(static_cast<float>(hd)), last_);
    be_.matmul(b.o, att_, n, y_);
    if (!b.ob.empty()) be_.add_bias(y_, b.ob.data(), n, d);
    be_.add(x_, y_, n * d);
    be_.rmsnorm(x_, b.ln2.data(), xn_, n, d, cfg_.eps);
    be_.matmul(b.gate, xn_, n, ff_gate_);
    be_.matmul(b.up, xn_, n, ff_up_);
    if (cfg_.act == VitConfig::Act::Silu) {
      be_.silu_mul(ff_gate_, ff_up_, n * ff);
    } else {
      be_.gelu_mul(ff_gate_, ff_up_, n * ff);
    }
    be_.matmul(b.down, ff_gate_, n, y_);
    be_.add(x_, y_, n * d);
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
    hid_ = ActBuffer(be_, n * hidden_);
    out_ = ActBuffer(be_, n * text_width_);
    rows_ = n;
  }

  Backend& be_;
  VitConfig cfg_;
  int patch_, merge_;
  DynamicImageSize size_;
  int64_t hidden_ = 0;
  float mean_[3], std_[3];
  Weight patch_embd_, merger_, mm1_, mm2_;
  std::vector<Block> blocks_;
  std::vector<float> patch_bias_, pre_ln_, input_norm_, mm1_b_, mm2_b_, img_break_;
  RopeParams rope_[2];
  std::vector<int32_t> pos_h_, pos_w_, last_;
  int64_t text_width_ = 0, bytes_ = 0, rows_ = 0;
  ActBuffer cols_, x_, xn_, y_, q_, k_, v_, att_, half_, ff_gate_, ff_up_, hid_, out_;
};

std::unique_ptr<VisionEncoder> make_vision(MmprojSource& src) {
  HparamReader& h = src.keys;
  // SwiGLU (use_silu) as the converter writes it for Pixtral's hidden_act silu; GeGLU with use_gelu.
  const VitConfig cfg = read_vit_config(h, "pixtral", /*gelu_quick_default=*/false, /*silu_ok=*/true);
  if (cfg.head_dim % 4 != 0)
    throw h.bad("vision.attention.head_count", fmt::format("= {}: heads of {} do not split into the 2-D RoPE's halves "
                                                           "of pairs",
                                                           cfg.n_head, cfg.head_dim));
  const int patch = static_cast<int>(h.need_int("vision.patch_size"));
  const int merge = static_cast<int>(h.int_or("vision.spatial_merge_size", 1));
  if (patch <= 0) throw h.bad("vision.patch_size", "must be positive");
  if (merge < 1) throw h.bad("vision.spatial_merge_size", "must be positive");
  h.need_int("vision.image_size");  // (the longest side Pixtral was trained at: llama.cpp bounds tokens instead)
  h.opt_float("vision.rope.freq_base");  // (llama.cpp runs theta 10000 whatever the file says)
  float mean[3], std[3];
  read_image_norm(src, mean, std);
  return std::make_unique<PixtralVision>(src, cfg, patch, merge, mean, std);
}

MmprojSynthShape synth_shape(int64_t text_width, const std::string& preset) {
  MmprojSynthShape s;
  s.text_width = text_width;
  if (preset == "tiny") {  // patches of 8 merged 2x2 (Mistral Small's merger): 16 px a token
    s.width = 64, s.layers = 2, s.heads = 4, s.ffn = 128, s.image_size = 1024, s.patch_size = 8, s.merge = 2;
  } else if (preset == "small") {  // Mistral Small 3.1's tower: 24 blocks of 1024, 16 heads, FFN 4096, patch 14
    s.width = 1024, s.layers = 24, s.heads = 16, s.ffn = 4096, s.image_size = 1540, s.patch_size = 14, s.merge = 2;
  } else {
    throw Error(fmt::format("pixtral mmproj preset '{}': tiny or small", preset));
  }
  return s;
}

// The converter's layout (conversion/llava.py, Mistral Small 3.1): no biases in the tower, SwiGLU, the merger
// with its input norm, mm.1 and mm.2 with biases, the [IMG_BREAK] row.
void synth(GgufWriter& w, const MmprojSynthShape& s, const SynthAdd& add) {
  w.set_str("clip.projector_type", "pixtral");
  w.set_bool("clip.use_silu", true);
  w.set_f32("clip.vision.attention.layer_norm_epsilon", 1e-5f);
  w.set_u32("clip.vision.spatial_merge_size", static_cast<uint32_t>(s.merge));
  const int64_t d = s.width, m = d * s.merge * s.merge;
  const float in = 1.0f / std::sqrt(static_cast<float>(d)), res = in / std::sqrt(2.0f * static_cast<float>(s.layers));
  add("v.patch_embd.weight", {s.patch_size, s.patch_size, 3, d}, 1.0f / std::sqrt(3.0f * s.patch_size * s.patch_size), 0);
  add("v.pre_ln.weight", {d}, 0.1f, 1.0f);
  for (int64_t l = 0; l < s.layers; l++) {
    const std::string p = fmt::format("v.blk.{}.", l);
    add(p + "ln1.weight", {d}, 0.1f, 1.0f);
    for (const char* t : {"attn_q", "attn_k", "attn_v"}) add(p + t + ".weight", {d, d}, in, 0);
    add(p + "attn_out.weight", {d, d}, res, 0);
    add(p + "ln2.weight", {d}, 0.1f, 1.0f);
    add(p + "ffn_gate.weight", {d, s.ffn}, in, 0);
    add(p + "ffn_up.weight", {d, s.ffn}, in, 0);
    add(p + "ffn_down.weight", {s.ffn, d}, res * std::sqrt(static_cast<float>(d) / static_cast<float>(s.ffn)), 0);
  }
  add("mm.input_norm.weight", {d}, 0.1f, 1.0f);
  add("mm.patch_merger.weight", {m, d}, 1.0f / std::sqrt(static_cast<float>(m)), 0);
  add("mm.1.weight", {d, s.text_width}, in, 0);
  add("mm.1.bias", {s.text_width}, 0.02f, 0);
  add("mm.2.weight", {s.text_width, s.text_width}, 1.0f / std::sqrt(static_cast<float>(s.text_width)), 0);
  add("mm.2.bias", {s.text_width}, 0.02f, 0);
  add("v.token_embd.img_break", {s.text_width}, 0.125f, 0);
}

}  // namespace
}  // namespace pixtral_vision

const Projector& pixtral_projector() {
  static const Projector p{"pixtral", "Pixtral-12B, Mistral Small 3.1/3.2/4, Mistral 3 (vision)",
                           {"mistral3", "llama", "mistral4"}, pixtral_vision::make_vision, pixtral_vision::synth_shape,
                           pixtral_vision::synth};
  return p;
}

}  // namespace kestrel
