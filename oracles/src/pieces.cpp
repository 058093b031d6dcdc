#include "mhc/oracles/pieces.hpp"

#include <cmath>

#include "mhc/oracles/random.hpp"

namespace mhc::oracles {

PiecesCase generate_pieces(const ref::Config& cfg, std::size_t tokens, std::uint64_t seed) {
  Rng rng(seed);
  PiecesCase c;
  c.cfg = cfg;
  c.tokens = tokens;
  c.seed = seed;
  const std::size_t n = std::size_t(cfg.n), d = std::size_t(cfg.d), M = std::size_t(cfg.mix());
  const std::size_t nd = n * d;
  auto f32 = [](double v) { return static_cast<float>(v); };

  c.x.resize(tokens * nd);
  for (std::size_t t = 0; t < tokens; ++t) {
    float* x = c.x.data() + t * nd;
    // A zero token: r = 1/sqrt(norm_eps). With norm_eps = 0 that is 0 * inf, undefined in exact
    // arithmetic too, so none is generated then.
    if (tokens > 2 && cfg.norm_eps > 0 && rng.uniform() < 0.05) continue;
    const double scale = rng.log_uniform(1e-3, 1e3);
    for (std::size_t i = 0; i < nd; ++i) x[i] = f32(scale * rng.normal());
    const int massive = rng.integer(0, 3);  // LLM residual streams carry a few huge channels
    for (int m = 0; m < massive; ++m) x[std::size_t(rng.next() % nd)] = f32(scale * rng.uniform(50, 500));
  }
  c.f.resize(tokens * d);
  for (std::size_t t = 0; t < tokens; ++t) {
    const double scale = rng.log_uniform(1e-2, 1e2);
    for (std::size_t i = 0; i < d; ++i) c.f[t * d + i] = f32(scale * rng.normal());
  }
  c.pre_mix.resize(tokens * n);
  for (auto& p : c.pre_mix) p = f32(rng.uniform(0, 1) + cfg.hc_eps);

  // The post op's own inputs: writing weights in (0, 2), a positive comb with rows near 1.
  c.post.resize(tokens * n);
  for (auto& p : c.post) p = f32(rng.uniform(0, 2));
  c.comb.resize(tokens * n * n);
  for (auto& v : c.comb) v = f32(rng.uniform(0, 2.0 / double(n)));

  // Weights give mixes of standard deviation 1e-3..3 (m_a ~ N(0, (std * sqrt(nd))^2) per unit-RMS token).
  const double fn_std = rng.log_uniform(1e-3, 3) / std::sqrt(double(nd));
  c.hc_fn.resize(M * nd);
  for (auto& w : c.hc_fn) w = f32(fn_std * rng.normal());
  c.hc_scale = {f32(rng.uniform(0.1, 4)), f32(rng.uniform(0.1, 4)), f32(rng.uniform(0.1, 4))};
  c.hc_base.resize(M);
  for (auto& b : c.hc_base) b = f32(rng.normal());
  c.norm_weight.resize(d);
  for (auto& g : c.norm_weight) g = f32(rng.uniform(0.5, 1.5));
  return c;
}

}  // namespace mhc::oracles
