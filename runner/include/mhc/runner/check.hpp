// A kernel x op x configuration on generated cases (case i from seed + i): `check`, and each run
// of the gate's suite.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/ops.hpp"
#include "mhc/reference/block.hpp"
#include "mhc/reference/config.hpp"
#include "mhc/runner/judge.hpp"
#include "mhc/runner/session.hpp"

namespace mhc::runner {

// The defaults are `check`'s: a REPRO line names only the options that differ from them.
struct CheckSpec {
  std::string id;  // the entry's id; default "check KERNEL OP PRECISION"
  std::string kind = "check";
  std::string kernel = "cpu";
  oracles::Op op = oracles::Op::boundary;
  oracles::Precision precision = oracles::Precision::fp32();
  oracles::ErrorModel model = oracles::ErrorModel::standard;
  ref::Config cfg = ref::v41();
  ref::BlockConfig block;
  std::size_t batch = 1, tokens = 16;  // block, stack: tokens are positions per sequence
  int cases = 4;
  std::uint64_t seed = 1;
  unsigned threads = 0;
  bool diagnose = true;
  std::string save_dir = "mhc-failures";
  bool isolate = false;        // our kernels in a worker process too (plug-ins always are)
  double kernel_seconds = 60;  // a worker's time limit per case
  Limits limits;
  Shard shard;  // this run judges the cases i that shard takes
};

// Case i of the spec (seed + i).
oracles::OpCase check_case(const CheckSpec& spec, std::uint64_t seed);

struct CheckTally {
  int failed = 0, undecided = 0, skipped = 0, done = 0;
  int nondeterministic = 0;  // cases where two runs of the kernel differed
  std::string skip_reason;   // of the last skipped case
};
// Records the run as an entry of the session's report; prints FAIL, DIAGNOSIS, REPRO and SAVED
// lines as it goes.
CheckTally run_check(const CheckSpec& spec, Session& session);

}  // namespace mhc::runner
