// Block and stack Cases: generation and parameter lookup.
#include <cmath>
#include <stdexcept>
#include <string>

#include "mhc/oracles/generate.hpp"
#include "mhc/oracles/ops.hpp"

namespace mhc::oracles {
namespace {

std::vector<float> gaussian(Rng& rng, std::size_t count, double stddev) {
  std::vector<float> v(count);
  for (auto& x : v) x = static_cast<float>(stddev * rng.normal());
  return v;
}

std::string layer_prefix(const OpCase& c, int layer) {
  return op_spec(c.op).forward == Op::stack ? "layers/" + std::to_string(layer) + "/" : "";
}

}  // namespace

OpCase generate_block_case(Op op, const ref::Config& cfg_in, const ref::BlockConfig& block,
                           std::size_t B, std::size_t T, std::uint64_t seed, Precision precision) {
  OpCase c = case_header(op, cfg_in, B * T, seed, precision);
  const Op fwd = op_spec(op).forward;
  if (!op_spec(fwd).whole) throw std::logic_error("generate_block_case: " + op_name(op));
  c.block = block;
  if (fwd == Op::block) c.block.layers = 1;
  c.batch = B;
  Rng rng(seed);
  const std::size_t N = B * T, n = std::size_t(c.cfg.n), d = std::size_t(c.cfg.d);
  auto put = [&](std::map<std::string, Tensor>& m, const std::string& name,
                 std::vector<std::size_t> shape, std::vector<float> data) {
    m[name] = Tensor{std::move(shape), std::move(data)};
  };
  auto x = gen::activations(rng, N, n * d, c.cfg.norm_eps > 0);
  gen::to_format(precision.decl.streams, x);
  put(c.inputs, "x", {B, T, n, d}, std::move(x));
  if (fwd == Op::block) put(c.inputs, "pre_mix", {B, T, n}, gen::pre_weights(rng, c.cfg, N));
  auto draw = [&](const TensorSpec& t, const std::vector<std::size_t>& shape) {
    std::size_t count = 1;
    for (auto s : shape) count *= s;
    switch (t.draw) {
      case Draw::hc_fn:
        return gen::hc_fn(rng, c.cfg);
      case Draw::hc_base:
        return gen::hc_base(rng, c.cfg);
      case Draw::hc_scale:
        return gen::hc_scale(rng);
      case Draw::norm_weight:
        return gen::norm_weight(rng, d);
      case Draw::fan_in_gaussian:
        return gaussian(rng, count, 1 / std::sqrt(double(shape.back())));
      case Draw::bias:
        return gaussian(rng, count, 0.1);
      default:
        break;
    }
    throw std::logic_error("generate_block_case: no draw for " + t.name);
  };
  for (int l = 0; l < c.block.layers; ++l)
    for (const auto& t : layer_params()) {
      const auto shape = resolve(t.dims, c.cfg, c.block);
      put(c.params, layer_prefix(c, l) + t.name, shape, draw(t, shape));
    }
  if (fwd == Op::stack) put(c.params, "final_norm/weight", {d}, gen::norm_weight(rng, d));
  for (const auto& t : op_spec(op).inputs)  // a backward's upstream gradients, after the forward's
    if (t.draw == Draw::upstream) {
      std::vector<std::size_t> shape{B, T};
      std::size_t count = N;
      for (auto s : resolve(t.dims, c.cfg, c.block)) {
        shape.push_back(s);
        count *= s;
      }
      std::vector<float> v(count);
      for (float& g : v) g = float(rng.uniform(-1, 1));
      put(c.inputs, t.name, shape, std::move(v));
    }
  store_declared(c);
  return c;
}

ref::BlockParams block_params(const OpCase& c, int layer) {
  const std::string p = layer_prefix(c, layer);
  auto w = [&](const std::string& name) { return c.param(p + name).data.data(); };
  ref::BlockParams b{};
  b.attn_hc_fn = w("attn/hc_fn");
  b.attn_hc_base = w("attn/hc_base");
  b.attn_hc_scale = w("attn/hc_scale");
  b.ffn_hc_fn = w("ffn/hc_fn");
  b.ffn_hc_base = w("ffn/hc_base");
  b.ffn_hc_scale = w("ffn/hc_scale");
  b.attn_norm = w("attn_norm/weight");
  b.ffn_norm = w("ffn_norm/weight");
  if (c.block.captured_sublayers) return b;  // the sublayers' weights are not read
  b.wq = w("attn/wq");
  b.wk = w("attn/wk");
  b.wv = w("attn/wv");
  b.wo = w("attn/wo");
  b.router = w("ffn/router");
  b.router_bias = w("ffn/router_bias");
  b.w1 = w("ffn/w1");
  b.w2 = w("ffn/w2");
  b.w3 = w("ffn/w3");
  b.shared_w1 = w("ffn/shared_w1");
  b.shared_w2 = w("ffn/shared_w2");
  b.shared_w3 = w("ffn/shared_w3");
  return b;
}

}  // namespace mhc::oracles
