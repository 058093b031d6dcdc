// REPRO lines: the command that rebuilds exactly a case and judges it the same way.
#pragma once

#include <string>

#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/ops.hpp"
#include "mhc/runner/shard.hpp"

namespace mhc::runner {

// For a generated case: `mhc-verify check --kernel K --op OP --seed S --cases 1` and every option
// whose value differs from check's default (tokens, precision, error model, configuration, the
// Block's shape); for a case read from or saved to a fixture: `mhc-verify compare FILE`. Empty
// for a case changed after it was generated and not saved (nothing can rebuild it).
std::string repro(const oracles::OpCase& c, const std::string& kernel, oracles::ErrorModel model);
// A REPRO line with what the run's own options add, so that it reruns the case where the run ran:
// `--shards 1` in a sharded run (else the shard's environment would take the one case away from a
// shard other than the first), and on a `check` line a worker's time limit other than check's
// default (0: none to repeat; a `compare` line runs no kernel). Empty stays empty.
std::string rerun_here(std::string repro, const Shard& shard, double kernel_seconds = 0);

// A word quoted for the shell where it needs to be.
std::string shell_quote(const std::string& word);

}  // namespace mhc::runner
