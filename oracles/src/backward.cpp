#include "mhc/oracles/backward.hpp"

#include <stdexcept>
#include <string>
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
                             const Tensors<double>& up, const Tensors<double>& error) {
  rev::Gradient g = rev::first_order_vjp(
      [&](auto& x) {
        using V = std::decay_t<decltype(x[0][0])>;
        return forward_piece<V>(Op::split_sinkhorn, c, x);
      },
      at, up, error);
  rev::Tape<double> tape;
  Tensors<rev::Var<double>> x(at.size()), u(up.size());
  for (std::size_t k = 0; k < at.size(); ++k)
    for (std::size_t i = 0; i < at[k].size(); ++i)
      x[k].push_back(tape.input(at[k][i], error[k][i]));
  for (std::size_t k = 0; k < up.size(); ++k)
    for (double v : up[k]) u[k].emplace_back(v);
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

// The split's gradients (mixes, hc_scale, hc_base) at mixes known to within their bounds.
Tensors<B> split_grads(const OpCase& c, const std::vector<B>& mix, const float* up_pre,
                       const float* up_post, const float* up_comb) {
  const std::size_t n = std::size_t(c.cfg.n), M = mix.size();
  const auto& scale = c.param("hc_scale").data;
  const auto& base = c.param("hc_base").data;
  Tensors<double> at{{}, {scale.begin(), scale.end()}, {base.begin(), base.end()}};
  Tensors<double> error{{}, std::vector<double>(3, 0), std::vector<double>(M, 0)};
  for (const B& m : mix) {
    at[0].push_back(m.v);
    error[0].push_back(m.e);
  }
  const Tensors<double> up{
      {up_pre, up_pre + n}, {up_post, up_post + n}, {up_comb, up_comb + n * n}};
  const rev::Gradient g = split_gradient(c.cfg, at, up, error);
  Tensors<B> out(3);
  for (std::size_t k = 0; k < 3; ++k)
    for (std::size_t i = 0; i < g.value[k].size(); ++i)
      out[k].emplace_back(g.value[k][i], g.bound[k][i]);
  // The mixes' bounds are not small where the projection cancels (s e up to 0.9 on generated
  // cases), and first order misses the curvature: pre's and post's entries depend on their own
  // mix alone, through s(1 - s) of z = m s_w + b, whose move over [z - s_w e, z + s_w e] is
  // bounded exactly (its one maximum is at z = 0) and added. (The comb's is linearised, as the
  // forward's Sinkhorn bound is.)
  const ref::Semantics& sem = c.cfg.sem;
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
      const double G =
          std::fabs(w ? (sem.post_factor2 ? 2.0 : 1.0) * double(up_post[j]) : double(up_pre[j]));
      const double move = G * std::max(top - mid, mid - std::min(lo, hi));  // of d z
      out[0][i].e += move * sc;
      out[2][i].e += move;
      out[1][ws].e += move * (std::fabs(mix[i].v) + mix[i].e) + std::fabs(out[2][i].v) * mix[i].e;
    }
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
std::vector<B> projection_grads(const ref::Config& c, const std::vector<B>& x, const float* W,
                                const std::vector<B>& g, TokenGrads& t,
                                std::vector<std::vector<B>> extra = {}) {
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
    }
  }
  t.fn_col = xp;
  return permute(std::move(dx), true);
}

// hc_post's gradients (f, residual, post, comb) for the gradient g of its output.
Tensors<B> post_grads(const ref::Config& c, const float* f, const float* res, const float* post,
                      const float* comb, const std::vector<B>& g) {
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  Tensors<B> out{std::vector<B>(d), std::vector<B>(n * d), std::vector<B>(n),
                 std::vector<B>(n * n)};
  std::vector<const B*> rows(n);
  for (std::size_t k = 0; k < n; ++k) rows[k] = g.data() + k * d;
  bnd::lincomb(post, rows.data(), n, d, out[0].data());
  // C[j, k] carries stream j into k (comb[k n + j] where diagnosis tries it transposed).
  const bool tr = c.sem.comb_transposed;
  for (std::size_t j = 0; j < n; ++j) {
    std::vector<float> w(n);
    for (std::size_t k = 0; k < n; ++k) w[k] = comb[tr ? k * n + j : j * n + k];
    bnd::lincomb(w.data(), rows.data(), n, d, out[1].data() + j * d);
  }
  const std::vector<B> fb = exact(f, d), rb = exact(res, n * d);
  for (std::size_t k = 0; k < n; ++k) {
    out[2][k] = bnd::dot(fb.data(), rows[k], d);
    for (std::size_t j = 0; j < n; ++j)
      out[3][tr ? k * n + j : j * n + k] = bnd::dot(rb.data() + j * d, rows[k], d);
  }
  return out;
}

// hc_pre's gradients (x, pre_mix) for the gradient g of its output.
Tensors<B> pre_grads(const ref::Config& c, const std::vector<B>& x, const float* p,
                     const float* g) {
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d);
  Tensors<B> out{std::vector<B>(n * d), std::vector<B>(n)};
  const std::vector<B> gb = exact(g, d);
  for (std::size_t j = 0; j < n; ++j) {
    for (std::size_t i = 0; i < d; ++i) out[0][j * d + i] = B(p[j]) * gb[i];
    out[1][j] = bnd::dot(gb.data(), x.data() + j * d, d);
  }
  return out;
}

TokenGrads composed_token(const OpCase& c, std::size_t t, const bnd::Model& model) {
  const bnd::ModelScope scope(model);
  const ref::Config& cfg = c.cfg;
  const std::size_t n = std::size_t(cfg.n), d = std::size_t(cfg.d), nd = n * d;
  const std::size_t M = std::size_t(cfg.mix());
  auto in = [&](const std::string& name) {
    const auto& v = c.input(name).data;
    return v.data() + t * (v.size() / c.tokens);
  };
  auto param = [&](const std::string& name) { return c.param(name).data.data(); };
  TokenGrads tg;
  switch (op_spec(c.op).forward) {
    case Op::split_sinkhorn:
      tg.grad = split_grads(c, exact(in("mixes"), M), in("upstream_pre"), in("upstream_post"),
                            in("upstream_comb"));
      break;
    case Op::mixes: {
      const std::vector<B> x = exact(in("x"), nd);
      std::vector<B> mix(M);
      ref::mixes(cfg, x.data(), param("hc_fn"), mix.data());
      Tensors<B> s =
          split_grads(c, mix, in("upstream_pre"), in("upstream_post"), in("upstream_comb"));
      for (std::size_t a = 0; a < M; ++a) s[0][a] = s[0][a] + B(in("upstream_mixes")[a]);
      tg.grad.push_back(projection_grads(cfg, x, param("hc_fn"), s[0], tg));
      tg.grad.emplace_back();
      tg.grad.push_back(std::move(s[1]));
      tg.grad.push_back(std::move(s[2]));
      break;
    }
    case Op::pre:
      tg.grad = pre_grads(cfg, exact(in("x"), nd), in("pre_mix"), in("upstream_y"));
      break;
    case Op::post: {
      const std::vector<B> g = exact(in("upstream_y"), nd);
      tg.grad = post_grads(cfg, in("f"), in("residual"), in("post"), in("comb"), g);
      break;
    }
    case Op::rmsnorm: {
      const std::vector<B> x = exact(in("x"), d), w = exact(param("weight"), d);
      const std::vector<B> g = exact(in("upstream_y"), d);
      const B r = ref::rms_scale(x.data(), d, cfg.norm_eps);
      std::vector<B> wg(d), dx(d), dw(d);
      for (std::size_t i = 0; i < d; ++i) wg[i] = w[i] * g[i];
      const B gwx = bnd::dot(wg.data(), x.data(), d), s = r * r * r / B(double(d));
      for (std::size_t i = 0; i < d; ++i) {
        dx[i] = r * wg[i] - s * x[i] * gwx;
        dw[i] = g[i] * x[i] * r;
      }
      tg.grad.push_back(std::move(dx));
      tg.grad.push_back(std::move(dw));
      break;
    }
    case Op::boundary: {
      const float *f = in("f"), *res = in("residual"), *post = in("post"), *comb = in("comb");
      std::vector<B> x(nd), mix(M);
      ref::hc_post(cfg, f, res, post, comb, x.data());
      ref::mixes(cfg, x.data(), param("hc_fn"), mix.data());
      Tensors<B> s =
          split_grads(c, mix, in("upstream_pre"), in("upstream_post"), in("upstream_comb"));
      for (std::size_t a = 0; a < M; ++a) s[0][a] = s[0][a] + B(in("upstream_mixes")[a]);
      Tensors<B> gp = pre_grads(cfg, x, in("pre_mix"), in("upstream_y"));
      const std::vector<B> gx =
          projection_grads(cfg, x, param("hc_fn"), s[0], tg, {exact(in("upstream_x"), nd), gp[0]});
      tg.grad = post_grads(cfg, f, res, post, comb, gx);
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

}  // namespace

Trace<bnd::Bounded> backward_trace(const OpCase& c, unsigned threads, const bnd::Model& model) {
  const OpSpec& spec = op_spec(c.op);
  if (!spec.backward) throw std::logic_error("backward_trace: " + spec.name + " is a forward op");
  if (c.precision != Precision::fp32())
    throw std::invalid_argument(spec.name +
                                ": backward ops are judged under the fp32 declaration (" +
                                precision_name(c.precision) + " given)");
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
