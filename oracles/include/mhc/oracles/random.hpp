// A small, fully specified random source: the same seed gives the same cases on every platform
// and standard library (std::normal_distribution is implementation-defined, so it is not used).
#pragma once

#include <cmath>
#include <cstdint>

namespace mhc::oracles {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed ^ 0x9E3779B97F4A7C15ull) { next(); }
  // splitmix64 (Steele, Lea & Flood 2014)
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  int integer(int lo, int hi) { return lo + int(next() % std::uint64_t(hi - lo + 1)); }  // [lo, hi]
  double log_uniform(double lo, double hi) { return std::exp(uniform(std::log(lo), std::log(hi))); }
  double normal() {  // Box-Muller, one value per call
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::uint64_t s_;
};

}  // namespace mhc::oracles
