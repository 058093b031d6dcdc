#include "logit_families.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

namespace mhc::runner {
namespace {
// A cheap bell-shaped variate (triangular: two uniforms, mean 0, variance 1): the search needs
// spread, not an exact Gaussian, and the logarithms and cosines of Box-Muller cost more than the
// Sinkhorn itself.
double bell(oracles::Rng& rng) {
  return (rng.uniform() + rng.uniform() - 1.0) * 2.449489742783178;
}
}  // namespace

const std::vector<Family>& all_families() {
  static const std::vector<Family> all{Family::bell, Family::near_permutation, Family::two_blocks,
                                       Family::rank_one};
  return all;
}

std::string family_name(Family f) {
  switch (f) {
    case Family::bell:
      return "bell";
    case Family::near_permutation:
      return "near-permutation";
    case Family::two_blocks:
      return "two-blocks";
    case Family::rank_one:
      return "rank-one";
  }
  return "?";
}

void draw_logits(oracles::Rng& rng, int n, std::vector<double>& L, const Structure* fixed) {
  const double pick = rng.uniform();
  const double drawn_scale = std::pow(10.0, rng.uniform(-2, 2));
  const Family family = fixed        ? fixed->family
                        : pick < 0.3 ? Family::near_permutation
                        : pick < 0.5 ? Family::two_blocks
                        : pick < 0.6 ? Family::rank_one
                                     : Family::bell;
  const double scale = !fixed                          ? drawn_scale
                       : fixed->family == Family::bell ? fixed->magnitude
                                                       : 1.0;
  // The noise: one 64-bit draw gives two triangular variates from four 16-bit uniforms.
  for (std::size_t i = 0; i < L.size(); i += 2) {
    const std::uint64_t bits = rng.next();
    auto u = [&](int k) { return double((bits >> (16 * k)) & 0xFFFFu) * (1.0 / 65536.0); };
    L[i] = scale * (u(0) + u(1) - 1.0) * 2.449489742783178;
    if (i + 1 < L.size()) L[i + 1] = scale * (u(2) + u(3) - 1.0) * 2.449489742783178;
  }
  switch (family) {
    case Family::near_permutation: {
      const double drawn = rng.uniform(5, 80);
      const double big = fixed ? fixed->magnitude : drawn;
      int perm[64];
      for (int j = 0; j < n; ++j) perm[j] = j;
      for (int j = n - 1; j > 0; --j) std::swap(perm[j], perm[rng.integer(0, j)]);
      for (int j = 0; j < n; ++j) L[std::size_t(j * n + perm[j])] += big;
      break;
    }
    case Family::two_blocks: {
      const int split = rng.integer(1, std::max(1, n - 1));
      const double drawn = rng.uniform(5, 60);
      const double gap = fixed ? fixed->magnitude : drawn;
      for (int j = 0; j < n; ++j)
        for (int k = 0; k < n; ++k)
          if ((j < split) != (k < split)) L[std::size_t(j * n + k)] -= gap;
      break;
    }
    case Family::rank_one: {
      const double s = fixed ? fixed->magnitude : 20.0;
      std::vector<double> a(static_cast<std::size_t>(n)), b(static_cast<std::size_t>(n));
      for (auto& v : a) v = bell(rng) * s;
      for (auto& v : b) v = bell(rng) * s;
      for (int j = 0; j < n; ++j)
        for (int k = 0; k < n; ++k)
          L[std::size_t(j * n + k)] =
              a[std::size_t(j)] + b[std::size_t(k)] + 0.1 * L[std::size_t(j * n + k)];
      break;
    }
    case Family::bell:
      break;
  }
}

}  // namespace mhc::runner
