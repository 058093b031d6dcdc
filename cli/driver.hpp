// Runs a kernel backend on a Case: allocates its outputs, poisons them, calls the kernel and
// returns its Trace. The one place where impl/ meets oracles/.
#pragma once

#include "mhc/impl/kernels.hpp"
#include "mhc/oracles/ops.hpp"

namespace mhc::driver {

impl::KernelConfig kernel_config(const oracles::OpCase& c, unsigned threads);

// Throws impl::NotCompiled for a backend without the op; any exception from the kernel passes.
oracles::Trace<float> run_kernel(const impl::Backend& b, const oracles::OpCase& c,
                                 unsigned threads = 0);

}  // namespace mhc::driver
