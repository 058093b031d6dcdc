// Several reports (runs, shards, CI jobs) as one, with a line per entry and the verdict last.
#pragma once

#include <string>
#include <vector>

#include "mhc/reports/report.hpp"
#include "mhc/runner/session.hpp"

namespace mhc::runner {

class MergePlan {
 public:
  // Reads the reports (throws naming the file that is not one).
  explicit MergePlan(std::vector<std::string> files);
  // Entries keep their ids (a repeated one gets its file's name). Returns 0 when every entry met
  // its expectation and every part completed with exit 0, else 1.
  int run(Session& session);

 private:
  std::vector<std::string> files_;
  std::vector<reports::Report> parts_;
};

}  // namespace mhc::runner
