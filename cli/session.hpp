// What every subcommand shares: the report of the run (--json/--md/--html/--junit, written
// incrementally and atomically), progress on long runs, and SIGINT/SIGTERM handling.
#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <string>

#include "mhc/reference/block.hpp"
#include "mhc/reference/config.hpp"
#include "mhc/reports/report.hpp"

namespace mhc::cli {

// The command line, for the report's metadata (set by main).
void set_command_line(int argc, const char* const* argv);

void add_report_options(CLI::App& app, reports::Outputs& out);

// Validates --kernel: a built-in backend, variant:NAME, mutant:NAME or plugin:PATH (loaded here,
// so that a plug-in that cannot load is a bad-input error naming the file and the reason).
CLI::Validator kernel_validator();

class Session {
 public:
  explicit Session(const reports::Outputs& out, unsigned threads = 0);
  reports::Report report;
  // After each finished case: the report on disk is brought up to date (throttled).
  void update();
  // True once SIGINT or SIGTERM arrived: stop starting cases, then call finish.
  bool stop() const;
  // Writes the final report; returns the exit code: `code`, or 128 + signal when interrupted.
  int finish(int code);

 private:
  reports::Writer writer_;
};

// Progress of a long loop on stderr: a line rewritten in place on a terminal (at most 10 times a
// second), else a plain line every tenth of the work (and at least every 30 s).
class Progress {
 public:
  Progress(std::string what, long total);
  void step(long done, const std::string& status = "");
  void done();

 private:
  std::string what_;
  long total_, last_tenth_ = 0;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_;
  bool dirty_ = false;
};

// One kernel x op x configuration on generated cases (case i from seed + i), recorded as an
// entry of the session's report; prints FAIL, DIAGNOSIS, REPRO and SAVED lines as it goes.
struct CheckSpec {
  std::string id;  // the entry's id; default "check KERNEL OP PRECISION"
  std::string kind = "check";
  std::string kernel = "cpu", op = "boundary", precision = "fp32", model = "standard";
  ref::Config cfg = ref::v41();
  ref::BlockConfig block;
  std::size_t batch = 1, tokens = 16;
  int cases = 4;
  std::uint64_t seed = 1;
  unsigned threads = 0;
  bool diagnose = true;
  std::string save_dir = "mhc-failures";
};
struct CheckTally {
  int failed = 0, undecided = 0, done = 0;
};
CheckTally run_check(const CheckSpec& spec, Session& session);
// The check command that reruns exactly the case of `seed`.
std::string repro_line(const CheckSpec& spec, std::uint64_t seed);

// The flags of `check` that reproduce a configuration.
std::string config_flags(const ref::Config& c);

// The concise per-stage table of an entry, printed at the end of a run.
void print_stage_table(const reports::Entry& e);

}  // namespace mhc::cli
