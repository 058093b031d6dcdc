// mhc-verify sinkhorn map|captured|gain: the parser of runner/sinkhorn.hpp.
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "mhc/runner/sinkhorn.hpp"

namespace mhc::cli {

Run add_sinkhorn(CLI::App& app) {
  struct State {
    std::string what;
    std::vector<std::string> files;
    runner::MapSpec map;
    runner::CapturedSpec captured;
    runner::GainSpec gain;
    ConfigFlags cfg;
    unsigned threads = 0;
    int shards = 0;
    reports::Outputs out;
  };
  auto st = std::make_shared<State>();
  st->gain.cfg.d = 64;
  st->gain.block.layers = 30;
  st->gain.block.heads = 2;
  st->gain.block.head_dim = 16;
  st->gain.block.experts = 4;
  st->gain.block.inter = 32;
  st->cfg.cfg = st->gain.cfg;
  app.add_option("what", st->what, "map, captured or gain")
      ->required()
      ->check(CLI::IsMember({"map", "captured", "gain"}));
  app.add_option("files", st->files,
                 "captured: mhc-fixture or mhc-capture files with a comb (split_sinkhorn, mixes, "
                 "boundary, block, stack); gain: files with block or stack cases (none: a "
                 "generated stack)")
      ->check(CLI::ExistingFile);
  app.add_option("--cases", st->map.cases, "map: cases per structure family and logit scale")
      ->capture_default_str()
      ->check(CLI::Range(1L, 100000000L));
  app.add_option("--scales", st->map.scales, "map: logit scales (the structure's magnitude)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--eps", st->map.eps, "map: hc_eps values (used as their fp32 values)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--rounds", st->map.rounds, "map: Sinkhorn rounds K at which to measure")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  app.add_option("--seed", st->map.seed, "map, gain: seed")
      ->capture_default_str()
      ->check(whole_number());
  app.add_option("--max-rounds", st->captured.max_rounds,
                 "captured: rounds iterated per token; beyond, the rounds needed are predicted "
                 "from the theory's rate")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000000));
  app.add_option("--comb-scale", st->gain.comb_scale,
                 "gain, generated stack: factor on every site's hc_scale[2] (larger: combs "
                 "nearer a permutation)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--positions", st->gain.positions, "gain, generated stack: tokens per sequence")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t(1), std::size_t(1) << 16));
  app.add_option("--kernel", st->gain.kernels,
                 "gain, generated stack: kernels whose fp32 combs are multiplied too (repeatable)")
      ->capture_default_str()
      ->check(kernel_validator());
  add_config_options(app, st->cfg);
  add_block_options(app, st->gain.block, st->gain.batch, "--positions");
  app.add_option("--threads", st->threads, "threads (0: one per core); results do not depend on it")
      ->capture_default_str()
      ->check(whole_number(4096));
  add_report_options(app, st->out);
  add_shard_option(app, st->shards, "map: case indices; captured: files");
  app.footer(
      "map: for each structure family (bell noise, near-permutation, two blocks, rank one),\n"
      "logit scale, hc_eps and K, the share of cases whose comb has a line sum off from its\n"
      "limit 1 - hc_eps by more than 1e-3 and 1e-6 after K rounds (--n streams). From doubly\n"
      "stochastic the comb is off by up to hc_eps more: the limit's own distance.\n"
      "captured: per site of a model's capture, the comb's distance from doubly stochastic after\n"
      "the file's rounds, the rounds each token needs for 1e-3 and 1e-6, the share of tokens\n"
      "near a permutation.\n"
      "gain: the product of the combs over a stack's sites, per token; at each depth the\n"
      "largest absolute row sum (forward), column sum (backward) and spectral norm, for the\n"
      "oracle's combs and the kernels' fp32 ones. Without files, a generated stack of --layers\n"
      "Blocks (--dim, --n, --iters, --hc-eps: the configuration).\n"
      "docs/semantics.md, \"Sinkhorn convergence\", derives the theory. Exit 0, or 2 on a file\n"
      "that cannot be read or holds nothing to measure.");
  return [st]() -> int {
    if (const auto why = ref::validate(st->cfg.cfg); !why.empty()) throw std::invalid_argument(why);
    const runner::Shard shard = runner::shard_from_env(st->shards);
    st->out.reads = st->files;
    runner::Session session(st->out, st->threads);
    session.set_shard(shard);
    if (st->what != "map" && st->what != "gain" && st->files.empty())
      throw std::invalid_argument("sinkhorn captured: name at least one file");
    if (st->what == "map") {
      if (!st->files.empty()) throw std::invalid_argument("sinkhorn map takes no files");
      st->map.n = st->cfg.cfg.n;
      st->map.threads = st->threads;
      st->map.shard = shard;
      return session.finish(runner::run_map(st->map, session));
    }
    if (st->what == "captured") {
      st->captured.files = st->files;
      st->captured.threads = st->threads;
      st->captured.shard = shard;
      return session.finish(runner::run_captured(st->captured, session));
    }
    if (shard.count > 1) throw std::invalid_argument("sinkhorn gain is not sharded");
    st->gain.files = st->files;
    st->gain.cfg = st->cfg.cfg;
    st->gain.seed = st->map.seed;
    st->gain.judging.threads = st->threads;
    return session.finish(runner::run_gain(st->gain, session));
  };
}

}  // namespace mhc::cli
