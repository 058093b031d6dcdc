#include "mhc/runner/check.hpp"

#include <cstdio>
#include <string>
#include <vector>

#include "mhc/impl/kernels.hpp"
#include "mhc/reports/curves.hpp"
#include "mhc/reports/text.hpp"
#include "mhc/runner/judge.hpp"
#include "mhc/runner/repro.hpp"

namespace mhc::runner {

namespace {

std::string fmt(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

}  // namespace

oracles::OpCase check_case(const CheckSpec& spec, std::uint64_t seed) {
  const bool whole = oracles::op_spec(spec.op).whole;
  return whole ? oracles::generate_block_case(spec.op, spec.cfg, spec.block, spec.batch,
                                              spec.tokens, seed, spec.precision)
               : oracles::generate_case(spec.op, spec.cfg, spec.tokens, seed, spec.precision);
}

CheckTally run_check(const CheckSpec& spec, Session& session) {
  const impl::Backend* backend = impl::find_backend(spec.kernel);
  if (!backend) throw std::invalid_argument("unknown kernel '" + spec.kernel + "'");
  const std::string op = oracles::op_name(spec.op), prec = oracles::precision_name(spec.precision);
  const ref::Config& cfg = spec.cfg;
  const bool whole = oracles::op_spec(spec.op).whole;
  reports::Entry& entry = session.report.entry(
      spec.id.empty() ? "check " + backend->name + " " + op + " " + prec : spec.id);
  entry.kind = spec.kind;
  entry.kernel = backend->name;
  entry.op = op;
  entry.precision = prec;
  entry.error_model = oracles::error_model_name(spec.model);
  entry.settings = {{"n", std::to_string(cfg.n)},          {"d", std::to_string(cfg.d)},
                    {"iters", std::to_string(cfg.iters)},  {"hc_eps", fmt(cfg.hc_eps)},
                    {"norm_eps", fmt(cfg.norm_eps)},       {"tokens", std::to_string(spec.tokens)},
                    {"cases", std::to_string(spec.cases)}, {"seed", std::to_string(spec.seed)}};
  if (whole) {
    const ref::BlockConfig& b = spec.block;
    entry.settings.insert(entry.settings.end(), {{"batch", std::to_string(spec.batch)},
                                                 {"layers", std::to_string(b.layers)},
                                                 {"heads", std::to_string(b.heads)},
                                                 {"head_dim", std::to_string(b.head_dim)},
                                                 {"experts", std::to_string(b.experts)},
                                                 {"top_k", std::to_string(b.top_k)},
                                                 {"inter", std::to_string(b.inter)},
                                                 {"route_scale", fmt(b.route_scale)}});
  }
  Judging judging;
  judging.model = spec.model;
  judging.threads = spec.threads;
  judging.diagnose = spec.diagnose;
  judging.isolate = spec.isolate;
  judging.kernel_seconds = spec.kernel_seconds;
  judging.limits = spec.limits;
  CheckTally tally;
  long mine = 0;
  for (int i = 0; i < spec.cases; ++i) mine += spec.shard.takes(std::size_t(i));
  Progress progress(entry.id, mine);
  for (int i = 0; i < spec.cases && !session.stop(); ++i) {
    if (!spec.shard.takes(std::size_t(i))) continue;
    const std::uint64_t seed = spec.seed + std::uint64_t(i);
    set_phase("generating the case");
    const oracles::OpCase c = check_case(spec, seed);
    const Outcome o = judge(*backend, c, judging);
    reports::CaseRecord rec =
        record(o, std::size_t(i), seed,
               rerun_here(repro(c, backend->name, spec.model), spec.shard, spec.kernel_seconds));
    const oracles::Verdict& v = o.verdict;
    if (!o.nondeterministic.empty()) {
      if (tally.nondeterministic++ == 0)
        std::printf("NON-DETERMINISTIC case %d: two runs differ at %s (the first run is judged)\n",
                    i, o.nondeterministic.c_str());
    }
    if (v.state == oracles::State::fail) {
      progress.done();
      ++tally.failed;
      for (const auto& s : v.stages)
        if (s.stage == v.first_divergent)
          std::printf("FAIL case %d (seed %llu): first divergent stage '%s': %s\n", i,
                      static_cast<unsigned long long>(seed), s.stage.c_str(),
                      reports::clean_text(s.reason).c_str());
      if (!o.diagnosis.empty()) std::printf("DIAGNOSIS: %s\n", o.diagnosis.c_str());
      std::printf("REPRO: %s\n", rec.repro.c_str());
      if (!spec.save_dir.empty() && !o.got.empty()) {
        rec.saved =
            save_case(spec.save_dir, backend->name + "_" + op + "_seed" + std::to_string(seed), c,
                      o.got, rec.repro);
        if (!rec.saved.empty()) std::printf("SAVED: %s\n", reports::clean_text(rec.saved).c_str());
      }
    } else if (v.state == oracles::State::skipped) {
      tally.skip_reason = v.stages.empty() ? "" : v.stages[0].reason;
      if (tally.skipped++ == 0)
        std::printf("SKIPPED case %d: %s\n", i, reports::clean_text(tally.skip_reason).c_str());
    } else if (v.state != oracles::State::pass) {
      ++tally.undecided;
    }
    // The Sinkhorn of the first case, and of each failing one.
    if ((i == 0 || v.state == oracles::State::fail) &&
        entry.sinkhorn.size() < reports::kSinkhornCurves)
      if (auto curve = reports::sinkhorn_curve(c, o.got)) {
        curve->label = "case " + std::to_string(i) + " " + curve->label;
        entry.sinkhorn.push_back(std::move(*curve));
      }
    entry.add_case(std::move(rec));
    ++tally.done;
    std::fflush(stdout);
    session.update();
    progress.step(tally.done, tally.failed ? std::to_string(tally.failed) + " failed" : "");
  }
  progress.done();
  return tally;
}

}  // namespace mhc::runner
