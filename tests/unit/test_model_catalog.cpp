// The models a multi-model server finds (serving/models/model_catalog.h): llama-server's folder layout and its
// preset files, read strictly.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "serving/models/model_catalog.h"
#include "test_support.h"

namespace kestrel {
namespace {

void touch(const std::string& path) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  test::write_bytes(path, "GGUF");
}

TEST(ModelCatalog, FolderLayoutNamesModelsAsLlamaServerDoes) {
  test::TempDir dir;
  const std::string d = dir.file("models");
  touch(d + "/llama-3.2-1b-Q4_K_M.gguf");
  touch(d + "/mmproj-stray.gguf");                        // a projector alone is no model
  touch(d + "/Kimi-00001-of-00002.gguf");                 // a split model at the top: named without its suffix
  touch(d + "/Kimi-00002-of-00002.gguf");                 // its later shard is no model
  touch(d + "/gemma-3-4b/gemma-3-4b-it-Q8_0.gguf");       // a folder: the model and its projector
  touch(d + "/gemma-3-4b/mmproj-F16.gguf");
  touch(d + "/qwen/mtp-qwen.gguf");                       // a draft beside its model
  touch(d + "/qwen/qwen-00001-of-00002.gguf");
  touch(d + "/qwen/qwen-00002-of-00002.gguf");
  touch(d + "/notes/readme.txt");                         // a folder without GGUF files: skipped
  test::write_bytes(d + "/.hidden.gguf", "");
  const auto specs = scan_models_dir(d);
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_EQ(specs[0].name, "Kimi");
  EXPECT_EQ(specs[0].path, d + "/Kimi-00001-of-00002.gguf");
  EXPECT_EQ(specs[1].name, "gemma-3-4b");
  EXPECT_EQ(specs[1].path, d + "/gemma-3-4b/gemma-3-4b-it-Q8_0.gguf");
  EXPECT_EQ(specs[1].mmproj, d + "/gemma-3-4b/mmproj-F16.gguf");
  EXPECT_EQ(specs[2].name, "llama-3.2-1b-Q4_K_M");
  EXPECT_EQ(specs[2].mmproj, "");
  EXPECT_EQ(specs[3].name, "qwen");
  EXPECT_EQ(specs[3].path, d + "/qwen/qwen-00001-of-00002.gguf");
  for (const auto& s : specs) EXPECT_EQ(s.source, "models_dir");
}

TEST(ModelCatalog, AmbiguousFoldersAndMissingFoldersAreErrors) {
  test::TempDir dir;
  EXPECT_THROW(scan_models_dir(dir.file("nothing")), Error);
  touch(dir.file("m/two/a.gguf"));
  touch(dir.file("m/two/b.gguf"));
  try {
    scan_models_dir(dir.file("m"));
    FAIL() << "two models in one folder";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds 2 models"), std::string::npos) << e.what();
  }
  touch(dir.file("p/x/x.gguf"));
  touch(dir.file("p/x/mmproj-a.gguf"));
  touch(dir.file("p/x/mmproj-b.gguf"));
  EXPECT_THROW(scan_models_dir(dir.file("p")), Error);
}

TEST(ModelCatalog, PresetFileSectionsKeysAndErrors) {
  test::TempDir dir;
  const std::string p = dir.file("p.ini");
  test::write_bytes(p, "; comment\nversion = 1\n\n[*]\nc = 8192\n\n[my-model]\nmodel = /m/a.gguf\n# another\n"
                       "chat-template = a \\\nb\npin = true\n[other]\nmodel=/m/b.gguf\n");
  const PresetFile f = read_preset_file(p);
  ASSERT_EQ(f.global.size(), 1u);
  EXPECT_EQ(f.global[0], (std::pair<std::string, std::string>{"c", "8192"}));
  ASSERT_EQ(f.models.size(), 2u);
  EXPECT_EQ(f.models[0].name, "my-model");
  EXPECT_EQ(f.models[0].line, 7);
  ASSERT_EQ(f.models[0].keys.size(), 3u);
  EXPECT_EQ(f.models[0].keys[1].second, "a \nb");  // a value continued on the next line
  EXPECT_EQ(f.models[1].keys[0], (std::pair<std::string, std::string>{"model", "/m/b.gguf"}));
  const auto fails = [&](const std::string& text, const std::string& why) {
    test::write_bytes(p, text);
    try {
      read_preset_file(p);
      ADD_FAILURE() << "no error for: " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  fails("c = 1\n", ":1: key 'c' outside a section");
  fails("version = 3\n", "version 3 is not one this server reads");
  fails("[a]\n[a]\n", ":2: section [a] again");
  fails("[a]\nx = 1\nx = 2\n", "key 'x' twice");
  fails("[a]\njust words\n", "'just words' is not key = value");
  fails("[a\n", "a section header is [name]");
  EXPECT_THROW(read_preset_file(dir.file("none.ini")), Error);
  EXPECT_TRUE(preset_bool("Yes", "k"));
  EXPECT_FALSE(preset_bool("off", "k"));
  EXPECT_THROW(preset_bool("2", "k"), Error);
}

}  // namespace
}  // namespace kestrel
