// mhc-verify: numerical verification of DeepSeek V4.1 mHC kernels against a certified oracle.
#include <cstdio>
#include <iostream>
#include <map>
#include <string>

#include "commands.hpp"
#include "mhc/reports/text.hpp"
#include "mhc/runner/driver.hpp"
#include "mhc/runner/session.hpp"

int main(int argc, char** argv) {
  mhc::runner::keep_freed_memory();
  mhc::runner::set_command_line(argc, argv);
  CLI::App app{
      "mhc-verify: differential verification of DeepSeek V4.1 multi-stream Hyper-Connection\n"
      "(mHC) kernels against a reference oracle evaluated in double and multiprecision.\n\n"
      "Exit codes: 0 all checks passed, 1 a check failed, 2 bad input, 3 nothing could be decided\n"
      "(check, compare, merge: every case undecidable), 130/143 interrupted by SIGINT/SIGTERM\n"
      "(the report keeps the finished cases).\n"};
  app.set_version_flag("--version", std::string("mhc-verify ") + MHC_VERSION);
  app.require_subcommand(1);

  app.footer(
      "Start with `mhc-verify selfcheck`: it certifies the oracle that every other check\n"
      "relies on. `mhc-verify SUBCOMMAND --help` explains each subcommand.");
  std::map<CLI::App*, mhc::cli::Run> runs;
  auto* selfcheck = app.add_subcommand(
      "selfcheck",
      "Certify the double oracle: evaluate the reference in double, MPFR (>= 256 bits) and MPFI\n"
      "(>= 200 bits) on generated cases, check that every interval encloses the MPFR value, and\n"
      "print per output the double oracle's max relative error. Exits 1 unless the double oracle\n"
      "is >= 1e6 times more accurate than fp32's unit roundoff (2^-24) everywhere.");
  runs[selfcheck] = mhc::cli::add_selfcheck(*selfcheck);
  auto* check = app.add_subcommand(
      "check",
      "Run a kernel differentially against the oracle on generated cases, judging every stage\n"
      "against derived per-element error bounds; a REPRO line per failure.");
  runs[check] = mhc::cli::add_check(*check);
  auto* mutants = app.add_subcommand(
      "mutants",
      "The mutation self-test: run the catalogue of wrong-but-plausible kernels (each must be\n"
      "caught and diagnosed) and of legitimate fp32 variants (none may be flagged); print the\n"
      "kill table.");
  runs[mutants] = mhc::cli::add_mutants(*mutants);
  auto* compare = app.add_subcommand(
      "compare", "Judge captured tensors: mhc-fixture HDF5 files, each against the oracle.");
  runs[compare] = mhc::cli::add_compare(*compare);
  auto* capture = app.add_subcommand(
      "capture", "Write an mhc-fixture file from one of our kernels on a generated case.");
  runs[capture] = mhc::cli::add_capture(*capture);
  auto* fuzz = app.add_subcommand(
      "fuzz",
      "fuzz sinkhorn: search comb logits for the largest distance from doubly stochastic after\n"
      "K rounds, and for fp32 kernels outside their bounds (shardable).");
  runs[fuzz] = mhc::cli::add_fuzz(*fuzz);
  auto* sinkhorn = app.add_subcommand(
      "sinkhorn",
      "The comb's Sinkhorn against its theory: a convergence map over logit structures, scales,\n"
      "hc_eps and rounds (map); per layer and site of a capture, the distance from doubly\n"
      "stochastic and the rounds needed (captured); the gain of the product of the combs over\n"
      "depth (gain).");
  runs[sinkhorn] = mhc::cli::add_sinkhorn(*sinkhorn);
  auto* gate = app.add_subcommand(
      "gate",
      "The CI gate: run a configured suite (kernels x ops x settings), fail on any failed verdict\n"
      "or on a stage whose error ratios regressed beyond the baseline's allowance; --update\n"
      "records the baseline.");
  runs[gate] = mhc::cli::add_gate(*gate);
  auto* merge = app.add_subcommand(
      "merge", "Merge JSON reports (runs, shards, CI jobs) into one report, with a summary last.");
  runs[merge] = mhc::cli::add_merge(*merge);

  // CLI11 would call a stray word "extra"; name it for what it most likely is.
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::string names;
    for (const auto* sub : app.get_subcommands({})) {
      known = known || sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "mhc-verify: error: unknown subcommand '%s' (known: %s)\n",
                   mhc::reports::clean_text(argv[1]).c_str(), names.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // The help of the subcommand the words name ("mhc-verify fuzz sinkhorn --help").
    std::string help = "mhc-verify";
    CLI::App* at = &app;
    for (int i = 1; i < argc && argv[i][0] != '-'; ++i) {
      CLI::App* sub = nullptr;
      for (auto* s : at->get_subcommands({}))
        if (s->get_name() == argv[i]) sub = s;
      if (!sub) break;
      help += " " + sub->get_name();
      at = sub;
    }
    std::fprintf(stderr, "mhc-verify: error: %s (see %s --help)\n",
                 mhc::reports::clean_text(e.what()).c_str(), help.c_str());
    return 2;
  }
  for (auto& [sub, run] : runs)
    if (sub->parsed()) {
      try {
        return run();
      } catch (const std::bad_alloc&) {  // a case the limits let through, on a smaller machine
        std::fprintf(stderr,
                     "mhc-verify %s: error: out of memory: this machine cannot hold what the run "
                     "needs (lower the sizes, or --case-memory to refuse such cases up front)\n",
                     sub->get_name().c_str());
        return 2;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "mhc-verify: error: %s\n", mhc::reports::clean_text(e.what()).c_str());
        return 2;
      }
    }
  return 2;
}
