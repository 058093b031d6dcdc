// mhc-verify gate: the parser of runner::GatePlan.
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "mhc/runner/gate.hpp"

namespace mhc::cli {

Run add_gate(CLI::App& app) {
  struct State : runner::GateSpec {
    int shards = 0;
    reports::Outputs out;
  };
  auto st = std::make_shared<State>();
  app.add_option("--suite", st->suite, "the suite file (see below; e.g. gate/default.suite)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--baseline", st->baseline, "the stored baseline (JSON, mhc-baseline/1)")
      ->required();
  app.add_flag("--update", st->update,
               "record the current results as the baseline (refused while a verdict fails)");
  app.add_option("--kernel", st->kernels,
                 "run the suite on these kernels instead of its own (repeatable; e.g. "
                 "plugin:build/libmykernels.so)")
      ->check(kernel_validator());
  app.add_option("--threads", st->threads, "threads (0: one per core)")
      ->capture_default_str()
      ->check(whole_number(4096));
  app.add_flag("!--no-isolate", st->isolate,
               "run our own kernels in this process (plug-ins still run in worker processes)");
  add_worker_options(app, st->kernel_seconds, st->limits);
  add_report_options(app, st->out);
  add_shard_option(app, st->shards, "suite's runs (kernels x ops x precisions x hc_eps, in order)");
  app.footer(
      "The suite file holds one setting per line (# starts a comment); lists multiply:\n"
      "  kernels cpu cpu-fused          ops split_sinkhorn boundary    precisions fp32 bf16\n"
      "  hc-eps 1e-6 1e-2               cases 4    tokens 4    seed 1   n 4   dim 5120\n"
      "  iters 20   norm-eps 1e-20      error-model standard\n"
      "  allowance 2      floor 0.05    (a stage regresses when its max or p99 ratio exceeds\n"
      "                                  both allowance x baseline and baseline + floor)\n"
      "Exit 0: every verdict passes and nothing regressed; 1: a verdict failed, a stage\n"
      "regressed, or an entry has no baseline (run --update to record it); 2: bad input.");

  return [st]() -> int {
    st->shard = runner::shard_from_env(st->shards);
    const runner::GatePlan plan(*st);  // bad input fails before a report is written
    st->out.reads = {st->suite, st->baseline};
    if (st->update) st->out.writes = {st->baseline};
    runner::Session session(st->out, st->threads);
    session.set_shard(st->shard);
    return session.finish(plan.run(session));
  };
}

}  // namespace mhc::cli
