// mhc-verify compare (judge captured fixtures) and capture (write one from our kernels).
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "driver.hpp"
#include "mhc/fixtures/fixture.hpp"
#include "mhc/oracles/diagnosis.hpp"
#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/verdict.hpp"

namespace mhc::cli {
namespace {

std::string json_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    if (static_cast<unsigned char>(ch) < 0x20) {
      char b[8];
      std::snprintf(b, sizeof b, "\\u%04x", ch);
      o += b;
      continue;
    }
    o += ch;
  }
  return o;
}

}  // namespace

Run add_compare(CLI::App& app) {
  struct State {
    std::vector<std::string> files;
    std::string json, model = "standard";
    unsigned threads = 0;
  };
  auto st = std::make_shared<State>();
  app.add_option("files", st->files, "mhc-fixture/1 HDF5 files (SPEC section 6)")->required();
  app.add_option("--json", st->json, "write the per-file, per-stage verdicts as JSON to PATH");
  app.add_option("--error-model", st->model, "rigorous, probabilistic, empirical or standard")
      ->capture_default_str()
      ->check(CLI::IsMember({"rigorous", "probabilistic", "empirical", "standard"}));
  app.add_option("--threads", st->threads, "threads for the oracle (0: one per core)")->capture_default_str();
  app.footer(
      "Each file's Case is rebuilt from its inputs, params and config, the oracle evaluated with\n"
      "bounds for its declared precision (root or config attribute `precision`: fp32 by default,\n"
      "tf32, bf16; outputs stored as bf16 include that rounding), and each output and\n"
      "/outputs/trace stage present is judged. One line per file. Exit 0: all within bounds;\n"
      "1: an output is not; 2: a file is unreadable or invalid (the message names the file, the\n"
      "dataset and what was expected).");
  return [st]() -> int {
    const oracles::ErrorModel model = oracles::error_model_from_name(st->model);
    int rc = 0;
    std::string json = "[\n";
    for (std::size_t i = 0; i < st->files.size(); ++i) {
      const std::string& f = st->files[i];
      std::string entry;
      try {
        const auto fx = fixtures::read_fixture(f);
        for (const auto& name : fx.skipped)
          std::fprintf(stderr, "%s: /outputs/trace/%s: unknown stage, skipped\n", f.c_str(), name.c_str());
        if (fx.outputs.empty()) {
          std::printf("NOTHING %s: no outputs to judge (%s, %zu tokens)\n", f.c_str(),
                      oracles::op_name(fx.c.op).c_str(), fx.c.tokens);
          entry = "{\"file\": \"" + json_escape(f) + "\", \"verdict\": \"skipped\"}";
        } else {
          const auto v = fixtures::judge_fixture(fx, model, st->threads);
          double worst = 0;
          std::string worst_stage;
          for (const auto& s : v.stages)
            if (s.state != oracles::State::skipped && s.ratio_max >= worst) {
              worst = s.ratio_max;
              worst_stage = s.stage;
            }
          const bool fail = v.state == oracles::State::fail;
          if (fail) rc = std::max(rc, 1);
          std::printf("%s %s: %s, %zu tokens, %s; worst ratio %.3g (%s)%s%s\n",
                      fail ? "FAIL" : v.state == oracles::State::pass ? "PASS" : "UNDECIDED",
                      f.c_str(), oracles::op_name(fx.c.op).c_str(), fx.c.tokens, fx.c.precision.c_str(),
                      worst, worst_stage.c_str(), fail ? "; first divergent stage " : "",
                      fail ? v.first_divergent.c_str() : "");
          entry = "{\"file\": \"" + json_escape(f) + "\", \"op\": \"" + oracles::op_name(fx.c.op) +
                  "\", \"verdict\": \"" + oracles::state_name(v.state) + "\", \"first_divergent\": \"" +
                  v.first_divergent + "\", \"stages\": [";
          for (std::size_t k = 0; k < v.stages.size(); ++k) {
            const auto& s = v.stages[k];
            char buf[512];
            std::snprintf(buf, sizeof buf,
                          "%s{\"stage\": \"%s\", \"state\": \"%s\", \"rule\": \"%s\", \"ratio_max\": %.6g, "
                          "\"ratio_p99\": %.6g, \"worst_index\": %zu, \"reason\": \"%s\"}",
                          k ? ", " : "", s.stage.c_str(), oracles::state_name(s.state).c_str(),
                          s.rule.c_str(), std::isfinite(s.ratio_max) ? s.ratio_max : 1e308,
                          std::isfinite(s.ratio_p99) ? s.ratio_p99 : 1e308, s.worst.index,
                          json_escape(s.reason).c_str());
            entry += buf;
          }
          entry += "]}";
        }
      } catch (const fixtures::FixtureError& e) {
        std::fprintf(stderr, "mhc-verify: error: %s\n", e.what());
        std::printf("INVALID %s\n", f.c_str());
        entry = "{\"file\": \"" + json_escape(f) + "\", \"verdict\": \"invalid\", \"error\": \"" +
                json_escape(e.what()) + "\"}";
        rc = 2;
      }
      json += "  " + entry + (i + 1 < st->files.size() ? ",\n" : "\n");
    }
    json += "]\n";
    if (!st->json.empty()) {
      const std::string tmp = st->json + ".tmp";
      std::ofstream(tmp) << json;
      if (std::rename(tmp.c_str(), st->json.c_str()) != 0) throw std::runtime_error("cannot write " + st->json);
    }
    return rc;
  };
}

Run add_capture(CLI::App& app) {
  struct State {
    std::string kernel = "cpu", op = "boundary", out, precision = "fp32";
    std::uint64_t seed = 1;
    std::size_t tokens = 4, batch = 1;
    ref::BlockConfig block;
    ConfigFlags cfg;
  };
  auto st = std::make_shared<State>();
  app.add_option("--kernel", st->kernel, "kernel backend")
      ->capture_default_str()
      ->check(CLI::Validator([](std::string& n) -> std::string { return impl::find_backend(n) ? "" : "unknown kernel '" + n + "'"; }, "KERNEL"));
  app.add_option("--op", st->op, "operation (as for check)")
      ->capture_default_str()
      ->check(CLI::IsMember({"split_sinkhorn", "mixes", "pre", "post", "rmsnorm", "boundary", "block", "stack"}));
  app.add_option("--out", st->out, "the fixture file to write")->required();
  app.add_option("--seed", st->seed, "seed of the generated case")->capture_default_str();
  app.add_option("--tokens", st->tokens, "tokens (block, stack: positions per sequence)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t(1), std::size_t(1) << 20));
  app.add_option("--batch", st->batch, "block, stack: sequences")->capture_default_str();
  app.add_option("--precision", st->precision, "fp32, tf32 or bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "tf32", "bf16"}));
  app.add_option("--layers", st->block.layers, "stack: Blocks")->capture_default_str();
  app.add_option("--heads", st->block.heads, "block, stack: heads")->capture_default_str();
  app.add_option("--head-dim", st->block.head_dim, "block, stack: head width")->capture_default_str();
  app.add_option("--experts", st->block.experts, "block, stack: experts")->capture_default_str();
  app.add_option("--top-k", st->block.top_k, "block, stack: experts per token")->capture_default_str();
  app.add_option("--inter", st->block.inter, "block, stack: expert width")->capture_default_str();
  add_config_options(app, st->cfg);
  app.footer("Generates the case of `check --seed S --cases 1`, runs the kernel, and writes the\n"
             "inputs, params, config and the kernel's outputs (and, for block and stack, every\n"
             "stage under /outputs/trace) as an mhc-fixture/1 file.");
  return [st]() -> int {
    if (const auto why = ref::validate(st->cfg.cfg, st->block); !why.empty()) throw std::invalid_argument(why);
    const oracles::Op op = oracles::op_from_name(st->op);
    const bool whole = op == oracles::Op::block || op == oracles::Op::stack;
    const auto c = whole ? oracles::generate_block_case(op, st->cfg.cfg, st->block, st->batch, st->tokens, st->seed, st->precision)
                         : oracles::generate_case(op, st->cfg.cfg, st->tokens, st->seed, st->precision);
    const auto got = driver::run_kernel(*impl::find_backend(st->kernel), c, 0);
    fixtures::write_fixture(st->out, c, got,
                            "mhc-verify capture --kernel " + st->kernel + " --op " + st->op +
                                " --seed " + std::to_string(st->seed));
    std::printf("capture: wrote %s (%s, %zu tokens, kernel %s)\n", st->out.c_str(), st->op.c_str(),
                c.tokens, st->kernel.c_str());
    return 0;
  };
}

}  // namespace mhc::cli
