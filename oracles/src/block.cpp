// Block and stack Cases: generation and parameter lookup.
#include <cmath>
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
  return c.op == Op::stack ? "layers/" + std::to_string(layer) + "/" : "";
}

}  // namespace

OpCase generate_block_case(Op op, const ref::Config& cfg_in, const ref::BlockConfig& block,
                           std::size_t B, std::size_t T, std::uint64_t seed,
                           Precision precision) {
  OpCase c = case_header(op, cfg_in, B * T, seed, precision);
  c.block = block;
  if (op == Op::block) c.block.layers = 1;
  c.batch = B;
  Rng rng(seed);
  const std::size_t N = B * T, n = std::size_t(c.cfg.n), d = std::size_t(c.cfg.d);
  const std::size_t M = std::size_t(c.cfg.mix()), H = std::size_t(block.heads);
  const std::size_t dh = std::size_t(block.head_dim), E = std::size_t(block.experts);
  const std::size_t I = std::size_t(block.inter), HD = H * dh;
  auto put = [&](std::map<std::string, Tensor>& m, const std::string& name,
                 std::vector<std::size_t> shape, std::vector<float> data) {
    m[name] = Tensor{std::move(shape), std::move(data)};
  };
  auto x = gen::activations(rng, N, n * d, c.cfg.norm_eps > 0);
  if (precision == Precision::bf16) gen::to_bf16(x);
  put(c.inputs, "x", {B, T, n, d}, std::move(x));
  if (op == Op::block) put(c.inputs, "pre_mix", {B, T, n}, gen::pre_weights(rng, c.cfg, N));
  const double sd = 1 / std::sqrt(double(d));
  for (int l = 0; l < c.block.layers; ++l) {
    const std::string p = layer_prefix(c, l);
    put(c.params, p + "attn/hc_fn", {M, n * d}, gen::hc_fn(rng, c.cfg));
    put(c.params, p + "attn/hc_base", {M}, gen::hc_base(rng, c.cfg));
    put(c.params, p + "attn/hc_scale", {3}, gen::hc_scale(rng));
    put(c.params, p + "ffn/hc_fn", {M, n * d}, gen::hc_fn(rng, c.cfg));
    put(c.params, p + "ffn/hc_base", {M}, gen::hc_base(rng, c.cfg));
    put(c.params, p + "ffn/hc_scale", {3}, gen::hc_scale(rng));
    put(c.params, p + "attn_norm/weight", {d}, gen::norm_weight(rng, d));
    put(c.params, p + "ffn_norm/weight", {d}, gen::norm_weight(rng, d));
    put(c.params, p + "attn/wq", {HD, d}, gaussian(rng, HD * d, sd));
    put(c.params, p + "attn/wk", {HD, d}, gaussian(rng, HD * d, sd));
    put(c.params, p + "attn/wv", {HD, d}, gaussian(rng, HD * d, sd));
    put(c.params, p + "attn/wo", {d, HD}, gaussian(rng, d * HD, 1 / std::sqrt(double(HD))));
    put(c.params, p + "ffn/router", {E, d}, gaussian(rng, E * d, sd));
    put(c.params, p + "ffn/router_bias", {E}, gaussian(rng, E, 0.1));
    put(c.params, p + "ffn/w1", {E, I, d}, gaussian(rng, E * I * d, sd));
    put(c.params, p + "ffn/w2", {E, d, I}, gaussian(rng, E * d * I, 1 / std::sqrt(double(I))));
    put(c.params, p + "ffn/w3", {E, I, d}, gaussian(rng, E * I * d, sd));
    put(c.params, p + "ffn/shared_w1", {I, d}, gaussian(rng, I * d, sd));
    put(c.params, p + "ffn/shared_w2", {d, I}, gaussian(rng, d * I, 1 / std::sqrt(double(I))));
    put(c.params, p + "ffn/shared_w3", {I, d}, gaussian(rng, I * d, sd));
  }
  if (op == Op::stack) put(c.params, "final_norm/weight", {d}, gen::norm_weight(rng, d));
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
