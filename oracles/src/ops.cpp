#include "mhc/oracles/ops.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "mhc/oracles/backward.hpp"
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
  need_backward_declaration(op, precision);
  return c;
}

namespace {
OpCase draw_case(Op op, const ref::Config& cfg_in, std::size_t T, std::uint64_t seed,
                 Precision precision);
}

OpCase generate_case(Op op, const ref::Config& cfg_in, std::size_t T, std::uint64_t seed,
                     Precision precision) {
  if (op_spec(op).whole)
    return generate_block_case(op, cfg_in, ref::BlockConfig{}, 1, T, seed, precision);
  OpCase c = draw_case(op, cfg_in, T, seed, std::move(precision));
  store_declared(c);
  return c;
}

namespace {
// The case's tensors as generated: streams in the format they are stored in.
OpCase draw_case(Op op, const ref::Config& cfg_in, std::size_t T, std::uint64_t seed,
                 Precision precision) {
  OpCase c = case_header(op, cfg_in, T, seed, precision);
  Rng rng(seed);
  const std::size_t n = std::size_t(c.cfg.n), d = std::size_t(c.cfg.d);
  auto stream = [&](std::vector<float> v) {
    gen::to_format(precision.decl.streams, v);
    return v;
  };
  auto put = [](std::map<std::string, Tensor>& m, const std::string& name,
                std::vector<std::size_t> shape, std::vector<float> data) {
    m[name] = Tensor{std::move(shape), std::move(data)};
  };
  auto draw = [&](const TensorSpec& t) -> std::vector<float> {
    const std::vector<std::size_t> dims = resolve(t.dims, c.cfg);
    std::size_t row = 1;
    for (auto x : dims) row *= x;
    switch (t.draw) {
      case Draw::activations:
        return stream(gen::activations(rng, T, row, true));
      // a zero token with norm_eps = 0 is 0 * inf
      case Draw::activations_if_eps:
        return stream(gen::activations(rng, T, row, c.cfg.norm_eps > 0));
      case Draw::activations_nonzero:
        return stream(gen::activations(rng, T, row, false));
      case Draw::mixes:
        return gen::mixes(rng, c.cfg, T);
      case Draw::pre_weights:
        return gen::pre_weights(rng, c.cfg, T);
      case Draw::post_weights:
        return gen::post_weights(rng, c.cfg, T);
      case Draw::combs:
        return gen::combs(rng, c.cfg, T);
      case Draw::hc_fn:
        return gen::hc_fn(rng, c.cfg);
      case Draw::hc_scale:
        return gen::hc_scale(rng);
      case Draw::hc_base:
        return gen::hc_base(rng, c.cfg);
      case Draw::norm_weight:
        return gen::norm_weight(rng, d);
      case Draw::upstream: {
        std::vector<float> v(T * row);
        for (float& x : v) x = float(rng.uniform(-1, 1));
        return v;
      }
      case Draw::fan_in_gaussian:
      case Draw::bias:
        break;
    }
    throw std::logic_error("generate_case: no draw for " + t.name);
  };
  const OpSpec& spec = op_spec(op);
  for (const auto& t : spec.inputs) {
    std::vector<std::size_t> shape = resolve(t.dims, c.cfg);
    shape.insert(shape.begin(), T);
    put(c.inputs, t.name, shape, draw(t));
  }
  for (const auto& t : spec.params) put(c.params, t.name, resolve(t.dims, c.cfg), draw(t));
  // Drawn last, so that the other cases keep their tensors.
  // The ops with a long reduction (those that take an RMS) get uniform cases, and structured ones.
  if (!spec.reads_norm_eps) return c;
  if (rng.uniform() < 0.125) {
    for (const auto& t : spec.params)
      if (t.draw == Draw::hc_fn) {
        auto& w = c.params[t.name].data;
        std::fill(w.begin(), w.end(), float(rng.normal() * 0.1 / std::sqrt(double(n * d))));
      }
    for (const auto& t : spec.inputs) {
      if (!t.stream()) continue;
      Tensor& x = c.inputs[t.name];
      const std::size_t row = x.shape.back();
      for (std::size_t r = 0; r < x.data.size() / row; ++r)
        std::fill_n(x.data.begin() + std::ptrdiff_t(r * row), row, x.data[r * row]);
    }
    return c;
  }
  // One in 16 of the others: every token a copy of the first nonzero one (a repeated prompt
  // token). One in
  // 16: the streams scaled by 2^k toward either end of fp32's range, k in [-48, -24] (squares
  // subnormal, the RMS statistic's eps dominant) or [16, 32] (a token's sum of squares up to
  // 2^117, below the largest float): the same arithmetic, exact in its scaling.
  // fp16 streams: toward either end of fp16's range instead (values into its subnormals, or up to
  // the clamp of gen::to_format).
  const double family = rng.uniform();
  const bool fp16 = precision.decl.streams == bnd::Format::fp16;
  const int k = rng.uniform() < 0.5 ? (fp16 ? rng.integer(-20, -8) : rng.integer(-48, -24))
                                    : (fp16 ? rng.integer(4, 8) : rng.integer(16, 32));
  if (family >= 0.125) return c;
  for (const auto& t : spec.inputs) {
    if (!t.stream()) continue;
    std::vector<float>& x = c.inputs[t.name].data;
    const std::size_t per = x.size() / T;
    if (family < 0.0625) {  // the first token that is not zero, everywhere
      std::size_t from = 0;
      while (from + 1 < T && std::all_of(x.begin() + std::ptrdiff_t(from * per),
                                         x.begin() + std::ptrdiff_t((from + 1) * per),
                                         [](float v) { return v == 0; }))
        ++from;
      const std::vector<float> token(x.begin() + std::ptrdiff_t(from * per),
                                     x.begin() + std::ptrdiff_t((from + 1) * per));
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = token[i % per];
    } else {
      for (float& v : x) v = std::ldexp(v, k);
      gen::to_format(precision.decl.streams, x);
    }
  }
  return c;
}

}  // namespace

namespace {
// A campaign case of a Block op (op_spec(op).whole) at small sizes, its config drawn already.
OpCase small_block_case(Rng& rng, Op op, ref::Config cfg, const Precision& precision) {
  ref::BlockConfig b;
  b.heads = rng.integer(1, 2);
  b.head_dim = rng.integer(1, 8);
  b.experts = rng.integer(2, 4);
  b.top_k = rng.integer(1, b.experts - 1);
  b.inter = rng.integer(2, 16);
  b.route_scale = rng.uniform(0.5, 2.5);
  if (op_spec(op).forward == Op::stack) b.layers = rng.integer(1, 2);
  cfg.d = rng.integer(2, 32);
  const std::size_t B = std::size_t(rng.integer(1, 2)), T = std::size_t(rng.integer(2, 4));
  return generate_block_case(op, cfg, b, B, T, rng.next(), precision);
}
}  // namespace

OpCase campaign_case(std::uint64_t seed, std::uint64_t i, const Precision& precision) {
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
  if (op == Op::block) return small_block_case(rng, op, cfg, precision);
  return generate_case(op, cfg, 2, rng.next(), precision);
}

OpCase backward_campaign_case(std::uint64_t seed, std::uint64_t i, const Precision& precision) {
  Rng rng(seed * 0x100000001B3ull + i + 0x9E3779B97F4A7C15ull);
  static const int ns[] = {1, 2, 3, 4, 8};
  static const Op others[] = {Op::pre_backward, Op::post_backward, Op::rmsnorm_backward};
  const double pick = rng.uniform();
  // The Block's backward is judged in fp32 only: under another declaration, the boundary's.
  const bool blocks = precision == Precision::fp32();
  const Op op = pick < 0.35   ? Op::split_sinkhorn_backward
                : pick < 0.5  ? Op::boundary_backward
                : pick < 0.65 ? Op::mixes_backward
                : pick < 0.85 ? others[rng.integer(0, 2)]
                : !blocks     ? Op::boundary_backward
                : pick < 0.95 ? Op::block_backward
                              : Op::stack_backward;
  ref::Config cfg;
  cfg.n = ns[rng.integer(0, 4)];
  cfg.d = rng.integer(1, 48);
  cfg.iters = rng.integer(1, 30);
  cfg.hc_eps = rng.log_uniform(1e-6, 1e-1);
  cfg.norm_eps = rng.log_uniform(1e-20, 1e-3);
  if (op_spec(op).whole) return small_block_case(rng, op, cfg, precision);
  return generate_case(op, cfg, 2, rng.next(), precision);
}

bnd::Model precision_model(const Precision& p) {
  return bnd::model_for(p.decl, p.name);
}

Trace<bnd::Bounded> oracle_trace(const OpCase& c, unsigned threads) {
  if (op_spec(c.op).backward) return backward_trace(c, threads);
  const bnd::Model model = precision_model(c.precision);
  return evaluate_op<bnd::Bounded>(c, threads,
                                   [&model](std::size_t) { return bnd::ModelScope(model); });
}

}  // namespace mhc::oracles
