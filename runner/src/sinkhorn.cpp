#include "mhc/runner/sinkhorn.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>

#include "logit_families.hpp"
#include "mhc/fixtures/fixture.hpp"
#include "mhc/oracles/parallel.hpp"
#include "mhc/oracles/random.hpp"
#include "mhc/oracles/sinkhorn_theory.hpp"
#include "mhc/reports/text.hpp"

namespace mhc::runner {
namespace {

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, std::size_t(q * double(v.size() - 1) + 0.5))];
}

// The combs of one site of a case, per token: the logits, the oracle's comb (double, after the
// configured rounds) and the kernel's (fp32, when the capture or the run has it).
struct Site {
  std::string name;  // "" (a piece), "attn", "L3.ffn"
  ref::Config cfg;
  std::size_t tokens = 0;
  std::vector<double> logits, comb;
  std::vector<float> kernel;
};

const oracles::Stage<float>* stage(const oracles::Trace<float>* t, const std::string& name) {
  return t ? oracles::find_stage(*t, name) : nullptr;
}

// A stage's values, none when the trace does not have it (not evaluated).
const std::vector<double>& values(const oracles::Trace<double>& t, const std::string& name) {
  static const std::vector<double> none;
  const auto* st = oracles::find_stage(t, name);
  return st ? st->values : none;
}

// The sites of a case whose op has a comb; none for the others. The mixes come from the case
// (split_sinkhorn) or from the double reference, anchored on the kernel's stages where the
// kernel's trace has them (as the oracle judges them).
std::vector<Site> comb_sites(const oracles::OpCase& c, const oracles::Trace<float>* got,
                             unsigned threads, bool oracle = true) {
  using oracles::Op;
  const ref::Config& k = c.cfg;
  const std::size_t n = std::size_t(k.n), nn = n * n, M = std::size_t(k.mix()), T = c.tokens;
  std::vector<Site> sites;
  auto add = [&](std::string name, const std::vector<double>& mixes, const float* scale,
                 const float* base, const oracles::Stage<float>* kernel) {
    Site s;
    s.name = std::move(name);
    s.cfg = k;
    s.tokens = T;
    if (oracle) {
      s.logits.resize(T * nn);
      s.comb.resize(T * nn);
      for (std::size_t t = 0; t < T; ++t) {
        ref::comb_logits(k, &mixes[t * M], scale, base, &s.logits[t * nn]);
        ref::sinkhorn(k, &s.logits[t * nn], &s.comb[t * nn]);
      }
    }
    if (kernel && kernel->values.size() == T * nn) s.kernel = kernel->values;
    sites.push_back(std::move(s));
  };
  switch (c.op) {
    case Op::split_sinkhorn: {
      const auto& m = c.input("mixes").data;
      add("", std::vector<double>(m.begin(), m.end()), c.param("hc_scale").data.data(),
          c.param("hc_base").data.data(), stage(got, "comb"));
      break;
    }
    case Op::mixes:
    case Op::boundary: {
      const auto trace =
          oracle ? oracles::evaluate_op<double>(c, threads) : oracles::Trace<double>{};
      add("", values(trace, "mixes"), c.param("hc_scale").data.data(),
          c.param("hc_base").data.data(), stage(got, "comb"));
      break;
    }
    case Op::block:
    case Op::stack: {
      const auto trace = oracle ? oracles::evaluate_block<double>(
                                      c, [](std::size_t) { return 0; }, nullptr, {}, got, threads)
                                : oracles::Trace<double>{};
      for (int l = 0; l < c.block.layers; ++l)
        for (const char* site : {"attn", "ffn"}) {
          const std::string prefix = c.op == Op::stack ? "L" + std::to_string(l) + "." : "";
          const std::string params =
              (c.op == Op::stack ? "layers/" + std::to_string(l) + "/" : "") + site + "/";
          add(prefix + site, values(trace, prefix + site + ".mixes"),
              c.param(params + "hc_scale").data.data(), c.param(params + "hc_base").data.data(),
              stage(got, prefix + site + ".comb"));
        }
      break;
    }
    default:
      break;
  }
  return sites;
}

// The composite residual mapping over the sites in order (x' = C^T x at each), per token: at
// each depth the largest over tokens of its largest absolute row sum, column sum and spectral
// norm.
template <class T>
reports::GainCurve gain_curve(const std::vector<Site>& sites, const std::vector<T> Site::*combs,
                              std::string label) {
  reports::GainCurve g;
  g.label = std::move(label);
  if (sites.empty()) return g;
  const int n = sites[0].cfg.n;
  const std::size_t tokens = sites[0].tokens, nn = std::size_t(n * n);
  g.forward.assign(sites.size(), 0);
  g.backward.assign(sites.size(), 0);
  g.spectral.assign(sites.size(), 0);
  std::vector<double> comb(nn * sites.size());
  std::vector<const double*> order(sites.size());
  for (std::size_t t = 0; t < tokens; ++t) {
    for (std::size_t s = 0; s < sites.size(); ++s) {
      const auto& v = sites[s].*combs;
      std::copy(v.begin() + std::ptrdiff_t(t * nn), v.begin() + std::ptrdiff_t((t + 1) * nn),
                comb.begin() + std::ptrdiff_t(s * nn));
      order[s] = &comb[s * nn];
    }
    const auto at = oracles::composite_gains(order, n);
    for (std::size_t s = 0; s < sites.size(); ++s) {
      g.forward[s] = std::max(g.forward[s], at[s].forward);
      g.backward[s] = std::max(g.backward[s], at[s].backward);
      g.spectral[s] = std::max(g.spectral[s], at[s].spectral);
    }
  }
  return g;
}

}  // namespace

int run_map(const MapSpec& given, Session& session) {
  MapSpec spec = given;  // rounds ascending: each case's iteration passes them in order
  std::sort(spec.rounds.begin(), spec.rounds.end());
  spec.rounds.erase(std::unique(spec.rounds.begin(), spec.rounds.end()), spec.rounds.end());
  if (spec.n > 64) throw std::invalid_argument("sinkhorn map: n must be <= 64");
  const auto& families = all_families();
  const std::size_t nf = families.size(), ns = spec.scales.size(), ne = spec.eps.size(),
                    nr = spec.rounds.size();
  const int last = *std::max_element(spec.rounds.begin(), spec.rounds.end());
  std::vector<ref::Config> cfgs(ne);
  for (std::size_t e = 0; e < ne; ++e) {
    cfgs[e].n = spec.n;
    cfgs[e].d = 1;
    cfgs[e].hc_eps = oracles::fp32_value(spec.eps[e]);
    cfgs[e].iters = last;
    if (const auto why = ref::validate(cfgs[e]); !why.empty()) throw std::invalid_argument(why);
  }
  // cells[((f * ns + s) * ne + e) * nr + r]
  std::vector<reports::MapCell> cells(nf * ns * ne * nr);
  for (std::size_t f = 0; f < nf; ++f)
    for (std::size_t s = 0; s < ns; ++s)
      for (std::size_t e = 0; e < ne; ++e)
        for (std::size_t r = 0; r < nr; ++r) {
          auto& cell = cells[((f * ns + s) * ne + e) * nr + r];
          cell.family = family_name(families[f]);
          cell.scale = spec.scales[s];
          cell.eps = cfgs[e].hc_eps;
          cell.rounds = spec.rounds[r];
        }
  std::vector<std::size_t> mine;  // the case indices this shard takes
  for (long i = 0; i < spec.cases; ++i)
    if (spec.shard.takes(std::size_t(i))) mine.push_back(std::size_t(i));
  const std::size_t work = nf * ns;  // one (family, scale) a task, its cases in order
  Progress progress("sinkhorn map", long(work));
  std::mutex mu;
  std::size_t finished = 0;
  const std::size_t nn = std::size_t(spec.n * spec.n);
  par::for_each(work, spec.threads, [&](std::size_t fs) {
    const std::size_t f = fs / ns, s = fs % ns;
    const Structure st{families[f], spec.scales[s]};
    std::vector<reports::MapCell> local(ne * nr);
    std::vector<double> L(nn);
    for (std::size_t i : mine) {
      oracles::Rng rng(spec.seed * 0x9E3779B97F4A7C15ull ^
                       ((fs * 0x100000001B3ull + i) * 0xD1B54A32D192ED03ull + 1));
      draw_logits(rng, spec.n, L, &st);
      for (std::size_t e = 0; e < ne; ++e) {
        oracles::SinkhornRounds it(cfgs[e], L.data());
        for (std::size_t r = 0; r < nr; ++r) {
          while (it.done < spec.rounds[r]) it.next();
          const double d = oracles::line_distance(it.C.data(), spec.n, 1 - cfgs[e].hc_eps);
          auto& cell = local[e * nr + r];
          ++cell.cases;
          cell.above_1e3 += d > 1e-3;
          cell.above_1e6 += d > 1e-6;
          cell.max_residual = std::max(cell.max_residual, d);
        }
      }
    }
    const std::lock_guard<std::mutex> lock(mu);
    for (std::size_t k = 0; k < ne * nr; ++k) {
      auto& cell = cells[fs * ne * nr + k];
      cell.cases += local[k].cases;
      cell.above_1e3 += local[k].above_1e3;
      cell.above_1e6 += local[k].above_1e6;
      cell.max_residual = std::max(cell.max_residual, local[k].max_residual);
    }
    progress.step(long(++finished));
  });
  progress.done();
  reports::Entry& entry = session.report.entry("sinkhorn map n=" + std::to_string(spec.n));
  entry.kind = "sinkhorn";
  entry.op = "split_sinkhorn";
  entry.settings = {{"n", std::to_string(spec.n)},
                    {"cases", std::to_string(spec.cases)},
                    {"seed", std::to_string(spec.seed)}};
  entry.map = cells;
  entry.facts = {{"cases_per_cell", std::to_string(mine.size())}};
  std::printf(
      "sinkhorn map: n=%d, %zu cases per family and scale (%s), the distance from the limit "
      "max |line sum - (1 - hc_eps)| after K rounds (from doubly stochastic: up to hc_eps more); "
      "each cell: %% above 1e-3 / %% above 1e-6\n",
      spec.n, mine.size(), spec.shard.count > 1 ? spec.shard.text().c_str() : "whole campaign");
  for (std::size_t e = 0; e < ne; ++e) {
    std::printf("\nhc_eps = %.9g\n%-18s %7s", cfgs[e].hc_eps, "family", "scale");
    for (int r : spec.rounds) std::printf(" %13s", ("K=" + std::to_string(r)).c_str());
    std::printf("\n");
    for (std::size_t f = 0; f < nf; ++f)
      for (std::size_t s = 0; s < ns; ++s) {
        std::printf("%-18s %7g", family_name(families[f]).c_str(), spec.scales[s]);
        for (std::size_t r = 0; r < nr; ++r) {
          const auto& cell = cells[((f * ns + s) * ne + e) * nr + r];
          const double k = cell.cases ? 100.0 / double(cell.cases) : 0;
          std::printf("  %5.1f / %5.1f", double(cell.above_1e3) * k, double(cell.above_1e6) * k);
        }
        std::printf("\n");
      }
  }
  return 0;
}

int run_captured(const CapturedSpec& spec, Session& session) {
  long mine = 0;
  for (std::size_t i = 0; i < spec.files.size(); ++i) mine += spec.shard.takes(i);
  Progress progress("sinkhorn captured", mine);
  long done = 0;
  int rc = 0;
  std::printf("%-44s %7s %10s %10s %10s %8s %8s %9s %9s %8s\n", "site", "tokens", "median", "p99",
              "max", "rounds3", "rounds6", "beyond", "near-perm", "kernel");
  for (std::size_t i = 0; i < spec.files.size(); ++i) {
    if (!spec.shard.takes(i) || session.stop()) continue;
    const std::string& file = spec.files[i];
    long sites_seen = 0;
    try {
      fixtures::read_fixtures(
          file,
          [&](fixtures::Fixture&& fx) {
            for (const Site& s : comb_sites(fx.c, &fx.outputs, spec.threads)) {
              ++sites_seen;
              const int n = s.cfg.n;
              const std::size_t nn = std::size_t(n * n);
              const std::string where = file + (fx.name.empty() ? "" : "[" + fx.name + "]") +
                                        (s.name.empty() ? "" : " " + s.name);
              // A NaN compares false and would read as converged: no Sinkhorn to measure.
              for (std::size_t q = 0; q < s.logits.size(); ++q)
                if (!std::isfinite(s.logits[q]))
                  throw fixtures::FixtureError(
                      where + ": token " + std::to_string(q / nn) +
                      ": the comb's logits are not finite (NaN or infinite mixes, params or "
                      "streams): no Sinkhorn to measure");
              const double eps = ref::hc_eps(s.cfg);
              std::vector<double> dist(s.tokens), need3(s.tokens), need6(s.tokens);
              long near = 0, beyond = 0, no_limit = 0;
              double kernel_worst = 0;
              for (std::size_t t = 0; t < s.tokens; ++t) {
                const double* C = &s.comb[t * nn];
                dist[t] = oracles::line_distance(C, n, 1);
                // Near a permutation: every row has an entry >= 0.99, in distinct columns.
                std::vector<bool> used(std::size_t(n), false);
                bool perm = true;
                for (int j = 0; j < n && perm; ++j) {
                  const int k = int(std::max_element(C + j * n, C + j * n + n) - (C + j * n));
                  perm = C[j * n + k] >= 0.99 && !used[std::size_t(k)];
                  used[std::size_t(k)] = true;
                }
                near += perm;
                if (!s.kernel.empty())
                  kernel_worst =
                      std::max(kernel_worst, oracles::line_distance(&s.kernel[t * nn], n, 1));
                // Rounds to within tol of the limit (line sums 1 - eps): counted, then predicted.
                oracles::SinkhornRounds it(s.cfg, &s.logits[t * nn]);
                double need[2] = {-1, -1};
                const double tols[2] = {1e-3, 1e-6};
                for (;;) {
                  const double d = oracles::line_distance(it.C.data(), n, 1 - eps);
                  for (int k = 0; k < 2; ++k)
                    if (need[k] < 0 && d <= tols[k]) need[k] = it.done;
                  if (need[1] >= 0) break;
                  if (it.done >= spec.max_rounds) {
                    const auto th = oracles::sinkhorn_theory(
                        oracles::sinkhorn_start(s.cfg, &s.logits[t * nn]), n, eps);
                    ++beyond;
                    if (!th.ok) ++no_limit;
                    for (int k = 0; k < 2; ++k)
                      if (need[k] < 0)
                        need[k] = th.ok
                                      ? double(oracles::rounds_needed(d, it.done, tols[k], th.rate))
                                      : HUGE_VAL;
                    break;
                  }
                  it.next();
                }
                need3[t] = need[0] < 0 ? HUGE_VAL : need[0];
                need6[t] = need[1] < 0 ? HUGE_VAL : need[1];
              }
              reports::Entry& entry = session.report.entry("sinkhorn captured " + where);
              entry.kind = "sinkhorn";
              entry.op = oracles::op_name(fx.c.op);
              entry.settings = {{"n", std::to_string(n)},
                                {"iters", std::to_string(s.cfg.iters)},
                                {"hc_eps", reports::fmt_g(eps, 9)},
                                {"tokens", std::to_string(s.tokens)}};
              const double T = double(s.tokens);
              entry.facts = {
                  {"distance_median", reports::fmt_g(quantile(dist, 0.5), 9)},
                  {"distance_p90", reports::fmt_g(quantile(dist, 0.9), 9)},
                  {"distance_p99", reports::fmt_g(quantile(dist, 0.99), 9)},
                  {"distance_max", reports::fmt_g(quantile(dist, 1), 9)},
                  {"above_1e3", std::to_string(std::count_if(dist.begin(), dist.end(),
                                                             [](double d) { return d > 1e-3; }))},
                  {"above_1e6", std::to_string(std::count_if(dist.begin(), dist.end(),
                                                             [](double d) { return d > 1e-6; }))},
                  {"rounds_1e3_median", reports::fmt_g(quantile(need3, 0.5), 9)},
                  {"rounds_1e3_max", reports::fmt_g(quantile(need3, 1), 9)},
                  {"rounds_1e6_median", reports::fmt_g(quantile(need6, 0.5), 9)},
                  {"rounds_1e6_p99", reports::fmt_g(quantile(need6, 0.99), 9)},
                  {"rounds_1e6_max", reports::fmt_g(quantile(need6, 1), 9)},
                  {"rounds_predicted_tokens", std::to_string(beyond)},
                  {"near_permutation_share", reports::fmt_g(double(near) / T, 9)}};
              if (no_limit)
                entry.facts.push_back({"tokens_without_limit", std::to_string(no_limit)});
              if (!s.kernel.empty())
                entry.facts.push_back({"kernel_distance_max", reports::fmt_g(kernel_worst, 9)});
              std::printf("%-44s %7zu %10.3g %10.3g %10.3g %8.0f %8.0f %9ld %8.1f%% %8s\n",
                          reports::clean_text(where).c_str(), s.tokens, quantile(dist, 0.5),
                          quantile(dist, 0.99), quantile(dist, 1), quantile(need3, 1),
                          quantile(need6, 1), beyond, 100.0 * double(near) / T,
                          s.kernel.empty() ? "-" : reports::fmt_g(kernel_worst, 9).c_str());
              session.update();
            }
          },
          spec.read_timeout);
      if (sites_seen == 0) {
        std::fprintf(stderr,
                     "mhc-verify: error: %s: no case of an op with a comb (split_sinkhorn, mixes, "
                     "boundary, block, stack)\n",
                     file.c_str());
        rc = 2;
      }
    } catch (const fixtures::FixtureError& e) {
      std::fprintf(stderr, "mhc-verify: error: %s\n", e.what());
      rc = 2;
    }
    progress.step(++done);
  }
  progress.done();
  std::printf(
      "distance: max |line sum - 1| of the comb after the configured rounds (double, from the "
      "captured mixes); rounds3/rounds6: the most rounds a token needs to come within 1e-3 / "
      "1e-6 of its limit (line sums 1 - eps), counted to %d rounds and predicted by the theory "
      "beyond (beyond: such tokens); near-perm: tokens whose comb has an entry >= 0.99 in every "
      "row, in distinct columns; kernel: the captured comb's own max |line sum - 1|\n",
      spec.max_rounds);
  return rc;
}

int run_gain(const GainSpec& spec, Session& session) {
  // One stack: the oracle's curve from `sites`, then one per set of kernel combs.
  auto one = [&](const std::string& id, const oracles::OpCase& c, const std::vector<Site>& sites,
                 const std::vector<std::pair<std::string, std::vector<Site>>>& kernels) {
    reports::Entry& entry = session.report.entry("sinkhorn gain " + id);
    entry.kind = "sinkhorn";
    entry.op = oracles::op_name(c.op);
    entry.settings = {{"n", std::to_string(c.cfg.n)},
                      {"iters", std::to_string(c.cfg.iters)},
                      {"hc_eps", reports::fmt_g(ref::hc_eps(c.cfg), 9)},
                      {"layers", std::to_string(c.block.layers)},
                      {"tokens", std::to_string(c.tokens)}};
    entry.gains.push_back(gain_curve(sites, &Site::comb, "oracle"));
    for (const auto& [name, ks] : kernels)  // combs at every site, or no curve
      if (!ks.empty() &&
          std::all_of(ks.begin(), ks.end(), [](const Site& s) { return !s.kernel.empty(); }))
        entry.gains.push_back(gain_curve(ks, &Site::kernel, name));
    for (const auto& g : entry.gains) {
      char b[160];
      std::snprintf(b, sizeof b, "forward %.9g, backward %.9g, spectral %.9g", g.forward.back(),
                    g.backward.back(), g.spectral.back());
      entry.facts.push_back({g.label + " at depth " + std::to_string(sites.size()), b});
    }
    std::printf("%s: %zu sites, %zu tokens; the gain of the product of the combs at each depth\n",
                reports::clean_text(id).c_str(), sites.size(), c.tokens);
    std::printf("%6s", "depth");
    for (const auto& g : entry.gains)
      std::printf(" %16s %12s %12s", (g.label + " fwd").c_str(), "bwd", "spectral");
    std::printf("\n");
    for (std::size_t s = 1;; s = std::min(2 * s, sites.size())) {
      std::printf("%6zu", s);
      for (const auto& g : entry.gains)
        std::printf(" %16.9f %12.9f %12.9f", g.forward[s - 1], g.backward[s - 1],
                    g.spectral[s - 1]);
      std::printf("\n");
      if (s == sites.size()) break;
    }
    session.update();
  };
  if (spec.files.empty()) {
    auto c = oracles::generate_block_case(oracles::Op::stack, spec.cfg, spec.block, spec.batch,
                                          spec.positions, spec.seed, oracles::Precision::fp32());
    for (int l = 0; l < spec.block.layers; ++l)
      for (const char* site : {"attn", "ffn"})
        c.params["layers/" + std::to_string(l) + "/" + site + "/hc_scale"].data[2] *=
            float(spec.comb_scale);
    // The oracle's combs from its own forward, each kernel's from its own.
    std::vector<std::pair<std::string, std::vector<Site>>> kernels;
    for (const auto& k : spec.kernels) {
      const Ran r = run(*impl::find_backend(k), c, spec.judging);
      if (r.ran())
        kernels.emplace_back("kernel " + k, comb_sites(c, &r.got, spec.judging.threads, false));
      else
        std::printf("SKIPPED: %s: %s\n", reports::clean_text(k).c_str(),
                    reports::clean_text(r.verdict.stages.at(0).reason).c_str());
    }
    one("generated stack seed " + std::to_string(spec.seed) + " comb scale " +
            reports::fmt_g(spec.comb_scale, 9),
        c, comb_sites(c, nullptr, spec.judging.threads), kernels);
    return 0;
  }
  int rc = 0;
  for (const auto& file : spec.files) {
    long stacks = 0;
    try {
      fixtures::read_fixtures(
          file,
          [&](fixtures::Fixture&& fx) {
            if (fx.c.op != oracles::Op::stack && fx.c.op != oracles::Op::block) return;
            // The oracle from the captured streams of each layer; the captured combs, if any.
            const auto sites = comb_sites(fx.c, &fx.outputs, spec.judging.threads);
            one(file + (fx.name.empty() ? "" : "[" + fx.name + "]"), fx.c, sites,
                {{"captured", sites}});
            ++stacks;
          },
          spec.read_timeout);
      if (stacks == 0) {
        std::fprintf(stderr,
                     "mhc-verify: error: %s: no block or stack case (the gain is over a stack's "
                     "layers)\n",
                     file.c_str());
        rc = 2;
      }
    } catch (const fixtures::FixtureError& e) {
      std::fprintf(stderr, "mhc-verify: error: %s\n", e.what());
      rc = 2;
    }
  }
  return rc;
}

}  // namespace mhc::runner
