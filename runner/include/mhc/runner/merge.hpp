// Several reports (runs, shards, CI jobs) as one, with a line per entry and the verdict last.
#pragma once

#include <string>
#include <vector>

#include "mhc/reports/report.hpp"
#include "mhc/runner/session.hpp"

namespace mhc::runner {

class MergePlan {
 public:
  // Reads the reports (throws naming the file that is not one, or a shard given twice).
  explicit MergePlan(std::vector<std::string> files);
  // Shards of one campaign (the same command line and shard count) are joined: an entry several
  // of them hold becomes one (Entry::join), and a shard none of the files holds is named
  // MISSING. Other entries keep their ids (a repeated one gets its file's name). Returns 0 when
  // every entry met its expectation and every part completed with exit 0, and no shard is
  // missing; else 1.
  int run(Session& session);
  // After run: every part complete and no shard missing.
  bool complete() const { return complete_; }

 private:
  bool complete_ = true;
  std::vector<std::string> files_;
  std::vector<reports::Report> parts_;
};

}  // namespace mhc::runner
