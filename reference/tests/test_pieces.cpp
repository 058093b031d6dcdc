// mixes, split, hc_pre, hc_post and rmsnorm on inputs whose results are known in closed form.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <vector>

#include "mhc/reference/mhc.hpp"

using mhc::ref::Config;

namespace {
constexpr double u64 = 0x1.0p-53;
Config small(int n, int d) {
  Config c;
  c.n = n;
  c.d = d;
  return c;
}
}  // namespace

// M*n*d + M + 3 with M = (2+4)*4 = 24 and n*d = 4*5120 = 20480: 491520 + 24 + 3 (seed 000's table).
TEST_CASE("config: per-site parameter count at V4.1 sizes is 491,547", "[config]") {
  const Config c = mhc::ref::v41();
  CHECK(c.mix() == 24);
  CHECK(c.site_params() == 491547u);
}

TEST_CASE("config: validate rejects n=0, d=0, iters=0 and negative or NaN eps", "[config]") {
  CHECK(mhc::ref::validate(mhc::ref::v41()).empty());
  Config c = mhc::ref::v41();
  c.n = 0;
  CHECK_FALSE(mhc::ref::validate(c).empty());
  c = mhc::ref::v41();
  c.d = -3;
  CHECK_FALSE(mhc::ref::validate(c).empty());
  c = mhc::ref::v41();
  c.iters = 0;
  CHECK_FALSE(mhc::ref::validate(c).empty());
  c = mhc::ref::v41();
  c.hc_eps = -1e-6;
  CHECK_FALSE(mhc::ref::validate(c).empty());
  c = mhc::ref::v41();
  c.norm_eps = std::nan("");
  CHECK_FALSE(mhc::ref::validate(c).empty());
}

// An eps beyond fp32's range is infinite in an fp32 kernel: every output NaN or undecidable, so
// nothing would be judged (a wrong kernel passed so). The largest fp32 value is taken.
TEST_CASE("config: validate rejects eps beyond fp32 and iters beyond 100000", "[config]") {
  const double fp32_max = double(std::numeric_limits<float>::max());
  for (const double eps : {fp32_max, std::nextafter(fp32_max, HUGE_VAL), 1e300}) {
    Config c = mhc::ref::v41();
    c.hc_eps = eps;
    CHECK(mhc::ref::validate(c).empty() == (eps == fp32_max));
    c = mhc::ref::v41();
    c.norm_eps = eps;
    CHECK(mhc::ref::validate(c).empty() == (eps == fp32_max));
  }
  Config c = mhc::ref::v41();
  c.iters = 100000;
  CHECK(mhc::ref::validate(c).empty());
  c.iters = 100001;
  CHECK(mhc::ref::validate(c) == "iters (sinkhorn_iters) must be in [1, 100000], got 100001");
}

// C[j,k] carries stream j INTO stream k (docs/semantics.md, "Traps", 1): with only stream 0
// nonzero, output stream k receives C[0,k]. A transposed reading would give C[k,0].
TEST_CASE("hc_post: C[j,k] carries j into k, post has its factor as given", "[hc_post]") {
  const Config c = small(2, 1);
  const double comb[] = {0.5, 0.25,       // C[0,0], C[0,1]
                         0.125, 0.0625};  // C[1,0], C[1,1]
  const double residual[] = {1.0, 0.0};   // R[0,0] = 1, R[1,0] = 0
  const double zero_post[] = {0.0, 0.0}, f[] = {10.0};
  double y[2];
  mhc::ref::hc_post(c, f, residual, zero_post, comb, y);
  CHECK(y[0] == 0.5);
  CHECK(y[1] == 0.25);  // C[0,1], not C[1,0] = 0.125
  // post[k] * F + sum_j C[j,k] R[j]: 2*10 + 0.5 and 3*10 + 0.25, all exact in binary.
  const double post[] = {2.0, 3.0};
  mhc::ref::hc_post(c, f, residual, post, comb, y);
  CHECK(y[0] == 20.5);
  CHECK(y[1] == 30.25);
}

TEST_CASE("hc_post: identity comb and zero post return the residual", "[hc_post]") {
  const Config c = small(3, 4);
  std::vector<double> comb(9, 0.0), post(3, 0.0), f(4, 7.0), R(12), y(12);
  for (int j = 0; j < 3; ++j) comb[std::size_t(j * 3 + j)] = 1.0;
  for (std::size_t i = 0; i < R.size(); ++i) R[i] = 0.1 * double(i) - 0.3;
  mhc::ref::hc_post(c, f.data(), R.data(), post.data(), comb.data(), y.data());
  CHECK(y == R);
}

TEST_CASE("hc_pre: weighted sum of the streams", "[hc_pre]") {
  const Config c = small(3, 2);
  const float x[] = {1,   2,     // stream 0
                     10,  20,    // stream 1
                     100, 200};  // stream 2
  const float p[] = {0.5f, 0.25f, 2.0f};
  double y[2];
  mhc::ref::hc_pre(c, x, p, y);
  CHECK(y[0] == 0.5 + 2.5 + 200.0);
  CHECK(y[1] == 1.0 + 5.0 + 400.0);
}

// x = [3, 4], eps = 0: mean(x^2) = 25/2, so y = g * x / (5/sqrt 2) = g * x * sqrt(2) / 5.
TEST_CASE("rmsnorm: closed forms", "[rmsnorm]") {
  const float x[] = {3, 4}, g[] = {1, 2};
  double y[2];
  mhc::ref::rmsnorm(2, 0.0, x, g, y);
  CHECK(std::fabs(y[0] - 3 * std::sqrt(2.0) / 5) <= 4 * u64 * y[0]);
  CHECK(std::fabs(y[1] - 8 * std::sqrt(2.0) / 5) <= 4 * u64 * y[1]);
  // A constant token c: y = g * c / sqrt(c^2 + eps); with eps = 0 and c = 3 every step is exact.
  const float x3[] = {3, 3, 3}, g3[] = {1.5f, -2, 0.25f};
  double y3[3];
  mhc::ref::rmsnorm(3, 0.0, x3, g3, y3);
  CHECK(y3[0] == 1.5);
  CHECK(y3[1] == -2.0);
  CHECK(y3[2] == 0.25);
  // A zero token gives zero, whatever eps (> 0).
  const float x0[] = {0, 0};
  mhc::ref::rmsnorm(2, 1e-20, x0, g, y);
  CHECK(y[0] == 0.0);
  CHECK(y[1] == 0.0);
}

// Stream 0 = [2, 2], stream 1 = [0, 0]: the mean over all n*d = 4 values is 2, so r = 1/sqrt(2)
// (a per-stream RMS would give 1/2 for stream 0 and infinity for stream 1). Rows of hc_fn pick
// values: row 0 = x[0] -> 2/sqrt 2 = sqrt 2; row 1 = sum of all -> 4/sqrt 2 = 2 sqrt 2.
TEST_CASE("mixes: RMS over all n*d values, projection then scale", "[mixes]") {
  const Config c = small(2, 2);  // M = 8
  const float x[] = {2, 2, 0, 0};
  std::vector<float> W(8 * 4, 0.0f);
  W[0] = 1;                                               // row 0: x[0]
  for (int i = 0; i < 4; ++i) W[4 + std::size_t(i)] = 1;  // row 1: sum
  W[8 + 2] = 5;                                           // row 2: 5 * x[2] = 0
  Config c0 = c;
  c0.norm_eps = 0.0;
  std::vector<double> m(8);
  mhc::ref::mixes(c0, x, W.data(), m.data());
  CHECK(std::fabs(m[0] - std::sqrt(2.0)) <= 2 * u64 * m[0]);
  CHECK(std::fabs(m[1] - 2 * std::sqrt(2.0)) <= 2 * u64 * m[1]);
  CHECK(m[2] == 0.0);
  // Scaling the token by 8 changes nothing with norm_eps = 0 (powers of two keep it exact).
  const float x8[] = {16, 16, 0, 0};
  std::vector<double> m8(8);
  mhc::ref::mixes(c0, x8, W.data(), m8.data());
  CHECK(m8 == m);
  // A zero token: r = 1/sqrt(norm_eps) and every mix is 0 * r = 0.
  const float z[] = {0, 0, 0, 0};
  mhc::ref::mixes(c, z, W.data(), m.data());
  for (double v : m) CHECK(v == 0.0);
}

// mixes = 0 and base = 0: pre = sig(0) + eps = 1/2 + eps, post = 2 sig(0) = 1 (no eps).
TEST_CASE("split_sinkhorn: eps after the sigmoid in pre, factor 2 and no eps in post", "[split]") {
  Config c = small(4, 1);
  c.hc_eps = 1.0 / 64;  // exact in binary, large enough to see
  std::vector<double> mix(std::size_t(c.mix()), 0.0), pre(4), post(4), comb(16);
  const double scale[] = {1, 1, 1};
  std::vector<double> base(std::size_t(c.mix()), 0.0);
  mhc::ref::split_sinkhorn(c, mix.data(), scale, base.data(), pre.data(), post.data(), comb.data());
  for (double p : pre) CHECK(p == 0.5 + 1.0 / 64);
  for (double p : post) CHECK(p == 1.0);
  // base pushes the sigmoid: sig(log 3) = 3/4.
  base[0] = std::log(3.0);
  base[4] = std::log(3.0);
  mhc::ref::split_sinkhorn(c, mix.data(), scale, base.data(), pre.data(), post.data(), comb.data());
  CHECK(std::fabs(pre[0] - (0.75 + 1.0 / 64)) <= 4 * u64);
  CHECK(std::fabs(post[0] - 1.5) <= 4 * u64);
}
