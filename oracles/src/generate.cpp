#include "mhc/oracles/generate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "mhc/reference/mhc.hpp"

namespace mhc::oracles::gen {
namespace {
float f32(double v) {
  return static_cast<float>(v);
}
}  // namespace

std::vector<float> activations(Rng& rng, std::size_t T, std::size_t m, bool zero_tokens) {
  std::vector<float> x(T * m, 0.0f);
  for (std::size_t t = 0; t < T; ++t) {
    float* xt = x.data() + t * m;
    if (zero_tokens && T > 2 && rng.uniform() < 0.05) continue;
    const double scale = rng.log_uniform(1e-3, 1e3);
    for (std::size_t i = 0; i < m; ++i) xt[i] = f32(scale * rng.normal());
    const int massive = rng.integer(0, 3);
    for (int k = 0; k < massive; ++k)
      xt[std::size_t(rng.next() % m)] = f32(scale * rng.uniform(50, 500));
  }
  return x;
}

std::vector<float> hc_fn(Rng& rng, const ref::Config& c) {
  const std::size_t nd = c.stream_size();
  const double std_ = rng.log_uniform(1e-3, 3) / std::sqrt(double(nd));
  std::vector<float> w(std::size_t(c.mix()) * nd);
  for (auto& v : w) v = f32(std_ * rng.normal());
  return w;
}

std::vector<float> hc_scale(Rng& rng) {
  return {f32(rng.uniform(0.1, 4)), f32(rng.uniform(0.1, 4)), f32(rng.uniform(0.1, 4))};
}

std::vector<float> hc_base(Rng& rng, const ref::Config& c) {
  std::vector<float> b(std::size_t(c.mix()));
  for (auto& v : b) v = f32(rng.normal());
  return b;
}

std::vector<float> pre_weights(Rng& rng, const ref::Config& c, std::size_t T) {
  std::vector<float> p(T * std::size_t(c.n));
  for (auto& v : p) v = f32(1 / (1 + std::exp(-2 * rng.normal())) + c.hc_eps);
  return p;
}

std::vector<float> post_weights(Rng& rng, const ref::Config& c, std::size_t T) {
  std::vector<float> p(T * std::size_t(c.n));
  for (auto& v : p) v = f32(2 / (1 + std::exp(-2 * rng.normal())));
  return p;
}

std::vector<float> combs(Rng& rng, const ref::Config& c, std::size_t T) {
  const std::size_t nn = std::size_t(c.n) * std::size_t(c.n);
  std::vector<float> out(T * nn);
  std::vector<double> L(nn), C(nn);
  for (std::size_t t = 0; t < T; ++t) {
    const double sharp = rng.log_uniform(0.1, 10);
    for (auto& l : L) l = sharp * rng.normal();
    ref::sinkhorn(c, L.data(), C.data());
    for (std::size_t i = 0; i < nn; ++i) out[t * nn + i] = f32(C[i]);
  }
  return out;
}

std::vector<float> mixes(Rng& rng, const ref::Config& c, std::size_t T) {
  std::vector<float> m(T * std::size_t(c.mix()));
  for (std::size_t t = 0; t < T; ++t) {
    const double s = rng.log_uniform(0.1, 30);
    for (std::size_t a = 0; a < std::size_t(c.mix()); ++a)
      m[t * std::size_t(c.mix()) + a] = f32(s * rng.normal());
  }
  return m;
}

std::vector<float> norm_weight(Rng& rng, std::size_t d) {
  std::vector<float> g(d);
  for (auto& v : g) v = f32(rng.uniform(0.5, 1.5));
  return g;
}

void to_format(bnd::Format f, std::vector<float>& v) {
  switch (f) {
    case bnd::Format::bf16:
      for (auto& x : v) x = round_bf16(x);
      break;
    case bnd::Format::fp16:
      // Within +-2^12, so that what the pieces store from them (sums of four streams weighted
      // by up to 2) stays inside fp16's range.
      for (auto& x : v) x = round_fp16(std::clamp(x, -4096.0f, 4096.0f));
      break;
    case bnd::Format::tf32:
    case bnd::Format::fp32:
      break;
  }
}

}  // namespace mhc::oracles::gen
