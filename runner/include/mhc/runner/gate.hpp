// The CI gate: a configured suite (kernels x ops x settings) against a stored baseline. Fails on
// any failed verdict, and on a stage whose observed/bound ratios grew beyond the allowance
// recorded in the baseline; update records the current results deliberately (gate/README.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mhc/runner/judge.hpp"
#include "mhc/runner/session.hpp"

namespace mhc::runner {

struct GateSpec {
  std::string suite, baseline;
  std::vector<std::string> kernels;  // instead of the suite's own
  bool update = false;
  unsigned threads = 0;
  bool isolate = true;         // every kernel in a worker process: a crash fails its case
  double kernel_seconds = 60;  // a worker's time limit per case
  Limits limits;
  Shard shard;  // this run takes the suite's entries i (in the order it lists them) it takes
};

// The suite and baseline read and checked (std::invalid_argument naming the file, line and what
// is wrong), then run.
class GatePlan {
 public:
  explicit GatePlan(const GateSpec& spec);
  // Returns the exit code: 0 passed (or recorded), 1 a verdict failed, a stage regressed or an
  // entry is new.
  int run(Session& session) const;

 private:
  struct Data;
  GateSpec spec_;
  std::shared_ptr<const Data> d_;
};

}  // namespace mhc::runner
