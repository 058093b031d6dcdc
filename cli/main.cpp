// mhc-verify: numerical verification of DeepSeek V4.1 mHC kernels against a certified oracle.
#include <cstdio>
#include <iostream>
#include <map>
#include <string>

#include "commands.hpp"
#include "driver.hpp"
#include "session.hpp"

namespace mhc::cli {

bool ConfigFlags::given() const {
  for (auto* o : {n, dim, iters, hc_eps, norm_eps})
    if (o && o->count() > 0) return true;
  return false;
}

void add_config_options(CLI::App& app, ConfigFlags& f) {
  f.n = app.add_option("--n", f.cfg.n, "parallel residual streams (hc_mult), >= 1")
            ->capture_default_str();
  f.dim = app.add_option("--dim", f.cfg.d, "hidden width d, >= 1")->capture_default_str();
  f.iters = app.add_option("--iters", f.cfg.iters, "Sinkhorn rounds (column divisions), >= 1")
                ->capture_default_str();
  f.hc_eps = app.add_option("--hc-eps", f.cfg.hc_eps, "eps of pre and of Sinkhorn, >= 0")
                 ->capture_default_str();
  f.norm_eps = app.add_option("--norm-eps", f.cfg.norm_eps, "eps of the RMS statistics, >= 0")
                   ->capture_default_str();
}

void add_block_options(CLI::App& app, ref::BlockConfig& b, std::size_t& batch) {
  app.add_option("--batch", batch, "block, stack: sequences per case (--tokens positions each)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t(1), std::size_t(1) << 16));
  auto count = [&app](const char* name, int& v, const char* help, int most) {
    app.add_option(name, v, help)->capture_default_str()->check(CLI::Range(1, most));
  };
  count("--layers", b.layers, "stack: Blocks in the stack", 64);
  count("--heads", b.heads, "block, stack: attention heads", 1024);
  count("--head-dim", b.head_dim, "block, stack: head width", 4096);
  count("--experts", b.experts, "block, stack: routed experts", 4096);
  count("--top-k", b.top_k, "block, stack: experts chosen per token", 4096);
  count("--inter", b.inter, "block, stack: expert hidden width", 1 << 20);
  app.add_option("--route-scale", b.route_scale, "block, stack: routing weight scale")
      ->capture_default_str();
}

std::string kernel_names() {
  return "cpu, cpu-fused, cuda, cuda-fused (with a CUDA device), plugin:PATH.so (your kernels, "
         "impl/plugin/README.md), or a mutation self-test kernel variant:NAME / mutant:NAME "
         "(mhc-verify mutants --list)";
}

}  // namespace mhc::cli

int main(int argc, char** argv) {
  mhc::driver::keep_freed_memory();
  mhc::cli::set_command_line(argc, argv);
  CLI::App app{
      "mhc-verify: differential verification of DeepSeek V4.1 multi-stream Hyper-Connection\n"
      "(mHC) kernels against a reference oracle evaluated in double and multiprecision.\n\n"
      "Exit codes: 0 all checks passed, 1 a check failed, 2 bad input, 130/143 interrupted by\n"
      "SIGINT/SIGTERM (the report keeps the finished cases).\n"};
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
      "compare", "Judge captured tensors: mhc-fixture/1 HDF5 files, each against the oracle.");
  runs[compare] = mhc::cli::add_compare(*compare);
  auto* capture = app.add_subcommand(
      "capture", "Write an mhc-fixture/1 file from one of our kernels on a generated case.");
  runs[capture] = mhc::cli::add_capture(*capture);
  auto* fuzz = app.add_subcommand(
      "fuzz",
      "fuzz sinkhorn: search comb logits for the largest distance from doubly stochastic after\n"
      "K rounds, and for fp32 kernels outside their bounds (shardable).");
  runs[fuzz] = mhc::cli::add_fuzz(*fuzz);
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
      std::fprintf(stderr, "mhc-verify: error: unknown subcommand '%s' (known: %s)\n", argv[1],
                   names.c_str());
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    std::fprintf(stderr, "mhc-verify: error: %s (see mhc-verify --help)\n", e.what());
    return 2;
  }
  for (auto& [sub, run] : runs)
    if (sub->parsed()) {
      try {
        return run();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "mhc-verify: error: %s\n", e.what());
        return 2;
      }
    }
  return 2;
}
