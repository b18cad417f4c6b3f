// After warm-up, a decode step (and a prefill step of a size seen before)
// allocates nothing: scratch is planned once, kernels reuse their buffers.
#include <gtest/gtest.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

#include "model/synth.h"
#include "runtime/loaded_model.h"
#include "test_support.h"
#include "model/batch_io.h"
#include "runtime/step_executor.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
}  // namespace

// Counts every allocation in this test binary while g_counting is set.
// Every form of new and delete is replaced, the nothrow and aligned ones
// too: left to the runtime, a nothrow new would allocate with its allocator
// and our delete free with ours (ASan's alloc-dealloc-mismatch).
namespace {
void* counted(std::size_t n, std::size_t align = 0) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  if (n == 0) n = 1;
  if (align <= alignof(std::max_align_t)) return std::malloc(n);
  return std::aligned_alloc(align, (n + align - 1) / align * align);
}
// Every replacement delete frees through here: not inlined, so the compiler does not pair a free() it can see
// with the operator new the pointer came from (a false -Wmismatched-new-delete).
[[gnu::noinline]] void release(void* p) noexcept { std::free(p); }
void* or_throw(void* p) {
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(std::size_t n) { return or_throw(counted(n)); }
void* operator new[](std::size_t n) { return or_throw(counted(n)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted(n); }
void* operator new(std::size_t n, std::align_val_t a) { return or_throw(counted(n, static_cast<std::size_t>(a))); }
void* operator new[](std::size_t n, std::align_val_t a) { return or_throw(counted(n, static_cast<std::size_t>(a))); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return counted(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete(void* p, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { release(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { release(p); }

namespace kestrel {
namespace {

long allocations_during(const std::function<void()>& fn) {
  g_allocations = 0;
  g_counting = true;
  fn();
  g_counting = false;
  return g_allocations.load();
}

void check_engine(LoadedModel& e) {
  std::vector<float> logits(static_cast<size_t>(8 * e.model->config().n_vocab));
  Batch prefill, decode;
  BatchPlacement place(e.model->max_batch_tokens());
  for (int i = 0; i < 8; i++) prefill.add(5 + i, i, 0, true);
  auto run = [&](const Batch& b) {
    test::allocate_by_hand(b, *e.kv);
    place_batch(b, *e.kv, e.model->config().n_vocab, place);
    e.model->forward(b, place, e.kv->store(), logits.data());
  };
  auto step = [&](int pos) {
    decode.clear();
    decode.add(7, pos, 0, true);
    run(decode);
  };
  // Warm-up: one prefill and a few decode steps grow every buffer once.
  run(prefill);
  for (int p = 8; p < 12; p++) step(p);
  EXPECT_EQ(allocations_during([&] {
              for (int p = 12; p < 40; p++) step(p);
            }),
            0);
  e.kv->remove(0);
  EXPECT_EQ(allocations_during([&] {
              run(prefill);  // the allocation and placement count too
            }),
            0);
}

TEST(NoAllocation, DecodeStepsAllocateNothingAfterWarmUp) {
  LoadOptions o;
  o.model_path = test::shared("models/stories260K.bin");
  o.llama2c_tokenizer = test::shared("models/tok512.bin");
  o.n_threads = 2;
  LoadedModel e = LoadedModel::load(o);
  check_engine(e);
}

void check_synth(const std::string& arch, const std::string& preset) {
  test::TempDir dir;
  SynthOptions s;
  s.shape = synth_preset(arch, preset);
  s.type = GgmlType::Q8_0;
  synth_model(s).write_file(dir.file("q.gguf"));
  LoadOptions o;
  o.model_path = dir.file("q.gguf");
  o.n_threads = 2;
  LoadedModel e = LoadedModel::load(o);
  check_engine(e);
}

TEST(NoAllocation, QuantizedModelToo) { check_synth("llama", "tiny"); }

// MLA (absorbed for decode), per-head matmuls, routing and grouped experts.
TEST(NoAllocation, DeepseekMoeModel) { check_synth("deepseek2", "tiny-v3"); }

// A whole step of the executor `run` and `serve` share — plan (the ledger
// included: blocks allocated, full blocks named for prefix sharing as they
// fill), forward, sampling, update — for four requests decoding together
// allocates nothing after warm-up. (What the server then sends its clients —
// text, events — is outside the step.)
void check_executor_steps(const SamplingParams& sampling) {
  LoadOptions o = test::shared_engine("models/stories260K.gguf", 256);
  o.n_seq_max = 4;
  LoadedModel e = LoadedModel::load(o);
  ExecConfig xc;
  xc.scheduler.max_batch_size = 4;
  xc.scheduler.max_batch_tokens = e.model->max_batch_tokens();
  xc.scheduler.prefill_chunk = e.model->max_batch_tokens();
  StepExecutor exec(e, xc);
  for (int i = 0; i < 4; i++) {
    auto r = std::make_unique<Request>();
    r->id = i + 1;
    r->seq = i + 1;
    for (int t = 0; t < 10 + i; t++) r->params.prompt.push_back(1 + (t * 7 + i) % 500);
    r->params.sampling = sampling;
    r->params.max_tokens = 200;
    r->params.ignore_eos = true;
    exec.add(std::move(r));
  }
  int ended = 0, tokens = 0;
  auto step = [&](int now) {
    for (const RequestOutput& out : exec.step(now)) {
      ended += out.finished;
      tokens += static_cast<int>(out.tokens.size());
    }
  };
  for (int i = 0; i < 20; i++) step(i);  // warm-up: prefill and the first decodes
  const int64_t before = exec.record(1)->num_tokens();
  tokens = 0;
  EXPECT_EQ(allocations_during([&] {
              for (int i = 20; i < 60; i++) step(i);
            }),
            0);
  EXPECT_EQ(ended, 0);
  EXPECT_EQ(tokens, 4 * 40);  // every request's token of every step came out
  EXPECT_EQ(exec.record(1)->num_tokens(), before + 40);  // forty real decode steps, across block boundaries
  EXPECT_GT(e.kv->blocks().n_cached_blocks() + e.kv->blocks().n_used_blocks(), 4 * 3);
}

TEST(NoAllocation, ExecutorStepsGreedy) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  check_executor_steps(greedy);
}

TEST(NoAllocation, ExecutorStepsSampled) {
  SamplingParams s;
  s.temperature = 0.8f;
  s.top_k = 40;
  s.top_p = 0.95f;
  s.repeat_penalty = 1.1f;
  s.seed = 3;
  check_executor_steps(s);
}

}  // namespace
}  // namespace kestrel
