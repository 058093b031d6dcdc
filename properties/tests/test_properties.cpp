// Properties of the reference and of every kernel backend, on RapidCheck-generated inputs.
// Every failure prints RapidCheck's reproduce string; the seed in force is printed at the start.
#include <rapidcheck/catch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>

#include "mhc/oracles/birkhoff.hpp"
#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/verdict.hpp"
#include "mhc/properties/generators.hpp"
#include "mhc/runner/judge.hpp"
#include "mhc/runner/repro.hpp"

using namespace mhc;

namespace {
void print_params() {
  static bool once = false;
  if (once) return;
  once = true;
  const char* p = std::getenv("RC_PARAMS");
  std::printf("RC_PARAMS=\"%s\" (set it to replay; a failure prints its own reproduce string)\n",
              p ? p : "");
}
constexpr double u64 = 0x1.0p-53;
}  // namespace

TEST_CASE("properties of the Sinkhorn of the comb", "[property][sinkhorn]") {
  print_params();
  rc::prop("comb is finite and nonnegative for any logits, huge ones included; every kernel", [] {
    const auto c = *props::config();
    const auto L = *props::logits(c.n);
    std::vector<double> C(L.size());
    ref::sinkhorn(c, L.data(), C.data());
    for (double v : C) RC_ASSERT(std::isfinite(v) && v >= 0);
    // The kernels through split_sinkhorn: mixes carrying the logits, scales 1, bases 0.
    const int n = c.n, M = c.mix();
    std::vector<float> mix(std::size_t(M), 0.0f), scale{1, 1, 1}, base(std::size_t(M), 0.0f);
    for (std::size_t i = 0; i < L.size(); ++i) mix[std::size_t(2 * n) + i] = float(L[i]);
    std::vector<float> pre(static_cast<std::size_t>(n)), post(static_cast<std::size_t>(n)),
        comb(L.size());
    impl::KernelConfig k;
    k.n = c.n;
    k.iters = c.iters;
    k.hc_eps = float(c.hc_eps);
    for (const auto* b : impl::backends()) {
      b->split_sinkhorn(k, 1, mix.data(), scale.data(), base.data(), pre.data(), post.data(),
                        comb.data());
      for (float v : comb) RC_ASSERT(std::isfinite(v) && v >= 0);
    }
  });
  // In exact arithmetic the final column sums are S/(S+eps), S the column sum before; in double
  // the n-term sums and the division round: within 4n u relative.
  rc::prop("column sums after the final column division equal S/(S+eps)", [] {
    const auto c = *props::config();
    const auto L = *props::logits(c.n);
    std::vector<double> C(L.size());
    ref::SinkhornTrace<double> tr;
    ref::sinkhorn(c, L.data(), C.data(), &tr);
    const auto& before = tr.steps[tr.steps.size() - 2].col_sums;
    const auto& after = tr.steps.back().col_sums;
    for (int k = 0; k < c.n; ++k) {
      const double S = before[std::size_t(k)], want = S / (S + c.hc_eps);
      RC_ASSERT(std::fabs(after[std::size_t(k)] - want) <= 4 * c.n * u64 * want);
    }
  });
  // Franklin & Lorenz: the row sums r after each round contract in Hilbert's projective metric,
  // d_H(r_{k+1}, 1) <= kappa^2 d_H(r_k, 1), kappa = tanh(Delta(A)/4); with eps = 0 the columns sum
  // to 1, so max|r_j - 1| <= exp(d_H(r_K, 1)) - 1 <= expm1(kappa^(2(K-1)) d_H(r_1, 1)).
  rc::prop("row residual after K rounds within the Birkhoff contraction bound (eps = 0)", [] {
    auto c = *props::config();
    c.hc_eps = 0;
    const auto L = *rc::gen::map(props::logits(c.n), [](std::vector<double> v) {
      for (auto& x : v)
        x = std::max(-20.0, std::min(20.0, x));  // keep every entry positive in double
      return v;
    });
    std::vector<double> C(L.size());
    ref::SinkhornTrace<double> tr;
    ref::sinkhorn(c, L.data(), C.data(), &tr);
    const double kappa = oracles::birkhoff_kappa(tr.steps[0].matrix, c.n);
    auto dh = [](const std::vector<double>& r) {
      const auto [lo, hi] = std::minmax_element(r.begin(), r.end());
      return std::log(*hi / *lo);
    };
    const double d1 = dh(tr.steps[1].row_sums);  // after round 1's column division
    double res = 0;
    for (double r : tr.steps.back().row_sums) res = std::max(res, std::fabs(r - 1));
    const double bound = std::expm1(std::pow(kappa, 2.0 * (c.iters - 1)) * d1);
    RC_ASSERT(res <= bound + 64 * c.n * u64);
  });
}

TEST_CASE("properties of the mHC pieces", "[property][pieces]") {
  print_params();
  // Permuting the streams by p, with the parameters permuted to match, permutes pre and post by
  // p and the comb by p on both indices (sums reordered: equal to a few double roundings).
  rc::prop("permuting the streams permutes pre, post and comb", [] {
    const auto c = *props::config();
    const int n = c.n, M = c.mix();
    std::vector<int> p(static_cast<std::size_t>(n));
    std::iota(p.begin(), p.end(), 0);
    const auto shuffled =
        *rc::gen::container<std::vector<int>>(std::size_t(n), rc::gen::inRange(0, 1 << 20));
    std::sort(p.begin(), p.end(),
              [&](int a, int b) { return shuffled[std::size_t(a)] < shuffled[std::size_t(b)]; });
    const auto mix =
        *rc::gen::container<std::vector<float>>(std::size_t(M), props::float_in(-2, 3));
    const auto base =
        *rc::gen::container<std::vector<float>>(std::size_t(M), props::float_in(-2, 1));
    const std::vector<float> scale{0.5f, 1.5f, 2.0f};
    auto permute = [&](const std::vector<float>& v) {
      std::vector<float> w(v.size());
      for (int j = 0; j < n; ++j) {
        w[std::size_t(j)] = v[std::size_t(p[std::size_t(j)])];
        w[std::size_t(n + j)] = v[std::size_t(n + p[std::size_t(j)])];
        for (int k = 0; k < n; ++k)
          w[std::size_t(2 * n + j * n + k)] =
              v[std::size_t(2 * n + p[std::size_t(j)] * n + p[std::size_t(k)])];
      }
      return w;
    };
    const auto mix2 = permute(mix), base2 = permute(base);
    std::vector<double> m1(mix.begin(), mix.end()), m2(mix2.begin(), mix2.end());
    std::vector<double> pre1(static_cast<std::size_t>(n)), post1(static_cast<std::size_t>(n)),
        comb1(static_cast<std::size_t>(n * n));
    std::vector<double> pre2(static_cast<std::size_t>(n)), post2(static_cast<std::size_t>(n)),
        comb2(static_cast<std::size_t>(n * n));
    ref::split_sinkhorn(c, m1.data(), scale.data(), base.data(), pre1.data(), post1.data(),
                        comb1.data());
    ref::split_sinkhorn(c, m2.data(), scale.data(), base2.data(), pre2.data(), post2.data(),
                        comb2.data());
    const double tol = 1e-12;
    for (int j = 0; j < n; ++j) {
      RC_ASSERT(std::fabs(pre2[std::size_t(j)] - pre1[std::size_t(p[std::size_t(j)])]) <= tol);
      RC_ASSERT(std::fabs(post2[std::size_t(j)] - post1[std::size_t(p[std::size_t(j)])]) <= tol);
      for (int k = 0; k < n; ++k)
        RC_ASSERT(std::fabs(comb2[std::size_t(j * n + k)] -
                            comb1[std::size_t(p[std::size_t(j)] * n + p[std::size_t(k)])]) <= tol);
    }
  });
  // With norm_eps = 0 and c = 4^k every product, the sum of squares and the square root scale
  // exactly, so r x is unchanged bit for bit; with norm_eps > 0 the change is at most
  // norm_eps / mean(x^2) relative (first order: r depends on mean + norm_eps).
  rc::prop("mixes are invariant to scaling a token by c > 0 up to norm_eps effects", [] {
    auto c = *props::config();
    c.d = std::min(c.d, 48);
    const std::size_t nd = c.stream_size(), M = std::size_t(c.mix());
    const auto x = *rc::gen::container<std::vector<float>>(nd, props::float_in(-3, 3));
    const auto W = *rc::gen::container<std::vector<float>>(M * nd, props::float_in(-3, 0));
    const int k = *rc::gen::inRange(-3, 4);
    const float s = std::ldexp(1.0f, 2 * k);
    std::vector<float> xs(x);
    for (auto& v : xs) v *= s;
    std::vector<double> m1(M), m2(M);
    ref::mixes(c, x.data(), W.data(), m1.data());
    ref::mixes(c, xs.data(), W.data(), m2.data());
    double mean = 0;
    for (float v : x) mean += double(v) * double(v) / double(nd);
    RC_PRE(mean > 0);
    const double slack = c.norm_eps * (1 + 1 / (double(s) * double(s))) / mean;
    for (std::size_t a = 0; a < M; ++a)
      RC_ASSERT(std::fabs(m2[a] - m1[a]) <= (slack + 8 * u64) * std::fabs(m1[a]) + 1e-300);
  });
  rc::prop("hc_post with identity comb and zero post returns the residual, every kernel", [] {
    auto c = *props::config();
    c.d = std::min(c.d, 48);
    const std::size_t n = std::size_t(c.n), d = std::size_t(c.d), T = 2;
    const auto R = *rc::gen::container<std::vector<float>>(T * n * d, props::activation());
    const auto f = *rc::gen::container<std::vector<float>>(T * d, props::activation());
    std::vector<float> post(T * n, 0.0f), comb(T * n * n, 0.0f), y(T * n * d);
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t j = 0; j < n; ++j) comb[(t * n + j) * n + j] = 1.0f;
    impl::KernelConfig k;
    k.n = c.n;
    k.d = c.d;
    for (const auto* b : impl::backends()) {
      b->hc_post(k, T, f.data(), R.data(), post.data(), comb.data(), y.data());
      for (std::size_t i = 0; i < y.size(); ++i)
        RC_ASSERT(y[i] == R[i] || (y[i] == 0 && R[i] == 0));
    }
  });
}

// NaN in one token's streams reaches that token's output and no other (both kernels).
TEST_CASE("NaN stays in its token", "[property][nan]") {
  print_params();
  rc::prop("a NaN in token 0 of hc_pre's streams leaves token 1 exact and within bound", [] {
    auto c = *props::config();
    c.d = std::min(c.d, 48);
    auto oc =
        oracles::generate_case(oracles::Op::pre, c, 2, *rc::gen::inRange<std::uint64_t>(0, 1000000),
                               oracles::Precision::fp32());
    auto& x = oc.inputs["x"].data;
    const std::size_t half = x.size() / 2;
    const auto v = *rc::gen::container<std::vector<float>>(half, props::activation(true));
    std::copy(v.begin(), v.end(), x.begin());
    runner::Judging j;
    j.threads = 1;
    const auto want = runner::shared_oracle(oc, j).want;
    for (const auto* b : impl::backends()) {
      const auto ran = runner::run(*b, oc, 1);
      RC_ASSERT(ran.ran());
      const auto& got = ran.got;
      const std::size_t d = std::size_t(c.d);
      for (std::size_t i = d; i < 2 * d; ++i) {
        RC_ASSERT(std::isfinite(got[0].values[i]));
        RC_ASSERT(std::fabs(double(got[0].values[i]) - want[0].values[i].v) <= want[0].values[i].e);
      }
    }
  });
}

// The differential property: every kernel within its bound on every generated case, every op
// (the fused boundary against the composition of the pieces included).
TEST_CASE("every kernel within its bound on generated cases", "[property][differential]") {
  print_params();
  rc::prop("kernels agree with the oracle within bounds", [] {
    auto c = *props::config();
    if (c.d != 5120) c.d = std::min(c.d, 48);
    const auto op =
        *rc::gen::element(oracles::Op::split_sinkhorn, oracles::Op::mixes, oracles::Op::pre,
                          oracles::Op::post, oracles::Op::rmsnorm, oracles::Op::boundary);
    const auto seed = *rc::gen::inRange<std::uint64_t>(0, 1u << 30);
    const auto prec = *rc::gen::element(oracles::Precision::fp32(), oracles::Precision::tf32(),
                                        oracles::Precision::bf16());
    auto oc = oracles::generate_case(op, c, 2, seed, prec);
    // Activations of every regime in place of the generated ones (bf16 streams stay bf16).
    for (const char* name : {"x", "f", "residual"}) {
      auto it = oc.inputs.find(name);
      if (it == oc.inputs.end()) continue;
      auto v = *rc::gen::container<std::vector<float>>(it->second.data.size(), props::activation());
      if (prec == oracles::Precision::bf16())
        for (auto& x : v) x = impl::round_bf16(x);
      // a token of all zeros with norm_eps = 0 is 0 * inf: undefined, skip it
      it->second.data = v;
    }
    RC_PRE(!(c.norm_eps == 0 && (op == oracles::Op::mixes || op == oracles::Op::rmsnorm ||
                                 op == oracles::Op::boundary)));
    // Now and then a whole token of zeros (r = 1/sqrt(norm_eps)).
    if (*rc::gen::inRange(0, 8) == 0)
      for (const char* name : {"x", "residual"}) {
        auto it = oc.inputs.find(name);
        if (it == oc.inputs.end()) continue;
        std::fill(it->second.data.begin(),
                  it->second.data.begin() + std::ptrdiff_t(it->second.data.size() / 2), 0.0f);
      }
    // Parameters of every scale: hc_fn entries 1e-4..1, hc_scale and hc_base from the generators.
    if (oc.params.count("hc_fn")) {
      const double ws = *props::weight_scale();
      double mx = 0;
      for (float w : oc.params["hc_fn"].data) mx = std::max(mx, double(std::fabs(w)));
      for (float& w : oc.params["hc_fn"].data) w = float(double(w) / std::max(mx, 1e-30) * ws);
    }
    if (oc.params.count("hc_scale")) oc.params["hc_scale"].data = *props::hc_scale();
    if (oc.params.count("hc_base"))
      oc.params["hc_base"].data = *rc::gen::container<std::vector<float>>(
          oc.params["hc_base"].data.size(), props::float_in(-3, 2));
    // Generated, then changed: a failing case is saved, and its REPRO line reruns the file.
    oc.origin = oracles::OpCase::Origin::derived;
    runner::Judging j;
    j.threads = 1;
    for (const auto* b : impl::backends()) {
      const auto o = runner::judge(*b, oc, j);
      if (o.verdict.state == oracles::State::fail) {
        for (const auto& s : o.verdict.stages)
          if (s.state == oracles::State::fail)
            RC_LOG() << b->name << " " << s.stage << ": " << s.reason << "\n";
        if (!o.diagnosis.empty()) RC_LOG() << "DIAGNOSIS: " << o.diagnosis << "\n";
        auto saved = oc;
        saved.file = runner::save_case(
            "mhc-failures",
            "property_" + b->name + "_" + oracles::op_name(op) + "_seed" + std::to_string(seed), oc,
            o.got, "test_properties: kernels within bounds");
        saved.origin = oracles::OpCase::Origin::file;
        if (!saved.file.empty())
          RC_LOG() << "REPRO: " << runner::repro(saved, b->name, j.model) << "\n";
      }
      RC_ASSERT(o.verdict.state != oracles::State::fail);
    }
  });
}
