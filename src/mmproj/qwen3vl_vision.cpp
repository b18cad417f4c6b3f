// Qwen3-VL's vision tower and patch merger (`clip.projector_type = qwen3vl_merger`; the mmproj files of Qwen3.5
// and Qwen3.5-MoE, whose text models have no deepstack input):
//   the image resized keeping its aspect ratio to sides that are multiples of patch_size * 2 within 8 .. 4096
//   merged tokens (llama.cpp's dyn_size preprocessor: bicubic, letterboxed by its default PAD_CEIL where the
//   rounding changed the ratio; Hugging Face stretches instead), normalised by image_mean/std;
//   patches of patch_size² by the two temporal slices of the Conv3D kernel (a still image is both frames:
//   conv(w0) + conv(w1)), + bias, laid out 2x2 block by 2x2 block (the merger's four rows adjacent);
//   + the learned position embedding, resized bilinearly (align-corners) from its square grid to the image's;
//   the ViT blocks (vit.h; fused qkv, GELU) with a 2-D RoPE on q and k: of each head's d/2 rotary pairs (i, i + d/2)
//   the first d/4 turn by the patch's row, the rest by its column, each at 10000^(-4j/d) for its j-th pair;
//   post-LayerNorm, then each 2x2 block's four rows as one (4·width): mm.0, GELU, mm.2 → a row of the text model.
// In the prompt: `<|vision_start|>`, the rows (causal), `<|vision_end|>`; the rows take M-RoPE positions
// (runtime/request.h's MediaSpan grid: (t, t + row, t + column)) and the text after moves on by the grid's longer
// side. llama.cpp: tools/mtmd/models/qwen3vl.cpp, qwen2vl.cpp (the temporal merge), clip.cpp (QWEN3VL),
// mtmd.cpp; ../shared/specs/multimodal-lora-router.md A.1.6.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "core/error.h"
#include "gguf/gguf_writer.h"
#include "mmproj/mmproj.h"
#include "mmproj/vit.h"
#include "model/hparams_reader.h"
#include "model/weight_loader.h"
#include "ops/gelu.h"

namespace kestrel {
namespace qwen3vl_vision {
namespace {

constexpr int kMerge = 2;                        // the merger's 2x2 (spatial_merge_size; only 2 is implemented)
constexpr int64_t kMinTokens = 8, kMaxTokens = 4096;  // clip.cpp's set_limit_image_tokens for Qwen-VL (defaults)

class Qwen3VlVision final : public VisionEncoder {
 public:
  Qwen3VlVision(MmprojSource& src, const VitConfig& cfg, int patch, const float* mean, const float* std)
      : be_(src.be), cfg_(cfg), patch_(patch), size_{patch, kMerge, kMinTokens, kMaxTokens}, tower_(src, "v", cfg) {
    for (int c = 0; c < 3; c++) mean_[c] = mean[c], std_[c] = std[c];
    const WeightLoader& ld = src.tensors;
    const int64_t d = cfg.width, k = static_cast<int64_t>(patch) * patch * 3;
    const Weight w0 = ld.require("v.patch_embd.weight", {patch, patch, 3, d});
    const Weight w1 = ld.require("v.patch_embd.weight.1", {patch, patch, 3, d});
    patch_embd_[0] = be_.prepare_weight(conv_kernel_weight(w0, k, d));
    patch_embd_[1] = be_.prepare_weight(conv_kernel_weight(w1, k, d));
    patch_bias_ = ld.require_vector("v.patch_embd.bias", d);
    const GgufTensorInfo* pos = src.file.find_tensor("v.position_embd.weight");
    if (!pos || pos->ne.size() != 2 || pos->ne[0] != d)
      throw Error(fmt::format("{}: tensor 'v.position_embd.weight' must be {{{}, positions}}", src.file.path(), d));
    grid_ = static_cast<int>(std::lround(std::sqrt(static_cast<double>(pos->ne[1]))));
    if (static_cast<int64_t>(grid_) * grid_ != pos->ne[1])
      throw Error(fmt::format("{}: tensor 'v.position_embd.weight' holds {} positions, not a square grid",
                              src.file.path(), pos->ne[1]));
    pos_embd_ = ld.optional_floats("v.position_embd.weight", {d, pos->ne[1]});
    post_ln_w_ = ld.require_vector("v.post_ln.weight", d);
    post_ln_b_ = ld.require_vector("v.post_ln.bias", d);
    const int64_t m = kMerge * kMerge * d;
    const GgufTensorInfo* mm2 = src.file.find_tensor("mm.2.weight");
    if (!mm2 || mm2->ne.size() != 2) throw Error(fmt::format("{}: missing tensor 'mm.2.weight'", src.file.path()));
    text_width_ = mm2->ne[1];
    Weight a = ld.require("mm.0.weight", {m, m}), b = ld.require("mm.2.weight", {m, text_width_});
    bytes_ = tower_.weight_bytes() + static_cast<int64_t>(w0.nbytes + w1.nbytes + a.nbytes + b.nbytes);
    mm0_ = be_.prepare_weight(std::move(a));
    mm2_ = be_.prepare_weight(std::move(b));
    mm0_b_ = ld.require_vector("mm.0.bias", m);
    mm2_b_ = ld.require_vector("mm.2.bias", text_width_);
    // The 2-D RoPE as two passes of the backend's NeoX RoPE over the whole head (pairs (i, i + d/2)): base 10000²
    // makes pair i turn at 10000^(-4i/d); the row pass turns the first d/4 pairs, the column pass the others,
    // each divided by 10000^(-1) to start again from 1 (the others' divisor infinity: no turn).
    const int pairs = static_cast<int>(cfg.head_dim / 2), quarter = pairs / 2;
    for (auto& f : rope_ff_) f.assign(static_cast<size_t>(pairs), std::numeric_limits<float>::infinity());
    for (int i = 0; i < pairs; i++) rope_ff_[i < quarter ? 0 : 1][static_cast<size_t>(i)] = i < quarter ? 1.0f : 1e-4f;
    rope_.passes = 2;
    for (int p = 0; p < 2; p++) {
      RopeParams& r = rope_.params[p];
      r.style = RopeStyle::NeoX;
      r.n_rot = static_cast<int>(cfg.head_dim);
      r.freq_base = 1e8f;
      r.freq_factors = rope_ff_[p].data();
    }
  }

  int64_t text_width() const override { return text_width_; }

  // llama.cpp's custom_image_min_tokens / custom_image_max_tokens: the pixel bounds of the resize, in merged tokens.
  void set_token_limits(const ImageTokenLimits& l) override { size_.set_limits(l); }

  std::string describe() const override {
    return fmt::format("qwen3vl_merger (Qwen3-VL / Qwen3.5): {} layers, {} wide, {} heads, FFN {}, patch {}, merged "
                       "{}x{}, position grid {}x{}, {}..{} tokens of {}",
                       cfg_.n_layer, cfg_.width, cfg_.n_head, cfg_.n_ff, patch_, kMerge, kMerge, grid_, grid_,
                       size_.min_tokens, size_.max_tokens, text_width_);
  }
  MediaPlacement placement() const override { return {"<|vision_start|>", "<|vision_end|>", false}; }

  int64_t n_tokens(int width, int height) const override {
    const auto [gx, gy] = size_.grid(width, height);
    return gx * gy;
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
    embed_patches(be_, patch_embd_[0], planar, w, h, patch_, kMerge, cols_, x_);
    be_.matmul(patch_embd_[1], cols_, n, y_);  // (the same patches, uploaded above)
    be_.add(x_, y_, n * d);
    be_.add_bias(x_, patch_bias_.data(), n, d);
    const std::vector<float> pos = position_rows(nx, ny);
    be_.copy(y_, d, be_.host_view(pos.data()), d, n, d);
    be_.add(x_, y_, n * d);
    // Each patch's row and column, in the merge order.
    rows_pos_.resize(static_cast<size_t>(n));
    cols_pos_.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i++) {
      const int64_t block = i / (kMerge * kMerge), in = i % (kMerge * kMerge);
      rows_pos_[static_cast<size_t>(i)] = static_cast<int32_t>(block / (nx / kMerge) * kMerge + in / kMerge);
      cols_pos_[static_cast<size_t>(i)] = static_cast<int32_t>(block % (nx / kMerge) * kMerge + in % kMerge);
    }
    rope_.positions[0] = rows_pos_.data();
    rope_.positions[1] = cols_pos_.data();
    tower_.run(be_, x_, n, &rope_);
    be_.layernorm(x_, post_ln_w_.data(), post_ln_b_.data(), x_, n, d, cfg_.eps);
    // The merger: each 2x2 block's four adjacent rows as one row of 4·width.
    const int64_t m = n / (kMerge * kMerge), wide = kMerge * kMerge * d;
    be_.matmul(mm0_, x_, m, y_);
    be_.add_bias(y_, mm0_b_.data(), m, wide);
    ops::gelu(be_, {y_, m * wide});
    be_.matmul(mm2_, y_, m, out_);
    be_.add_bias(out_, mm2_b_.data(), m, text_width_);
    MediaEmbeddings e = read_embeddings(be_, out_, m, text_width_);
    e.grid_w = nx / kMerge;
    e.grid_h = ny / kMerge;
    return e;
  }

 private:
  // The position embedding of an nx x ny patch grid in the merge order: the stored grid itself when it is that
  // size, else resized as ggml_interpolate does with GGML_SCALE_MODE_BILINEAR | GGML_SCALE_FLAG_ALIGN_CORNERS
  // (float arithmetic in its order).
  std::vector<float> position_rows(int64_t nx, int64_t ny) const {
    const int64_t d = cfg_.width, g = grid_;
    std::vector<float> grid(static_cast<size_t>(nx * ny * d));  // raster order
    if (nx == g && ny == g) {
      grid = pos_embd_;
    } else {
      auto scale = [&](int64_t out) {
        return out > 1 && g > 1 ? static_cast<float>(out - 1) / static_cast<float>(g - 1)
                                : static_cast<float>(out) / static_cast<float>(g);
      };
      const float sx = scale(nx), sy = scale(ny);
      for (int64_t oy = 0; oy < ny; oy++) {
        const float y = static_cast<float>(oy) / sy;
        const int64_t y0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(y)), 0, g - 1);
        const int64_t y1 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(y)) + 1, 0, g - 1);
        const float dy = std::clamp(y - static_cast<float>(y0), 0.0f, 1.0f);
        for (int64_t ox = 0; ox < nx; ox++) {
          const float x = static_cast<float>(ox) / sx;
          const int64_t x0 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(x)), 0, g - 1);
          const int64_t x1 = std::clamp<int64_t>(static_cast<int64_t>(std::floor(x)) + 1, 0, g - 1);
          const float dx = std::clamp(x - static_cast<float>(x0), 0.0f, 1.0f);
          const float* a = &pos_embd_[static_cast<size_t>((y0 * g + x0) * d)];
          const float* b = &pos_embd_[static_cast<size_t>((y0 * g + x1) * d)];
          const float* c = &pos_embd_[static_cast<size_t>((y1 * g + x0) * d)];
          const float* e = &pos_embd_[static_cast<size_t>((y1 * g + x1) * d)];
          float* out = &grid[static_cast<size_t>((oy * nx + ox) * d)];
          for (int64_t j = 0; j < d; j++)
            out[j] = a[j] * (1 - dx) * (1 - dy) + b[j] * dx * (1 - dy) + c[j] * (1 - dx) * dy + e[j] * dx * dy;
        }
      }
    }
    std::vector<float> merged(grid.size());
    int64_t i = 0;
    for (int64_t by = 0; by < ny / kMerge; by++)
      for (int64_t bx = 0; bx < nx / kMerge; bx++)
        for (int dy = 0; dy < kMerge; dy++)
          for (int dx = 0; dx < kMerge; dx++, i++) {
            const float* src = &grid[static_cast<size_t>(((by * kMerge + dy) * nx + bx * kMerge + dx) * d)];
            std::copy(src, src + d, merged.begin() + i * d);
          }
    return merged;
  }

  void ensure(int64_t n) {
    if (n <= rows_) return;
    const int64_t d = cfg_.width;
    cols_ = ActBuffer(be_, n * patch_ * patch_ * 3);
    x_ = ActBuffer(be_, n * d);
    y_ = ActBuffer(be_, n * d);
    out_ = ActBuffer(be_, n / (kMerge * kMerge) * text_width_);
    rows_ = n;
  }

  Backend& be_;
  VitConfig cfg_;
  int patch_, grid_ = 0;
  DynamicImageSize size_;
  float mean_[3], std_[3];
  VitTower tower_;
  Weight patch_embd_[2], mm0_, mm2_;
  std::vector<float> patch_bias_, pos_embd_, post_ln_w_, post_ln_b_, mm0_b_, mm2_b_;
  std::vector<float> rope_ff_[2];
  std::vector<int32_t> rows_pos_, cols_pos_;
  VitRope rope_;
  int64_t text_width_ = 0, bytes_ = 0, rows_ = 0;
  ActBuffer cols_, x_, y_, out_;
};

std::unique_ptr<VisionEncoder> make_vision(MmprojSource& src) {
  HparamReader& h = src.keys;
  VitConfig cfg = read_vit_config(h, "qwen3vl_merger");
  cfg.fused_qkv = true;
  if (cfg.head_dim % 4 != 0)
    throw h.bad("vision.attention.head_count", fmt::format("= {}: heads of {} do not split into the 2-D RoPE's quarters",
                                                           cfg.n_head, cfg.head_dim));
  if (h.int_or("vision.spatial_merge_size", kMerge) != kMerge)
    throw h.bad("vision.spatial_merge_size", fmt::format("must be {} (the merger Kestrel implements)", kMerge));
  // Deepstack (Qwen3-VL's text models take extra input rows from chosen blocks): Qwen3.5's text model has none.
  if (const GgufValue* v = src.file.find("clip.vision.is_deepstack_layers")) {
    h.accept("vision.is_deepstack_layers");
    if (v->type != GgufValueType::ARRAY) throw h.bad("vision.is_deepstack_layers", "must be an array of flags");
    for (const GgufValue& f : v->as_array().items)
      if (f.type == GgufValueType::BOOL ? f.as_bool() : f.as_int() != 0)
        throw h.bad("vision.is_deepstack_layers",
                    "marks a deepstack block: Qwen3-VL's deepstack input is not implemented (Qwen3.5's mmproj files "
                    "have none)");
  }
  for (int l = 0; l < cfg.n_layer; l++)
    if (src.file.find_tensor(fmt::format("v.deepstack.{}.fc1.weight", l)))
      throw Error(fmt::format("{}: tensor 'v.deepstack.{}.fc1.weight': Qwen3-VL's deepstack input is not implemented",
                              src.file.path(), l));
  const int patch = static_cast<int>(h.need_int("vision.patch_size"));
  if (patch <= 0) throw h.bad("vision.patch_size", "must be positive");
  const int64_t image_size = h.need_int("vision.image_size");  // the position grid's side in pixels
  float mean[3], std[3];
  read_image_norm(src, mean, std);
  auto enc = std::make_unique<Qwen3VlVision>(src, cfg, patch, mean, std);
  const GgufTensorInfo* pos = src.file.find_tensor("v.position_embd.weight");
  if (image_size != static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(pos->ne[1])))) * patch)
    throw h.bad("vision.image_size", fmt::format("= {} but v.position_embd.weight's grid of {} positions at patch {} "
                                                 "makes another",
                                                 image_size, pos->ne[1], patch));
  return enc;
}

MmprojSynthShape synth_shape(int64_t text_width, const std::string& preset) {
  MmprojSynthShape s;
  s.text_width = text_width;
  if (preset == "tiny") {  // patches of 8, an 8x8 position grid (64 px), 4 heads of 16
    s.width = 64, s.layers = 2, s.heads = 4, s.ffn = 128, s.image_size = 64, s.patch_size = 8, s.merge = kMerge;
  } else if (preset == "qwen35") {  // Qwen3.5's tower: 27 blocks of 1152, patch 16, a 48x48 grid (768 px)
    s.width = 1152, s.layers = 27, s.heads = 16, s.ffn = 4304, s.image_size = 768, s.patch_size = 16, s.merge = kMerge;
  } else {
    throw Error(fmt::format("qwen3vl_merger mmproj preset '{}': tiny or qwen35", preset));
  }
  return s;
}

// The converter's layout (conversion/qwen3vl.py): the Conv3D's two temporal slices, the fused qkv, the merger as
// v.post_ln, mm.0, mm.2, the deepstack flags (all false for Qwen3.5).
void synth(GgufWriter& w, const MmprojSynthShape& s, const SynthAdd& add) {
  w.set_str("clip.projector_type", "qwen3vl_merger");
  w.set_bool("clip.use_gelu", true);
  w.set_u32("clip.vision.spatial_merge_size", static_cast<uint32_t>(s.merge));
  w.set_f32("clip.vision.attention.layer_norm_epsilon", 1e-6f);
  w.set("clip.vision.is_deepstack_layers",
        GgufValue::array(GgufValueType::BOOL, std::vector<GgufValue>(static_cast<size_t>(s.layers), GgufValue::boolean(false))));
  const int64_t d = s.width, side = s.image_size / s.patch_size, m = s.merge * s.merge * d;
  const float conv = 1.0f / std::sqrt(6.0f * s.patch_size * s.patch_size);
  add("v.patch_embd.weight", {s.patch_size, s.patch_size, 3, d}, conv, 0);
  add("v.patch_embd.weight.1", {s.patch_size, s.patch_size, 3, d}, conv, 0);
  add("v.patch_embd.bias", {d}, 0.02f, 0);
  add("v.position_embd.weight", {d, side * side}, 0.5f, 0);
  synth_vit_blocks(add, s, /*fused_qkv=*/true);
  add("mm.0.weight", {m, m}, 1.0f / std::sqrt(static_cast<float>(m)), 0);
  add("mm.0.bias", {m}, 0.02f, 0);
  add("mm.2.weight", {m, s.text_width}, 1.0f / std::sqrt(static_cast<float>(m)), 0);
  add("mm.2.bias", {s.text_width}, 0.02f, 0);
}

}  // namespace
}  // namespace qwen3vl_vision

const Projector& qwen3vl_projector() {
  static const Projector p{"qwen3vl_merger", "Qwen3.5 / Qwen3.5-MoE (Qwen3-VL vision tower)", {"qwen35", "qwen35moe"},
                           qwen3vl_vision::make_vision, qwen3vl_vision::synth_shape, qwen3vl_vision::synth};
  return p;
}

}  // namespace kestrel
