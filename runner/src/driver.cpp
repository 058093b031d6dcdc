#include "mhc/runner/driver.hpp"

#include <malloc.h>

#include <algorithm>
#include <climits>
#include <stdexcept>
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
  static_assert(int(impl::Format::tf32) == int(bnd::Format::tf32) &&
                int(impl::Format::bf16) == int(bnd::Format::bf16) &&
                int(impl::Format::fp16) == int(bnd::Format::fp16));
  const auto format = [](bnd::Format f) { return impl::Format(int(f)); };
  k.streams = format(c.precision.decl.streams);
  k.mixes = format(c.precision.decl.mixes);
  k.coefficients = format(c.precision.decl.coefficients);
  k.products = format(c.precision.decl.products);
  k.accumulation = format(c.precision.decl.accumulation);
  k.intermediates = format(c.precision.decl.intermediates);
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

// Stages allocated (poisoned) at the end of the trace, shapes from the op table; the trace must
// not reallocate afterwards (reserved by the caller).
void allocate(oracles::Trace<float>& tr, const std::string& prefix,
              const std::vector<oracles::TensorSpec>& stages, const oracles::OpCase& c) {
  for (const auto& t : stages) {
    std::vector<std::size_t> shape = oracles::resolve(t.dims, c.cfg, c.block);
    if (t.per_token) shape.insert(shape.begin(), c.tokens);
    std::size_t size = 1;
    for (auto x : shape) size *= x;
    tr.push_back({prefix + t.name, std::move(shape), std::vector<float>(size, oracles::poison())});
  }
}

float* stage_data(oracles::Trace<float>& tr, const std::string& name) {
  for (auto& s : tr)
    if (s.name == name) return s.values.data();
  throw std::logic_error("no stage " + name);
}

// One Block's stages in the trace, under the prefix.
impl::BlockStages stages_at(oracles::Trace<float>& tr, const std::string& prefix) {
  auto at = [&](const char* name) { return stage_data(tr, prefix + name); };
  impl::BlockStages o{};
  o.attn_mixes = at("attn.mixes");
  o.attn_pre = at("attn.pre");
  o.attn_post = at("attn.post");
  o.attn_comb = at("attn.comb");
  o.attn_in = at("attn.in");
  o.attn_normed = at("attn.normed");
  o.attn_out = at("attn.out");
  o.x_mid = at("x_mid");
  o.ffn_mixes = at("ffn.mixes");
  o.ffn_pre = at("ffn.pre");
  o.ffn_post = at("ffn.post");
  o.ffn_comb = at("ffn.comb");
  o.ffn_in = at("ffn.in");
  o.ffn_normed = at("ffn.normed");
  o.ffn_experts = at("ffn.experts");
  o.ffn_out = at("ffn.out");
  o.x_out = at("x_out");
  o.next_pre_mix = at("next_pre_mix");
  return o;
}

// One Block's stages, allocated in the trace under the prefix, in the oracle's order.
impl::BlockStages block_stages(oracles::Trace<float>& tr, const std::string& prefix,
                               const oracles::OpCase& c) {
  allocate(tr, prefix, oracles::block_stages(), c);
  return stages_at(tr, prefix);
}

oracles::Trace<float> run_block(const impl::Backend& b, const oracles::OpCase& c,
                                const impl::KernelConfig& k) {
  if (!b.block) throw impl::NotCompiled(b.name + " has no block kernel");
  const std::size_t N = c.tokens, B = c.batch, T = N / B, n = std::size_t(k.n);
  oracles::Trace<float> tr;
  tr.reserve(oracles::block_stages().size() * std::size_t(c.block.layers) +
             oracles::final_stages().size());  // stage buffers must not move
  const impl::BlockShape shape = block_shape(c);
  if (c.op == oracles::Op::block) {
    b.block(k, shape, B, T, c.input("x").data.data(), c.input("pre_mix").data.data(),
            block_weights(c, 0), block_stages(tr, "", c));
    return tr;
  }
  std::vector<float> pre0(N * n, 0.0f);
  for (std::size_t t = 0; t < N; ++t) pre0[t * n] = 1.0f;
  const float* x = c.input("x").data.data();
  const float* pre = pre0.data();
  for (int l = 0; l < c.block.layers; ++l) {
    const auto st = block_stages(tr, "L" + std::to_string(l) + ".", c);
    b.block(k, shape, B, T, x, pre, block_weights(c, l), st);
    x = st.x_out;
    pre = st.next_pre_mix;
  }
  allocate(tr, "", oracles::final_stages(), c);
  b.hc_pre(k, N, x, pre, stage_data(tr, "final.collapse"));
  b.rmsnorm(k, N, stage_data(tr, "final.collapse"), c.param("final_norm/weight").data.data(),
            stage_data(tr, "final.norm"));
  return tr;
}

// block_backward, stack_backward: the forward by the backend's block kernel, its stages kept in
// the Trace (the activations a training step saves, judged as the forward op's), then each
// layer's backward by impl::make_block_backward over the backend's backward pieces, last layer
// to first; the gradients after the stages.
oracles::Trace<float> run_block_backward(const impl::Backend& b, const oracles::OpCase& c,
                                         const impl::KernelConfig& k) {
  oracles::OpCase fc = c;
  fc.op = oracles::op_spec(c.op).forward;
  oracles::Trace<float> fwd = run_block(b, fc, k);
  const bool stack = fc.op == oracles::Op::stack;
  const std::size_t N = c.tokens, B = c.batch, T = N / B, n = std::size_t(k.n);
  const std::size_t nd = n * std::size_t(k.d);
  const auto backward = b.backward.block ? b.backward.block : impl::make_block_backward(b);
  std::vector<float> pre0(N * n, 0.0f);
  for (std::size_t t = 0; t < N; ++t) pre0[t * n] = 1.0f;
  // The backward's stages after the forward's: every layer's, last layer first, then the op's
  // outputs a stack does not hold under their own names.
  fwd.reserve(fwd.size() + oracles::block_backward_stages().size() * std::size_t(c.block.layers) +
              1);
  const float* g_out = c.input("upstream_x").data.data();
  const float* g_next = c.input("upstream_next_pre_mix").data.data();
  for (int l = c.block.layers; l-- > 0;) {
    const std::string prefix = stack ? "L" + std::to_string(l) + "." : "";
    const std::string below = "L" + std::to_string(l - 1) + ".";
    const float* x = l == 0 ? c.input("x").data.data() : stage_data(fwd, below + "x_out");
    const float* pre = !stack   ? c.input("pre_mix").data.data()
                       : l == 0 ? pre0.data()
                                : stage_data(fwd, below + "next_pre_mix");
    allocate(fwd, prefix, oracles::block_backward_stages(), c);
    auto at = [&](const char* name) { return stage_data(fwd, prefix + name); };
    const impl::BlockGradStages r{
        at("ffn.grad_out"),    at("ffn.grad_normed"), at("ffn.grad_in"),      at("ffn.grad_mixes"),
        at("grad_x_mid"),      at("attn.grad_out"),   at("attn.grad_normed"), at("attn.grad_in"),
        at("attn.grad_mixes"), at("grad_x"),          at("grad_pre_mix")};
    backward(k, block_shape(c), B, T, x, pre, block_weights(c, l), stages_at(fwd, prefix), g_out,
             g_next, r);
    g_out = r.grad_x;
    g_next = r.grad_pre_mix;
  }
  if (stack) {
    allocate(fwd, "", {oracles::op_spec(c.op).outputs[0]}, c);
    std::copy(g_out, g_out + N * nd, stage_data(fwd, "grad_x"));
  }
  return fwd;
}

// A backward op through the backend's backward kernels, the mixes op's and the boundary's composed
// from the pieces' as a training step runs them: the forward's intermediates (x, mixes) from the
// backend's own forward kernels, the gradients reaching a tensor from two places added in fp32.
void run_backward(const impl::Backend& b, const oracles::OpCase& c, const impl::KernelConfig& k,
                  oracles::Trace<float>& tr) {
  using oracles::Op;
  const impl::Backend::Backward& g = b.backward;
  const bool has = g.mixes && g.split_sinkhorn && g.hc_pre && g.hc_post && g.rmsnorm;
  if (!has) throw impl::NotCompiled(b.name + " has no backward kernels");
  const std::size_t T = c.tokens, n = std::size_t(k.n), d = std::size_t(k.d);
  const std::size_t nd = n * d, M = std::size_t(k.mix());
  auto in = [&](const std::string& name) { return c.input(name).data.data(); };
  auto par = [&](const std::string& name) { return c.param(name).data.data(); };
  auto out = [&](const std::string& name) { return stage_data(tr, name); };
  auto add = [](std::vector<float>& a, const float* v) {
    for (std::size_t i = 0; i < a.size(); ++i) a[i] += v[i];
  };
  // The mixes op's backward on streams x: the split's, then the projection's.
  auto mixes_op = [&](const float* x, const float* up_mixes, const float* up_pre,
                      const float* up_post, const float* up_comb, float* dx) {
    std::vector<float> mixes(T * M), dm(T * M);
    b.mixes(k, T, x, par("hc_fn"), mixes.data());
    g.split_sinkhorn(k, T, mixes.data(), par("hc_scale"), par("hc_base"), up_pre, up_post, up_comb,
                     dm.data(), out("grad_hc_scale"), out("grad_hc_base"));
    add(dm, up_mixes);
    g.mixes(k, T, x, par("hc_fn"), dm.data(), dx, out("grad_hc_fn"));
  };
  switch (c.op) {
    case Op::split_sinkhorn_backward:
      g.split_sinkhorn(k, T, in("mixes"), par("hc_scale"), par("hc_base"), in("upstream_pre"),
                       in("upstream_post"), in("upstream_comb"), out("grad_mixes"),
                       out("grad_hc_scale"), out("grad_hc_base"));
      return;
    case Op::mixes_backward:
      mixes_op(in("x"), in("upstream_mixes"), in("upstream_pre"), in("upstream_post"),
               in("upstream_comb"), out("grad_x"));
      return;
    case Op::pre_backward:
      g.hc_pre(k, T, in("x"), in("pre_mix"), in("upstream_y"), out("grad_x"), out("grad_pre_mix"));
      return;
    case Op::post_backward:
      g.hc_post(k, T, in("f"), in("residual"), in("post"), in("comb"), in("upstream_y"),
                out("grad_f"), out("grad_residual"), out("grad_post"), out("grad_comb"));
      return;
    case Op::rmsnorm_backward:
      g.rmsnorm(k, T, in("x"), par("weight"), in("upstream_y"), out("grad_x"), out("grad_weight"));
      return;
    case Op::boundary_backward: {
      std::vector<float> x(T * nd), gx(in("upstream_x"), in("upstream_x") + T * nd), dx(T * nd);
      b.hc_post(k, T, in("f"), in("residual"), in("post"), in("comb"), x.data());
      if (g.boundary) {  // the backend's own, from the forward's x and mixes
        std::vector<float> mixes(T * M);
        b.mixes(k, T, x.data(), par("hc_fn"), mixes.data());
        const impl::BoundaryIn fwd{in("f"),       in("residual"), in("post"),      in("comb"),
                                   in("pre_mix"), par("hc_fn"),   par("hc_scale"), par("hc_base")};
        g.boundary(
            k, T,
            {fwd, x.data(), mixes.data(), in("upstream_x"), in("upstream_y"), in("upstream_mixes"),
             in("upstream_pre"), in("upstream_post"), in("upstream_comb")},
            {out("grad_f"), out("grad_residual"), out("grad_post"), out("grad_comb"),
             out("grad_pre_mix"), out("grad_hc_fn"), out("grad_hc_scale"), out("grad_hc_base")});
        return;
      }
      mixes_op(x.data(), in("upstream_mixes"), in("upstream_pre"), in("upstream_post"),
               in("upstream_comb"), dx.data());
      add(gx, dx.data());
      g.hc_pre(k, T, x.data(), in("pre_mix"), in("upstream_y"), dx.data(), out("grad_pre_mix"));
      add(gx, dx.data());
      g.hc_post(k, T, in("f"), in("residual"), in("post"), in("comb"), gx.data(), out("grad_f"),
                out("grad_residual"), out("grad_post"), out("grad_comb"));
      return;
    }
    default:
      throw std::logic_error("run_backward: " + oracles::op_name(c.op) + " is not a backward op");
  }
}

}  // namespace

oracles::Trace<float> run_kernel(const impl::Backend& b, const oracles::OpCase& c,
                                 unsigned threads) {
  using oracles::Op;
  if (c.op == Op::block || c.op == Op::stack) return run_block(b, c, kernel_config(c, threads));
  if (oracles::op_spec(c.op).whole) return run_block_backward(b, c, kernel_config(c, threads));
  const impl::KernelConfig k = kernel_config(c, threads);
  const std::size_t T = c.tokens;
  oracles::Trace<float> tr;
  // Outputs are allocated first (the Trace does not move afterwards), then the kernel runs.
  tr.reserve(oracles::op_spec(c.op).outputs.size());
  allocate(tr, "", oracles::op_spec(c.op).outputs, c);
  if (oracles::op_spec(c.op).backward) {
    try {
      run_backward(b, c, k, tr);
    } catch (const impl::NotCompiled& e) {
      if (c.op != Op::mixes_backward && c.op != Op::boundary_backward) throw;
      throw impl::NotCompiled(std::string(e.what()) + " (" + oracles::op_name(c.op) +
                              " is composed of the pieces' forward and backward entry points)");
    }
    return tr;
  }
  auto in = [&](const std::string& name) { return c.input(name).data.data(); };
  auto par = [&](const std::string& name) { return c.param(name).data.data(); };
  auto out = [&](const std::string& name) { return stage_data(tr, name); };
  switch (c.op) {
    case Op::split_sinkhorn:
      b.split_sinkhorn(k, T, in("mixes"), par("hc_scale"), par("hc_base"), out("pre"), out("post"),
                       out("comb"));
      break;
    case Op::mixes:
      b.mixes(k, T, in("x"), par("hc_fn"), out("mixes"));
      b.split_sinkhorn(k, T, out("mixes"), par("hc_scale"), par("hc_base"), out("pre"), out("post"),
                       out("comb"));
      break;
    case Op::pre:
      b.hc_pre(k, T, in("x"), in("pre_mix"), out("y"));
      break;
    case Op::post:
      b.hc_post(k, T, in("f"), in("residual"), in("post"), in("comb"), out("y"));
      break;
    case Op::rmsnorm:
      b.rmsnorm(k, T, in("x"), par("weight"), out("y"));
      break;
    case Op::block:
    case Op::stack:
    default:
      break;
    case Op::boundary: {
      const impl::BoundaryOut o{out("x"),   out("y"),    out("mixes"),
                                out("pre"), out("post"), out("comb")};
      const impl::BoundaryIn bin{in("f"),       in("residual"), in("post"),      in("comb"),
                                 in("pre_mix"), par("hc_fn"),   par("hc_scale"), par("hc_base")};
      b.boundary(k, T, bin, o);
      break;
    }
  }
  return tr;
}

}  // namespace mhc::runner
