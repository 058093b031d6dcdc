// The benchmarks' clock: the median of repeated runs with std::chrono's steady clock.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace mhc::bench {

inline double median_seconds(int repeats, const std::function<void()>& fn) {
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace mhc::bench
