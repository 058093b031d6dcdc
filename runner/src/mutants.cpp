#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "mhc/runner/mutants.hpp"

#include <optional>

#include "mhc/impl/variants.hpp"
#include "mhc/oracles/diagnosis.hpp"
#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/parallel.hpp"
#include "mhc/oracles/verdict.hpp"
#include "mhc/reports/text.hpp"
#include "mhc/runner/judge.hpp"
#include "mhc/runner/repro.hpp"

namespace mhc::runner {
namespace {

struct Row {
  impl::Backend backend;
  std::string name;  // the backend's, with " as PRECISION" where it declares another than fp32
  bool wrong = false;
  std::string explains;  // the catalogued deviation a wrong kernel must be diagnosed as
  oracles::Precision precision;
  bool backward = false;  // judged on the backward campaign's cases
  int cases = 0, failed = 0, undecided = 0;
  long killed_at = -1;
  std::string stage, diagnosis, repro;
  bool diagnosis_ok = true;
};

// The fixed-eps sensitivity report: at the production values, is each wrong kernel's output
// distinguishable from the legitimate kernels' at all, and does each error model catch it?
// Deviations are measured in units of the rigorous bound of each element (a scale that follows
// magnitude and conditioning): a wrong kernel is detectable when its worst deviation is more than
// twice the worst of any legitimate kernel on the same cases; caught by a model when its worst
// observed/bound ratio under that model exceeds 1.
constexpr const char* kModelNames[] = {"rigorous", "probabilistic", "empirical", "standard"};

int production_report(Session& session, int cases, std::uint64_t seed) {
  using oracles::ErrorModel;
  const ErrorModel models[] = {ErrorModel::rigorous, ErrorModel::probabilistic,
                               ErrorModel::empirical, ErrorModel::standard};
  std::vector<const impl::Variant*> legit, wrong;
  std::size_t block_wrong = 0;
  for (const auto& v : impl::variant_catalogue()) {
    // The mHC ops of this report run as the reference's; these deviate only around them.
    if (v.wrong && (v.block.deviates() || v.backward.block_only()))
      ++block_wrong;
    else
      (v.wrong ? wrong : legit).push_back(&v);
  }
  // Two streams of cases: the forward (boundary and split alternating) and the backward (every
  // piece's and the boundary's in turn). Each kernel's ratios are kept per stream: a deviation is
  // detectable in a stream.
  using Ratios = std::array<std::array<double, 4>, 2>;
  std::vector<Ratios> wrong_ratio(wrong.size(), Ratios{});
  Ratios legit_ratio{};
  std::vector<std::array<std::string, 2>> wrong_stage(wrong.size());
  const oracles::Op backward_ops[] = {
      oracles::Op::split_sinkhorn_backward, oracles::Op::pre_backward,
      oracles::Op::post_backward,           oracles::Op::rmsnorm_backward,
      oracles::Op::mixes_backward,          oracles::Op::boundary_backward};
  for (int i = 0; i < 2 * cases; ++i) {
    const std::size_t stream = std::size_t(i % 2);
    const int k = i / 2;
    const oracles::Op op = stream == 1  ? backward_ops[k % 6]
                           : k % 2 == 0 ? oracles::Op::boundary
                                        : oracles::Op::split_sinkhorn;
    const auto c = oracles::generate_case(op, ref::v41(), 2, seed + std::uint64_t(k),
                                          oracles::Precision::fp32());
    std::vector<oracles::Trace<bnd::Bounded>> want;
    for (ErrorModel m : models) want.push_back(oracles::oracle_trace(c, 0, m));
    // max observed/bound under model m, and the stage where it is largest
    auto ratio_of = [&](const oracles::Trace<float>& got, int m, std::string* where) {
      double r = 0;
      for (std::size_t s = 0; s < want[0].size(); ++s)
        for (std::size_t e = 0; e < want[0][s].values.size(); ++e) {
          const auto& w = want[std::size_t(m)][s].values[e];
          const double d = std::fabs(double(got[s].values[e]) - w.v);
          double q = std::isnan(d) ? HUGE_VAL : w.e > 0 ? d / w.e : (d > 0 ? HUGE_VAL : 0.0);
          if (!std::isfinite(w.e)) q = 0;  // undecidable elements say nothing
          if (q > r) {
            r = q;
            if (where) *where = want[0][s].name;
          }
        }
      return r;
    };
    // Our own kernels: they run everywhere (an error would be a bug here).
    auto run_ours = [&](const impl::Variant& v) {
      Ran r = run(impl::make_backend(v), c, 0);
      if (!r.ran()) throw std::logic_error(r.verdict.stages.at(0).reason);
      return std::move(r.got);
    };
    for (const auto* l : legit) {
      const auto got = run_ours(*l);
      for (int m = 0; m < 4; ++m)
        legit_ratio[stream][std::size_t(m)] =
            std::max(legit_ratio[stream][std::size_t(m)], ratio_of(got, m, nullptr));
    }
    for (std::size_t w = 0; w < wrong.size(); ++w) {
      const auto got = run_ours(*wrong[w]);
      for (int m = 0; m < 4; ++m) {
        std::string where;
        const double r = ratio_of(got, m, &where);
        if (r > wrong_ratio[w][stream][std::size_t(m)]) {
          wrong_ratio[w][stream][std::size_t(m)] = r;
          if (m == 0) wrong_stage[w][stream] = where;
        }
      }
    }
  }
  std::printf(
      "fixed-eps sensitivity at n=4 d=5120 iters=20 hc_eps=1e-6 norm_eps=1e-20: %d forward cases "
      "(boundary and split_sinkhorn alternating) and %d backward (split_sinkhorn, pre, post, "
      "rmsnorm, mixes, boundary in turn), 2 tokens, %zu legitimate kernels; each kernel's row is "
      "the stream where "
      "it lies farthest outside the legitimate spread\n",
      cases, cases, legit.size());
  std::printf(
      "per model: max observed/bound over all elements (> 1: caught). outside: the wrong\n"
      "kernel's max under the rigorous model / the legitimate kernels' max; detectable when\n"
      "> 2. verdict from the standard model.\n\n");
  std::printf("%-30s %-7s %10s %-10s %10s %10s %10s %10s  %s\n", "kernel", "stage", "outside",
              "detectable", "rigorous", "probabil.", "empirical", "standard", "verdict");
  int bad = 0;
  auto outside_in = [&](std::size_t w, std::size_t s) {
    return legit_ratio[s][0] > 0 ? wrong_ratio[w][s][0] / legit_ratio[s][0] : HUGE_VAL;
  };
  for (std::size_t w = 0; w < wrong.size(); ++w) {
    const std::size_t s = outside_in(w, 1) > outside_in(w, 0) ? 1 : 0;
    const auto& r = wrong_ratio[w][s];
    const double outside = outside_in(w, s);
    const bool detectable = outside > 2, caught = r[3] > 1;
    bad += detectable && !caught ? 1 : 0;
    reports::Entry& e = session.report.entry("production " + impl::backend_name(*wrong[w]));
    e.kind = "production";
    e.kernel = impl::backend_name(*wrong[w]);
    e.settings = {{"n", "4"},          {"d", "5120"},         {"iters", "20"},
                  {"hc_eps", "1e-06"}, {"norm_eps", "1e-20"}, {"cases", std::to_string(cases)}};
    char text[64];
    for (int m = 0; m < 4; ++m) {
      std::snprintf(text, sizeof text, "%.3g", r[std::size_t(m)]);
      e.facts.push_back({std::string("max ratio, ") + kModelNames[m], text});
    }
    std::snprintf(text, sizeof text, "%.3g", outside);
    e.facts.push_back({"outside the legitimate spread", text});
    e.facts.push_back({"detectable", detectable ? "yes" : "no"});
    e.facts.push_back({"verdict", caught ? "detected" : detectable ? "MISSED" : "undetectable"});
    // Judged by the sensitivity rule, not by cases: a detectable deviation must be detected.
    if (detectable && !caught) e.problem = "detectable at the production values but not detected";
    std::printf("%-30s %-7s %10.3g %-10s %10.3g %10.3g %10.3g %10.3g  %s\n",
                impl::backend_name(*wrong[w]).c_str(), wrong_stage[w][s].c_str(), outside,
                detectable ? "yes" : "no", r[0], r[1], r[2], r[3],
                caught       ? "detected"
                : detectable ? "MISSED"
                             : "undetectable");
  }
  std::array<double, 4> legit_max{};
  for (std::size_t m = 0; m < 4; ++m) legit_max[m] = std::max(legit_ratio[0][m], legit_ratio[1][m]);
  for (std::size_t s = 0; s < 2; ++s)
    std::printf("%-30s %-7s %10s %-10s %10.3g %10.3g %10.3g %10.3g  %s\n",
                s == 0 ? "(legitimate, forward)" : "(legitimate, backward)", "-", "-", "-",
                legit_ratio[s][0], legit_ratio[s][1], legit_ratio[s][2], legit_ratio[s][3],
                legit_ratio[s][3] > 1 ? "FALSE ALARM" : "none flagged");
  std::printf(
      "(%zu Block-level wrong kernels are not in this report: they deviate only inside a "
      "Block, forward or backward, where `mutants` catches them on block cases)\n",
      block_wrong);
  reports::Entry& le = session.report.entry("production legitimate kernels");
  le.kind = "production";
  for (int m = 0; m < 4; ++m) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", legit_max[std::size_t(m)]);
    le.facts.push_back({std::string("max ratio, ") + kModelNames[m], text});
  }
  if (legit_max[3] > 1) le.problem = "a legitimate kernel flagged (false alarm)";
  const bool ok = bad == 0 && legit_max[3] <= 1;
  std::printf("\nproduction: %s\n",
              ok ? "PASS (every detectable deviation detected, no false alarm)" : "FAIL");
  return ok ? 0 : 1;
}

// Kernels judged against a declaration other than fp32. Each legitimate one does what it declares
// and must pass; a wrong one claims more than it does (fp32 sums, accumulating in bf16; fp32
// mixes, storing them in bf16).
struct Declared {
  const char* kernel;
  const char* precision;
  bool wrong;
};
constexpr Declared kDeclared[] = {
    {"cpu", "tf32", false},
    {"cpu", "bf16", false},
    {"cpu", "bf16-projection", false},
    {"cpu", "fp16", false},
    {"cpu-fused", "bf16-projection", false},
    {"cpu-fused", "fp16", false},
    {"variant:all_choices", "bf16-projection", false},
    {"variant:all_choices", "fp16", false},
    {"mutant:bf16_accumulation", "products=bf16,accumulation=bf16", false},
    {"mutant:bf16_accumulation", "bf16-projection", true},
    {"cpu", "inputs=bf16,weights=bf16,mixes=bf16,coefficients=bf16,streams=bf16,products=bf16",
     false},
    {"variant:all_choices", "mixes=bf16,coefficients=bf16", false},
    {"variant:all_choices", "coefficients=fp16", false},
    {"mutant:bf16_mixes_undeclared", "mixes=bf16", false},
    {"mutant:bf16_mixes_undeclared", "coefficients=bf16", true},
    {"mutant:bf16_streams_undeclared", "bf16", false},
    {"mutant:bf16_streams_undeclared", "bf16-projection", true},
};

}  // namespace

int run_mutants(const MutantsSpec& spec, Session& session) {
  const MutantsSpec* st = &spec;
  if (spec.production) return production_report(session, spec.production_cases, spec.seed);
  std::vector<Row> rows;
  for (const auto& v : impl::variant_catalogue()) {
    Row r;
    r.backend = impl::make_backend(v);
    r.name = r.backend.name;
    r.wrong = v.wrong;
    r.explains = v.explains;
    r.backward = v.backward.chosen();
    // The backward ones under bf16 streams as well (the Block's backward is judged in fp32 only;
    // tf32 holds bf16 values exactly, so products rounded to it are right there).
    const bool twin = r.backward && !v.backward.block_only() && !v.backward.tf32_products;
    rows.push_back(r);
    if (twin) {
      r.precision = oracles::Precision::bf16();
      r.name += " as " + r.precision.name;
      rows.push_back(std::move(r));
    }
  }
  std::vector<oracles::Precision> precisions{oracles::Precision::fp32()};
  for (const Declared& d : kDeclared) {
    Row r;
    r.backend = *impl::find_backend(d.kernel);
    r.precision = oracles::precision_from_name(d.precision);
    r.name = r.backend.name + " as " + r.precision.name;
    r.wrong = d.wrong;
    if (std::find(precisions.begin(), precisions.end(), r.precision) == precisions.end())
      precisions.push_back(r.precision);
    rows.push_back(std::move(r));
  }
  {  // this shard's rows: the kill table's i with i % shards == index
    std::vector<Row> mine;
    for (std::size_t i = 0; i < rows.size(); ++i)
      if (st->shard.takes(i)) mine.push_back(std::move(rows[i]));
    rows = std::move(mine);
  }
  const int total = std::max(st->cases, st->kill_budget);
  for (auto& r : rows) {
    reports::Entry& e = session.report.entry(r.name);
    e.kind = r.wrong ? "mutant" : "variant";
    e.kernel = r.backend.name;
    e.precision = r.precision.name;
    e.error_model = oracles::error_model_name(st->model);
    e.expect = r.wrong ? "fail" : "pass";
    e.keep_passing = false;
    e.settings = {{"cases", std::to_string(r.wrong ? st->kill_budget : st->cases)},
                  {"seed", std::to_string(st->seed)}};
  }
  Progress progress("mutants", total);
  Judging judging;
  judging.model = st->model;
  judging.threads = 1;
  // The forward campaign under each declaration, then the backward campaign (fp32, bf16).
  std::vector<std::pair<oracles::Precision, bool>> streams;
  for (const auto& p : precisions) streams.emplace_back(p, false);
  for (const auto& p : {oracles::Precision::fp32(), oracles::Precision::bf16()})
    streams.emplace_back(p, true);
  for (int i = 0; i < total && !session.stop(); ++i) {
    for (const auto& [p, backward] : streams) {
      auto active = [&, &p = p, backward = backward](const Row& r) {
        return r.precision == p && r.backward == backward &&
               (r.wrong ? r.killed_at < 0 && i < st->kill_budget : i < st->cases);
      };
      if (std::none_of(rows.begin(), rows.end(), active)) continue;
      // Case i under each declaration: the same draw, its inputs stored as the declaration says.
      const auto c = backward ? oracles::backward_campaign_case(st->seed, std::uint64_t(i), p)
                              : oracles::campaign_case(st->seed, std::uint64_t(i), p);
      // Judged as check judges it (so that the REPRO line gives the same verdict): block cases
      // anchored on each kernel's own stages; for the mHC pieces the anchored oracle does not
      // depend on the kernel, so it is evaluated once for all of them.
      const bool whole = oracles::op_spec(c.op).whole;
      std::optional<SharedOracle> pieces;
      if (!whole) pieces = shared_oracle(c, judging);
      // The kernels judged at once (--threads), then recorded in the table's order.
      std::vector<std::size_t> now;
      for (std::size_t k = 0; k < rows.size(); ++k)
        if (active(rows[k])) now.push_back(k);
      std::vector<Outcome> outcomes(now.size());
      par::for_each(now.size(), st->threads, [&](std::size_t j) {
        const Row& r = rows[now[j]];
        outcomes[j] = whole ? judge(r.backend, c, judging) : judge(r.backend, c, judging, *pieces);
      });
      for (std::size_t j = 0; j < now.size(); ++j) {
        Row& r = rows[now[j]];
        const Outcome& o = outcomes[j];
        const oracles::Verdict& verdict = o.verdict;
        ++r.cases;
        reports::Entry& e = session.report.entry(r.name);
        reports::CaseRecord rec =
            record(o, std::size_t(i), st->seed + std::uint64_t(i),
                   rerun_here(repro(c, r.backend.name, st->model), st->shard));
        rec.diagnosis.clear();
        e.add_case(std::move(rec));
        if (verdict.state == oracles::State::undecidable) ++r.undecided;
        if (verdict.state != oracles::State::fail) continue;
        ++r.failed;
        if (r.failed > 1) continue;
        r.stage = verdict.first_divergent;
        r.repro = e.cases.back().repro;
        if (r.wrong) {
          r.killed_at = i;
          const auto& names = o.deviations;
          r.diagnosis = names.empty() ? "-" : names[0];
          for (std::size_t k = 1; k < names.size(); ++k) r.diagnosis += "|" + names[k];
          bool named = r.explains.empty();
          for (const auto& nm : names) named = named || nm == r.explains;
          r.diagnosis_ok = named;
          e.cases.back().diagnosis = r.diagnosis;
          if (!named) e.problem = "misdiagnosed: " + r.diagnosis + ", expected " + r.explains;
        }
      }
    }
    session.update();
    progress.step(i + 1);
  }
  progress.done();

  int bad = 0;
  std::printf("%-34s %-6s %7s %8s %-9s %-28s %s\n", "kernel", "kind", "cases", "killed@", "stage",
              "diagnosis", "verdict");
  for (const auto& r : rows) {
    std::string verdict;
    if (r.wrong) {
      verdict = r.killed_at < 0 ? "SURVIVED" : !r.diagnosis_ok ? "MISDIAGNOSED" : "killed";
      if (r.killed_at >= 0 && r.explains.empty()) verdict = "killed (no catalogued deviation)";
    } else {
      verdict = r.failed ? "FLAGGED (" + std::to_string(r.failed) + " cases)" : "passed";
    }
    const bool ok = r.wrong ? r.killed_at >= 0 && r.diagnosis_ok : r.failed == 0;
    bad += ok ? 0 : 1;
    std::printf("%-34s %-6s %7d %8s %-9s %-28s %s\n", reports::clean_text(r.name).c_str(),
                r.wrong ? "wrong" : "legit", r.cases,
                r.killed_at >= 0 ? std::to_string(r.killed_at).c_str() : "-",
                r.stage.empty() ? "-" : r.stage.c_str(),
                r.wrong
                    ? r.diagnosis.c_str()
                    : (r.undecided ? (std::to_string(r.undecided) + " undecidable").c_str() : "-"),
                verdict.c_str());
    if (!ok && !r.repro.empty()) std::printf("  REPRO: %s\n", r.repro.c_str());
  }
  int wrong = 0, legit = 0;
  for (const auto& r : rows) (r.wrong ? wrong : legit)++;
  std::printf(
      "\nmutants: %d wrong kernels (kill budget %d cases), %d legitimate (%d cases each), "
      "%s error model: %s\n",
      wrong, st->kill_budget, legit, st->cases, oracles::error_model_name(st->model).c_str(),
      run_outcome(!bad).c_str());
  for (const auto& r : rows) {
    reports::Entry& e = session.report.entry(r.name);
    e.facts = {{"cases", std::to_string(r.cases)},
               {"killed at", r.killed_at >= 0 ? std::to_string(r.killed_at) : "-"},
               {"stage", r.stage.empty() ? "-" : r.stage},
               {"diagnosis", r.diagnosis.empty() ? "-" : r.diagnosis},
               {"undecidable", std::to_string(r.undecided)}};
  }
  return bad ? 1 : 0;
}

}  // namespace mhc::runner
