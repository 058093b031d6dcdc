#include "mhc/runner/repro.hpp"

#include <cstdio>

#include "mhc/runner/check.hpp"

namespace mhc::runner {

std::string shell_quote(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                              "0123456789_-+=.,:/@%") == std::string::npos)
    return word;
  bool plain = true;  // no control or non-ASCII bytes: single quotes hold it
  for (unsigned char ch : word) plain = plain && ch >= 0x20 && ch < 0x7F;
  std::string q = plain ? "'" : "$'";  // else bash's $'...' with \xNN
  for (unsigned char ch : word) {
    if (ch == '\'') {
      q += plain ? "'\\''" : "\\'";
    } else if (!plain && (ch == '\\' || ch < 0x20 || ch >= 0x7F)) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", ch);
      q += ch == '\\' ? std::string("\\\\") : std::string(buf);
    } else {
      q += char(ch);
    }
  }
  return q + "'";
}

namespace {

std::string g9(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", x);
  return buf;
}

// route_scale is a double in the oracle: all its digits.
std::string g17(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

}  // namespace

std::string repro(const oracles::OpCase& c, const std::string& kernel, oracles::ErrorModel model) {
  using oracles::OpCase;
  const CheckSpec d;  // check's defaults
  const std::string model_flag =
      model == d.model ? "" : " --error-model " + oracles::error_model_name(model);
  if (c.origin == OpCase::Origin::file)  // a relative name that reads as an option: ./-x.h5
    return "mhc-verify compare " + shell_quote((c.file.rfind('-', 0) == 0 ? "./" : "") + c.file) +
           (c.file_case.empty() ? "" : " --case " + shell_quote(c.file_case)) +
           (c.precision_given ? " --precision " + shell_quote(oracles::precision_name(c.precision))
                              : "") +
           model_flag;
  if (c.origin == OpCase::Origin::derived) return "";
  const bool whole = oracles::op_spec(c.op).whole;
  std::string r = "mhc-verify check --kernel " + shell_quote(kernel) + " --op " +
                  oracles::op_name(c.op) + " --seed " + std::to_string(c.seed) + " --cases 1";
  const std::size_t tokens = whole ? c.tokens / c.batch : c.tokens;
  auto flag = [&r](bool differs, const char* name, const std::string& value) {
    if (differs) r += std::string(" --") + name + " " + value;
  };
  flag(tokens != d.tokens, "tokens", std::to_string(tokens));
  flag(c.precision != d.precision, "precision", oracles::precision_name(c.precision));
  r += model_flag;
  // A case holds its eps as the fp32 values the kernel computes with; %.9g reads back to them.
  flag(c.cfg.n != d.cfg.n, "n", std::to_string(c.cfg.n));
  flag(c.cfg.d != d.cfg.d, "dim", std::to_string(c.cfg.d));
  flag(c.cfg.iters != d.cfg.iters, "iters", std::to_string(c.cfg.iters));
  flag(float(c.cfg.hc_eps) != float(d.cfg.hc_eps), "hc-eps", g9(c.cfg.hc_eps));
  flag(float(c.cfg.norm_eps) != float(d.cfg.norm_eps), "norm-eps", g9(c.cfg.norm_eps));
  if (whole) {
    const ref::BlockConfig& b = c.block;
    flag(c.batch != d.batch, "batch", std::to_string(c.batch));
    flag(c.op == oracles::Op::stack && b.layers != d.block.layers, "layers",
         std::to_string(b.layers));
    flag(b.heads != d.block.heads, "heads", std::to_string(b.heads));
    flag(b.head_dim != d.block.head_dim, "head-dim", std::to_string(b.head_dim));
    flag(b.experts != d.block.experts, "experts", std::to_string(b.experts));
    flag(b.top_k != d.block.top_k, "top-k", std::to_string(b.top_k));
    flag(b.inter != d.block.inter, "inter", std::to_string(b.inter));
    flag(b.route_scale != d.block.route_scale, "route-scale", g17(b.route_scale));
  }
  return r;
}

std::string rerun_here(std::string repro, const Shard& shard, double kernel_seconds) {
  if (repro.empty()) return repro;
  if (shard.count > 1) repro += " --shards 1";
  const bool check = repro.rfind("mhc-verify check ", 0) == 0;  // compare runs no kernel
  if (check && kernel_seconds > 0 && kernel_seconds != CheckSpec{}.kernel_seconds)
    repro += " --kernel-timeout " + g9(kernel_seconds);
  return repro;
}

}  // namespace mhc::runner
