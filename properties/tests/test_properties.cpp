// Properties of the reference and of every kernel backend, on RapidCheck-generated inputs.
// Every failure prints RapidCheck's reproduce string; the seed in force is printed at the start.
#include <rapidcheck/catch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>

#include "mhc/oracles/backward.hpp"
#include "mhc/oracles/birkhoff.hpp"
#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/scalars.hpp"
#include "mhc/oracles/sinkhorn_theory.hpp"
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

TEST_CASE("properties of the Sinkhorn theory", "[property][sinkhorn_theory]") {
  print_params();
  // docs/semantics.md, "Sinkhorn convergence": the observed ratio of successive distances from
  // the limit tends to an eigenvalue of the round's Jacobian (the slowest the start excites);
  // where it has settled it is within the theory's own error, and within 1e-3 of the gap.
  rc::prop("the observed rate is the predicted one on random positive starts", [] {
    const int n = *rc::gen::inRange(2, 7);
    const double eps = *rc::gen::element(0.0, 1e-6, 1e-3);
    const auto L = *props::logits(n);
    ref::Config c;
    c.n = n;
    c.hc_eps = eps;
    c.iters = 1;
    std::vector<double> C(L.size());
    ref::SinkhornTrace<double> tr;
    ref::sinkhorn(c, L.data(), C.data(), &tr);
    const auto& A = tr.steps[0].matrix;
    const auto th = oracles::sinkhorn_theory(A, n, eps);
    RC_ASSERT(th.ok);
    const auto ob = oracles::observe_rate(A, n, eps, th, 20000);
    RC_TAG(ob.settled ? "settled" : "not settled");
    RC_ASSERT(!ob.disagrees());
    if (ob.settled) {
      const double lambda = th.modes[std::size_t(ob.mode)];
      RC_ASSERT(std::fabs(ob.ratio - lambda) <= 1e-3 * (1 - lambda));
    }
  });
  // Dyadic weights on permutation matrices: exactly doubly stochastic combs. A product of doubly
  // stochastic matrices is doubly stochastic; in 50 digits the products round far below double's
  // resolution, so the gains round to exactly 1.
  rc::prop("the gain of a product of exactly doubly stochastic combs is 1 in MPFR", [] {
    const int n = *rc::gen::inRange(2, 6);
    const int depth = *rc::gen::inRange(1, 65);
    std::vector<std::vector<double>> combs(std::size_t(depth),
                                           std::vector<double>(std::size_t(n * n), 0.0));
    for (auto& C : combs) {
      double used = 0;
      for (int w = 0; w < 3; ++w) {  // three random permutations, weight 0..3/16 each
        const double weight = *rc::gen::inRange(0, 4) / 16.0;
        std::vector<int> perm(static_cast<std::size_t>(n));
        std::iota(perm.begin(), perm.end(), 0);
        for (int j = n - 1; j > 0; --j)
          std::swap(perm[std::size_t(j)], perm[std::size_t(*rc::gen::inRange(0, j + 1))]);
        for (int j = 0; j < n; ++j) C[std::size_t(j * n + perm[std::size_t(j)])] += weight;
        used += weight;
      }
      for (int j = 0; j < n; ++j) C[std::size_t(j * n + j)] += 1 - used;  // and the identity
    }
    std::vector<const double*> order;
    for (const auto& C : combs) order.push_back(C.data());
    for (const auto& g : oracles::composite_gains(order, n, true)) {
      RC_ASSERT(g.forward == 1.0);
      RC_ASSERT(g.backward == 1.0);
      RC_ASSERT(std::fabs(g.spectral - 1) <= 4 * u64);  // JacobiSVD's own convergence test
    }
  });
  // Permuting the logits' rows and columns permutes every iterate: the distance from doubly
  // stochastic after K rounds is the same up to the summation order of the line sums. Each of the
  // 2K - 1 divisions and the softmax rounds an entry by at most (n + 1) u relative and a line sum
  // adds n u: two runs differ by at most 2 (2K (n + 1) + n) u (entries and sums at most ~1). The
  // theory's rate is a function of P's singular values, which the permutation keeps.
  rc::prop("the convergence map and the rate are invariant under permutations", [] {
    auto c = *props::config();
    c.d = 1;
    const int n = c.n;
    if (n < 2) return;
    const auto L = *props::logits(n);
    std::vector<int> rows(static_cast<std::size_t>(n)), cols(static_cast<std::size_t>(n));
    std::iota(rows.begin(), rows.end(), 0);
    std::iota(cols.begin(), cols.end(), 0);
    std::reverse(rows.begin(), rows.end());
    std::rotate(cols.begin(), cols.begin() + *rc::gen::inRange(0, n), cols.end());
    std::vector<double> Lp(L.size()), C(L.size()), Cp(L.size());
    for (int j = 0; j < n; ++j)
      for (int k = 0; k < n; ++k)
        Lp[std::size_t(j * n + k)] =
            L[std::size_t(rows[std::size_t(j)] * n + cols[std::size_t(k)])];
    ref::SinkhornTrace<double> tr, trp;
    ref::sinkhorn(c, L.data(), C.data(), &tr);
    ref::sinkhorn(c, Lp.data(), Cp.data(), &trp);
    auto distance = [n](const ref::SinkhornTrace<double>::Entry& e) {
      double d = 0;
      for (int j = 0; j < n; ++j)
        d = std::max({d, std::fabs(e.row_sums[std::size_t(j)] - 1),
                      std::fabs(e.col_sums[std::size_t(j)] - 1)});
      return d;
    };
    const double tol = 2 * (2 * c.iters * (n + 1) + n) * u64;
    RC_ASSERT(std::fabs(distance(tr.steps.back()) - distance(trp.steps.back())) <= tol);
    const auto th = oracles::sinkhorn_theory(tr.steps[0].matrix, n, c.hc_eps);
    const auto thp = oracles::sinkhorn_theory(trp.steps[0].matrix, n, c.hc_eps);
    RC_ASSERT(th.ok == thp.ok);
    // P to 64 u in its line sums moves the singular values by about n 64 u (Weyl).
    if (th.ok) RC_ASSERT(std::fabs(th.rate - thp.rate) <= 4 * n * 64 * u64);
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

namespace {
// A generated backward case of op at a small configuration (n <= 3, d <= 4, rounds <= 8: the
// central differences in MPFR cost two forwards an input element), 2 tokens; a Block's or a
// stack's (d >= 2) with small sublayers, one sequence of 2 or 3.
oracles::OpCase small_backward_case(oracles::Op op) {
  ref::Config c;
  c.n = *rc::gen::inRange(1, 4);
  c.d = *rc::gen::inRange(1, 5);
  c.iters = *rc::gen::inRange(1, 9);
  c.hc_eps = std::pow(10.0, -*rc::gen::inRange(1, 9));
  c.norm_eps = std::pow(10.0, -*rc::gen::element(2, 6, 12, 20));
  const auto seed = *rc::gen::inRange<std::uint64_t>(0, 1000000);
  if (oracles::op_spec(op).whole) {
    c.d = std::max(c.d, 2);
    ref::BlockConfig b;
    b.heads = *rc::gen::inRange(1, 3);
    b.head_dim = *rc::gen::inRange(1, 4);
    b.experts = *rc::gen::inRange(2, 4);
    b.top_k = *rc::gen::inRange(1, b.experts);
    b.inter = *rc::gen::inRange(2, 5);
    b.layers = *rc::gen::inRange(1, 3);
    const std::size_t T = *rc::gen::inRange<std::size_t>(2, 4);
    return oracles::generate_block_case(op, c, b, 1, T, seed, oracles::Precision::fp32());
  }
  return oracles::generate_case(op, c, 2, seed, oracles::Precision::fp32());
}
// The double evaluation's own error, first order: the fp32 bound of the same programs scaled
// from u = 2^-24 to 2^-53 (eta is larger in the fp32 bound than in double: still an upper bound).
constexpr double kDoubleOverFp32 = 0x1.0p-29;
}  // namespace

TEST_CASE("properties of the backward", "[property][backward]") {
  print_params();
  rc::prop("gradients are linear in the upstream gradient", [] {
    std::vector<oracles::Op> ops = oracles::backward_ops();
    for (oracles::Op op : oracles::block_backward_ops()) ops.push_back(op);
    const auto op = *rc::gen::elementOf(ops);
    oracles::OpCase c = small_backward_case(op);
    // Upstream gradients on the grid k / 1024 and dyadic a, b: a g1 + b g2 is exact in float.
    const double a = *rc::gen::element(0.5, -2.0, 3.0), b = *rc::gen::element(1.0, -0.25, 4.0);
    oracles::OpCase c2 = c, mix = c;
    for (auto* k : {&c, &c2})
      for (auto& [name, t] : k->inputs)
        if (name.rfind("upstream_", 0) == 0)
          for (float& v : t.data) v = float(*rc::gen::inRange(-1024, 1025)) / 1024.0f;
    for (auto& [name, t] : mix.inputs)
      if (name.rfind("upstream_", 0) == 0)
        for (std::size_t i = 0; i < t.data.size(); ++i)
          t.data[i] =
              float(a * double(c.inputs[name].data[i]) + b * double(c2.inputs[name].data[i]));
    const auto g1 = oracles::oracle_trace(c, 1), g2 = oracles::oracle_trace(c2, 1),
               g = oracles::oracle_trace(mix, 1);
    for (std::size_t s = 0; s < g.size(); ++s)
      for (std::size_t i = 0; i < g[s].values.size(); ++i) {
        const auto &x = g1[s].values[i], &y = g2[s].values[i], &z = g[s].values[i];
        const double tol =
            (std::fabs(a) * x.e + std::fabs(b) * y.e + z.e) * kDoubleOverFp32 + 1e-300;
        RC_ASSERT(std::fabs(z.v - (a * x.v + b * y.v)) <= tol);
      }
  });
  rc::prop("gradients agree with central differences of the reference in MPFR", [] {
    const auto op = *rc::gen::elementOf(
        std::vector<oracles::Op>{oracles::Op::split_sinkhorn_backward, oracles::Op::pre_backward,
                                 oracles::Op::post_backward, oracles::Op::rmsnorm_backward});
    const oracles::OpCase c = small_backward_case(op);
    const auto& spec = oracles::op_spec(op);
    const auto& fwd = oracles::op_spec(spec.forward);
    num::set_mpfr_bits(256);
    using M = num::mpfr;
    const auto got = oracles::oracle_trace(c, 1);
    // The loss sum_k upstream_k . out_k of token t, differenced in each input of that token and
    // in each param (summed over both tokens).
    std::vector<std::vector<double>> fd(spec.outputs.size());
    for (std::size_t k = 0; k < spec.outputs.size(); ++k) fd[k].assign(got[k].values.size(), 0);
    for (std::size_t t = 0; t < c.tokens; ++t) {
      oracles::Tensors<M> at, up;
      oracles::token_tensors(c, t, at, up);
      auto loss = [&] {
        const auto out = oracles::forward_piece<M>(spec.forward, c.cfg, at);
        M s = 0;
        for (std::size_t k = 0; k < out.size(); ++k)
          for (std::size_t i = 0; i < out[k].size(); ++i) s += up[k][i] * out[k][i];
        return s;
      };
      for (std::size_t k = 0; k < at.size(); ++k)
        for (std::size_t i = 0; i < at[k].size(); ++i) {
          const M x = at[k][i], h = M(1e-30) * (x == 0 ? M(1) : abs(x));
          at[k][i] = x + h;
          const M plus = loss();
          at[k][i] = x - h;
          const M minus = loss();
          at[k][i] = x;
          const double d = ((plus - minus) / (2 * h)).convert_to<double>();
          fd[k][k < fwd.inputs.size() ? t * at[k].size() + i : i] += d;
        }
    }
    for (std::size_t k = 0; k < fd.size(); ++k) {
      double scale = 0;
      for (double v : fd[k]) scale = std::max(scale, std::fabs(v));
      for (std::size_t i = 0; i < fd[k].size(); ++i) {
        const auto& w = got[k].values[i];
        RC_ASSERT(std::fabs(w.v - fd[k][i]) <= w.e * kDoubleOverFp32 + 1e-20 * scale);
      }
    }
  });
  rc::prop(
      "with a doubly stochastic comb, an upstream gradient equal across streams passes to "
      "the residual unchanged, every kernel",
      [] {
        oracles::OpCase c = small_backward_case(oracles::Op::post_backward);
        const std::size_t n = std::size_t(c.cfg.n), d = std::size_t(c.cfg.d);
        // comb = (I + P) / 2 for a permutation P of each token: exactly doubly stochastic.
        auto& comb = c.inputs["comb"].data;
        for (std::size_t t = 0; t < c.tokens; ++t) {
          std::vector<std::size_t> p(n);
          std::iota(p.begin(), p.end(), std::size_t(0));
          std::rotate(p.begin(), p.begin() + std::ptrdiff_t(*rc::gen::inRange<std::size_t>(0, n)),
                      p.end());
          for (std::size_t j = 0; j < n; ++j)
            for (std::size_t k = 0; k < n; ++k)
              comb[(t * n + j) * n + k] = 0.5f * float(j == k) + 0.5f * float(p[j] == k);
        }
        auto& g = c.inputs["upstream_y"].data;
        for (std::size_t t = 0; t < c.tokens; ++t)
          for (std::size_t k = 0; k < n; ++k)
            for (std::size_t i = 0; i < d; ++i) g[(t * n + k) * d + i] = g[t * n * d + i];
        c.origin = oracles::OpCase::Origin::derived;
        const auto want = oracles::oracle_trace(c, 1);
        const auto& dr = want[1].values;  // grad_residual
        for (std::size_t t = 0; t < c.tokens; ++t)
          for (std::size_t j = 0; j < n; ++j)
            for (std::size_t i = 0; i < d; ++i)
              RC_ASSERT(dr[(t * n + j) * d + i].v == double(g[t * n * d + i]));
        for (const auto* b : impl::backends()) {
          const runner::Ran r = runner::run(*b, c, 1u);
          RC_ASSERT(r.ran());
          const auto& got = r.got[1].values;
          for (std::size_t t = 0; t < c.tokens; ++t)
            for (std::size_t j = 0; j < n; ++j)
              for (std::size_t i = 0; i < d; ++i)
                RC_ASSERT(got[(t * n + j) * d + i] == g[t * n * d + i]);
        }
      });
}
