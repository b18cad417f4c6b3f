#pragma once
// The vision transformer most mmproj towers share (llama.cpp's clip_graph::build_vit): pre-LayerNorm blocks
//   x += Wo . attention(LN1(x)) + bo      (q, k, v with biases; every patch attends to every patch)
//   x += down(act(up(LN2(x)) + b_up)) + b_down
// over the patches of one image, on the backend's operators. A projector file (gemma3_vision.cpp) loads it
// and runs what comes before (the patch embedding) and after (pooling, projection).
#include <cfloat>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "formats/weight.h"
#include "mmproj/mmproj.h"
#include "model/hparams_reader.h"

namespace kestrel {

struct VitConfig {
  int64_t width = 0, n_head = 0, head_dim = 0, n_ff = 0;
  int n_layer = 0;
  float eps = 1e-6f;
  // The FFN's activation: clip.use_gelu (ggml's tanh GELU), clip.use_silu (SiLU: Pixtral's SwiGLU), else
  // (Gemma 4) GELU-quick.
  // (Whisper's audio encoder: the exact erf GELU.)
  enum class Act { Gelu, GeluQuick, Silu, GeluErf } act = Act::Gelu;
  bool fused_qkv = false;
  bool k_bias = true;  // attn_k.bias (Whisper's encoder has none)  // one attn_qkv (q rows, k rows, v rows; Qwen3-VL) instead of attn_q, attn_k, attn_v
};

// A rotary embedding of the tower's q and k after their biases (Qwen3-VL's 2-D vision RoPE): `passes` RoPE
// calls of the backend, pass i turning by positions[i] with params[i] (each leaves the other passes' pairs alone).
struct VitRope {
  int passes = 0;
  const int32_t* positions[2] = {nullptr, nullptr};
  RopeParams params[2];
};

class VitTower {
 public:
  // Reads `{prefix}.blk.N.*` of cfg's n_layer blocks (llama.cpp's names).
  VitTower(MmprojSource& src, const std::string& prefix, const VitConfig& cfg);
  // The blocks over x's n rows (width floats each), in place; rope: turns q and k (null: no RoPE).
  void run(Backend& be, Act x, int64_t n, const VitRope* rope = nullptr);
  int64_t weight_bytes() const { return bytes_; }

 private:
  struct Block {
    Weight q, k, v, o, up, down;
    std::vector<float> qb, kb, vb, ob, upb, downb, ln1w, ln1b, ln2w, ln2b;
  };
  void ensure(Backend& be, int64_t n);
  VitConfig cfg_;
  std::vector<Block> blocks_;
  int64_t bytes_ = 0;
  int64_t rows_ = 0;  // the scratch's rows
  ActBuffer xn_, q_, k_, v_, att_, y_, ff_;
  std::vector<int32_t> last_;  // every query's last key: the whole image
};

// A matrix stored for ggml_mul_mat(ggml_cont(ggml_transpose(w)), x) (Gemma 3's mm.input_projection): its
// transpose in the same type (F32, F16 or BF16; another type is a load error naming the tensor).
Weight transposed_weight(const Weight& w, const std::string& file);

// A patch-embedding kernel as ggml_conv_2d multiplies it: its im2col is F16 (F32 for a BF16 kernel) and the
// product runs in the im2col's type, so the kernel's values are rounded to F16 (a BF16 kernel taken as F32). The
// matrix is reshaped to {cols, rows}; the backend's F16 product rounds the patches to F16 as ggml does.
Weight conv_kernel_weight(const Weight& w, int64_t cols, int64_t rows);

// The tower's shape from `clip.vision.*` (width, heads, head size, FFN, blocks, LayerNorm epsilon) and its FFN's
// activation as llama.cpp picks it: clip.use_gelu GELU, clip.use_silu SiLU (refused unless silu_ok), neither
// GELU-quick (refused unless gelu_quick_default): what the projector implements; errors name the key and the
// projector.
VitConfig read_vit_config(HparamReader& h, const std::string& projector, bool gelu_quick_default = false,
                          bool silu_ok = false);

// llama.cpp's dyn_size preprocessor (Qwen-VL, Gemma 4, Pixtral): the image resized keeping its aspect ratio to
// sides that are multiples of patch * merge, within [min_tokens, max_tokens] merged tokens (calc_size_preserved_ratio
// on the pixel bounds), bicubic, letterboxed by its default PAD_CEIL (Hugging Face stretches instead), normalised.
struct DynamicImageSize {
  static constexpr int64_t kMostTokens = 16384;  // --image-max-tokens at most (a 4096x4096 image at 16 px a token)
  int patch = 0, merge = 1;
  int64_t min_tokens = 0, max_tokens = 0;
  std::pair<int, int> target(int width, int height) const;
  // (W / patch / merge) x (H / patch / merge) of the target.
  std::pair<int64_t, int64_t> grid(int width, int height) const;
  // --image-min-tokens / --image-max-tokens (0: keep the projector's), checked: 1 <= min <= max <= kMostTokens.
  void set_limits(const ImageTokenLimits& l);
  std::vector<float> preprocess(const ImageU8& img, const float mean[3], const float std_dev[3], int& w, int& h) const;
};

// RoPE on the two halves of every head apart (llama.cpp's build_rope_2d, Gemma 4's add_pos): half i (dims
// [i*hd/2, (i+1)*hd/2) of each of the `heads` heads of hd in x's n rows) turned by positions[i] with params[i]
// over heads of hd/2: gathered into scratch (n*heads*hd/2 floats), turned by the backend's RoPE, put back.
void rope_head_halves(Backend& be, Act x, int64_t n, int64_t heads, int64_t hd, const int32_t* const positions[2],
                      const RopeParams params[2], Act scratch);

// Average pooling of an nx x ny grid of rows (raster order, d floats each) by k x k: (nx/k) x (ny/k) rows into out,
// in raster order (ggml_pool_2d's sums over (ky, kx) in that order, then the mean); tmp holds as many rows.
void avg_pool_rows(Backend& be, Act x, int64_t nx, int64_t ny, int k, int64_t d, Act out, Act tmp);

// clip.vision.image_mean and image_std (3 numbers each), read and accepted.
void read_image_norm(MmprojSource& src, float mean[3], float std_dev[3]);

// A synthetic tower's blocks (`{prefix}.blk.N.*`, fused or split q/k/v with biases, k's left out unless k_bias)
// and post-LayerNorm, for s's width, FFN and layers, in the order the projector files write them.
void synth_vit_blocks(const SynthAdd& add, const MmprojSynthShape& s, bool fused_qkv, const std::string& prefix = "v",
                      bool k_bias = true);

// Attention of n patches that all see all (q, k, v: n rows of heads x head_dim each) into out, on the dense
// kernel: every query's last key is the image's last (`last`: its n entries, kept between calls).
void attend_whole_image(Backend& be, Act q, Act k, Act v, Act out, int64_t n, int64_t heads, int64_t head_dim,
                        float scale, std::vector<int32_t>& last);

// The convolution of the patches into out (n rows of the kernel's width): patch_rows(planar, w, h, patch, merge)
// uploaded to `cols`, times the kernel (conv_kernel_weight's).
void embed_patches(Backend& be, const Weight& kernel, const std::vector<float>& planar, int w, int h, int patch,
                   int merge, Act cols, Act out);

// A matrix with Gemma4ClippableLinear's optional bounds (llama.cpp's clamp_info_map: absent ones are +-FLT_MAX),
// in Gemma 4's vision and audio towers.
struct ClippableMatrix {
  Weight w;
  float in_lo = -FLT_MAX, in_hi = FLT_MAX, out_lo = -FLT_MAX, out_hi = FLT_MAX;
  bool clamps_in() const { return in_lo != -FLT_MAX || in_hi != FLT_MAX; }
  bool clamps_out() const { return out_lo != -FLT_MAX || out_hi != FLT_MAX; }
};
// `name`.weight {in, out}, prepared for the backend, with the bounds stored beside it (`name`.input_min,
// .input_max, .output_min, .output_max, each {1}); its bytes added to `bytes`.
ClippableMatrix load_clippable(MmprojSource& src, const std::string& name, int64_t in, int64_t out, int64_t& bytes);
// y = clamp(W . clamp(x)) over n rows (the input clamped in a copy in scratch: x stays).
void clippable_matmul(Backend& be, const ClippableMatrix& c, Act x, int64_t n, Act y, Act scratch);

// An encoder's m output rows of `width` read back from the backend.
MediaEmbeddings read_embeddings(Backend& be, Act rows, int64_t m, int64_t width);

// The patches of a planar image (3 x h x w floats) as the convolution's input rows, each (channel, y, x) of its
// patch x patch pixels: in raster order of the patches (merge 1), or merge x merge blocks of them in raster order,
// each block's patches in raster order (Qwen-VL's merge order: the rows a merger takes together are adjacent).
std::vector<float> patch_rows(const std::vector<float>& planar, int w, int h, int patch, int merge = 1);

}  // namespace kestrel
