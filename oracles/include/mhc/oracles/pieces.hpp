// A Case of the mHC pieces (docs/semantics.md, "The mHC pieces") for a batch of tokens, its
// generator, and its evaluation through the reference in any Scalar: the Trace of named stage
// outputs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "mhc/oracles/parallel.hpp"
#include "mhc/reference/mhc.hpp"

namespace mhc::num {
// Frees this thread's MPFR caches (constants, exp tables); pool threads call it after each job.
void release_thread_caches();
}  // namespace mhc::num

namespace mhc::oracles {

// Inputs and one hc site's parameters, stored in fp32 as a kernel receives them.
struct PiecesCase {
  ref::Config cfg;
  std::size_t tokens = 1;
  std::uint64_t seed = 0;
  std::vector<float> x;            // [T, n, d] residual streams
  std::vector<float> f;            // [T, d] sublayer output
  std::vector<float> pre_mix;      // [T, n] reading weights computed by the previous sublayer
  std::vector<float> post;         // [T, n] writing weights, as the post op receives them
  std::vector<float> comb;         // [T, n, n]
  std::vector<float> hc_fn;        // [M, n*d]
  std::vector<float> hc_scale;     // [3]
  std::vector<float> hc_base;      // [M]
  std::vector<float> norm_weight;  // [d]
};

// Deterministic in (cfg, tokens, seed): Gaussian streams with per-token scales spanning 1e-3..1e3
// and a few massive channels, a zero token now and then, weights of varied scale.
PiecesCase generate_pieces(const ref::Config& cfg, std::size_t tokens, std::uint64_t seed);

// Stage outputs, in the order docs/semantics.md, "The mHC pieces" lists them. Each piece reads
// the case's fp32 inputs, as the ops of the fixture table (fixtures/README.md) do; only pre, post
// and comb are computed from computed mixes.
template <class S>
struct PiecesTrace {
  std::vector<S> mixes;    // [T, M]     mixes(x)
  std::vector<S> pre;      // [T, n]     split_sinkhorn(mixes)
  std::vector<S> post;     // [T, n]
  std::vector<S> comb;     // [T, n, n]
  std::vector<S> hc_pre;   // [T, d]     hc_pre(x, pre_mix)
  std::vector<S> hc_post;  // [T, n, d]  hc_post(f, x, post, comb), post and comb the case's inputs
  std::vector<S> rmsnorm;  // [T, d]     rmsnorm(f, norm_weight)
};

inline const std::vector<std::string>& pieces_stage_names() {
  static const std::vector<std::string> names{"mixes",  "pre",     "post",   "comb",
                                              "hc_pre", "hc_post", "rmsnorm"};
  return names;
}
template <class S>
std::vector<const std::vector<S>*> stages(const PiecesTrace<S>& t) {
  return {&t.mixes, &t.pre, &t.post, &t.comb, &t.hc_pre, &t.hc_post, &t.rmsnorm};
}

template <class S>
PiecesTrace<S> evaluate_pieces(const PiecesCase& c, unsigned threads = 0) {
  const ref::Config& k = c.cfg;
  const std::size_t n = std::size_t(k.n), d = std::size_t(k.d), M = std::size_t(k.mix());
  const std::size_t T = c.tokens;
  PiecesTrace<S> r;
  r.mixes.resize(T * M);
  r.pre.resize(T * n);
  r.post.resize(T * n);
  r.comb.resize(T * n * n);
  r.hc_pre.resize(T * d);
  r.hc_post.resize(T * n * d);
  r.rmsnorm.resize(T * d);
  par::for_each(T, threads, [&](std::size_t t) {
    const float* x = c.x.data() + t * n * d;
    const float* f = c.f.data() + t * d;
    ref::mixes(k, x, c.hc_fn.data(), &r.mixes[t * M]);
    ref::split_sinkhorn(k, &r.mixes[t * M], c.hc_scale.data(), c.hc_base.data(), &r.pre[t * n],
                        &r.post[t * n], &r.comb[t * n * n]);
    ref::hc_pre(k, x, c.pre_mix.data() + t * n, &r.hc_pre[t * d]);
    ref::hc_post(k, f, x, c.post.data() + t * n, c.comb.data() + t * n * n, &r.hc_post[t * n * d]);
    ref::rmsnorm(d, k.norm_eps, f, c.norm_weight.data(), &r.rmsnorm[t * d]);
  });
  return r;
}

}  // namespace mhc::oracles
