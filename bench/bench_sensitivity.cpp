// Sensitivity: the smallest relative perturbation of a faithful output that the harness flags,
// per op, stage and kind of perturbation, for the bounds alone (tier 1) and with the second tier,
// next to the legitimate envelope and to torch.testing.assert_close's fp32 defaults. Usage:
// mhc-bench-sensitivity [cases] [tokens] [more] [precision] [d] [backward]   (defaults 4 cases x 4
// tokens, V4.1 sizes, fp32; "backward": the backward ops instead)
// more: legitimate kernels to add to the envelope, by name, comma-separated (cuda,cuda-fused on a
// machine with a GPU; "" for none); their envelope is also printed apart ("more env"), and "2/all"
// is the ratio against the envelope of every legitimate kernel. precision: a preset or parts, as
// check --precision (every kernel runs what it declares; the second tier models fp32 only).
//
// Faithful outputs: kernel cpu's. A perturbation scales every element of one stage by 1 + delta
// (uniform), or one element (the one of median, or of largest, oracle magnitude), and stores it
// again where the declaration stores the stage narrower. Flagged: that
// stage, or its anchored twin, fails. delta is searched on the grid 10^(k/8), 1e-9 to 1, by
// bisection (flagging grows with delta). Envelope: the largest relative deviation from the oracle
// of any legitimate kernel (cpu-fused and the catalogue's) on the same cases, over all of them:
// normwise for the uniform scaling, at the perturbed element for the others. assert_close:
// |perturbed - reference| <= 1e-5 + 1.3e-6 |reference|, the reference being cpu-fused's output (a
// second fp32 implementation, as a kernel test compares with); "false alarms" counts the
// legitimate kernels assert_close rejects against that reference, unperturbed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "mhc/impl/variants.hpp"
#include "mhc/oracles/anchored.hpp"
#include "mhc/oracles/generate.hpp"
#include "mhc/runner/driver.hpp"
#include "mhc/runner/judge.hpp"

using namespace mhc;

namespace {

enum class Kind { uniform, median, largest };
const char* kind_name(Kind k) {
  return k == Kind::uniform ? "uniform" : k == Kind::median ? "one at median" : "one at max";
}

// A stage the declaration stores narrower is perturbed and stored again, as a kernel stores it.
oracles::Trace<float> perturbed(oracles::Trace<float> t, const std::string& stage,
                                std::size_t element, Kind kind, double delta, bnd::Format stored) {
  const auto scaled = [&](float v) {
    return oracles::gen::round_to(stored, float(double(v) * (1 + delta)));
  };
  for (auto& s : t)
    if (s.name == stage) {
      if (kind == Kind::uniform)
        for (float& v : s.values) v = scaled(v);
      else
        s.values[element] = scaled(s.values[element]);
    }
  return t;
}

bool flagged(const oracles::Verdict& v, const std::string& stage, bool tier1_only) {
  for (const auto& s : v.stages)
    if ((s.stage == stage || s.stage == oracles::kAnchored + stage) &&
        s.state == oracles::State::fail && !(tier1_only && s.rule == "noise"))
      return true;
  return false;
}

bool assert_close_fails(const std::vector<float>& got, const std::vector<float>& ref) {
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(double(got[i]) - double(ref[i])) <= 1e-5 + 1.3e-6 * std::fabs(double(ref[i]))))
      return true;
  return false;
}

// The smallest grid delta for which flag(delta) holds (flag(1) assumed), 1e-9 .. 1.
template <class Flag>
double smallest(Flag flag) {
  int lo = -72, hi = 0;  // delta = 10^(k/8)
  if (flag(std::pow(10.0, lo / 8.0))) return std::pow(10.0, lo / 8.0);
  if (!flag(1.0)) return HUGE_VAL;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    (flag(std::pow(10.0, mid / 8.0)) ? hi : lo) = mid;
  }
  return std::pow(10.0, hi / 8.0);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? std::nan("") : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int cases = argc > 1 ? std::atoi(argv[1]) : 4;
  const std::size_t tokens = argc > 2 ? std::size_t(std::atol(argv[2])) : 4;
  ref::Config cfg = ref::v41();
  if (argc > 5) cfg.d = std::atoi(argv[5]);
  const bool backward = argc > 6 && std::string(argv[6]) == "backward";
  std::vector<impl::Backend> legit{impl::cpu_fused()};
  for (const auto& v : impl::variant_catalogue())
    if (!v.wrong) legit.push_back(impl::make_backend(v));
  const oracles::Precision precision = oracles::precision_from_name(argc > 4 ? argv[4] : "fp32");
  std::vector<impl::Backend> more;
  if (argc > 3) {
    std::stringstream names(argv[3]);
    for (std::string name; std::getline(names, name, ',');) {
      const impl::Backend* b = impl::find_backend(name);
      if (!b) {
        std::fprintf(stderr, "mhc-bench-sensitivity: no kernel named '%s'\n", name.c_str());
        return 2;
      }
      more.push_back(*b);
    }
  }
  runner::Judging j;
  j.threads = 1;
  j.diagnose = false;
  std::printf(
      "sensitivity: kernel cpu perturbed, n=%d d=%d iters=%d hc_eps=%g, %d cases x %zu tokens, "
      "%s; delta: median over cases of the smallest flagged\n",
      cfg.n, cfg.d, cfg.iters, cfg.hc_eps, cases, tokens, precision.name.c_str());
  std::printf("%-15s %-6s %-14s %10s %10s %10s %10s %8s %6s", "op", "stage", "perturbation",
              "tier 1", "tiers 1+2", "a_close", "envelope", "2/env", "a_c FA");
  if (!more.empty()) std::printf(" %10s %8s", "more env", "2/all");
  std::printf("\n");
  for (oracles::Op op : backward ? oracles::backward_ops() : oracles::all_ops()) {
    if (op == oracles::Op::block || op == oracles::Op::stack) continue;
    std::map<std::string, std::map<Kind, std::vector<double>>> t1, t2, ac;
    std::map<std::string, std::map<Kind, double>> envelope, envelope_more;
    std::map<std::string, int> false_alarms;
    std::vector<std::string> order;
    for (int i = 0; i < cases; ++i) {
      const auto c = oracles::generate_case(op, cfg, tokens, std::uint64_t(200 + i), precision);
      const auto base = runner::run(impl::cpu(), c, 1).got;
      const auto shared = runner::shared_oracle(c, j);
      // The kernels that run the declaration (cpu-fused stores its stages in fp32 only).
      std::vector<oracles::Trace<float>> others;
      std::size_t legit_ran = 0;
      for (const auto& b : legit)
        if (auto r = runner::run(b, c, 1); r.ran()) {
          others.push_back(std::move(r.got));
          ++legit_ran;
        }
      for (const auto& b : more)
        if (auto r = runner::run(b, c, 1); r.ran()) others.push_back(std::move(r.got));
      for (const auto& w : shared.want) {
        if (i == 0) order.push_back(w.name);
        const auto* ref = oracles::find_stage(others[0], w.name);  // cpu-fused, where it runs
        std::vector<std::size_t> by_size(w.values.size());
        for (std::size_t e = 0; e < by_size.size(); ++e) by_size[e] = e;
        std::sort(by_size.begin(), by_size.end(), [&](std::size_t a, std::size_t b) {
          return std::fabs(w.values[a].v) < std::fabs(w.values[b].v);
        });
        const std::size_t at_median = by_size[by_size.size() / 2], at_max = by_size.back();
        // Envelope per kind: normwise for the uniform scaling, at the element for the others.
        for (const auto& o : others) {
          const auto* g = oracles::find_stage(o, w.name);
          double d2 = 0, w2 = 0;
          for (std::size_t e = 0; e < w.values.size(); ++e) {
            d2 += std::pow(double(g->values[e]) - w.values[e].v, 2);
            w2 += w.values[e].v * w.values[e].v;
          }
          auto rel = [&](std::size_t e) {
            return std::fabs(double(g->values[e]) - w.values[e].v) / std::fabs(w.values[e].v);
          };
          auto& env = std::size_t(&o - others.data()) < legit_ran ? envelope[w.name]
                                                                  : envelope_more[w.name];
          env[Kind::uniform] = std::max(env[Kind::uniform], std::sqrt(d2 / w2));
          env[Kind::median] = std::max(env[Kind::median], rel(at_median));
          env[Kind::largest] = std::max(env[Kind::largest], rel(at_max));
          if (&o != &others[0] && std::size_t(&o - others.data()) < legit_ran)
            false_alarms[w.name] += assert_close_fails(g->values, ref->values);
        }
        for (Kind kind : {Kind::uniform, Kind::median, Kind::largest}) {
          const std::size_t element = kind == Kind::largest ? at_max : at_median;
          auto judged = [&](double d) {
            return runner::judge_outputs(c,
                                         perturbed(base, w.name, element, kind, d,
                                                   oracles::declared_output_storage(c, w.name)),
                                         j, shared)
                .verdict;
          };
          t1[w.name][kind].push_back(
              smallest([&](double d) { return flagged(judged(d), w.name, true); }));
          t2[w.name][kind].push_back(
              smallest([&](double d) { return flagged(judged(d), w.name, false); }));
          ac[w.name][kind].push_back(smallest([&](double d) {
            return assert_close_fails(
                oracles::find_stage(perturbed(base, w.name, element, kind, d,
                                              oracles::declared_output_storage(c, w.name)),
                                    w.name)
                    ->values,
                ref->values);
          }));
        }
      }
    }
    for (const auto& s : order)
      for (Kind kind : {Kind::uniform, Kind::median, Kind::largest}) {
        const double a = median(t1[s][kind]), b = median(t2[s][kind]), e = envelope[s][kind];
        std::printf("%-15s %-6s %-14s %10.2g %10.2g %10.2g %10.2g %8.3g %6d",
                    oracles::op_name(op).c_str(), s.c_str(), kind_name(kind), a, b,
                    median(ac[s][kind]), e, b / e, false_alarms[s]);
        if (!more.empty()) {
          const double m = envelope_more[s][kind];
          std::printf(" %10.2g %8.3g", m, b / std::max(e, m));
        }
        std::printf("\n");
      }
    std::fflush(stdout);
  }
  return 0;
}
