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

namespace kestrel {

struct VitConfig {
  int64_t width = 0, n_head = 0, head_dim = 0, n_ff = 0;
  int n_layer = 0;
  float eps = 1e-6f;
  enum class Act { Gelu } act = Act::Gelu;  // clip.use_gelu (ggml's tanh GELU)
};

class VitTower {
 public:
  // Reads `{prefix}.blk.N.*` of cfg's n_layer blocks (llama.cpp's names).
  VitTower(MmprojSource& src, const std::string& prefix, const VitConfig& cfg);
  // The blocks over x's n rows (width floats each), in place.
  void run(Backend& be, Act x, int64_t n);
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

}  // namespace kestrel
