// The backward oracle's cost on the boundary: per token, the gradients alone (the recorded
// backward in double) and with their bounds (oracles::backward_trace), at n = 4 and growing d,
// one thread, median of repeats. Usage: mhc-bench-backward [REPEATS]. Results: bench/README.md.
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "mhc/oracles/backward.hpp"
#include "timing.hpp"

using namespace mhc;

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 3;
  const std::size_t T = 4;
  std::printf("%6s %16s %16s %10s\n", "d", "values ms/token", "bounded ms/token", "ratio");
  for (int d : {8, 16, 32, 64, 128, 256}) {
    ref::Config c = ref::v41();
    c.d = d;
    const oracles::OpCase k =
        oracles::generate_case(oracles::Op::boundary_backward, c, T, 1, oracles::Precision::fp32());
    // The values alone: the recorded backward of each token in double.
    const double values = bench::median_seconds(repeats, [&] {
      for (std::size_t t = 0; t < T; ++t) {
        oracles::Tensors<double> at, up;
        oracles::token_tensors(k, t, at, up);
        const auto g = rev::vjp<double>(
            [&](auto& x) {
              using V = std::decay_t<decltype(x[0][0])>;
              return oracles::forward_piece<V>(oracles::Op::boundary, c, x);
            },
            at, up);
        if (g.empty()) std::abort();
      }
    });
    const double bounded = bench::median_seconds(repeats, [&] { oracles::backward_trace(k, 1); });
    std::printf("%6d %16.3f %16.3f %10.1f\n", d, 1e3 * values / T, 1e3 * bounded / T,
                bounded / values);
    std::fflush(stdout);
  }
}
