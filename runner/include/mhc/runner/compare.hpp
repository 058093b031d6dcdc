// Captured tensors judged: mhc-fixture files (fixtures/README.md), each a case with the outputs
// some implementation produced.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "mhc/oracles/error_model.hpp"
#include "mhc/runner/judge.hpp"
#include "mhc/runner/session.hpp"

namespace mhc::runner {

struct CompareSpec {
  std::vector<std::string> files;
  std::vector<std::string> cases;  // of capture files, only these names (empty: all)
  oracles::ErrorModel model = oracles::ErrorModel::standard;
  std::optional<oracles::Precision> precision;  // in place of each file's declaration
  unsigned threads = 0, read_timeout = 60;
  bool diagnose = true;
  Limits limits;
  Shard shard;  // this run takes the files i (in the order given) it takes
};

// One entry per case; prints a line per case (and FAIL, DIAGNOSIS and REPRO lines for a failing
// one). Returns the exit code: 0 all within bounds, 1 an output is not, 2 a file or a case is
// invalid (a capture's other cases are still judged).
int run_compare(const CompareSpec& spec, Session& session);

}  // namespace mhc::runner
