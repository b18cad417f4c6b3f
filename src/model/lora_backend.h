#pragma once
// LoRA adapters applied per batch row, around the backend that runs the model (model/lora.h for the adapters).
// A product by a matrix an adapter names adds, on the rows whose request runs that adapter,
//   scale * B . (A . x)      (llm_graph_context::build_lora_mm: the base product, then per adapter the update
//                             computed apart, scaled, added; adapters in the request's order)
// and the embedding adds scale * B . A[token] (build_inp_embd). Requests with different adapter sets share a step:
// the base product runs once over every row, each adapter's update over its rows only (gathered, then added back
// by scatter_add_rows: the product rounded before the sum, as ggml_scale then ggml_add). The batch says which set
// each row runs (Batch::lora_rows); the model says which batch rows each call's rows are (annotate_rows). In a step
// whose rows differ, a product over rows the model did not announce is an error naming the matrix, never an
// update applied to the wrong rows.
//
// It sits around the loaded backend from the model's load, so that it sees every matrix the model prepares: those
// are what an adapter may name (LoraTargets).
#include <memory>
#include <set>
#include <vector>

#include "backend/forwarding_backend.h"
#include "model/lora.h"

namespace kestrel {

class LoraBackend final : public ForwardingBackend {
 public:
  // ops: where the updates' own operators run (null: inner). A recorder of activations inside (precision-check,
  // imatrix) passes the backend it wraps, so that it sees the model's operators only, the updates already added.
  explicit LoraBackend(std::unique_ptr<Backend> inner, Backend* ops = nullptr);
  Backend& inner() { return in_; }
  // The matrices prepared so far (the model's products) and the model's embedding; load sets the rest.
  LoraTargets& targets() { return targets_; }

  // Records which pairs the next steps apply (begin_check), and returns them (end_check): a pair the model's code
  // never applies in a step is one whose matrix it multiplies by inside an operator that takes no adapter.
  void begin_check() {
    checking_ = true;
    applied_.clear();
  }
  std::set<const LoraPair*> end_check() {
    checking_ = false;
    return std::move(applied_);
  }

  Weight prepare_weight(Weight w) override;
  void annotate_batch(const Batch& b) override;
  void annotate_rows(const int64_t* list, int64_t first, int64_t n) override;
  void annotate_subrows(const int64_t* picks, int64_t n) override;
  void ffn_many(const FfnRef* ffns, int count, const Act* xs, const int64_t* ns, const Act* ys) override;

  void matmul(const Weight& w, Act x, int64_t n, Act y) override;
  void matmul_many(const Weight* const* ws, int count, Act x, int64_t n, const Act* ys) override;
  void swiglu(const Weight& g, const Weight& u, Act x, int64_t n, Act out, Act scratch) override;
  void geglu(const Weight& g, const Weight& u, Act x, int64_t n, Act out, Act scratch) override;
  void qkv_rope(const Weight* const* w, const float* const* b, Act x, int64_t n, const int32_t* pos,
                const RopeParams& rope, const QkvShape& shape, const Act* out) override;
  void embed(const Weight& t, const int32_t* tokens, int64_t n, Act out) override;

 private:
  // Whether an adapter of this step names w.
  bool touches(const Weight& w) const;
  // Where an adapter names gate or up: both products in one pass over x, each updated, into out and scratch
  // (the activation is the caller's); false: neither is named, nothing done.
  bool gate_up_updated(const Weight& g, const Weight& u, Act x, int64_t n, Act out, Act scratch);
  // The updates of this step's adapters to the product by w of n rows x into y (embedding: x unused, tokens the
  // rows' tokens).
  void add_updates(const Weight& w, Act x, const int32_t* tokens, int64_t n, Act y);
  void apply(const LoraPair& p, float scale, Act x, const int32_t* tokens, int64_t n, Act y, const int64_t* rows,
             int64_t out_dim);

  std::unique_ptr<Backend> owned_;
  Backend& ops_;
  bool checking_ = false;
  std::set<const LoraPair*> applied_;
  LoraTargets targets_;
  // The step: its distinct sets, each batch row's (-1: none), whether they differ, the announced rows.
  std::vector<const LoraSet*> sets_;
  std::vector<int32_t> row_set_;
  bool active_ = false, mixed_ = false;
  std::vector<int64_t> announced_;
  bool announced_set_ = false;
  std::vector<int64_t> layer_rows_;  // annotate_subrows: the layer's announcement, given back after the experts
  // Scratch (grown, then reused): gathered inputs, A . x, the update; rows and tokens of one set.
  ActBuffer xg_, t_, u_;
  std::vector<int64_t> rows_;
  std::vector<int32_t> tokens_;
  std::vector<float> scales_;
};

}  // namespace kestrel
