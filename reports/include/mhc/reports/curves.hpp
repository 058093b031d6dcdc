// Plot data that the Verdicts do not hold, computed from a Case and the kernel's Trace.
#pragma once

#include <optional>
#include <string>

#include "mhc/oracles/ops.hpp"
#include "mhc/reference/mhc.hpp"
#include "mhc/reports/report.hpp"

namespace mhc::reports {

// max over rows and columns of |line sum - 1| after each step of a traced Sinkhorn; the kernel's
// residual is left NaN (none).
SinkhornCurve sinkhorn_curve(const ref::SinkhornTrace<double>& trace, int n, std::string label);

// The Sinkhorn residual of one token against step, in double from the logits the kernel's comb
// came from (the case's mixes, else the kernel's), and the residual of the kernel's comb.
// Nothing for an op without a comb.
std::optional<SinkhornCurve> sinkhorn_curve(const oracles::OpCase& c,
                                            const oracles::Trace<float>& got,
                                            std::size_t token = 0);

}  // namespace mhc::reports
