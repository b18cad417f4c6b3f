#include "model/pipeline_stage.h"

#include <algorithm>
#include <vector>

namespace kestrel {

void run_pipeline_stage(const TensorShard& shard, float* x, int64_t n, int64_t dim, int64_t micro_batches,
                        const std::function<void(int64_t r0, int64_t rows)>& embed,
                        const std::function<void(int64_t r0, int64_t rows)>& layers) {
  Communicator& w = *shard.world;
  const int last = shard.stages - 1, stage = shard.stage;
  auto rank_of = [&](int s) { return shard.rank_in_stage(s); };
  const int64_t micro = std::max<int64_t>(1, std::min<int64_t>(n, micro_batches));
  auto first_row = [&](int64_t m) { return m * n / micro; };
  std::vector<Communicator::Request> in, out;
  for (int64_t m = 0; m < micro; m++) {
    const int64_t r0 = first_row(m), rows = first_row(m + 1) - r0;
    if (stage > 0) in.push_back(w.start_recv(x + r0 * dim, rows * dim, rank_of(stage - 1)));
  }
  for (int64_t m = 0; m < micro; m++) {
    const int64_t r0 = first_row(m), rows = first_row(m + 1) - r0;
    if (stage == 0)
      embed(r0, rows);
    else
      w.wait(in[static_cast<size_t>(m)]);
    layers(r0, rows);
    out.push_back(w.start_send(x + r0 * dim, rows * dim, rank_of(stage == last ? 0 : stage + 1)));
  }
  for (auto r : out) w.wait(r);  // (stage 0: before its rows are overwritten by what comes back)
  if (stage != 0) return;
  in.clear();
  for (int64_t m = 0; m < micro; m++) {  // the rows come back from the last stage
    const int64_t r0 = first_row(m), rows = first_row(m + 1) - r0;
    in.push_back(w.start_recv(x + r0 * dim, rows * dim, rank_of(last)));
  }
  for (auto r : in) w.wait(r);
}

}  // namespace kestrel
