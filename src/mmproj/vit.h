#pragma once
// The vision transformer most mmproj towers share (llama.cpp's clip_graph::build_vit): pre-LayerNorm blocks
//   x += Wo . attention(LN1(x)) + bo      (q, k, v with biases; every patch attends to every patch)
//   x += down(act(up(LN2(x)) + b_up)) + b_down
// over the patches of one image, on the backend's operators. A projector file (gemma3_vision.cpp) loads it
// and runs what comes before (the patch embedding) and after (pooling, projection).
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
  enum class Act { Gelu } act = Act::Gelu;  // clip.use_gelu (ggml's tanh GELU)
  bool fused_qkv = false;  // one attn_qkv (q rows, k rows, v rows; Qwen3-VL) instead of attn_q, attn_k, attn_v
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
// activation (clip.use_gelu, required: llama.cpp would run gelu_quick without it, SiLU with use_silu, neither of
// which the tower implements); errors name the key and the projector.
VitConfig read_vit_config(HparamReader& h, const std::string& projector);

// clip.vision.image_mean and image_std (3 numbers each), read and accepted.
void read_image_norm(MmprojSource& src, float mean[3], float std_dev[3]);

// A synthetic tower's blocks (`v.blk.N.*`, fused or split q/k/v with biases) and post-LayerNorm, for s's width,
// FFN and layers, in the order the projector files write them.
void synth_vit_blocks(const SynthAdd& add, const MmprojSynthShape& s, bool fused_qkv);

// The patches of a planar image (3 x h x w floats) as the convolution's input rows, each (channel, y, x) of its
// patch x patch pixels: in raster order of the patches (merge 1), or merge x merge blocks of them in raster order,
// each block's patches in raster order (Qwen-VL's merge order: the rows a merger takes together are adjacent).
std::vector<float> patch_rows(const std::vector<float>& planar, int w, int h, int patch, int merge = 1);

}  // namespace kestrel
