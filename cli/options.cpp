// The options the subcommands share, and the choices of enum options from the library's lists.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>
#include <filesystem>

#include "commands.hpp"
#include "mhc/impl/kernels.hpp"
#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/ops.hpp"

namespace mhc::cli {

bool ConfigFlags::given() const {
  for (auto* o : {n, dim, iters, hc_eps, norm_eps})
    if (o && o->count() > 0) return true;
  return false;
}

void add_config_options(CLI::App& app, ConfigFlags& f) {
  f.n = app.add_option("--n", f.cfg.n, "parallel residual streams (hc_mult), >= 1")
            ->capture_default_str();
  f.dim = app.add_option("--dim", f.cfg.d, "hidden width d, >= 1")->capture_default_str();
  f.iters = app.add_option("--iters", f.cfg.iters, "Sinkhorn rounds (column divisions), >= 1")
                ->capture_default_str();
  f.hc_eps = app.add_option("--hc-eps", f.cfg.hc_eps, "eps of pre and of Sinkhorn, >= 0")
                 ->capture_default_str();
  f.norm_eps = app.add_option("--norm-eps", f.cfg.norm_eps, "eps of the RMS statistics, >= 0")
                   ->capture_default_str();
}

void add_block_options(CLI::App& app, ref::BlockConfig& b, std::size_t& batch,
                       const char* positions) {
  app.add_option("--batch", batch,
                 std::string("block, stack: sequences per case (") + positions + " positions each)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t(1), std::size_t(1) << 16));
  auto count = [&app](const char* name, int& v, const char* help, int most) {
    app.add_option(name, v, help)->capture_default_str()->check(CLI::Range(1, most));
  };
  count("--layers", b.layers, "stack: Blocks in the stack", 64);
  count("--heads", b.heads, "block, stack: attention heads", 1024);
  count("--head-dim", b.head_dim, "block, stack: head width", 4096);
  count("--experts", b.experts, "block, stack: routed experts", 4096);
  count("--top-k", b.top_k, "block, stack: experts chosen per token", 4096);
  count("--inter", b.inter, "block, stack: expert hidden width", 1 << 20);
  app.add_option("--route-scale", b.route_scale, "block, stack: routing weight scale")
      ->capture_default_str();
}

std::string kernel_names() {
  return "cpu, cpu-fused, cuda, cuda-fused (with a CUDA device), plugin:PATH.so (your kernels, "
         "impl/plugin/README.md), or a mutation self-test kernel variant:NAME / mutant:NAME "
         "(mhc-verify mutants --list)";
}

void add_limit_options(CLI::App& app, runner::Limits& limits) {
  app.add_option_function<double>(
         "--case-memory", [&limits](double gib) { limits.memory = gib * double(1ull << 30); },
         "GiB one case may take: judging (estimated before the case runs: a larger case is "
         "refused, naming its sizes) and a kernel's worker process [16]")
      ->check(CLI::Range(0.001, 1e6));
  app.add_option(
         "--case-operations", limits.operations,
         "the reference's arithmetic operations judging one case may take (estimated before "
         "it runs; 1e11 is about 10 minutes of one core)")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1e18));
}

void add_worker_options(CLI::App& app, double& kernel_seconds, runner::Limits& limits) {
  app.add_option("--kernel-timeout", kernel_seconds,
                 "seconds a worker process may take for one case before it is killed")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 86400.0));
  add_limit_options(app, limits);
}

void add_report_options(CLI::App& app, reports::Outputs& out) {
  auto* g =
      app.add_option_group("Reports", "written as the run goes (atomically), complete at the end");
  g->add_option("--json", out.json, "JSON report (schema mhc-report/1, reports/schema/)");
  g->add_option("--md", out.md, "Markdown summary");
  g->add_option("--html", out.html, "self-contained HTML page with plots");
  g->add_option("--junit", out.junit, "JUnit XML for CI systems");
}

void add_shard_option(CLI::App& app, int& shards, const std::string& unit) {
  auto* g = app.add_option_group(
      "Sharding",
      "one part of a campaign run on many machines; `mhc-verify merge` joins the parts");
  g->add_option("--shards", shards,
                "how many shards, for schedulers that give only the index (a Kubernetes Indexed "
                "Job: JOB_COMPLETION_INDEX); 1: the whole campaign, whatever the environment "
                "says. The index comes from TEST_SHARD_INDEX (with TEST_TOTAL_SHARDS), "
                "SLURM_ARRAY_TASK_ID (with SLURM_ARRAY_TASK_COUNT) or JOB_COMPLETION_INDEX; "
                "shard k of N takes the " +
                    unit + " i with i % N == k")
      ->check(CLI::Range(1, 1 << 20));
}

CLI::Validator kernel_validator() {
  return CLI::Validator(
      [](std::string& name) -> std::string {
        try {
          return impl::find_backend(name) ? "" : "unknown kernel '" + name + "'";
        } catch (const std::exception& e) {
          return e.what();
        }
      },
      "KERNEL");
}

CLI::Validator whole_number(unsigned long long most) {
  return CLI::Validator(
      [most](std::string& text) -> std::string {
        const bool digits = !text.empty() && text.size() <= 20 &&
                            text.find_first_not_of("0123456789") == std::string::npos;
        errno = 0;
        const unsigned long long v = digits ? std::strtoull(text.c_str(), nullptr, 10) : 0;
        if (!digits || errno == ERANGE || v > most)
          return "expected a whole number from 0 to " + std::to_string(most) + ", got '" + text +
                 "'";
        return "";
      },
      "0.." + std::to_string(most));
}

CLI::Validator folder_to_save_in() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        std::error_code ec;
        if (!path.empty() && std::filesystem::exists(path, ec) &&
            !std::filesystem::is_directory(path, ec))
          return "'" + path + "' is a file, not a folder";
        return "";
      },
      "DIR");
}

void CaseFlags::add(CLI::App& app, const std::string& kernel_help) {
  app.add_option("--kernel", spec.kernel, kernel_help + ": " + kernel_names())
      ->capture_default_str()
      ->check(kernel_validator());
  app.add_option("--op", op,
                 "operation: split_sinkhorn, mixes (with its split), pre, post, rmsnorm, "
                 "boundary (hc_post, then mixes, split and hc_pre of the new streams), block (one "
                 "whole Block: attention and MoE sublayers between mHC boundaries), stack "
                 "(--layers Blocks), or the backward of any of them, <op>_backward (given "
                 "upstream_<output> gradients, the kernel's grad_<input> per token and, for the "
                 "pieces and the boundary, grad_<param> summed over tokens; the pieces' and the "
                 "boundary's under fp32 or declarations of inputs, weights and streams, e.g. "
                 "bf16; the Block's and a stack's under fp32)")
      ->capture_default_str()
      ->check(CLI::IsMember(op_names()));
  add_block_options(app, spec.block, spec.batch);
  app.add_option("--seed", spec.seed, "seed S of the first case")
      ->capture_default_str()
      ->check(whole_number());
  app.add_option("--tokens", spec.tokens, "tokens per case (block, stack: per sequence)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t(1), std::size_t(1) << 20));
  app.add_option("--precision", precision,
                 "the precision the kernel declares: a preset, fp32; tf32 (the mixes projection "
                 "on tf32-rounded operands); bf16 (stream tensors stored as bf16); "
                 "bf16-projection (the projection on bf16-rounded operands, fp32 sums); fp16 "
                 "(inputs, weights and streams stored, and the projection's operands rounded, "
                 "as fp16; fp32 sums); or parts KEY=F joined by commas, parts left out fp32: "
                 "storage of inputs, weights, mixes, coefficients (pre, post, comb) and streams "
                 "(fp32|bf16|fp16), the projection's products (fp32|tf32|bf16|fp16) and "
                 "accumulation (fp32|bf16), and intermediates (fp32|bf16|fp16: every result "
                 "inside hc_pre, hc_post, RMSNorm and the mixes, as PyTorch eager rounds "
                 "each operation's output); e.g. streams=bf16,mixes=bf16,products=bf16")
      ->capture_default_str()
      ->check(precision_validator());
  add_config_options(app, cfg);
}

runner::CheckSpec& CaseFlags::resolve() {
  if (const auto why = ref::validate(cfg.cfg, spec.block); !why.empty())
    throw std::invalid_argument(why);
  spec.cfg = cfg.cfg;
  spec.op = oracles::op_from_name(op);
  spec.precision = oracles::precision_from_name(precision);
  const bool whole = oracles::op_spec(spec.op).whole;
  runner::within_limits(spec.op, spec.cfg, spec.block,
                        double(spec.tokens) * double(whole ? spec.batch : 1),
                        double(whole ? spec.batch : 1), spec.limits);
  return spec;
}

std::vector<std::string> op_names(bool with_block) {
  std::vector<std::string> v;
  for (oracles::Op op : oracles::all_ops()) v.push_back(oracles::op_name(op));
  for (oracles::Op op : oracles::backward_ops()) v.push_back(oracles::op_name(op));
  if (with_block) {
    for (oracles::Op op : oracles::block_ops()) v.push_back(oracles::op_name(op));
    for (oracles::Op op : oracles::block_backward_ops()) v.push_back(oracles::op_name(op));
  }
  return v;
}

CLI::Validator precision_validator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        try {
          oracles::precision_from_name(text);
          return "";
        } catch (const std::invalid_argument& e) {
          return e.what();
        }
      },
      "PRESET|PARTS");
}

std::vector<std::string> error_model_names() {
  std::vector<std::string> v;
  for (oracles::ErrorModel m : oracles::all_error_models())
    v.push_back(oracles::error_model_name(m));
  return v;
}

}  // namespace mhc::cli
