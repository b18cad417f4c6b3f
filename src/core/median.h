#pragma once
// The median of a sample (the mean of the middle two for an even count; 0
// for none): benchmarks on noisy shared machines quote medians.
#include <algorithm>
#include <vector>

namespace kestrel {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace kestrel
