// REPRO lines: the command that rebuilds exactly a case and judges it the same way.
#pragma once

#include <string>

#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/ops.hpp"

namespace mhc::runner {

// For a generated case: `mhc-verify check --kernel K --op OP --seed S --cases 1` and every option
// whose value differs from check's default (tokens, precision, error model, configuration, the
// Block's shape); for a case read from or saved to a fixture: `mhc-verify compare FILE`. Empty
// for a case changed after it was generated and not saved (nothing can rebuild it).
std::string repro(const oracles::OpCase& c, const std::string& kernel, oracles::ErrorModel model);

// A word quoted for the shell where it needs to be.
std::string shell_quote(const std::string& word);

}  // namespace mhc::runner
