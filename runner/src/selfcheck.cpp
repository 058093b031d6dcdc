#include "mhc/runner/selfcheck.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace mhc::runner {
namespace {

std::string describe(const ref::Config& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "n=%d d=%d iters=%d hc_eps=%.3g norm_eps=%.3g", c.n, c.d, c.iters,
                c.hc_eps, c.norm_eps);
  return buf;
}

// "margin": how many times smaller than fp32's unit roundoff the double oracle's error is.
std::string margin(double err) {
  if (err == 0) return "exact";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", 0x1.0p-24 / err);
  return buf;
}

}  // namespace

int run_selfcheck(const oracles::SelfcheckOptions& opt, Session& session) {
  std::printf("selfcheck: %d cases, seed %llu: the reference in double, MPFR and MPFI\n", opt.cases,
              static_cast<unsigned long long>(opt.seed));
  std::fflush(stdout);
  reports::Entry& entry = session.report.entry("selfcheck");
  entry.kind = "selfcheck";
  entry.settings = {{"cases", std::to_string(opt.cases)}, {"seed", std::to_string(opt.seed)}};
  const auto res = oracles::selfcheck(opt, [&](const oracles::CaseCertificate& c) {
    // Each output as a stage: its bound is the required accuracy, 2^-24 / 1e6 relative.
    reports::CaseRecord rec;
    rec.index = std::size_t(c.index);
    rec.seed = c.seed;
    rec.label = "case " + std::to_string(c.index + 1) + ": " + describe(c.cfg);
    for (const auto& s : c.stages) {
      oracles::StageVerdict v;
      v.stage = s.stage;
      v.elements = s.elements;
      const bool accurate = s.max_rel_err <= oracles::kOracleAccuracy;
      v.state = accurate && s.not_enclosed == 0 ? oracles::State::pass : oracles::State::fail;
      v.rule = !accurate ? "oracle_accuracy" : s.not_enclosed ? "enclosure" : "certified";
      char reason[200];
      std::snprintf(reason, sizeof reason,
                    "double rel. error %.3e (certified %.3e), margin %s, %zu not enclosed",
                    s.max_rel_err, s.certified_rel_err, margin(s.max_rel_err).c_str(),
                    s.not_enclosed);
      v.reason = reason;
      v.ratio_max = v.ratio_p99 = v.ratio_p50 = s.max_rel_err / oracles::kOracleAccuracy;
      v.metrics.max_rel = s.max_rel_err;
      v.worst.index = s.worst;
      v.worst.ratio = v.ratio_max;
      if (v.state == oracles::State::fail && rec.verdict.first_divergent.empty())
        rec.verdict.first_divergent = v.stage;
      rec.verdict.stages.push_back(v);
    }
    for (const auto& b : c.backward) {  // bound: 1e-6 of the fp32 bound, per element
      oracles::StageVerdict v;
      v.stage = b.stage;
      v.elements = b.elements;
      const bool accurate = b.max_over_bound <= oracles::kBackwardAccuracy;
      v.state = accurate ? oracles::State::pass : oracles::State::fail;
      v.rule = accurate ? "certified" : "oracle_accuracy";
      char reason[200];
      std::snprintf(reason, sizeof reason, "double gradient off MPFR by %.3e of its fp32 bound",
                    b.max_over_bound);
      v.reason = reason;
      v.ratio_max = v.ratio_p99 = v.ratio_p50 = b.max_over_bound / oracles::kBackwardAccuracy;
      v.worst.index = b.worst;
      v.worst.ratio = v.ratio_max;
      if (!accurate && rec.verdict.first_divergent.empty()) rec.verdict.first_divergent = v.stage;
      rec.verdict.stages.push_back(v);
    }
    rec.verdict.state =
        rec.verdict.first_divergent.empty() ? oracles::State::pass : oracles::State::fail;
    entry.add_case(std::move(rec));
    session.update();
    std::printf("  case %d/%d  %s  tokens=%zu seed=%llu  mixes kappa<=%.2g fallback=%zu  %.1fs\n",
                c.index + 1, opt.cases, describe(c.cfg).c_str(), c.tokens,
                static_cast<unsigned long long>(c.seed), c.oracle.max_mixes_condition,
                c.oracle.fallback_tokens, c.seconds);
    std::fflush(stdout);
    return !session.stop();
  });

  // Per output, the worst over all cases.
  std::map<std::string, std::pair<oracles::StageCertificate, int>> worst;
  std::vector<std::string> order;
  for (const auto& c : res.cases)
    for (const auto& s : c.stages) {
      auto it = worst.find(s.stage);
      if (it == worst.end()) {
        order.push_back(s.stage);
        worst[s.stage] = {s, c.index};
        continue;
      }
      auto& [w, idx] = it->second;
      if (s.max_rel_err > w.max_rel_err) {
        w.max_rel_err = s.max_rel_err;
        w.worst = s.worst;
        idx = c.index;
      }
      w.elements += s.elements;
      w.certified_rel_err = std::max(w.certified_rel_err, s.certified_rel_err);
      w.max_interval_width = std::max(w.max_interval_width, s.max_interval_width);
      w.not_enclosed += s.not_enclosed;
    }
  std::printf("\nMPFR %u bits, MPFI %u bits. Required: double rel. error <= 2^-24/1e6 = %.2e\n",
              res.mpfr_bits, res.mpfi_bits, oracles::kOracleAccuracy);
  std::printf("%-8s %10s %14s %14s %10s %12s %10s  %s\n", "output", "elements", "rel.err(dbl)",
              "certified", "margin", "MPFI width", "enclosed", "verdict");
  for (const auto& name : order) {
    const auto& [w, idx] = worst[name];
    const bool ok = w.max_rel_err <= oracles::kOracleAccuracy && w.not_enclosed == 0;
    std::printf("%-8s %10zu %14.3e %14.3e %10s %12.2e %10s  %s\n", name.c_str(), w.elements,
                w.max_rel_err, w.certified_rel_err, margin(w.max_rel_err).c_str(),
                w.max_interval_width, w.not_enclosed == 0 ? "all" : "NO", ok ? "ok" : "FAIL");
    if (!ok)
      std::printf("  worst: case %d element %zu; not enclosed: %zu\n", idx + 1, w.worst,
                  w.not_enclosed);
  }
  std::printf(
      "\nrel.err: max |double - MPFR| / |MPFR|; certified: the same bound from the MPFI\n"
      "enclosure alone; margin: 2^-24 / rel.err (>= 1e6 required).\n"
      "Every double reduction is compensated (error <= u|s| + gamma_m^2 sum|terms|); a token\n"
      "whose mixes projection cancels so much that gamma_m^2 * kappa could exceed the\n"
      "requirement is evaluated again in 113-bit quad (fallback=, per case above).\n");
  std::printf(
      "\nBackward (one op a case, 2 tokens): the double gradient against the recorded backward in\n"
      "MPFR, in units of the fp32 bound it judges with (<= %.0e required)\n",
      oracles::kBackwardAccuracy);
  std::printf("%-36s %10s %14s  %s\n", "gradient", "elements", "err / bound", "verdict");
  for (const auto& c : res.cases)
    for (const auto& b : c.backward)
      std::printf("%-36s %10zu %14.3e  %s\n", b.stage.c_str(), b.elements, b.max_over_bound,
                  b.max_over_bound <= oracles::kBackwardAccuracy ? "ok" : "FAIL");
  const bool ok = res.accurate && res.enclosed && res.backward_accurate;
  std::printf("selfcheck: %s\n", run_outcome(ok).c_str());
  return ok ? 0 : 1;
}

}  // namespace mhc::runner
