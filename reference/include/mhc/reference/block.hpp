// The whole Block (docs/semantics.md, "The Block"), its stand-in sublayers ("Stand-in
// sublayers") and a stack of Blocks ("A stack of Blocks"), generic over the Scalar S. Tokens are
// [B, T] (B sequences of T positions); attention is causal within a sequence. Every stage lands in
// a Trace under the names of docs/semantics.md, "Stage names" (attn.mixes ... x_out,
// next_pre_mix), prefixed per layer in a stack.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <deque>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "mhc/reference/mhc.hpp"

namespace mhc::ref {

// Block-level deviations (defaults: the semantics), for the diagnosis and the self-test.
struct BlockSemantics {
  bool shifted_pre = true;        // each sublayer reads with the weights the previous one computed
  bool causal = true;             // attention over t' <= t
  bool attn_norm = true;          // RMSNorm before attention
  bool ffn_norm = true;           // RMSNorm before the FFN
  bool normalise_routing = true;  // w_e = route_scale * score_e / sum of the chosen scores
  int comb_transposed_site = -1;  // 0: attn, 1: ffn: that site's hc_post reads C[k,j]

  bool is_default() const { return name() == "deepseek"; }
  std::string name() const {
    std::string s;
    auto add = [&s](const char* p) { s += (s.empty() ? "" : "+") + std::string(p); };
    if (!shifted_pre) add("pre_not_shifted");
    if (!causal) add("attention_not_causal");
    if (!attn_norm) add("attn_norm_skipped");
    if (!ffn_norm) add("ffn_norm_skipped");
    if (!normalise_routing) add("routing_not_normalised");
    if (comb_transposed_site == 0) add("comb_transposed_at_attn");
    if (comb_transposed_site == 1) add("comb_transposed_at_ffn");
    return s.empty() ? "deepseek" : s;
  }
};

struct BlockConfig {
  int heads = 8, head_dim = 64;             // attention: H heads of width dh
  int experts = 8, top_k = 2, inter = 512;  // MoE: E experts, k chosen, hidden width I
  double route_scale = 1.0;
  int layers = 1;  // Blocks in a stack
  BlockSemantics sem;
  // The sublayers' outputs are given, not computed: captured from a model whose attention and
  // FFN the reference does not implement. Only the mHC stages around them are evaluated.
  bool captured_sublayers = false;
};

inline std::string validate(const Config& c, const BlockConfig& b) {
  if (auto why = validate(c); !why.empty()) return why;
  if (b.heads < 1) return "heads must be >= 1";
  if (b.head_dim < 1) return "head_dim must be >= 1";
  if (b.experts < 1) return "experts must be >= 1";
  if (b.top_k < 1 || b.top_k > b.experts) return "top_k must be in 1..experts";
  if (b.inter < 1) return "inter must be >= 1";
  if (!(b.route_scale > 0) || !std::isfinite(b.route_scale)) return "route_scale must be > 0";
  if (b.layers < 1) return "layers must be >= 1";
  return {};
}

// One Block's parameters, fp32, with the names of fixtures/README.md.
struct BlockParams {
  const float *attn_hc_fn, *attn_hc_base, *attn_hc_scale;
  const float *ffn_hc_fn, *ffn_hc_base, *ffn_hc_scale;
  const float *attn_norm, *ffn_norm;               // [d]
  const float *wq, *wk, *wv, *wo;                  // [H*dh, d] x 3, [d, H*dh]
  const float *router, *router_bias;               // [E, d], [E]
  const float *w1, *w2, *w3;                       // [E, I, d], [E, d, I], [E, I, d]
  const float *shared_w1, *shared_w2, *shared_w3;  // [I, d], [d, I], [I, d]
};

// The routing of the FFN's tokens: the chosen experts (ascending selection rank), and for each
// token the margins between the j-th and the (j+1)-th largest score + bias, j = 1..k (the last 0
// when k = E): the choice and its order.
template <class S>
struct Routing {
  std::vector<int> chosen;  // [N, k]
  std::vector<S> margin;    // [N, k]
};

template <class S>
std::vector<S>& add_stage(std::vector<Stage<S>>& trace, const std::string& name,
                          std::vector<std::size_t> shape) {
  std::size_t size = 1;
  for (auto s : shape) size *= s;
  trace.push_back({name, std::move(shape), std::vector<S>(size)});
  return trace.back().values;
}

// One row of a head's attention weights: P[u] = softmax over u < upto of (q . k_u) / scale, the
// max subtracted; k_u = k + u * stride.
template <class S>
void attn_row(const S* q, const S* k, std::size_t stride, std::size_t dh, std::size_t upto,
              const S& scale, S* P) {
  using std::exp;
  for (std::size_t u = 0; u < upto; ++u) P[u] = dot(q, k + u * stride, dh) / scale;
  S mx = P[0];
  for (std::size_t u = 1; u < upto; ++u)
    if (P[u] > mx) mx = P[u];
  for (std::size_t u = 0; u < upto; ++u) P[u] = exp(P[u] - mx);
  const S den = sum(P, upto);
  for (std::size_t u = 0; u < upto; ++u) P[u] = P[u] / den;
}

// The queries, keys and values of one sequence h [T, d]: [T, H dh] each.
template <class S>
void attn_qkv(const Config& c, const BlockConfig& b, std::size_t T, const S* h,
              const BlockParams& p, std::vector<S>& q, std::vector<S>& k, std::vector<S>& v) {
  const std::size_t d = std::size_t(c.d), HD = std::size_t(b.heads) * std::size_t(b.head_dim);
  using Row = std::pair<std::vector<S>*, const float*>;
  for (const auto& [x, W] : {Row{&q, p.wq}, Row{&k, p.wk}, Row{&v, p.wv}}) {
    x->assign(T * HD, S(0));
    project(h, T, W, HD, d, x->data());
  }
}

// Causal multi-head softmax attention over one sequence: h [T, d] -> out [T, d].
template <class S>
void attn(const Config& c, const BlockConfig& b, std::size_t T, const S* h, const BlockParams& p,
          S* out) {
  const std::size_t d = std::size_t(c.d), H = std::size_t(b.heads), dh = std::size_t(b.head_dim);
  const std::size_t HD = H * dh;
  std::vector<S> q, k, v, o(T * HD);
  attn_qkv(c, b, T, h, p, q, k, v);
  const S scale = S(std::sqrt(double(dh)));
  std::vector<S> e(T);
  std::vector<const S*> rows(T);
  std::vector<std::vector<S>> vh(T, std::vector<S>(dh));
  for (std::size_t hd = 0; hd < H; ++hd) {
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t i = 0; i < dh; ++i) vh[t][i] = v[t * HD + hd * dh + i];
    for (std::size_t t = 0; t < T; ++t) {
      const std::size_t upto = b.sem.causal ? t + 1 : T;
      attn_row(&q[t * HD + hd * dh], &k[hd * dh], HD, dh, upto, scale, e.data());
      for (std::size_t u = 0; u < upto; ++u) rows[u] = vh[u].data();
      lincomb(e.data(), rows.data(), upto, dh, &o[t * HD + hd * dh]);
    }
  }
  project(o.data(), T, p.wo, d, HD, out);
}

// One SwiGLU expert: W2 (silu(W1 h) * (W3 h)) for the token h [d] -> out [d].
template <class S>
void expert(const Config& c, const BlockConfig& b, const S* h, const float* w1, const float* w2,
            const float* w3, S* out) {
  const std::size_t d = std::size_t(c.d), I = std::size_t(b.inter);
  std::vector<S> a(I), g(I);
  project(h, 1, w1, I, d, a.data());
  project(h, 1, w3, I, d, g.data());
  for (std::size_t i = 0; i < I; ++i) a[i] = a[i] * sigmoid(a[i]) * g[i];
  project(a.data(), 1, w2, d, I, out);
}

// The routed MoE with a shared expert, for N tokens h [N, d] -> out [N, d]. Selection by score +
// bias, ties to the lower expert; forced (when not null) gives the experts to use per token
// (-1 entries: the token's own choice), as a kernel reported them.
template <class S>
void ffn(const Config& c, const BlockConfig& b, std::size_t N, const S* h, const BlockParams& p,
         S* out, Routing<S>& routing, const int* forced = nullptr) {
  const std::size_t d = std::size_t(c.d), E = std::size_t(b.experts), K = std::size_t(b.top_k);
  const std::size_t I = std::size_t(b.inter);
  routing.chosen.assign(N * K, 0);
  routing.margin.assign(N * K, S(0));
  std::vector<S> logit(E), score(E), sel(E), res((K + 1) * d), w(K + 1);
  std::vector<const S*> rows(K + 1);
  std::vector<std::size_t> order(E);
  for (std::size_t t = 0; t < N; ++t) {
    const S* ht = h + t * d;
    project(ht, 1, p.router, E, d, logit.data());
    for (std::size_t e = 0; e < E; ++e) {
      score[e] = sigmoid(logit[e]);
      sel[e] = score[e] + S(p.router_bias[e]);
    }
    std::iota(order.begin(), order.end(), std::size_t(0));
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t x, std::size_t y) { return sel[x] > sel[y]; });
    // ffn.experts lists the choice in selection order: every gap down to the (k+1)-th decides it.
    for (std::size_t j = 0; j < K && j + 1 < E; ++j)
      routing.margin[t * K + j] = sel[order[j]] - sel[order[j + 1]];
    int* chosen = &routing.chosen[t * K];
    for (std::size_t j = 0; j < K; ++j) chosen[j] = int(order[j]);
    if (forced && forced[t * K] >= 0)
      for (std::size_t j = 0; j < K; ++j) chosen[j] = forced[t * K + j];
    S total(0);
    for (std::size_t j = 0; j < K; ++j)
      total = j == 0 ? score[std::size_t(chosen[0])] : total + score[std::size_t(chosen[j])];
    for (std::size_t j = 0; j < K; ++j) {
      const std::size_t e = std::size_t(chosen[j]);
      w[j] = b.sem.normalise_routing ? S(b.route_scale) * score[e] / total
                                     : S(b.route_scale) * score[e];
      expert(c, b, ht, p.w1 + e * I * d, p.w2 + e * d * I, p.w3 + e * I * d, &res[j * d]);
      rows[j] = &res[j * d];
    }
    expert(c, b, ht, p.shared_w1, p.shared_w2, p.shared_w3, &res[K * d]);
    w[K] = S(1);
    rows[K] = &res[K * d];
    lincomb(w.data(), rows.data(), K + 1, d, out + t * d);
  }
}

// The sublayers' backward (docs/semantics.md, "The Block's backward"): closed forms of the
// gradient of a sublayer's input h for the gradient g of its output, the weights fixed (their
// gradients are not taken) and the MoE's choice of experts given. Every sum is one call of sum(),
// dot(), project() or lincomb(), so that a bound-carrying Scalar bounds it for every order.

// W^T of a [rows, cols] matrix: the backward's projections read the weights transposed.
inline std::vector<float> transposed(const float* W, std::size_t rows, std::size_t cols) {
  std::vector<float> t(rows * cols);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t i = 0; i < cols; ++i) t[i * rows + r] = W[r * cols + i];
  return t;
}

// [W_0^T | W_1^T | ...] of [rows, cols] matrices: [cols, k rows], so that the gradients reaching
// h through k projections are one reduction over their k rows terms.
inline std::vector<float> stacked_transposed(const std::vector<const float*>& Ws, std::size_t rows,
                                             std::size_t cols) {
  const std::size_t k = Ws.size();
  std::vector<float> t(cols * k * rows);
  for (std::size_t m = 0; m < k; ++m)
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t i = 0; i < cols; ++i) t[i * k * rows + m * rows + r] = Ws[m][r * cols + i];
  return t;
}

// attn() on one sequence, backward: per head, with P the softmax and o = P v,
// d v_u = sum_t P_tu d o_t, d s_tu = P_tu (d o_t . v_u - sum_u' P_tu' d o_t . v_u') / sqrt(dh),
// d q_t = sum_u d s_tu k_u, d k_u = sum_t d s_tu q_t, d o = Wo^T g;
// d h = Wq^T d q + Wk^T d k + Wv^T d v.
template <class S>
void attn_backward(const Config& c, const BlockConfig& b, std::size_t T, const S* h,
                   const BlockParams& p, const S* g, S* dh) {
  const std::size_t d = std::size_t(c.d), H = std::size_t(b.heads), dk = std::size_t(b.head_dim);
  const std::size_t HD = H * dk;
  std::vector<S> q, k, v, go(T * HD);
  attn_qkv(c, b, T, h, p, q, k, v);
  const std::vector<float> woT = transposed(p.wo, d, HD);
  project(g, T, woT.data(), HD, d, go.data());
  std::vector<S> grad(T * 3 * HD, S(0));  // per token [d q | d k | d v]
  const S scale = S(std::sqrt(double(dk)));
  std::vector<S> P(T * T, S(0)), D(T * T, S(0)), dp(T), w(T);
  std::vector<const S*> rows(T);
  for (std::size_t hd = 0; hd < H; ++hd) {
    const std::size_t o = hd * dk;
    for (std::size_t t = 0; t < T; ++t) {
      const std::size_t upto = b.sem.causal ? t + 1 : T;
      attn_row(&q[t * HD + o], &k[o], HD, dk, upto, scale, &P[t * T]);
      for (std::size_t u = 0; u < upto; ++u) dp[u] = dot(&go[t * HD + o], &v[u * HD + o], dk);
      const S gp = dot(&P[t * T], dp.data(), upto);
      for (std::size_t u = 0; u < upto; ++u) {
        D[t * T + u] = P[t * T + u] * (dp[u] - gp) / scale;
        rows[u] = &k[u * HD + o];
      }
      lincomb(&D[t * T], rows.data(), upto, dk, &grad[t * 3 * HD + o]);
    }
    for (std::size_t u = 0; u < T; ++u) {
      const std::size_t from = b.sem.causal ? u : 0, m = T - from;
      for (std::size_t t = from; t < T; ++t) {
        w[t - from] = D[t * T + u];
        rows[t - from] = &q[t * HD + o];
      }
      lincomb(w.data(), rows.data(), m, dk, &grad[u * 3 * HD + HD + o]);
      for (std::size_t t = from; t < T; ++t) {
        w[t - from] = P[t * T + u];
        rows[t - from] = &go[t * HD + o];
      }
      lincomb(w.data(), rows.data(), m, dk, &grad[u * 3 * HD + 2 * HD + o]);
    }
  }
  const std::vector<float> wT = stacked_transposed({p.wq, p.wk, p.wv}, HD, d);
  project(grad.data(), T, wT.data(), d, 3 * HD, dh);
}

// expert() backward, for the gradient g [d] of its output: with a = W1 h, e = W3 h,
// u = silu(a) e: d u = W2^T g, d a = d u e s (1 + a (1 - s)) (s = sigmoid(a)), d e = d u silu(a);
// d h = W1^T d a + W3^T d e. w2T: W2^T [I, d]; w13T: [W1^T | W3^T] [d, 2 I].
template <class S>
void expert_backward(const Config& c, const BlockConfig& b, const S* h, const float* w1,
                     const float* w3, const float* w2T, const float* w13T, const S* g, S* dh) {
  const std::size_t d = std::size_t(c.d), I = std::size_t(b.inter);
  std::vector<S> a(I), e(I), du(I), grad(2 * I);
  project(h, 1, w1, I, d, a.data());
  project(h, 1, w3, I, d, e.data());
  project(g, 1, w2T, I, d, du.data());
  for (std::size_t i = 0; i < I; ++i) {
    const S s = sigmoid(a[i]);
    grad[i] = du[i] * e[i] * s * (S(1) + a[i] * (S(1) - s));
    grad[I + i] = du[i] * (a[i] * s);
  }
  project(grad.data(), 1, w13T, d, 2 * I, dh);
}

// ffn() backward on N tokens with the experts chosen per token ([N, k], as the forward chose):
// d h = sum_j w_j E_j'^T g + E_shared'^T g + sum_j d l_j router_j, where d l_j is the routing
// weights' gradient through the sigmoid scores: d w_j = g . E_j(h), and with w_j = r s_j / sum s,
// d s_j = (r / sum s) (d w_j - sum_i d w_i w_i / r) (or r d w_j unnormalised), d l_j = d s_j
// s_j (1 - s_j). The 2 k + 1 terms of each element are one sum.
template <class S>
void ffn_backward(const Config& c, const BlockConfig& b, std::size_t N, const S* h,
                  const BlockParams& p, const int* chosen, const S* g, S* dh) {
  const std::size_t d = std::size_t(c.d), E = std::size_t(b.experts), K = std::size_t(b.top_k);
  const std::size_t I = std::size_t(b.inter);
  std::vector<std::vector<float>> w2T(E + 1), w13T(E + 1);
  for (std::size_t x = 0; x <= E; ++x) {
    const bool sh = x == E;
    w2T[x] = transposed(sh ? p.shared_w2 : p.w2 + x * d * I, d, I);
    w13T[x] = stacked_transposed(
        {sh ? p.shared_w1 : p.w1 + x * I * d, sh ? p.shared_w3 : p.w3 + x * I * d}, I, d);
  }
  std::vector<S> logit(E), score(K), w(K), dw(K), dl(K), res(d), gw(d), terms(2 * K + 1);
  std::vector<std::vector<S>> part(K + 1, std::vector<S>(d));
  const S rs = S(b.route_scale);
  for (std::size_t t = 0; t < N; ++t) {
    const S* ht = h + t * d;
    const S* gt = g + t * d;
    const int* ch = chosen + t * K;
    project(ht, 1, p.router, E, d, logit.data());
    for (std::size_t j = 0; j < K; ++j) score[j] = sigmoid(logit[std::size_t(ch[j])]);
    const S total = sum(score.data(), K);
    for (std::size_t j = 0; j < K; ++j) {
      const std::size_t e = std::size_t(ch[j]);
      w[j] = b.sem.normalise_routing ? rs * score[j] / total : rs * score[j];
      expert(c, b, ht, p.w1 + e * I * d, p.w2 + e * d * I, p.w3 + e * I * d, res.data());
      dw[j] = dot(gt, res.data(), d);
      for (std::size_t i = 0; i < d; ++i) gw[i] = w[j] * gt[i];
      expert_backward(c, b, ht, p.w1 + e * I * d, p.w3 + e * I * d, w2T[e].data(), w13T[e].data(),
                      gw.data(), part[j].data());
    }
    expert_backward(c, b, ht, p.shared_w1, p.shared_w3, w2T[E].data(), w13T[E].data(), gt,
                    part[K].data());
    const S dww = dot(dw.data(), w.data(), K);
    for (std::size_t j = 0; j < K; ++j) {
      const S ds = b.sem.normalise_routing ? rs / total * (dw[j] - dww / rs) : rs * dw[j];
      dl[j] = ds * score[j] * (S(1) - score[j]);
    }
    for (std::size_t i = 0; i < d; ++i) {
      for (std::size_t j = 0; j <= K; ++j) terms[j] = part[j][i];
      for (std::size_t j = 0; j < K; ++j)
        terms[K + 1 + j] = dl[j] * S(p.router[std::size_t(ch[j]) * d + i]);
      dh[t * d + i] = sum(terms.data(), 2 * K + 1);
    }
  }
}

// Where a downstream stage reads a stage's output: the anchor's value of it when an anchor Trace
// holds that stage (a kernel's own intermediates, exact fp32 values), else the computed one.
// Anchored, every stage is judged from the inputs the kernel itself fed it, so error bounds do
// not compound through the Block and the first failing stage is where the fault is.
template <class S>
class Feed {
 public:
  Feed(const std::vector<Stage<float>>* anchor, std::string prefix)
      : anchor_(anchor), prefix_(std::move(prefix)) {}
  const std::vector<S>& operator()(const std::string& name, const std::vector<S>& computed) {
    if (anchor_)
      for (const auto& st : *anchor_)
        if (st.name == prefix_ + name && st.values.size() == computed.size()) {
          held_.emplace_back(st.values.begin(), st.values.end());
          return held_.back();
        }
    return computed;
  }
  // A stage only the anchor can give (a captured sublayer's output).
  const std::vector<S>& given(const std::string& name, std::size_t size) {
    if (anchor_)
      for (const auto& st : *anchor_)
        if (st.name == prefix_ + name && st.values.size() == size) {
          held_.emplace_back(st.values.begin(), st.values.end());
          return held_.back();
        }
    throw std::invalid_argument("the sublayers are captured, and the capture holds no stage " +
                                prefix_ + name + " of " + std::to_string(size) + " values");
  }

 private:
  const std::vector<Stage<float>>* anchor_;
  std::string prefix_;
  std::deque<std::vector<S>> held_;  // stable addresses
};

// One Block over B sequences of T positions: x [B*T, n, d] and pre_mix [B*T, n] in; the stages
// appended to trace with the prefix, ending with "x_out" and "next_pre_mix". forced: experts per
// token for the FFN (see ffn()); anchor: a kernel's Trace to feed each stage from (see Feed).
template <class S>
void block_forward(const Config& c, const BlockConfig& b, std::size_t B, std::size_t T, const S* x,
                   const S* pre_mix, const BlockParams& p, std::vector<Stage<S>>& trace,
                   const std::string& prefix, Routing<S>* routing_out = nullptr,
                   const int* forced = nullptr, const std::vector<Stage<float>>* anchor = nullptr) {
  const std::size_t N = B * T, n = std::size_t(c.n), d = std::size_t(c.d);
  const std::size_t nd = n * d, M = std::size_t(c.mix()), K = std::size_t(b.top_k);
  trace.reserve(trace.size() + 20);  // references into trace stay valid below
  Feed<S> fed(anchor, prefix);
  auto stage = [&](const std::string& name, std::vector<std::size_t> shape) -> std::vector<S>& {
    return add_stage(trace, prefix + name, std::move(shape));
  };
  struct Site {
    const std::vector<S>*pre, *post, *comb, *pre_own;
  };
  // mixes of the streams, split into pre, post, comb.
  auto site = [&](const std::string& s, const S* xs, const float* fn, const float* scale,
                  const float* base) {
    auto& mix = stage(s + ".mixes", {N, M});
    mixes(c, N, xs, fn, mix.data());
    store_all(mix.data(), mix.size(), Storage::mixes);
    const auto& mix_in = fed(s + ".mixes", mix);
    auto& pre = stage(s + ".pre", {N, n});
    auto& post = stage(s + ".post", {N, n});
    auto& comb = stage(s + ".comb", {N, n, n});
    for (std::size_t t = 0; t < N; ++t)
      split_sinkhorn(c, &mix_in[t * M], scale, base, &pre[t * n], &post[t * n], &comb[t * n * n]);
    for (auto* v : {&pre, &post, &comb}) store_all(v->data(), v->size(), Storage::coefficients);
    return Site{&fed(s + ".pre", pre), &fed(s + ".post", post), &fed(s + ".comb", comb), &pre};
  };
  auto read = [&](const std::string& name, const S* xs, const S* weights) -> const std::vector<S>& {
    auto& y = stage(name, {N, d});
    for (std::size_t t = 0; t < N; ++t) hc_pre(c, xs + t * nd, weights + t * n, &y[t * d]);
    store_all(y.data(), y.size());
    return fed(name, y);
  };
  auto norm = [&](const std::string& name, const std::vector<S>& in, const float* g,
                  bool on) -> const std::vector<S>& {
    auto& y = stage(name, {N, d});
    for (std::size_t t = 0; t < N; ++t) {
      if (on)
        rmsnorm(d, c.norm_eps, &in[t * d], g, &y[t * d]);
      else
        for (std::size_t i = 0; i < d; ++i) y[t * d + i] = in[t * d + i];
    }
    store_all(y.data(), y.size());
    return fed(name, y);
  };
  auto write = [&](const std::string& name, const std::vector<S>& f, const S* residual,
                   const Site& st, int site_index) -> const std::vector<S>& {
    auto& y = stage(name, {N, n, d});
    Config cc = c;
    if (b.sem.comb_transposed_site == site_index) cc.sem.comb_transposed = true;
    for (std::size_t t = 0; t < N; ++t)
      hc_post(cc, &f[t * d], residual + t * nd, &(*st.post)[t * n], &(*st.comb)[t * n * n],
              &y[t * nd]);
    store_all(y.data(), y.size());
    return fed(name, y);
  };

  const Site a = site("attn", x, p.attn_hc_fn, p.attn_hc_scale, p.attn_hc_base);
  const auto& h_in = read("attn.in", x, b.sem.shifted_pre ? pre_mix : a.pre->data());
  const auto& h_norm = norm("attn.normed", h_in, p.attn_norm, b.sem.attn_norm);
  const std::vector<S>* h_out = nullptr;
  if (b.captured_sublayers) {
    h_out = &fed.given("attn.out", N * d);
  } else {
    auto& out = stage("attn.out", {N, d});
    for (std::size_t s = 0; s < B; ++s) attn(c, b, T, &h_norm[s * T * d], p, &out[s * T * d]);
    store_all(out.data(), out.size());
    h_out = &fed("attn.out", out);
  }
  const auto& x_mid = write("x_mid", *h_out, x, a, 0);

  const Site f = site("ffn", x_mid.data(), p.ffn_hc_fn, p.ffn_hc_scale, p.ffn_hc_base);
  const auto& f_in =
      read("ffn.in", x_mid.data(), b.sem.shifted_pre ? a.pre->data() : f.pre->data());
  const auto& f_norm = norm("ffn.normed", f_in, p.ffn_norm, b.sem.ffn_norm);
  Routing<S> routing;
  const std::vector<S>* f_out = nullptr;
  if (b.captured_sublayers) {
    f_out = &fed.given("ffn.out", N * d);
  } else {
    auto& experts = stage("ffn.experts", {N, K});  // the routing, decided before the output
    auto& out = stage("ffn.out", {N, d});
    ffn(c, b, N, f_norm.data(), p, out.data(), routing, forced);
    store_all(out.data(), out.size());
    for (std::size_t i = 0; i < N * K; ++i) experts[i] = S(double(routing.chosen[i]));
    f_out = &fed("ffn.out", out);
  }
  write("x_out", *f_out, x_mid.data(), f, 1);
  auto& next = stage("next_pre_mix", {N, n});
  next = *f.pre_own;
  if (routing_out) *routing_out = std::move(routing);
}

template <class S>
const std::vector<S>& stage_values(const std::vector<Stage<S>>& trace, const std::string& name) {
  for (const auto& st : trace)
    if (st.name == name) return st.values;
  throw std::logic_error("no stage " + name);
}

// A stack of layers.size() Blocks from the streams x0 [B*T, n, d], starting from the layer-0
// reading weights [1, 0, ..., 0]; then the final collapse with the last Block's pre
// ("final.collapse") and RMSNorm ("final.norm"). Stages of layer l are prefixed "L<l>.".
// forced: per layer, experts per token (or null); anchor: as for block_forward.
template <class S>
void stack_forward(const Config& c, const BlockConfig& b, std::size_t B, std::size_t T, const S* x0,
                   const std::vector<BlockParams>& layers, const float* final_norm,
                   std::vector<Stage<S>>& trace, std::vector<Routing<S>>* routings = nullptr,
                   const std::vector<const int*>* forced = nullptr,
                   const std::vector<Stage<float>>* anchor = nullptr) {
  const std::size_t N = B * T, n = std::size_t(c.n), d = std::size_t(c.d);
  std::vector<S> pre0(N * n, S(0));
  for (std::size_t t = 0; t < N; ++t) pre0[t * n] = S(1);
  Feed<S> fed(anchor, "");
  const S* x = x0;
  const S* pre = pre0.data();
  if (routings) routings->assign(layers.size(), {});
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const std::string prefix = "L" + std::to_string(l) + ".";
    block_forward(c, b, B, T, x, pre, layers[l], trace, prefix,
                  routings ? &(*routings)[l] : nullptr, forced ? (*forced)[l] : nullptr, anchor);
    x = fed(prefix + "x_out", stage_values(trace, prefix + "x_out")).data();
    pre = fed(prefix + "next_pre_mix", stage_values(trace, prefix + "next_pre_mix")).data();
  }
  auto& y = add_stage(trace, "final.collapse", {N, d});
  for (std::size_t t = 0; t < N; ++t) hc_pre(c, x + t * n * d, pre + t * n, &y[t * d]);
  store_all(y.data(), y.size());
  const std::vector<S> collapsed = fed("final.collapse", y);
  auto& z = add_stage(trace, "final.norm", {N, d});
  for (std::size_t t = 0; t < N; ++t)
    rmsnorm(d, c.norm_eps, &collapsed[t * d], final_norm, &z[t * d]);
  store_all(z.data(), z.size());
}

}  // namespace mhc::ref
