// Gemma 3's vision tower and projector (`clip.projector_type = gemma3`; Gemma 3 4B/12B/27B's mmproj files):
//   the image letterboxed into image_size² (bilinear, black bars: llama.cpp's fixed-size preprocessor with its
//   default PAD_CEIL; Hugging Face stretches instead), normalised by image_mean/std;
//   patches of patch_size² by a strided convolution (+ bias), + the learned position embedding;
//   the SigLIP blocks (vit.h; GELU), post-LayerNorm;
//   average pooling of merge × merge patches (merge: clip.vision.projector.scale_factor, default 4: 64² → 16²
//   = 256 rows), RMSNorm × mm.soft_emb_norm, × mm.input_projection (stored transposed).
// In the prompt: `<start_of_image>`, the rows, `<end_of_image>`, the rows attending to each other both ways.
// llama.cpp: tools/mtmd/models/siglip.cpp, clip.cpp (GEMMA3), mtmd.cpp's add_media.
#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "gguf/gguf_writer.h"
#include "mmproj/mmproj.h"
#include "mmproj/vit.h"
#include "model/hparams_reader.h"
#include "model/weight_loader.h"

namespace kestrel {
namespace {

class Gemma3Vision final : public VisionEncoder {
 public:
  Gemma3Vision(MmprojSource& src, const VitConfig& cfg, int image_size, int patch, int merge, const float* mean,
               const float* std)
      : be_(src.be), cfg_(cfg), size_(image_size), patch_(patch), merge_(merge), tower_(src, "v", cfg) {
    for (int c = 0; c < 3; c++) mean_[c] = mean[c], std_[c] = std[c];
    const WeightLoader& ld = src.tensors;
    const int64_t d = cfg.width, side = image_size / patch;
    // One row per output channel: (c, y, x) in order.
    const Weight pe = ld.require("v.patch_embd.weight", {patch, patch, 3, d});
    patch_embd_ = be_.prepare_weight(conv_kernel_weight(pe, static_cast<int64_t>(patch) * patch * 3, d));
    patch_bias_ = ld.require_vector("v.patch_embd.bias", d);
    pos_embd_ = ld.optional_floats("v.position_embd.weight", {d, side * side});
    if (pos_embd_.empty()) throw Error(fmt::format("{}: missing tensor 'v.position_embd.weight'", src.file.path()));
    post_ln_w_ = ld.require_vector("v.post_ln.weight", d);
    post_ln_b_ = ld.require_vector("v.post_ln.bias", d);
    soft_norm_ = ld.require_vector("mm.soft_emb_norm.weight", d);
    const GgufTensorInfo* proj = src.file.find_tensor("mm.input_projection.weight");
    if (!proj || proj->ne.size() < 2) throw Error(fmt::format("{}: missing tensor 'mm.input_projection.weight'", src.file.path()));
    text_width_ = proj->ne[0];
    Weight p = ld.require("mm.input_projection.weight", {text_width_, d});
    bytes_ = tower_.weight_bytes() + static_cast<int64_t>(p.nbytes + patch_embd_.nbytes);
    proj_ = be_.prepare_weight(transposed_weight(p, src.file.path()));
  }

  int64_t text_width() const override { return text_width_; }

  std::string describe() const override {
    const int side = size_ / patch_ / merge_;
    return fmt::format("gemma3 (SigLIP): {} layers, {} wide, {} heads, FFN {}, {} px, patch {}, pooled {}x{} -> {} "
                       "tokens of {}",
                       cfg_.n_layer, cfg_.width, cfg_.n_head, cfg_.n_ff, size_, patch_, merge_, merge_, side * side,
                       text_width_);
  }
  MediaPlacement placement() const override { return {"<start_of_image>", "<end_of_image>", true}; }
  int64_t n_tokens(int, int) const override {
    const int64_t side = size_ / patch_ / merge_;
    return side * side;
  }
  int64_t weight_bytes() const override { return bytes_; }

  std::vector<float> preprocess(const ImageU8& img, int& w, int& h) const override {
    const ImageU8 sized = resize_padded(img, size_, size_, ResizeAlgo::Bilinear, Pad::Ceil, {0, 0, 0});
    w = h = size_;
    return to_planar_normalized(sized, mean_, std_);
  }

  MediaEmbeddings encode(const ImageU8& img) override {
    int w = 0, h = 0;
    const std::vector<float> planar = preprocess(img, w, h);
    const int64_t d = cfg_.width, side = size_ / patch_, n = side * side;
    ensure(n);
    embed_patches(be_, patch_embd_, planar, w, h, patch_, 1, cols_, x_);
    be_.add_bias(x_, patch_bias_.data(), n, d);
    be_.copy(y_, d, be_.host_view(pos_embd_.data()), d, n, d);
    be_.add(x_, y_, n * d);
    tower_.run(be_, x_, n);
    be_.layernorm(x_, post_ln_w_.data(), post_ln_b_.data(), x_, n, d, cfg_.eps);
    // Average pooling, merge² patches to a row.
    const int64_t out_side = side / merge_, m = out_side * out_side;
    avg_pool_rows(be_, x_, side, side, merge_, d, pool_, y_);
    be_.rmsnorm(pool_, soft_norm_.data(), y_, m, d, cfg_.eps);
    be_.matmul(proj_, y_, m, out_);
    return read_embeddings(be_, out_, m, text_width_);
  }

 private:
  void ensure(int64_t n) {
    if (n <= rows_) return;
    const int64_t d = cfg_.width;
    cols_ = ActBuffer(be_, n * patch_ * patch_ * 3);
    x_ = ActBuffer(be_, n * d);
    y_ = ActBuffer(be_, n * d);
    pool_ = ActBuffer(be_, n * d);
    out_ = ActBuffer(be_, n * text_width_);
    rows_ = n;
  }

  Backend& be_;
  VitConfig cfg_;
  int size_, patch_, merge_;
  float mean_[3], std_[3];
  VitTower tower_;
  Weight patch_embd_, proj_;
  std::vector<float> patch_bias_, pos_embd_, post_ln_w_, post_ln_b_, soft_norm_;
  int64_t text_width_ = 0, bytes_ = 0, rows_ = 0;
  ActBuffer cols_, x_, y_, pool_, out_;
};

std::unique_ptr<VisionEncoder> make_vision(MmprojSource& src) {
  HparamReader& h = src.keys;
  const VitConfig cfg = read_vit_config(h, "gemma3");
  const int image_size = static_cast<int>(h.need_int("vision.image_size"));
  const int patch = static_cast<int>(h.need_int("vision.patch_size"));
  const int merge = static_cast<int>(h.int_or("vision.projector.scale_factor", 4));
  if (image_size % patch != 0) throw h.bad("vision.image_size", fmt::format("must be a multiple of the patch size {}", patch));
  if (merge <= 0 || (image_size / patch) % merge != 0)
    throw h.bad("vision.projector.scale_factor", fmt::format("must divide the {} patches per side", image_size / patch));
  float mean[3], std[3];
  read_image_norm(src, mean, std);
  return std::make_unique<Gemma3Vision>(src, cfg, image_size, patch, merge, mean, std);
}

MmprojSynthShape synth_shape(int64_t text_width, const std::string& preset) {
  MmprojSynthShape s;
  s.text_width = text_width;
  if (preset == "tiny") {  // 112 px, 8x8 patches of 14, pooled 2x2: 16 rows
    s.width = 64, s.layers = 2, s.heads = 4, s.ffn = 128, s.image_size = 112, s.patch_size = 14, s.merge = 2;
  } else if (preset == "siglip-400m") {  // Gemma 3's: SigLIP-so400m at 896 px, 256 rows
    s.width = 1152, s.layers = 27, s.heads = 16, s.ffn = 4304, s.image_size = 896, s.patch_size = 14, s.merge = 4;
  } else {
    throw Error(fmt::format("gemma3 mmproj preset '{}': tiny or siglip-400m", preset));
  }
  return s;
}

void synth(GgufWriter& w, const MmprojSynthShape& s, const SynthAdd& add) {
  w.set_str("clip.projector_type", "gemma3");
  w.set_bool("clip.use_gelu", true);
  w.set_f32("clip.vision.attention.layer_norm_epsilon", 1e-6f);
  if (s.merge != 4) w.set_u32("clip.vision.projector.scale_factor", static_cast<uint32_t>(s.merge));
  const int64_t d = s.width, side = s.image_size / s.patch_size;
  const float in = 1.0f / std::sqrt(static_cast<float>(d));
  add("v.patch_embd.weight", {s.patch_size, s.patch_size, 3, d}, 1.0f / std::sqrt(3.0f * s.patch_size * s.patch_size), 0);
  add("v.patch_embd.bias", {d}, 0.02f, 0);
  add("v.position_embd.weight", {d, side * side}, 0.5f, 0);
  synth_vit_blocks(add, s, /*fused_qkv=*/false);
  add("mm.soft_emb_norm.weight", {d}, 0.1f, 1.0f);
  add("mm.input_projection.weight", {s.text_width, d}, in, 0);
}

}  // namespace

const Projector& gemma3_projector() {
  static const Projector p{"gemma3", "Gemma 3 4B/12B/27B (SigLIP)", {"gemma3"}, make_vision, synth_shape, synth};
  return p;
}

}  // namespace kestrel
