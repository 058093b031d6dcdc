// mhc-verify mutants: the parser of runner::run_mutants.
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "commands.hpp"
#include "mhc/impl/variants.hpp"
#include "mhc/runner/mutants.hpp"

namespace mhc::cli {

Run add_mutants(CLI::App& app) {
  struct State : runner::MutantsSpec {
    bool list = false;
    std::string model_name = "standard";
    int shards = 0;
    reports::Outputs out;
  };
  auto st = std::make_shared<State>();
  app.add_option("--cases", st->cases, "generated cases every legitimate kernel must pass")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000));
  app.add_option("--kill-budget", st->kill_budget,
                 "cases within which every wrong kernel must be caught")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000));
  app.add_option("--seed", st->seed, "seed of the campaign")
      ->capture_default_str()
      ->check(whole_number());
  app.add_flag("--list", st->list, "list the catalogue and exit");
  app.add_option("--error-model", st->model_name,
                 "error model of the bounds: rigorous, probabilistic, empirical, standard")
      ->capture_default_str()
      ->check(CLI::IsMember(error_model_names()));
  app.add_flag("--production", st->production,
               "instead: the fixed-eps sensitivity report at the production values (n=4, d=5120, "
               "20 rounds, hc_eps=1e-6, norm_eps=1e-20)");
  app.add_option("--production-cases", st->production_cases, "cases of the --production report")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--threads", st->threads,
                 "kernels judged at once on each case (0: one per core); the results do not depend "
                 "on it")
      ->capture_default_str()
      ->check(whole_number(4096));
  add_report_options(app, st->out);
  add_shard_option(app, st->shards, "kernels (in --list's order; not with --production)");
  app.footer(
      "Cases vary the op, n, d, iterations, hc_eps up to 1e-1 and norm_eps (see campaign_case),\n"
      "so that an eps misplaced below fp32 noise at 1e-6 becomes glaring. Exit 0 when every wrong\n"
      "kernel is killed and correctly diagnosed and no legitimate kernel is flagged, else 1.");

  return [st]() -> int {
    if (st->list) {
      for (const auto& v : impl::variant_catalogue())
        std::printf(
            "%-34s %s\n", impl::backend_name(v).c_str(),
            v.wrong ? ("wrong; diagnosis: " + (v.explains.empty() ? "none catalogued" : v.explains))
                          .c_str()
                    : "legitimate");
      return 0;
    }
    st->model = oracles::error_model_from_name(st->model_name);
    st->shard = runner::shard_from_env(st->shards);
    if (st->production && st->shard.count > 1)
      throw std::invalid_argument("--production is one small report: run it unsharded (" +
                                  st->shard.text() + ")");
    runner::Session session(st->out, st->threads);
    session.set_shard(st->shard);
    return session.finish(runner::run_mutants(*st, session));
  };
}

}  // namespace mhc::cli
