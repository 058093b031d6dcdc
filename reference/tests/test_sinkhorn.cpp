// Sinkhorn of the comb, against values derived by hand (exact rational arithmetic).
#include <catch2/catch.hpp>
#include <cmath>
#include <string>

#include "mhc/oracles/scalars.hpp"
#include "mhc/reference/mhc.hpp"

using mhc::num::mpfr;
using mhc::ref::Config;

namespace {

Config cfg2(int iters, double eps) {
  Config c;
  c.n = 2;
  c.d = 1;
  c.iters = iters;
  c.hc_eps = eps;
  return c;
}

// The comb of seed 004's example matrix A = [[3,1],[1,1]]: logits log(A), so that the softmax
// (the first row step) is the row normalisation of A.
std::vector<mpfr> seed004_comb(int iters, double eps) {
  mhc::num::set_mpfr_bits(256);
  const std::vector<mpfr> logits{log(mpfr(3)), mpfr(0), mpfr(0), mpfr(0)};
  std::vector<mpfr> C(4);
  mhc::ref::sinkhorn(cfg2(iters, eps), logits.data(), C.data());
  return C;
}

void require_close(const std::vector<mpfr>& got, const std::vector<std::string>& want, double rel) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const mpfr w(want[i]);
    CAPTURE(i, got[i].str(40), want[i]);
    CHECK(abs(got[i] - w) <= mpfr(rel) * abs(w));
  }
}

}  // namespace

// Hand derivation, eps = 0. Softmax of log(A) by rows: [[3/4, 1/4], [1/2, 1/2]].
// Round 1 ends with the column division; column sums 5/4 and 3/4:
//   C1 = [[3/5, 1/3], [2/5, 2/3]].
// Round 2: row sums 3/5+1/3 = 14/15 and 2/5+2/3 = 16/15 -> [[9/14, 5/14], [3/8, 5/8]];
//   column sums 9/14+3/8 = 57/56 and 5/14+5/8 = 55/56 -> C2 = [[12/19, 4/11], [7/19, 7/11]].
TEST_CASE("sinkhorn: seed 004 example [[3,1],[1,1]], eps = 0, by hand", "[sinkhorn]") {
  require_close(seed004_comb(1, 0.0),
                {"0.6", "0.333333333333333333333333333333333333333333", "0.4",
                 "0.666666666666666666666666666666666666666667"},
                1e-40);
  require_close(seed004_comb(2, 0.0),
                {"0.631578947368421052631578947368421052631579",   // 12/19
                 "0.363636363636363636363636363636363636363636",   // 4/11
                 "0.368421052631578947368421052631578947368421",   // 7/19
                 "0.636363636363636363636363636363636363636364"},  // 7/11
                1e-40);
}

// Hand derivation with eps = e (the double nearest 1e-6), eps exactly where docs/semantics.md,
// "sinkhorn" puts it: softmax + e: a = 3/4+e, b = 1/4+e, c = d = 1/2+e. Column division adds e
// to the sum:
//   C1 = [[a/(5/4+3e), b/(3/4+3e)], [c/(5/4+3e), d/(3/4+3e)]]  (note b/(3/4+3e) = 1/3 exactly)
// Round 2 divides each row by (row sum + e), then each column by (column sum + e).
// The decimals are these expressions evaluated in exact rational arithmetic (e as the exact
// binary value of the double 1e-6), rounded to 40 digits.
TEST_CASE("sinkhorn: seed 004 example, eps = 1e-6, by hand", "[sinkhorn]") {
  require_close(
      seed004_comb(1, 1e-6),
      {"0.5999993600015359963136378084081845197323", "0.3333333333333333333333333333333333333333",
       "0.3999998400003839990784094521020461299331", "0.6666653333386666453334790016935496058978"},
      1e-38);
  require_close(
      seed004_comb(2, 1e-6),
      {"0.6315779743781772958600923304226439775953", "0.3636362599165521936090412737921772836335",
       "0.3684210431657689946315983572778146019738", "0.6363627219015273112085209550163388047164"},
      1e-38);
}

// Uniform logits keep every entry equal, so the whole algorithm is the scalar recurrence
// c <- c / (n*c + eps) from c0 = 1/n + eps, applied 2*iters - 1 times (one per division).
// Double error: one step rounds the n-term sum (<= (n-1)u), the + eps and the division, so
// <= (n+1)u relative; the map contracts (f'(c) = eps/(nc+eps)^2 <= 0.11 here), so errors do not
// pile up: |C - c| <= (n+1)u / (1 - 0.11) < (n+3)u relative.
TEST_CASE("sinkhorn: uniform logits follow the scalar recurrence", "[sinkhorn]") {
  for (int n : {1, 2, 3, 4, 8})
    for (int iters : {1, 2, 20})
      for (double eps : {0.0, 1e-6, 1e-1}) {
        Config c;
        c.n = n;
        c.iters = iters;
        c.hc_eps = eps;
        std::vector<double> logits(std::size_t(n * n), 0.7), C(std::size_t(n * n));
        mhc::ref::sinkhorn(c, logits.data(), C.data());
        const auto e = static_cast<long double>(eps);
        long double v = 1.0L / n + e;
        for (int s = 0; s < 2 * iters - 1; ++s) v = v / (n * v + e);
        CAPTURE(n, iters, eps);
        for (double x : C) CHECK(std::fabs(x - double(v)) <= (n + 3) * 0x1.0p-53 * double(v));
      }
}

// After the final column division, column k sums to S_k / (S_k + eps) where S_k is its sum just
// before: sum_j C[j,k] / (S_k + eps) = S_k / (S_k + eps). Checked to 256-bit precision through the
// per-step trace, with a large eps so that the identity is far from 1.
TEST_CASE("sinkhorn: final column sums equal S/(S+eps)", "[sinkhorn][trace]") {
  mhc::num::set_mpfr_bits(256);
  for (int n : {2, 3, 4}) {
    Config c;
    c.n = n;
    c.iters = 5;
    c.hc_eps = 0.1;
    std::vector<mpfr> L(std::size_t(n * n)), C(std::size_t(n * n));
    for (int i = 0; i < n * n; ++i) L[std::size_t(i)] = mpfr(std::sin(1.0 + i) * 3);
    mhc::ref::SinkhornTrace<mpfr> trace;
    mhc::ref::sinkhorn(c, L.data(), C.data(), &trace);
    using Step = mhc::ref::SinkhornTrace<mpfr>::Step;
    REQUIRE(trace.steps.size() == std::size_t(2 * c.iters));  // softmax, column, (row, column)*4
    CHECK(trace.steps[0].step == Step::softmax);
    CHECK(trace.steps[1].step == Step::column);  // the first division is a column division
    CHECK(trace.steps[2].step == Step::row);
    const auto& before = trace.steps[trace.steps.size() - 2].col_sums;
    const auto& after = trace.steps.back().col_sums;
    for (int k = 0; k < n; ++k) {
      const mpfr S = before[std::size_t(k)];
      const mpfr want = S / (S + mpfr(c.hc_eps));
      CAPTURE(n, k);
      CHECK(abs(after[std::size_t(k)] - want) <= mpfr("1e-70"));
      CHECK(abs(after[std::size_t(k)] - 1) > mpfr("1e-3"));  // eps = 0.1 keeps it off 1
    }
  }
}
