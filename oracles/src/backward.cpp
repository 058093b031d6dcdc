#include "mhc/oracles/backward.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>

#include "mhc/oracles/bounded.hpp"
#include "mhc/oracles/parallel.hpp"

namespace mhc::oracles {

namespace {

using B = bnd::Bounded;

// The split's gradients on one token by the recorded and the closed-form programs: values (the
// recorded program's) and the larger of their first-order bounds; error: bounds on the inputs'
// own errors (at's shapes), propagated to first order too. The closed forms are the shipped
// semantics': for a deviation (diagnosis only) their bound is the right size, not exact.
rev::Gradient split_gradient(const ref::Config& c, const Tensors<double>& at,
                             const Tensors<double>& up, const Tensors<double>& error,
                             const Tensors<double>& up_error) {
  rev::Gradient g = rev::first_order_vjp(
      [&](auto& x) {
        using V = std::decay_t<decltype(x[0][0])>;
        return forward_piece<V>(Op::split_sinkhorn, c, x);
      },
      at, up, error, up_error);
  rev::Tape<double> tape;
  tape.check_overflow();  // the closed forms are a kernel's: where they overflow, so may it
  Tensors<rev::Var<double>> x(at.size()), u(up.size());
  for (std::size_t k = 0; k < at.size(); ++k)
    for (std::size_t i = 0; i < at[k].size(); ++i)
      x[k].push_back(tape.input(at[k][i], error[k][i]));
  for (std::size_t k = 0; k < up.size(); ++k)
    for (std::size_t i = 0; i < up[k].size(); ++i)
      u[k].push_back(tape.input(up[k][i], up_error[k][i]));
  const Tensors<rev::Var<double>> p = split_backward_closed<rev::Var<double>>(
      c, x[0].data(), x[1].data(), x[2].data(), u[0].data(), u[1].data(), u[2].data());
  std::vector<rev::Var<double>> all;
  for (const auto& t : p) all.insert(all.end(), t.begin(), t.end());
  const std::vector<double> b = tape.first_order(all);
  for (std::size_t k = 0, e = 0; k < p.size(); ++k)
    for (std::size_t i = 0; i < p[k].size(); ++i, ++e)
      g.bound[k][i] = std::max(g.bound[k][i], b[e]);
  return g;
}

// One token's gradients composed piece by piece (docs/semantics.md, "The backward ops"): the
// split's by split_gradient at the mixes a kernel computes (their bounds propagated to first
// order), everything else by the bound-carrying Scalar, whose reductions hold for every order.
// The hc_fn contribution g_a r x_i is kept as its two factors (fn_row[group of i][a], fn_col[i]):
// M n d numbers a token that backward_trace sums over the tokens without storing them.
struct TokenGrads {
  Tensors<B> grad;                     // the backward op's outputs; hc_fn's left empty
  std::vector<std::vector<B>> fn_row;  // per group of fn_group columns (one RMS statistic each)
  std::vector<B> fn_col;
  std::size_t fn_group = 0;
};

std::vector<B> exact(const float* p, std::size_t n) {
  return std::vector<B>(p, p + n);
}

// The split's gradients (mixes, hc_scale, hc_base) at mixes known to within their bounds, for
// upstream gradients known to within theirs.
Tensors<B> split_grads(const ref::Config& cfg, const float* scale, const float* base,
                       const std::vector<B>& mix, const B* up_pre, const B* up_post,
                       const B* up_comb) {
  const std::size_t n = std::size_t(cfg.n), M = mix.size();
  Tensors<double> at{{}, {scale, scale + 3}, {base, base + M}};
  Tensors<double> error{{}, std::vector<double>(3, 0), std::vector<double>(M, 0)};
  for (const B& m : mix) {
    at[0].push_back(m.v);
    error[0].push_back(m.e);
  }
  Tensors<double> up(3), up_error(3);
  for (const auto& [k, g, len] : {std::tuple{0, up_pre, n}, {1, up_post, n}, {2, up_comb, n * n}})
    for (std::size_t i = 0; i < len; ++i) {
      up[std::size_t(k)].push_back(g[i].v);
      up_error[std::size_t(k)].push_back(g[i].e);
    }
  const rev::Gradient g = split_gradient(cfg, at, up, error, up_error);
  Tensors<B> out(3);
  for (std::size_t k = 0; k < 3; ++k)
    for (std::size_t i = 0; i < g.value[k].size(); ++i)
      out[k].emplace_back(g.value[k][i], g.bound[k][i]);
  // The mixes' bounds are not small where the projection cancels (s e up to 0.9 on generated
  // cases), and first order misses the curvature: pre's and post's entries depend on their own
  // mix alone, through s(1 - s) of z = m s_w + b, whose move over [z - s_w e, z + s_w e] is
  // bounded exactly (its one maximum is at z = 0) and added. (The comb's is linearised, as the
  // forward's Sinkhorn bound is.)
  const ref::Semantics& sem = cfg.sem;
  auto f = [](double z) {
    const double sg = 1 / (1 + std::exp(-z));
    return sg * (1 - sg);
  };
  for (std::size_t w = 0; w < 2; ++w)
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t i = w * n + j, ws = sem.scales_swapped ? 1 - w : w;
      const double sc = std::fabs(double(scale[ws])),
                   z = mix[i].v * double(scale[ws]) + double(base[i]);
      const double h = sc * mix[i].e, lo = f(z - h), hi = f(z + h), mid = f(z);
      const double top = z - h <= 0 && 0 <= z + h ? 0.25 : std::max(lo, hi);
      const B& u = w ? up_post[j] : up_pre[j];
      const double G = (w && sem.post_factor2 ? 2.0 : 1.0) * (std::fabs(u.v) + u.e);
      double move = G * std::max(top - mid, mid - std::min(lo, hi));  // of d z
      if (std::isnan(move)) move = HUGE_VAL;  // an unbounded upstream times no move
      out[0][i].e += move * sc;
      out[2][i].e += move;
      out[1][ws].e += move * (std::fabs(mix[i].v) + mix[i].e) + std::fabs(out[2][i].v) * mix[i].e;
    }
  // Without the premises of the comb's linearisation and of its adjoint's range no gradient of
  // the split is bounded.
  std::vector<double> L(n * n);
  ref::comb_logits(cfg, at[0].data(), scale, base, L.data());
  if (!bnd::sinkhorn_gradient_bounded(cfg, L.data(), up[2].data()))
    for (auto& t : out)
      for (B& b : t) b.e = HUGE_VAL;
  return out;
}

// The projection with its RMS scale, mixes = r (hc_fn x): the gradient of x for the mixes'
// gradient g, d x_i = r sum_a g_a W_ai - (r^3 / nd) x_i sum_a g_a (W x)_a, plus the terms other
// consumers of x add (extra); hc_fn's into t. Its bound is the larger of two programs': r
// factored out of the sum over a, then the other terms added; and every term (g_a r) W_ai, the
// RMS term and the extra terms as one reduction, in any order (as a recorded backward, or a
// kernel accumulating them into one register, adds them). The RMS deviations diagnosis tries
// are the same per group of columns: one statistic per stream (a group each), of the sum, or
// the projection reading x d-major.
//
// stored: the format a kernel may store x's gradient in, and its shares before they are summed
// (an unfused composition stores each consumer's gradient of a stream tensor, and may round each
// partial sum, as an autograd in that format does): C shares (the projection's, then each extra),
// 2C - 1 values stored, the k-th at most (1 + u_s)^k times the shares' magnitudes and bounds, so
// that together they add ((1 + u_s)^(2C-1) - 1) of those plus the format's floor per store.
std::vector<B> projection_grads(const ref::Config& c, const std::vector<B>& x, const float* W,
                                const std::vector<B>& g, TokenGrads& t,
                                std::vector<std::vector<B>> extra = {},
                                bnd::Format stored = bnd::Format::fp32) {
  using Rms = ref::Semantics::Rms;
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  const std::size_t nd = x.size(), M = g.size(), K = M + 1 + extra.size();
  const bool per_stream = c.sem.rms == Rms::stream_mean, of_sum = c.sem.rms == Rms::token_sum;
  const bool d_major = c.sem.d_major && !per_stream;
  const std::size_t L = per_stream ? d : nd;         // columns per statistic
  auto permute = [&](std::vector<B> v, bool back) {  // the projection's order x[c*n + j]
    if (!d_major) return v;
    std::vector<B> p(nd);
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t cc = 0; cc < d; ++cc)
        (back ? p[j * d + cc] : p[cc * n + j]) = v[back ? cc * n + j : j * d + cc];
    return p;
  };
  const std::vector<B> xp = permute(x, false);
  for (auto& e : extra) e = permute(std::move(e), false);
  std::vector<const float*> rows(M);
  for (std::size_t a = 0; a < M; ++a) rows[a] = W + a * nd;
  std::vector<B> acc(nd), dx(nd), terms(1 + extra.size()), proj(M);
  bnd::lincomb(g.data(), rows.data(), M, nd, acc.data());
  const bnd::Model& md = bnd::model();
  t.fn_group = L;
  t.fn_row.assign(nd / L, std::vector<B>(M));
  for (std::size_t k = 0; k < nd / L; ++k) {
    const B* xk = xp.data() + k * L;
    const B r = ref::rms_scale(xk, L, c.norm_eps, of_sum);
    if (L == nd)
      bnd::project(xk, 1, W, M, nd, proj.data());
    else
      for (std::size_t a = 0; a < M; ++a) proj[a] = bnd::linear(xk, rows[a] + k * L, L);
    const B gdot = bnd::dot(g.data(), proj.data(), M);
    std::vector<B>& row = t.fn_row[k];
    for (std::size_t a = 0; a < M; ++a) row[a] = g[a] * r;
    // The flat program's terms (g_a r) W_ai: their magnitudes and propagated bounds over a.
    std::vector<double> A(L, 0), E(L, 0);
    for (std::size_t a = 0; a < M; ++a) {
      const double m = std::fabs(row[a].v), e = row[a].e;
      const float* w = rows[a] + k * L;
      for (std::size_t i = 0; i < L; ++i) {
        A[i] += m * std::fabs(double(w[i]));
        E[i] += e * std::fabs(double(w[i]));
      }
    }
    const B s = r * r * r / B(of_sum ? 1.0 : double(L));
    for (std::size_t i = 0; i < L; ++i) {
      const std::size_t at = k * L + i;
      const B q = s * xk[i] * gdot;
      terms[0] = r * acc[at] - q;
      // The products' own roundings as Bounded's operator* counts them: u (|v| + p) + u64 |v|.
      double mag = A[i] + std::fabs(q.v);
      double err = E[i] + md.u * (A[i] + E[i]) + bnd::u64 * A[i] + double(M) * md.eta + q.e;
      for (std::size_t e = 0; e < extra.size(); ++e) {
        terms[e + 1] = extra[e][at];
        mag += std::fabs(extra[e][at].v);
        err += extra[e][at].e;
      }
      dx[at] = terms.size() == 1 ? terms[0] : bnd::sum(terms.data(), terms.size());
      // A short reduction (K <= M + 3 terms): the rigorous constant, as lincomb's.
      const double flat = mag + err > md.big ? HUGE_VAL
                                             : err + bnd::gamma(double(K - 1), md.u) * (mag + err) +
                                                   bnd::gamma(double(K - 1), bnd::u64) * mag +
                                                   double(K - 1) * md.eta;
      dx[at].e = std::max(dx[at].e, flat);
      if (stored != bnd::Format::fp32) {
        const bnd::FormatInfo& f = bnd::format_info(stored);
        double shares = std::fabs(terms[0].v) + terms[0].e;
        for (std::size_t e = 0; e < extra.size(); ++e)
          shares += std::fabs(extra[e][at].v) + extra[e][at].e;
        const double all = shares + dx[at].e, stores = double(2 * terms.size() - 1);
        dx[at].e = all > f.max ? HUGE_VAL
                               : dx[at].e + all * std::expm1(stores * std::log1p(f.u)) +
                                     stores * std::max(f.eta, md.eta);
      }
    }
  }
  t.fn_col = xp;
  return permute(std::move(dx), true);
}

// hc_post's gradients (f, residual, post, comb) for the gradient g of its output.
Tensors<B> post_grads(const ref::Config& c, const B* f, const B* res, const B* post, const B* comb,
                      const B* g) {
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  Tensors<B> out{std::vector<B>(d), std::vector<B>(n * d), std::vector<B>(n),
                 std::vector<B>(n * n)};
  std::vector<const B*> rows(n);
  for (std::size_t k = 0; k < n; ++k) rows[k] = g + k * d;
  bnd::lincomb(post, rows.data(), n, d, out[0].data());
  // C[j, k] carries stream j into k (comb[k n + j] where diagnosis tries it transposed).
  const bool tr = c.sem.comb_transposed;
  for (std::size_t j = 0; j < n; ++j) {
    std::vector<B> w(n);
    for (std::size_t k = 0; k < n; ++k) w[k] = comb[tr ? k * n + j : j * n + k];
    bnd::lincomb(w.data(), rows.data(), n, d, out[1].data() + j * d);
  }
  for (std::size_t k = 0; k < n; ++k) {
    out[2][k] = bnd::dot(f, rows[k], d);
    for (std::size_t j = 0; j < n; ++j)
      out[3][tr ? k * n + j : j * n + k] = bnd::dot(res + j * d, rows[k], d);
  }
  return out;
}

// hc_pre's gradients (x, pre_mix) for the gradient g of its output.
Tensors<B> pre_grads(const ref::Config& c, const B* x, const B* p, const B* g) {
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  Tensors<B> out{std::vector<B>(n * d), std::vector<B>(n)};
  for (std::size_t j = 0; j < n; ++j) {
    for (std::size_t i = 0; i < d; ++i) out[0][j * d + i] = p[j] * g[i];
    out[1][j] = bnd::dot(g, x + j * d, d);
  }
  return out;
}

// RMSNorm's gradients (x, weight) for the gradient g of y = w x r:
// d x_i = r w_i g_i - (r^3 / d) x_i sum_j g_j w_j x_j, d w_i = g_i x_i r.
Tensors<B> rmsnorm_grads(std::size_t d, double eps, const B* x, const B* w, const B* g) {
  const B r = ref::rms_scale(x, d, eps);
  std::vector<B> wg(d), dx(d), dw(d);
  for (std::size_t i = 0; i < d; ++i) wg[i] = w[i] * g[i];
  const B gwx = bnd::dot(wg.data(), x, d), s = r * r * r / B(double(d));
  for (std::size_t i = 0; i < d; ++i) {
    dx[i] = r * wg[i] - s * x[i] * gwx;
    dw[i] = g[i] * x[i] * r;
  }
  return {std::move(dx), std::move(dw)};
}

TokenGrads composed_token(const OpCase& c, std::size_t t, const bnd::Model& model) {
  const bnd::ModelScope scope(model);
  const ref::Config& cfg = c.cfg;
  const std::size_t n = std::size_t(cfg.n), d = std::size_t(cfg.d), nd = n * d;
  const std::size_t M = std::size_t(cfg.mix());
  const bnd::Format streams = c.precision.decl.streams;
  auto in = [&](const std::string& name) {
    const auto& v = c.input(name).data;
    return v.data() + t * (v.size() / c.tokens);
  };
  auto param = [&](const std::string& name) { return c.param(name).data.data(); };
  auto ex = [&](const std::string& name, std::size_t size) { return exact(in(name), size); };
  auto split = [&](const std::vector<B>& mix) {
    return split_grads(cfg, param("hc_scale"), param("hc_base"), mix, ex("upstream_pre", n).data(),
                       ex("upstream_post", n).data(), ex("upstream_comb", n * n).data());
  };
  TokenGrads tg;
  switch (op_spec(c.op).forward) {
    case Op::split_sinkhorn:
      tg.grad = split(exact(in("mixes"), M));
      break;
    case Op::mixes: {
      const std::vector<B> x = exact(in("x"), nd);
      std::vector<B> mix(M);
      ref::mixes(cfg, x.data(), param("hc_fn"), mix.data());
      Tensors<B> s = split(mix);
      for (std::size_t a = 0; a < M; ++a) s[0][a] = s[0][a] + B(in("upstream_mixes")[a]);
      tg.grad.push_back(projection_grads(cfg, x, param("hc_fn"), s[0], tg));
      tg.grad.emplace_back();
      tg.grad.push_back(std::move(s[1]));
      tg.grad.push_back(std::move(s[2]));
      break;
    }
    case Op::pre:
      tg.grad =
          pre_grads(cfg, ex("x", nd).data(), ex("pre_mix", n).data(), ex("upstream_y", d).data());
      break;
    case Op::post:
      tg.grad = post_grads(cfg, ex("f", d).data(), ex("residual", nd).data(), ex("post", n).data(),
                           ex("comb", n * n).data(), ex("upstream_y", nd).data());
      break;
    case Op::rmsnorm:
      tg.grad = rmsnorm_grads(d, cfg.norm_eps, ex("x", d).data(), exact(param("weight"), d).data(),
                              ex("upstream_y", d).data());
      break;
    case Op::boundary: {
      const std::vector<B> f = ex("f", d), res = ex("residual", nd), post = ex("post", n),
                           comb = ex("comb", n * n);
      std::vector<B> x(nd), mix(M);
      ref::hc_post(cfg, f.data(), res.data(), post.data(), comb.data(), x.data());
      // The forward's x as it stored it, which its mixes and hc_pre read.
      for (B& v : x) v = bnd::rounded_to(v, streams);
      ref::mixes(cfg, x.data(), param("hc_fn"), mix.data());
      Tensors<B> s = split(mix);
      for (std::size_t a = 0; a < M; ++a) s[0][a] = s[0][a] + B(in("upstream_mixes")[a]);
      Tensors<B> gp = pre_grads(cfg, x.data(), ex("pre_mix", n).data(), ex("upstream_y", d).data());
      const std::vector<B> gx = projection_grads(cfg, x, param("hc_fn"), s[0], tg,
                                                 {ex("upstream_x", nd), gp[0]}, streams);
      tg.grad = post_grads(cfg, f.data(), res.data(), post.data(), comb.data(), gx.data());
      tg.grad.push_back(std::move(gp[1]));
      tg.grad.emplace_back();
      tg.grad.push_back(std::move(s[1]));
      tg.grad.push_back(std::move(s[2]));
      break;
    }
    default:
      throw std::logic_error("backward_trace: no composed backward for " + op_spec(c.op).name);
  }
  return tg;
}

// One Block's backward (docs/semantics.md, "The Block's backward") from its forward (trace,
// stages under prefix; x and pre_mix its inputs): the gradients of x_out and next_pre_mix to
// those of x and pre_mix, the stages undone in reverse as a training step runs them (each site's
// hc_post, the sublayer with the experts the forward chose, RMSNorm, hc_pre, the split, the
// projection), the gradients reaching a tensor from several stages added. Each backward stage
// (block_backward_stages) is appended to out, and read downstream as the kernel computed it where
// the kernel's Trace holds it (anchored, as the forward's stages are).
struct LayerGrads {
  std::vector<B> x, pre_mix;
};

LayerGrads block_layer_backward(const OpCase& c, const ref::BlockParams& p, const Trace<B>& tr,
                                const std::string& prefix, const B* x, const B* pre_mix,
                                const std::vector<int>& chosen, const B* g_out, const B* g_next,
                                const Trace<float>* kernel, unsigned threads,
                                const bnd::Model& model, Trace<B>& out) {
  const ref::Config& cfg = c.cfg;
  const ref::BlockConfig& bc = c.block;
  const std::size_t N = c.tokens, T = N / c.batch, n = std::size_t(cfg.n), d = std::size_t(cfg.d);
  const std::size_t nd = n * d, nn = n * n, M = std::size_t(cfg.mix());
  auto st = [&](const char* name) { return ref::stage_values(tr, prefix + name).data(); };
  std::deque<std::vector<B>> held;  // stable addresses
  auto record = [&](const std::string& name, std::vector<B> v, std::size_t per) -> const B* {
    out.push_back({prefix + name,
                   per == nd ? std::vector<std::size_t>{N, n, d} : std::vector<std::size_t>{N, per},
                   v});
    if (kernel)
      for (const auto& s : *kernel)
        if (s.name == prefix + name && s.values.size() == v.size()) {
          held.emplace_back(s.values.begin(), s.values.end());
          return held.back().data();
        }
    held.push_back(std::move(v));
    return held.back().data();
  };
  ref::Config ca = cfg, cf = cfg;
  ca.sem.comb_transposed = cfg.sem.comb_transposed || bc.sem.comb_transposed_site == 0;
  cf.sem.comb_transposed = cfg.sem.comb_transposed || bc.sem.comb_transposed_site == 1;
  const bool shifted = bc.sem.shifted_pre;
  const std::vector<B> attn_norm = exact(p.attn_norm, d), ffn_norm = exact(p.ffn_norm, d);
  auto each = [&](auto fn) {
    par::for_each(N, threads, [&](std::size_t t) {
      const bnd::ModelScope scope(model);
      fn(t);
    });
  };
  auto put = [](std::vector<B>& to, std::size_t t, const std::vector<B>& v) {
    std::copy(v.begin(), v.end(), to.begin() + std::ptrdiff_t(t * v.size()));
  };
  // A norm's backward, or the gradient itself where the Block skips the norm.
  auto norm = [&](const char* name, bool on, const char* in, const std::vector<B>& w, const B* g) {
    std::vector<B> v(g, g + N * d);
    if (on)
      each([&](std::size_t t) {
        put(v, t, rmsnorm_grads(d, cfg.norm_eps, st(in) + t * d, w.data(), g + t * d)[0]);
      });
    return record(name, std::move(v), d);
  };
  // hc_post's gradients at a site: f's, the residual's, post's and comb's.
  struct Post {
    std::vector<B> f, res, post, comb;
  };
  auto post = [&](const ref::Config& k, const char* site, const B* residual, const B* g) {
    Post r{std::vector<B>(N * d), std::vector<B>(N * nd), std::vector<B>(N * n),
           std::vector<B>(N * nn)};
    const std::string s = site;
    each([&](std::size_t t) {
      const Tensors<B> pg = post_grads(k, st((s + ".out").c_str()) + t * d, residual + t * nd,
                                       st((s + ".post").c_str()) + t * n,
                                       st((s + ".comb").c_str()) + t * nn, g + t * nd);
      put(r.f, t, pg[0]);
      put(r.res, t, pg[1]);
      put(r.post, t, pg[2]);
      put(r.comb, t, pg[3]);
    });
    return r;
  };
  // The split's gradient of a site's mixes.
  auto split = [&](const char* name, const char* site, const float* scale, const float* base,
                   const std::vector<B>& up_pre, const Post& pg) {
    std::vector<B> v(N * M);
    const std::string mixes = std::string(site) + ".mixes";
    each([&](std::size_t t) {
      const B* mix = st(mixes.c_str()) + t * M;
      put(v, t,
          split_grads(cfg, scale, base, {mix, mix + M}, &up_pre[t * n], &pg.post[t * n],
                      &pg.comb[t * nn])[0]);
    });
    return record(name, std::move(v), M);
  };
  // The projection's gradient of the streams xs with the other consumers' gradients added.
  auto project = [&](const char* name, const B* xs, const float* fn, const B* g_mix,
                     const std::vector<B>& res, const std::vector<B>& read) {
    std::vector<B> v(N * nd);
    each([&](std::size_t t) {
      TokenGrads unused;
      auto token = [&](const B* from, std::size_t per) {
        return std::vector<B>(from + t * per, from + (t + 1) * per);
      };
      put(v, t,
          projection_grads(cfg, token(xs, nd), fn, token(g_mix, M), unused,
                           {token(res.data(), nd), token(read.data(), nd)}));
    });
    return record(name, std::move(v), nd);
  };
  // hc_pre's gradients: of the streams, and of the reading weights.
  auto read = [&](const B* xs, const B* weights, const B* g, std::vector<B>& dx,
                  std::vector<B>& dw) {
    dx.assign(N * nd, B(0));
    dw.assign(N * n, B(0));
    each([&](std::size_t t) {
      const Tensors<B> gp = pre_grads(cfg, xs + t * nd, weights + t * n, g + t * d);
      put(dx, t, gp[0]);
      put(dw, t, gp[1]);
    });
  };

  // The FFN's site.
  const Post pf = post(cf, "ffn", st("x_mid"), g_out);
  const B* g_fout = record("ffn.grad_out", pf.f, d);
  std::vector<B> v(N * d);
  ref::ffn_backward(cfg, bc, N, st("ffn.normed"), p, chosen.data(), g_fout, v.data());
  const B* g_fnorm = record("ffn.grad_normed", std::move(v), d);
  const B* g_fin = norm("ffn.grad_in", bc.sem.ffn_norm, "ffn.in", ffn_norm, g_fnorm);
  std::vector<B> g_xmid_read, g_read_f;
  read(st("x_mid"), st(shifted ? "attn.pre" : "ffn.pre"), g_fin, g_xmid_read, g_read_f);
  std::vector<B> up_f(g_next, g_next + N * n);
  if (!shifted)
    for (std::size_t i = 0; i < N * n; ++i) up_f[i] = up_f[i] + g_read_f[i];
  const B* g_mix_f = split("ffn.grad_mixes", "ffn", p.ffn_hc_scale, p.ffn_hc_base, up_f, pf);
  const B* g_xmid = project("grad_x_mid", st("x_mid"), p.ffn_hc_fn, g_mix_f, pf.res, g_xmid_read);
  // The attention's site.
  const Post pa = post(ca, "attn", x, g_xmid);
  const B* g_hout = record("attn.grad_out", pa.f, d);
  v.assign(N * d, B(0));
  par::for_each(c.batch, threads, [&](std::size_t q) {
    const bnd::ModelScope scope(model);
    ref::attn_backward(cfg, bc, T, st("attn.normed") + q * T * d, p, g_hout + q * T * d,
                       &v[q * T * d]);
  });
  const B* g_hnorm = record("attn.grad_normed", std::move(v), d);
  const B* g_hin = norm("attn.grad_in", bc.sem.attn_norm, "attn.in", attn_norm, g_hnorm);
  std::vector<B> g_x_read, g_read_a;
  read(x, shifted ? pre_mix : st("attn.pre"), g_hin, g_x_read, g_read_a);
  const B* g_mix_a = split("attn.grad_mixes", "attn", p.attn_hc_scale, p.attn_hc_base,
                           shifted ? g_read_f : g_read_a, pa);
  const B* g_x = project("grad_x", x, p.attn_hc_fn, g_mix_a, pa.res, g_x_read);
  if (!shifted) std::fill(g_read_a.begin(), g_read_a.end(), B(0));  // pre_mix is not read
  const B* g_pre = record("grad_pre_mix", std::move(g_read_a), n);
  return {{g_x, g_x + N * nd}, {g_pre, g_pre + N * n}};
}

// block_backward and stack_backward: the forward in Bounded (its routing the one the kernel's
// must match: where a margin is within its bound the choice is undecided, and so is every
// gradient), then each layer's backward, last to first.
Trace<B> whole_backward_trace(const OpCase& c, unsigned threads, const bnd::Model& model,
                              const Trace<float>* kernel) {
  const bnd::ModelScope scope(model);
  const OpSpec& spec = op_spec(c.op);
  const bool stack = spec.forward == Op::stack;
  const std::size_t N = c.tokens, T = N / c.batch, n = std::size_t(c.cfg.n);
  const std::size_t L = std::size_t(c.block.layers), K = std::size_t(c.block.top_k);
  auto input = [&](const std::string& name) {
    const auto& v = c.input(name).data;
    return std::vector<B>(v.begin(), v.end());
  };
  const std::vector<B> x = input("x");
  std::vector<B> pre0(N * n, B(0));
  if (stack)
    for (std::size_t t = 0; t < N; ++t) pre0[t * n] = B(1);
  else
    pre0 = input("pre_mix");
  std::vector<ref::BlockParams> params;
  for (std::size_t l = 0; l < L; ++l) params.push_back(block_params(c, int(l)));
  Trace<B> fwd;
  std::vector<ref::Routing<B>> routing(L);
  bool undecided = false;
  if (kernel && block_stages_of(c, *kernel)) {
    for (const auto& s : *kernel)
      fwd.push_back({s.name, s.shape, {s.values.begin(), s.values.end()}});
    for (std::size_t l = 0; l < L; ++l) {
      const std::string prefix = stack ? "L" + std::to_string(l) + "." : "";
      for (const B& e : ref::stage_values(fwd, prefix + "ffn.experts"))
        routing[l].chosen.push_back(int(e.v));
    }
  } else {
    if (stack)
      ref::stack_forward(c.cfg, c.block, c.batch, T, x.data(), params,
                         c.param("final_norm/weight").data.data(), fwd, &routing);
    else
      ref::block_forward(c.cfg, c.block, c.batch, T, x.data(), pre0.data(), params[0], fwd, "",
                         &routing[0]);
    for (const auto& r : routing)
      for (std::size_t i = 0; i < r.margin.size(); ++i)
        if (i % K + 1 < std::size_t(c.block.experts) && !(r.margin[i].v > r.margin[i].e))
          undecided = true;
  }
  std::vector<B> g_out = input("upstream_x"), g_next = input("upstream_next_pre_mix");
  Trace<B> trace;
  for (std::size_t l = L; l-- > 0;) {
    const std::string prefix = stack ? "L" + std::to_string(l) + "." : "";
    const std::string below = "L" + std::to_string(l - 1) + ".";
    const B* xl = l == 0 ? x.data() : ref::stage_values(fwd, below + "x_out").data();
    const B* pl = l == 0 ? pre0.data() : ref::stage_values(fwd, below + "next_pre_mix").data();
    LayerGrads g = block_layer_backward(c, params[l], fwd, prefix, xl, pl, routing[l].chosen,
                                        g_out.data(), g_next.data(), kernel, threads, model, trace);
    g_out = std::move(g.x);
    g_next = std::move(g.pre_mix);
  }
  if (stack) {  // the op's output: the first layer's
    Stage<B> first = *std::find_if(trace.begin(), trace.end(),
                                   [](const Stage<B>& s) { return s.name == "L0.grad_x"; });
    first.name = "grad_x";
    trace.push_back(std::move(first));
  }
  if (undecided)
    for (auto& s : trace)
      for (auto& v : s.values) v.e = HUGE_VAL;
  return trace;
}

}  // namespace

bool block_stages_of(const OpCase& c, const Trace<float>& kernel) {
  const OpSpec& spec = op_spec(c.op);
  if (!spec.whole || !spec.backward) return false;
  const bool stack = spec.forward == Op::stack;
  for (int l = 0; l < c.block.layers; ++l) {
    const std::string prefix = stack ? "L" + std::to_string(l) + "." : "";
    for (const auto& t : block_stages()) {
      std::size_t size = c.tokens;
      for (auto s : resolve(t.dims, c.cfg, c.block)) size *= s;
      const auto it = std::find_if(kernel.begin(), kernel.end(), [&](const Stage<float>& s) {
        return s.name == prefix + t.name;
      });
      if (it == kernel.end() || it->values.size() != size) return false;
      if (t.name == "ffn.experts")
        for (float e : it->values)
          if (!(e >= 0 && e < float(c.block.experts)) || e != std::floor(e)) return false;
    }
  }
  return true;
}

Trace<bnd::Bounded> backward_trace(const OpCase& c, unsigned threads, const bnd::Model& model,
                                   const Trace<float>* kernel) {
  const OpSpec& spec = op_spec(c.op);
  if (!spec.backward) throw std::logic_error("backward_trace: " + spec.name + " is a forward op");
  need_backward_declaration(c.op, c.precision);
  if (spec.whole) return whole_backward_trace(c, threads, model, kernel);
  const OpSpec& fwd = op_spec(spec.forward);
  const std::size_t T = c.tokens, nin = fwd.inputs.size();
  Trace<bnd::Bounded> trace;
  for (const auto& t : spec.outputs) {
    std::vector<std::size_t> shape = resolve(t.dims, c.cfg);
    if (t.per_token) shape.insert(shape.begin(), T);
    std::size_t size = 1;
    for (auto s : shape) size *= s;
    trace.push_back({t.name, shape, std::vector<bnd::Bounded>(size)});
  }
  const std::size_t nparams = fwd.params.size();
  // Params' gradients: per-token contributions summed in token order, their bounds and
  // magnitudes alongside, in chunks of tokens (the result does not depend on the thread count).
  std::vector<std::vector<double>> sum(nparams), bound(nparams), magnitude(nparams);
  for (std::size_t p = 0; p < nparams; ++p) {
    const std::size_t size = trace[nin + p].values.size();
    sum[p].assign(size, 0);
    bound[p].assign(size, 0);
    magnitude[p].assign(size, 0);
  }
  constexpr std::size_t kChunk = 64;
  std::vector<TokenGrads> grads(std::min(T, kChunk));
  for (std::size_t t0 = 0; t0 < T; t0 += kChunk) {
    const std::size_t nt = std::min(kChunk, T - t0);
    par::for_each(nt, threads, [&](std::size_t k) { grads[k] = composed_token(c, t0 + k, model); });
    for (std::size_t k = 0; k < nt; ++k)
      for (std::size_t i = 0; i < nin; ++i) {
        const std::vector<B>& g = grads[k].grad[i];
        std::copy(g.begin(), g.end(),
                  trace[i].values.begin() + std::ptrdiff_t((t0 + k) * g.size()));
      }
    // Each param's elements in parallel, the tokens in order.
    for (std::size_t p = 0; p < nparams; ++p) {
      const std::size_t size = sum[p].size();
      const bool outer = grads[0].grad[nin + p].empty();
      const std::size_t cols = outer ? grads[0].fn_col.size() : size;
      par::for_each(size / cols, threads, [&](std::size_t row) {
        const bnd::ModelScope fp32(bnd::fp32());
        constexpr std::size_t kBlock = 1024;  // the sums of a block stay in the L1 cache
        const std::size_t group = outer ? grads[0].fn_group : cols;
        for (std::size_t e0 = row * cols; e0 < (row + 1) * cols;) {
          const std::size_t col = e0 - row * cols;
          const std::size_t len = std::min(kBlock, group - col % group);  // within one group
          for (std::size_t k = 0; k < nt; ++k) {
            if (outer) {
              bnd::accumulate_products(grads[k].fn_row[col / group][row], &grads[k].fn_col[col],
                                       len, &sum[p][e0], &bound[p][e0], &magnitude[p][e0]);
              continue;
            }
            for (std::size_t e = e0; e < e0 + len; ++e) {
              const B& v = grads[k].grad[nin + p][e];
              sum[p][e] += v.v;
              bound[p][e] += v.e;
              magnitude[p][e] += std::fabs(v.v);
            }
          }
          e0 += len;
        }
      });
    }
  }
  // A stream tensor's gradient is stored as the streams are.
  bnd::Declaration stores;
  stores.streams = c.precision.decl.streams;
  if (stores.streams != bnd::Format::fp32) {
    const bnd::ModelScope scope(bnd::model_for(stores, "streams"));
    for (std::size_t i = 0; i < nin; ++i)
      if (fwd.inputs[i].stream())
        for (B& v : trace[i].values) v = bnd::stored(v);
  }
  // The kernel adds its contributions, each within b_t of c_t: gamma of sum |c_t| + b_t.
  const bnd::Model fp32 = bnd::fp32();
  const double gamma = bnd::gamma(double(T > 1 ? T - 1 : 0), fp32.u);
  for (std::size_t p = 0; p < nparams; ++p)
    for (std::size_t e = 0; e < sum[p].size(); ++e) {
      const double m = magnitude[p][e] + bound[p][e];
      trace[nin + p].values[e] = bnd::Bounded(
          sum[p][e], m > fp32.big ? HUGE_VAL : bound[p][e] + gamma * m + double(T) * fp32.eta);
    }
  return trace;
}

}  // namespace mhc::oracles
