// Every Scalar of the traits header runs through the same reference code.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "mhc/oracles/pieces.hpp"
#include "mhc/oracles/scalars.hpp"

using namespace mhc;

namespace {
// The seed 004 example after two rounds with eps = 0 is [[12/19, 4/11], [7/19, 7/11]] (derived
// in reference/tests/test_sinkhorn.cpp).
const double kExact[] = {12.0 / 19, 4.0 / 11, 7.0 / 19, 7.0 / 11};

template <class S>
std::vector<S> seed004(int iters) {
  ref::Config c;
  c.n = 2;
  c.iters = iters;
  c.hc_eps = 0;
  using std::log;
  const std::vector<S> L{log(S(3)), S(0), S(0), S(0)};
  std::vector<S> C(4);
  ref::sinkhorn(c, L.data(), C.data());
  return C;
}
}  // namespace

// Each type must reach the exact values to within a few units of its own precision (the
// computation has about a dozen roundings, each <= 2^-bits relative).
TEMPLATE_TEST_CASE("scalars: each type computes the seed 004 comb to its precision", "[scalars]",
                   float, double, num::quad, num::mpfr) {
  num::set_mpfr_bits(200);
  const auto C = seed004<TestType>(2);
  const double tol = 32 * std::ldexp(1.0, -int(num::scalar_traits<TestType>::bits()));
  for (int i = 0; i < 4; ++i) {
    CAPTURE(num::scalar_traits<TestType>::name(), i);
    const double got = num::scalar_traits<TestType>::to_double(C[std::size_t(i)]);
    // Compare through double: beyond 53 bits we can only see that it is right to double.
    CHECK(std::fabs(got - kExact[i]) <= std::max(tol, 0x1.0p-52) * kExact[i]);
  }
}

TEST_CASE("scalars: mpfi encloses the exact seed 004 comb", "[scalars]") {
  num::set_mpfi_bits(200);
  num::set_mpfr_bits(300);
  const auto C = seed004<num::mpfi>(2);
  const num::mpfr exact[] = {num::mpfr(12) / 19, num::mpfr(4) / 11, num::mpfr(7) / 19,
                             num::mpfr(7) / 11};
  for (int i = 0; i < 4; ++i) {
    CHECK(num::encloses(C[std::size_t(i)], exact[i]));
    CHECK(num::rel_width(C[std::size_t(i)]) < 1e-50);  // tight: no blow-up through the divisions
  }
}

TEST_CASE("scalars: mpfr precision is set in bits, at least what was asked", "[scalars]") {
  CHECK(num::set_mpfr_bits(200) >= 200u);
  CHECK(num::set_mpfr_bits(256) >= 256u);
  CHECK(num::set_mpfi_bits(128) >= 128u);
  CHECK(num::mpfr_bits() >= 256u);
}

// The whole set of pieces in every type, on one small generated case: all agree with double to
// the lesser of the two precisions (float: its own error bound is the subject of later checks, so
// here only a loose 1e-3 relative sanity check of the plumbing).
TEMPLATE_TEST_CASE("scalars: every piece runs in each type", "[scalars]", float, double, num::quad,
                   num::mpfr, num::mpfi) {
  num::set_mpfr_bits(200);
  num::set_mpfi_bits(200);
  ref::Config cfg;
  cfg.n = 3;
  cfg.d = 16;
  cfg.iters = 5;
  cfg.hc_eps = 1e-3;
  const auto c = oracles::generate_pieces(cfg, 3, 42);
  const auto dbl = oracles::evaluate_pieces<double>(c, 1);
  const auto got = oracles::evaluate_pieces<TestType>(c, 1);
  const auto sd = oracles::stages(dbl);
  const auto sg = oracles::stages(got);
  const double tol = std::is_same<TestType, float>::value ? 1e-3 : 1e-13;
  for (std::size_t s = 0; s < sd.size(); ++s) {
    REQUIRE(sd[s]->size() == sg[s]->size());
    REQUIRE_FALSE(sd[s]->empty());
    for (std::size_t i = 0; i < sd[s]->size(); ++i) {
      const double want = (*sd[s])[i];
      const double have = num::scalar_traits<TestType>::to_double((*sg[s])[i]);
      CAPTURE(oracles::pieces_stage_names()[s], i, want, have);
      CHECK(std::fabs(have - want) <= tol * std::fabs(want) + 1e-300);
    }
  }
}

// The lanes Scalar runs W cases at once through the same reference: each lane agrees with the
// double oracle on its own case. The lanes' sums are plain where the double oracle's are
// compensated: per sum (n-1)u relative, and the Sinkhorn does not amplify them (its
// normalisations contract), so 64 n u relative is generous.
#include "mhc/oracles/lanes.hpp"
#include "mhc/oracles/random.hpp"

// A Sinkhorn configuration of up to max_n streams and max_iters rounds, eps 0 in three of ten.
namespace {
ref::Config random_sinkhorn(oracles::Rng& rng, int max_n, int max_iters) {
  ref::Config c;
  c.n = rng.integer(1, max_n);
  c.iters = rng.integer(1, max_iters);
  c.hc_eps = rng.uniform() < 0.3 ? 0.0 : rng.log_uniform(1e-8, 1e-1);
  return c;
}
}  // namespace

TEST_CASE("scalars: every lane of Lanes<8> is the double reference of its own case",
          "[scalars][lanes]") {
  oracles::Rng rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    const ref::Config c = random_sinkhorn(rng, 8, 30);
    const std::size_t nn = std::size_t(c.n * c.n);
    std::vector<std::vector<double>> L(8, std::vector<double>(nn));
    std::vector<lanes::Lanes<8>> L8(nn), C8(nn);
    for (int l = 0; l < 8; ++l)
      for (std::size_t e = 0; e < nn; ++e) {
        L[std::size_t(l)][e] = rng.log_uniform(0.01, 30) * rng.normal();
        L8[e].set(l, L[std::size_t(l)][e]);
      }
    ref::sinkhorn(c, L8.data(), C8.data());
    for (int l = 0; l < 8; ++l) {
      std::vector<double> C(nn);
      ref::sinkhorn(c, L[std::size_t(l)].data(), C.data());
      for (std::size_t e = 0; e < nn; ++e) {
        CAPTURE(trial, l, e, c.n, c.iters, c.hc_eps);
        CHECK(std::fabs(C8[e][l] - C[e]) <= 64 * c.n * 0x1.0p-53 * std::fabs(C[e]) + 1e-300);
      }
    }
  }
}

// Stochastic rounding (the empirical model's and the comb tier's ensembles): each result is one of
// x's two fp32 neighbours (found here with std::nextafter), x itself where it is a float, and the
// upper one with probability |x - lower| / gap: over 10^5 draws the count is within 5 binomial
// standard deviations (a false alarm about once in 1.7 million seeds).
#include "mhc/oracles/stochastic.hpp"
TEST_CASE("scalars: stochastic rounding picks a neighbour without bias", "[scalars]") {
  const float big = std::numeric_limits<float>::max(),
              tiny = std::numeric_limits<float>::denorm_min();
  const std::vector<double> xs{1.0 + 0x1p-25,
                               -1.0 - 0x1p-25,
                               0x1p-140 * 1.3,
                               -0x1p-140 * 1.3,
                               double(tiny) * 0.25,
                               -double(tiny) * 0.75,
                               double(big) * (1 + 0x1p-26),
                               -3.0 / 7,
                               1e30 / 3,
                               2.0 - 0x1p-30,
                               0.1};
  sr::seed(5);
  for (double x : xs) {
    const float lo = double(float(x)) <= x ? float(x) : std::nextafter(float(x), -INFINITY);
    const float hi = double(float(x)) >= x ? float(x) : std::nextafter(float(x), INFINITY);
    const double p_hi = double(hi) == double(lo) ? 1 : (x - double(lo)) / (double(hi) - double(lo));
    const int draws = 100000;
    int up = 0, neither = 0;
    for (int i = 0; i < draws; ++i) {
      const float r = sr::round(x);
      neither += r != lo && r != hi;
      up += r == hi && hi != lo;
    }
    CAPTURE(x, lo, hi, p_hi, up);
    CHECK(neither == 0);
    if (hi != lo)
      CHECK(std::fabs(up - draws * p_hi) <= 5 * std::sqrt(draws * p_hi * (1 - p_hi)) + 1);
  }
  for (float f : {1.0f, -0.0f, 0.0f, tiny, -big}) CHECK(sr::round(double(f)) == f);
  // The same seed, the same stream.
  std::vector<float> a, b;
  for (auto* v : {&a, &b}) {
    sr::seed(11);
    for (int i = 0; i < 64; ++i) v->push_back(sr::round(0.1 * i));
  }
  CHECK(a == b);
}

// The ensemble is sixteen sr32 runs at once: lane k equals, bit for bit, the scalar run seeded with
// first + k, through the whole reference Sinkhorn (every operation and its random draw) and on
// values where stochastic rounding takes its special paths (exact, zero, subnormal, overflow).
TEST_CASE("scalars: every lane of the sr ensemble is the sr32 run of its seed", "[scalars]") {
  oracles::Rng rng(23);
  for (int trial = 0; trial < 40; ++trial) {
    const ref::Config c = random_sinkhorn(rng, 6, 25);
    const std::size_t nn = std::size_t(c.n * c.n);
    std::vector<float> L(nn);
    for (float& l : L) l = float(rng.log_uniform(0.01, 60) * rng.normal());
    const std::uint64_t first = rng.next();
    std::vector<sr::Ensemble> LE(nn), CE(nn);
    for (std::size_t e = 0; e < nn; ++e) LE[e] = sr::Ensemble(L[e]);
    sr::Ensemble::seed_lanes(first);
    ref::sinkhorn(c, LE.data(), CE.data());
    for (int k = 0; k < sr::Ensemble::kLanes; ++k) {
      std::vector<sr::sr32> Ls(L.begin(), L.end()), Cs(nn);
      sr::seed(first + std::uint64_t(k));
      ref::sinkhorn(c, Ls.data(), Cs.data());
      for (std::size_t e = 0; e < nn; ++e) {
        CAPTURE(trial, k, e, c.n, c.iters, c.hc_eps);
        const float lane = CE[e][k];
        CHECK(std::memcmp(&Cs[e].v, &lane, 4) == 0);
      }
    }
  }
  const float big = std::numeric_limits<float>::max(),
              tiny = std::numeric_limits<float>::denorm_min();
  const std::vector<std::pair<float, float>> operands{
      {1.0f, 3.0f}, {0.0f, 2.0f},  {-0.0f, 5.0f},  {tiny, 0.75f}, {-tiny, 3.0f},
      {big, 0.5f},  {big, -0.25f}, {1e-30f, 7.0f}, {2.0f, 0.0f},  {-1.0f, 0.0f}};
  for (const auto& [a, b] : operands) {
    sr::Ensemble::seed_lanes(99);
    const sr::Ensemble q[] = {sr::Ensemble(a) / sr::Ensemble(b), sr::Ensemble(a) * sr::Ensemble(b),
                              sr::Ensemble(a) + sr::Ensemble(b), sr::Ensemble(a) - sr::Ensemble(b)};
    for (int k = 0; k < sr::Ensemble::kLanes; ++k) {
      sr::seed(99 + std::uint64_t(k));
      const float s[] = {(sr::sr32(a) / sr::sr32(b)).v, (sr::sr32(a) * sr::sr32(b)).v,
                         (sr::sr32(a) + sr::sr32(b)).v, (sr::sr32(a) - sr::sr32(b)).v};
      for (int o = 0; o < 4; ++o) {
        CAPTURE(a, b, k, o, s[o], q[o][k]);
        const float lane = q[o][k];
        CHECK(std::memcmp(&s[o], &lane, 4) == 0);
      }
    }
  }
}
