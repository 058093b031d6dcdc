// Self-tests of the comparison code on hand-built buffers (nothing here runs a kernel).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "mhc/oracles/random.hpp"
#include "mhc/oracles/verdict.hpp"

using namespace mhc;
using oracles::State;
using B = bnd::Bounded;

TEST_CASE("verdict: all zeros are mistrusted, not passed", "[verdict]") {
  const std::vector<float> got(32, 0.0f);
  const std::vector<B> want(32, B(0.0, 1e-7));
  const auto s = oracles::judge("y", got.data(), want.data(), got.size(), 8);
  CHECK(s.state == State::mistrusted);
  CHECK(s.rule == "degenerate");
  const auto e = oracles::judge("y", got.data(), want.data(), 0, 8);
  CHECK(e.state == State::mistrusted);
  CHECK(e.rule == "empty");
}

// A stage of indices is exempt: with one expert, the routing's every choice is expert 0.
TEST_CASE("verdict: zeros in a stage of indices are an answer, judged exactly", "[verdict]") {
  const std::vector<B> want(6, B(0.0, 0.0));
  std::vector<float> got(6, 0.0f);
  for (const char* stage : {"ffn.experts", "L12.ffn.experts"})
    CHECK(oracles::judge(stage, got.data(), want.data(), got.size(), 1).state == State::pass);
  for (const char* stage : {"experts", "ffn.experts2", "xffn.experts", "ffn.out"})
    CHECK(oracles::judge(stage, got.data(), want.data(), got.size(), 1).rule == "degenerate");
  got[4] = 1.0f;
  const auto s = oracles::judge("ffn.experts", got.data(), want.data(), got.size(), 1);
  CHECK(s.state == State::fail);
  CHECK(s.worst.index == 4u);
}

// want = 1 with bound 2^-10: got = 1 + 2^-10 (exact in fp32) sits on the bound and passes; the
// next float above fails.
TEST_CASE("verdict: an error passes at its threshold and fails just above", "[verdict]") {
  const float at = 1.0f + 0x1.0p-10f;
  const std::vector<B> want{B(1.0, 0x1.0p-10), B(2.0, 0.0)};
  std::vector<float> got{at, 2.0f};
  auto s = oracles::judge("y", got.data(), want.data(), 2, 1);
  CHECK(s.state == State::pass);
  CHECK(s.ratio_max == 1.0);
  got[0] = std::nextafter(at, 2.0f);
  s = oracles::judge("y", got.data(), want.data(), 2, 1);
  CHECK(s.state == State::fail);
  CHECK(s.rule == "within_bound");
  CHECK(s.failed == 1u);
  CHECK(s.worst.index == 0u);
  CHECK(s.ratio_max > 1.0);
}

TEST_CASE("verdict: -0 and +0 are the same point; NaN follows the documented policy", "[verdict]") {
  CHECK(oracles::ulp_distance(-0.0f, 0.0f) == 0);
  const float tiny = std::numeric_limits<float>::denorm_min();
  CHECK(oracles::ulp_distance(-tiny, tiny) == 2);
  CHECK(oracles::ulp_distance(1.0f, std::nextafter(1.0f, 2.0f)) == 1);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK(oracles::ulp_distance(nan, nan) == 0);
  CHECK(std::isinf(oracles::ulp_distance(nan, 1.0f)));

  // -0 against an exact +0 with a zero bound passes.
  std::vector<float> got{-0.0f, 1.0f};
  std::vector<B> want{B(0.0, 0.0), B(1.0, 0.0)};
  CHECK(oracles::judge("y", got.data(), want.data(), 2, 1).state == State::pass);
  // NaN where the oracle is finite fails, by rule nonfinite.
  got[1] = nan;
  auto s = oracles::judge("y", got.data(), want.data(), 2, 1);
  CHECK(s.state == State::fail);
  CHECK(s.rule == "nonfinite");
  CHECK(s.worst.index == 1u);
  // The oracle NaN (undefined exact result): NaN agrees, a number does not.
  want[1] = B(std::nan(""), 0.0);
  s = oracles::judge("y", got.data(), want.data(), 2, 1);
  CHECK(s.state == State::pass);
  CHECK(s.ratio_max == 0);  // no error: a pass never reports a ratio above 1
  got[1] = 1.0f;
  s = oracles::judge("y", got.data(), want.data(), 2, 1);
  CHECK(s.state == State::fail);
  CHECK(s.rule == "nan_agrees");
  // Inf where the oracle is finite fails.
  want[1] = B(1.0, 1e-3);
  got[1] = std::numeric_limits<float>::infinity();
  CHECK(oracles::judge("y", got.data(), want.data(), 2, 1).state == State::fail);
}

TEST_CASE("verdict: an element left holding the poison payload fails as unwritten", "[verdict]") {
  std::vector<float> got(16, 1.0f);
  const std::vector<B> want(16, B(1.0, 1e-6));
  got[9] = oracles::poison();
  CHECK(oracles::is_poison(got[9]));
  CHECK_FALSE(oracles::is_poison(std::numeric_limits<float>::quiet_NaN()));
  const auto s = oracles::judge("y", got.data(), want.data(), 16, 4);
  CHECK(s.state == State::fail);
  CHECK(s.rule == "unwritten");
  CHECK(s.worst.index == 9u);
  CHECK(s.worst.token == 2u);
}

// 16 tokens of 64 elements, every element at the float nearest the oracle and well inside its
// bound, except the very last, moved one ulp beyond its bound.
TEST_CASE("verdict: a one-ulp-beyond-bound fault in the last element of the last token",
          "[verdict]") {
  const std::size_t T = 16, per = 64, N = T * per;
  std::vector<B> want(N);
  std::vector<float> got(N);
  for (std::size_t i = 0; i < N; ++i) {
    const double v = std::sin(double(i) + 0.5) * 3;
    want[i] = B(v, std::fabs(v) * 0x1.0p-20);
    got[i] = float(v);
  }
  auto s = oracles::judge("y", got.data(), want.data(), N, per);
  REQUIRE(s.state == State::pass);
  const double v = want[N - 1].v, e = want[N - 1].e;
  float g = float(v + e);
  while (std::fabs(double(g) - v) <= e) g = std::nextafter(g, 1e30f);
  REQUIRE(std::fabs(double(std::nextafter(g, -1e30f)) - v) <= e);  // one ulp back is inside
  got[N - 1] = g;
  s = oracles::judge("y", got.data(), want.data(), N, per);
  CHECK(s.state == State::fail);
  CHECK(s.failed == 1u);
  CHECK(s.worst.index == N - 1);
  CHECK(s.worst.token == T - 1);
}

TEST_CASE("verdict: an infinite bound makes the element undecidable, never a pass or fail",
          "[verdict]") {
  const std::vector<float> got{1.0f, 5.0f};
  const std::vector<B> want{B(1.0, 1e-6), B(1.0, HUGE_VAL)};
  const auto s = oracles::judge("y", got.data(), want.data(), 2, 1);
  CHECK(s.state == State::undecidable);
  CHECK(s.undecidable == 1u);
}

// Ratios 0, 0.01, ..., 0.99 (bounds 1, errors i/100): max 0.99; p99 the 99th of 100 sorted = 0.98
// or above.
TEST_CASE("verdict: ratio statistics", "[verdict]") {
  std::vector<float> got(100);
  std::vector<B> want(100);
  for (int i = 0; i < 100; ++i) {
    want[std::size_t(i)] = B(16.0, 1.0);
    got[std::size_t(i)] = float(16.0 + i / 100.0);  // within 2^-20 of i/100
  }
  const auto s = oracles::judge("y", got.data(), want.data(), 100, 10);
  CHECK(s.ratio_max == Approx(0.99).epsilon(1e-5));
  CHECK(s.ratio_p99 >= 0.98 - 1e-5);
  CHECK(s.ratio_p99 <= s.ratio_max);
  CHECK(s.worst.index == 99u);
  CHECK(s.metrics.max_abs == Approx(0.99).epsilon(1e-5));
  CHECK(s.metrics.max_rel == Approx(0.99 / 16).epsilon(1e-5));
}

TEST_CASE("verdict: compare names the first divergent stage in trace order", "[verdict]") {
  using oracles::Stage;
  oracles::Trace<B> want{{"x", {2, 2}, {B(1.0, 0.1), B(2.0, 0.1), B(3.0, 0.1), B(4.0, 0.1)}},
                         {"mixes", {2, 1}, {B(1.0, 0.1), B(1.0, 0.1)}},
                         {"y", {2, 1}, {B(1.0, 0.1), B(1.0, 0.1)}}};
  oracles::Trace<float> got{{"y", {2, 1}, {9.0f, 1.0f}},
                            {"mixes", {2, 1}, {1.0f, 5.0f}},
                            {"x", {2, 2}, {1.0f, 2.0f, 3.0f, 4.0f}}};
  auto v = oracles::compare(got, want);
  CHECK(v.state == State::fail);
  CHECK(v.first_divergent == "mixes");  // the oracle's order, not the kernel's
  REQUIRE(v.stages.size() == 3u);
  CHECK(v.stages[0].state == State::pass);
  CHECK(v.stages[2].state == State::fail);
  got.pop_back();  // no "x" from the kernel: skipped
  v = oracles::compare(got, want);
  CHECK(v.stages[0].state == State::skipped);
  got[0].values.push_back(1.0f);  // y with 3 elements: shape mismatch
  v = oracles::compare(got, want);
  CHECK(v.stages[2].state == State::fail);
  CHECK(v.stages[2].rule == "shape");
}

// Large stages are judged in chunks, in parallel: every number of the verdict is the same for any
// thread count, and the counts, the worst element, the first failure and the quantiles are those
// of the elements taken one at a time.
TEST_CASE("verdict: a stage judged in parallel chunks is the stage judged whole", "[verdict]") {
  const std::size_t size = GENERATE(std::size_t(1000), std::size_t(70001), std::size_t(200000));
  oracles::Rng rng(size);
  std::vector<float> got(size);
  std::vector<B> want(size);
  for (std::size_t i = 0; i < size; ++i) {
    const double v = rng.uniform(-2, 2), e = 1e-6 * (1 + rng.uniform());
    want[i] = i % 997 == 5 ? B(v, HUGE_VAL) : B(v, e);  // some undecidable
    // Errors up to 1.2 bounds: some fail; ties in ratio at the largest error.
    got[i] = float(v + (i % 4999 == 77 ? 1.2 : rng.uniform(-1, 1)) * e);
  }
  oracles::Trace<B> w{{"x", {size / 10 ? size / 10 : 1, 10}, want},
                      {"y", {1, 3}, {B(1, 1), B(2, 1), B(3, 1)}}};
  oracles::Trace<float> g{{"x", {size / 10, 10}, got}, {"y", {1, 3}, {1, 2, 3}}};
  const oracles::Verdict one = oracles::compare(g, w, 1), three = oracles::compare(g, w, 3);
  REQUIRE(one.stages.size() == 2u);
  REQUIRE(three.stages.size() == 2u);
  const auto &a = one.stages[0], &b = three.stages[0];
  CHECK(a.reason == b.reason);
  CHECK(a.failed == b.failed);
  CHECK(a.worst.index == b.worst.index);
  CHECK(a.ratio_p99 == b.ratio_p99);
  CHECK(a.ratio_p50 == b.ratio_p50);
  CHECK(a.metrics.normwise == b.metrics.normwise);
  CHECK(a.ulp_hist == b.ulp_hist);
  REQUIRE(a.samples.size() == b.samples.size());
  for (std::size_t i = 0; i < a.samples.size(); ++i)
    CHECK(a.samples[i].index == b.samples[i].index);
  // Against the elements one at a time.
  std::size_t failed = 0, undecidable = 0, first_fail = size, worst = 0;
  std::vector<double> ratios;
  for (std::size_t i = 0; i < size; ++i) {
    if (!std::isfinite(want[i].e)) {
      ++undecidable;
      continue;
    }
    const double r = std::fabs(double(got[i]) - want[i].v) / want[i].e;
    if (r > 1) {
      ++failed;
      first_fail = std::min(first_fail, i);
    }
    if (ratios.empty() || r > ratios[worst]) worst = ratios.size();
    ratios.push_back(r);
  }
  std::vector<std::size_t> index;  // decided elements' stage indices
  for (std::size_t i = 0; i < size; ++i)
    if (std::isfinite(want[i].e)) index.push_back(i);
  CHECK(a.failed == failed);
  CHECK(a.undecidable == undecidable);
  CHECK(a.worst.index == index[worst]);
  if (failed)
    CHECK(a.reason.find("first at " + std::to_string(first_fail) + " ") != std::string::npos);
  std::sort(ratios.begin(), ratios.end());
  CHECK(a.ratio_p50 == ratios[ratios.size() / 2]);
  CHECK(a.ratio_max == ratios.back());
  CHECK(a.samples.size() <= oracles::kSamples + 1);
}

TEST_CASE("verdict: the ulp histogram bins by powers of two and counts every decided element",
          "[verdict]") {
  CHECK(oracles::ulp_bin(0) == 0);
  CHECK(oracles::ulp_bin(1) == 1);  // [1, 2)
  CHECK(oracles::ulp_bin(3) == 2);  // [2, 4)
  CHECK(oracles::ulp_bin(4) == 3);  // [4, 8)
  CHECK(oracles::ulp_bin(0x1p23) == 24);
  CHECK(oracles::ulp_bin(0x1p24) == oracles::kUlpBins - 1);
  CHECK(oracles::ulp_bin(HUGE_VAL) == oracles::kUlpBins - 1);
  // want 1 with bound 1e-3: got values 0, 1, 2 and 5 ulp above 1.
  std::vector<bnd::Bounded> want(4, bnd::Bounded{1.0, 1e-3});
  const float one = 1.0f, u = 0x1p-23f;
  const float got[4] = {one, one + u, one + 2 * u, one + 5 * u};
  const auto s = oracles::judge("h", got, want.data(), 4, 1);
  REQUIRE(s.ulp_hist.size() == std::size_t(oracles::kUlpBins));
  CHECK(s.ulp_hist[0] == 1);
  CHECK(s.ulp_hist[1] == 1);
  CHECK(s.ulp_hist[2] == 1);
  CHECK(s.ulp_hist[3] == 1);
  // Samples: every element of so short a stage, in index order, the worst among them.
  REQUIRE(s.samples.size() == 4);
  CHECK(s.samples.back().index == 3);
  CHECK(s.worst.index == 3);
}

// Every element is decided as the rules read in order (restated here from their texts): a poison
// NaN is unwritten; a NaN oracle is undecidable with an infinite bound and agrees only with NaN
// with another; an infinite bound is undecidable; a
// non-finite got passes only as the oracle's own infinity; the rest is |got - want| <= bound.
// judge() decides the common case without calling the rules: both paths must agree.
TEST_CASE("verdict: each element is decided by the first rule that applies", "[verdict]") {
  const double inf = HUGE_VAL, nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<float> gots{
      1.0f, 1.5f, -2.0f, float(inf), float(-inf), float(nan), oracles::poison()};
  const std::vector<double> values{1.0, -2.0, inf, -inf, nan};
  const std::vector<double> bounds{0.0, 0.25, 1.0, inf, nan};
  for (const float g : gots)
    for (const double v : values)
      for (const double e : bounds) {
        std::string rule;
        State want;
        if (oracles::is_poison(g)) {
          rule = "unwritten", want = State::fail;
        } else if (std::isnan(v) && e == inf) {  // the model's own overflow
          rule = "nan_agrees", want = State::undecidable;
        } else if (std::isnan(v)) {
          rule = "nan_agrees", want = std::isnan(g) ? State::pass : State::fail;
        } else if (!std::isfinite(e)) {
          rule = "unbounded", want = State::undecidable;
        } else if (!std::isfinite(g)) {
          rule = "nonfinite";
          want = std::isinf(g) && std::isinf(v) && (g > 0) == (v > 0) ? State::pass : State::fail;
        } else {
          rule = "within_bound", want = std::fabs(double(g) - v) <= e ? State::pass : State::fail;
        }
        const B w(v, e);
        const auto s = oracles::judge("y", &g, &w, 1, 1);
        CAPTURE(g, v, e, rule, s.rule, s.reason);
        CHECK(s.state == want);
        if (want == State::fail) CHECK(s.rule == rule);
        if (want == State::pass) CHECK(s.worst.rule == rule);
      }
}

// The p99 and the median by radix selection against a sort, on ratios with ties, zeros, +inf,
// subnormals, and values sharing their leading bits (so the selection narrows more than once).
TEST_CASE("verdict: kth_nonnegative is the k-th of the sorted ratios", "[verdict]") {
  oracles::Rng rng(7);
  auto next = [&rng] { return rng.next(); };
  for (const std::size_t size : {1, 2, 63, 65, 1000, 100000})
    for (const int kind : {0, 1, 2, 3}) {
      std::vector<double> v(size);
      for (auto& d : v) {
        const double u = rng.uniform();
        d = kind == 0   ? u * std::exp2(-40.0 * u)                // spread over binades
            : kind == 1 ? 0.5 + double(next() >> 40) * 0x1.0p-60  // one binade, shared top bits
            : kind == 2 ? double(next() % 4) * 0x1.0p-1070        // ties, zeros, subnormals
                        : (next() % 8 == 0 ? HUGE_VAL : u);       // infinities
      }
      std::vector<double> sorted = v;
      std::sort(sorted.begin(), sorted.end());
      const std::vector<std::size_t> ks{0, size / 2, size * 99 / 100, size - 1};
      const std::vector<double> all = oracles::kth_nonnegative(v, ks);
      for (std::size_t i = 0; i < ks.size(); ++i) {
        CAPTURE(size, kind, ks[i]);
        CHECK(oracles::kth_nonnegative(v, ks[i]) == sorted[ks[i]]);
        CHECK(all[i] == sorted[ks[i]]);
      }
    }
}
