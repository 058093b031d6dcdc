#include "mhc/runner/compare.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

#include "mhc/fixtures/fixture.hpp"
#include "mhc/reports/curves.hpp"
#include "mhc/reports/text.hpp"
#include "mhc/runner/judge.hpp"
#include "mhc/runner/repro.hpp"

namespace mhc::runner {

namespace {
struct Stopped {};  // the run was interrupted between two cases of a file

// A file or case compare cannot judge: one failed case whose only stage is "file", rule invalid.
reports::CaseRecord invalid_case(std::size_t index, const std::string& label,
                                 const std::string& why) {
  reports::CaseRecord rec;
  rec.index = index;
  rec.label = label;
  oracles::StageVerdict sv;
  sv.stage = "file";
  sv.state = oracles::State::fail;
  sv.rule = "invalid";
  sv.reason = why;
  rec.verdict.state = oracles::State::fail;
  rec.verdict.first_divergent = "file";
  rec.verdict.stages.push_back(sv);
  return rec;
}

bool is_invalid(const reports::Entry& e) {
  return std::any_of(e.cases.begin(), e.cases.end(), [](const reports::CaseRecord& c) {
    return !c.verdict.stages.empty() && c.verdict.stages[0].rule == "invalid";
  });
}
}  // namespace

int run_compare(const CompareSpec& spec, Session& session) {
  Judging judging;
  judging.model = spec.model;
  judging.threads = spec.threads;
  judging.diagnose = spec.diagnose;
  judging.limits = spec.limits;
  long mine = 0;
  for (std::size_t i = 0; i < spec.files.size(); ++i) mine += spec.shard.takes(i);
  Progress progress("compare", mine);
  long done = 0;
  int rc = 0;
  std::set<std::string> unmatched(spec.cases.begin(), spec.cases.end());
  // A file, or a case of it (`name`), that cannot be judged: its error on stderr, INVALID on
  // stdout, an entry of its own counted apart from failures, and exit 2.
  auto report_invalid = [&](const std::string& f, const std::string& name, std::size_t index,
                            const std::string& why) {
    const std::string label = name.empty() ? f : f + " --case " + name;
    std::fprintf(stderr, "mhc-verify: error: %s\n", reports::clean_text(why).c_str());
    std::printf("INVALID %s\n",
                reports::clean_text(name.empty() ? f : f + "[" + name + "]").c_str());
    reports::Entry& entry = session.report.entry("compare " + label);
    entry.kind = "compare";
    entry.error_model = oracles::error_model_name(spec.model);
    entry.facts.push_back({"error", why});
    entry.add_case(invalid_case(index, label, why));
    session.update();
    rc = 2;
  };
  // One case of a file: an entry of its own ("compare FILE", or "compare FILE --case NAME").
  auto judge_case = [&](const fixtures::Fixture& fx, const std::string& f, std::size_t index) {
    const std::string label = fx.name.empty() ? f : f + " --case " + fx.name;
    const std::string shown = reports::clean_text(fx.name.empty() ? f : f + "[" + fx.name + "]");
    reports::Entry& entry = session.report.entry("compare " + label);
    entry.kind = "compare";
    entry.error_model = oracles::error_model_name(spec.model);
    entry.op = oracles::op_name(fx.c.op);
    entry.precision = oracles::precision_name(fx.c.precision);
    entry.settings = {{"n", std::to_string(fx.c.cfg.n)},
                      {"d", std::to_string(fx.c.cfg.d)},
                      {"iters", std::to_string(fx.c.cfg.iters)},
                      {"tokens", std::to_string(fx.c.tokens)}};
    if (!fx.producer.empty()) entry.facts.push_back({"producer", fx.producer});
    for (const auto& name : fx.skipped)
      std::fprintf(stderr, "%s: /outputs/trace/%s: unknown stage, skipped\n", shown.c_str(),
                   reports::clean_text(name).c_str());
    // A capture of nothing, or of the given sublayer outputs alone, would pass vacuously: refused.
    if (!oracles::judges_something(fx.c, fx.outputs)) {
      std::string names;
      for (const auto& o : oracles::op_spec(fx.c.op).outputs)
        names += (names.empty() ? "" : ", ") + o.name;
      return report_invalid(f, fx.name, index,
                            label + ": no outputs to judge" +
                                (fx.outputs.empty() ? "" : " besides the sublayers' given ones") +
                                " (" + entry.op + ", " + std::to_string(fx.c.tokens) +
                                " tokens; expected one or more of " + "/outputs/{" + names + "})");
    }
    const Outcome o = judge_outputs(fx.c, fx.outputs, judging, fx.stored);
    reports::CaseRecord rec =
        record(o, index, 0, rerun_here(repro(fx.c, "", spec.model), spec.shard));
    rec.label = label;
    const auto& v = o.verdict;
    double worst = 0;
    std::string worst_stage;
    for (const auto& s : v.stages)
      if (s.state != oracles::State::skipped && s.ratio_max >= worst) {
        worst = s.ratio_max;
        worst_stage = s.stage;
      }
    const bool fail = v.state == oracles::State::fail;
    if (fail) rc = std::max(rc, 1);
    progress.done();
    // A failure of the second tier alone is within every bound: the line says which judgement.
    std::string tier;
    for (const auto& s : v.stages)
      if (fail && s.stage == v.first_divergent && s.rule == "noise") {
        char buf[96];
        std::snprintf(buf, sizeof buf, " (second tier: error %.3g times its fp32 noise)",
                      s.noise.z_max);
        tier = buf;
      }
    std::printf("%s %s: %s, %zu tokens, %s; worst ratio %.3g (%s)%s%s%s\n",
                fail                              ? "FAIL"
                : v.state == oracles::State::pass ? "PASS"
                                                  : "UNDECIDED",
                shown.c_str(), entry.op.c_str(), fx.c.tokens, entry.precision.c_str(), worst,
                worst_stage.c_str(), fail ? "; first divergent stage " : "",
                fail ? v.first_divergent.c_str() : "", tier.c_str());
    if (fail) {
      if (!o.diagnosis.empty()) std::printf("DIAGNOSIS: %s\n", o.diagnosis.c_str());
      std::printf("REPRO: %s\n", reports::clean_text(rec.repro).c_str());
    }
    if (auto curve = reports::sinkhorn_curve(fx.c, fx.outputs)) entry.sinkhorn.push_back(*curve);
    entry.add_case(std::move(rec));
    session.update();
  };
  for (std::size_t i = 0; i < spec.files.size() && !session.stop(); ++i) {
    if (!spec.shard.takes(i)) continue;
    const std::string& f = spec.files[i];
    try {
      // Case by case as the reader hands them over: one held at a time. A case that cannot be
      // judged is an invalid entry of its own, and the file's other cases are judged.
      std::size_t k = 0;
      const auto invalid = [&](const std::string& name, const std::string& why) {
        unmatched.erase(name);
        report_invalid(f, name, k++, why);
      };
      fixtures::read_fixtures(
          f,
          [&](fixtures::Fixture&& fx) {
            if (session.stop()) throw Stopped{};
            if (!spec.cases.empty() &&
                (fx.name.empty() || !std::count(spec.cases.begin(), spec.cases.end(), fx.name)))
              return;
            if (spec.precision) {  // read as declared: the tensors stored as it says
              fx.c.precision_given = true;
              oracles::store_declared(fx.c);
            }
            try {
              within_limits(fx.c, spec.limits);
            } catch (const TooLarge& e) {
              return invalid(fx.name, f + (fx.name.empty() ? "" : ": case '" + fx.name + "'") +
                                          ": too large to judge: " + e.what());
            }
            unmatched.erase(fx.name);
            judge_case(fx, f, k++);
          },
          spec.read_timeout, spec.cases,
          [&](const std::string& name, const std::string& why) {
            if (session.stop()) throw Stopped{};
            invalid(name, why);
          },
          spec.precision);
    } catch (const Stopped&) {
      break;
    } catch (const fixtures::FixtureError& e) {
      report_invalid(f, "", i, e.what());
    }
    progress.step(++done);
  }
  // A case asked for by name may be in another shard's files.
  if (spec.shard.count > 1) unmatched.clear();
  for (const auto& name : unmatched) {
    std::fprintf(stderr, "mhc-verify: error: --case %s: no such case in the files given\n",
                 reports::clean_text(name).c_str());
    rc = 2;
  }
  progress.done();
  // Each entry once: invalid (not judged: exit 2), else failed, passed, or neither.
  const auto& es = session.report.entries;
  long invalid = 0, pass = 0, fail = 0;
  for (const auto& e : es) {
    if (is_invalid(e))
      ++invalid;
    else if (e.count(oracles::State::fail) > 0)
      ++fail;
    else if (e.count(oracles::State::pass) > 0)
      ++pass;
  }
  if (rc == 0 && nothing_decided(long(es.size()), pass)) rc = kUndecidedExit;
  const std::string word = rc == 2 && !reports::interrupted() ? "INVALID"
                           : rc == kUndecidedExit             ? kUndecided
                                                              : run_outcome(rc == 0);
  std::printf(
      "compare: %s (%zu cases: %ld pass, %ld fail, %ld invalid, %ld undecided or skipped)\n",
      word.c_str(), es.size(), pass, fail, invalid, long(es.size()) - pass - fail - invalid);
  return rc;
}

}  // namespace mhc::runner
