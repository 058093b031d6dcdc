// The backward ops (OpSpec::backward): their values derived from the forward reference by the
// reverse-mode Scalar, and per element a bound on an fp32 backward kernel's error composed piece
// by piece (docs/semantics.md, "The backward ops").
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "mhc/oracles/ops.hpp"
#include "mhc/oracles/reverse.hpp"
#include "mhc/reference/mhc.hpp"

namespace mhc::oracles {

template <class V>
using Tensors = std::vector<std::vector<V>>;

// A forward op on one token in any Scalar V: at holds the op's inputs (one token's) and then its
// params, in the op table's order; returns its outputs in the table's order, unrounded (the
// backward ops are judged under fp32 declarations).
template <class V>
Tensors<V> forward_piece(Op op, const ref::Config& c, Tensors<V>& at) {
  const std::size_t n = std::size_t(c.n), d = std::size_t(c.d), nd = n * d;
  const std::size_t M = std::size_t(c.mix());
  auto split = [&](const V* mix, const V* scale, const V* base, Tensors<V>& out) {
    out.emplace_back(n);
    out.emplace_back(n);
    out.emplace_back(n * n);
    const std::size_t k = out.size();
    ref::split_sinkhorn(c, mix, scale, base, out[k - 3].data(), out[k - 2].data(),
                        out[k - 1].data());
  };
  Tensors<V> out;
  switch (op) {
    case Op::split_sinkhorn:
      split(at[0].data(), at[1].data(), at[2].data(), out);
      return out;
    case Op::mixes:
      out.emplace_back(M);
      ref::mixes(c, 1, at[0].data(), at[1].data(), out[0].data());
      split(out[0].data(), at[2].data(), at[3].data(), out);
      return out;
    case Op::pre:
      out.emplace_back(d);
      ref::hc_pre(c, at[0].data(), at[1].data(), out[0].data());
      return out;
    case Op::post:
      out.emplace_back(nd);
      ref::hc_post(c, at[0].data(), at[1].data(), at[2].data(), at[3].data(), out[0].data());
      return out;
    case Op::rmsnorm:
      out.emplace_back(d);
      ref::rmsnorm(d, c.norm_eps, at[0].data(), at[1].data(), out[0].data());
      return out;
    case Op::boundary:  // f, residual, post, comb, pre_mix; hc_fn, hc_scale, hc_base
      out.emplace_back(nd);
      ref::hc_post(c, at[0].data(), at[1].data(), at[2].data(), at[3].data(), out[0].data());
      out.emplace_back(M);
      ref::mixes(c, 1, out[0].data(), at[5].data(), out[1].data());
      split(out[1].data(), at[6].data(), at[7].data(), out);
      out.emplace_back(d);
      ref::hc_pre(c, out[0].data(), at[4].data(), out[5].data());
      return out;
    default:
      throw std::logic_error("forward_piece: not a piece");
  }
}

// The softmax's gradient: as kernels write it, p_i (g_i - sum_k g_k p_k), or by differences,
// p_i sum_k (g_i - g_k) p_k. The two agree where the p sum to 1, but in a saturated row the first
// loses the largest entry's gradient: its p rounds to 1 and g_i - sum_k g_k p_k to 0, though the
// exact value, sum_k (g_i - g_k) p_k over the tiny others, is not (an autograd through the max
// subtraction keeps it, and so do differences).
enum class SoftmaxGradient { product, differences };

// The split's backward by closed forms, as kernels write it: the forward with every Sinkhorn
// step's output and denominators stored (or recomputed: the same values), then each step undone
// (a normalisation y = x / den: dx = (g - sum_line g y) / den; p + eps and the softmax, in the
// form given; the sigmoids: s (1 - s)). Returns d mixes, d hc_scale, d hc_base.
// Its sums are sum() and dot() of F: on the tape, bounded for every order.
template <class F>
Tensors<F> split_backward_closed(const ref::Config& c, const F* m, const F* s, const F* b,
                                 const F* g_pre, const F* g_post, const F* g_comb,
                                 SoftmaxGradient softmax = SoftmaxGradient::product) {
  using ref::dot;
  using ref::max_of;
  using ref::sum;
  using std::exp;
  const int n = c.n;
  const std::size_t un = std::size_t(n);
  const F eps = F(c.hc_eps);
  const std::size_t nn = un * un, M = std::size_t(c.mix());
  std::vector<F> dm(M, F(0)), ds(3, F(0)), db(M, F(0)), dz(2 * un), ms(2 * un);
  for (std::size_t w = 0; w < 2; ++w) {  // pre = sigmoid(z) + eps, post = 2 sigmoid(z)
    for (std::size_t j = 0; j < un; ++j) {
      const std::size_t i = w * un + j;
      const F z = m[i] * s[w] + b[i], sg = F(1) / (F(1) + exp(-z));
      dz[i] = (w ? g_post[j] * F(2) : g_pre[j]) * sg * (F(1) - sg);
      dm[i] = dz[i] * s[w];
      db[i] = dz[i];
    }
    ds[w] = dot(&dz[w * un], &m[w * un], un);
  }
  std::vector<F> P(nn), C(nn), line(un), gline(un);
  for (std::size_t j = 0; j < un; ++j) {
    F* p = &P[j * un];
    for (std::size_t k = 0; k < un; ++k)
      p[k] = m[2 * un + j * un + k] * s[2] + b[2 * un + j * un + k];
    F mx = p[0];
    for (std::size_t k = 1; k < un; ++k) mx = max_of(mx, p[k]);
    for (std::size_t k = 0; k < un; ++k) p[k] = exp(p[k] - mx);
    const F rs = sum(p, un);
    for (std::size_t k = 0; k < un; ++k) p[k] = p[k] / rs;
  }
  for (std::size_t i = 0; i < nn; ++i) C[i] = P[i] + eps;
  struct Step {
    bool rows;
    std::vector<F> y, den;
  };
  std::vector<Step> steps;
  auto at = [un](bool rows, std::size_t a, std::size_t e) {
    return rows ? a * un + e : e * un + a;
  };
  auto normalise = [&](bool rows) {
    Step st{rows, {}, std::vector<F>(un)};
    for (std::size_t a = 0; a < un; ++a) {
      for (std::size_t e = 0; e < un; ++e) line[e] = C[at(rows, a, e)];
      st.den[a] = sum(line.data(), un) + eps;
      for (std::size_t e = 0; e < un; ++e) C[at(rows, a, e)] = C[at(rows, a, e)] / st.den[a];
    }
    st.y = C;
    steps.push_back(std::move(st));
  };
  normalise(false);
  for (int it = 1; it < c.iters; ++it) {
    normalise(true);
    normalise(false);
  }
  std::vector<F> G(g_comb, g_comb + nn);
  for (std::size_t k = steps.size(); k-- > 0;) {
    const Step& st = steps[k];
    for (std::size_t a = 0; a < un; ++a) {
      for (std::size_t e = 0; e < un; ++e) {
        line[e] = G[at(st.rows, a, e)];
        gline[e] = st.y[at(st.rows, a, e)];
      }
      const F gy = dot(line.data(), gline.data(), un);
      for (std::size_t e = 0; e < un; ++e)
        G[at(st.rows, a, e)] = (G[at(st.rows, a, e)] - gy) / st.den[a];
    }
  }
  std::vector<F> dl(nn);
  for (std::size_t j = 0; j < un; ++j) {
    const std::size_t r = j * un;
    const F gp = dot(&G[r], &P[r], un);
    for (std::size_t k = 0; k < un; ++k) {
      const std::size_t i = r + k, to = 2 * un + i;
      if (softmax == SoftmaxGradient::product) {
        dl[i] = P[i] * (G[i] - gp);
      } else {
        for (std::size_t e = 0; e < un; ++e) line[e] = G[i] - G[r + e];
        dl[i] = P[i] * dot(line.data(), &P[r], un);
      }
      dm[to] = dl[i] * s[2];
      db[to] = dl[i];
    }
  }
  ds[2] = dot(dl.data(), &m[2 * un], nn);
  return {dm, ds, db};
}

// Token t of a backward case in V: at, the forward op's inputs (that token's) and params, in
// forward_piece's order; up, the upstream gradient of each forward output (that token's).
template <class V>
void token_tensors(const OpCase& c, std::size_t t, Tensors<V>& at, Tensors<V>& up) {
  const OpSpec& fwd = op_spec(op_spec(c.op).forward);
  auto token = [&](const std::string& name) {
    const auto& v = c.input(name).data;
    const std::size_t per = v.size() / c.tokens;
    return std::vector<V>(v.begin() + std::ptrdiff_t(t * per),
                          v.begin() + std::ptrdiff_t((t + 1) * per));
  };
  at.clear();
  up.clear();
  for (const auto& i : fwd.inputs) at.push_back(token(i.name));
  for (const auto& p : fwd.params)
    at.emplace_back(c.param(p.name).data.begin(), c.param(p.name).data.end());
  for (const auto& o : fwd.outputs) up.push_back(token("upstream_" + o.name));
}

// The oracle of a backward op: per element, the gradient in double and a bound on an fp32
// kernel's error, composed piece by piece: the split's by the larger of the first-order bounds of
// the recorded and the closed-form programs, the other pieces' by the bound-carrying Scalar. A
// param's gradient sums per-token contributions: their bounds add, and the sum over tokens in any
// order (per-block partial sums, atomics) adds gamma_{T-1} sum_t (|c_t| + b_t).
// model: the fp32 model of the bound-carrying pieces (probabilistic: their long reductions by
// gamma~_n where the premise holds); the split's first-order bounds and the sums over tokens stay
// rigorous.
//
// block_backward, stack_backward: anchored on the kernel's forward when its Trace holds every
// Block stage (block_stages_of): the backward is then judged from the activations the kernel
// saved, exact, with the experts it chose, as the forward's stages are judged from their own
// inputs; without them, from the forward in Bounded (bounds compound through the sublayers).
Trace<bnd::Bounded> backward_trace(const OpCase& c, unsigned threads = 0,
                                   const bnd::Model& model = bnd::fp32(),
                                   const Trace<float>* kernel = nullptr);
// Whether a block_backward or stack_backward kernel's Trace holds its forward: every layer's
// Block stages at the case's sizes, and experts the Block has.
bool block_stages_of(const OpCase& c, const Trace<float>& kernel);

}  // namespace mhc::oracles
