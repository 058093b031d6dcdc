// The Sinkhorn theory against what can be derived by hand and against its own iteration.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "mhc/oracles/random.hpp"
#include "mhc/oracles/sinkhorn_theory.hpp"

using namespace mhc;

namespace {
// A positive n x n start: softmax rows of logits of the given scale.
std::vector<double> start(std::uint64_t seed, int n, double scale) {
  oracles::Rng rng(seed);
  std::vector<double> A(std::size_t(n * n));
  for (int j = 0; j < n; ++j) {
    double s = 0;
    for (int k = 0; k < n; ++k) s += A[std::size_t(j * n + k)] = std::exp(scale * rng.normal());
    for (int k = 0; k < n; ++k) A[std::size_t(j * n + k)] /= s;
  }
  return A;
}
}  // namespace

TEST_CASE("sinkhorn theory: a 2 x 2 circulant, by hand", "[sinkhorn_theory]") {
  // [[a, b], [b, a]] is its own scaling up to 1/(a+b); sigma_2 = |a - b| / (a + b).
  const double a = 0.9, b = 0.3;
  const auto th = oracles::sinkhorn_theory({a, b, b, a}, 2, 0.0);
  REQUIRE(th.ok);
  CHECK(th.limit[0] == Approx(a / (a + b)).epsilon(1e-14));
  CHECK(th.knight == Approx(0.25).epsilon(1e-13));
  CHECK(th.rate == Approx(0.25).epsilon(1e-12));  // eps = 0: Knight's rate
}

TEST_CASE("sinkhorn theory: the quotient Jacobian's spectral radius is the closed form",
          "[sinkhorn_theory]") {
  const int n = GENERATE(2, 3, 4, 8);
  const double eps = GENERATE(0.0, 1e-6, 1e-2);
  const double scale = GENERATE(0.3, 2.0);
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    CAPTURE(n, eps, scale, seed);
    const auto A = start(seed, n, scale);
    const auto th = oracles::sinkhorn_theory(A, n, eps);
    REQUIRE(th.ok);
    CHECK(th.limit_residual < 1e-13);
    CHECK(th.singular[0] == Approx(1).epsilon(1e-13));
    CHECK(th.rate == Approx(th.rate_closed).epsilon(1e-10));
    // MPFR's agrees with double's to what double resolves.
    const auto mp = oracles::sinkhorn_theory(A, n, eps, true);
    REQUIRE(mp.ok);
    CHECK(mp.limit_residual < 1e-40);
    CHECK(mp.rate == Approx(th.rate).epsilon(1e-11));
    CHECK(mp.rate == Approx(mp.rate_closed).epsilon(1e-15));
  }
}

TEST_CASE("sinkhorn theory: the iteration's observed rate is the predicted one",
          "[sinkhorn_theory]") {
  const double eps = GENERATE(0.0, 1e-6, 1e-3);
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    CAPTURE(eps, seed);
    const auto A = start(seed, 4, 1.5);
    const auto th = oracles::sinkhorn_theory(A, 4, eps);
    REQUIRE(th.ok);
    const auto ob = oracles::observe_rate(A, 4, eps, th);
    CAPTURE(ob.round, ob.ratio, ob.error, th.rate, th.next);
    CHECK_FALSE(ob.disagrees());
    if (ob.settled) {
      CHECK(ob.mode == 0);  // no symmetry in a random start: the slowest mode is excited
      CHECK(std::fabs(ob.ratio - th.rate) < 1e-3 * (1 - th.rate));
    }
  }
}

TEST_CASE("sinkhorn theory: a misplaced eps is a disagreement", "[sinkhorn_theory]") {
  // The theory of eps = 1e-2 held against an iteration with eps = 0: the rates differ by about
  // 2 eps (1 - sigma_2^2), far more than the settled observation's error.
  int disagreements = 0;
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    const auto A = start(seed, 4, 1.5);
    const auto th = oracles::sinkhorn_theory(A, 4, 1e-2);
    const auto ob = oracles::observe_rate(A, 4, 0.0, oracles::sinkhorn_theory(A, 4, 0.0));
    disagreements += ob.settled && std::fabs(ob.ratio - th.rate) > ob.error;
  }
  CHECK(disagreements >= 8);
}

TEST_CASE("sinkhorn theory: a start with two equal rows never excites the slowest mode",
          "[sinkhorn_theory]") {
  // Rows 1 and 3 equal: the iteration keeps them equal, so the modes that tell them apart (the
  // slowest among them here) stay out, and the distance falls at a faster mode's rate: no
  // disagreement, the observation is on modes[mode] with mode > 0 (within its error, settled or
  // not: its rounding stops it first).
  const double e = 1e-6;
  std::vector<double> A = {1, e, e, e, e, e, e, 1, e, 1, e, e, e, e, e, 1};
  for (int j = 0; j < 4; ++j) {
    double s = 0;
    for (int k = 0; k < 4; ++k) s += A[std::size_t(j * 4 + k)];
    for (int k = 0; k < 4; ++k) A[std::size_t(j * 4 + k)] /= s;
  }
  const auto th = oracles::sinkhorn_theory(A, 4, e);
  REQUIRE(th.ok);
  const auto ob = oracles::observe_rate(A, 4, e, th);
  CAPTURE(th.rate, th.next, ob.ratio, ob.error, ob.round);
  CHECK_FALSE(ob.disagrees());
  CHECK(ob.mode > 0);
  CHECK(std::fabs(ob.ratio - th.rate) > 10 * ob.error);
}

TEST_CASE("sinkhorn theory: rounds needed", "[sinkhorn_theory]") {
  CHECK(oracles::rounds_needed(1e-2, 20, 1e-3, 0.5) == 20 + 4);  // 1e-2 / 16 < 1e-3 < 1e-2 / 8
  CHECK(oracles::rounds_needed(1e-4, 20, 1e-3, 0.5) == 20);
  CHECK(oracles::rounds_needed(1e-2, 20, 1e-3, 1.0) == -1);
}
