// The certification of the double oracle against MPFR and MPFI (oracles/selfcheck.hpp), as a run:
// a report entry per case, a table per output, the verdict.
#pragma once

#include "mhc/oracles/selfcheck.hpp"
#include "mhc/runner/session.hpp"

namespace mhc::runner {

// Returns 0 when the double oracle is certified on every case, else 1.
int run_selfcheck(const oracles::SelfcheckOptions& opt, Session& session);

}  // namespace mhc::runner
