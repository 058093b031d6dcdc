// Subcommands of mhc-verify. Each is a parser that fills a spec and calls the runner library
// (runner/): it registers its options and returns the run, which returns the exit code: 0
// success, 1 a verification failed, 2 bad input.
#pragma once

#include <CLI/CLI.hpp>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "mhc/reference/block.hpp"
#include "mhc/reference/config.hpp"
#include "mhc/reports/report.hpp"
#include "mhc/runner/check.hpp"

namespace mhc::cli {

using Run = std::function<int()>;

// Adds --n --dim --iters --hc-eps --norm-eps, defaulting to the V4.1 values. Returns the flag
// that says whether any was given.
struct ConfigFlags {
  ref::Config cfg = ref::v41();
  bool given() const;
  CLI::Option *n = nullptr, *dim = nullptr, *iters = nullptr, *hc_eps = nullptr,
              *norm_eps = nullptr;
};
void add_config_options(CLI::App& app, ConfigFlags& flags);
// Adds --batch and the Block's shape (--layers --heads --head-dim --experts --top-k --inter
// --route-scale), each with its range: check and capture generate the same cases.
// positions: the option that gives the positions of a sequence ("--tokens", "--positions").
void add_block_options(CLI::App& app, ref::BlockConfig& block, std::size_t& batch,
                       const char* positions = "--tokens");
// The options that name a generated case, shared by check and capture (capture writes the case
// of `check --seed S --cases 1`): --kernel --op --seed --tokens --precision, the configuration
// and the Block's shape.
struct CaseFlags {
  runner::CheckSpec spec;
  std::string op = oracles::op_name(runner::CheckSpec{}.op);
  std::string precision = oracles::precision_name(runner::CheckSpec{}.precision);
  ConfigFlags cfg;
  void add(CLI::App& app, const std::string& kernel_help);
  // spec with the options applied; throws std::invalid_argument on a configuration it refuses.
  runner::CheckSpec& resolve();
};

// The kernels --kernel accepts, for help texts.
std::string kernel_names();
// Validates --kernel: a built-in backend, variant:NAME, mutant:NAME or plugin:PATH (loaded here,
// so that a plug-in that cannot load is a bad-input error naming the file and the reason).
CLI::Validator kernel_validator();
// Digits only, at most `most`: CLI11 reads "-1", "1e23" and "" into unsigned options as 2^64-1
// or 0.
CLI::Validator whole_number(unsigned long long most = ~0ull);
// A folder to save into: a directory, or a path not there yet (made on the first save); not a
// file, which would only be found at the first failure (each save then a warning).
CLI::Validator folder_to_save_in();
// --case-memory and --case-operations (runner::Limits).
void add_limit_options(CLI::App& app, runner::Limits& limits);
// --kernel-timeout for the worker processes, and the limits.
void add_worker_options(CLI::App& app, double& kernel_seconds, runner::Limits& limits);
// --json --md --html --junit.
void add_report_options(CLI::App& app, reports::Outputs& out);
// --shards (runner::shard_from_env): what a shard takes, e.g. "cases".
void add_shard_option(CLI::App& app, int& shards, const std::string& unit);
// The choices of an enum option, from the library's list ("fp32, tf32, bf16").
std::vector<std::string> op_names(bool with_block = true);
CLI::Validator precision_validator();
std::vector<std::string> error_model_names();

Run add_selfcheck(CLI::App& app);
Run add_check(CLI::App& app);
Run add_mutants(CLI::App& app);
Run add_compare(CLI::App& app);
Run add_capture(CLI::App& app);
Run add_fuzz(CLI::App& app);
Run add_sinkhorn(CLI::App& app);
Run add_gate(CLI::App& app);
Run add_merge(CLI::App& app);

}  // namespace mhc::cli
