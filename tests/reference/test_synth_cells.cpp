// Architectures no public file of which is at hand, on files `kestrel synth` writes: each cell of
// tests/reference/synth_cells.json (recorded by tests/compat/synth_cells.py record) is regenerated, its
// sha256 checked (the recording is of these very bytes), and kestrel's greedy ids compared with llama.cpp's,
// exactly (F32), in both MLA modes.
//   mistral4-tiny.f32: Mistral Small 4's layout with its query temperature by position (without the
//     temperature the ids leave llama.cpp's at step 8);
//   deepseek2-lite-form-tiny.f32: the V2-Lite form (no query bottleneck) with attention.q_lora_rank 0,
//     which llama.cpp's loader requires at that layer count.
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
    ASSERT_EQ(sha256_of(path), cell["sha256"].get<std::string>()) << name << ": synth no longer writes the recorded file";
    std::string prompt;
    for (const auto& id : cell["prompt"]) prompt += (prompt.empty() ? "" : " ") + std::to_string(id.get<int>());
    const auto want = cell["ids"].get<std::vector<int>>();
    for (const char* mla : {"absorbed", "decompressed"}) {
      const auto r = test::run_kestrel({"run", "-m", path, "--prompt-ids", prompt, "-n", std::to_string(want.size()),
                                        "--temp", "0", "--print-ids", "--mla", mla});
      ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
      EXPECT_EQ(ids_of(r.out + r.err), want) << name << " (--mla " << mla << ")";
    }
  }
}

}  // namespace
}  // namespace kestrel
