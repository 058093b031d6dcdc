// Inside the runner: the kernel run in a worker process, and what run() and it share.
#pragma once

#include <string>

#include "mhc/runner/judge.hpp"

namespace mhc::runner {

// A verdict of the whole case (stage "kernel") by a case-level rule.
oracles::Verdict kernel_verdict(oracles::State state, const std::string& rule,
                                const std::string& why);
// Where the kernel changed a bit of its inputs or params: "x (element i: v -> w)", or "".
std::string changed_input(const oracles::OpCase& before, const oracles::OpCase& after);
// run() in a forked child, with Judging's time and memory limits.
Ran run_in_worker(const impl::Backend& b, const oracles::OpCase& c, unsigned threads,
                  const Judging& j);

}  // namespace mhc::runner
