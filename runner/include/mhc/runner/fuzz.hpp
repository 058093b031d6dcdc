// fuzz sinkhorn: a campaign over comb logits for the inputs that leave the Sinkhorn farthest
// from doubly stochastic after K rounds, and for inputs on which fp32 kernels and the oracle
// disagree beyond bounds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mhc/runner/judge.hpp"
#include "mhc/runner/session.hpp"

namespace mhc::runner {

struct FuzzSpec {
  std::uint64_t cases = 200000, seed = 1;
  double seconds = 0;  // > 0: run this long instead of a case count
  double eps = 1e-6;
  int iters = 20, n = 4, keep = 5, kernel_every = 64;
  unsigned threads = 1;  // reference evaluations at once (0: one per core); results do not
                         // depend on it
  std::string save = "mhc-failures";
  std::vector<std::string> kernels{"cpu", "cpu-fused"};
  Shard shard;                 // this process takes the cases i that shard takes
  bool isolate = false;        // our kernels in a worker process too (plug-ins always are)
  double kernel_seconds = 60;  // a worker's time limit per case
  Limits limits;
};

// Case i draws its logits from seed and i alone. The kernels are judged on every
// kernel_every-th case of the seed space (the same cases however the run is sharded). Returns
// 1 when a kernel disagreed with the oracle, else 0; throws when a kernel ran on no case.
int run_fuzz(const FuzzSpec& spec, Session& session);

}  // namespace mhc::runner
