// mhc-verify selfcheck: the parser of runner::run_selfcheck.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"
#include "mhc/oracles/selfcheck.hpp"
#include "mhc/runner/selfcheck.hpp"

namespace mhc::cli {

Run add_selfcheck(CLI::App& app) {
  struct State {
    oracles::SelfcheckOptions opt;
    ConfigFlags cfg;
    reports::Outputs out;
  };
  auto st = std::make_shared<State>();
  app.add_option("--cases", st->opt.cases,
                 "cases to generate; even ones at the V4.1 sizes, odd ones small random configs")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--seed", st->opt.seed, "seed of the generated cases")
      ->capture_default_str()
      ->check(whole_number());
  app.add_option("--threads", st->opt.threads,
                 "worker threads (0 or more than the cores: one per core)")
      ->capture_default_str()
      ->check(whole_number(4096));
  add_config_options(app, st->cfg);
  add_report_options(app, st->out);
  app.footer(
      "With any of --n/--dim/--iters/--hc-eps/--norm-eps every case uses that configuration\n"
      "(the V4.1 value for the rest).");

  return [st]() -> int {
    std::function<ref::Config(int, std::uint64_t)> config_of = oracles::selfcheck_config;
    if (st->cfg.given()) {
      if (const auto why = ref::validate(st->cfg.cfg); !why.empty())
        throw std::invalid_argument(why);
      const ref::Config fixed = st->cfg.cfg;
      config_of = [fixed](int, std::uint64_t) { return fixed; };
    }
    oracles::SelfcheckOptions opt = st->opt;
    opt.config_of = config_of;
    runner::Session session(st->out, opt.threads);
    return session.finish(runner::run_selfcheck(opt, session));
  };
}

}  // namespace mhc::cli
