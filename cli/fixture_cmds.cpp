// mhc-verify compare (judge captured fixtures) and capture (write one from our kernels).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "driver.hpp"
#include "session.hpp"
#include "mhc/reports/curves.hpp"
#include "mhc/fixtures/fixture.hpp"
#include "mhc/oracles/diagnosis.hpp"
#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/verdict.hpp"

namespace mhc::cli {

Run add_compare(CLI::App& app) {
  struct State {
    std::vector<std::string> files;
    std::string model = "standard";
    unsigned threads = 0, read_timeout = 60;
    reports::Outputs out;
  };
  auto st = std::make_shared<State>();
  app.add_option("files", st->files, "mhc-fixture/1 HDF5 files (layout: fixtures/README.md)")->required();
  app.add_option("--error-model", st->model, "rigorous, probabilistic, empirical or standard")
      ->capture_default_str()
      ->check(CLI::IsMember({"rigorous", "probabilistic", "empirical", "standard"}));
  app.add_option("--threads", st->threads, "threads for the oracle (0: one per core)")->capture_default_str();
  app.add_option("--read-timeout", st->read_timeout,
                 "seconds a file may take to read before it is declared malformed (HDF5 can loop "
                 "forever on a corrupt file)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 86400u));
  add_report_options(app, st->out);
  app.footer(
      "Each file's Case is rebuilt from its inputs, params and config, the oracle evaluated with\n"
      "bounds for its declared precision (root or config attribute `precision`: fp32 by default,\n"
      "tf32, bf16; outputs stored as bf16 include that rounding), and each output and\n"
      "/outputs/trace stage present is judged. One line per file. Exit 0: all within bounds;\n"
      "1: an output is not; 2: a file is unreadable or invalid (the message names the file, the\n"
      "dataset and what was expected).");
  return [st]() -> int {
    const oracles::ErrorModel model = oracles::error_model_from_name(st->model);
    Session session(st->out, st->threads);
    Progress progress("compare", long(st->files.size()));
    int rc = 0;
    for (std::size_t i = 0; i < st->files.size() && !session.stop(); ++i) {
      const std::string& f = st->files[i];
      reports::Entry& entry = session.report.entry("compare " + f);
      entry.kind = "compare";
      entry.error_model = st->model;
      reports::CaseRecord rec;
      rec.index = i;
      rec.label = f;
      try {
        const auto fx = fixtures::read_fixture(f, st->read_timeout);
        entry.op = oracles::op_name(fx.c.op);
        entry.precision = fx.c.precision;
        entry.settings = {{"n", std::to_string(fx.c.cfg.n)}, {"d", std::to_string(fx.c.cfg.d)},
                          {"iters", std::to_string(fx.c.cfg.iters)},
                          {"tokens", std::to_string(fx.c.tokens)}};
        if (!fx.producer.empty()) entry.facts.push_back({"producer", fx.producer});
        for (const auto& name : fx.skipped)
          std::fprintf(stderr, "%s: /outputs/trace/%s: unknown stage, skipped\n", f.c_str(), name.c_str());
        if (fx.outputs.empty()) {
          std::printf("NOTHING %s: no outputs to judge (%s, %zu tokens)\n", f.c_str(),
                      oracles::op_name(fx.c.op).c_str(), fx.c.tokens);
          rec.verdict.state = oracles::State::skipped;
        } else {
          rec.verdict = fixtures::judge_fixture(fx, model, st->threads);
          const auto& v = rec.verdict;
          double worst = 0;
          std::string worst_stage;
          for (const auto& s : v.stages)
            if (s.state != oracles::State::skipped && s.ratio_max >= worst) {
              worst = s.ratio_max;
              worst_stage = s.stage;
            }
          const bool fail = v.state == oracles::State::fail;
          if (fail) {
            rc = std::max(rc, 1);
            rec.repro = "mhc-verify compare " + f;
          }
          progress.done();
          std::printf("%s %s: %s, %zu tokens, %s; worst ratio %.3g (%s)%s%s\n",
                      fail ? "FAIL" : v.state == oracles::State::pass ? "PASS" : "UNDECIDED",
                      f.c_str(), oracles::op_name(fx.c.op).c_str(), fx.c.tokens, fx.c.precision.c_str(),
                      worst, worst_stage.c_str(), fail ? "; first divergent stage " : "",
                      fail ? v.first_divergent.c_str() : "");
          if (auto curve = reports::sinkhorn_curve(fx.c, fx.outputs)) entry.sinkhorn.push_back(*curve);
        }
      } catch (const fixtures::FixtureError& e) {
        std::fprintf(stderr, "mhc-verify: error: %s\n", e.what());
        std::printf("INVALID %s\n", f.c_str());
        oracles::StageVerdict sv;
        sv.stage = "file";
        sv.state = oracles::State::fail;
        sv.rule = "invalid";
        sv.reason = e.what();
        rec.verdict.state = oracles::State::fail;
        rec.verdict.first_divergent = "file";
        rec.verdict.stages.push_back(sv);
        entry.facts.push_back({"error", e.what()});
        rc = 2;
      }
      entry.add_case(std::move(rec));
      session.update();
      progress.step(long(i + 1));
    }
    progress.done();
    const auto& es = session.report.entries;
    const auto n = [&](oracles::State x) {
      return std::count_if(es.begin(), es.end(), [&](const reports::Entry& e) { return e.count(x) > 0; });
    };
    std::printf("compare: %s (%zu files: %ld pass, %ld fail, %ld undecided or skipped)\n",
                rc == 0 ? "PASS" : "FAIL", es.size(), long(n(oracles::State::pass)),
                long(n(oracles::State::fail)),
                long(es.size()) - long(n(oracles::State::pass)) - long(n(oracles::State::fail)));
    return session.finish(rc);
  };
}

Run add_capture(CLI::App& app) {
  struct State {
    std::string kernel = "cpu", op = "boundary", out, precision = "fp32";
    std::uint64_t seed = 1;
    std::size_t tokens = 4, batch = 1;
    ref::BlockConfig block;
    ConfigFlags cfg;
    reports::Outputs reports;
  };
  auto st = std::make_shared<State>();
  app.add_option("--kernel", st->kernel, "kernel whose outputs are captured: " + kernel_names())
      ->capture_default_str()
      ->check(kernel_validator());
  app.add_option("--op", st->op, "operation (as for check)")
      ->capture_default_str()
      ->check(CLI::IsMember({"split_sinkhorn", "mixes", "pre", "post", "rmsnorm", "boundary", "block", "stack"}));
  app.add_option("--out", st->out, "the fixture file to write")->required();
  app.add_option("--seed", st->seed, "seed of the generated case")->capture_default_str();
  app.add_option("--tokens", st->tokens, "tokens (block, stack: positions per sequence)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t(1), std::size_t(1) << 20));
  app.add_option("--precision", st->precision, "fp32, tf32 or bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}));
  add_block_options(app, st->block, st->batch);
  add_config_options(app, st->cfg);
  add_report_options(app, st->reports);
  app.footer(
      "Generates the case of `check --seed S --cases 1` with the same options (note the\n"
      "default --tokens: 4 here, 16 in check), runs the kernel, and writes the\n"
      "inputs, params, config and the kernel's outputs (and, for block and stack, every\n"
      "stage under /outputs/trace) as an mhc-fixture/1 file.");
  return [st]() -> int {
    if (const auto why = ref::validate(st->cfg.cfg, st->block); !why.empty()) throw std::invalid_argument(why);
    const oracles::Op op = oracles::op_from_name(st->op);
    const bool whole = op == oracles::Op::block || op == oracles::Op::stack;
    const auto c = whole ? oracles::generate_block_case(op, st->cfg.cfg, st->block, st->batch, st->tokens, st->seed, st->precision)
                         : oracles::generate_case(op, st->cfg.cfg, st->tokens, st->seed, st->precision);
    Session session(st->reports);
    reports::Entry& entry = session.report.entry("capture " + st->out);
    entry.kind = "capture";
    entry.kernel = st->kernel;
    entry.op = st->op;
    entry.precision = st->precision;
    entry.settings = {{"seed", std::to_string(st->seed)}, {"tokens", std::to_string(c.tokens)}};
    entry.facts = {{"file", st->out}};
    const auto got = driver::run_kernel(*impl::find_backend(st->kernel), c, 0);
    fixtures::write_fixture(st->out, c, got,
                            "mhc-verify capture --kernel " + st->kernel + " --op " + st->op +
                                " --seed " + std::to_string(st->seed));
    std::printf("capture: wrote %s (%s, %zu tokens, kernel %s)\n", st->out.c_str(), st->op.c_str(),
                c.tokens, st->kernel.c_str());
    return session.finish(0);
  };
}

}  // namespace mhc::cli
