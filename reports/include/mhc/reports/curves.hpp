// Plot data that the Verdicts do not hold, computed from a Case and the kernel's Trace.
#pragma once

#include <optional>

#include "mhc/oracles/ops.hpp"
#include "mhc/reports/report.hpp"

namespace mhc::reports {

// The Sinkhorn residual of one token against step, in double from the logits the kernel's comb
// came from (the case's mixes, else the kernel's), and the residual of the kernel's comb.
// Nothing for an op without a comb.
std::optional<SinkhornCurve> sinkhorn_curve(const oracles::OpCase& c,
                                            const oracles::Trace<float>& got, std::size_t token = 0);

}  // namespace mhc::reports
