// Runs a kernel backend on a Case: allocates its outputs, poisons them, calls the kernel and
// returns its Trace. The one place where impl/ meets oracles/; judge.hpp builds the lifecycle on
// it.
#pragma once

#include "mhc/impl/kernels.hpp"
#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/ops.hpp"

namespace mhc::runner {

impl::KernelConfig kernel_config(const oracles::OpCase& c, unsigned threads);

// Throws impl::NotCompiled for a backend without the op; any exception from the kernel passes.
oracles::Trace<float> run_kernel(const impl::Backend& b, const oracles::OpCase& c,
                                 unsigned threads = 0);

// Keep freed memory in the process's heap for the next case. Each case allocates and frees
// traces of up to ~200 MB (the boundary's x at 512 tokens is 168 MB of value and bound); glibc
// maps each such block afresh, so every case pays a page fault per 4 KB and two threads contend
// for the address-space lock: 35-45% of the bound-carrying oracle's time on the boundary
// (bench/README.md). Called once by the executables; the resident size stays at its peak.
void keep_freed_memory();

}  // namespace mhc::runner
