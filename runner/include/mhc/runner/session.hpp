// What every run shares: its report (written incrementally and atomically), progress on long
// runs, and SIGINT/SIGTERM handling.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "mhc/reports/report.hpp"
#include "mhc/runner/shard.hpp"

namespace mhc::runner {

// The command line, for the report's metadata (set by the executable's main).
void set_command_line(int argc, const char* const* argv);

class Session {
 public:
  explicit Session(const reports::Outputs& out, unsigned threads = 0);
  reports::Report report;
  // Records the shard this run is in the report, and says it on stderr when there is one.
  void set_shard(const Shard& shard);
  // After each finished case: the report on disk is brought up to date (throttled).
  void update();
  // True once SIGINT or SIGTERM arrived: stop starting cases, then call finish.
  bool stop() const;
  // Writes the final report; returns the exit code: `code`, or 128 + signal when interrupted.
  // complete: false when the run holds less than it set out to (a merge with a part incomplete
  // or missing); the report says so, as an interrupted one does.
  int finish(int code, bool complete = true);

 private:
  reports::Writer writer_;
};

// Progress of a long loop on stderr: a line rewritten in place on a terminal (at most 10 times a
// second), else a plain line every tenth of the work (and at least every 30 s). While an item
// takes long (a slow op's first case), a line says which item and what its judging is doing
// (set_phase), each second on a terminal, else every 10 s.
class Progress {
 public:
  // total: items to do (0: not known); seconds: a time-bounded run's limit (progress is then the
  // time spent of it).
  Progress(std::string what, long total, double seconds = 0);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;
  void step(long done, const std::string& status = "");
  void done();

 private:
  void print(long done, const std::string& status);  // with mu_ held
  std::string what_;
  long total_, last_tenth_ = 0, done_ = 0;
  double seconds_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_;
  bool dirty_ = false, finished_ = false, started_ = false;
  std::mutex mu_;
  std::condition_variable wake_;
  std::thread beat_;
};

// What the judging of a case is doing now ("running the kernel", "evaluating the oracle"): a
// static string, shown by a Progress whose item takes long.
void set_phase(const char* phase);

// A run's summary word: "INTERRUPTED by SIGINT" (or SIGTERM) when a signal stopped it, whatever the
// finished cases said, else PASS or FAIL.
std::string run_outcome(bool ok);

// The exit of a run that judged cases and decided none (every one undecidable: an infinite
// bound, a routing tie): not a pass, since nothing was checked, and not a failure of the kernel.
constexpr int kUndecidedExit = 3;
constexpr const char* kUndecided = "UNDECIDED";
// Whether a run that judged `judged` cases (skipped ones not counted) and decided `decided` of
// them (passed or failed) ends so; an interrupted run ends as interrupted instead.
bool nothing_decided(long judged, long decided);

// The concise per-stage table of an entry, printed at the end of a run (and in the Python API's
// assertion messages).
std::string stage_table(const reports::Entry& e);
void print_stage_table(const reports::Entry& e);

}  // namespace mhc::runner
