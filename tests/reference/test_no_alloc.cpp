// After warm-up, a decode step (and a prefill step of a size seen before)
// allocates nothing: scratch is planned once, kernels reuse their buffers.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "gguf/synth.h"
#include "runtime/engine.h"
#include "test_support.h"
#include "model/batch_io.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
}  // namespace

// Counts every allocation in this test binary while g_counting is set.
void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace kestrel {
namespace {

long allocations_during(const std::function<void()>& fn) {
  g_allocations = 0;
  g_counting = true;
  fn();
  g_counting = false;
  return g_allocations.load();
}

void check_engine(Engine& e) {
  std::vector<float> logits(static_cast<size_t>(8 * e.model->config().n_vocab));
  Batch prefill, decode;
  for (int i = 0; i < 8; i++) prefill.add(5 + i, i, 0, true);
  auto step = [&](int pos) {
    decode.clear();
    decode.add(7, pos, 0, true);
    allocate_kv(decode, *e.kv);
    e.model->forward(decode, *e.kv, logits.data());
  };
  // Warm-up: one prefill and a few decode steps grow every buffer once.
  allocate_kv(prefill, *e.kv);
  e.model->forward(prefill, *e.kv, logits.data());
  for (int p = 8; p < 12; p++) step(p);
  EXPECT_EQ(allocations_during([&] {
              for (int p = 12; p < 40; p++) step(p);
            }),
            0);
  e.kv->remove(0);
  EXPECT_EQ(allocations_during([&] {
              allocate_kv(prefill, *e.kv);  // the caller's allocation counts too
              e.model->forward(prefill, *e.kv, logits.data());
            }),
            0);
}

TEST(NoAllocation, DecodeStepsAllocateNothingAfterWarmUp) {
  EngineOptions o;
  o.model_path = test::shared("models/stories260K.bin");
  o.llama2c_tokenizer = test::shared("models/tok512.bin");
  o.n_threads = 2;
  Engine e = Engine::load(o);
  check_engine(e);
}

void check_synth(const std::string& arch, const std::string& preset) {
  test::TempDir dir;
  SynthOptions s;
  s.shape = synth_preset(arch, preset);
  s.type = GgmlType::Q8_0;
  synth_model(s).write_file(dir.file("q.gguf"));
  EngineOptions o;
  o.model_path = dir.file("q.gguf");
  o.n_threads = 2;
  Engine e = Engine::load(o);
  check_engine(e);
}

TEST(NoAllocation, QuantizedModelToo) { check_synth("llama", "tiny"); }

// MLA (absorbed for decode), per-head matmuls, routing and grouped experts.
TEST(NoAllocation, DeepseekMoeModel) { check_synth("deepseek2", "tiny-v3"); }

}  // namespace
}  // namespace kestrel
