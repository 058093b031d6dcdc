// mhc-verify sinkhorn: how far the comb's Sinkhorn is from doubly stochastic, and whether it
// matters (docs/semantics.md, "Sinkhorn convergence"):
//   map       the distance from the limit after K rounds over logit structure x scale x
//             hc_eps x K;
//   captured  per layer and site of a model's capture, the comb's distance from doubly
//             stochastic, the rounds it needs and the share of tokens near a permutation;
//   gain      the product of the combs over depth (a generated stack, or captured stacks): its
//             largest absolute row and column sums and spectral norm, exact and in the kernel's
//             fp32 combs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mhc/reference/block.hpp"
#include "mhc/runner/judge.hpp"
#include "mhc/runner/session.hpp"

namespace mhc::runner {

struct MapSpec {
  std::vector<double> scales{0.1, 1, 3, 10, 30, 100};
  std::vector<double> eps{0, 1e-6, 1e-4};  // used as their fp32 values, as kernels do
  std::vector<int> rounds{5, 10, 20, 40, 80};
  int n = 4;
  long cases = 500;  // per family and scale (every eps and K on the same logits)
  std::uint64_t seed = 1;
  unsigned threads = 1;
  Shard shard;  // takes case i of every cell when it takes i
};
// One entry with the map's cells; prints the table. Returns 0.
int run_map(const MapSpec& spec, Session& session);

struct CapturedSpec {
  std::vector<std::string> files;
  unsigned read_timeout = 60, threads = 0;
  int max_rounds = 1000;  // iterated; beyond, the rounds needed are the theory's prediction
  Shard shard;            // takes the files i it takes
};
// An entry per site (a case of an op with a comb, a layer's attn or ffn of a block or stack).
// Returns 0, or 2 when a file cannot be read or holds no comb.
int run_captured(const CapturedSpec& spec, Session& session);

struct GainSpec {
  std::vector<std::string> files;  // captured blocks or stacks; none: a generated stack
  // The generated stack: tokens = batch x positions of a V4.1-shaped stack at width d, its combs'
  // logits scaled by comb_scale (hc_scale[2]; larger: nearer a permutation).
  ref::Config cfg = ref::v41();
  ref::BlockConfig block;
  std::size_t batch = 1, positions = 16;
  std::uint64_t seed = 1;
  double comb_scale = 1;
  std::vector<std::string> kernels{"cpu"};
  Judging judging;
  unsigned read_timeout = 60;
};
// An entry per stack (generated, or per file and case) with the oracle's and each kernel's
// curves; prints the gains at depths 1, 2, 4, ... Returns 0, or 2 on an unreadable file.
int run_gain(const GainSpec& spec, Session& session);

}  // namespace mhc::runner
