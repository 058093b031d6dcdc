#include "mhc/oracles/noise.hpp"

#include "mhc/oracles/anchored.hpp"
#include "mhc/oracles/backward.hpp"
#include "mhc/oracles/generate.hpp"
#include "mhc/oracles/stochastic.hpp"

#include <Eigen/Dense>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <utility>

namespace mhc::oracles {

namespace {

constexpr double u = 0x1.0p-24;

// The noise of an fp32 sum from its partial sums s_k and terms t_i: each rounding errs by at
// most u times its result, so the error is sum_k d_k s_k + sum_i e_i t_i with |d|, |e| <= u;
// independent, its spread is u sqrt(sum s_k^2 + sum t_i^2) / sqrt(3). The scale takes the larger
// of the two orders' partial sums, products counted 4 times (the product's rounding, the
// stream's own, a scaling before the projection, tensor-core operand handling).
double sum_noise(double partials2_forward, double partials2_backward, double products2) {
  return u * std::sqrt(std::max(partials2_forward, partials2_backward) + 4 * products2);
}

// The RMS scale r = (S / nd + eps)^-1/2's relative noise from its sum of squares S (q): half the
// sum's, and about one u for each of the mean, the eps, the square root and the division (5 u,
// an approximate reciprocal square root included).
double rms_scale_noise(const bnd::detail::SequentialSums& q) {
  const double S_noise =
      std::max({sum_noise(q.partials2_forward, q.partials2_backward, q.products2),
                std::fabs(double(q.forward) - q.exact), std::fabs(double(q.backward) - q.exact)});
  return q.exact > 0 ? 0.5 * S_noise / q.exact + 5 * u : 5 * u;
}

// A token's sum of squares in the orders fp32 kernels use beside the sequential ones: pairwise,
// strided lanes (4, 16, 32, 256, with fma) then a tree, and blocks of 256.
std::vector<float> squares_in_other_orders(const float* x, std::size_t d) {
  std::vector<float> out, t(d);
  for (std::size_t i = 0; i < d; ++i) t[i] = x[i] * x[i];
  std::vector<float> p = t;
  for (std::size_t w = 1; w < d; w *= 2)
    for (std::size_t i = 0; i + w < d; i += 2 * w) p[i] += p[i + w];
  out.push_back(d ? p[0] : 0.0f);
  for (const std::size_t L : {4, 16, 32, 256}) {
    std::vector<float> lane(L, 0.0f);
    for (std::size_t i = 0; i < d; ++i) lane[i % L] = std::fma(x[i], x[i], lane[i % L]);
    for (std::size_t w = L / 2; w > 0; w /= 2)
      for (std::size_t l = 0; l < w; ++l) lane[l] += lane[l + w];
    out.push_back(lane[0]);
  }
  float total = 0;
  for (std::size_t b = 0; b < d; b += 256) {
    float block = 0;
    for (std::size_t i = b; i < std::min(d, b + 256); ++i) block += t[i];
    total += block;
  }
  out.push_back(total);
  return out;
}

// A token's RMS scale r = (S / d + eps)^-1/2 from its d values x and their sums of squares q: r in
// double; its relative noise, rms_scale_noise or the deviation of r formed from an fp32 sum in
// one of the usual orders, the largest; and whether the token is not modelled: its squares repeat,
// or an order's sum errs by more than 3 times the sums' noise (5 standard deviations under the
// model): data whose rounding is biased (residues chosen so that every addition rounds one way),
// where an order not run may err more than those run.
struct RmsScale {
  double r = 0, rel = 0;
  bool biased = false;
};
RmsScale rms_scale_of(const ref::Config& cfg, const float* x, std::size_t d,
                      const bnd::detail::SequentialSums& q) {
  bnd::Model probabilistic = bnd::fp32();
  probabilistic.probabilistic = true;
  auto r_fp32 = [&](float S) { return 1.0f / std::sqrt(S / float(d) + float(cfg.norm_eps)); };
  RmsScale out;
  out.r = 1 / std::sqrt(q.exact / double(d) + cfg.norm_eps);
  const double S_noise = sum_noise(q.partials2_forward, q.partials2_backward, q.products2);
  std::vector<float> sums = squares_in_other_orders(x, d);
  sums.push_back(q.forward);
  sums.push_back(q.backward);
  out.biased =
      bnd::detail::too_many_repeats(probabilistic, double(d), bnd::detail::repeated_values(x, d)) ||
      !std::isfinite(out.r);
  out.rel = rms_scale_noise(q);
  for (const float S : sums) {
    out.biased = out.biased || !(std::fabs(double(S) - q.exact) <= 3 * S_noise);
    out.rel = std::max(out.rel, std::fabs(double(r_fp32(S)) / out.r - 1));
  }
  return out;
}

// A stage of T tokens of d elements that share their token's RMS scale (1 / d of them count as
// independent), sized; and the tokens' sums of squares of x.
NoiseModel shared_by_token(const float* x, std::size_t T, std::size_t d,
                           std::vector<bnd::detail::SequentialSums>& squares) {
  bnd::detail::self_sums(x, T, d, squares.data());
  NoiseModel m;
  m.value.resize(T * d);
  m.scale.resize(T * d);
  m.independent = 1 / double(d);
  return m;
}

// RMSNorm's y = w x r in fp32 (x [T, d], w [d]): the value in double; r's relative noise
// (rms_scale_of) plus the element's own roundings (x r and the weight's product, or a division
// x / sqrt), 3 u, and an absolute floor of flushed products (w x flushed then scaled by r
// included). r's error is the token's: its d elements count as one. Tokens rms_scale_of finds
// biased are not modelled.
NoiseModel rmsnorm_model(const ref::Config& cfg, const float* x, const float* w, std::size_t T) {
  const std::size_t d = std::size_t(cfg.d);
  std::vector<bnd::detail::SequentialSums> squares(T);
  NoiseModel m = shared_by_token(x, T, d, squares);
  for (std::size_t t = 0; t < T; ++t) {
    const RmsScale s = rms_scale_of(cfg, x + t * d, d, squares[t]);
    const double rel = s.rel + 3 * u;
    for (std::size_t i = 0; i < d; ++i) {
      const double wi = double(w[i]), value = wi * double(x[t * d + i]) * s.r;
      m.value[t * d + i] = value;
      m.scale[t * d + i] =
          s.biased ? HUGE_VAL : std::fabs(value) * rel + (1 + std::fabs(wi) + s.r) * 0x1.0p-126;
    }
  }
  return m;
}

NoiseModel mixes_model(const ref::Config& cfg, const float* xs, std::size_t T, const float* W) {
  const std::size_t nd = cfg.stream_size(), M = std::size_t(cfg.mix());
  const std::size_t n = std::size_t(cfg.n), d = std::size_t(cfg.d);
  std::vector<bnd::detail::SequentialSums> dots(T * M), columns(T * M), squares(T);
  bnd::detail::sequential_sums(xs, T, W, M, nd, dots.data());
  // The same products summed column by column across the streams (d-major), both ways: its
  // partial sums differ from the stream-major ones wherever the streams differ.
  {
    auto column_major = [&](const float* a, std::size_t rows) {
      std::vector<float> t(rows * nd);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t j = 0; j < n; ++j)
          for (std::size_t c = 0; c < d; ++c) t[r * nd + c * n + j] = a[r * nd + j * d + c];
      return t;
    };
    const std::vector<float> xc = column_major(xs, T), Wc = column_major(W, M);
    bnd::detail::sequential_sums(xc.data(), T, Wc.data(), M, nd, columns.data());
  }
  // The RMS statistic's sums of squares.
  bnd::detail::self_sums(xs, T, nd, squares.data());
  // Where terms repeat, round to nearest errs with a bias that depends on the terms' mantissas
  // (scaled terms, another bias): the independence the model stands on fails, so such elements,
  // and tokens whose squares repeat, are not modelled (their bounds already use gamma_n).
  bnd::Model probabilistic = bnd::fp32();
  probabilistic.probabilistic = true;
  const bnd::ModelScope scope(probabilistic);
  const std::vector<bool> repeated = bnd::detail::repeated_terms(xs, T, W, M, nd);
  NoiseModel m;
  m.value.resize(T * M);
  m.scale.resize(T * M);
  for (std::size_t t = 0; t < T; ++t) {
    const bnd::detail::SequentialSums& q = squares[t];
    const bool squares_repeat = bnd::detail::too_many_repeats(
        probabilistic, double(nd), bnd::detail::repeated_values(xs + t * nd, nd));
    // r as a kernel forms it from each order's sum, and exactly (double: its error is ~1e-16).
    auto r_fp32 = [&](float S) { return 1.0f / std::sqrt(S / float(nd) + float(cfg.norm_eps)); };
    const float rf = r_fp32(q.forward), rb = r_fp32(q.backward);
    const double r = 1 / std::sqrt(q.exact / double(nd) + cfg.norm_eps);
    const double r_rel = rms_scale_noise(q);
    for (std::size_t a = 0; a < M; ++a) {
      const auto& o = dots[t * M + a];
      const auto& oc = columns[t * M + a];
      const double value = o.exact * r;
      const double sigma =
          std::fabs(r) *
              std::max(sum_noise(o.partials2_forward, o.partials2_backward, o.products2),
                       sum_noise(oc.partials2_forward, oc.partials2_backward, oc.products2)) +
          std::fabs(value) * (r_rel + u);
      // The four orders run in fp32 (round to nearest's bias on structured data is in them).
      const double run = std::max({std::fabs(double(o.forward * rf) - value),
                                   std::fabs(double(o.backward * rb) - value),
                                   std::fabs(double(oc.forward * rf) - value),
                                   std::fabs(double(oc.backward * rb) - value)});
      m.value[t * M + a] = value;
      m.scale[t * M + a] = repeated[t * M + a] || squares_repeat ? HUGE_VAL : std::max(sigma, run);
    }
  }
  return m;
}

// A dot a . b over d in the lane orders of SIMD, warp and block reductions: S = 2, 4, ..., 1024
// lanes, each taking c = 1, 2, 4 or 8 contiguous terms in turn (lane l adds chunks l, l + S, ...:
// float4 loads are c = 4), in fp32; then the lanes' totals in a tree (lane l + w into lane l) or in
// sequence. The largest sum of the squared partial sums, and each order's result. Their partial
// sums keep large terms that the sequential orders cancel at once: two adjacent outlier channels
// of opposite products ride their lanes to the end, and products whose signs repeat with the
// lanes' period (a pattern per 64-wide head) grow in every lane.
struct LaneSums {
  double partials2 = 0;
  std::vector<float> results;
};
LaneSums lane_sums(const float* a, const float* b, std::size_t d) {
  LaneSums out;
  std::vector<float> lane, tree;
  for (unsigned shift = 0; shift <= 3; ++shift)
    for (std::size_t S = 2; S <= 1024 && (S << shift) < d; S *= 2) {
      lane.assign(S, 0.0f);
      double q = 0;
      for (std::size_t i = 0; i < d; ++i) {
        float& l = lane[(i >> shift) & (S - 1)];
        l += a[i] * b[i];
        q += double(l) * double(l);
      }
      double in_sequence = 0, in_tree = 0;
      float total = 0;
      for (const float l : lane) {
        total += l;
        in_sequence += double(total) * double(total);
      }
      tree = lane;
      for (std::size_t w = S / 2; w > 0; w /= 2)
        for (std::size_t l = 0; l < w; ++l) {
          tree[l] += tree[l + w];
          in_tree += double(tree[l]) * double(tree[l]);
        }
      out.partials2 = std::max(out.partials2, q + std::max(in_sequence, in_tree));
      out.results.push_back(tree[0]);
      out.results.push_back(total);
    }
  return out;
}

// The noise of an fp32 dot a . b over d whose sequential sums are o: u sqrt(P + 4 Q) with P the
// largest sum of squared partial sums of the sequential and lane orders (b_noise2 added: b's own
// errors), or the largest deviation from `value` of an order run, where larger.
double dot_noise(const float* a, const float* b, std::size_t d,
                 const bnd::detail::SequentialSums& o, double value, double b_noise2 = 0) {
  const LaneSums lanes = lane_sums(a, b, d);
  double run =
      std::max(std::fabs(double(o.forward) - value), std::fabs(double(o.backward) - value));
  for (const float r : lanes.results) run = std::max(run, std::fabs(double(r) - value));
  const double P = std::max({o.partials2_forward, o.partials2_backward, lanes.partials2});
  return std::max(std::sqrt(u * u * (P + 4 * o.products2) + b_noise2), run);
}

// Every token's dot products a_i . b_j over d of two stream tensors, a [T, na, d] and b [T, nb, d],
// into [T, na, nb] (the backward's sums over d): the projection's sums model without its RMS scale,
// the two sequential orders and the strided-lane ones (lane_sums) run. Where b is the kernel's own
// evaluation of values the model knows (b_exact), the value is taken from those, and b's own errors
// (scale b_own each) counted as independent.
struct Recomputed {
  const double *exact = nullptr, *own = nullptr;
};
NoiseModel dots_model(const float* a, std::size_t na, const float* b, std::size_t nb, std::size_t T,
                      std::size_t d, Recomputed rb = {}) {
  bnd::Model probabilistic = bnd::fp32();
  probabilistic.probabilistic = true;
  const bnd::ModelScope scope(probabilistic);
  NoiseModel m;
  m.value.resize(T * na * nb);
  m.scale.resize(T * na * nb);
  std::vector<bnd::detail::SequentialSums> dots(na * nb);
  for (std::size_t t = 0; t < T; ++t) {
    const float *at = a + t * na * d, *bt = b + t * nb * d;
    bnd::detail::sequential_sums(at, na, bt, nb, d, dots.data());
    const std::vector<bool> repeated = bnd::detail::repeated_terms(at, na, bt, nb, d);
    for (std::size_t k = 0; k < na * nb; ++k) {
      const auto& o = dots[k];
      double value = o.exact, b_noise2 = 0;
      if (rb.exact) {
        const std::size_t e = (t * nb + k % nb) * d;
        value = 0;
        for (std::size_t i = 0; i < d; ++i) {
          const double ai = double(at[(k / nb) * d + i]);
          value += ai * rb.exact[e + i];
          b_noise2 += (ai * rb.own[e + i]) * (ai * rb.own[e + i]);
        }
      }
      m.value[t * na * nb + k] = value;
      m.scale[t * na * nb + k] =
          repeated[k] ? HUGE_VAL
                      : dot_noise(at + (k / nb) * d, bt + (k % nb) * d, d, o, value, b_noise2);
    }
  }
  return m;
}

// RMSNorm's gradient of x for the gradient g of y = w x r (x, g [T, d], w [d]): dx_i = r a_i - c
// x_i, a_i = w_i g_i, c = r^3 (a . x) / d, in double. Its noise: r's relative noise (rms_scale_of)
// on the first term once and on c three times; the dot's absolute noise as dots_model's (the
// sequential and lane orders of fl(a_i) x_i, products counted 4 times: a's rounding, a normalised
// x); each term's own roundings (2 u, 4 u on c) and the difference's (u); an absolute floor of
// flushed products. r's and the dot's errors are the token's: its d elements count as one. Not
// modelled: tokens rms_scale_of finds biased, and dots whose terms repeat.
NoiseModel rmsnorm_backward_model(const ref::Config& cfg, const float* x, const float* w,
                                  const float* g, std::size_t T) {
  const std::size_t d = std::size_t(cfg.d);
  bnd::Model probabilistic = bnd::fp32();
  probabilistic.probabilistic = true;
  const bnd::ModelScope scope(probabilistic);
  std::vector<bnd::detail::SequentialSums> squares(T);
  NoiseModel m = shared_by_token(x, T, d, squares);
  std::vector<float> a(d);
  for (std::size_t t = 0; t < T; ++t) {
    const float *xt = x + t * d, *gt = g + t * d;
    const RmsScale s = rms_scale_of(cfg, xt, d, squares[t]);
    double dot = 0;
    for (std::size_t i = 0; i < d; ++i) {
      a[i] = w[i] * gt[i];
      dot += double(w[i]) * double(gt[i]) * double(xt[i]);
    }
    bnd::detail::SequentialSums o;
    bnd::detail::sequential_sums(a.data(), 1, xt, 1, d, &o);
    const bool repeated = bnd::detail::repeated_terms(a.data(), 1, xt, 1, d)[0];
    const double noise = dot_noise(a.data(), xt, d, o, o.exact);
    const double r3d = s.r * s.r * s.r / double(d), c = r3d * dot;
    for (std::size_t i = 0; i < d; ++i) {
      const double xi = double(xt[i]), first = s.r * double(w[i]) * double(gt[i]),
                   value = first - c * xi;
      m.value[t * d + i] = value;
      m.scale[t * d + i] =
          s.biased || repeated
              ? HUGE_VAL
              : std::fabs(first) * (s.rel + 2 * u) +
                    std::fabs(xi) * (std::fabs(c) * (3 * s.rel + 4 * u) + r3d * noise) +
                    u * std::fabs(value) +
                    ((1 + s.r) * (1 + std::fabs(double(w[i]))) + r3d * double(d) * std::fabs(xi)) *
                        0x1.0p-126;
    }
  }
  return m;
}

// A boundary backward's new streams x_k = post_k f + sum_j comb_jk R_j, which the kernel
// recomputes in fp32, stores as the declaration's streams (or keeps) and does not hand over: as a
// straightforward kernel holds them (x32), the value the models take (x), and the scale of each
// element's own error (own; empty for streams that are data). In fp32: x exact, own
// sqrt(2 (n + 1)) u times the sum of its terms' magnitudes (its roundings). Stored narrower: the
// rounding of any fp32 evaluation within the rigorous bound is one value (x, own 0) for nearly
// every element; where the bound straddles a rounding boundary, x is the two cells' midpoint and
// own half the gap, the error any kernel makes there.
struct Streams {
  std::vector<float> x32;
  std::vector<double> x, own;
};
Streams recomputed_streams(const OpCase& c) {
  const std::size_t n = std::size_t(c.cfg.n), d = std::size_t(c.cfg.d), T = c.tokens;
  const float *f = c.input("f").data.data(), *R = c.input("residual").data.data(),
              *post = c.input("post").data.data(), *comb = c.input("comb").data.data();
  const bnd::Format format = c.precision.decl.streams;
  Streams s{std::vector<float>(T * n * d), std::vector<double>(T * n * d),
            std::vector<double>(T * n * d)};
  const bnd::ModelScope scope(bnd::fp32());
  std::vector<bnd::Bounded> fb(d), Rb(n * d), pb(n), cb(n * n), xb(n * d);
  const auto exact = [](const float* v, std::size_t size, bnd::Bounded* out) {
    for (std::size_t i = 0; i < size; ++i) out[i] = bnd::Bounded(double(v[i]), 0);
  };
  for (std::size_t t = 0; t < T; ++t) {
    if (format != bnd::Format::fp32) {
      exact(f + t * d, d, fb.data());
      exact(R + t * n * d, n * d, Rb.data());
      exact(post + t * n, n, pb.data());
      exact(comb + t * n * n, n * n, cb.data());
      ref::hc_post(c.cfg, fb.data(), Rb.data(), pb.data(), cb.data(), xb.data());
    }
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t i = 0; i < d; ++i) {
        const std::size_t e = (t * n + k) * d + i;
        float acc = post[t * n + k] * f[t * d + i];
        double exact_x = double(post[t * n + k]) * double(f[t * d + i]), mag = std::fabs(exact_x);
        for (std::size_t j = 0; j < n; ++j) {
          const float cj = comb[(t * n + j) * n + k], rj = R[(t * n + j) * d + i];
          acc += cj * rj;
          exact_x += double(cj) * double(rj);
          mag += std::fabs(double(cj) * double(rj));
        }
        if (format == bnd::Format::fp32) {
          s.x32[e] = acc;
          s.x[e] = exact_x;
          s.own[e] = std::sqrt(2.0 * double(n + 1)) * u * mag;
          continue;
        }
        const bnd::Bounded v = xb[k * d + i];
        const double lo = bnd::rounded_to({v.v - v.e, 0}, format).v,
                     hi = bnd::rounded_to({v.v + v.e, 0}, format).v;
        s.x32[e] = float(bnd::rounded_to({double(acc), 0}, format).v);
        s.x[e] = lo == hi ? lo : 0.5 * (lo + hi);
        s.own[e] = 0.5 * (hi - lo);
      }
  }
  return s;
}

// The boundary backward's grad_pre_mix[k] = upstream_y . x_k: the dots model over the recomputed
// streams.
NoiseModel recomputed_pre_mix_model(const OpCase& c, const Streams& s) {
  return dots_model(c.input("upstream_y").data.data(), 1, s.x32.data(), std::size_t(c.cfg.n),
                    c.tokens, std::size_t(c.cfg.d), {s.x.data(), s.own.data()});
}

// fp32 whose divisions multiply by the reciprocal, a * (1 / b) (two roundings): the other usual
// form of a normalisation, run through the reference Sinkhorn.
struct Recip32 {
  float v = 0;
  Recip32() = default;
  Recip32(float x) : v(x) {}                       // NOLINT: as float converts
  Recip32(double x) : v(static_cast<float>(x)) {}  // NOLINT
  Recip32(int x) : v(static_cast<float>(x)) {}     // NOLINT
  Recip32& operator+=(const Recip32& o) { return *this = *this + o; }
  friend Recip32 operator-(const Recip32& a) { return -a.v; }
  friend Recip32 operator+(const Recip32& a, const Recip32& b) { return a.v + b.v; }
  friend Recip32 operator-(const Recip32& a, const Recip32& b) { return a.v - b.v; }
  friend Recip32 operator*(const Recip32& a, const Recip32& b) { return a.v * b.v; }
  friend Recip32 operator/(const Recip32& a, const Recip32& b) { return a.v * (1.0f / b.v); }
  friend bool operator>(const Recip32& a, const Recip32& b) { return a.v > b.v; }
  friend Recip32 exp(const Recip32& a) { return std::exp(a.v); }
};

// The comb from the given mixes [T, M] (the case's, or the kernel's: anchored): the value from
// the reference in double; the scale the larger of twice the spread of kSrRuns evaluations with
// stochastic rounding to fp32 and the deviations of three fp32 runs with round to nearest (the
// reference's order, the reversed one, and divisions by reciprocal), whose errors at the
// Sinkhorn's fixed point repeat round after round rather than average out: docs/semantics.md,
// "The second tier"; bench/comb_element_floor.py.
constexpr int kSrRuns = sr::Ensemble::kLanes;

// The sample standard deviation of the kSrRuns lanes (Welford's running mean and deviations).
double lane_spread(const sr::Ensemble& e) {
  double mean = 0, m2 = 0;
  for (int k = 0; k < kSrRuns; ++k) {
    const double x = double(e[k]), d = x - mean;
    mean += d / (k + 1);
    m2 += d * (x - mean);
  }
  return std::sqrt(m2 / (kSrRuns - 1));
}

// The largest rounding error of an fp32 result of size |x|: half its ulp, at |x| (1 + 2^-20) so
// that a computed value a few ulp above x is covered, but below `top` where the computed value
// cannot exceed that power of two (rounding up to it errs by the half ulp below); 2^-150 below
// FLT_MIN.
double half_ulp(double x, double top = HUGE_VAL) {
  const double a = std::min(std::fabs(x) * (1 + 0x1p-20), top * (1 - 0x1p-30));
  if (!std::isfinite(a)) return a;  // NaN or infinite: no scale, the element is not judged
  return a < 0x1p-126 ? 0x1p-150 : std::ldexp(1.0, std::ilogb(a) - 24);
}

NoiseModel comb_model(const OpCase& c, const float* mixes) {
  const std::size_t n = std::size_t(c.cfg.n), nn = n * n, M = std::size_t(c.cfg.mix());
  const float s2 = c.param("hc_scale").data[2];
  const float* base = c.param("hc_base").data.data() + 2 * n;
  const bnd::ModelScope scope(bnd::fp32());
  NoiseModel m;
  // A doubly stochastic n x n matrix has (n - 1)^2 free entries: its errors are tied by its sums.
  m.independent = double((n - 1) * (n - 1)) / double(nn);
  m.value.resize(c.tokens * nn);
  m.scale.resize(c.tokens * nn);
  std::vector<double> logits(nn), C(nn);
  std::vector<float> L(nn), R(nn), Cf(nn), Cr(nn);
  std::vector<Recip32> Lq(nn), Cq(nn);
  std::vector<sr::Ensemble> Ls(nn), Cs(nn);
  for (std::size_t t = 0; t < c.tokens; ++t) {
    const float* mix = mixes + t * M + 2 * n;
    for (std::size_t i = 0; i < nn; ++i) {
      logits[i] = double(mix[i]) * double(s2) + double(base[i]);  // the oracle's
      L[i] = mix[i] * s2 + base[i];
      R[nn - 1 - i] = L[i];  // rows and columns reversed: every line summed the other way
      Lq[i] = L[i];
    }
    ref::sinkhorn(c.cfg, logits.data(), C.data());
    ref::sinkhorn(c.cfg, L.data(), Cf.data());
    ref::sinkhorn(c.cfg, R.data(), Cr.data());
    ref::sinkhorn(c.cfg, Lq.data(), Cq.data());
    // The kSrRuns runs at once: run k is lane k, its stream seeded with the first seed + k.
    sr::Ensemble::seed_lanes(c.seed * 1000003u + t * 7919u);
    for (std::size_t i = 0; i < nn; ++i)
      Ls[i] = sr::Ensemble(mix[i]) * sr::Ensemble(s2) + sr::Ensemble(base[i]);
    ref::sinkhorn(c.cfg, Ls.data(), Cs.data());
    for (std::size_t i = 0; i < nn; ++i) {
      const double v = C[i], spread = lane_spread(Cs[i]);
      m.value[t * nn + i] = v;
      // Never below the result's own rounding: the runs' results are floats, and where they all
      // round to C's nearest, a legitimate kernel's next one errs by an ulp.
      m.scale[t * nn + i] =
          std::max({2 * spread, std::fabs(double(Cf[i]) - v), std::fabs(double(Cr[nn - 1 - i]) - v),
                    std::fabs(double(Cq[i].v) - v), half_ulp(v, 1)}) +
          bnd::model().eta;
    }
  }
  return m;
}

// One token's split (pre, post, comb) from its mixes, by the reference in number type S.
template <class S>
struct Split {
  std::vector<S> mix, pre, post, comb;
  explicit Split(const ref::Config& cfg)
      : mix(std::size_t(cfg.mix())),
        pre(std::size_t(cfg.n)),
        post(std::size_t(cfg.n)),
        comb(std::size_t(cfg.n * cfg.n)) {}
  void operator()(const OpCase& c, const float* m, const float* base) {
    for (std::size_t i = 0; i < mix.size(); ++i) mix[i] = S(m[i]);
    ref::split_sinkhorn(c.cfg, mix.data(), c.param("hc_scale").data.data(), base, pre.data(),
                        post.data(), comb.data());
  }
};

// The reading (pre) or writing (post) weights from the given mixes [T, M]: the value from the
// reference in double; the scale is the worst case of the usual fp32 forms of sig(a), a = m s + b
// (+ eps for pre, times 2 for post, or as the case's semantics say), each rounding at its result's
// half ulp, exp within 2 ulp and tanh within 2.5, so max_z is 1: docs/semantics.md, "The second
// tier".
NoiseModel weights_model(const OpCase& c, const float* mixes, bool pre) {
  const std::size_t n = std::size_t(c.cfg.n), M = std::size_t(c.cfg.mix()), at = pre ? 0 : n;
  const ref::Semantics& sem = c.cfg.sem;
  const double scale = double(c.param("hc_scale").data[pre != sem.scales_swapped ? 0 : 1]);
  const float* base = c.param("hc_base").data.data();
  const double log2e = 1.4426950408889634, log2e_f = double(float(log2e));
  Split<double> exact(c.cfg);
  NoiseModel m;
  m.value.resize(c.tokens * n);
  m.scale.resize(c.tokens * n);
  m.max_z = 1;
  for (std::size_t t = 0; t < c.tokens; ++t) {
    exact(c, mixes + t * M, base);
    for (std::size_t j = 0; j < n; ++j) {
      const double ms = double(mixes[t * M + at + j]) * scale, a = ms + double(base[at + j]);
      const double E = std::exp(-a), Ep = std::exp(a), sig = 1 / (1 + E), d = sig * (1 - sig);
      const double da = half_ulp(ms) + half_ulp(a);  // a's product and sum (an fma: fewer)
      // exp(-a) or exp2(-a log2(e)) (the scaled exponent's rounding and constant), 1 + e, 1 / s.
      const double exp_form =
          d * (da + half_ulp(a * log2e) / log2e + std::fabs(a) * std::fabs(log2e_f - log2e)) +
          sig * sig * (4 * half_ulp(E) + half_ulp(1 + E)) + half_ulp(sig, 1);
      // e / (1 + e) or e * (1 / (1 + e)), e = exp(a): the form that cannot overflow, for a < 0.
      const double ratio_form = a < 0 ? d * da + (1 - sig) * (1 - sig) * 4 * half_ulp(Ep) +
                                            d * half_ulp(1 + Ep) + 2 * half_ulp(sig, 1)
                                      : 0;
      // 0.5 (1 + tanh(a / 2)): a / 2 exact, tanh within 2.5 ulp (glibc's tanhf errs by up to
      // 2.19 ulp, CUDA's by 2), 1 + t.
      const double th = std::tanh(a / 2);
      const double tanh_form = d * da + 0.5 * (5 * half_ulp(th, 1) + half_ulp(1 + th, 2));
      const double value = (pre ? exact.pre : exact.post)[j];
      const double factor = !pre && sem.post_factor2 ? 2 : 1;
      const bool eps = pre ? sem.pre_eps : sem.post_eps;
      // A form whose exp overflows in double overflows in fp32 too, where sig < FLT_MIN.
      auto usable = [](double f) { return std::isfinite(f) ? f : 0.0; };
      const double worst = factor * std::max({usable(exp_form), usable(ratio_form), tanh_form}) +
                           (eps ? half_ulp(value) : 0);  // + eps
      // The products of two first-order terms (each below 8 u relative) and the reference's own
      // error; FLT_MIN for results that underflow.
      m.value[t * n + j] = value;
      m.scale[t * n + j] = worst * (1 + 64 * u) + 0x1p-53 * std::fabs(value) +
                           bnd::format_info(bnd::Format::fp32).eta;
    }
  }
  return m;
}

// The split backward's outputs (d mixes, d hc_scale, d hc_base) in double, from a number type's.
double as_double(float v) {
  return double(v);
}
double as_double(const Recip32& v) {
  return double(v.v);
}
template <class F, class Lane>
Tensors<double> to_double(const Tensors<F>& g, Lane lane) {
  Tensors<double> out(g.size());
  for (std::size_t i = 0; i < g.size(); ++i)
    for (const F& v : g[i]) out[i].push_back(lane(v));
  return out;
}

// Token t's split backward (d mixes, d hc_scale, d hc_base) at mixes m, in number type F.
template <class F>
Tensors<F> split_backward_at(const OpCase& c, std::size_t t, const F* m,
                             SoftmaxGradient softmax = SoftmaxGradient::product) {
  const std::size_t n = std::size_t(c.cfg.n), nn = n * n, M = std::size_t(c.cfg.mix());
  const float *scale = c.param("hc_scale").data.data(), *base = c.param("hc_base").data.data();
  const float *up_pre = c.input("upstream_pre").data.data() + t * n,
              *up_post = c.input("upstream_post").data.data() + t * n,
              *up_comb = c.input("upstream_comb").data.data() + t * nn;
  const std::vector<F> s(scale, scale + 3), b(base, base + M), gp(up_pre, up_pre + n),
      gq(up_post, up_post + n), gc(up_comb, up_comb + nn);
  return split_backward_closed<F>(c.cfg, m, s.data(), b.data(), gp.data(), gq.data(), gc.data(),
                                  softmax);
}
// In double, its value: the softmax's gradient by differences (exact where a row saturates).
Tensors<double> split_backward_value(const OpCase& c, std::size_t t, const double* m) {
  return split_backward_at(c, t, m, SoftmaxGradient::differences);
}

// K outputs that are, for token t, a function proj(g, mix, out) of the split backward's outputs g
// at the token's mixes (value mix, noise sigma: the kernel's own fp32 mixes, exact where sigma is
// 0): their value at mix, and the variance of their noise in two independent parts: the mixes'
// noise carried through (half the central difference over +-sigma of each mix in turn, and along
// each of the M directions of errors all mixes share, shared [M, M] where not null), and the
// split backward's own rounding at the mixes rounded to fp32, as comb_model measures the forward's
// (twice the spread of kSrRuns stochastically rounded runs, and the deviations of fp32 runs with
// the softmax's gradient in either form and of one dividing by reciprocals; salt seeds the lanes).
// The values are by differences (split_backward_value), as an autograd forms them. False where a
// sigma is not finite (not modelled).
template <class Proj>
bool split_backward_noise(const OpCase& c, std::size_t t, const double* mix, const double* sigma,
                          const double* shared, std::size_t K, const Proj& proj, std::uint64_t salt,
                          double* value, double* var) {
  const std::size_t M = std::size_t(c.cfg.mix());
  const auto same = [](auto v) { return as_double(v); };
  std::vector<double> m(mix, mix + M), m32d(M), up(K), down(K), at32(K), o(K);
  std::vector<float> m32(M);
  std::vector<Recip32> mq(M);
  std::vector<sr::Ensemble> ms(M);
  for (std::size_t a = 0; a < M; ++a) {
    if (!std::isfinite(sigma[a])) return false;
    m32[a] = float(m[a]);
    m32d[a] = double(m32[a]);
    mq[a] = m32[a];
    ms[a] = sr::Ensemble(m32[a]);
  }
  proj(split_backward_value(c, t, m.data()), m.data(), value);
  std::fill(var, var + K, 0.0);
  for (std::size_t a = 0; a < M; ++a) {
    if (sigma[a] == 0) continue;
    m[a] = mix[a] + sigma[a];
    proj(split_backward_value(c, t, m.data()), m.data(), up.data());
    m[a] = mix[a] - sigma[a];
    proj(split_backward_value(c, t, m.data()), m.data(), down.data());
    m[a] = mix[a];
    for (std::size_t k = 0; k < K; ++k) var[k] += 0.25 * (up[k] - down[k]) * (up[k] - down[k]);
  }
  for (std::size_t j = 0; shared && j < M; ++j) {  // errors all mixes share, along M directions
    const double* dir = shared + j * M;
    if (std::all_of(dir, dir + M, [](double v) { return v == 0; })) continue;
    for (std::size_t a = 0; a < M; ++a) m[a] = mix[a] + dir[a];
    proj(split_backward_value(c, t, m.data()), m.data(), up.data());
    for (std::size_t a = 0; a < M; ++a) m[a] = mix[a] - dir[a];
    proj(split_backward_value(c, t, m.data()), m.data(), down.data());
    for (std::size_t k = 0; k < K; ++k) var[k] += 0.25 * (up[k] - down[k]) * (up[k] - down[k]);
  }
  proj(split_backward_value(c, t, m32d.data()), m32d.data(), at32.data());
  std::vector<double> own(K);
  proj(to_double(split_backward_at(c, t, m32.data()), same), m32d.data(), o.data());
  for (std::size_t k = 0; k < K; ++k) own[k] = std::fabs(o[k] - at32[k]);
  proj(to_double(split_backward_at(c, t, m32.data(), SoftmaxGradient::differences), same),
       m32d.data(), o.data());
  for (std::size_t k = 0; k < K; ++k) own[k] = std::max(own[k], std::fabs(o[k] - at32[k]));
  proj(to_double(split_backward_at(c, t, mq.data()), same), m32d.data(), o.data());
  for (std::size_t k = 0; k < K; ++k) own[k] = std::max(own[k], std::fabs(o[k] - at32[k]));
  sr::Ensemble::seed_lanes(c.seed * 1000003u + t * 7919u + salt);
  const Tensors<sr::Ensemble> fs = split_backward_at(c, t, ms.data());
  // The lanes' spread per output, as lane_spread runs it, lane by lane.
  std::vector<double> mean(K, 0.0), m2(K, 0.0);
  for (int l = 0; l < kSrRuns; ++l) {
    proj(to_double(fs, [l](const sr::Ensemble& v) { return double(v[l]); }), m32d.data(), o.data());
    for (std::size_t k = 0; k < K; ++k) {
      const double dl = o[k] - mean[k];
      mean[k] += dl / (l + 1);
      m2[k] += dl * (o[k] - mean[k]);
    }
  }
  for (std::size_t k = 0; k < K; ++k) {
    own[k] = std::max(own[k], 2 * std::sqrt(m2[k] / (kSrRuns - 1)));
    var[k] += own[k] * own[k];
  }
  return true;
}

// Token t's block of size values of a per-token array, or null where the array is empty.
const double* token_block(const std::vector<double>& v, std::size_t t, std::size_t size) {
  return v.empty() ? nullptr : &v[t * size];
}

// The split's parameter gradients summed over tokens, grad_hc_scale (which = 1) or grad_hc_base
// (2), from each token's mixes (value mix, noise sigma): each token's noise as
// split_backward_noise's, and the fp32 sum over tokens, as sum_noise.
NoiseModel split_params_model(const OpCase& c, std::size_t which, const std::vector<double>& mix,
                              const std::vector<double>& sigma,
                              const std::vector<double>& shared = {}) {
  const std::size_t M = std::size_t(c.cfg.mix()), K = which == 1 ? 3 : M, T = c.tokens;
  const bnd::ModelScope scope(bnd::fp32());
  NoiseModel out;
  out.value.assign(K, 0);
  out.independent = 0;  // one token's outputs share its mixes' errors: judged element by element
  std::vector<double> var(K, 0), terms(T * K), v(K), w(K);
  const auto proj = [which](const Tensors<double>& g, const double*, double* o) {
    std::copy(g[which].begin(), g[which].end(), o);
  };
  for (std::size_t t = 0; t < T; ++t) {
    if (!split_backward_noise(c, t, &mix[t * M], &sigma[t * M], token_block(shared, t, M * M), K,
                              proj, which, v.data(), w.data()))
      return {};
    for (std::size_t k = 0; k < K; ++k) {
      var[k] += w[k];
      terms[t * K + k] = v[k];
      out.value[k] += v[k];
    }
  }
  out.scale.resize(K);
  for (std::size_t k = 0; k < K; ++k) {
    double forward = 0, backward = 0, pf = 0, pb = 0, q = 0;
    for (std::size_t t = 0; t < T; ++t) {
      forward += terms[t * K + k];
      backward += terms[(T - 1 - t) * K + k];
      pf += forward * forward;
      pb += backward * backward;
      q += terms[t * K + k] * terms[t * K + k];
    }
    out.scale[k] = std::sqrt(var[k] + u * u * (std::max(pf, pb) + q)) + bnd::model().eta;
  }
  return out;
}

// The mixes [T, M] of streams s (as the kernel holds them) that the kernel recomputes: exactly
// (mix: every stream's r (hc_fn x) in double) and their noise: sigma, mixes_model's scale, each
// mix's own; and shared [T, M, M], the streams' own errors (s.own), which every mix reads: an error
// e_i moves mix a by v_ia = r e_i (w_ai - dot_a x_i / S), through r too. Their covariance over the
// mixes, sum_i v_i v_i^T, as M directions sqrt(lambda) q along its eigenvectors (empty where the
// streams are data).
void recomputed_mixes(const OpCase& c, const Streams& s, std::vector<double>& mix,
                      std::vector<double>& sigma, std::vector<double>& shared) {
  const std::size_t nd = c.cfg.stream_size(), M = std::size_t(c.cfg.mix());
  const float* W = c.param("hc_fn").data.data();
  NoiseModel mm = mixes_model(c.cfg, s.x32.data(), c.tokens, W);
  mix = std::move(mm.value);
  sigma = std::move(mm.scale);
  shared.clear();
  // Where the terms repeat (not modelled): the mixes' bound, which holds for any order.
  const bnd::ModelScope scope(bnd::fp32());
  std::vector<bnd::Bounded> xb(nd), mb(M);
  for (std::size_t t = 0; t < c.tokens; ++t) {
    if (std::all_of(sigma.begin() + std::ptrdiff_t(t * M),
                    sigma.begin() + std::ptrdiff_t(t * M + M),
                    [](double v) { return std::isfinite(v); }))
      continue;
    for (std::size_t i = 0; i < nd; ++i)
      xb[i] = bnd::Bounded(s.x[t * nd + i], s.own.empty() ? 0 : s.own[t * nd + i]);
    ref::mixes(c.cfg, xb.data(), W, mb.data());
    for (std::size_t a = 0; a < M; ++a)
      if (!std::isfinite(sigma[t * M + a])) sigma[t * M + a] = mb[a].e;
  }
  if (s.own.empty()) return;  // mixes_model's values are exact
  shared.assign(c.tokens * M * M, 0.0);
  std::vector<double> dot(M), v(M);
  Eigen::MatrixXd C(M, M);
  for (std::size_t t = 0; t < c.tokens; ++t) {
    const double *x = s.x.data() + t * nd, *own = s.own.data() + t * nd;
    double ss = 0;
    for (std::size_t i = 0; i < nd; ++i) ss += x[i] * x[i];
    const double S = ss + double(nd) * c.cfg.norm_eps, r = 1 / std::sqrt(S / double(nd));
    for (std::size_t a = 0; a < M; ++a) {
      dot[a] = 0;
      for (std::size_t i = 0; i < nd; ++i) dot[a] += double(W[a * nd + i]) * x[i];
      mix[t * M + a] = r * dot[a];
    }
    C.setZero();
    for (std::size_t i = 0; i < nd; ++i) {
      if (own[i] == 0) continue;
      for (std::size_t a = 0; a < M; ++a)
        v[a] = r * own[i] * (double(W[a * nd + i]) - dot[a] * x[i] / S);
      for (std::size_t a = 0; a < M; ++a)
        for (std::size_t b = 0; b <= a; ++b) C(Eigen::Index(a), Eigen::Index(b)) += v[a] * v[b];
    }
    const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(C);  // reads the lower triangle
    for (std::size_t j = 0; j < M; ++j) {
      const double l = std::sqrt(std::max(eig.eigenvalues()(Eigen::Index(j)), 0.0));
      for (std::size_t a = 0; a < M; ++a)
        shared[(t * M + j) * M + a] = l * eig.eigenvectors()(Eigen::Index(a), Eigen::Index(j));
    }
  }
}

// The gradient reaching streams x through the mixes' backward, which the kernel forms in fp32 and
// does not hand over (mixes_backward's grad_x; the boundary's new streams, with its direct terms
// upstream_x_k + pre_mix_k upstream_y):
//   gx_k = direct_k + r sum_m G_m W[m, k] - x_k c,  c = (r^2 / nd) G . mix,
// G = upstream_mixes + the split's backward of the recomputed mixes, r the RMS scale. Exact (gx),
// in fp32 as the pieces' kernels compose it (gx32), and each element's own noise (the sums model
// of its M + 3 terms, and the stream's own rounding in x_k c); per token r, r's relative noise
// (mixes_model's), G and c; the mixes (value and noise) that split_backward_noise reads.
struct StreamGrad {
  Streams s;
  std::vector<float> gx32;
  std::vector<double> gx, noise, r, r_rel, G, c, mix, sigma, shared;
  std::vector<double> share_noise;  // the projection's share's whole noise (compositions only)
  // Under narrower streams, per stage (grad_post, grad_comb, grad_f, grad_residual) and output:
  // the midpoint of the compositions' span, as a shift from the value, and half its width.
  struct Span {
    std::vector<double> shift, width;
  };
  std::map<std::string, Span> spans;
};

// The projection's share of the boundary's gx, p = r W^T G - x c, as a kernel evaluates it: the
// whole noise of each element, the interval within which the compositions round it: its own
// rounding, r's relative noise on both terms, and G's noise, whose spread is at most
// r sum_m |W_mi| s_m + |x_i| (r^2 / nd) s_mix (a sum's spread is at most the sum of its terms'),
// s_m that of G_m and s_mix that of G . mix (split_backward_noise).
void share_noise(const OpCase& c, StreamGrad& g) {
  const std::size_t n = std::size_t(c.cfg.n), d = std::size_t(c.cfg.d), nd = n * d;
  const std::size_t M = std::size_t(c.cfg.mix()), T = c.tokens;
  const float* W = c.param("hc_fn").data.data();
  const float *up_m = c.input("upstream_mixes").data.data(),
              *up_x = c.input("upstream_x").data.data(), *up_y = c.input("upstream_y").data.data(),
              *pre_mix = c.input("pre_mix").data.data();
  g.share_noise.assign(T * nd, HUGE_VAL);
  std::vector<double> v(M + 1), var(M + 1);
  const bnd::ModelScope scope(bnd::fp32());
  for (std::size_t t = 0; t < T; ++t) {
    const auto proj = [&](const Tensors<double>& gg, const double* mv, double* o) {
      o[M] = 0;
      for (std::size_t m = 0; m < M; ++m) {
        o[m] = gg[0][m] + double(up_m[t * M + m]);
        o[M] += o[m] * mv[m];
      }
    };
    if (!split_backward_noise(c, t, &g.mix[t * M], &g.sigma[t * M], token_block(g.shared, t, M * M),
                              M + 1, proj, 29, v.data(), var.data()))
      continue;
    const double r = g.r[t], *x = &g.s.x[t * nd];
    for (std::size_t i = 0; i < nd; ++i) {
      const std::size_t at = t * nd + i, k = i / d, e = i % d;
      const double xc = x[i] * g.c[t];  // the mean term; the W term is p + xc
      const double p =
          g.gx[at] - double(up_x[at]) - double(pre_mix[t * n + k]) * double(up_y[t * d + e]);
      double sg = std::fabs(x[i]) * r * r / double(nd) * std::sqrt(var[M]);
      for (std::size_t m = 0; m < M; ++m)
        sg += r * std::fabs(double(W[m * nd + i])) * std::sqrt(var[m]);
      const double rw = g.r_rel[t] * (p + xc), rc = 3 * g.r_rel[t] * xc, own = g.noise[at];
      g.share_noise[at] = std::sqrt(own * own + rw * rw + rc * rc) + sg;
    }
  }
}

// The gradient of the new streams under narrower streams: a fused kernel keeps
// gx = upstream_x + pre_mix upstream_y + p (p: the mixes' backward's share) in fp32; an unfused
// one may store the shares b = pre_mix upstream_y and p in the streams' format, and sum the three
// in fp32 or in that format, in any order; an autograd reading the stored streams through one cast
// per use stores p's two terms apart, p1 = r W^T G and p2 = -x c (docs/semantics.md, "The second
// tier"). Token t's gx under each such composition (kCompositions, the fused one first): its
// deviation from gx and the half gap where a rounding's operand lies within its fp32 noise (6 times
// its scale) of a rounding boundary. Rounding is monotone, so each rounding takes the interval
// [lo, hi] its operand can span to [round(lo), round(hi)].
constexpr std::size_t kThreeShares = 32, kAutograd = 23;
constexpr std::size_t kCompositions = kThreeShares + kAutograd;
void compositions(const OpCase& c, const StreamGrad& g, std::size_t t, std::vector<double>& dev,
                  std::vector<double>& half) {
  const std::size_t n = std::size_t(c.cfg.n), d = std::size_t(c.cfg.d), nd = n * d;
  const bnd::Format format = c.precision.decl.streams;
  const float *up_x = c.input("upstream_x").data.data(), *up_y = c.input("upstream_y").data.data(),
              *pre_mix = c.input("pre_mix").data.data();
  struct Item {
    double m, h, w;  // the value's midpoint, its half gap after roundings, fp32 noise not rounded
  };
  const auto add = [](Item a, Item b) {
    return Item{a.m + b.m, a.h + b.h, a.w + b.w + u * std::fabs(a.m + b.m)};
  };
  // To fp32 first, as the kernel's fp32 value is.
  const auto round = [format](double v) { return double(gen::round_to(format, float(v))); };
  const auto rnd = [&round](Item a) {
    const double r = a.h + a.w;
    const double lo = round(a.m - r), hi = r == 0 ? lo : round(a.m + r);
    return Item{0.5 * (lo + hi), 0.5 * (hi - lo), 0};
  };
  dev.resize(kCompositions * nd);
  half.resize(kCompositions * nd);
  std::vector<Item> all;
  all.reserve(kCompositions);
  for (std::size_t k = 0; k < n; ++k)
    for (std::size_t e = 0; e < d; ++e) {
      const std::size_t i = k * d + e, at = t * nd + i;
      const double b = double(pre_mix[t * n + k]) * double(up_y[t * d + e]);
      const double a = double(up_x[at]), p = g.gx[at] - a - b, p2 = -g.s.x[at] * g.c[t];
      const double noise = 6 * g.share_noise[at];
      const Item A{a, 0, 0}, Bu{b, 0, u * std::fabs(b)}, Pu{p, 0, noise};
      const Item Br = rnd(Bu), Pr = rnd(Pu);
      all.clear();
      for (const Item& Bs : {Bu, Br})
        for (const Item& Ps : {Pu, Pr}) {
          const Item S = add(add(A, Bs), Ps);
          all.push_back(S);  // summed in fp32
          all.push_back(rnd(S));
          for (const auto& [x, y, z] :
               {std::array<Item, 3>{A, Bs, Ps}, std::array<Item, 3>{A, Ps, Bs},
                std::array<Item, 3>{Bs, Ps, A}}) {
            const Item Q = add(rnd(add(x, y)), z);
            all.push_back(Q);
            all.push_back(rnd(Q));
          }
        }
      // As an autograd on stored streams forms gx: the uses of x (hc_pre's b, the projection's
      // p1, the RMS statistic's p2) grouped by the cast each reads, a group's gradients summed in
      // fp32 and stored, then the stored shares and upstream_x accumulated in the streams' format
      // in any order (every running sum stored); and the four shares stored and summed in fp32.
      const Item P1u{p - p2, 0, noise}, P2u{p2, 0, noise};
      const auto accumulated = [&](std::initializer_list<Item> items) {
        const Item* v = items.begin();
        std::array<std::size_t, 4> o{0, 1, 2, 3};
        const auto m = std::ptrdiff_t(items.size());
        do {
          if (o[0] > o[1]) continue;
          Item acc = rnd(add(v[o[0]], v[o[1]]));
          for (std::ptrdiff_t q = 2; q < m; ++q) acc = rnd(add(acc, v[o[std::size_t(q)]]));
          all.push_back(acc);
        } while (std::next_permutation(o.begin(), o.begin() + m));
      };
      accumulated({A, rnd(add(add(Bu, P1u), P2u))});
      accumulated({A, rnd(add(Bu, P1u)), rnd(P2u)});
      accumulated({A, rnd(add(Bu, P2u)), rnd(P1u)});
      accumulated({A, Br, rnd(P1u), rnd(P2u)});
      for (const Item& Bs : {Bu, Br}) {
        const Item S = add(add(A, Bs), add(rnd(P1u), rnd(P2u)));
        all.push_back(S);
        all.push_back(rnd(S));
      }
      for (std::size_t h = 0; h < kCompositions; ++h) {
        dev[h * nd + i] = all[h].m - g.gx[at];
        half[h * nd + i] = all[h].h;
      }
    }
}

// Per output of a token, the span over the compositions of its linear function of gx's deviations
// (value v, half gap L: [v - L, v + L]); lin(dev, half, out_v, out_L) evaluates one composition.
// The output's value moves to the span's midpoint (shift); width: half the span's width, which a
// legitimate kernel's error may reach beside its noise.
template <class Lin>
void composition_span(const std::vector<double>& dev, const std::vector<double>& half,
                      std::size_t nd, std::size_t K, const Lin& lin, double* shift, double* width) {
  std::vector<double> v(K), L(K), lo(K, HUGE_VAL), hi(K, -HUGE_VAL);
  for (std::size_t h = 0; h < kCompositions; ++h) {
    lin(&dev[h * nd], &half[h * nd], v.data(), L.data());
    for (std::size_t k = 0; k < K; ++k) {
      lo[k] = std::min(lo[k], v[k] - L[k]);
      hi[k] = std::max(hi[k], v[k] + L[k]);
    }
  }
  for (std::size_t k = 0; k < K; ++k) {
    shift[k] = 0.5 * (lo[k] + hi[k]);
    width[k] = 0.5 * (hi[k] - lo[k]);
  }
}

// The spans of the four stages linear in gx, each token's compositions evaluated once: the dots
// grad_post[k] = f . gx_k and grad_comb[j, k] = R_j . gx_k, and the sums over the streams
// grad_f = sum_k post_k gx_k and grad_residual_j = sum_k C[j, k] gx_k.
void composition_spans(const OpCase& c, StreamGrad& g) {
  const std::size_t n = std::size_t(c.cfg.n), d = std::size_t(c.cfg.d), nd = n * d, T = c.tokens;
  const float *f = c.input("f").data.data(), *R = c.input("residual").data.data(),
              *post = c.input("post").data.data(), *comb = c.input("comb").data.data();
  // A stage's outputs a token: rows a [rows, d] dotted with gx_k (dots), or weights w [rows, n]
  // summing gx_k (sums).
  const auto dots = [&](const float* a, std::size_t rows) {
    return [a, rows, n, d](const double* dev, const double* half, double* o, double* L) {
      for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t k = 0; k < n; ++k) {
          double sv = 0, sl = 0;
          for (std::size_t e = 0; e < d; ++e) {
            sv += double(a[i * d + e]) * dev[k * d + e];
            sl += std::fabs(double(a[i * d + e])) * half[k * d + e];
          }
          o[i * n + k] = sv;
          L[i * n + k] = sl;
        }
    };
  };
  const auto sums = [&](const float* w, std::size_t rows) {
    return [w, rows, n, d](const double* dev, const double* half, double* o, double* L) {
      for (std::size_t j = 0; j < rows; ++j)
        for (std::size_t e = 0; e < d; ++e) {
          double sv = 0, sl = 0;
          for (std::size_t k = 0; k < n; ++k) {
            sv += double(w[j * n + k]) * dev[k * d + e];
            sl += std::fabs(double(w[j * n + k])) * half[k * d + e];
          }
          o[j * d + e] = sv;
          L[j * d + e] = sl;
        }
    };
  };
  const std::size_t K[4] = {n, n * n, d, n * d};
  const char* names[4] = {"grad_post", "grad_comb", "grad_f", "grad_residual"};
  for (std::size_t s = 0; s < 4; ++s)
    g.spans[names[s]] = {std::vector<double>(T * K[s]), std::vector<double>(T * K[s])};
  std::vector<double> dev, half;
  for (std::size_t t = 0; t < T; ++t) {
    compositions(c, g, t, dev, half);
    const auto at = [&](std::size_t s) {
      StreamGrad::Span& sp = g.spans[names[s]];
      return std::pair{&sp.shift[t * K[s]], &sp.width[t * K[s]]};
    };
    auto [s0, w0] = at(0);
    composition_span(dev, half, nd, K[0], dots(f + t * d, 1), s0, w0);
    auto [s1, w1] = at(1);
    composition_span(dev, half, nd, K[1], dots(R + t * nd, n), s1, w1);
    auto [s2, w2] = at(2);
    composition_span(dev, half, nd, K[2], sums(post + t * n, 1), s2, w2);
    auto [s3, w3] = at(3);
    composition_span(dev, half, nd, K[3], sums(comb + t * n * n, n), s3, w3);
  }
}

StreamGrad stream_grad(const OpCase& c, Streams streams, bool direct) {
  const std::size_t n = std::size_t(c.cfg.n), d = std::size_t(c.cfg.d), nd = n * d;
  const std::size_t M = std::size_t(c.cfg.mix()), T = c.tokens;
  const float* W = c.param("hc_fn").data.data();
  const float* up_m = c.input("upstream_mixes").data.data();
  const float *up_x = direct ? c.input("upstream_x").data.data() : nullptr,
              *up_y = direct ? c.input("upstream_y").data.data() : nullptr,
              *pre_mix = direct ? c.input("pre_mix").data.data() : nullptr;
  StreamGrad g{std::move(streams),
               std::vector<float>(T * nd),
               std::vector<double>(T * nd),
               std::vector<double>(T * nd),
               std::vector<double>(T),
               std::vector<double>(T),
               std::vector<double>(T * M),
               std::vector<double>(T),
               {},
               {},
               {},
               {},
               {}};
  const Streams& s = g.s;
  recomputed_mixes(c, s, g.mix, g.sigma, g.shared);
  std::vector<bnd::detail::SequentialSums> squares(T);
  bnd::detail::self_sums(s.x32.data(), T, nd, squares.data());
  std::vector<double> terms(M + 3, 0.0);
  std::vector<float> G32(M);
  for (std::size_t t = 0; t < T; ++t) {
    const double* x = s.x.data() + t * nd;
    const double* mt = g.mix.data() + t * M;
    double ss = 0;
    for (std::size_t i = 0; i < nd; ++i) ss += x[i] * x[i];
    const double r = 1 / std::sqrt(ss / double(nd) + c.cfg.norm_eps);
    const std::vector<double> g0 = split_backward_value(c, t, mt)[0];
    double* G = g.G.data() + t * M;
    double Gmix = 0;
    for (std::size_t m = 0; m < M; ++m) {
      G[m] = g0[m] + double(up_m[t * M + m]);
      G32[m] = float(G[m]);
      Gmix += G[m] * mt[m];
    }
    const double cterm = r * r / double(nd) * Gmix;
    g.r[t] = r;
    // Where the squares repeat, round to nearest's errors in their sum are not independent: r's
    // rigorous bound stands for its noise there, as the mixes' bounds do for theirs.
    bnd::Model probabilistic = bnd::fp32();
    probabilistic.probabilistic = true;
    g.r_rel[t] = bnd::detail::too_many_repeats(probabilistic, double(nd),
                                               bnd::detail::repeated_values(&s.x32[t * nd], nd))
                     ? 0.5 * bnd::gamma(double(nd), u) + 5 * u
                     : rms_scale_noise(squares[t]);
    if (!s.own.empty()) {  // the streams' own errors e_i move r by r sum_i x_i e_i / S
      double xe2 = 0;
      for (std::size_t i = 0; i < nd; ++i)
        xe2 += x[i] * s.own[t * nd + i] * x[i] * s.own[t * nd + i];
      const double S = ss + double(nd) * c.cfg.norm_eps;
      g.r_rel[t] = std::sqrt(g.r_rel[t] * g.r_rel[t] + xe2 / (S * S));
    }
    g.c[t] = cterm;
    const float r32 = float(r), c32 = float(cterm);
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t e = 0; e < d; ++e) {
        const std::size_t i = k * d + e, at = t * nd + i;
        double proj = 0;
        float acc = 0;
        for (std::size_t m = 0; m < M; ++m) {
          terms[m] = r * G[m] * double(W[m * nd + i]);
          proj += G[m] * double(W[m * nd + i]);
          acc += G32[m] * W[m * nd + i];
        }
        terms[M] = -x[i] * cterm;
        float gx32 = r32 * acc - s.x32[at] * c32;
        if (direct) {
          const float ux = up_x[at], uy = up_y[t * d + e], pm = pre_mix[t * n + k];
          terms[M + 1] = double(ux);
          terms[M + 2] = double(pm) * double(uy);
          gx32 = ux + gx32 + pm * uy;
        }
        g.gx[at] = terms[M + 1] + terms[M + 2] + r * proj - x[i] * cterm;
        g.gx32[at] = gx32;
        double pf = 0, pb = 0, p2 = 0, fw = 0, bw = 0;
        for (std::size_t j = 0; j < M + 3; ++j) {
          fw += terms[j];
          bw += terms[M + 2 - j];
          pf += fw * fw;
          pb += bw * bw;
          p2 += terms[j] * terms[j];
        }
        const double own = s.own.empty() ? 0 : cterm * s.own[at];  // the stream's own error
        g.noise[at] = std::sqrt(u * u * (std::max(pf, pb) + 4 * p2) + own * own);
      }
  }
  if (direct && c.precision.decl.streams != bnd::Format::fp32) {
    share_noise(c, g);
    composition_spans(c, g);
  }
  return g;
}

// The boundary backward's grad_post[k] = f . gx_k (comb false: the rows a = f) or grad_comb[j, k] =
// R_j . gx_k (a = R), over its new streams' gradient gx. Independent parts in quadrature: the dots
// model over gx32 with each element's own noise; G's noise (split_backward_noise) carried by
// D[i, k, m] = r a_i . W[m, k] - (r^2 / nd) mix_m a_i . x_k; and r's relative noise on the two
// terms, 3 times on the second (r^3 where a kernel takes the projection unscaled). Under narrower
// streams, the compositions' span (composition_span) beside the noise's limit.
NoiseModel recomputed_stream_grads_model(const OpCase& c, const StreamGrad& g, bool comb) {
  const std::size_t n = std::size_t(c.cfg.n), d = std::size_t(c.cfg.d), nd = n * d;
  const std::size_t M = std::size_t(c.cfg.mix()), T = c.tokens, na = comb ? n : 1, K = na * n;
  const float* W = c.param("hc_fn").data.data();
  const float* a = c.input(comb ? "residual" : "f").data.data();
  const float* up_m = c.input("upstream_mixes").data.data();
  std::vector<double> var(T * K), A(K * M), X(K), v(K), w(K);
  const bnd::ModelScope scope(bnd::fp32());
  for (std::size_t t = 0; t < T; ++t) {
    const double* x = g.s.x.data() + t * nd;
    const double r = g.r[t];
    // D's pieces: A[i, k, m] = a_i . W[m, k], X[i, k] = a_i . x_k.
    for (std::size_t i = 0; i < na; ++i)
      for (std::size_t k = 0; k < n; ++k) {
        const float* ai = a + (t * na + i) * d;
        double xs = 0;
        for (std::size_t e = 0; e < d; ++e) xs += double(ai[e]) * x[k * d + e];
        X[i * n + k] = xs;
        for (std::size_t m = 0; m < M; ++m) {
          double ws = 0;
          for (std::size_t e = 0; e < d; ++e) ws += double(ai[e]) * double(W[m * nd + k * d + e]);
          A[(i * n + k) * M + m] = ws;
        }
      }
    const auto proj = [&](const Tensors<double>& gg, const double* mv, double* o) {
      for (std::size_t ik = 0; ik < K; ++ik) {
        double sum = 0;
        for (std::size_t m = 0; m < M; ++m)
          sum += (gg[0][m] + double(up_m[t * M + m])) *
                 (r * A[ik * M + m] - r * r / double(nd) * mv[m] * X[ik]);
        o[ik] = sum;
      }
    };
    if (!split_backward_noise(c, t, &g.mix[t * M], &g.sigma[t * M], token_block(g.shared, t, M * M),
                              K, proj, 3 + na, v.data(), w.data())) {
      std::fill(var.begin() + std::ptrdiff_t(t * K), var.begin() + std::ptrdiff_t(t * K + K),
                HUGE_VAL);
      continue;
    }
    for (std::size_t ik = 0; ik < K; ++ik) {
      double wterm = 0;
      for (std::size_t m = 0; m < M; ++m) wterm += r * g.G[t * M + m] * A[ik * M + m];
      const double rw = g.r_rel[t] * wterm, rc = 3 * g.r_rel[t] * g.c[t] * X[ik];
      var[t * K + ik] = w[ik] + rw * rw + rc * rc;
    }
  }
  NoiseModel out = dots_model(a, na, g.gx32.data(), n, T, d, {g.gx.data(), g.noise.data()});
  out.independent = 0;  // a token's outputs share its G's and r's errors
  const auto span = g.spans.find(comb ? "grad_comb" : "grad_post");
  for (std::size_t i = 0; i < out.scale.size(); ++i) {
    out.scale[i] = std::sqrt(out.scale[i] * out.scale[i] + var[i]);
    if (span == g.spans.end()) continue;
    // The span is a worst case: beside the noise's limit, not in quadrature with it.
    out.scale[i] += span->second.width[i] / out.max_z;
    out.value[i] += span->second.shift[i];
  }
  return out;
}

// Stream gradients that sum gx over the streams with weights w[j, k] (rows j of each token, w
// [T, rows, n]; null: gx itself, mixes_backward's grad_x): the boundary's grad_f (w = post) and
// grad_residual (w = comb). Each element's value from gx in double; independent parts in
// quadrature: the n-term sum's rounding (as sum_noise; none for gx itself), the terms' own noise,
// G's noise (split_backward_noise) through B[j, e, m] = r sum_k w_jk W[m, k e] - (r^2 / nd) mix_m
// sum_k w_jk x_ke, and r's relative noise as in the dots. Beside the noise's limit: the
// compositions' span (the boundary under narrower streams) and the storage's rounding (stored).
NoiseModel stream_sums_model(const OpCase& c, const StreamGrad& g, const float* w, std::size_t rows,
                             bnd::Format stored, const StreamGrad::Span* span = nullptr) {
  const std::size_t n = std::size_t(c.cfg.n), d = std::size_t(c.cfg.d), nd = n * d;
  const std::size_t M = std::size_t(c.cfg.mix()), T = c.tokens, K = rows * d;
  const float* W = c.param("hc_fn").data.data();
  const float* up_m = c.input("upstream_mixes").data.data();
  auto weight = [&](std::size_t t, std::size_t j, std::size_t k) {
    return w ? double(w[(t * rows + j) * n + k]) : double(j == k);
  };
  NoiseModel out;
  out.value.resize(T * K);
  out.scale.resize(T * K);
  out.independent = 0;  // a token's outputs share its G's and r's errors
  std::vector<double> WB(M * K), XB(K), wterm(K), v(K), var(K);
  const bnd::FormatInfo& out_format = bnd::format_info(stored);
  const bnd::ModelScope scope(bnd::fp32());
  for (std::size_t t = 0; t < T; ++t) {
    const double* x = g.s.x.data() + t * nd;
    const double r = g.r[t];
    std::fill(WB.begin(), WB.end(), 0.0);
    std::fill(XB.begin(), XB.end(), 0.0);
    for (std::size_t j = 0; j < rows; ++j)  // WB [m][j d + e]: the loops below run along e
      for (std::size_t k = 0; k < n; ++k) {
        const double wk = weight(t, j, k);
        if (wk == 0) continue;
        for (std::size_t e = 0; e < d; ++e) XB[j * d + e] += wk * x[k * d + e];
        for (std::size_t m = 0; m < M; ++m) {
          double* wb = &WB[m * K + j * d];
          const float* wm = W + m * nd + k * d;
          for (std::size_t e = 0; e < d; ++e) wb[e] += wk * double(wm[e]);
        }
      }
    // The W term r sum_m G_m WB[m, je] of each output.
    std::fill(wterm.begin(), wterm.end(), 0.0);
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t je = 0; je < K; ++je) wterm[je] += r * g.G[t * M + m] * WB[m * K + je];
    const auto proj = [&](const Tensors<double>& gg, const double* mv, double* o) {
      double gm = 0;
      for (std::size_t m = 0; m < M; ++m) gm += (gg[0][m] + double(up_m[t * M + m])) * mv[m];
      const double cc = r * r / double(nd) * gm;
      for (std::size_t je = 0; je < K; ++je) o[je] = -cc * XB[je];
      for (std::size_t m = 0; m < M; ++m) {
        const double gr = r * (gg[0][m] + double(up_m[t * M + m]));
        const double* wb = &WB[m * K];
        for (std::size_t je = 0; je < K; ++je) o[je] += gr * wb[je];
      }
    };
    const bool modelled =
        split_backward_noise(c, t, &g.mix[t * M], &g.sigma[t * M], token_block(g.shared, t, M * M),
                             K, proj, 10 + rows, v.data(), var.data());
    for (std::size_t j = 0; j < rows; ++j)
      for (std::size_t e = 0; e < d; ++e) {
        const std::size_t je = j * d + e;
        double value = 0, own2 = 0, pf = 0, pb = 0, p2 = 0, fw = 0, bw = 0;
        for (std::size_t k = 0; k < n; ++k) {
          const std::size_t at = t * nd + k * d + e, back = t * nd + (n - 1 - k) * d + e;
          const double wk = weight(t, j, k), term = wk * g.gx[at];
          value += term;
          own2 += wk * wk * g.noise[at] * g.noise[at];
          fw += term;
          bw += weight(t, j, n - 1 - k) * g.gx[back];
          pf += fw * fw;
          pb += bw * bw;
          p2 += term * term;
        }
        const double rw = g.r_rel[t] * wterm[je], rc = 3 * g.r_rel[t] * g.c[t] * XB[je];
        const double sum2 = w ? u * u * (std::max(pf, pb) + 4 * p2) : 0;
        const double shift = span ? span->shift[t * K + je] : 0,
                     width = span ? span->width[t * K + je] : 0, centre = value + shift;
        const double store = stored == bnd::Format::fp32
                                 ? 0
                                 : out_format.u * (std::fabs(centre) + width) + out_format.eta;
        out.value[t * K + je] = centre;
        // The span and the storage's rounding are worst cases: beside the noise's limit.
        out.scale[t * K + je] = modelled ? std::sqrt(var[je] + own2 + sum2 + rw * rw + rc * rc) +
                                               (width + store) / out.max_z
                                         : HUGE_VAL;
      }
  }
  return out;
}

// grad_hc_fn[m, i] = sum_t r_t G_t[m] x_t[i], the projection's weight gradient over the tokens'
// streams (the case's, or the new streams the boundary recomputes). Independent parts in
// quadrature: G_t[m]'s noise (split_backward_noise, and the rounding of its sum with
// upstream_mixes) and r_t's, each times r_t x_t[i]; the streams' own rounding times r_t G_t[m];
// and the fp32 products and sum over tokens (the sums model of the T terms, two roundings a term).
// A token's errors reach every element of a row m: judged element by element.
NoiseModel hc_fn_grad_model(const OpCase& c, const StreamGrad& g) {
  const std::size_t nd = c.cfg.stream_size(), M = std::size_t(c.cfg.mix()), T = c.tokens;
  const bnd::ModelScope scope(bnd::fp32());
  std::vector<double> varG(T * M), v(M);
  const auto proj = [](const Tensors<double>& gg, const double*, double* o) {
    std::copy(gg[0].begin(), gg[0].end(), o);
  };
  for (std::size_t t = 0; t < T; ++t) {
    if (!split_backward_noise(c, t, &g.mix[t * M], &g.sigma[t * M], token_block(g.shared, t, M * M),
                              M, proj, 3, v.data(), &varG[t * M]))
      return {};
    for (std::size_t m = 0; m < M; ++m) varG[t * M + m] += u * u * g.G[t * M + m] * g.G[t * M + m];
  }
  // Token by token along i (contiguous), the partial sums of both orders kept per element.
  NoiseModel out;
  out.value.assign(M * nd, 0.0);
  out.independent = 0;
  std::vector<double> var(M * nd, 0.0), pf(M * nd, 0.0), q(M * nd, 0.0), bw(M * nd, 0.0),
      pb(M * nd, 0.0);
  for (std::size_t t = 0; t < T; ++t) {
    const double r = g.r[t], rr = g.r_rel[t] * g.r_rel[t], own2 = g.s.own.empty() ? 0 : r * r;
    const double* x = &g.s.x[t * nd];
    const double* own = g.s.own.empty() ? x : &g.s.own[t * nd];
    for (std::size_t m = 0; m < M; ++m) {
      const double G = g.G[t * M + m], vg = varG[t * M + m] + G * G * rr;
      double *val = &out.value[m * nd], *vr = &var[m * nd], *f2 = &pf[m * nd], *q2 = &q[m * nd];
      for (std::size_t i = 0; i < nd; ++i) {
        const double carried = r * x[i], term = carried * G;
        val[i] += term;
        f2[i] += val[i] * val[i];
        q2[i] += term * term;
        vr[i] += carried * carried * vg + own2 * G * G * own[i] * own[i];
      }
    }
  }
  for (std::size_t t = T; t-- > 0;) {
    const double r = g.r[t];
    const double* x = &g.s.x[t * nd];
    for (std::size_t m = 0; m < M; ++m) {
      const double G = g.G[t * M + m];
      double *b = &bw[m * nd], *b2 = &pb[m * nd];
      for (std::size_t i = 0; i < nd; ++i) {
        b[i] += r * x[i] * G;
        b2[i] += b[i] * b[i];
      }
    }
  }
  out.scale.resize(M * nd);
  for (std::size_t k = 0; k < M * nd; ++k)
    out.scale[k] =
        std::sqrt(var[k] + u * u * (std::max(pf[k], pb[k]) + 4 * q[k])) + bnd::model().eta;
  return out;
}

// The case's streams x as Streams (data: no error of their own).
Streams given_streams(const OpCase& c, const char* name) {
  const std::vector<float>& x = c.input(name).data;
  return {x, std::vector<double>(x.begin(), x.end()), {}};
}

// The streams' gradient of a mixes_backward or boundary_backward case, formed once for the stages
// whose models read it.
class Shared {
 public:
  explicit Shared(const OpCase& c) : c_(c) {}
  const StreamGrad& grad() {
    if (!grad_)
      grad_ = std::make_unique<StreamGrad>(c_.op == Op::mixes_backward
                                               ? stream_grad(c_, given_streams(c_, "x"), false)
                                               : stream_grad(c_, recomputed_streams(c_), true));
    return *grad_;
  }

 private:
  const OpCase& c_;
  std::unique_ptr<StreamGrad> grad_;
};

}  // namespace

namespace {

// The kernel's stage `name` as a model may read it: present, of `size` values and not rounded on
// handover; else null (not modelled).
const float* handed_over(const OpCase& c, const Trace<float>& got, const bnd::StoredFormats& stored,
                         const std::string& name, std::size_t size) {
  const Stage<float>* s = find_stage(got, name);
  return s && s->values.size() == size && !rounded_on_handover(c, stored, name) ? s->values.data()
                                                                                : nullptr;
}

// RMSNorm's model needs its arithmetic and its output in fp32 (inputs and weights stored narrower
// are read as they are).
bool rmsnorm_modelled(const OpCase& c) {
  const bnd::Declaration& d = c.precision.decl;
  using F = bnd::Format;
  return d.streams == F::fp32 && d.intermediates == F::fp32 && d.products == F::fp32 &&
         d.accumulation == F::fp32;
}

// The boundary's model of its stage `name` (b holds the boundary's params): the split's stages
// from `mixes`, the projection from the streams `xs` in fp32; null operands are not modelled.
NoiseModel boundary_model(const OpCase& b, const std::string& name, const float* mixes,
                          const float* xs) {
  if (name == "comb" || name == "pre" || name == "post") {
    if (!mixes) return {};
    return name == "comb" ? comb_model(b, mixes) : weights_model(b, mixes, name == "pre");
  }
  const bnd::Declaration& d = b.precision.decl;
  if (name != "mixes" || !xs || d.products != bnd::Format::fp32 ||
      d.accumulation != bnd::Format::fp32 || d.mixes != bnd::Format::fp32 ||
      d.intermediates != bnd::Format::fp32)
    return {};
  return mixes_model(b.cfg, xs, b.tokens, b.param("hc_fn").data.data());
}

// A boundary of a Block or a stack ("attn.comb", "L1.ffn.mixes"), modelled as the op boundary is
// anchored: the split from the kernel's own mixes of that boundary, and its mixes from the streams
// the kernel gave that boundary (the Block's x or the layer before's x_out; x_mid). Empty for any
// other stage.
NoiseModel block_model(const OpCase& c, const std::string& stage, const Trace<float>& got,
                       const bnd::StoredFormats& stored) {
  std::string rest = stage, layer_params, before = "x";
  if (c.op == Op::stack) {
    const std::size_t dot = stage.find('.');
    if (stage.size() < 2 || stage[0] != 'L' || dot == std::string::npos) return {};
    const int l = std::atoi(stage.substr(1, dot - 1).c_str());
    rest = stage.substr(dot + 1);
    layer_params = "layers/" + std::to_string(l) + "/";
    if (l > 0) before = "L" + std::to_string(l - 1) + ".x_out";
  }
  const std::size_t dot = rest.find('.');
  if (dot == std::string::npos) return {};
  const std::string sub = rest.substr(0, dot), name = rest.substr(dot + 1);
  if (sub != "attn" && sub != "ffn") return {};
  const std::string prefix = stage.substr(0, stage.size() - name.size());  // "L1.attn."
  if (name == "normed") {  // the RMSNorm of the kernel's own sublayer input
    const bool on = sub == "attn" ? c.block.sem.attn_norm : c.block.sem.ffn_norm;
    const float* in = handed_over(c, got, stored, prefix + "in", c.tokens * std::size_t(c.cfg.d));
    if (!on || !in || !rmsnorm_modelled(c)) return {};
    return rmsnorm_model(c.cfg, in, c.param(layer_params + sub + "_norm/weight").data.data(),
                         c.tokens);
  }
  OpCase b = case_header(Op::boundary, c.cfg, c.tokens, c.seed, c.precision);
  for (const char* p : {"hc_fn", "hc_scale", "hc_base"})
    b.params[p] = c.param(layer_params + sub + "/" + p);
  const std::string streams =
      sub == "attn" ? before : prefix.substr(0, prefix.size() - 4) + "x_mid";
  return boundary_model(
      b, name, handed_over(c, got, stored, prefix + "mixes", c.tokens * std::size_t(c.cfg.mix())),
      streams == "x" ? c.input("x").data.data()
                     : handed_over(c, got, stored, streams, c.tokens * c.cfg.stream_size()));
}

// The models of the kernel's own stages: the Block's and the stack's boundaries (block_model), and
// the boundary's, anchored: its mixes of its new streams, the split of its mixes.
NoiseModel on_kernel(const OpCase& c, const std::string& stage, const Trace<float>& got,
                     const bnd::StoredFormats& stored) {
  if (c.op == Op::block || c.op == Op::stack) return block_model(c, stage, got, stored);
  if (stage.rfind(kAnchored, 0) == 0)
    return boundary_model(c, stage.substr(kAnchored.size()),
                          handed_over(c, got, stored, "mixes", c.tokens * std::size_t(c.cfg.mix())),
                          nullptr);
  if (stage == "mixes")
    return boundary_model(c, stage, nullptr,
                          handed_over(c, got, stored, "x", c.tokens * c.cfg.stream_size()));
  return {};
}

// noise_model with the case's shared state.
NoiseModel model_of(const OpCase& c, const std::string& stage, const Trace<float>& got,
                    const bnd::StoredFormats& stored, Shared& shared) {
  // The split's models need its stages in fp32: mixes read as the kernel stored them, the
  // coefficients not rounded after; streams stored narrower are read as they are. The
  // projection's model needs fp32 operands and sums too.
  if (c.precision.decl.coefficients != bnd::Format::fp32) return {};
  // Under another semantics (the diagnosis's alternatives) only the split's, from the case's
  // mixes or anchored on the kernel's, which follow the semantics.
  const auto split = [](const std::string& s) { return s == "comb" || s == "pre" || s == "post"; };
  if (!c.cfg.sem.is_default() && !((c.op == Op::split_sinkhorn && split(stage)) ||
                                   (c.op == Op::boundary && stage.rfind(kAnchored, 0) == 0 &&
                                    split(stage.substr(kAnchored.size())))))
    return {};
  if (c.op == Op::block || c.op == Op::stack || c.op == Op::boundary) {
    NoiseModel m = on_kernel(c, stage, got, stored);
    m.on_kernel = true;
    return m;
  }
  switch (c.op) {
    case Op::rmsnorm:
      return stage == "y" && rmsnorm_modelled(c)
                 ? rmsnorm_model(c.cfg, c.input("x").data.data(), c.param("weight").data.data(),
                                 c.tokens)
                 : NoiseModel{};
    case Op::rmsnorm_backward:
      return stage == "grad_x" && rmsnorm_modelled(c) &&
                     declared_output_storage(c, stage) == bnd::Format::fp32
                 ? rmsnorm_backward_model(c.cfg, c.input("x").data.data(),
                                          c.param("weight").data.data(),
                                          c.input("upstream_y").data.data(), c.tokens)
                 : NoiseModel{};
    case Op::split_sinkhorn:  // from the case's mixes
      return boundary_model(c, stage, c.input("mixes").data.data(), nullptr);
    case Op::mixes:
      return boundary_model(c, stage, nullptr, c.input("x").data.data());
    case Op::split_sinkhorn_backward:
    case Op::mixes_backward:
    case Op::pre_backward:
    case Op::post_backward:
    case Op::boundary_backward: {
      const bnd::Declaration& d = c.precision.decl;
      const bool fp32_sums = d.products == bnd::Format::fp32 && d.accumulation == bnd::Format::fp32;
      const bool boundary = c.op == Op::boundary_backward;
      // A gradient stored narrower (a stream input's under bf16 streams) errs by its storage as
      // well; only the streams' gradient models (below) count it.
      const bnd::Format storage = declared_output_storage(c, stage);
      const bool stream_sum = (c.op == Op::mixes_backward && stage == "grad_x") ||
                              (boundary && (stage == "grad_f" || stage == "grad_residual"));
      if (storage != bnd::Format::fp32 && !stream_sum) return {};
      if (stage == "grad_hc_scale" || stage == "grad_hc_base") {
        // The split's parameter gradients: from the case's mixes, or from the mixes the kernel
        // recomputes in fp32 (of the case's streams, or of the new streams it recomputes too).
        const std::size_t which = stage == "grad_hc_scale" ? 1 : 2;
        if (c.op == Op::split_sinkhorn_backward) {
          const std::vector<float>& m = c.input("mixes").data;
          return split_params_model(c, which, std::vector<double>(m.begin(), m.end()),
                                    std::vector<double>(m.size(), 0));
        }
        if (fp32_sums && d.mixes == bnd::Format::fp32)
          return split_params_model(c, which, shared.grad().mix, shared.grad().sigma,
                                    shared.grad().shared);
        return {};
      }
      if (stage == "grad_hc_fn") {  // over the streams the mixes were recomputed from
        if ((c.op == Op::mixes_backward || boundary) && fp32_sums && d.mixes == bnd::Format::fp32)
          return hc_fn_grad_model(c, shared.grad());
        return {};
      }
      if (c.op == Op::mixes_backward) {  // grad_x: the streams' gradient itself
        if (stage != "grad_x" || !fp32_sums || d.mixes != bnd::Format::fp32) return {};
        return stream_sums_model(c, shared.grad(), nullptr, std::size_t(c.cfg.n), storage);
      }
      // Dot products over d, summed in fp32: grad_pre_mix[j] = upstream_y . x_j,
      // grad_post[k] = f . upstream_y_k, grad_comb[j, k] = residual_j . upstream_y_k; the
      // boundary's grad_pre_mix over the streams it recomputes, with fp32 streams only.
      if (!fp32_sums || c.op == Op::split_sinkhorn_backward || c.op == Op::mixes_backward)
        return {};
      const std::size_t n = std::size_t(c.cfg.n), dim = std::size_t(c.cfg.d);
      const float* up = c.input("upstream_y").data.data();
      if (boundary && stage == "grad_pre_mix") return recomputed_pre_mix_model(c, shared.grad().s);
      // The gradient of the new streams, over mixes recomputed in fp32; under narrower streams an
      // unfused kernel may store its shares in that format (compositions).
      const bool gx_modelled = d.mixes == bnd::Format::fp32;
      if (boundary && (stage == "grad_post" || stage == "grad_comb") && gx_modelled)
        return recomputed_stream_grads_model(c, shared.grad(), stage == "grad_comb");
      if (boundary && (stage == "grad_f" || stage == "grad_residual") && gx_modelled) {
        const bool f = stage == "grad_f";
        const StreamGrad& g = shared.grad();
        const auto span = g.spans.find(stage);
        return stream_sums_model(c, g, c.input(f ? "post" : "comb").data.data(), f ? 1 : n, storage,
                                 span == g.spans.end() ? nullptr : &span->second);
      }
      if (boundary) return {};
      if (c.op == Op::pre_backward)
        return stage == "grad_pre_mix"
                   ? dots_model(up, 1, c.input("x").data.data(), n, c.tokens, dim)
                   : NoiseModel{};
      if (c.op == Op::post_backward && stage == "grad_post")
        return dots_model(c.input("f").data.data(), 1, up, n, c.tokens, dim);
      if (c.op == Op::post_backward && stage == "grad_comb")
        return dots_model(c.input("residual").data.data(), n, up, n, c.tokens, dim);
      return {};
    }
    default:
      return {};
  }
}

}  // namespace

NoiseModel noise_model(const OpCase& c, const std::string& stage, const Trace<float>& got,
                       const bnd::StoredFormats& stored) {
  Shared shared(c);
  return model_of(c, stage, got, stored, shared);
}

NoiseVerdict noise_judge(const float* got, const NoiseModel& model, std::size_t per_token) {
  NoiseVerdict v;
  double z2 = 0;
  for (std::size_t i = 0; i < model.value.size(); ++i) {
    const double s = model.scale[i], want = model.value[i];
    if (!std::isfinite(s) || !std::isfinite(want)) continue;
    const double diff = std::fabs(double(got[i]) - want);
    const double z = diff == 0 ? 0 : (s > 0 ? diff / s : HUGE_VAL);
    ++v.elements;
    z2 += std::isfinite(z) ? z * z : HUGE_VAL;
    if (v.elements == 1 || !(z <= v.z_max)) {
      v.z_max = std::isnan(z) ? HUGE_VAL : z;
      v.worst =
          Element{i, per_token ? i / per_token : 0, double(got[i]), want, s, v.z_max, "noise"};
    }
  }
  v.z_rms = v.elements ? std::sqrt(z2 / double(v.elements)) : 0;
  v.z_limit = model.max_z;
  // The root mean square is an aggregate only over enough independent elements: with fewer than
  // (kNoiseMax / kNoiseRms)^2 = 16, one element inside the element limit could exceed it alone.
  const double dof = double(v.elements) * model.independent;
  const bool aggregate = dof >= (kNoiseMax / kNoiseRms) * (kNoiseMax / kNoiseRms);
  v.rms_limit = aggregate ? kNoiseRms : 0;
  char buf[360], rms[96], token[40] = "";
  if (per_token) std::snprintf(token, sizeof token, " (token %zu)", v.worst.token);
  if (aggregate)
    std::snprintf(rms, sizeof rms, "rms %.3g (limit %g)", v.z_rms, kNoiseRms);
  else
    std::snprintf(rms, sizeof rms, "rms %.3g (not judged: %.3g independent elements < 16)", v.z_rms,
                  dof);
  const bool flagged = v.z_max > model.max_z || (aggregate && v.z_rms > kNoiseRms);
  v.state = flagged ? State::fail : State::pass;
  std::snprintf(buf, sizeof buf,
                "second tier (statistical): error / fp32 rounding noise max %.3g (limit %g), %s "
                "over %zu elements; worst at %zu%s: got %.9g, want %.9g, noise %.3g",
                v.z_max, model.max_z, rms, v.elements, v.worst.index, token, v.worst.got,
                v.worst.want, v.worst.bound);
  v.reason = v.elements ? buf
                        : "second tier (statistical): no element modelled (the terms repeat: "
                          "their rounding errors are not independent)";
  return v;
}

NoiseModels noise_models(const OpCase& c, const Trace<float>& got,
                         const bnd::StoredFormats& stored) {
  NoiseModels models;
  Shared shared(c);
  for (const auto& s : got)
    for (const std::string& name : {s.name, kAnchored + s.name}) {
      if (std::any_of(stored.begin(), stored.end(), [&](const auto& f) {
            return f.first == s.name && f.second != bnd::Format::fp32;
          }))
        continue;
      NoiseModel m = model_of(c, name, got, stored, shared);
      if (!m.value.empty()) models.emplace(name, std::move(m));
    }
  return models;
}

NoiseModels moved_models(const NoiseModels& models, const Trace<bnd::Bounded>& own,
                         const Trace<bnd::Bounded>& alt) {
  NoiseModels moved;
  for (const auto& [stage, m] : models) {
    const Stage<bnd::Bounded>*a = find_stage(alt, stage), *o = find_stage(own, stage);
    if ((m.on_kernel && stage.rfind(kAnchored, 0) != 0) || !a || !o ||
        a->values.size() != m.value.size() || o->values.size() != m.value.size())
      continue;
    // A deviation that moves an element beyond the case's bound is told apart by the bounds; the
    // case's noise need not be the deviation's there.
    bool within = true;
    for (std::size_t i = 0; i < m.value.size() && within; ++i)
      within = !(std::fabs(a->values[i].v - o->values[i].v) > o->values[i].e);
    if (!within) continue;
    NoiseModel& n = moved[stage] = m;
    for (std::size_t i = 0; i < n.value.size(); ++i) n.value[i] += a->values[i].v - o->values[i].v;
  }
  return moved;
}

void second_tier(const NoiseModels& models, const OpCase& c, const Trace<float>& got, Verdict& v) {
  bool changed = false;
  for (auto& sv : v.stages) {
    const bool anchored = sv.stage.rfind(kAnchored, 0) == 0;  // judges the kernel's own stage
    const Stage<float>* g =
        find_stage(got, anchored ? sv.stage.substr(kAnchored.size()) : sv.stage);
    const auto it = models.find(sv.stage);
    if (!g || sv.state != State::pass || it == models.end()) continue;
    const NoiseModel& m = it->second;
    if (m.value.size() != g->values.size()) continue;
    // A parameter's gradient has no token dimension.
    const auto& outs = op_spec(c.op).outputs;
    const auto spec = std::find_if(outs.begin(), outs.end(),
                                   [&](const TensorSpec& t) { return t.name == g->name; });
    const std::size_t per_token = spec != outs.end() && !spec->per_token
                                      ? 0
                                      : m.value.size() / std::max<std::size_t>(c.tokens, 1);
    sv.has_noise = true;
    sv.noise = noise_judge(g->values.data(), m, per_token);
    if (sv.noise.state == State::fail) {
      sv.state = State::fail;
      sv.rule = "noise";
      sv.reason = sv.noise.reason;
      changed = true;
    }
  }
  if (changed) settle(v);
}

}  // namespace mhc::oracles
