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
//     three seeds and prompts, Q8_0 and Q4_K_M.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli_process.h"
#include "test_support.h"

namespace kestrel {
namespace {

using json = nlohmann::json;

std::string sha256_of(const std::string& path) {
  FILE* p = popen(("sha256sum '" + path + "'").c_str(), "r");
  if (!p) return "";
  char buf[65] = {};
  const size_t n = fread(buf, 1, 64, p);
  pclose(p);
  return std::string(buf, n);
}

std::vector<int> ids_of(const std::string& out) {
  std::vector<int> ids;
  const size_t at = out.rfind("ids:");
  if (at == std::string::npos) return ids;
  std::istringstream in(out.substr(at + 4));
  for (int id; in >> id;) ids.push_back(id);
  return ids;
}

TEST(SynthCells, KestrelGivesLlamaCppsIdsOnTheRecordedFiles) {
  const json doc = json::parse(test::read_text(std::string(KESTREL_SOURCE_DIR) + "/tests/reference/synth_cells.json"));
  ASSERT_GE(doc["cells"].size(), 2u);
  test::TempDir dir;
  for (const auto& cell : doc["cells"]) {
    const std::string name = cell["name"], path = dir.file(name + ".gguf");
    std::vector<std::string> synth = {"synth"};
    for (const auto& a : cell["synth"]) synth.push_back(a);
    synth.insert(synth.end(), {"-o", path});
    const auto made = test::run_kestrel(synth);
    ASSERT_EQ(made.exit_code, 0) << name << ": " << made.err;
    std::string model = path;
    if (cell.contains("quantize")) {
      model = dir.file(name + ".q.gguf");
      std::vector<std::string> q = {"quantize", path, model};
      for (const auto& a : cell["quantize"]) q.push_back(a);
      const auto quantized = test::run_kestrel(q);
      ASSERT_EQ(quantized.exit_code, 0) << name << ": " << quantized.err;
    }
    ASSERT_EQ(sha256_of(model), cell["sha256"].get<std::string>())
        << name << ": synth (and quantize) no longer write the recorded file";
    std::string prompt;
    for (const auto& id : cell["prompt"]) prompt += (prompt.empty() ? "" : " ") + std::to_string(id.get<int>());
    const auto want = cell["ids"].get<std::vector<int>>();
    for (const char* mla : {"absorbed", "decompressed"}) {
      const auto r = test::run_kestrel({"run", "-m", model, "--prompt-ids", prompt, "-n", std::to_string(want.size()),
                                        "--temp", "0", "--print-ids", "--mla", mla});
      ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
      const auto got = ids_of(r.out + r.err);
      ASSERT_EQ(got.size(), want.size()) << name << " (--mla " << mla << "): " << r.out << r.err;
      const double tie_gap = cell.value("tie_gap", 1e-3);
      const auto gaps = cell["gaps"].get<std::vector<double>>();
      size_t k = 0;
      while (k < want.size() && got[k] == want[k]) k++;
      if (k < want.size())
        EXPECT_LT(gaps[k], tie_gap) << name << " (--mla " << mla << "): id " << got[k] << " at step " << k
                                    << " where llama.cpp chose " << want[k] << " by a gap of " << gaps[k];
    }
  }
}

}  // namespace
}  // namespace kestrel
