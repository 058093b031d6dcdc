#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "mhc/impl/plugin.hpp"
#include "mhc/runner/fuzz.hpp"

#include "mhc/fixtures/fixture.hpp"
#include "mhc/oracles/birkhoff.hpp"
#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/lanes.hpp"
#include "mhc/oracles/parallel.hpp"
#include "mhc/oracles/random.hpp"
#include "mhc/oracles/reverse.hpp"
#include "mhc/oracles/sinkhorn_theory.hpp"
#include "mhc/oracles/verdict.hpp"
#include "mhc/reports/curves.hpp"
#include "mhc/reports/text.hpp"
#include "mhc/runner/judge.hpp"
#include "mhc/runner/repro.hpp"

#include "logit_families.hpp"

namespace mhc::runner {
namespace {

struct Finding {
  std::uint64_t index = 0;     // the case that found it (before local search)
  std::vector<double> logits;  // [n*n]
  double row = 0, col = 0;     // max |row sum - 1|, max |column sum - 1| after K rounds
};

struct Eval {
  double row = 0, col = 0;
};

Eval residuals(const ref::Config& c, const std::vector<double>& L, std::vector<double>& C) {
  ref::sinkhorn(c, L.data(), C.data());
  Eval e;
  const int n = c.n;
  for (int j = 0; j < n; ++j) {
    double r = 0, s = 0;
    for (int k = 0; k < n; ++k) {
      r += C[std::size_t(j * n + k)];
      s += C[std::size_t(k * n + j)];
    }
    e.row = std::max(e.row, std::fabs(r - 1));
    e.col = std::max(e.col, std::fabs(s - 1));
  }
  return e;
}

// How large the Sinkhorn's backward gets at these logits, as max_j sum_i |d C_i / d X_j| (the most
// a comb gradient with entries in [-1, 1] gives one element of X): X the logits (through the
// softmax), and X the softmax's output (the normalisations alone, where rounds that have not
// converged amplify). The reverse-mode Scalar through the reference, one sweep per comb entry.
struct Gains {
  double logits = 0, normalisations = 0;
};
Gains backward_gains(const ref::Config& c, const std::vector<double>& L) {
  const std::size_t nn = L.size();
  std::vector<double> P(nn);
  ref::SinkhornTrace<double> tr;
  ref::sinkhorn(c, L.data(), P.data(), &tr);
  P = tr.steps.front().matrix;  // the softmax's output, eps added
  auto gain = [&](const std::vector<double>& at, bool softmax) {
    std::vector<double> g_max(nn, 0);
    for (std::size_t i = 0; i < nn; ++i) {
      std::vector<double> up(nn, 0);
      up[i] = 1;
      const auto g = rev::vjp<double>(
          [&](auto& x) {
            using V = std::decay_t<decltype(x[0][0])>;
            std::vector<std::vector<V>> out(1, std::vector<V>(nn));
            if (softmax) {
              ref::sinkhorn(c, x[0].data(), out[0].data());
            } else {
              std::vector<V> col(std::size_t(c.n));
              out[0] = x[0];
              ref::detail::divide_columns(c, out[0].data(), col.data());
              for (int it = 1; it < c.iters; ++it) {
                ref::detail::divide_rows(c, out[0].data());
                ref::detail::divide_columns(c, out[0].data(), col.data());
              }
            }
            return out;
          },
          std::vector<std::vector<double>>{at}, std::vector<std::vector<double>>{up});
      for (std::size_t j = 0; j < nn; ++j) g_max[j] += std::fabs(g[0][j]);
    }
    return *std::max_element(g_max.begin(), g_max.end());
  };
  return {gain(L, true), gain(P, false)};
}

// The theory's rate against the observed one, on the cases the kernels are checked on (in double,
// observed over at most 500 rounds: what settles by then is compared).
struct Checked {
  oracles::SinkhornTheory th;
  oracles::RateObservation ob;
};
Checked check_theory(const ref::Config& c, const std::vector<double>& L) {
  Checked k;
  const auto A = oracles::sinkhorn_start(c, L.data());
  k.th = oracles::sinkhorn_theory(A, c.n, c.hc_eps);
  k.ob = oracles::observe_rate(A, c.n, c.hc_eps, k.th, 500);
  return k;
}
struct TheoryTally {
  long checked = 0, settled = 0, unexcited = 0, disagreements = 0, failed = 0;
  double largest = 0;  // max |observed - its eigenvalue| / (1 - that eigenvalue), settled cases
  void add(const Checked& k, std::uint64_t i, Progress& progress) {
    ++checked;
    if (!k.th.ok) {
      ++failed;
      return;
    }
    if (k.ob.settled && k.ob.mode >= 0) {
      ++settled;
      const double lambda = k.th.modes[std::size_t(k.ob.mode)];
      largest = std::max(largest, std::fabs(k.ob.ratio - lambda) / (1 - lambda));
    }
    unexcited += k.ob.settled && k.ob.mode > 0;
    if (!k.ob.disagrees()) return;
    if (disagreements++ < 10) {
      progress.done();
      std::printf(
          "THEORY: case %llu: observed rate %.9g at round %d, no eigenvalue of the "
          "round's Jacobian within %.3g of it (the slowest: %.9g)\n",
          static_cast<unsigned long long>(i), k.ob.ratio, k.ob.round, k.ob.error, k.th.rate);
    }
  }
};

// The theory of the reported cases, in double and certified in MPFR: rates, the distance from the
// limit after K rounds against its prediction from round K/2, and the rounds needed for 1e-3 and
// 1e-6, predicted from round K and counted by iterating (up to 10^6 rounds).
template <class F>
void report_theory(const ref::Config& c, const std::vector<F>& cases, reports::Entry& entry) {
  if (cases.empty() || c.n < 2) return;
  std::printf(
      "\ntheory of those cases (docs/semantics.md, \"Sinkhorn convergence\"): Knight's rate "
      "sigma_2(P)^2, the rate with eps, the observed one; dist: max |line sum - (1 - eps)|\n"
      "%4s %12s %12s %22s %6s %10s %10s %17s %17s\n",
      "case", "knight", "rate", "observed", "mpfr", "dist K", "pred K", "rounds 1e-3",
      "rounds 1e-6");
  const double eps = c.hc_eps;
  const double tols[2] = {1e-3, 1e-6};
  for (std::size_t w = 0; w < cases.size(); ++w) {
    const auto A = oracles::sinkhorn_start(c, cases[w].logits.data());
    const auto th = oracles::sinkhorn_theory(A, c.n, eps);
    const auto mp = oracles::sinkhorn_theory(A, c.n, eps, true);
    if (!th.ok || !mp.ok) {
      std::printf("%4llu  no theory: %s\n", static_cast<unsigned long long>(cases[w].index),
                  (th.ok ? mp : th).why.c_str());
      continue;
    }
    const bool certified = std::fabs(th.rate - mp.rate) <= 1e-3 * (1 - mp.rate);
    const auto ob = oracles::observe_rate(A, c.n, eps, mp);
    // The distance from the limit after each round, iterated on to 10^6 rounds.
    oracles::SinkhornRounds it(c, A);
    double at_half = 0, at_k = 0;
    long counted[2] = {-1, -1};
    for (; it.done <= 1000000; it.next()) {
      const double d = oracles::line_distance(it.C.data(), c.n, 1 - eps);
      if (it.done == c.iters / 2) at_half = d;
      if (it.done == c.iters) at_k = d;
      for (int t = 0; t < 2; ++t)
        if (counted[t] < 0 && d <= tols[t]) counted[t] = it.done;
      if (it.done >= c.iters && counted[1] >= 0) break;
    }
    const int half = std::max(1, c.iters / 2);
    if (c.iters / 2 < 1) at_half = at_k;
    const double predicted = at_half * std::pow(mp.rate, c.iters - half);
    char obs[48], rounds[2][40];
    std::snprintf(obs, sizeof obs, "%.9f+-%.1g%s", ob.ratio, ob.error,
                  ob.disagrees() ? "!"
                  : !ob.settled  ? "?"
                  : ob.mode > 0  ? "*"
                                 : "");
    for (int t = 0; t < 2; ++t) {
      const long p = oracles::rounds_needed(at_k, c.iters, tols[t], mp.rate);
      std::snprintf(rounds[t], sizeof rounds[t], "%ld/%s", p,
                    counted[t] < 0 ? ">1e6" : std::to_string(counted[t]).c_str());
    }
    std::printf("%4llu %12.9f %12.9f %22s %6s %10.4g %10.4g %17s %17s\n",
                static_cast<unsigned long long>(cases[w].index), mp.knight, mp.rate, obs,
                certified ? "yes" : "NO", at_k, predicted, rounds[0], rounds[1]);
    char b[768];
    std::snprintf(b, sizeof b,
                  "case %llu: knight %.17g, rate %.17g (double %.17g, certified %s), observed "
                  "%.17g +- %.3g at round %d%s, distance after %d rounds %.6g (predicted from "
                  "round %d: %.6g), rounds for 1e-3 %s, for 1e-6 %s (predicted/counted)",
                  static_cast<unsigned long long>(cases[w].index), mp.knight, mp.rate, th.rate,
                  certified ? "yes" : "no", ob.ratio, ob.error, ob.round,
                  ob.disagrees() ? " DISAGREES"
                  : ob.mode > 0  ? " (a faster mode: the start's symmetry keeps the slowest out)"
                                 : "",
                  c.iters, at_k, half, predicted, rounds[0], rounds[1]);
    entry.facts.push_back({"theory_" + std::to_string(w + 1), b});
  }
  std::printf(
      "observed: the ratio of successive distances, +- the theory's own error at that round (*: "
      "it is a faster mode's, the start's symmetry keeping the slowest out; !: no mode's; ?: not "
      "settled); "
      "mpfr: the double theory within 1e-3 of the gap 1 - rate of MPFR's; pred K: the distance "
      "after K rounds predicted from round K/2; rounds: predicted from round K / counted\n");
}

// Keep the simplest logits that still give >= 90% of the residual: whole numbers, then zeros.
void shrink(const ref::Config& c, Finding& f) {
  std::vector<double> C(f.logits.size());
  const double target = 0.9 * f.row;
  for (auto round_to : {1.0, 0.1}) {
    auto L = f.logits;
    for (auto& v : L) v = std::round(v / round_to) * round_to;
    const Eval e = residuals(c, L, C);
    if (e.row >= target) {
      f.logits = L;
      f.row = e.row;
      f.col = e.col;
      break;
    }
  }
  for (std::size_t i = 0; i < f.logits.size(); ++i) {
    auto L = f.logits;
    L[i] = 0;
    const Eval e = residuals(c, L, C);
    if (e.row >= target) {
      f.logits = L;
      f.row = e.row;
      f.col = e.col;
    }
  }
}

oracles::OpCase split_case(const ref::Config& c, const std::vector<double>& L, std::uint64_t seed) {
  auto oc =
      oracles::generate_case(oracles::Op::split_sinkhorn, c, 1, seed, oracles::Precision::fp32());
  auto& mix = oc.inputs["mixes"].data;
  std::fill(mix.begin(), mix.end(), 0.0f);
  for (std::size_t i = 0; i < L.size(); ++i) mix[std::size_t(2 * c.n) + i] = float(L[i]);
  oc.params["hc_scale"].data = {1.0f, 1.0f, 1.0f};
  std::fill(oc.params["hc_base"].data.begin(), oc.params["hc_base"].data.end(), 0.0f);
  oc.origin = oracles::OpCase::Origin::derived;  // rebuilt from its fixture once saved
  return oc;
}

}  // namespace

int run_fuzz(const FuzzSpec& spec, Session& session) {
  const FuzzSpec* st = &spec;
  const int shards = spec.shard.count, shard = spec.shard.index;
  if (shards < 1 || shard < 0 || shard >= shards)
    throw std::invalid_argument("shard index out of range");
  ref::Config c;
  c.n = st->n;
  c.d = 1;
  c.iters = st->iters;
  c.hc_eps = oracles::fp32_value(st->eps);  // the kernels use the fp32 value
  if (const auto why = ref::validate(c); !why.empty()) throw std::invalid_argument(why);
  const std::size_t nn = std::size_t(c.n) * std::size_t(c.n);
  std::vector<double> L(nn), C(nn);
  std::vector<Finding> worst_row, worst_col;
  auto keep_worst = [&](std::vector<Finding>& list, const Finding& f, bool by_row) {
    list.push_back(f);
    std::sort(list.begin(), list.end(), [&](const Finding& a, const Finding& b) {
      return by_row ? a.row > b.row : a.col > b.col;
    });
    if (list.size() > std::size_t(st->keep)) list.pop_back();
  };
  Judging judging;
  judging.threads = 1;
  judging.isolate =  // as in the gate: with a plug-in, ours too
      st->isolate || std::any_of(st->kernels.begin(), st->kernels.end(), impl::is_plugin);
  judging.kernel_seconds = st->kernel_seconds;
  judging.limits = st->limits;
  std::vector<long> skipped(st->kernels.size(), 0);
  reports::Entry& entry = session.report.entry("fuzz sinkhorn shard " + std::to_string(shard) +
                                               " of " + std::to_string(shards));
  entry.kind = "fuzz";
  entry.op = "split_sinkhorn";
  entry.precision = "fp32";
  entry.error_model = "standard";
  char eps_text[32];
  std::snprintf(eps_text, sizeof eps_text, "%.9g", c.hc_eps);
  entry.settings = {{"n", std::to_string(c.n)},
                    {"iters", std::to_string(c.iters)},
                    {"hc_eps", eps_text},
                    {"seed", std::to_string(st->seed)},
                    {"shard", std::to_string(shard)},
                    {"shards", std::to_string(shards)}};
  Progress progress("fuzz sinkhorn", st->seconds > 0 ? 0 : long(st->cases), st->seconds);
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::uint64_t tried = 0, kernel_cases = 0;
  TheoryTally tally;
  int disagreements = 0;
  double last_report = 0;
  // kW cases at a time through the reference in lanes::Lanes (one case a lane), a group of kW
  // per thread evaluated at once; the groups are then taken in order, exactly as one thread
  // takes them, so the results do not depend on the thread count.
  constexpr int kW = 8;
  struct Group {
    std::uint64_t idx[kW] = {};
    int used = 0;
    std::vector<std::vector<double>> Ls;
    std::vector<lanes::Lanes<kW>> L4, C4;
    std::vector<Outcome> judged[kW];  // per kernel, on the lanes whose case the kernels run
    Checked theory[kW];               // on the same lanes
  };
  const unsigned threads =
      st->threads ? st->threads : std::max(1u, std::thread::hardware_concurrency());
  // Enough groups a batch that starting the threads costs little (a group is ~10 us of work).
  std::vector<Group> groups(threads > 1 ? 64 * std::size_t(threads) : 1);
  for (auto& g : groups) {
    g.Ls.assign(kW, std::vector<double>(nn));
    g.L4.resize(nn);
    g.C4.resize(nn);
  }
  // Kernels in worker processes are judged as the cases are taken, one at a time (no fork from
  // several threads); ours are judged with the group, in parallel.
  const bool judge_ahead = !judging.isolate && threads > 1;
  std::uint64_t next = std::uint64_t(shard);
  oracles::Rng search(st->seed ^ 0x5DEECE66Dull ^ std::uint64_t(shard));
  while ((st->seconds > 0 ? elapsed() < st->seconds : tried < st->cases) && !session.stop()) {
    std::size_t planned = 0;
    for (std::uint64_t ahead = tried; planned < groups.size(); ++planned) {
      Group& g = groups[planned];
      g.used = st->seconds > 0
                   ? kW
                   : int(std::min<std::uint64_t>(kW, st->cases - std::min(st->cases, ahead)));
      if (g.used == 0) break;
      ahead += std::uint64_t(g.used);
      for (int l = 0; l < kW; ++l) {
        g.idx[l] = next;
        if (l < g.used) next += std::uint64_t(shards);
      }
    }
    par::for_each(planned, threads, [&](std::size_t at) {
      Group& g = groups[at];
      for (int l = 0; l < kW; ++l) {
        oracles::Rng rng(st->seed * 0x9E3779B97F4A7C15ull ^ (g.idx[l] * 0xD1B54A32D192ED03ull + 1));
        draw_logits(rng, c.n, g.Ls[std::size_t(l)]);
        for (std::size_t e = 0; e < nn; ++e) g.L4[e].set(l, g.Ls[std::size_t(l)][e]);
      }
      ref::sinkhorn(c, g.L4.data(), g.C4.data());
      for (int l = 0; l < g.used; ++l) {
        g.judged[l].clear();
        if (g.idx[l] % std::uint64_t(st->kernel_every) != 0) continue;
        g.theory[l] = check_theory(c, g.Ls[std::size_t(l)]);
        if (!judge_ahead) continue;
        const auto oc = split_case(c, g.Ls[std::size_t(l)], st->seed + g.idx[l]);
        for (const auto& k : st->kernels)
          g.judged[l].push_back(judge(*impl::find_backend(k), oc, judging));
      }
    });
    for (std::size_t at = 0; at < planned && !session.stop(); ++at) {
      const Group& g = groups[at];
      const int lanes_used = g.used;
      const auto& idx = g.idx;
      const auto& Ls = g.Ls;
      const auto& C4 = g.C4;
      for (int l = 0; l < lanes_used; ++l) {
        const std::uint64_t i = idx[l];
        Eval e;
        for (int j = 0; j < c.n; ++j) {
          double r = 0, cs = 0;
          for (int k = 0; k < c.n; ++k) {
            r += C4[std::size_t(j * c.n + k)][l];
            cs += C4[std::size_t(k * c.n + j)][l];
          }
          e.row = std::max(e.row, std::fabs(r - 1));
          e.col = std::max(e.col, std::fabs(cs - 1));
        }
        ++tried;
        const auto& lane_logits = Ls[std::size_t(l)];
        if (worst_row.size() < std::size_t(st->keep) || e.row > worst_row.back().row)
          keep_worst(worst_row, Finding{i, lane_logits, e.row, e.col}, true);
        if (worst_col.size() < std::size_t(st->keep) || e.col > worst_col.back().col)
          keep_worst(worst_col, Finding{i, lane_logits, e.row, e.col}, false);
        if (i % std::uint64_t(st->kernel_every) == 0) {  // the same cases however it is sharded
          ++kernel_cases;
          tally.add(g.theory[l], i, progress);
          const auto oc = split_case(c, lane_logits, st->seed + i);
          for (std::size_t k = 0; k < st->kernels.size(); ++k) {
            const impl::Backend* b = impl::find_backend(st->kernels[k]);
            const Outcome o = g.judged[l].empty() ? judge(*b, oc, judging) : g.judged[l][k];
            if (o.verdict.state == oracles::State::skipped) {
              if (skipped[k]++ == 0) {
                progress.done();
                std::printf("SKIPPED: %s\n",
                            reports::clean_text(o.verdict.stages.at(0).reason).c_str());
              }
              continue;
            }
            if (o.verdict.state != oracles::State::fail) continue;
            ++disagreements;
            progress.done();
            reports::CaseRecord rec = record(o, std::size_t(i), st->seed, "");
            rec.label = b->name + " on case " + std::to_string(i);
            if (o.got.empty()) {  // the kernel threw or returned an error: nothing to save
              std::printf("FAIL: %s on case %llu: %s\n", reports::clean_text(b->name).c_str(),
                          static_cast<unsigned long long>(i),
                          reports::clean_text(o.verdict.stages.at(0).reason).c_str());
            } else {
              if (!st->save.empty()) {
                rec.saved = save_case(
                    st->save, "fuzz_sinkhorn_" + b->name + "_case" + std::to_string(i), oc, o.got,
                    "mhc-verify fuzz sinkhorn --seed " + std::to_string(st->seed) + ", case " +
                        std::to_string(i));
                auto saved = oc;
                saved.origin = oracles::OpCase::Origin::file;
                saved.file = rec.saved;
                if (!rec.saved.empty())
                  rec.repro = rerun_here(repro(saved, b->name, judging.model), st->shard);
              }
              std::printf("COUNTEREXAMPLE: %s disagrees with the oracle on case %llu (%s)%s%s\n",
                          b->name.c_str(), static_cast<unsigned long long>(i),
                          o.verdict.first_divergent.c_str(), rec.saved.empty() ? "" : ": saved ",
                          rec.saved.c_str());
              if (!o.diagnosis.empty()) std::printf("DIAGNOSIS: %s\n", o.diagnosis.c_str());
              if (!rec.repro.empty()) std::printf("REPRO: %s\n", rec.repro.c_str());
            }
            entry.add_case(std::move(rec));
            session.update();
          }
        }
      }
      // Local search around the worst row residual every 4096 cases (in double).
      if (tried % 4096 < std::uint64_t(kW) && !worst_row.empty()) {
        Finding best = worst_row.front();
        for (int t = 0; t < 64; ++t) {
          auto P = best.logits;
          const double step = search.log_uniform(1e-3, 1.0);
          for (auto& v : P) v += step * (std::fabs(v) + 1) * search.normal();
          const Eval pe = residuals(c, P, C);
          if (pe.row > best.row) best = Finding{best.index, P, pe.row, pe.col};
        }
        if (best.row > worst_row.front().row) worst_row.front() = best;
      }
      // The report so far, every 2 s at most: a crash or a kill leaves the work done.
      if (tried % 4096 < std::uint64_t(kW) && elapsed() - last_report >= 2) {
        last_report = elapsed();
        entry.facts = {{"cases", std::to_string(tried)},
                       {"kernel_cases", std::to_string(kernel_cases)},
                       {"counterexamples", std::to_string(disagreements)}};
        session.update();
      }
      if (tried % 4096 < std::uint64_t(kW)) {  // Progress throttles by time
        char status[96];
        std::snprintf(status, sizeof status, "%.0f/s, worst row residual %.3g",
                      double(tried) / elapsed(), worst_row.empty() ? 0.0 : worst_row.front().row);
        progress.step(long(tried), status);
      }
    }
  }
  const double secs = elapsed();
  progress.done();
  // Reported residuals come from the double oracle (the lanes' sums are plain).
  for (auto& f : worst_row) {
    const Eval e = residuals(c, f.logits, C);
    f.row = e.row;
    f.col = e.col;
    shrink(c, f);
  }
  std::sort(worst_row.begin(), worst_row.end(),
            [](const Finding& a, const Finding& b) { return a.row > b.row; });

  std::printf(
      "fuzz sinkhorn: n=%d iters=%d eps=%g seed %llu, shard %d of %d: %llu cases in %.2f s "
      "(%.0f cases/s, %u threads, eight cases per evaluation), fp32 kernels checked on %llu\n",
      c.n, c.iters, c.hc_eps, static_cast<unsigned long long>(st->seed), shard, shards,
      static_cast<unsigned long long>(tried), secs, double(tried) / secs, threads,
      static_cast<unsigned long long>(kernel_cases));
  auto kappa_of = [&](const std::vector<double>& logits) {
    ref::SinkhornTrace<double> tr;
    ref::sinkhorn(c, logits.data(), C.data(), &tr);
    return std::make_pair(oracles::birkhoff_kappa(tr.steps[0].matrix, c.n), tr);
  };
  // No rate among the facts: the report of a run is the same bytes every time (meta.wall_s times
  // it).
  entry.facts = {{"cases", std::to_string(tried)},
                 {"kernel_cases", std::to_string(kernel_cases)},
                 {"counterexamples", std::to_string(disagreements)}};
  std::printf("\nworst row residuals max_j |sum_k C[j,k] - 1| after %d rounds (shrunk):\n",
              c.iters);
  std::printf("%4s %12s %12s %10s %10s %10s  %s\n", "case", "row", "column", "kappa", "bwd logits",
              "bwd rounds", "logits (row-major)");
  for (std::size_t w = 0; w < worst_row.size(); ++w) {
    const auto& f = worst_row[w];
    const auto [kappa, tr] = kappa_of(f.logits);
    std::string logits;
    for (double v : f.logits) {
      char b[32];
      std::snprintf(b, sizeof b, "%s%.4g", logits.empty() ? "" : " ", v);
      logits += b;
    }
    const Gains gain = backward_gains(c, f.logits);
    std::printf("%4llu %12.4g %12.4g %10.6f %10.4g %10.4g  [%s]\n",
                static_cast<unsigned long long>(f.index), f.row, f.col, kappa, gain.logits,
                gain.normalisations, logits.c_str());
    char b[240];
    std::snprintf(b, sizeof b,
                  "case %llu: row %.17g, column %.17g, kappa %.17g, backward gain from logits "
                  "%.6g, through the rounds %.6g, logits [",
                  static_cast<unsigned long long>(f.index), f.row, f.col, kappa, gain.logits,
                  gain.normalisations);
    entry.facts.push_back({"worst_row_" + std::to_string(w + 1), b + logits + "]"});
  }
  report_theory(c, worst_row, entry);
  entry.facts.push_back({"theory_checked", std::to_string(tally.checked)});
  entry.facts.push_back({"theory_settled", std::to_string(tally.settled)});
  entry.facts.push_back({"theory_faster_mode", std::to_string(tally.unexcited)});
  entry.facts.push_back({"theory_disagreements", std::to_string(tally.disagreements)});
  entry.facts.push_back({"theory_failed", std::to_string(tally.failed)});
  char largest[32];
  std::snprintf(largest, sizeof largest, "%.3g", tally.largest);
  entry.facts.push_back({"theory_largest_rate_difference", largest});
  std::printf(
      "\ntheory on the %ld kernel-checked cases: %ld observed rates settled within 500 rounds on "
      "an eigenvalue of the round's Jacobian, largest |observed - eigenvalue| / (1 - eigenvalue) "
      "%.3g; %ld on a faster mode than the slowest (a symmetric start); %ld disagreements beyond "
      "the theory's own error%s\n",
      tally.checked, tally.settled, tally.largest, tally.unexcited, tally.disagreements,
      tally.failed ? (", " + std::to_string(tally.failed) + " without a limit").c_str() : "");
  if (!worst_row.empty()) {
    const auto [kappa, tr] = kappa_of(worst_row.front().logits);
    entry.sinkhorn.push_back(
        reports::sinkhorn_curve(tr, c.n, "worst case " + std::to_string(worst_row.front().index)));
    std::printf(
        "\nthe worst case's row residual after each round (kappa = %.6f, kappa^2 = %.6f):\n", kappa,
        kappa * kappa);
    int round = 0;
    for (const auto& s : tr.steps) {
      if (s.step != ref::SinkhornTrace<double>::Step::column) continue;
      double r = 0;
      for (double v : s.row_sums) r = std::max(r, std::fabs(v - 1));
      std::printf("  round %2d  %.4g\n", ++round, r);
    }
  }
  std::printf(
      "\nbwd logits: max_j sum_i |d comb_i / d logit_j| at those logits, the most a comb gradient\n"
      "with entries in [-1, 1] gives one logit; bwd rounds: the same through the normalisations\n"
      "alone, from the softmax's output (the reverse-mode reference, double)\n");
  if (!worst_col.empty())
    std::printf("\nworst column residual: %.4g (case %llu); columns end at S/(S+eps), so ~eps\n",
                worst_col.front().col, static_cast<unsigned long long>(worst_col.front().index));
  std::printf("\nfuzz: %d counterexamples (fp32 kernel outside its bound)\n", disagreements);
  for (std::size_t k = 0; k < st->kernels.size(); ++k)
    if (kernel_cases > 0 && skipped[k] == long(kernel_cases))
      throw std::runtime_error("kernel " + st->kernels[k] + " ran on none of the " +
                               std::to_string(kernel_cases) + " cases (see SKIPPED above)");
  return disagreements ? 1 : 0;
}

}  // namespace mhc::runner
