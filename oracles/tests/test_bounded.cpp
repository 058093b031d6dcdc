// The bound-carrying Scalar: its arithmetic, and the soundness of its bounds against fp32
// evaluations of the same reference.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "mhc/oracles/backward.hpp"
#include "mhc/oracles/birkhoff.hpp"
#include "mhc/oracles/bounded.hpp"
#include "mhc/oracles/generate.hpp"
#include "mhc/oracles/ops.hpp"
#include "mhc/oracles/random.hpp"

using namespace mhc;
using B = bnd::Bounded;

namespace {
constexpr double u = 0x1.0p-24, eta = 0x1.0p-126;
}

// Exact operands: the result's bound is its own rounding, u|v| + u64|v| + eta (division: 2u).
TEST_CASE("bounded: one operation on exact operands", "[bounded]") {
  bnd::ModelScope scope(bnd::fp32());
  const B a(3.0), b(0.25);
  const B s = a + b;
  CHECK(s.v == 3.25);
  CHECK(s.e == Approx(u * 3.25 + bnd::u64 * 3.25 + eta).epsilon(1e-12));
  const B q = a / b;
  CHECK(q.v == 12.0);
  CHECK(q.e == Approx(2 * u * 12 + bnd::u64 * 12 + eta).epsilon(1e-12));
  // Propagation: (1 +- 0.1) * (2 +- 0.2) is within 2 * (0.2 + 0.2 + 0.02) of 2.
  const B p = B(1.0, 0.1) * B(2.0, 0.2);
  CHECK(p.e >= 0.1 * 2 + 0.2 * 1 + 0.1 * 0.2);
  // A denominator whose bound reaches 0 gives no bound.
  CHECK(std::isinf((B(1.0) / B(0.5, 0.5)).e));
}

// The n-term sum: sum of bounds + gamma_{n-1}(u) (A + E) + gamma_{n-1}(u64) A + (n-1) eta.
TEST_CASE("bounded: order-independent reduction bound", "[bounded]") {
  bnd::ModelScope scope(bnd::fp32());
  std::vector<B> t{B(1.0, 0.0), B(-2.0, 1e-6), B(4.0, 0.0), B(0.5, 2e-6)};
  const B s = bnd::sum(t.data(), t.size());
  CHECK(s.v == 3.5);
  const double A = 7.5, E = 3e-6;
  CHECK(s.e == Approx(E + bnd::gamma(3, u) * (A + E) + bnd::gamma(3, bnd::u64) * A + 3 * eta)
                   .epsilon(1e-12));
}

// Sound bounds cover a real fp32 evaluation: the same reference run with Scalar = float (plain
// left-to-right loops, libm expf/sqrtf) must lie within the bound of every element of every op.
TEST_CASE("bounded: the fp32 reference lies within the bounds of every op",
          "[bounded][soundness]") {
  const auto op = GENERATE(from_range(oracles::all_ops()));
  const int seed = GENERATE(1, 2, 3);
  ref::Config cfg;
  cfg.n = GENERATE(1, 2, 4);
  cfg.d = 96;
  cfg.iters = 20;
  cfg.hc_eps = GENERATE(1e-6, 1e-2);
  const auto c =
      oracles::generate_case(op, cfg, 6, std::uint64_t(seed), oracles::Precision::fp32());
  const auto want = oracles::oracle_trace(c, 1);
  const auto got = oracles::evaluate_op<float>(c, 1);
  REQUIRE(got.size() == want.size());
  for (std::size_t s = 0; s < want.size(); ++s)
    for (std::size_t i = 0; i < want[s].values.size(); ++i) {
      const B& w = want[s].values[i];
      const float g = got[s].values[i];
      CAPTURE(oracles::op_name(op), seed, cfg.n, cfg.hc_eps, want[s].name, i, g, w.v, w.e);
      REQUIRE(std::isfinite(w.e));
      CHECK(std::fabs(double(g) - w.v) <= w.e);
    }
}

// The Sinkhorn bound is a linearisation; its premise is that no division's denominator is near
// fp32's underflow. A column 120 below every row's max is 7.7e-53 a row in double and flushed to 0
// in fp32: with hc_eps = 0 the fp32 reference divides it by its sum, 0 / 0 (NaN), where the exact
// comb is finite. Without the premise there is no bound; with it the fp32 values are within the
// bounds.
TEST_CASE("bounded: the Sinkhorn bound holds where its premise does and gives none elsewhere",
          "[bounded][soundness]") {
  const double eps = GENERATE(0.0, 1e-30, 1e-6);
  const double drop = GENERATE(20.0, 120.0);
  ref::Config c;
  c.n = 4;
  c.hc_eps = eps;
  std::vector<double> L(16);
  for (int j = 0; j < 4; ++j)
    for (int k = 0; k < 4; ++k) L[std::size_t(j * 4 + k)] = k == 3 ? -drop : 0.3 * (j - k);
  const std::vector<float> Lf(L.begin(), L.end());
  std::vector<float> got(16);
  ref::sinkhorn(c, Lf.data(), got.data());
  const std::vector<B> Lb(L.begin(), L.end());
  std::vector<B> want(16);
  bnd::sinkhorn(c, Lb.data(), want.data());
  const bool premise = bnd::sinkhorn_linearisable(c, L.data());
  CAPTURE(eps, drop);
  CHECK(premise == (eps > 0 || drop == 20.0));
  for (int i = 0; i < 16; ++i) {
    CAPTURE(i, got[std::size_t(i)], want[std::size_t(i)].v, want[std::size_t(i)].e);
    if (!premise) {
      CHECK(std::isinf(want[std::size_t(i)].e));
      continue;
    }
    REQUIRE(std::isfinite(want[std::size_t(i)].e));
    CHECK(std::fabs(double(got[std::size_t(i)]) - want[std::size_t(i)].v) <=
          want[std::size_t(i)].e);
  }
  if (!premise) {  // the case the premise exists for: the fp32 comb is not a number there
    bool nan = false;
    for (float g : got) nan = nan || std::isnan(g);
    CHECK(nan);
  }
}

// Generated cases at hc_eps = 0 whose fp32 comb divides an underflowed line by its sum: the
// linearisation's sensitivities cancel there, so without the premise the bounds stayed finite (the
// comb's +- 0.0265 around 1 in the first, the split's gradients' in the second) while the fp32
// evaluation gave NaN.
TEST_CASE("bounded: the fp32 reference lies within the bounds at hc_eps = 0, or has none",
          "[bounded][soundness]") {
  struct Case {
    oracles::Op op;
    int n, d, tokens, iters;
    std::uint64_t seed;
  };
  // The last: a line sum near underflow, its adjoint multiplied by 1 / sum a step past fp32's
  // range.
  const auto k = GENERATE(Case{oracles::Op::split_sinkhorn, 4, 33, 7, 20, 38},
                          Case{oracles::Op::split_sinkhorn_backward, 3, 3, 1, 20, 5057},
                          Case{oracles::Op::split_sinkhorn_backward, 5, 64, 1, 50, 78});
  ref::Config cfg;
  cfg.n = k.n;
  cfg.d = k.d;
  cfg.iters = k.iters;
  cfg.hc_eps = 0;
  const auto c = oracles::generate_case(k.op, cfg, k.tokens, k.seed, oracles::Precision::fp32());
  const bool forward = k.op == oracles::Op::split_sinkhorn;
  const auto want = forward ? oracles::oracle_trace(c, 1) : oracles::backward_trace(c, 1);
  // The split's backward in fp32 by its closed forms (one token).
  auto closed = [&] {
    const auto in = [&](const char* name) { return c.input(name).data.data(); };
    const auto p = [&](const char* name) { return c.param(name).data.data(); };
    const auto g = oracles::split_backward_closed<float>(cfg, in("mixes"), p("hc_scale"),
                                                         p("hc_base"), in("upstream_pre"),
                                                         in("upstream_post"), in("upstream_comb"));
    oracles::Trace<float> t;
    for (const auto& [name, i] :
         {std::pair{"grad_mixes", 0}, {"grad_hc_scale", 1}, {"grad_hc_base", 2}})
      t.push_back({name, {g[std::size_t(i)].size()}, g[std::size_t(i)]});
    return t;
  };
  const auto got = forward ? oracles::evaluate_op<float>(c, 1) : closed();
  int unbounded = 0, nan = 0;
  for (const auto& w : want) {
    const auto* g = oracles::find_stage(got, w.name);
    REQUIRE(g);
    REQUIRE(g->values.size() == w.values.size());
    for (std::size_t i = 0; i < w.values.size(); ++i) {
      CAPTURE(oracles::op_name(k.op), w.name, i, g->values[i], w.values[i].v, w.values[i].e);
      unbounded += std::isinf(w.values[i].e);
      nan += std::isnan(g->values[i]);
      if (std::isfinite(w.values[i].e))
        CHECK(std::fabs(double(g->values[i]) - w.values[i].v) <= w.values[i].e);
    }
  }
  CHECK(nan > 0);  // the fp32 evaluation the premise exists for
  CHECK(unbounded > 0);
}

// The model matters: a tf32 evaluation of mixes is within the tf32 bounds but not the fp32 ones.
TEST_CASE("bounded: tf32 products exceed the fp32 model and fit the tf32 one", "[bounded]") {
  ref::Config cfg;
  cfg.d = 512;
  const auto c32 =
      oracles::generate_case(oracles::Op::mixes, cfg, 4, 5, oracles::Precision::fp32());
  auto ctf = c32;
  ctf.precision = oracles::Precision::tf32();
  const auto w32 = oracles::oracle_trace(c32, 1);
  const auto wtf = oracles::oracle_trace(ctf, 1);
  // tf32 rounding of both operands (11 significant bits, to nearest even), products and sums in
  // double: what a tf32 unit computes, with an even more accurate accumulation.
  auto tf32 = [](float v) {
    int ex;
    const double m = std::frexp(double(v), &ex);  // v = m 2^ex, 0.5 <= |m| < 1
    return std::ldexp(std::nearbyint(std::ldexp(m, 11)), ex - 11);
  };
  const auto& x = c32.input("x").data;
  const auto& W = c32.param("hc_fn").data;
  const std::size_t nd = cfg.stream_size(), M = std::size_t(cfg.mix());
  std::size_t outside32 = 0;
  for (std::size_t t = 0; t < 4; ++t) {
    double ss = 0;
    for (std::size_t i = 0; i < nd; ++i) ss += double(x[t * nd + i]) * double(x[t * nd + i]);
    const double r = 1 / std::sqrt(ss / double(nd) + cfg.norm_eps);
    for (std::size_t a = 0; a < M; ++a) {
      double acc = 0;
      for (std::size_t i = 0; i < nd; ++i) {
        acc += tf32(x[t * nd + i]) * tf32(W[a * nd + i]);
      }
      const double m = acc * r;
      const B& b32 = w32[0].values[t * M + a];
      const B& btf = wtf[0].values[t * M + a];
      CHECK(std::fabs(m - btf.v) <= btf.e);
      outside32 += std::fabs(m - b32.v) > b32.e ? 1 : 0;
    }
  }
  CHECK(outside32 > 0);
}

// Storage in fp16 errs by u = 2^-11 of a normal value, and by less than its smallest normal 2^-14
// below it (to a subnormal, or flushed to 0): the bound is the larger, not the sum. At 0.0059 the
// sum was 11 times fp16's rounding there, and a value 14 fp16 ulps off passed.
TEST_CASE("bounded: fp16 storage errs by its rounding, or its floor below the smallest normal",
          "[bounded]") {
  bnd::Declaration d;
  d.streams = bnd::Format::fp16;
  bnd::ModelScope scope(bnd::model_for(d, "streams=fp16"));
  const B s = bnd::stored(B(0.0059, 0.0));
  CHECK(s.e == 0x1.0p-11 * 0.0059);
  for (double x = 1e-9; x < 10; x *= 1.01) {
    CAPTURE(x);
    const double e = bnd::stored(B(x, 0.0)).e;
    CHECK(std::fabs(double(oracles::gen::round_fp16(float(x))) - x) <= e);
    if (x < 0x1.0p-14) CHECK(x <= e);  // flushed to zero
  }
}

// fp16 operands: 65504 is fp16's largest value, and an operand beyond it may round to inf. Where
// one of a product's operands (a weight, or a value with its bound) exceeds it, the sum has no
// bound, in the definition and in the blocked projection alike; at 65504 it still has one.
TEST_CASE("bounded: an fp16 operand beyond fp16's range leaves the projection unbounded",
          "[bounded]") {
  bnd::Declaration d;
  d.products = bnd::Format::fp16;
  bnd::ModelScope scope(bnd::model_for(d, "products=fp16"));
  const std::size_t n = 12, rows = 3, tokens = 2;
  std::vector<B> x(tokens * n, B(1.5, 0.0));
  std::vector<float> W(rows * n, 0.25f);
  x[n + 4] = B(65504.0, 0.0);  // token 1
  W[2 * n + 7] = 65504.0f;     // row 2
  std::vector<B> out(tokens * rows);
  bnd::project(x.data(), tokens, W.data(), rows, n, out.data());
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t a = 0; a < rows; ++a) {
      CHECK(std::isfinite(out[t * rows + a].e));
      CHECK(std::isfinite(bnd::linear(&x[t * n], &W[a * n], n).e));
    }
  x[n + 4] = B(65504.0, 1.0);  // may exceed 65504: token 1 unbounded
  W[2 * n + 7] = 65520.0f;     // row 2 unbounded
  bnd::project(x.data(), tokens, W.data(), rows, n, out.data());
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t a = 0; a < rows; ++a) {
      CAPTURE(t, a);
      const bool over = t == 1 || a == 2;
      CHECK(std::isinf(out[t * rows + a].e) == over);
      CHECK(std::isinf(bnd::linear(&x[t * n], &W[a * n], n).e) == over);
    }
}

// The vector paths against the definitions they regroup. project(): the bound is
// detail::reduce(v, A, E) taken as one dot product of nonnegative terms in fp32, so it never falls
// below the definition (linear(), A and E apart in double) and exceeds it at most by: c rounded
// up (1 + 2^-23)(1 + 2^-24), the fp32 products and sums rounding up (1 + gamma_{n+1}(2^-24)),
// and the enlargement that covers them rounding down (1 + gamma_{n+1}(2^-24))(1 + 2^-45). The
// value is a double sum in another order.
TEST_CASE("bounded: the blocked projection keeps the definition's bound", "[bounded]") {
  const std::size_t n = GENERATE(1, 7, 8, 37, 300, 2051);
  const std::size_t tokens = GENERATE(1, 5, 9);
  const std::size_t rows = GENERATE(1, 3, 24);
  const std::string model = GENERATE("fp32", "tf32", "probabilistic");
  bnd::Model m = model == "tf32" ? bnd::tf32() : bnd::fp32();
  m.probabilistic = model == "probabilistic";
  bnd::ModelScope scope(m);
  std::uint64_t state = n * 1000003 + tokens * 101 + rows;
  auto uniform = [&state] {  // splitmix64 -> [-1, 1)
    state += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return double((z ^ (z >> 31)) >> 11) * 0x1.0p-52 - 1;
  };
  std::vector<B> x(tokens * n);
  for (auto& b : x) {
    const double v = uniform() * std::exp2(8 * uniform());
    b = B(v, uniform() > 0 ? std::fabs(v * uniform()) * 1e-6 : 0.0);  // half of them exact
  }
  std::vector<float> W(rows * n);
  for (auto& w : W) w = float(uniform() * 0.05);
  std::vector<B> got(tokens * rows);
  bnd::project(x.data(), tokens, W.data(), rows, n, got.data());
  const double slack = bnd::gamma(double(n) + 1, 0x1.0p-24);
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t a = 0; a < rows; ++a) {
      const B want = bnd::linear(&x[t * n], &W[a * n], n);
      double mag = 0;
      for (std::size_t i = 0; i < n; ++i) mag += std::fabs(x[t * n + i].v * double(W[a * n + i]));
      const B& g = got[t * rows + a];
      CAPTURE(n, tokens, rows, model, t, a, g.v, g.e, want.v, want.e);
      CHECK(std::fabs(g.v - want.v) <= 2 * bnd::gamma(double(n), bnd::u64) * mag);
      CHECK(g.e >= want.e);
      CHECK(g.e <= want.e * (1 + 0x1.0p-23) * (1 + 0x1.0p-24) * (1 + slack) * (1 + slack) *
                           (1 + 0x1.0p-44) +
                       double(n) * 0x1.0p-148);
    }
}

// The probabilistic bound's premise (independent rounding errors) fails in two regimes, where a
// sequential fp32 sum errs beyond Higham & Mary's exp(lambda sqrt(n) u + n u^2 / (1 - u)) - 1
// at lambda = 8 (formula restated here, not taken from the header): n equal terms (the error
// grows like n u; Connolly, Higham & Mary 2021), and many small squares added after a dominant
// one (5000^2 last: the backward sum rounds each to the partial sum's ulp, more of them down than
// up). linear() and project() must bound both sums all the same (gamma_n), also as a kernel
// sums the equal terms scaled first by s (other mantissas, which the data check must not
// depend on), and keep the probabilistic bound for random terms, signed or positive.
TEST_CASE("bounded: the probabilistic bound's premise is checked on the data", "[bounded]") {
  const std::size_t n = GENERATE(2051, 20480);
  bnd::Model m = bnd::fp32();
  m.probabilistic = true;
  bnd::ModelScope scope(m);
  const double hm = std::expm1(8 * std::sqrt(double(n)) * u + double(n) * u * u / (1 - u));
  std::uint64_t state = n;
  auto uniform = [&state] {  // splitmix64 -> [0, 1)
    state += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return double((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
  };
  const std::vector<float> ones(n, 1.0f);
  const std::size_t kCases = 16;
  for (const std::string kind : {"equal", "dominant", "signed", "positive"}) {
    std::vector<B> x(kCases * n);
    for (std::size_t c = 0; c < kCases; ++c) {
      const double equal = 1 + uniform();
      for (std::size_t i = 0; i < n; ++i) {
        const double g =
            std::sqrt(-2 * std::log(1 - uniform())) * std::cos(6.283185307179586 * uniform());
        x[c * n + i] = B(double(float(kind == "equal" ? equal : kind == "signed" ? g : g * g)));
      }
      if (kind == "dominant") x[c * n + n - 1] = B(5000.0 * 5000.0);
    }
    std::vector<B> got(kCases);
    bnd::project(x.data(), kCases, ones.data(), 1, n, got.data());
    int beyond_hm = 0;
    for (std::size_t c = 0; c < kCases; ++c) {
      float forward = 0, backward = 0;
      double exact = 0, A = 0;
      for (std::size_t i = 0; i < n; ++i) {
        forward += float(x[c * n + i].v);
        backward += float(x[c * n + n - 1 - i].v);
        exact += x[c * n + i].v;
        A += std::fabs(x[c * n + i].v);
      }
      const double seq =
          std::max(std::fabs(double(forward) - exact), std::fabs(double(backward) - exact));
      beyond_hm += seq > hm * A;
      const B one = bnd::linear(&x[c * n], ones.data(), n);
      CAPTURE(n, kind, c, seq / A, one.e / A, got[c].e / A, hm);
      CHECK(one.e >= seq);
      CHECK(got[c].e >= seq);
      if (kind == "equal")
        for (int k = 1; k <= 8; ++k) {  // fl(t s) summed forward against s * exact
          const float sc = 1 + float(k) / 8;
          float scaled = 0;
          for (std::size_t i = 0; i < n; ++i) scaled += float(x[c * n + i].v) * sc;
          const double err = std::fabs(double(scaled) - double(sc) * exact);
          CAPTURE(k, err / A);
          CHECK(one.e * double(sc) >= err);
          CHECK(got[c].e * double(sc) >= err);
        }
      if (kind == "signed" || kind == "positive") {
        CHECK(one.e < 1.01 * hm * A);
        CHECK(got[c].e < 1.01 * hm * A);
      }
    }
    CAPTURE(n, kind, beyond_hm);
    if (n == 20480 && (kind == "equal" || kind == "dominant"))
      CHECK(beyond_hm > int(kCases) / 2);  // the premise fails
    if (kind == "signed" || kind == "positive") CHECK(beyond_hm == 0);
  }
}

// Beyond the model's range the projection gives no bound, and NaN stays NaN, as the definition.
TEST_CASE("bounded: the blocked projection at the edges of the range", "[bounded]") {
  bnd::ModelScope scope(bnd::fp32());
  const std::size_t n = 40;
  std::vector<B> x(2 * n, B(1.0, 1e-7));
  x[3] = B(3e38, 0.0);                                          // token 0: |x w| sums past FLT_MAX
  x[n + 5] = B(std::numeric_limits<double>::quiet_NaN(), 0.0);  // token 1
  const std::vector<float> W(n, 2.0f);
  std::vector<B> got(2);
  bnd::project(x.data(), 2, W.data(), 1, n, got.data());
  CHECK(std::isinf(got[0].e));
  CHECK(std::isinf(bnd::linear(x.data(), W.data(), n).e));
  CHECK(std::isnan(got[1].v));
  CHECK(std::isnan(got[1].e));
}

// lincomb's four-column vector path computes each column as its scalar path does (same operands,
// same order), bit for bit. dot's four lanes sum in another order than the definition: both
// double sums are within gamma_m(u64) of their exact values, so they differ by at most twice that.
TEST_CASE("bounded: vector lincomb and dot against their scalar forms", "[bounded]") {
  bnd::ModelScope scope(bnd::bf16());
  const std::size_t k = 5, m = 11;
  std::vector<float> w{0.5f, -1.25f, 3.0f, 1e-3f, -0.75f};
  std::vector<std::vector<float>> rf(k, std::vector<float>(m));
  std::vector<std::vector<B>> rb(k, std::vector<B>(m));
  for (std::size_t i = 0; i < k; ++i)
    for (std::size_t c = 0; c < m; ++c) {
      rf[i][c] = float(std::sin(double(7 * i + c)) * 10);
      rb[i][c] = B(std::cos(double(3 * i + c)) * 4, 1e-5 * double(c % 3));
    }
  auto check_rows = [&](const auto& rows) {
    std::vector<const typename std::decay_t<decltype(rows[0])>::value_type*> all(k);
    for (std::size_t i = 0; i < k; ++i) all[i] = rows[i].data();
    std::vector<B> wide(m);
    bnd::lincomb(w.data(), all.data(), k, m, wide.data());
    for (std::size_t c = 0; c < m; ++c) {
      auto one = all;
      for (auto& r : one) r += c;
      B single;
      bnd::lincomb(w.data(), one.data(), k, 1, &single);  // one column: the scalar path
      CAPTURE(c);
      CHECK(wide[c].v == single.v);
      CHECK(wide[c].e == single.e);
    }
  };
  check_rows(rf);
  check_rows(rb);
  const B d = bnd::dot(rb[0].data(), rb[1].data(), m);
  double v = 0, A = 0, E = 0;
  for (std::size_t c = 0; c < m; ++c) {
    const B& a = rb[0][c];
    const B& b = rb[1][c];
    v += a.v * b.v;
    A += std::fabs(a.v * b.v);
    E += std::fabs(a.v) * b.e + std::fabs(b.v) * a.e + a.e * b.e;
  }
  const B want = bnd::detail::reduce(v, A, E, m);
  CHECK(std::fabs(d.v - want.v) <= 2 * bnd::gamma(double(m), bnd::u64) * A);
  CHECK(std::fabs(d.e - want.e) <= 2 * bnd::gamma(double(m), bnd::u64) * want.e);
}

// A = [[3,1],[1,1]]: the only non-trivial cross-ratio is 3*1/(1*1), so Delta = log 3 and
// kappa = tanh(log(3)/4) = (sqrt 3 - 1)/(sqrt 3 + 1) (tanh(log(x)/4) = (x^(1/2)-1)/(x^(1/2)+1)).
// Diagonal scalings leave it unchanged.
TEST_CASE("birkhoff: contraction coefficient of the seed 004 example", "[birkhoff]") {
  std::vector<double> A{3, 1, 1, 1};
  CHECK(oracles::projective_diameter(A, 2) == Approx(std::log(3.0)).epsilon(1e-14));
  const double want = (std::sqrt(3.0) - 1) / (std::sqrt(3.0) + 1);
  CHECK(oracles::birkhoff_kappa(A, 2) == Approx(want).epsilon(1e-14));
  std::vector<double> S{3 * 2.0 * 5, 1 * 2.0 * 7, 1 * 0.5 * 5,
                        1 * 0.5 * 7};  // diag(2,.5) A diag(5,7)
  CHECK(oracles::birkhoff_kappa(S, 2) == Approx(want).epsilon(1e-12));
  std::vector<double> Z{1, 0, 1, 1};
  CHECK(std::isinf(oracles::projective_diameter(Z, 2)));
}

// project()'s premise check in vector lanes against detail::sequential_error, bit for bit, with
// repeated terms in x, in W and in both (the count only matters where both repeat), and token and
// row counts that leave partial blocks.
TEST_CASE("bounded: the vector premise check is the sequential definition", "[bounded]") {
  bnd::Model m = bnd::fp32();
  m.probabilistic = true;
  bnd::ModelScope scope(m);
  const std::size_t n = GENERATE(65, 2051, 20480);
  const std::size_t tokens = GENERATE(1, 6);
  const std::size_t rows = GENERATE(3, 24);
  const std::string repeats = GENERATE("none", "x", "w", "both");
  oracles::Rng rng(n * 31 + tokens * 7 + rows);
  auto uniform = [&rng] { return rng.uniform(-1, 1); };
  // Repeating operands: every third value equal to the one two places before.
  const bool rx = repeats == "x" || repeats == "both", rw = repeats == "w" || repeats == "both";
  std::vector<B> x(tokens * n);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = B(rx && i % n >= 2 && i % n % 3 == 0 ? x[i - 2].v : double(float(uniform() * 3)));
  std::vector<float> W(rows * n);
  for (std::size_t i = 0; i < W.size(); ++i)
    W[i] = rw && i % n >= 2 && i % n % 3 == 0 ? W[i - 2] : float(uniform() * 0.05);
  std::vector<double> seq(tokens * rows), A(tokens * rows);
  bnd::detail::sequential_errors(x.data(), tokens, W.data(), rows, n, seq.data(), A.data());
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t a = 0; a < rows; ++a) {
      const double want = bnd::detail::sequential_error(&x[t * n], &W[a * n], n);
      float sa = 0;
      for (std::size_t i = 0; i < n; ++i) sa += std::fabs(float(x[t * n + i].v) * W[a * n + i]);
      CAPTURE(n, tokens, rows, repeats, t, a, seq[t * rows + a], want);
      CHECK(std::memcmp(&seq[t * rows + a], &want, sizeof want) == 0);
      CHECK(A[t * rows + a] == double(sa));
      if (repeats == "both" && n > 64) CHECK(std::isinf(want));  // the repeats do count
    }
  for (std::size_t t = 0; t < tokens; ++t) {  // a sum of squares (the RMS statistic)
    const double got = bnd::detail::squares_error(&x[t * n], n),
                 want = bnd::detail::sequential_error(&x[t * n], &x[t * n], n);
    CAPTURE(n, tokens, repeats, t, got, want);
    CHECK(std::memcmp(&got, &want, sizeof got) == 0);
    if (rx && n > 64) CHECK(std::isinf(want));
  }
  // The same sums with the noise model's squares: values bit for bit as above, squares of the
  // fp32 partial sums and products within a float sum's n u of their double sums.
  std::vector<float> xf(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) xf[i] = float(x[i].v);
  std::vector<bnd::detail::SequentialSums> s(tokens * rows);
  bnd::detail::sequential_sums(xf.data(), tokens, W.data(), rows, n, s.data());
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t a = 0; a < rows; ++a) {
      float f = 0, b = 0;
      double qf = 0, qb = 0, qp = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const float p = float(x[t * n + i].v) * W[a * n + i];
        f += p;
        b += float(x[t * n + n - 1 - i].v) * W[a * n + n - 1 - i];
        qf += double(f) * double(f);
        qb += double(b) * double(b);
        qp += double(p) * double(p);
      }
      const auto& o = s[t * rows + a];
      const double tol = double(n) * 0x1.0p-23;
      CAPTURE(n, tokens, rows, repeats, t, a);
      CHECK(o.forward == f);
      CHECK(o.backward == b);
      CHECK(std::fabs(double(o.partials2_forward) - qf) <= tol * qf);
      CHECK(std::fabs(double(o.partials2_backward) - qb) <= tol * qb);
      CHECK(std::fabs(double(o.products2) - qp) <= tol * qp);
    }
  // The squares scale with the operands by powers of two, bit for bit, down to terms whose
  // squares are below float's range (products near 1e-25: the scale of a dot of tiny gradients).
  std::vector<float> xs(xf.size()), Ws(W.size());
  for (std::size_t i = 0; i < xf.size(); ++i) xs[i] = std::ldexp(xf[i], -43);
  for (std::size_t i = 0; i < W.size(); ++i) Ws[i] = std::ldexp(W[i], -40);
  std::vector<bnd::detail::SequentialSums> tiny(tokens * rows);
  bnd::detail::sequential_sums(xs.data(), tokens, Ws.data(), rows, n, tiny.data());
  for (std::size_t k = 0; k < tokens * rows; ++k) {
    CAPTURE(n, tokens, rows, repeats, k);
    CHECK(tiny[k].partials2_forward == std::ldexp(s[k].partials2_forward, -166));
    CHECK(tiny[k].partials2_backward == std::ldexp(s[k].partials2_backward, -166));
    CHECK(tiny[k].products2 == std::ldexp(s[k].products2, -166));
  }
  // Each token's sum of squares alone: the diagonal of the sums of x against itself, every field
  // bit for bit.
  std::vector<bnd::detail::SequentialSums> all(tokens * tokens), own(tokens);
  bnd::detail::sequential_sums(xf.data(), tokens, xf.data(), tokens, n, all.data());
  bnd::detail::self_sums(xf.data(), tokens, n, own.data());
  for (std::size_t t = 0; t < tokens; ++t) {
    const auto &d = all[t * tokens + t], &o = own[t];
    CAPTURE(n, tokens, repeats, t);
    for (auto [a, b] : {std::pair{d.forward, o.forward},
                        {d.backward, o.backward},
                        {d.magnitude, o.magnitude},
                        {d.partials2_forward, o.partials2_forward},
                        {d.partials2_backward, o.partials2_backward},
                        {d.products2, o.products2}})
      CHECK(std::memcmp(&a, &b, sizeof a) == 0);
    CHECK(std::memcmp(&d.exact, &o.exact, sizeof d.exact) == 0);
  }
}

// A declaration's parts reach the bound-carrying arithmetic: a projection whose running sum is
// rounded to bf16 after every addition lies inside the bound of a declared bf16 accumulation
// (gamma_n at u = 2^-8) and, on these sums, outside fp32's; the presets are declarations.
TEST_CASE("bounded: a declared bf16 accumulation bounds a bf16 running sum", "[bounded]") {
  auto summed_in = [](bnd::Format f) {
    bnd::Declaration d;
    d.accumulation = f;
    return d;
  };
  const bnd::Model bf16_sum = bnd::model_for(summed_in(bnd::Format::bf16), "bf16-sum");
  CHECK(bf16_sum.u_sum == 0x1.0p-8);
  CHECK(bnd::model_by_name("tf32").u_prod == 2 * 0x1.0p-11 + 0x1.0p-22);
  const int streams = int(ref::Storage::streams);
  CHECK(bnd::model_by_name("bf16").store[streams].u == 0x1.0p-8);
  CHECK(bnd::model_by_name("fp16").store[streams].big == 65504);
  CHECK_THROWS_WITH(bnd::model_by_name("fp8"), Catch::Contains("bf16-projection"));
  CHECK_THROWS_WITH(bnd::model_for(summed_in(bnd::Format::fp16), "x"),
                    Catch::Contains("not modelled"));
  oracles::Rng rng(11);
  const std::size_t n = 2048;
  int outside_fp32 = 0;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> w(n), x(n);
    for (std::size_t i = 0; i < n; ++i) {
      w[i] = float(rng.uniform(0, 1));  // same-signed terms: the running sum grows
      x[i] = float(rng.uniform(0, 1));
    }
    float s = 0;
    for (std::size_t i = 0; i < n; ++i) s = oracles::gen::round_bf16(s + w[i] * x[i]);
    std::vector<B> xb(x.begin(), x.end());
    {
      const bnd::ModelScope scope(bf16_sum);
      const B b = bnd::linear(xb.data(), w.data(), n);
      CAPTURE(trial, b.v, b.e, s);
      CHECK(std::fabs(double(s) - b.v) <= b.e);
    }
    const bnd::ModelScope scope(bnd::fp32());
    const B b = bnd::linear(xb.data(), w.data(), n);
    outside_fp32 += std::fabs(double(s) - b.v) > b.e;
  }
  CHECK(outside_fp32 == 20);
}

// fp16 storage: every value rounded to fp16 (nearest even; subnormals below 2^-14 in steps of
// 2^-24; 65520 and above overflow) lies inside stored()'s bound under the fp16 preset, and a value
// that may overflow has no bound.
TEST_CASE("bounded: fp16 storage bounds fp16 rounding over its range", "[bounded]") {
  auto round_fp16 = [](double v) {
    const double a = std::fabs(v);
    const double step = a < 0x1.0p-14 ? 0x1.0p-24 : std::ldexp(1.0, std::ilogb(a) - 10);
    const double r = std::nearbyint(a / step) * step;  // ties to even: the default mode
    return std::copysign(r >= 65520 ? HUGE_VAL : r, v);
  };
  const bnd::ModelScope scope(bnd::model_by_name("fp16"));
  oracles::Rng rng(12);
  for (int i = 0; i < 20000; ++i) {
    const double v = (i % 2 ? 1 : -1) * std::exp2(rng.uniform(-30, 15.99));
    const B s = bnd::stored(B(v, 0));
    CAPTURE(v, s.e);
    CHECK(std::fabs(round_fp16(v) - v) <= s.e);
  }
  CHECK(bnd::stored(B(65504, 0)).e < 32);
  CHECK(bnd::stored(B(65519, 0)).e == HUGE_VAL);
}

// fp16 operands below fp16's smallest normal (2^-14) lose up to half a subnormal step (2^-25)
// each, not a relative 2^-11: weights near 1e-6 round by up to 3%. A kernel that rounds both
// operands to fp16 and sums in fp32 must stay within the fp16 preset's bound, through linear()
// and through project()'s vector path.
TEST_CASE("bounded: fp16 operands below fp16's normal range are within the bound", "[bounded]") {
  const bnd::ModelScope scope(bnd::model_by_name("fp16"));
  const std::size_t n = 64, rows = 3, tokens = 4;
  std::vector<float> W(rows * n), xf(tokens * n);
  std::vector<B> x(tokens * n), got(tokens * rows);
  for (std::size_t i = 0; i < W.size(); ++i)
    W[i] = float((1 + double(i % 7) / 7) * 1e-6 * (i % 3 ? 1 : -1));
  for (std::size_t i = 0; i < xf.size(); ++i) {
    xf[i] = mhc::oracles::gen::round_fp16(float(1 + double(i % 11) / 11));
    x[i] = B(double(xf[i]), 0);
  }
  bnd::project(x.data(), tokens, W.data(), rows, n, got.data());
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t a = 0; a < rows; ++a) {
      float acc = 0;
      for (std::size_t i = 0; i < n; ++i)
        acc += mhc::oracles::gen::round_fp16(W[a * n + i]) * xf[t * n + i];
      const B want = bnd::linear(&x[t * n], &W[a * n], n);
      CAPTURE(t, a, acc, want.v, want.e, got[t * rows + a].e);
      CHECK(std::fabs(double(acc) - want.v) <= want.e);
      CHECK(std::fabs(double(acc) - got[t * rows + a].v) <= got[t * rows + a].e);
    }
}

// A value stored by rounding to nearest an fp32 evaluation within its bound: every such rounding
// lies within rounded_to's bound, and the bound is 0 where the interval lies within one rounding
// cell. Intervals are drawn around values, around the midpoints between two bf16 (fp16) values
// (where the two sides round apart) and across them, with fp32 points at and between the ends.
TEST_CASE("bounded: rounded_to encloses the rounding of every fp32 value in the bound",
          "[bounded]") {
  using F = bnd::Format;
  oracles::Rng rng(29);
  for (F f : {F::bf16, F::fp16}) {
    const double ulp_rel = f == F::bf16 ? 0x1.0p-7 : 0x1.0p-10;
    auto round = [f](float y) {
      return double(f == F::bf16 ? oracles::gen::round_bf16(y) : oracles::gen::round_fp16(y));
    };
    int exact = 0, straddles = 0;
    for (int k = 0; k < 20000; ++k) {
      const double mag = std::ldexp(1.0, rng.integer(-12, 12)) * rng.uniform(1, 2);
      double v = (rng.uniform() < 0.5 ? -1 : 1) * mag;
      const int kind = rng.integer(0, 2);
      if (kind > 0) {  // at a midpoint between two neighbours, moved by a few fp32 ulps
        const double lo = round(float(v)), step = std::ldexp(ulp_rel, std::ilogb(lo));
        v = lo + step / 2 + double(rng.integer(-3, 3)) * std::ldexp(0x1.0p-23, std::ilogb(lo));
      }
      const double e = kind == 2 ? 0 : std::fabs(v) * std::ldexp(1.0, -rng.integer(8, 26));
      const B r = bnd::rounded_to(B(v, e), f);
      REQUIRE(std::isfinite(r.e));
      const float lo = std::nextafter(float(v - e), float(v)), hi = float(v + e);
      bool apart = false;
      for (int s = 0; s <= 64; ++s) {
        float y = float(double(lo) + (double(hi) - double(lo)) * s / 64);
        if (double(y) < v - e) y = std::nextafter(y, hi);
        if (double(y) > v + e) continue;
        const double z = round(y);
        REQUIRE(std::fabs(z - r.v) <= r.e);
        apart = apart || z != r.v;
      }
      exact += r.e == 0 ? 1 : 0;
      straddles += apart ? 1 : 0;
    }
    // Both situations were drawn: a known stored value, and an interval rounding to two.
    CHECK(exact > 2000);
    CHECK(straddles > 500);
  }
  // fp32: nothing to round; beyond the format's range: no bound.
  CHECK(bnd::rounded_to(B(1.5, 1e-3), bnd::Format::fp32).e == 1e-3);
  CHECK(std::isinf(bnd::rounded_to(B(65504.0, 40.0), bnd::Format::fp16).e));
}

// PyTorch eager on bf16 tensors rounds each operation's output to bf16 and accumulates sums in
// fp32 (or in bf16: a loop of adds, a bf16 batched matmul): hc_pre's and hc_post's products, the
// sums' results, RMSNorm's statistic and its normalised value. Columns built to cancel (the last
// stream nearly the negated sum of the others) make those roundings far larger than the output's
// own: they fit the intermediates model, not the streams' storage alone. At n = 8 a loop of bf16
// adds exceeded a model of two roundings a term (1 element of these).
TEST_CASE("bounded: eager bf16 intermediates fit the intermediates model, not storage alone",
          "[bounded]") {
  using oracles::gen::round_bf16;
  bnd::Declaration stored_only;
  stored_only.streams = bnd::Format::bf16;
  bnd::Declaration eager = stored_only;
  eager.mixes = eager.intermediates = bnd::Format::bf16;
  const bnd::Model m_eager = bnd::model_for(eager, "eager"),
                   m_stored = bnd::model_for(stored_only, "stored");
  ref::Config cfg;
  cfg.n = GENERATE(4, 8);
  cfg.d = 64;
  const std::size_t n = std::size_t(cfg.n), d = 64;
  oracles::Rng rng(23);
  auto bf = [&](double lo, double hi) { return round_bf16(float(rng.uniform(lo, hi))); };
  // The bounds of both models for one output element, stored in bf16, against the eager value.
  int outside_stored[3] = {};  // hc_pre, hc_post, RMSNorm
  auto judge = [&](int piece, auto bound_of, std::size_t count, const float* eager_values) {
    for (const bnd::Model* m : {&m_eager, &m_stored}) {
      const bnd::ModelScope scope(*m);
      std::vector<B> want(count);
      bound_of(want.data());
      for (std::size_t i = 0; i < count; ++i) {
        const B w = bnd::stored(want[i]);
        const bool in = std::fabs(double(eager_values[i]) - w.v) <= w.e;
        if (m == &m_eager) {
          CAPTURE(i, eager_values[i], w.v, w.e);
          CHECK(in);
        } else {
          outside_stored[piece] += !in;
        }
      }
    }
  };
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> x(n * d), f(d), p(n), post(n), comb(n * n), g(d);
    for (std::size_t j = 0; j < n; ++j) {
      p[j] = bf(0.1, 1);
      post[j] = bf(0, 2);
    }
    for (float& c : comb) c = bf(0, 1);
    for (std::size_t c = 0; c < d; ++c) {
      f[c] = bf(-2, 2);
      g[c] = bf(0.5, 1.5);
      double s = 0;
      // Odd columns same-signed but the last stream: running sums as large as they get.
      for (std::size_t j = 0; j + 1 < n; ++j)
        s += double(p[j]) * double(x[j * d + c] = bf(c % 2 ? 0 : -4, 4));
      x[(n - 1) * d + c] = round_bf16(float(-s / double(p[n - 1]) * rng.uniform(0.99, 1.01)));
    }
    // hc_pre: y = bf16(sum_j bf16(p_j x_j)), the sum in fp32; and as a loop of bf16 adds.
    std::vector<float> y(d), Y(n * d), z(d), chain(n * d);
    for (std::size_t c = 0; c < d; ++c) {
      float acc = 0, run = 0;
      for (std::size_t j = 0; j < n; ++j) {
        acc += round_bf16(p[j] * x[j * d + c]);
        run = round_bf16(run + round_bf16(p[j] * x[j * d + c]));
      }
      y[c] = round_bf16(acc);
      chain[c] = run;
    }
    const auto pre = [&](B* out) { ref::hc_pre(cfg, x.data(), p.data(), out); };
    judge(0, pre, d, y.data());
    judge(0, pre, d, chain.data());
    // hc_post: Y = bf16(bf16(post_k f) + bf16(sum_j bf16(C_jk R_j))).
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t c = 0; c < d; ++c) {
        float acc = 0;
        for (std::size_t j = 0; j < n; ++j) acc += round_bf16(comb[j * n + k] * x[j * d + c]);
        Y[k * d + c] = round_bf16(round_bf16(post[k] * f[c]) + round_bf16(acc));
        float run = round_bf16(post[k] * f[c]);  // a bf16 batched matmul onto post f
        for (std::size_t j = 0; j < n; ++j) run = round_bf16(run + comb[j * n + k] * x[j * d + c]);
        chain[k * d + c] = run;
      }
    const auto post_of = [&](B* out) {
      ref::hc_post(cfg, f.data(), x.data(), post.data(), comb.data(), out);
    };
    judge(1, post_of, n * d, Y.data());
    judge(1, post_of, n * d, chain.data());
    // RMSNorm in bf16 throughout: squares, mean, + eps and rsqrt rounded; the normalised value
    // rounded before the weight.
    float ss = 0;
    for (std::size_t c = 0; c < d; ++c) ss += round_bf16(f[c] * f[c]);
    const float q = round_bf16(round_bf16(ss / float(d)) + 1e-6f);
    const float r = round_bf16(1.0f / std::sqrt(q));
    for (std::size_t c = 0; c < d; ++c) z[c] = round_bf16(g[c] * round_bf16(f[c] * r));
    judge(
        2, [&](B* out) { ref::rmsnorm(d, 1e-6, f.data(), g.data(), out); }, d, z.data());
  }
  for (int piece = 0; piece < 3; ++piece) {
    CAPTURE(piece);
    CHECK(outside_stored[piece] > 0);
  }
}
