#include "mhc/oracles/pieces.hpp"

#include "mhc/oracles/generate.hpp"

namespace mhc::oracles {

PiecesCase generate_pieces(const ref::Config& cfg, std::size_t tokens, std::uint64_t seed) {
  Rng rng(seed);
  PiecesCase c;
  c.cfg = cfg;
  c.tokens = tokens;
  c.seed = seed;
  // A zero token has r = 1/sqrt(norm_eps); with norm_eps = 0 that is 0 * inf, undefined in exact
  // arithmetic too, so none is generated then.
  c.x = gen::activations(rng, tokens, cfg.stream_size(), cfg.norm_eps > 0);
  c.f = gen::activations(rng, tokens, std::size_t(cfg.d), false);
  c.pre_mix = gen::pre_weights(rng, cfg, tokens);
  c.post = gen::post_weights(rng, cfg, tokens);
  c.comb = gen::combs(rng, cfg, tokens);
  c.hc_fn = gen::hc_fn(rng, cfg);
  c.hc_scale = gen::hc_scale(rng);
  c.hc_base = gen::hc_base(rng, cfg);
  c.norm_weight = gen::norm_weight(rng, std::size_t(cfg.d));
  return c;
}

}  // namespace mhc::oracles
