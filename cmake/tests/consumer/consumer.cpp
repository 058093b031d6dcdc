// Judges the fp32 CPU kernel's split_sinkhorn on two generated cases, as `mhc-verify check` would.
#include <cstdio>

#include "mhc/runner/check.hpp"

int main() {
  mhc::runner::CheckSpec spec;
  spec.op = mhc::oracles::Op::split_sinkhorn;
  spec.cases = 2;
  spec.tokens = 2;
  spec.save_dir = "";
  mhc::runner::Session session(mhc::reports::Outputs{});
  const mhc::runner::CheckTally t = mhc::runner::run_check(spec, session);
  std::printf("consumer: %d cases, %d failed\n", t.done, t.failed);
  return t.done == 2 && t.failed == 0 ? 0 : 1;
}
