// mhc-verify mutants: the mutation self-test. Every wrong kernel of the catalogue must be caught
// (and, where its deviation is catalogued, named by the diagnosis); no legitimate one may be
// flagged. Prints the kill table.
#include <cstdio>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "commands.hpp"
#include "driver.hpp"
#include "mhc/impl/variants.hpp"
#include "mhc/oracles/diagnosis.hpp"
#include "mhc/oracles/verdict.hpp"

namespace mhc::cli {
namespace {

struct Row {
  const impl::Variant* v;
  impl::Backend backend;
  int cases = 0, failed = 0, undecided = 0;
  long killed_at = -1;
  std::string stage, diagnosis, repro;
  bool diagnosis_ok = true;
};

std::string repro_line(const std::string& kernel, const oracles::OpCase& c) {
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "mhc-verify check --kernel %s --op %s --seed %llu --cases 1 --tokens %zu --n %d "
                "--dim %d --iters %d --hc-eps %.9g --norm-eps %.9g",
                kernel.c_str(), oracles::op_name(c.op).c_str(),
                static_cast<unsigned long long>(c.seed), c.tokens, c.cfg.n, c.cfg.d, c.cfg.iters,
                c.cfg.hc_eps, c.cfg.norm_eps);
  return buf;
}

}  // namespace

Run add_mutants(CLI::App& app) {
  struct State {
    int cases = 1000, kill_budget = 300;
    std::uint64_t seed = 1;
    bool list = false;
  };
  auto st = std::make_shared<State>();
  app.add_option("--cases", st->cases, "generated cases every legitimate kernel must pass")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000));
  app.add_option("--kill-budget", st->kill_budget,
                 "cases within which every wrong kernel must be caught")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000));
  app.add_option("--seed", st->seed, "seed of the campaign")->capture_default_str();
  app.add_flag("--list", st->list, "list the catalogue and exit");
  app.footer(
      "Cases vary the op, n, d, iterations, hc_eps up to 1e-1 and norm_eps (see campaign_case),\n"
      "so that an eps misplaced below fp32 noise at 1e-6 becomes glaring. Exit 0 when every wrong\n"
      "kernel is killed and correctly diagnosed and no legitimate kernel is flagged, else 1.");

  return [st]() -> int {
    if (st->list) {
      for (const auto& v : impl::variant_catalogue())
        std::printf("%-34s %s\n", impl::backend_name(v).c_str(),
                    v.wrong ? ("wrong; diagnosis: " + (v.explains.empty() ? "none catalogued" : v.explains)).c_str()
                            : "legitimate");
      return 0;
    }
    std::vector<Row> rows;
    for (const auto& v : impl::variant_catalogue()) rows.push_back({&v, impl::make_backend(v)});
    const bool tty = isatty(STDERR_FILENO);
    const int total = std::max(st->cases, st->kill_budget);
    for (int i = 0; i < total; ++i) {
      const auto c = oracles::campaign_case(st->seed, std::uint64_t(i));
      const auto want = oracles::oracle_trace(c, 1);
      for (auto& r : rows) {
        if (r.v->wrong ? (r.killed_at >= 0 || i >= st->kill_budget) : i >= st->cases) continue;
        const auto got = driver::run_kernel(r.backend, c, 1);
        const auto verdict = oracles::compare(got, want);
        ++r.cases;
        if (verdict.state == oracles::State::undecidable) ++r.undecided;
        if (verdict.state != oracles::State::fail) continue;
        ++r.failed;
        if (r.failed > 1) continue;
        r.stage = verdict.first_divergent;
        r.repro = repro_line(r.backend.name, c);
        if (r.v->wrong) {
          r.killed_at = i;
          const auto names = oracles::diagnose(c, got, 1);
          r.diagnosis = names.empty() ? "-" : names[0];
          for (std::size_t k = 1; k < names.size(); ++k) r.diagnosis += "|" + names[k];
          bool named = r.v->explains.empty();
          for (const auto& nm : names) named = named || nm == r.v->explains;
          r.diagnosis_ok = named;
        }
      }
      if (tty && (i + 1) % 100 == 0) std::fprintf(stderr, "\r  %d/%d cases", i + 1, total);
    }
    if (tty) std::fprintf(stderr, "\r%*s\r", 30, "");

    int bad = 0;
    std::printf("%-34s %-6s %7s %8s %-9s %-28s %s\n", "kernel", "kind", "cases", "killed@", "stage",
                "diagnosis", "verdict");
    for (const auto& r : rows) {
      std::string verdict;
      if (r.v->wrong) {
        verdict = r.killed_at < 0 ? "SURVIVED" : !r.diagnosis_ok ? "MISDIAGNOSED" : "killed";
        if (r.killed_at >= 0 && r.v->explains.empty()) verdict = "killed (no catalogued deviation)";
      } else {
        verdict = r.failed ? "FLAGGED (" + std::to_string(r.failed) + " cases)" : "passed";
      }
      const bool ok = r.v->wrong ? r.killed_at >= 0 && r.diagnosis_ok : r.failed == 0;
      bad += ok ? 0 : 1;
      std::printf("%-34s %-6s %7d %8s %-9s %-28s %s\n", r.backend.name.c_str(),
                  r.v->wrong ? "wrong" : "legit", r.cases,
                  r.killed_at >= 0 ? std::to_string(r.killed_at).c_str() : "-",
                  r.stage.empty() ? "-" : r.stage.c_str(),
                  r.v->wrong ? r.diagnosis.c_str() : (r.undecided ? (std::to_string(r.undecided) + " undecidable").c_str() : "-"),
                  verdict.c_str());
      if (!ok && !r.repro.empty()) std::printf("  REPRO: %s\n", r.repro.c_str());
    }
    int wrong = 0, legit = 0;
    for (const auto& r : rows) (r.v->wrong ? wrong : legit)++;
    std::printf("\nmutants: %d wrong kernels (kill budget %d cases), %d legitimate (%d cases each): %s\n",
                wrong, st->kill_budget, legit, st->cases, bad ? "FAIL" : "PASS");
    return bad ? 1 : 0;
  };
}

}  // namespace mhc::cli
