#pragma once
// What a tensor-parallel leader tells the other ranks before each forward
// step: the batch, where its rows live in the KV cache (slots and the
// block-table entries they read) and the copy-on-write copies its cache made
// since the last step. The other ranks hold the same blocks (their own heads'
// rows of them) and never run the ledger themselves.
#include <cstdint>
#include <vector>

#include "kv/block_manager.h"
#include "model/batch.h"

namespace kestrel {

enum class StepOp : int64_t { Forward = 1, Stop = 2 };

// Fixed size, sent first: the followers wait for it without a timeout.
struct StepHeader {
  int64_t op = 0;
  int64_t payload_bytes = 0;
};

// The batch and its placement (n_groups layer groups, block_size tokens per
// block) plus pending copies, as bytes.
std::vector<uint8_t> encode_step(const Batch& b, const BatchPlacement& place, int n_groups, int block_size,
                                 const std::vector<BlockCopy>& copies);

struct DecodedStep {
  Batch batch;
  BatchPlacement place{0};
  std::vector<BlockCopy> copies;
  std::vector<int32_t> table_entries;  // what place.tables point into
};
// Error on a malformed message (sizes that do not add up).
void decode_step(const std::vector<uint8_t>& bytes, DecodedStep& out);

}  // namespace kestrel
