// Runs a kernel backend on a Case: allocates its outputs, poisons them, calls the kernel and
// returns its Trace. The one place where impl/ meets oracles/.
#pragma once

#include "mhc/impl/kernels.hpp"
#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/ops.hpp"
#include "mhc/oracles/verdict.hpp"

namespace mhc::driver {

impl::KernelConfig kernel_config(const oracles::OpCase& c, unsigned threads);

// Throws impl::NotCompiled for a backend without the op; any exception from the kernel passes.
oracles::Trace<float> run_kernel(const impl::Backend& b, const oracles::OpCase& c,
                                 unsigned threads = 0);

struct Judged {
  oracles::Trace<float> got;  // empty when the kernel threw
  oracles::Verdict verdict;
};

// Runs the kernel on the Case and judges it against the oracle (block and stack anchored on the
// kernel's own stages). A kernel that throws fails the case with the reason (stage "kernel",
// rule "threw") and the caller goes on; impl::NotCompiled passes through.
Judged run_and_judge(const impl::Backend& b, const oracles::OpCase& c, oracles::ErrorModel model,
                     unsigned threads = 0);

}  // namespace mhc::driver
