// What every run shares: its report (written incrementally and atomically), progress on long
// runs, and SIGINT/SIGTERM handling.
#pragma once

#include <chrono>
#include <string>

#include "mhc/reports/report.hpp"

namespace mhc::runner {

// The command line, for the report's metadata (set by the executable's main).
void set_command_line(int argc, const char* const* argv);

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
  // total: items to do (0: not known); seconds: a time-bounded run's limit (progress is then the
  // time spent of it).
  Progress(std::string what, long total, double seconds = 0);
  void step(long done, const std::string& status = "");
  void done();

 private:
  std::string what_;
  long total_, last_tenth_ = 0;
  double seconds_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_;
  bool dirty_ = false;
};

// A run's summary word: "INTERRUPTED by SIGINT" (or SIGTERM) when a signal stopped it, whatever the
// finished cases said, else PASS or FAIL.
std::string run_outcome(bool ok);

// The concise per-stage table of an entry, printed at the end of a run (and in the Python API's
// assertion messages).
std::string stage_table(const reports::Entry& e);
void print_stage_table(const reports::Entry& e);

}  // namespace mhc::runner
