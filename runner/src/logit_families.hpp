// Comb logits with the structures that make the Sinkhorn slow (docs/semantics.md, "Sinkhorn
// convergence"), shared by the fuzz campaign and the convergence map.
#pragma once

#include <string>
#include <vector>

#include "mhc/oracles/random.hpp"

namespace mhc::runner {

enum class Family { bell, near_permutation, two_blocks, rank_one };
const std::vector<Family>& all_families();
std::string family_name(Family f);

// A family at a magnitude: the noise's scale (bell), the planted entries' size
// (near_permutation), the gap between the blocks (two_blocks), the scale of the row and column
// terms (rank_one). The structured families add unit-scale noise.
struct Structure {
  Family family = Family::bell;
  double magnitude = 1;
};

// n x n logits from rng. Without `fixed`, the fuzz's mixture: near-permutation 30% (entries
// 5..80), two blocks 20% (gap 5..60), rank one plus noise 10% (scale 20), bell-shaped noise 40%
// (scale 0.01..100 log-uniform), the same noise scale under the structures. With `fixed`, that
// family at that magnitude: the same draws, so the two describe one set of families.
void draw_logits(oracles::Rng& rng, int n, std::vector<double>& L,
                 const Structure* fixed = nullptr);

}  // namespace mhc::runner
