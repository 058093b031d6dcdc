#include "mhc/oracles/stochastic.hpp"

#include <limits>

namespace mhc::sr {
namespace {
thread_local std::uint64_t state = 0x853C49E6748FEA9Bull;
std::uint64_t next() {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
}  // namespace

void seed(std::uint64_t s) {
  state = s * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
}

float round(double x) {
  const float f = static_cast<float>(x);
  if (!std::isfinite(f) || double(f) == x) return f;
  const float other = double(f) < x ? std::nextafter(f, std::numeric_limits<float>::infinity())
                                    : std::nextafter(f, -std::numeric_limits<float>::infinity());
  // P(other) = |x - f| / |other - f|: unbiased.
  const double p = std::fabs(x - double(f)) / std::fabs(double(other) - double(f));
  const double r = double(next() >> 11) * 0x1.0p-53;
  return r < p ? other : f;
}

}  // namespace mhc::sr
