// libFuzzer target: any byte string given to the GGUF reader must either
// parse or throw kestrel::Error — no crash, no other exception, no unbounded
// allocation. Parsed files are also pushed through the model-config and
// tokenizer readers, which consume the same untrusted metadata.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kestrel;
  std::vector<uint8_t> bytes(data, data + size);
  try {
    const GgufFile f = GgufFile::parse(MappedFile::from_buffer(std::move(bytes), "fuzz.gguf"));
    for (const auto& [k, v] : f.metadata()) (void)v.to_display();
    try {
      (void)read_model_config(f);
    } catch (const Error&) {
    }
    try {
      const auto tok = Tokenizer::from_gguf(f);
      const auto ids = tok->encode("Hello world <s> 123 \xC3\xA9\xFF", true, true);
      (void)tok->decode(ids, true);
    } catch (const Error&) {
    }
  } catch (const Error&) {
  }
  return 0;
}
