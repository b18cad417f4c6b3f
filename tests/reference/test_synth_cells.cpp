// Architectures no public file of which is at hand, on files `kestrel synth` writes: each cell of
// tests/reference/synth_cells.json (recorded by tests/compat/synth_cells.py record) is regenerated, its
// sha256 checked (the recording is of these very bytes; a quantized cell is the F32 file through
// `kestrel quantize --mix`, which the recording found byte-equal to llama-quantize's), and kestrel's greedy
// ids compared with llama.cpp's in both MLA modes: exactly, or for quantized cells by the compat set's rule
// (a first difference only at a step whose recorded top-2 gap is below the cell's tie_gap).
//   mistral4-tiny.f32: Mistral Small 4's layout with its query temperature by position (without the
//     temperature the ids leave llama.cpp's at step 8);
//   deepseek2-lite-form-tiny.f32: the V2-Lite form (no query bottleneck) with attention.q_lora_rank 0,
//     which llama.cpp's loader requires at that layer count;
//   deepseek32-tiny*: DeepSeek-V3.2's sparse attention with a top-k of 4 (6) below the prompt's length,
//     three seeds and prompts, Q8_0 and Q4_K_M;
//   deepseek4-tiny*, glm-dsa-tiny*: likewise (docs/models.md).
// The cells of files with an MTP block also hold llama.cpp's MTP prediction at every prompt row.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_process.h"
#include "model/batch.h"
#include "runtime/loaded_model.h"
#include "runtime/sampler.h"
#include "test_support.h"

namespace kestrel {

using json = nlohmann::json;

namespace {


// `kestrel synth` writing the cell's file to path (and its MTP block apart, for a cell of a split file).
void synth_cell(const json& cell, const std::string& path) {
  std::vector<std::string> synth = {"synth"};
  for (const auto& a : cell["synth"]) synth.push_back(a);
  synth.insert(synth.end(), {"-o", path});
  if (cell.contains("mtp") && cell["mtp"].contains("file_sha256")) synth.insert(synth.end(), {"--mtp-file", path + ".mtp"});
  const auto made = test::run_kestrel(synth);
  ASSERT_EQ(made.exit_code, 0) << cell["name"] << ": " << made.err;
}


TEST(SynthCells, KestrelGivesLlamaCppsIdsOnTheRecordedFiles) {
  const json doc = json::parse(test::read_text(std::string(KESTREL_SOURCE_DIR) + "/tests/reference/synth_cells.json"));
  ASSERT_GE(doc["cells"].size(), 2u);
  test::TempDir dir;
  for (const auto& cell : doc["cells"]) {
    const std::string name = cell["name"], path = dir.file(name + ".gguf");
    synth_cell(cell, path);
    std::string model = path;
    if (cell.contains("quantize")) {
      model = dir.file(name + ".q.gguf");
      std::vector<std::string> q = {"quantize", path, model};
      for (const auto& a : cell["quantize"]) q.push_back(a);
      const auto quantized = test::run_kestrel(q);
      ASSERT_EQ(quantized.exit_code, 0) << name << ": " << quantized.err;
    }
    ASSERT_EQ(test::sha256_of(model), cell["sha256"].get<std::string>())
        << name << ": synth (and quantize) no longer write the recorded file";
    std::string prompt;
    for (const auto& id : cell["prompt"]) prompt += (prompt.empty() ? "" : " ") + std::to_string(id.get<int>());
    const auto want = cell["ids"].get<std::vector<int>>();
    // Both MLA modes, and the prompt in chunks of 3 (a first chunk within the indexer's top-k computes only
    // its keys; a chunk finishing a V4 block reads earlier chunks' compressor state from the cache).
    for (const char* mla : {"absorbed", "decompressed", "chunked"}) {
      std::vector<std::string> args = {"run", "-m", model, "--prompt-ids", prompt, "-n", std::to_string(want.size()),
                                       "--temp", "0", "--print-ids", "--ignore-eos"};  // (llama.cpp's ids go on past one)
      if (std::string(mla) == "chunked")
        args.insert(args.end(), {"-b", "3"});
      else
        args.insert(args.end(), {"--mla", mla});
      const auto r = test::run_kestrel(args);
      ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
      const auto got = test::printed_ids(r.out + r.err);
      ASSERT_EQ(got.size(), want.size()) << name << " (--mla " << mla << "): " << r.out << r.err;
      const double tie_gap = cell.value("tie_gap", 1e-3);
      const auto gaps = cell["gaps"].get<std::vector<double>>();
      size_t k = 0;
      while (k < want.size() && got[k] == want[k]) k++;
      if (k < want.size()) {
        EXPECT_LT(gaps[k], tie_gap) << name << " (--mla " << mla << "): id " << got[k] << " at step " << k
                                    << " where llama.cpp chose " << want[k] << " by a gap of " << gaps[k];
      }
    }
  }
}

// The cells with an MTP block (recorded by tests/compat/mtp_oracle.cpp): row p of the block reads token p+1
// and the trunk's hidden state at p (DeepSeek-V4: its streams); its argmax must be llama.cpp's at every row,
// or differ only where llama.cpp's top-2 gap is below the tie gap. Every row is an independent check.
TEST(SynthCells, TheMtpBlockPredictsWhatLlamaCppsDoesAtEveryPromptRow) {
  const json doc = json::parse(test::read_text(std::string(KESTREL_SOURCE_DIR) + "/tests/reference/synth_cells.json"));
  test::TempDir dir;
  int cells = 0, files = 0;
  for (const auto& cell : doc["cells"]) {
    if (!cell.contains("mtp")) continue;
    cells++;
    const std::string name = cell["name"], path = dir.file(name + ".gguf");
    synth_cell(cell, path);
    ASSERT_EQ(test::sha256_of(path), cell["sha256"].get<std::string>()) << name;
    LoadOptions o;
    o.model_path = path;
    if (cell["mtp"].contains("file_sha256")) {  // the block from its own file, with that file's head
      o.mtp_model = path + ".mtp";
      ASSERT_EQ(test::sha256_of(o.mtp_model), cell["mtp"]["file_sha256"].get<std::string>()) << name;
      files++;
    }
    o.n_threads = 2;
    o.n_ctx = 512;
    o.load_mtp = true;
    LoadedModel e = LoadedModel::load(o);
    ASSERT_EQ(e.model->mtp_layers(), 1) << name;
    const auto prompt = cell["prompt"].get<std::vector<int32_t>>();
    const auto n = static_cast<int64_t>(prompt.size());
    const int64_t nv = e.model->config().n_vocab, width = e.model->hidden_dim();
    Batch trunk, rows;
    for (int64_t p = 0; p < n; p++) trunk.add(prompt[p], static_cast<int32_t>(p), 0, false);
    for (int64_t p = 0; p + 1 < n; p++) rows.add(prompt[p + 1], static_cast<int32_t>(p), 0, true);
    std::vector<float> hidden(static_cast<size_t>(n * width)), logits(static_cast<size_t>((n - 1) * nv));
    test::forward_alone(e, trunk, nullptr, hidden.data());
    test::forward_mtp_alone(*e.model, *e.kv, rows, hidden.data(), logits.data(), nullptr);
    const auto want = cell["mtp"]["ids"].get<std::vector<int>>();
    const auto gaps = cell["mtp"]["gaps"].get<std::vector<double>>();
    ASSERT_EQ(static_cast<int64_t>(want.size()), n - 1) << name;
    int differ = 0;
    for (int64_t p = 0; p + 1 < n; p++) {
      const int got = argmax(logits.data() + p * nv, nv);
      if (got == want[p]) continue;
      differ++;
      EXPECT_LT(gaps[p], cell.value("tie_gap", 1e-3))
          << name << ": MTP row " << p << " predicts " << got << " where llama.cpp's predicts " << want[p];
    }
    EXPECT_LE(differ, 2) << name << ": rows at near-ties differ";
  }
  EXPECT_GE(cells, 4);
  EXPECT_GE(files, 1);
}

}  // namespace
}  // namespace kestrel
