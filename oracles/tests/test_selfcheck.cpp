// The certification itself, on small configurations (the V4.1 sizes run in the CLI test).
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include <cmath>
#include "mhc/oracles/oracle.hpp"
#include "mhc/oracles/selfcheck.hpp"

using namespace mhc;

TEST_CASE("selfcheck: the double oracle is certified on small random configurations",
          "[selfcheck]") {
  oracles::SelfcheckOptions opt;
  opt.cases = 16;  // every backward op in turn, twice
  opt.seed = GENERATE(1u, 2u, 3u);
  opt.config_of = [](int i, std::uint64_t seed) {
    return oracles::selfcheck_config(2 * i + 1, seed);
  };
  CAPTURE(opt.seed);
  const auto res = oracles::selfcheck(opt);
  REQUIRE(res.cases.size() == 16u);
  std::set<std::string> certified;
  for (const auto& c : res.cases) {
    for (const auto& b : c.backward) {
      CAPTURE(c.index, b.stage, b.max_over_bound);
      CHECK(b.elements > 0);
      CHECK(b.max_over_bound <= oracles::kBackwardAccuracy);
      certified.insert(b.stage.substr(0, b.stage.find('.')));
    }
    for (const auto& s : c.stages) {
      CAPTURE(c.index, c.cfg.n, c.cfg.d, c.cfg.iters, c.cfg.hc_eps, s.stage, s.max_rel_err);
      CHECK(s.elements > 0);
      CHECK(s.not_enclosed == 0u);
      CHECK(s.max_rel_err <= oracles::kOracleAccuracy);
      CHECK(s.max_rel_err <= s.certified_rel_err);  // the enclosure bounds the observed error
    }
  }
  CHECK(certified.size() == 8u);
  CHECK(certified.count("stack_backward") == 1u);
  CHECK(res.backward_accurate);
  CHECK(res.accurate);
  CHECK(res.enclosed);
}

// The check can fail: a double result off by 1e-12 relative (above u32/1e6 = 5.96e-14) is
// reported with its index, and an interval that misses the MPFR value is counted.
TEST_CASE("selfcheck: certify sees a perturbed element and a missed enclosure", "[selfcheck]") {
  num::set_mpfr_bits(256);
  num::set_mpfi_bits(200);
  std::vector<num::mpfr> hp{num::mpfr(1) / 3, num::mpfr(2) / 7, num::mpfr(5)};
  std::vector<num::mpfi> iv;
  for (const auto& v : hp) iv.emplace_back(num::mpfi(v));
  std::vector<double> dbl;
  for (const auto& v : hp) dbl.push_back(v.convert_to<double>());
  auto s = oracles::certify("x", dbl, hp, iv);
  CHECK(s.max_rel_err <= 0x1.0p-53);
  CHECK(s.not_enclosed == 0u);
  dbl[2] *= 1 + 1e-12;
  s = oracles::certify("x", dbl, hp, iv);
  CHECK(s.max_rel_err > oracles::kOracleAccuracy);
  CHECK(s.max_rel_err == Approx(1e-12).epsilon(1e-3));
  CHECK(s.worst == 2u);
  iv[1] = num::mpfi(num::mpfr(1) / 7);
  s = oracles::certify("x", dbl, hp, iv);
  CHECK(s.not_enclosed == 1u);
}

// W = [1, 1, 1], x = [1, 2^-30, -1]: sum|terms| = 2 + 2^-30, sum = 2^-30, so kappa = 2^31 + 1.
TEST_CASE("oracle: mixes condition number of a cancelling projection", "[oracle]") {
  ref::Config c;
  c.n = 1;
  c.d = 3;  // M = 3 rows; rows 1 and 2 are zero (kappa 1 by convention)
  const float x[] = {1, 0x1.0p-30f, -1};
  std::vector<float> W(9, 0.0f);
  W[0] = W[1] = W[2] = 1;
  CHECK(oracles::mixes_condition(c, x, W.data()) == 0x1.0p31 + 1);
  // gamma_3^2 * kappa, gamma_3 = 3u/(1-3u)
  const double g = 3 * 0x1.0p-53 / (1 - 3 * 0x1.0p-53);
  CHECK(oracles::mixes_drift(c, 2.0) == Approx(2 * g * g).epsilon(1e-12));
}

// The fallback path: with the limit at 0 every token is re-evaluated in quad, whose values,
// rounded to double, lie within one rounding (2^-53 relative) of the 256-bit MPFR values (the
// quad evaluation itself is ~2^-113 * a few hundred operations away from exact).
TEST_CASE("oracle: quad fallback is within one double rounding of MPFR", "[oracle]") {
  num::set_mpfr_bits(256);
  ref::Config cfg;
  cfg.n = 4;
  cfg.d = 64;
  const auto c = oracles::generate_pieces(cfg, 4, 9);
  oracles::OracleStats none, all;
  oracles::oracle_pieces(c, 1, &none);
  const auto b = oracles::oracle_pieces(c, 1, &all, 0.0);
  const auto hp = oracles::evaluate_pieces<num::mpfr>(c, 1);
  CHECK(none.fallback_tokens == 0u);
  CHECK(all.fallback_tokens == 4u);
  auto check = [](const std::vector<double>& got, const std::vector<num::mpfr>& want) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double w = want[i].convert_to<double>();
      CHECK(std::fabs(got[i] - w) <= 0x1.0p-53 * std::fabs(w));
    }
  };
  check(b.mixes, hp.mixes);
  check(b.pre, hp.pre);
  check(b.post, hp.post);
  check(b.comb, hp.comb);
}
