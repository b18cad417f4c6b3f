#include "parallel/expert_combine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace kestrel {

ExpertSum parse_expert_sum(const std::string& text) {
  if (text == "auto") return ExpertSum::Auto;
  if (text == "all-reduce") return ExpertSum::AllReduce;
  if (text == "all-to-all") return ExpertSum::AllToAll;
  throw Error(fmt::format("--parallel-expert-sum '{}': expected auto, all-reduce or all-to-all", text));
}

void pack_partials(const float* x, int64_t n, int64_t dim, const uint8_t* touched, int self, int ranks,
                   std::vector<float>& send, std::vector<int64_t>& to_each) {
  send.clear();
  to_each.assign(static_cast<size_t>(ranks), 0);
  for (int o = 0; o < ranks; o++) {
    if (o == self) continue;
    const size_t before = send.size();
    for (int64_t t = owned_first(n, ranks, o); t < owned_first(n, ranks, o + 1); t++) {
      if (!touched[t]) continue;
      const int32_t index = static_cast<int32_t>(t);
      float tag;
      std::memcpy(&tag, &index, sizeof tag);
      send.push_back(tag);
      send.insert(send.end(), x + t * dim, x + (t + 1) * dim);
    }
    to_each[static_cast<size_t>(o)] = static_cast<int64_t>(send.size() - before);
  }
}

void sum_owned(float* x, int64_t n, int64_t dim, int self, int ranks, const float* recv, const int64_t* from_each,
               std::vector<float>& scratch) {
  const int64_t first = owned_first(n, ranks, self), count = owned_first(n, ranks, self + 1) - first;
  scratch.assign(static_cast<size_t>(count * dim), 0.0f);
  const float* from = recv;
  for (int r = 0; r < ranks; r++) {
    if (r == self) {
      for (int64_t i = 0; i < count * dim; i++) scratch[static_cast<size_t>(i)] += x[first * dim + i];
      continue;
    }
    const int64_t floats = from_each[r];
    if (floats % (dim + 1) != 0)
      throw Error(fmt::format("expert combine: rank {} sent {} floats, not whole rows of {}", r, floats, dim + 1));
    for (const float* row = from; row < from + floats; row += dim + 1) {
      int32_t t;
      std::memcpy(&t, row, sizeof t);
      if (t < first || t >= first + count)
        throw Error(fmt::format("expert combine: rank {} sent row {}, outside rank {}'s rows [{}, {})", r, t, self,
                                first, first + count));
      float* acc = scratch.data() + (t - first) * dim;
      for (int64_t d = 0; d < dim; d++) acc[d] += row[1 + d];
    }
    from += floats;
  }
  std::copy(scratch.begin(), scratch.end(), x + first * dim);
}

ExpertCombine::ExpertCombine(Communicator& world, int64_t dim, int64_t max_rows)
    : comm_(world.split(0, world.rank())), dim_(dim) {
  const int ranks = world.size();
  const int64_t most_owned = (max_rows + ranks - 1) / ranks;
  send_.reserve(static_cast<size_t>(max_rows * (dim + 1)));
  recv_.resize(static_cast<size_t>(most_owned * (ranks - 1) * (dim + 1)));
  scratch_.reserve(static_cast<size_t>(most_owned * dim));
  from_each_.resize(static_cast<size_t>(ranks));
  gather_counts_.resize(static_cast<size_t>(ranks));
}

void ExpertCombine::start(float* x, int64_t n, const uint8_t* touched) {
  if (state_ != State::Idle) throw Error("expert combine: started again before the last one finished");
  const int self = comm_->rank(), ranks = comm_->size();
  pack_partials(x, n, dim_, touched, self, ranks, send_, to_each_);
  req_ = comm_->start_all_to_all(send_.data(), to_each_.data(), recv_.data(), static_cast<int64_t>(recv_.size()),
                                 from_each_.data());
  x_ = x;
  n_ = n;
  state_ = State::Rows;
}

void ExpertCombine::sum_and_gather() {
  comm_->wait(req_);
  const int self = comm_->rank(), ranks = comm_->size();
  sum_owned(x_, n_, dim_, self, ranks, recv_.data(), from_each_.data(), scratch_);
  for (int o = 0; o < ranks; o++)
    gather_counts_[static_cast<size_t>(o)] = (owned_first(n_, ranks, o + 1) - owned_first(n_, ranks, o)) * dim_;
  req_ = comm_->start_all_gather(x_, gather_counts_.data());
  state_ = State::Gather;
}

void ExpertCombine::progress() {
  if (state_ == State::Idle) return;
  if (state_ == State::Rows && comm_->test(req_)) sum_and_gather();
  if (state_ == State::Gather) comm_->progress();
}

void ExpertCombine::finish() {
  if (state_ == State::Rows) sum_and_gather();
  if (state_ == State::Gather) comm_->wait(req_);
  state_ = State::Idle;
  x_ = nullptr;
}

}  // namespace kestrel
