// The mutation self-test: every wrong kernel of the catalogue must be caught (and, where its
// deviation is catalogued, named by the diagnosis); no legitimate one may be flagged.
#pragma once

#include <cstdint>

#include "mhc/oracles/error_model.hpp"
#include "mhc/runner/session.hpp"

namespace mhc::runner {

struct MutantsSpec {
  int cases = 1000, kill_budget = 300;
  std::uint64_t seed = 1;
  oracles::ErrorModel model = oracles::ErrorModel::standard;
  // Instead: the fixed-eps sensitivity report at the production values.
  bool production = false;
  int production_cases = 6;
  unsigned threads = 1;  // kernels judged at once on a case (0: one per core)
  Shard shard;           // this run takes the kernels i (in the kill table's order) it takes
};

// Prints the kill table (or the sensitivity report); returns 0 when the self-test passes, else 1.
int run_mutants(const MutantsSpec& spec, Session& session);

}  // namespace mhc::runner
