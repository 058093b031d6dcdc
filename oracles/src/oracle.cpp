#include "mhc/oracles/oracle.hpp"

#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>

#include "mhc/oracles/scalars.hpp"
#include "mhc/oracles/selfcheck.hpp"

namespace mhc::oracles {

double mixes_condition(const ref::Config& c, const float* x, const float* hc_fn) {
  const std::size_t m = c.stream_size();
  double worst = 1;
  for (int a = 0; a < c.mix(); ++a) {
    const float* w = hc_fn + std::size_t(a) * m;
    std::vector<double> terms(m);
    double mag = 0;
    for (std::size_t i = 0; i < m; ++i) {
      terms[i] = double(w[i]) * double(x[i]);  // exact: 24 + 24 bits
      mag += std::fabs(terms[i]);
    }
    if (mag == 0) continue;
    const double s = std::fabs(ref::sum(terms.data(), m));
    worst = std::max(worst, s == 0 ? std::numeric_limits<double>::infinity() : mag / s);
  }
  return worst;
}

double mixes_drift(const ref::Config& c, double kappa) {
  const double u = 0x1.0p-53, m = double(c.stream_size());
  const double gamma = m * u / (1 - m * u);
  return gamma * gamma * kappa;
}

PiecesTrace<double> oracle_pieces(const PiecesCase& c, unsigned threads, OracleStats* stats,
                                  double limit) {
  if (limit < 0) limit = kOracleAccuracy / 8;
  PiecesTrace<double> r = evaluate_pieces<double>(c, threads);
  const ref::Config& k = c.cfg;
  const std::size_t n = std::size_t(k.n), nd = k.stream_size(), M = std::size_t(k.mix());
  std::mutex mu;
  OracleStats st;
  st.tokens = c.tokens;
  par::for_each(c.tokens, threads, [&](std::size_t t) {
    const float* x = c.x.data() + t * nd;
    const double kappa = mixes_condition(k, x, c.hc_fn.data());
    const bool fall_back = mixes_drift(k, kappa) > limit;
    if (fall_back) {
      std::vector<num::quad> mix(M), pre(n), post(n), comb(n * n);
      ref::mixes(k, x, c.hc_fn.data(), mix.data());
      ref::split_sinkhorn(k, mix.data(), c.hc_scale.data(), c.hc_base.data(), pre.data(),
                          post.data(), comb.data());
      auto put = [](const std::vector<num::quad>& from, double* to) {
        for (std::size_t i = 0; i < from.size(); ++i) to[i] = from[i].convert_to<double>();
      };
      put(mix, &r.mixes[t * M]);
      put(pre, &r.pre[t * n]);
      put(post, &r.post[t * n]);
      put(comb, &r.comb[t * n * n]);
    }
    std::lock_guard<std::mutex> lock(mu);
    st.max_mixes_condition = std::max(st.max_mixes_condition, kappa);
    st.fallback_tokens += fall_back ? 1 : 0;
  });
  if (stats) *stats = st;
  return r;
}

}  // namespace mhc::oracles
