// mhc-verify check: a kernel against the bound-carrying oracle on generated cases.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"
#include "driver.hpp"
#include "session.hpp"
#include "mhc/reports/curves.hpp"
#include "mhc/fixtures/fixture.hpp"
#include "mhc/impl/cuda.hpp"
#include "mhc/oracles/diagnosis.hpp"
#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/verdict.hpp"

namespace mhc::cli {

std::string config_flags(const ref::Config& c) {
  char buf[200];
  std::snprintf(buf, sizeof buf, "--n %d --dim %d --iters %d --hc-eps %.9g --norm-eps %.9g", c.n,
                c.d, c.iters, c.hc_eps, c.norm_eps);
  return buf;
}

std::string block_flags(const ref::BlockConfig& b, std::size_t batch) {
  char buf[200];
  std::snprintf(buf, sizeof buf,
                " --batch %zu --layers %d --heads %d --head-dim %d --experts %d --top-k %d "
                "--inter %d --route-scale %.9g",
                batch, b.layers, b.heads, b.head_dim, b.experts, b.top_k, b.inter, b.route_scale);
  return buf;
}

namespace {

std::string fmt(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

std::vector<std::pair<std::string, std::string>> block_settings(const ref::BlockConfig& b,
                                                                std::size_t batch) {
  return {{"batch", std::to_string(batch)},      {"layers", std::to_string(b.layers)},
          {"heads", std::to_string(b.heads)},    {"head_dim", std::to_string(b.head_dim)},
          {"experts", std::to_string(b.experts)}, {"top_k", std::to_string(b.top_k)},
          {"inter", std::to_string(b.inter)},    {"route_scale", fmt(b.route_scale)}};
}

}  // namespace

std::string repro_line(const CheckSpec& spec, std::uint64_t seed) {
  const oracles::Op op = oracles::op_from_name(spec.op);
  const bool whole = op == oracles::Op::block || op == oracles::Op::stack;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "mhc-verify check --kernel %s --op %s --precision %s --error-model %s --seed %llu "
                "--cases 1 --tokens %zu %s%s",
                spec.kernel.c_str(), spec.op.c_str(), spec.precision.c_str(), spec.model.c_str(),
                static_cast<unsigned long long>(seed), spec.tokens, config_flags(spec.cfg).c_str(),
                whole ? block_flags(spec.block, spec.batch).c_str() : "");
  return buf;
}

CheckTally run_check(const CheckSpec& spec, Session& session) {
  const impl::Backend* backend = impl::find_backend(spec.kernel);
  const oracles::Op op = oracles::op_from_name(spec.op);
  const ref::Config cfg = spec.cfg;
  const oracles::ErrorModel model = oracles::error_model_from_name(spec.model);
  const bool whole = op == oracles::Op::block || op == oracles::Op::stack;
  reports::Entry& entry = session.report.entry(spec.id.empty() ? "check " + backend->name + " " +
                                               spec.op + " " + spec.precision : spec.id);
  entry.kind = spec.kind;
  entry.kernel = backend->name;
  entry.op = spec.op;
  entry.precision = spec.precision;
  entry.error_model = spec.model;
  entry.settings = {{"n", std::to_string(cfg.n)},          {"d", std::to_string(cfg.d)},
                    {"iters", std::to_string(cfg.iters)},  {"hc_eps", fmt(cfg.hc_eps)},
                    {"norm_eps", fmt(cfg.norm_eps)},       {"tokens", std::to_string(spec.tokens)},
                    {"cases", std::to_string(spec.cases)},  {"seed", std::to_string(spec.seed)}};
  if (whole)
    for (const auto& kv : block_settings(spec.block, spec.batch)) entry.settings.push_back(kv);
  CheckTally tally;
  int& failed_cases = tally.failed;
  int& undecided_cases = tally.undecided;
  int& done = tally.done;
  Progress progress(entry.id, spec.cases);
  for (int i = 0; i < spec.cases && !session.stop(); ++i) {
    const std::uint64_t seed = spec.seed + std::uint64_t(i);
    const auto c = whole ? oracles::generate_block_case(op, cfg, spec.block, spec.batch, spec.tokens,
                                                        seed, spec.precision)
                         : oracles::generate_case(op, cfg, spec.tokens, seed, spec.precision);
    reports::CaseRecord rec;
    rec.index = std::size_t(i);
    rec.seed = seed;
    oracles::Trace<float> got;
    try {
      auto judged = driver::run_and_judge(*backend, c, model, spec.threads);
      rec.verdict = std::move(judged.verdict);
      got = std::move(judged.got);
    } catch (const impl::NotCompiled& e) {
      throw std::runtime_error("kernel " + backend->name + " cannot run here: " + e.what());
    }
    const oracles::Verdict& v = rec.verdict;
    if (v.state == oracles::State::fail) {
      progress.done();
      ++failed_cases;
      for (const auto& s : v.stages)
        if (s.stage == v.first_divergent)
          std::printf("FAIL case %d (seed %llu): first divergent stage '%s': %s\n", i,
                      static_cast<unsigned long long>(seed), s.stage.c_str(), s.reason.c_str());
      if (spec.diagnose && !got.empty()) {
        rec.diagnosis = oracles::describe_diagnosis(oracles::diagnose(c, got, spec.threads));
        std::printf("DIAGNOSIS: %s\n", rec.diagnosis.c_str());
      }
      rec.repro = repro_line(spec, seed);
      std::printf("REPRO: %s\n", rec.repro.c_str());
      if (!spec.save_dir.empty() && !got.empty()) {
        std::string kernel = backend->name;
        for (char& ch : kernel)
          if (ch == ':' || ch == '/') ch = '_';
        const std::string path = spec.save_dir + "/" + kernel + "_" + spec.op + "_seed" +
                                 std::to_string(seed) + ".h5";
        try {
          std::filesystem::create_directories(spec.save_dir);
          fixtures::write_fixture(path, c, got, rec.repro);
          rec.saved = path;
          std::printf("SAVED: %s\n", path.c_str());
        } catch (const std::exception& e) {
          std::fprintf(stderr, "mhc-verify: warning: could not save %s: %s\n", path.c_str(), e.what());
        }
      }
    } else if (v.state != oracles::State::pass) {
      ++undecided_cases;
    }
    // The Sinkhorn of the first case, and of each failing one.
    if ((i == 0 || v.state == oracles::State::fail) && entry.sinkhorn.size() < 4)
      if (auto curve = reports::sinkhorn_curve(c, got)) {
        curve->label = "case " + std::to_string(i) + " " + curve->label;
        entry.sinkhorn.push_back(std::move(*curve));
      }
    entry.add_case(std::move(rec));
    ++done;
    std::fflush(stdout);
    session.update();
    progress.step(done, failed_cases ? std::to_string(failed_cases) + " failed" : "");
  }
  progress.done();
  return tally;
}

Run add_check(CLI::App& app) {
  struct State {
    CheckSpec spec;
    bool list_rules = false, list_kernels = false;
    ConfigFlags cfg;
    reports::Outputs out;
  };
  auto st = std::make_shared<State>();
  app.add_option("--kernel", st->spec.kernel, "kernel under test: " + kernel_names())
      ->capture_default_str()
      ->check(kernel_validator());
  app.add_option("--op", st->spec.op,
                 "operation: split_sinkhorn, mixes (with its split), pre, post, rmsnorm, "
                 "boundary (hc_post, then mixes, split and hc_pre of the new streams), block (one "
                 "whole Block: attention and MoE sublayers between mHC boundaries) or stack "
                 "(--layers Blocks)")
      ->capture_default_str()
      ->check(CLI::IsMember(
          {"split_sinkhorn", "mixes", "pre", "post", "rmsnorm", "boundary", "block", "stack"}));
  add_block_options(app, st->spec.block, st->spec.batch);
  app.add_option("--cases", st->spec.cases, "generated cases; case i uses seed S+i")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--seed", st->spec.seed, "seed S of the first case")->capture_default_str();
  app.add_option("--tokens", st->spec.tokens, "tokens per case")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t(1), std::size_t(1) << 20));
  app.add_option("--precision", st->spec.precision,
                 "declared precision model of the kernel: fp32; tf32 (mixes projection on "
                 "tf32-rounded operands); bf16 (stream tensors stored as bf16)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}));
  app.add_option("--threads", st->spec.threads, "threads for the oracle and the kernel (0: one per core)")
      ->capture_default_str();
  app.add_option("--error-model", st->spec.model,
                 "bounds from: rigorous (every fp32 evaluation, every order), probabilistic "
                 "(Higham & Mary, lambda = 8; rigorous where fp32 sums are biased), empirical "
                 "(stochastic-rounding ensemble x 8), or standard (per stage, the model chosen "
                 "from measurements)")
      ->capture_default_str()
      ->check(CLI::IsMember({"rigorous", "probabilistic", "empirical", "standard"}));
  app.add_option("--save-failures", st->spec.save_dir,
                 "directory where each failing case is saved as an mhc-fixture/1 file (a "
                 "regression test: mhc-verify compare FILE); empty: do not save")
      ->capture_default_str();
  app.add_flag("!--no-diagnosis", st->spec.diagnose,
               "do not look for the catalogued deviation that explains a failure");
  app.add_flag("--list-kernels", st->list_kernels,
               "print the kernels that can run on this machine (CPU ones; CUDA ones when a device "
               "is present) and exit");
  app.add_flag("--rules", st->list_rules, "print the verdict rules with their justification and exit");
  add_config_options(app, st->cfg);
  add_report_options(app, st->out);
  app.footer(
      "Each case is generated from its seed, run through the kernel with every output poisoned\n"
      "(NaN payload) beforehand, and judged stage by stage against the oracle: the reference\n"
      "evaluated with a bound-carrying Scalar, which gives every element a derived bound on the\n"
      "error of any evaluation in the declared precision model. Prints a table per stage and a\n"
      "REPRO line per failing case. Exit 0: all pass; 1: a case failed; 2: bad input.");

  return [st]() -> int {
    if (st->list_kernels) {
      for (const auto* b : impl::backends()) std::printf("%s\n", b->name.c_str());
      if (impl::cuda_device_count() > 0)
        for (const auto* b : impl::gpu_backends()) std::printf("%s\n", b->name.c_str());
      return 0;
    }
    if (st->list_rules) {
      for (const auto& r : oracles::rules())
        std::printf("%-13s %s\n", r.name.c_str(), r.justification.c_str());
      return 0;
    }
    if (const auto why = ref::validate(st->cfg.cfg, st->spec.block); !why.empty())
      throw std::invalid_argument(why);
    st->spec.cfg = st->cfg.cfg;
    const ref::Config& cfg = st->spec.cfg;
    std::printf("check: error model %s\n", st->spec.model.c_str());
    std::printf("check: kernel %s, op %s, precision %s, n=%d d=%d iters=%d hc_eps=%g norm_eps=%g,"
                " %d cases x %zu tokens, seed %llu\n",
                st->spec.kernel.c_str(), st->spec.op.c_str(), st->spec.precision.c_str(), cfg.n,
                cfg.d, cfg.iters, cfg.hc_eps, cfg.norm_eps, st->spec.cases, st->spec.tokens,
                static_cast<unsigned long long>(st->spec.seed));
    std::fflush(stdout);
    Session session(st->out, st->spec.threads);
    const CheckTally tally = run_check(st->spec, session);
    const int failed_cases = tally.failed, undecided_cases = tally.undecided, done = tally.done;
    const reports::Entry& entry = session.report.entries.back();
    print_stage_table(entry);
    std::printf("check: %s (%d of %d cases failed%s)\n", failed_cases ? "FAIL" : "PASS",
                failed_cases, done,
                undecided_cases ? (", " + std::to_string(undecided_cases) + " not decided").c_str()
                                : "");
    return session.finish(failed_cases ? 1 : 0);
  };
}

}  // namespace mhc::cli
