#include "driver.hpp"

#include <algorithm>

#include "mhc/oracles/verdict.hpp"

namespace mhc::driver {

impl::KernelConfig kernel_config(const oracles::OpCase& c, unsigned threads) {
  impl::KernelConfig k;
  k.n = c.cfg.n;
  k.d = c.cfg.d;
  k.iters = c.cfg.iters;
  k.hc_eps = float(c.cfg.hc_eps);
  k.norm_eps = float(c.cfg.norm_eps);
  k.arith = c.precision == "tf32" ? impl::Arith::tf32 : impl::Arith::fp32;
  k.bf16_streams = c.precision == "bf16";
  k.threads = threads;
  return k;
}

oracles::Trace<float> run_kernel(const impl::Backend& b, const oracles::OpCase& c,
                                 unsigned threads) {
  using oracles::Op;
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
    case Op::boundary: {
      impl::BoundaryOut out{};
      out.x = stage("x", {T, n, d});
      out.mixes = stage("mixes", {T, M});
      out.pre = stage("pre", {T, n});
      out.post = stage("post", {T, n});
      out.comb = stage("comb", {T, n, n});
      out.y = stage("y", {T, d});
      const impl::BoundaryIn bin{in("f"),       in("residual"), in("post"),     in("comb"),
                                 in("pre_mix"), par("hc_fn"),   par("hc_scale"), par("hc_base")};
      b.boundary(k, T, bin, out);
      break;
    }
  }
  return tr;
}

}  // namespace mhc::driver
