// mhc-verify check: a kernel against the bound-carrying oracle on generated cases.
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "commands.hpp"
#include "mhc/impl/cuda.hpp"
#include "mhc/oracles/verdict.hpp"
#include "mhc/reports/text.hpp"
#include "mhc/runner/check.hpp"

namespace mhc::cli {

Run add_check(CLI::App& app) {
  struct State : CaseFlags {
    std::string model = oracles::error_model_name(runner::CheckSpec{}.model);
    bool list_rules = false, list_kernels = false;
    int shards = 0;
    reports::Outputs out;
  };
  auto st = std::make_shared<State>();
  st->add(app, "kernel under test");
  app.add_option("--cases", st->spec.cases, "generated cases; case i uses seed S+i")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--threads", st->spec.threads,
                 "threads for the kernel (0: one per core) and the oracle (at most one per core)")
      ->capture_default_str()
      ->check(whole_number(4096));
  app.add_option("--error-model", st->model,
                 "bounds from: rigorous (every fp32 evaluation, every order), probabilistic "
                 "(Higham & Mary, lambda = 8; rigorous where fp32 sums are biased), empirical "
                 "(stochastic-rounding ensemble x 8), or standard (per stage, the model chosen "
                 "from measurements)")
      ->capture_default_str()
      ->check(CLI::IsMember(error_model_names()));
  app.add_option("--save-failures", st->spec.save_dir,
                 "directory where each failing case is saved as an mhc-fixture file (a "
                 "regression test: mhc-verify compare FILE); empty: do not save")
      ->capture_default_str()
      ->check(folder_to_save_in());
  app.add_flag("--isolate", st->spec.isolate,
               "run our kernels in a worker process too, as plug-ins always are: a crash, a hang "
               "or exit() fails its case, not the run");
  add_worker_options(app, st->spec.kernel_seconds, st->spec.limits);
  app.add_flag("!--no-diagnosis", st->spec.diagnose,
               "do not look for the catalogued deviation that explains a failure");
  app.add_flag("--list-kernels", st->list_kernels,
               "print the kernels that can run on this machine (CPU ones; CUDA ones when a device "
               "is present) and exit");
  app.add_flag("--rules", st->list_rules,
               "print the verdict rules with their justification and exit");
  add_report_options(app, st->out);
  add_shard_option(app, st->shards, "cases");
  app.footer(
      "Each case is generated from its seed, run through the kernel with every output poisoned\n"
      "(NaN payload) beforehand, and judged stage by stage against the oracle: the reference\n"
      "evaluated with a bound-carrying Scalar, which gives every element a derived bound on the\n"
      "error of any evaluation in the declared precision model. Prints a table per stage and a\n"
      "REPRO line per failing case. Exit 0: all pass; 1: a case failed; 2: bad input, or a kernel\n"
      "that cannot run here (no device; an op or configuration it lacks); 3: UNDECIDED, no case\n"
      "could be decided (each an infinite bound or a tie), so nothing was checked.");

  return [st]() -> int {
    if (st->list_kernels) {
      for (const auto* b : impl::backends()) std::printf("%s\n", b->name.c_str());
      if (impl::cuda_device_count() > 0)
        for (const auto* b : impl::gpu_backends()) std::printf("%s\n", b->name.c_str());
      return 0;
    }
    if (st->list_rules) {
      for (const auto& r : oracles::rules())
        std::printf("%-13s %s\n", r.name.c_str(), r.justification.c_str());
      return 0;
    }
    runner::CheckSpec& spec = st->resolve();
    spec.model = oracles::error_model_from_name(st->model);
    spec.shard = runner::shard_from_env(st->shards);
    const ref::Config& cfg = spec.cfg;
    if (spec.kernel.compare(0, 7, "plugin:") == 0) st->out.reads = {spec.kernel.substr(7)};
    runner::Session session(st->out, spec.threads);  // first: a report on stdout keeps it
    std::printf("check: error model %s\n", st->model.c_str());
    std::printf(
        "check: kernel %s, op %s, precision %s, n=%d d=%d iters=%d hc_eps=%g norm_eps=%g,"
        " %d cases x %zu tokens, seed %llu\n",
        reports::clean_text(spec.kernel).c_str(), st->op.c_str(), st->precision.c_str(), cfg.n,
        cfg.d, cfg.iters, cfg.hc_eps, cfg.norm_eps, spec.cases, spec.tokens,
        static_cast<unsigned long long>(spec.seed));
    std::fflush(stdout);
    session.set_shard(spec.shard);
    const runner::CheckTally tally = runner::run_check(spec, session);
    // Asked for, and cannot run at all (an interrupt skips the case it stopped: not that).
    if (tally.skipped > 0 && tally.skipped == tally.done && !reports::interrupted()) {
      session.finish(2);
      throw std::runtime_error(tally.skip_reason);
    }
    runner::print_stage_table(session.report.entries.back());
    std::string extra;
    if (tally.undecided) extra += ", " + std::to_string(tally.undecided) + " not decided";
    if (tally.nondeterministic)
      extra += "; non-deterministic: two runs differed in " +
               std::to_string(tally.nondeterministic) + " cases";
    if (tally.skipped)
      extra += ", " + std::to_string(tally.skipped) + " skipped: " + tally.skip_reason;
    const bool none_decided = runner::nothing_decided(tally.done - tally.skipped,
                                                      tally.done - tally.skipped - tally.undecided);
    std::printf("check: %s (%d of %d cases failed%s)\n",
                none_decided ? runner::kUndecided : runner::run_outcome(!tally.failed).c_str(),
                tally.failed, tally.done, extra.c_str());
    return session.finish(tally.failed ? 1 : none_decided ? runner::kUndecidedExit : 0);
  };
}

}  // namespace mhc::cli
