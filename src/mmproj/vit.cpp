#include "mmproj/vit.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <tuple>

#include "core/error.h"
#include "formats/block_formats.h"
#include "model/weight_loader.h"
#include "ops/clamp.h"
#include "ops/gelu.h"
#include "ops/gelu_erf.h"

namespace kestrel {

VitTower::VitTower(MmprojSource& src, const std::string& prefix, const VitConfig& cfg) : cfg_(cfg) {
  const int64_t d = cfg.width, qd = cfg.n_head * cfg.head_dim, ff = cfg.n_ff;
  const WeightLoader& ld = src.tensors;
  auto matrix = [&](const std::string& name, int64_t in, int64_t out) {
    Weight w = ld.require(name, {in, out});
    bytes_ += static_cast<int64_t>(w.nbytes);
    return src.be.prepare_weight(std::move(w));
  };
  for (int l = 0; l < cfg.n_layer; l++) {
    const std::string p = fmt::format("{}.blk.{}.", prefix, l);
    Block b;
    if (cfg.fused_qkv) {
      const Weight qkv = ld.require(p + "attn_qkv.weight", {d, 3 * qd});
      bytes_ += static_cast<int64_t>(qkv.nbytes);
      b.q = src.be.prepare_weight(weight_rows(qkv, 0, qd, qkv.name + ".q"));
      b.k = src.be.prepare_weight(weight_rows(qkv, qd, qd, qkv.name + ".k"));
      b.v = src.be.prepare_weight(weight_rows(qkv, 2 * qd, qd, qkv.name + ".v"));
      const std::vector<float> bias = ld.require_vector(p + "attn_qkv.bias", 3 * qd);
      b.qb.assign(bias.begin(), bias.begin() + qd);
      b.kb.assign(bias.begin() + qd, bias.begin() + 2 * qd);
      b.vb.assign(bias.begin() + 2 * qd, bias.end());
    } else {
      b.q = matrix(p + "attn_q.weight", d, qd);
      b.k = matrix(p + "attn_k.weight", d, qd);
      b.v = matrix(p + "attn_v.weight", d, qd);
      b.qb = ld.require_vector(p + "attn_q.bias", qd);
      if (cfg.k_bias) b.kb = ld.require_vector(p + "attn_k.bias", qd);
      b.vb = ld.require_vector(p + "attn_v.bias", qd);
    }
    b.o = matrix(p + "attn_out.weight", qd, d);
    b.ob = ld.require_vector(p + "attn_out.bias", d);
    b.ln1w = ld.require_vector(p + "ln1.weight", d);
    b.ln1b = ld.require_vector(p + "ln1.bias", d);
    b.ln2w = ld.require_vector(p + "ln2.weight", d);
    b.ln2b = ld.require_vector(p + "ln2.bias", d);
    // Old conversions named the two FFN matrices the other way round; llama.cpp swaps them back when ffn_down
    // reads the model's width (clip.cpp's is_ffn_swapped), and so do we.
    const GgufTensorInfo* down = src.file.find_tensor(p + "ffn_down.weight");
    const bool swapped = down && !down->ne.empty() && down->ne[0] == d && d != ff;
    const std::string up_name = p + (swapped ? "ffn_down" : "ffn_up"), down_name = p + (swapped ? "ffn_up" : "ffn_down");
    b.up = matrix(up_name + ".weight", d, ff);
    b.down = matrix(down_name + ".weight", ff, d);
    b.upb = ld.require_vector(up_name + ".bias", ff);
    b.downb = ld.require_vector(down_name + ".bias", d);
    blocks_.push_back(std::move(b));
  }
}

void VitTower::ensure(Backend& be, int64_t n) {
  if (n <= rows_) return;
  const int64_t d = cfg_.width, qd = cfg_.n_head * cfg_.head_dim;
  xn_ = ActBuffer(be, n * d);
  q_ = ActBuffer(be, n * qd);
  k_ = ActBuffer(be, n * qd);
  v_ = ActBuffer(be, n * qd);
  att_ = ActBuffer(be, n * qd);
  y_ = ActBuffer(be, n * d);
  ff_ = ActBuffer(be, n * cfg_.n_ff);
  rows_ = n;
}

void VitTower::run(Backend& be, Act x, int64_t n, const VitRope* rope) {
  ensure(be, n);
  const int64_t d = cfg_.width, qd = cfg_.n_head * cfg_.head_dim;
  const auto heads = static_cast<int>(cfg_.n_head), hd = static_cast<int>(cfg_.head_dim);
  for (size_t l = 0; l < blocks_.size(); l++) {
    const Block& b = blocks_[l];
    be.annotate_layer(static_cast<int>(l));
    be.layernorm(x, b.ln1w.data(), b.ln1b.data(), xn_, n, d, cfg_.eps);
    const Weight* qkv[3] = {&b.q, &b.k, &b.v};
    const Act outs[3] = {q_, k_, v_};
    be.matmul_many(qkv, 3, xn_, n, outs);
    be.add_bias(q_, b.qb.data(), n, qd);
    if (!b.kb.empty()) be.add_bias(k_, b.kb.data(), n, qd);
    be.add_bias(v_, b.vb.data(), n, qd);
    for (int i = 0; rope && i < rope->passes; i++) {
      be.rope(q_, rope->positions[i], n, heads, hd, rope->params[i]);
      be.rope(k_, rope->positions[i], n, heads, hd, rope->params[i]);
    }
    attend_whole_image(be, q_, k_, v_, att_, n, heads, hd, 1.0f / std::sqrt(static_cast<float>(hd)), last_);
    be.matmul(b.o, att_, n, y_);
    be.add_bias(y_, b.ob.data(), n, d);
    be.add(x, y_, n * d);
    be.layernorm(x, b.ln2w.data(), b.ln2b.data(), xn_, n, d, cfg_.eps);
    be.matmul(b.up, xn_, n, ff_);
    be.add_bias(ff_, b.upb.data(), n, cfg_.n_ff);
    if (cfg_.act == VitConfig::Act::GeluErf) ops::gelu_erf(be, {ff_, n * cfg_.n_ff});
    else ops::gelu(be, {ff_, n * cfg_.n_ff});
    be.matmul(b.down, ff_, n, y_);
    be.add_bias(y_, b.downb.data(), n, d);
    be.add(x, y_, n * d);
  }
  be.annotate_layer(-1);
}

Weight transposed_weight(const Weight& w, const std::string& file) {
  size_t elem = 0;
  switch (w.type) {
    case GgmlType::F32: elem = 4; break;
    case GgmlType::F16:
    case GgmlType::BF16: elem = 2; break;
    default:
      throw Error(fmt::format("{}: tensor '{}' has type {}; Kestrel reads this projection in F32, F16 or BF16 (as "
                              "the converter writes it)",
                              file, w.name, type_name(w.type)));
  }
  const int64_t cols = w.cols(), rows = w.rows();
  auto bytes = std::make_shared<std::vector<uint8_t>>(w.nbytes);
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++)
      std::memcpy(bytes->data() + (c * rows + r) * elem, src + (r * cols + c) * elem, elem);
  Weight t{w.name, w.type, {rows, cols}, bytes->data(), w.nbytes, nullptr, nullptr};
  t.owner = bytes;
  return t;
}

Weight conv_kernel_weight(const Weight& w, int64_t cols, int64_t rows) {
  const GgmlType to = w.type == GgmlType::BF16 ? GgmlType::F32 : GgmlType::F16;
  std::vector<float> values(static_cast<size_t>(cols * rows));
  dequantize_row(w.type, w.data, values.data(), cols * rows);
  auto bytes = std::make_shared<std::vector<uint8_t>>(row_bytes(to, cols) * static_cast<size_t>(rows));
  quantize_row(to, values.data(), bytes->data(), cols * rows);
  Weight k{w.name, to, {cols, rows}, bytes->data(), bytes->size(), nullptr, nullptr};
  k.owner = bytes;
  return k;
}

VitConfig read_vit_config(HparamReader& h, const std::string& projector, bool gelu_quick_default, bool silu_ok) {
  VitConfig cfg;
  cfg.width = h.need_int("vision.embedding_length");
  cfg.n_head = h.need_int("vision.attention.head_count");
  if (cfg.n_head <= 0) throw h.bad("vision.attention.head_count", "must be positive");
  cfg.head_dim = h.int_or("vision.attention.head_dim", cfg.width / cfg.n_head);
  cfg.n_ff = h.need_int("vision.feed_forward_length");
  cfg.n_layer = static_cast<int>(h.need_int("vision.block_count"));
  cfg.eps = static_cast<float>(h.opt_float("vision.attention.layer_norm_epsilon").value_or(-1.0));
  if (cfg.eps <= 0) throw h.bad("vision.attention.layer_norm_epsilon", "must be given and positive");
  if (h.int_or("vision.attention.head_count_kv", cfg.n_head) != cfg.n_head)
    throw h.bad("vision.attention.head_count_kv", fmt::format("must equal the head count in a {} tower", projector));
  if (cfg.n_head * cfg.head_dim != cfg.width)
    throw h.bad("vision.attention.head_count", fmt::format("= {} heads of {} do not make the width {}", cfg.n_head,
                                                           cfg.head_dim, cfg.width));
  const bool gelu = h.opt_bool("use_gelu").value_or(false), silu = h.opt_bool("use_silu").value_or(false);
  if (silu && !silu_ok) throw h.bad("use_silu", fmt::format("is not used by a {} projector", projector));
  if (!gelu && !silu && !gelu_quick_default)
    throw h.bad("use_gelu", fmt::format("must be true for a {} projector (GELU; without it llama.cpp would run "
                                        "GELU-quick)",
                                        projector));
  cfg.act = gelu ? VitConfig::Act::Gelu : silu ? VitConfig::Act::Silu : VitConfig::Act::GeluQuick;
  return cfg;
}

std::pair<int, int> DynamicImageSize::target(int width, int height) const {
  const int64_t area = static_cast<int64_t>(patch) * patch * merge * merge;
  return size_preserved_ratio(width, height, patch * merge, min_tokens * area, max_tokens * area);
}

std::pair<int64_t, int64_t> DynamicImageSize::grid(int width, int height) const {
  const auto [w, h] = target(width, height);
  return {w / patch / merge, h / patch / merge};
}

void DynamicImageSize::set_limits(const ImageTokenLimits& l) {
  const int64_t lo = l.min > 0 ? l.min : min_tokens, hi = l.max > 0 ? l.max : max_tokens;
  if (l.min < 0 || l.max < 0 || lo > hi || hi > kMostTokens)
    throw Error(fmt::format("--image-min-tokens {} / --image-max-tokens {}: need 1 <= min <= max <= {}", lo, hi,
                            kMostTokens));
  min_tokens = lo;
  max_tokens = hi;
}

std::vector<float> DynamicImageSize::preprocess(const ImageU8& img, const float mean[3], const float std_dev[3], int& w,
                                                int& h) const {
  std::tie(w, h) = target(img.width, img.height);
  return to_planar_normalized(resize_padded(img, w, h, ResizeAlgo::Bicubic, Pad::Ceil, {0, 0, 0}), mean, std_dev);
}

void rope_head_halves(Backend& be, Act x, int64_t n, int64_t heads, int64_t hd, const int32_t* const positions[2],
                      const RopeParams params[2], Act scratch) {
  const int64_t half = hd / 2;
  for (int part = 0; part < 2; part++) {
    be.copy(scratch, half, x + part * half, hd, n * heads, half);
    be.rope(scratch, positions[part], n, static_cast<int>(heads), static_cast<int>(half), params[part]);
    be.copy(x + part * half, hd, scratch, half, n * heads, half);
  }
}

void avg_pool_rows(Backend& be, Act x, int64_t nx, int64_t ny, int k, int64_t d, Act out, Act tmp) {
  const int64_t ox = nx / k, oy = ny / k, m = ox * oy;
  std::vector<int64_t> rows(static_cast<size_t>(m));
  for (int ky = 0; ky < k; ky++)
    for (int kx = 0; kx < k; kx++) {
      for (int64_t y = 0; y < oy; y++)
        for (int64_t xx = 0; xx < ox; xx++) rows[static_cast<size_t>(y * ox + xx)] = (y * k + ky) * nx + xx * k + kx;
      if (ky == 0 && kx == 0) {
        be.gather_rows(out, x, rows.data(), m, d);
      } else {
        be.gather_rows(tmp, x, rows.data(), m, d);
        be.add(out, tmp, m * d);
      }
    }
  be.scale(out, m * d, 1.0f / static_cast<float>(k * k));
}

void read_image_norm(MmprojSource& src, float mean[3], float std_dev[3]) {
  for (auto [key, out] : {std::pair{"vision.image_mean", mean}, std::pair{"vision.image_std", std_dev}}) {
    const GgufValue* v = src.file.find(std::string("clip.") + key);
    if (!v || v->type != GgufValueType::ARRAY || v->as_array().items.size() < 3)
      throw src.keys.bad(key, "must be an array of 3 numbers");
    for (int c = 0; c < 3; c++) out[c] = static_cast<float>(v->as_array().items[c].as_double());
    src.keys.accept(key);
  }
}

void synth_vit_blocks(const SynthAdd& add, const MmprojSynthShape& s, bool fused_qkv, const std::string& prefix,
                      bool k_bias) {
  const int64_t d = s.width;
  const float in = 1.0f / std::sqrt(static_cast<float>(d)), res = in / std::sqrt(2.0f * static_cast<float>(s.layers));
  for (int64_t l = 0; l < s.layers; l++) {
    const std::string p = fmt::format("{}.blk.{}.", prefix, l);
    if (fused_qkv) {
      add(p + "attn_qkv.weight", {d, 3 * d}, in, 0);
      add(p + "attn_qkv.bias", {3 * d}, 0.02f, 0);
    } else {
      for (const char* m : {"attn_q", "attn_k", "attn_v"}) {
        add(p + m + ".weight", {d, d}, in, 0);
        if (k_bias || std::string(m) != "attn_k") add(p + m + ".bias", {d}, 0.02f, 0);
      }
    }
    add(p + "attn_out.weight", {d, d}, res, 0);
    add(p + "attn_out.bias", {d}, 0.02f, 0);
    add(p + "ln1.weight", {d}, 0.1f, 1.0f);
    add(p + "ln1.bias", {d}, 0.02f, 0);
    add(p + "ln2.weight", {d}, 0.1f, 1.0f);
    add(p + "ln2.bias", {d}, 0.02f, 0);
    add(p + "ffn_up.weight", {d, s.ffn}, in, 0);
    add(p + "ffn_up.bias", {s.ffn}, 0.02f, 0);
    add(p + "ffn_down.weight", {s.ffn, d}, res * std::sqrt(static_cast<float>(d) / static_cast<float>(s.ffn)), 0);
    add(p + "ffn_down.bias", {d}, 0.02f, 0);
  }
  add(prefix + ".post_ln.weight", {d}, 0.1f, 1.0f);
  add(prefix + ".post_ln.bias", {d}, 0.02f, 0);
}

void attend_whole_image(Backend& be, Act q, Act k, Act v, Act out, int64_t n, int64_t heads, int64_t head_dim,
                        float scale, std::vector<int32_t>& last) {
  if (static_cast<int64_t>(last.size()) != n) last.assign(static_cast<size_t>(n), static_cast<int32_t>(n - 1));
  AttentionShape shape;
  shape.n_head = static_cast<int>(heads);
  shape.n_kv_head = static_cast<int>(heads);
  shape.head_dim = static_cast<int>(head_dim);
  shape.scale = scale;
  const int64_t width = heads * head_dim;
  be.attention_dense(k, v, width, width, n, {n, q, out, last.data(), nullptr}, shape);
}

void embed_patches(Backend& be, const Weight& kernel, const std::vector<float>& planar, int w, int h, int patch,
                   int merge, Act cols, Act out) {
  const std::vector<float> rows = patch_rows(planar, w, h, patch, merge);
  const int64_t k = static_cast<int64_t>(patch) * patch * 3, n = static_cast<int64_t>(rows.size()) / k;
  be.copy(cols, k, be.host_view(rows.data()), k, n, k);
  be.matmul(kernel, cols, n, out);
}

MediaEmbeddings read_embeddings(Backend& be, Act rows, int64_t m, int64_t width) {
  MediaEmbeddings e;
  e.n_tokens = m;
  e.width = width;
  e.rows.resize(static_cast<size_t>(m * width));
  be.read(rows, e.rows.data(), m * width);
  return e;
}

std::vector<float> patch_rows(const std::vector<float>& planar, int w, int h, int patch, int merge) {
  const int64_t nx = w / patch, ny = h / patch, k = static_cast<int64_t>(patch) * patch * 3;
  std::vector<float> cols(static_cast<size_t>(nx * ny * k));
  float* row = cols.data();
  for (int64_t by = 0; by < ny / merge; by++)
    for (int64_t bx = 0; bx < nx / merge; bx++)
      for (int dy = 0; dy < merge; dy++)
        for (int dx = 0; dx < merge; dx++) {
          const int64_t py = by * merge + dy, px = bx * merge + dx;
          for (int c = 0; c < 3; c++)
            for (int y = 0; y < patch; y++)
              for (int x = 0; x < patch; x++)
                *row++ = planar[(static_cast<size_t>(c) * h + py * patch + y) * w + px * patch + x];
        }
  return cols;
}

ClippableMatrix load_clippable(MmprojSource& src, const std::string& name, int64_t in, int64_t out, int64_t& bytes) {
  ClippableMatrix c;
  c.w = src.tensors.require(name + ".weight", {in, out});
  bytes += static_cast<int64_t>(c.w.nbytes);
  c.w = src.be.prepare_weight(std::move(c.w));
  auto bound = [&](const char* what, float& v) {
    const std::vector<float> x = src.tensors.optional_floats(name + "." + what, {1});
    if (!x.empty()) v = x[0];
  };
  bound("input_min", c.in_lo);
  bound("input_max", c.in_hi);
  bound("output_min", c.out_lo);
  bound("output_max", c.out_hi);
  return c;
}

void clippable_matmul(Backend& be, const ClippableMatrix& c, Act x, int64_t n, Act y, Act scratch) {
  Act in = x;
  if (c.clamps_in()) {
    const int64_t cols = c.w.cols();
    be.copy(scratch, cols, x, cols, n, cols);
    ops::clamp(be, {scratch, n * cols, c.in_lo, c.in_hi});
    in = scratch;
  }
  be.matmul(c.w, in, n, y);
  if (c.clamps_out()) ops::clamp(be, {y, n * c.w.rows(), c.out_lo, c.out_hi});
}

}  // namespace kestrel
