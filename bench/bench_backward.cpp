// The backward oracle's cost on the boundary: per token, gradients with their bounds
// (oracles::backward_trace) at n = 4 and growing d, median of repeats, under the allocator policy
// the CLI sets. Usage: mhc-bench-backward [TOKENS] [REPEATS] [THREADS]. Results: bench/README.md.
#include <cstdio>
#include <cstdlib>

#include "mhc/oracles/backward.hpp"
#include "mhc/runner/driver.hpp"
#include "timing.hpp"

using namespace mhc;

int main(int argc, char** argv) {
  const std::size_t T = argc > 1 ? std::size_t(std::atoi(argv[1])) : 4;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  const unsigned threads = argc > 3 ? unsigned(std::atoi(argv[3])) : 1;
  runner::keep_freed_memory();
  std::printf("%6s %18s\n", "d", "bounded ms/token");
  for (int d : {64, 256, 1024, 5120}) {
    ref::Config c = ref::v41();
    c.d = d;
    const oracles::OpCase k =
        oracles::generate_case(oracles::Op::boundary_backward, c, T, 1, oracles::Precision::fp32());
    oracles::backward_trace(k, threads);  // warm: the allocator's heap grows once
    const double s = bench::median_seconds(repeats, [&] { oracles::backward_trace(k, threads); });
    std::printf("%6d %18.3f\n", d, 1e3 * s / double(T));
    std::fflush(stdout);
  }
}
