#include "mhc/runner/driver.hpp"

#include <malloc.h>

#include <algorithm>
#include <climits>
#include <string>

#include "mhc/oracles/verdict.hpp"

namespace mhc::runner {

void keep_freed_memory() {
  mallopt(M_MMAP_MAX, 0);              // large blocks from the heap, reused once freed
  mallopt(M_TRIM_THRESHOLD, INT_MAX);  // and the heap's top kept rather than given back
}

impl::KernelConfig kernel_config(const oracles::OpCase& c, unsigned threads) {
  impl::KernelConfig k;
  k.n = c.cfg.n;
  k.d = c.cfg.d;
  k.iters = c.cfg.iters;
  k.hc_eps = float(c.cfg.hc_eps);
  k.norm_eps = float(c.cfg.norm_eps);
  k.arith = c.precision == oracles::Precision::tf32 ? impl::Arith::tf32 : impl::Arith::fp32;
  k.bf16_streams = c.precision == oracles::Precision::bf16;
  k.threads = threads;
  return k;
}

namespace {

impl::BlockShape block_shape(const oracles::OpCase& c) {
  impl::BlockShape s;
  s.heads = c.block.heads;
  s.head_dim = c.block.head_dim;
  s.experts = c.block.experts;
  s.top_k = c.block.top_k;
  s.inter = c.block.inter;
  s.route_scale = float(c.block.route_scale);
  return s;
}

impl::BlockWeights block_weights(const oracles::OpCase& c, int layer) {
  const ref::BlockParams p = oracles::block_params(c, layer);
  return {p.attn_hc_fn,   p.attn_hc_base, p.attn_hc_scale, p.ffn_hc_fn,   p.ffn_hc_base,
          p.ffn_hc_scale, p.attn_norm,    p.ffn_norm,      p.wq,          p.wk,
          p.wv,           p.wo,           p.router,        p.router_bias, p.w1,
          p.w2,           p.w3,           p.shared_w1,     p.shared_w2,   p.shared_w3};
}

// One Block's stages, allocated (poisoned) in the trace under the prefix, in the oracle's order.
impl::BlockStages block_stages(oracles::Trace<float>& tr, const std::string& prefix,
                               const impl::KernelConfig& k, std::size_t N, std::size_t K) {
  const std::size_t n = std::size_t(k.n), d = std::size_t(k.d), M = std::size_t(k.mix());
  auto stage = [&](const std::string& name, std::vector<std::size_t> shape) -> float* {
    std::size_t size = 1;
    for (auto s : shape) size *= s;
    tr.push_back({prefix + name, std::move(shape), std::vector<float>(size, oracles::poison())});
    return tr.back().values.data();
  };
  impl::BlockStages o{};
  o.attn_mixes = stage("attn.mixes", {N, M});
  o.attn_pre = stage("attn.pre", {N, n});
  o.attn_post = stage("attn.post", {N, n});
  o.attn_comb = stage("attn.comb", {N, n, n});
  o.attn_in = stage("attn.in", {N, d});
  o.attn_normed = stage("attn.normed", {N, d});
  o.attn_out = stage("attn.out", {N, d});
  o.x_mid = stage("x_mid", {N, n, d});
  o.ffn_mixes = stage("ffn.mixes", {N, M});
  o.ffn_pre = stage("ffn.pre", {N, n});
  o.ffn_post = stage("ffn.post", {N, n});
  o.ffn_comb = stage("ffn.comb", {N, n, n});
  o.ffn_in = stage("ffn.in", {N, d});
  o.ffn_normed = stage("ffn.normed", {N, d});
  o.ffn_experts = stage("ffn.experts", {N, K});
  o.ffn_out = stage("ffn.out", {N, d});
  o.x_out = stage("x_out", {N, n, d});
  o.next_pre_mix = stage("next_pre_mix", {N, n});
  return o;
}

oracles::Trace<float> run_block(const impl::Backend& b, const oracles::OpCase& c,
                                const impl::KernelConfig& k) {
  if (!b.block) throw impl::NotCompiled(b.name + " has no block kernel");
  const std::size_t N = c.tokens, B = c.batch, T = N / B, n = std::size_t(k.n);
  const std::size_t d = std::size_t(k.d), K = std::size_t(c.block.top_k);
  oracles::Trace<float> tr;
  tr.reserve(20 * std::size_t(c.block.layers) + 2);  // stage buffers must not move
  const impl::BlockShape shape = block_shape(c);
  if (c.op == oracles::Op::block) {
    b.block(k, shape, B, T, c.input("x").data.data(), c.input("pre_mix").data.data(),
            block_weights(c, 0), block_stages(tr, "", k, N, K));
    return tr;
  }
  std::vector<float> pre0(N * n, 0.0f);
  for (std::size_t t = 0; t < N; ++t) pre0[t * n] = 1.0f;
  const float* x = c.input("x").data.data();
  const float* pre = pre0.data();
  for (int l = 0; l < c.block.layers; ++l) {
    const auto st = block_stages(tr, "L" + std::to_string(l) + ".", k, N, K);
    b.block(k, shape, B, T, x, pre, block_weights(c, l), st);
    x = st.x_out;
    pre = st.next_pre_mix;
  }
  tr.push_back({"final.collapse", {N, d}, std::vector<float>(N * d, oracles::poison())});
  b.hc_pre(k, N, x, pre, tr.back().values.data());
  const float* collapsed = tr.back().values.data();
  tr.push_back({"final.norm", {N, d}, std::vector<float>(N * d, oracles::poison())});
  b.rmsnorm(k, N, collapsed, c.param("final_norm/weight").data.data(), tr.back().values.data());
  return tr;
}

}  // namespace

oracles::Trace<float> run_kernel(const impl::Backend& b, const oracles::OpCase& c,
                                 unsigned threads) {
  using oracles::Op;
  if (c.op == Op::block || c.op == Op::stack) return run_block(b, c, kernel_config(c, threads));
  const impl::KernelConfig k = kernel_config(c, threads);
  const std::size_t T = c.tokens, n = std::size_t(k.n), d = std::size_t(k.d);
  const std::size_t M = std::size_t(k.mix());
  oracles::Trace<float> tr;
  auto stage = [&](const std::string& name, std::vector<std::size_t> shape) -> float* {
    std::size_t size = 1;
    for (auto s : shape) size *= s;
    tr.push_back({name, std::move(shape), std::vector<float>(size, oracles::poison())});
    return tr.back().values.data();
  };
  auto in = [&](const std::string& name) { return c.input(name).data.data(); };
  auto par = [&](const std::string& name) { return c.param(name).data.data(); };
  // Outputs are allocated first (the Trace does not move afterwards), then the kernel runs.
  tr.reserve(8);
  switch (c.op) {
    case Op::split_sinkhorn: {
      float* pre = stage("pre", {T, n});
      float* post = stage("post", {T, n});
      float* comb = stage("comb", {T, n, n});
      b.split_sinkhorn(k, T, in("mixes"), par("hc_scale"), par("hc_base"), pre, post, comb);
      break;
    }
    case Op::mixes: {
      float* mix = stage("mixes", {T, M});
      float* pre = stage("pre", {T, n});
      float* post = stage("post", {T, n});
      float* comb = stage("comb", {T, n, n});
      b.mixes(k, T, in("x"), par("hc_fn"), mix);
      b.split_sinkhorn(k, T, mix, par("hc_scale"), par("hc_base"), pre, post, comb);
      break;
    }
    case Op::pre:
      b.hc_pre(k, T, in("x"), in("pre_mix"), stage("y", {T, d}));
      break;
    case Op::post:
      b.hc_post(k, T, in("f"), in("residual"), in("post"), in("comb"), stage("y", {T, n, d}));
      break;
    case Op::rmsnorm:
      b.rmsnorm(k, T, in("x"), par("weight"), stage("y", {T, d}));
      break;
    case Op::block:
    case Op::stack:
      break;
    case Op::boundary: {
      impl::BoundaryOut out{};
      out.x = stage("x", {T, n, d});
      out.mixes = stage("mixes", {T, M});
      out.pre = stage("pre", {T, n});
      out.post = stage("post", {T, n});
      out.comb = stage("comb", {T, n, n});
      out.y = stage("y", {T, d});
      const impl::BoundaryIn bin{in("f"),       in("residual"), in("post"),      in("comb"),
                                 in("pre_mix"), par("hc_fn"),   par("hc_scale"), par("hc_base")};
      b.boundary(k, T, bin, out);
      break;
    }
  }
  return tr;
}

}  // namespace mhc::runner
