// The bound-carrying Scalar: its arithmetic, and the soundness of its bounds against fp32
// evaluations of the same reference.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "mhc/oracles/bounded.hpp"
#include "mhc/oracles/birkhoff.hpp"
#include "mhc/oracles/ops.hpp"

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
TEST_CASE("bounded: the fp32 reference lies within the bounds of every op", "[bounded][soundness]") {
  const auto op = GENERATE(from_range(oracles::all_ops()));
  const int seed = GENERATE(1, 2, 3);
  ref::Config cfg;
  cfg.n = GENERATE(1, 2, 4);
  cfg.d = 96;
  cfg.iters = 20;
  cfg.hc_eps = GENERATE(1e-6, 1e-2);
  const auto c = oracles::generate_case(op, cfg, 6, std::uint64_t(seed), "fp32");
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

// The model matters: a tf32 evaluation of mixes is within the tf32 bounds but not the fp32 ones.
TEST_CASE("bounded: tf32 products exceed the fp32 model and fit the tf32 one", "[bounded]") {
  ref::Config cfg;
  cfg.d = 512;
  const auto c32 = oracles::generate_case(oracles::Op::mixes, cfg, 4, 5, "fp32");
  auto ctf = c32;
  ctf.precision = "tf32";
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

// A = [[3,1],[1,1]]: the only non-trivial cross-ratio is 3*1/(1*1), so Delta = log 3 and
// kappa = tanh(log(3)/4) = (sqrt 3 - 1)/(sqrt 3 + 1) (tanh(log(x)/4) = (x^(1/2)-1)/(x^(1/2)+1)).
// Diagonal scalings leave it unchanged.
TEST_CASE("birkhoff: contraction coefficient of the seed 004 example", "[birkhoff]") {
  std::vector<double> A{3, 1, 1, 1};
  CHECK(oracles::projective_diameter(A, 2) == Approx(std::log(3.0)).epsilon(1e-14));
  const double want = (std::sqrt(3.0) - 1) / (std::sqrt(3.0) + 1);
  CHECK(oracles::birkhoff_kappa(A, 2) == Approx(want).epsilon(1e-14));
  std::vector<double> S{3 * 2.0 * 5, 1 * 2.0 * 7, 1 * 0.5 * 5, 1 * 0.5 * 7};  // diag(2,.5) A diag(5,7)
  CHECK(oracles::birkhoff_kappa(S, 2) == Approx(want).epsilon(1e-12));
  std::vector<double> Z{1, 0, 1, 1};
  CHECK(std::isinf(oracles::projective_diameter(Z, 2)));
}
