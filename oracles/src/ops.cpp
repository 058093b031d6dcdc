#include "mhc/oracles/ops.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "mhc/oracles/generate.hpp"
#include "mhc/oracles/pieces.hpp"
#include "mhc/oracles/random.hpp"
#include "mhc/reference/mhc.hpp"

namespace mhc::oracles {

double fp32_value(double x) {
  volatile float f = float(x);
  return double(f);
}

OpCase case_header(Op op, const ref::Config& cfg, std::size_t tokens, std::uint64_t seed,
                   Precision precision) {
  OpCase c;
  c.op = op;
  c.cfg = cfg;
  c.cfg.hc_eps = fp32_value(cfg.hc_eps);
  c.cfg.norm_eps = fp32_value(cfg.norm_eps);
  c.tokens = tokens;
  c.seed = seed;
  c.precision = precision;
  return c;
}

OpCase generate_case(Op op, const ref::Config& cfg_in, std::size_t T, std::uint64_t seed,
                     Precision precision) {
  if (op == Op::block || op == Op::stack)
    return generate_block_case(op, cfg_in, ref::BlockConfig{}, 1, T, seed, precision);
  OpCase c = case_header(op, cfg_in, T, seed, precision);
  Rng rng(seed);
  const std::size_t n = std::size_t(c.cfg.n), d = std::size_t(c.cfg.d), M = std::size_t(c.cfg.mix());
  const bool bf16 = precision == Precision::bf16;
  auto stream = [&](std::vector<float> v) {
    if (bf16) gen::to_bf16(v);
    return v;
  };
  auto put = [](std::map<std::string, Tensor>& m, const std::string& name,
                std::vector<std::size_t> shape, std::vector<float> data) {
    m[name] = Tensor{std::move(shape), std::move(data)};
  };
  const bool zero_ok = c.cfg.norm_eps > 0;  // a zero token with norm_eps = 0 is 0 * inf
  switch (op) {
    case Op::split_sinkhorn:
      put(c.inputs, "mixes", {T, M}, gen::mixes(rng, c.cfg, T));
      break;
    case Op::mixes:
      put(c.inputs, "x", {T, n, d}, stream(gen::activations(rng, T, n * d, zero_ok)));
      put(c.params, "hc_fn", {M, n * d}, gen::hc_fn(rng, c.cfg));
      break;
    case Op::pre:
      put(c.inputs, "x", {T, n, d}, stream(gen::activations(rng, T, n * d, true)));
      put(c.inputs, "pre_mix", {T, n}, gen::pre_weights(rng, c.cfg, T));
      break;
    case Op::post:
      put(c.inputs, "f", {T, d}, stream(gen::activations(rng, T, d, true)));
      put(c.inputs, "residual", {T, n, d}, stream(gen::activations(rng, T, n * d, true)));
      put(c.inputs, "post", {T, n}, gen::post_weights(rng, c.cfg, T));
      put(c.inputs, "comb", {T, n, n}, gen::combs(rng, c.cfg, T));
      break;
    case Op::rmsnorm:
      put(c.inputs, "x", {T, d}, stream(gen::activations(rng, T, d, zero_ok)));
      put(c.params, "weight", {d}, gen::norm_weight(rng, d));
      break;
    case Op::block:
    case Op::stack:
      break;
    case Op::boundary:
      put(c.inputs, "f", {T, d}, stream(gen::activations(rng, T, d, false)));
      put(c.inputs, "residual", {T, n, d}, stream(gen::activations(rng, T, n * d, false)));
      put(c.inputs, "post", {T, n}, gen::post_weights(rng, c.cfg, T));
      put(c.inputs, "comb", {T, n, n}, gen::combs(rng, c.cfg, T));
      put(c.inputs, "pre_mix", {T, n}, gen::pre_weights(rng, c.cfg, T));
      put(c.params, "hc_fn", {M, n * d}, gen::hc_fn(rng, c.cfg));
      break;
  }
  if (op == Op::split_sinkhorn || op == Op::mixes || op == Op::boundary) {
    put(c.params, "hc_scale", {3}, gen::hc_scale(rng));
    put(c.params, "hc_base", {M}, gen::hc_base(rng, c.cfg));
  }
  // Drawn last, so that the other cases keep their tensors.
  if ((op == Op::mixes || op == Op::boundary || op == Op::rmsnorm) && rng.uniform() < 0.125) {
    if (c.params.count("hc_fn")) {
      auto& w = c.params["hc_fn"].data;
      std::fill(w.begin(), w.end(), float(rng.normal() * 0.1 / std::sqrt(double(n * d))));
    }
    for (const char* name : {"x", "f", "residual"}) {
      if (!c.inputs.count(name)) continue;
      Tensor& x = c.inputs[name];
      const std::size_t row = x.shape.back();
      for (std::size_t r = 0; r < x.data.size() / row; ++r)
        std::fill_n(x.data.begin() + std::ptrdiff_t(r * row), row, x.data[r * row]);
    }
  }
  return c;
}

OpCase campaign_case(std::uint64_t seed, std::uint64_t i) {
  Rng rng(seed * 0x100000001B3ull + i);
  static const int ns[] = {1, 2, 3, 4, 8};
  static const Op others[] = {Op::mixes, Op::pre, Op::post, Op::rmsnorm};
  const double pick = rng.uniform();
  const Op op = pick < 0.45   ? Op::boundary
                : pick < 0.7  ? Op::split_sinkhorn
                : pick < 0.85 ? others[rng.integer(0, 3)]
                              : Op::block;
  ref::Config cfg;
  cfg.n = ns[rng.integer(0, 4)];
  cfg.d = rng.integer(1, 48);
  cfg.iters = rng.integer(1, 30);
  cfg.hc_eps = rng.log_uniform(1e-6, 1e-1);
  cfg.norm_eps = rng.log_uniform(1e-20, 1e-3);
  if (op == Op::block) {
    ref::BlockConfig b;
    b.heads = rng.integer(1, 2);
    b.head_dim = rng.integer(1, 8);
    b.experts = rng.integer(2, 4);
    b.top_k = rng.integer(1, b.experts - 1);
    b.inter = rng.integer(2, 16);
    b.route_scale = rng.uniform(0.5, 2.5);
    cfg.d = rng.integer(2, 32);
    const std::size_t B = std::size_t(rng.integer(1, 2)), T = std::size_t(rng.integer(2, 4));
    return generate_block_case(op, cfg, b, B, T, rng.next(), Precision::fp32);
  }
  return generate_case(op, cfg, 2, rng.next(), Precision::fp32);
}

bnd::Model precision_model(Precision p) { return bnd::model_by_name(precision_name(p)); }

Trace<bnd::Bounded> oracle_trace(const OpCase& c, unsigned threads) {
  const bnd::Model model = precision_model(c.precision);
  return evaluate_op<bnd::Bounded>(c, threads,
                                   [&model](std::size_t) { return bnd::ModelScope(model); });
}

}  // namespace mhc::oracles
