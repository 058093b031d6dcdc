// Bound tightness: observed error / bound of the straightforward fp32 kernel (`cpu`), per op,
// stage and error model, pooled over every element of every case. Usage:
// mhc-bench-tightness [cases] [tokens] [d] [precision] [backward]   (defaults 4 cases x 4 tokens at
// d = 5120, fp32; precision: a preset or parts, as check --precision, the kernel running what it
// declares; "backward": the backward ops instead, whose one bound every model shares)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "mhc/oracles/error_model.hpp"
#include "mhc/runner/driver.hpp"
#include "mhc/runner/judge.hpp"

using namespace mhc;

int main(int argc, char** argv) {
  const int cases = argc > 1 ? std::atoi(argv[1]) : 4;
  const std::size_t tokens = argc > 2 ? std::size_t(std::atol(argv[2])) : 4;
  ref::Config cfg = ref::v41();
  if (argc > 3) cfg.d = std::atoi(argv[3]);
  const oracles::Precision precision = oracles::precision_from_name(argc > 4 ? argv[4] : "fp32");
  std::printf(
      "tightness of the bounds on kernel cpu: n=%d d=%d iters=%d hc_eps=%g norm_eps=%g, "
      "%d cases x %zu tokens per op, %s\n",
      cfg.n, cfg.d, cfg.iters, cfg.hc_eps, cfg.norm_eps, cases, tokens, precision.name.c_str());
  std::printf("%-15s %-7s %-14s %12s %12s %12s\n", "op", "stage", "model", "median", "p99", "max");
  const oracles::ErrorModel models[] = {
      oracles::ErrorModel::rigorous, oracles::ErrorModel::probabilistic,
      oracles::ErrorModel::empirical, oracles::ErrorModel::standard};
  const bool backward = argc > 5 && std::string(argv[5]) == "backward";
  for (oracles::Op op : backward ? oracles::backward_ops() : oracles::all_ops()) {
    std::map<std::pair<std::string, int>, std::vector<double>> ratios;
    std::vector<std::string> order;
    for (int i = 0; i < cases; ++i) {
      const auto c = oracles::generate_case(op, cfg, tokens, std::uint64_t(100 + i), precision);
      const auto ran = runner::run(impl::cpu(), c, 0);
      if (!ran.ran()) throw std::runtime_error(ran.verdict.stages.at(0).reason);
      const auto& got = ran.got;
      for (int m = 0; m < 4; ++m) {
        runner::Judging j;
        j.model = models[m];
        const auto want = runner::shared_oracle(c, j).want;
        for (std::size_t s = 0; s < want.size(); ++s) {
          if (i == 0 && m == 0) order.push_back(want[s].name);
          auto& r = ratios[{want[s].name, m}];
          for (std::size_t e = 0; e < want[s].values.size(); ++e) {
            const auto& w = want[s].values[e];
            const double diff = std::fabs(double(got[s].values[e]) - w.v);
            if (std::isfinite(w.e) && w.e > 0) r.push_back(diff / w.e);
          }
        }
      }
    }
    for (const auto& stage : order)
      for (int m = 0; m < 4; ++m) {
        auto& r = ratios[{stage, m}];
        if (r.empty()) continue;
        std::sort(r.begin(), r.end());
        std::printf("%-15s %-7s %-14s %12.3g %12.3g %12.3g\n", oracles::op_name(op).c_str(),
                    stage.c_str(), oracles::error_model_name(models[m]).c_str(), r[r.size() / 2],
                    r[std::min(r.size() - 1, std::size_t(0.99 * double(r.size())))], r.back());
      }
  }
  return 0;
}
