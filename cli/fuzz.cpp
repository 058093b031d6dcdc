// mhc-verify fuzz sinkhorn: the parser of runner::run_fuzz.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "commands.hpp"
#include "mhc/runner/fuzz.hpp"

namespace mhc::cli {

Run add_fuzz(CLI::App& app) {
  struct State : runner::FuzzSpec {
    std::string target;
    int shards = 0;
    reports::Outputs out;
  };
  auto st = std::make_shared<State>();
  app.add_option("target", st->target, "what to fuzz: sinkhorn")
      ->required()
      ->check(CLI::IsMember({"sinkhorn"}));
  auto* cases = app.add_option("--cases", st->cases, "cases to try (this shard's share of them)")
                    ->capture_default_str()
                    ->check(whole_number())
                    ->check(CLI::Validator(
                        [](std::string& s) -> std::string {  // 0 would check nothing, and pass
                          return s.find_first_not_of('0') == std::string::npos
                                     ? "expected at least 1 case, got " + s
                                     : "";
                        },
                        "1.."));
  app.add_option("--seconds", st->seconds, "run for this long instead of a case count")
      ->excludes(cases)
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            const double v = std::strtod(s.c_str(), nullptr);
            return std::isfinite(v) && v > 0 ? "" : "must be a number of seconds > 0, got " + s;
          },
          "SECONDS > 0"));
  app.add_option("--seed", st->seed, "seed of the campaign")
      ->capture_default_str()
      ->check(whole_number());
  app.add_option("--iters", st->iters, "Sinkhorn rounds")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--hc-eps", st->eps, "hc_eps, finite and >= 0")->capture_default_str();
  app.add_option("--n", st->n, "streams (the comb is n x n)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--keep", st->keep, "worst cases to report")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--kernel-every", st->kernel_every,
                 "run the fp32 kernels against the oracle on every k-th case of the seed space "
                 "(cases 0, k, 2k, ...: the same ones however the run is sharded)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--kernel", st->kernels, "fp32 kernels checked against the oracle (repeatable)")
      ->capture_default_str()
      ->check(kernel_validator());
  app.add_flag("--isolate", st->isolate,
               "run our kernels in a worker process too, as plug-ins always are");
  add_worker_options(app, st->kernel_seconds, st->limits);
  app.add_option("--threads", st->threads,
                 "threads evaluating cases (0: one per core); the cases tried and the results do "
                 "not depend on it")
      ->capture_default_str()
      ->check(whole_number(4096));
  app.add_option("--save-failures", st->save, "directory for counterexample fixtures")
      ->capture_default_str()
      ->check(folder_to_save_in());
  add_report_options(app, st->out);
  add_shard_option(app, st->shards, "cases");
  app.footer(
      "Case i draws its logits from seed and i alone; a shard takes the cases i with\n"
      "i % shards == index and tries --cases (or --seconds) of them, so shards split the seed\n"
      "space without overlap, each searching near its own worst cases, and `merge` joins them.\n"
      "Every worst case is shrunk (whole or one-decimal logits, zeros) while it keeps 90% of its\n"
      "residual. Exit 0 when the fp32\n"
      "kernels agreed with the oracle on every case tried, 1 when a counterexample was found.");

  return [st]() -> int {
    st->shard = runner::shard_from_env(st->shards);
    runner::Session session(st->out, st->threads);
    session.set_shard(st->shard);
    return session.finish(runner::run_fuzz(*st, session));
  };
}

}  // namespace mhc::cli
