// mhc-verify compare (judge captured fixtures) and capture (write one from our kernels).
#include <algorithm>
#include <cstdio>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"
#include "mhc/fixtures/fixture.hpp"
#include "mhc/reports/text.hpp"
#include "mhc/runner/check.hpp"
#include "mhc/runner/compare.hpp"
#include "mhc/runner/judge.hpp"
#include "mhc/runner/repro.hpp"

namespace mhc::cli {

Run add_compare(CLI::App& app) {
  struct State {
    runner::CompareSpec spec;
    std::string model = "standard", precision;
    int shards = 0;
    reports::Outputs out;
  };
  auto st = std::make_shared<State>();
  app.add_option("files", st->spec.files,
                 "mhc-fixture files (one case) or mhc-capture files (many: a model's forward); "
                 "layout: fixtures/README.md")
      ->required();
  app.add_option("--case", st->spec.cases,
                 "judge only the cases of these names in capture files (repeatable)");
  app.add_option("--error-model", st->model, "rigorous, probabilistic, empirical or standard")
      ->capture_default_str()
      ->check(CLI::IsMember(error_model_names()));
  app.add_option("--precision", st->precision,
                 "judge every case under this declaration instead of its file's (as check "
                 "--precision: a preset or parts); e.g. fp32, to see what a declaration allows")
      ->check(precision_validator());
  app.add_option("--threads", st->spec.threads,
                 "threads for the oracle (0 or more than the cores: one per core)")
      ->capture_default_str()
      ->check(whole_number(4096));
  app.add_option("--read-timeout", st->spec.read_timeout,
                 "seconds the reader may take for one case (a fixture file, or one case of a "
                 "capture) before the file is declared malformed (HDF5 can loop forever on a "
                 "corrupt file)")
      ->capture_default_str()
      ->check(CLI::Range(1u, 86400u));
  app.add_flag("!--no-diagnosis", st->spec.diagnose,
               "do not look for the catalogued deviation that explains a failure");
  add_limit_options(app, st->spec.limits);
  add_report_options(app, st->out);
  add_shard_option(app, st->shards, "files (in the order given)");
  app.footer(
      "Each file's Case is rebuilt from its inputs, params and config, the oracle evaluated with\n"
      "bounds for its declared precision (root or config attribute `precision`: fp32 by default,\n"
      "or a preset or parts as check --precision says; --precision replaces it; outputs stored\n"
      "as bf16 or fp16 include that rounding), and each output and\n"
      "/outputs/trace stage present is judged. One line per case (FILE, or FILE[name] for a\n"
      "capture's); a failing case also gets its DIAGNOSIS and REPRO lines. Exit 0: all within\n"
      "bounds; 1: an output is not; 2: a file or case is unreadable or invalid (the message names\n"
      "the file, the case, the dataset and what was expected), has no outputs to judge or is too\n"
      "large to judge (INVALID: counted apart from failures; a capture's later cases are still\n"
      "judged); 3: UNDECIDED, no case could be decided (an infinite input gives infinite bounds):\n"
      "nothing was checked.");
  return [st]() -> int {
    st->spec.model = oracles::error_model_from_name(st->model);
    if (!st->precision.empty()) st->spec.precision = oracles::precision_from_name(st->precision);
    st->spec.shard = runner::shard_from_env(st->shards);
    st->out.reads = st->spec.files;
    runner::Session session(st->out, st->spec.threads);
    session.set_shard(st->spec.shard);
    return session.finish(runner::run_compare(st->spec, session));
  };
}

Run add_capture(CLI::App& app) {
  struct State : CaseFlags {
    std::string out;
    bool captured_sublayers = false;
    reports::Outputs reports;
  };
  auto st = std::make_shared<State>();
  st->spec.tokens = 4;
  st->add(app, "kernel whose outputs are captured");
  app.add_option("--out", st->out,
                 "the fixture file to write (through a symlink; not a FIFO, device or directory)")
      ->required();
  app.add_flag("--captured-sublayers", st->captured_sublayers,
               "block, stack: write the case as a model's capture would be, its sublayers black "
               "boxes (config sublayers = captured): the mHC params and norms only, each "
               "sublayer's output in the trace");
  add_limit_options(app, st->spec.limits);
  add_report_options(app, st->reports);
  app.footer(
      "Generates the case of `check --seed S --cases 1` with the same options (note the\n"
      "default --tokens: 4 here, 16 in check), runs the kernel, and writes the\n"
      "inputs, params, config and the kernel's outputs (and, for block and stack, every\n"
      "stage under /outputs/trace) as an mhc-fixture file.");
  return [st]() -> int {
    runner::CheckSpec& spec = st->resolve();
    const auto c = runner::check_case(spec, spec.seed);
    st->reports.writes = {st->out};
    runner::Session session(st->reports);
    reports::Entry& entry = session.report.entry("capture " + st->out);
    entry.kind = "capture";
    entry.kernel = spec.kernel;
    entry.op = st->op;
    entry.precision = st->precision;
    entry.settings = {{"seed", std::to_string(spec.seed)}, {"tokens", std::to_string(c.tokens)}};
    entry.facts = {{"file", st->out}};
    auto ran = runner::run(*impl::find_backend(spec.kernel), c, 0);
    if (!ran.ran()) {
      session.finish(2);
      throw std::runtime_error(ran.verdict.stages.at(0).reason);
    }
    oracles::OpCase written = c;
    if (st->captured_sublayers) {
      if (!oracles::op_spec(c.op).whole || oracles::op_spec(c.op).backward)
        throw std::invalid_argument(
            "--captured-sublayers: only block and stack have sublayers to capture (a backward "
            "differentiates the reference's)");
      written.block.captured_sublayers = true;
      const auto keep = oracles::case_layout(written).params;
      for (auto it = written.params.begin(); it != written.params.end();)
        it = std::any_of(keep.begin(), keep.end(),
                         [&](const oracles::NamedShape& k) { return k.name == it->first; })
                 ? std::next(it)
                 : written.params.erase(it);
    }
    // The producer reruns the capture: check's REPRO of the case (every option that differs
    // from check's defaults), as a capture, with its token count whatever it is.
    std::string producer = runner::repro(c, spec.kernel, spec.model);
    const std::string check_line = "mhc-verify check ", one = " --cases 1";
    producer.replace(0, check_line.size(), "mhc-verify capture ");
    producer.erase(producer.rfind(one), one.size());  // the kernel's name comes before it
    if (producer.find(" --tokens ") == std::string::npos)
      producer += " --tokens " +
                  std::to_string(oracles::op_spec(c.op).whole ? c.tokens / c.batch : c.tokens);
    if (st->captured_sublayers) producer += " --captured-sublayers";
    fixtures::write_fixture(st->out, written, ran.got, producer);
    std::printf("capture: wrote %s (%s, %zu tokens, kernel %s)\n",
                reports::clean_text(st->out).c_str(), st->op.c_str(), c.tokens,
                reports::clean_text(spec.kernel).c_str());
    return session.finish(0);
  };
}

}  // namespace mhc::cli
