// The driver and the differential core on deliberately broken backends: the verdict must name
// the right rule and the first divergent stage.
#include <catch2/catch.hpp>

#include "driver.hpp"
#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/verdict.hpp"
#include <algorithm>
#include <cmath>

using namespace mhc;
using oracles::Op;
using oracles::State;

namespace {

ref::Config small() {
  ref::Config c;
  c.d = 64;
  return c;
}

oracles::Verdict judge(const impl::Backend& b, Op op) {
  const auto c = oracles::generate_case(op, small(), 6, 11, "fp32");
  return oracles::compare(driver::run_kernel(b, c, 1), oracles::oracle_trace(c, 1));
}

// hc_post that never writes the last element of the last token.
void post_skips_last(const impl::KernelConfig& k, std::size_t T, const float* f, const float* R,
                     const float* post, const float* comb, float* y) {
  std::vector<float> tmp(T * std::size_t(k.n) * std::size_t(k.d));
  impl::cpu().hc_post(k, T, f, R, post, comb, tmp.data());
  std::copy(tmp.begin(), tmp.end() - 1, y);
}

// The boundary with post lacking its factor 2 (a bug that has shipped): only the split is wrong.
void boundary_post_half(const impl::KernelConfig& k, std::size_t T, const impl::BoundaryIn& in,
                        const impl::BoundaryOut& out) {
  impl::cpu().boundary(k, T, in, out);
  for (std::size_t i = 0; i < T * std::size_t(k.n); ++i) out.post[i] *= 0.5f;
}

// The boundary with the comb transposed in hc_post.
void boundary_transposed(const impl::KernelConfig& k, std::size_t T, const impl::BoundaryIn& in,
                         const impl::BoundaryOut& out) {
  const std::size_t n = std::size_t(k.n);
  std::vector<float> combT(T * n * n);
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t i = 0; i < n; ++i) combT[(t * n + j) * n + i] = in.comb[(t * n + i) * n + j];
  impl::BoundaryIn moved = in;
  moved.comb = combT.data();
  impl::cpu().boundary(k, T, moved, out);
}

}  // namespace

TEST_CASE("driver: the faithful kernels pass", "[driver]") {
  for (const auto* b : impl::backends())
    for (Op op : oracles::all_ops()) {
      CAPTURE(b->name, oracles::op_name(op));
      CHECK(judge(*b, op).state == State::pass);
    }
}

TEST_CASE("driver: an element never written fails as unwritten, in the last token", "[driver]") {
  impl::Backend b = impl::cpu();
  b.hc_post = post_skips_last;
  const auto v = judge(b, Op::post);
  REQUIRE(v.state == State::fail);
  REQUIRE(v.stages.size() == 1u);
  CHECK(v.stages[0].rule == "unwritten");
  CHECK(v.stages[0].failed == 1u);
  CHECK(v.stages[0].worst.token == 5u);
}

TEST_CASE("driver: first divergent stage of a boundary with post missing its factor 2", "[driver]") {
  impl::Backend b = impl::cpu();
  b.boundary = boundary_post_half;
  const auto v = judge(b, Op::boundary);
  CHECK(v.state == State::fail);
  CHECK(v.first_divergent == "post");
  CHECK(v.stages[0].state == State::pass);  // x, mixes and pre are right
  CHECK(v.stages[1].state == State::pass);
  CHECK(v.stages[2].state == State::pass);
}

TEST_CASE("driver: first divergent stage of a boundary with the comb transposed", "[driver]") {
  impl::Backend b = impl::cpu();
  b.boundary = boundary_transposed;
  const auto v = judge(b, Op::boundary);
  CHECK(v.state == State::fail);
  CHECK(v.first_divergent == "x");
}

namespace {

// A small Block case with k = 1 of 3 experts where experts 0 and 1 have identical router rows and
// biases: every token's selection is an exact tie between them (expert 2 is pushed away).
oracles::OpCase tied_case() {
  ref::Config cfg;
  cfg.n = 2;
  cfg.d = 16;
  cfg.iters = 5;
  ref::BlockConfig b;
  b.heads = 1;
  b.head_dim = 4;
  b.experts = 3;
  b.top_k = 1;
  b.inter = 4;
  auto c = oracles::generate_block_case(Op::block, cfg, b, 1, 3, 5, "fp32");
  auto& router = c.params["ffn/router"].data;
  std::copy(router.begin(), router.begin() + 16, router.begin() + 16);
  auto& bias = c.params["ffn/router_bias"].data;
  bias[1] = bias[0];
  bias[2] = -10.0f;
  return c;
}

}  // namespace

// The oracle cannot decide an exact tie (margin 0 <= its bound): a kernel that breaks it the
// other way is judged with its own choice, which it reports in ffn.experts.
TEST_CASE("routing: an exact tie broken the other way is judged with the kernel's choice",
          "[routing]") {
  const auto c = tied_case();
  const auto undecided = oracles::undecidable_routing(c);
  REQUIRE(undecided.size() == 1u);
  CHECK(undecided[0].size() == 3u);  // every token
  // The kernel sees expert 0 a hair lower (far below any bound) and so picks expert 1; with
  // k = 1 the routing weight is route_scale whatever the score, so its output is expert 1's.
  auto kc = c;
  kc.params["ffn/router_bias"].data[0] -= 1e-6f;
  const auto got = driver::run_kernel(impl::cpu(), kc, 1);
  for (const auto& s : got)
    if (s.name == "ffn.experts")
      for (float e : s.values) CHECK(e == 1.0f);
  const auto want = oracles::oracle_trace(c, 1, oracles::ErrorModel::standard, {}, &got);
  const auto v = oracles::compare(got, want);
  CHECK(v.state == State::pass);
  // The oracle's own choice (expert 0) would have failed it: the forcing is what passes.
  const auto own = oracles::compare(got, oracles::oracle_trace(c, 1, oracles::ErrorModel::standard));
  CHECK(own.state != State::pass);
}

TEST_CASE("routing: a tie the kernel does not report makes the token undecidable, never failed",
          "[routing]") {
  const auto c = tied_case();
  auto kc = c;
  kc.params["ffn/router_bias"].data[0] -= 1e-6f;
  auto got = driver::run_kernel(impl::cpu(), kc, 1);
  got.erase(std::remove_if(got.begin(), got.end(),
                           [](const auto& s) { return s.name == "ffn.experts"; }),
            got.end());
  const auto v = oracles::compare(got, oracles::oracle_trace(c, 1, oracles::ErrorModel::standard, {}, &got));
  CHECK(v.state == State::undecidable);
  for (const auto& s : v.stages) {
    CAPTURE(s.stage, s.reason);
    CHECK(s.state != State::fail);
  }
}

// A near-tie: expert 1's bias a little below expert 0's, by less than the selection's error
// bound but more than nothing: still undecidable, and a kernel choosing expert 1 still passes.
TEST_CASE("routing: a near-tie within the bound is undecidable too", "[routing]") {
  auto c = tied_case();
  c.params["ffn/router_bias"].data[1] -= 1e-7f;
  const auto undecided = oracles::undecidable_routing(c);
  CHECK(undecided[0].size() == 3u);
  auto kc = c;
  kc.params["ffn/router_bias"].data[1] += 2e-7f;
  const auto got = driver::run_kernel(impl::cpu(), kc, 1);
  CHECK(oracles::compare(got, oracles::oracle_trace(c, 1, oracles::ErrorModel::standard, {}, &got)).state ==
        State::pass);
}

// A decidable routing chosen differently is a failure of the ffn.experts stage.
TEST_CASE("routing: a different choice with a decidable margin fails", "[routing]") {
  auto c = tied_case();
  c.params["ffn/router_bias"].data[1] -= 1.0f;  // expert 0 clearly first
  CHECK(oracles::undecidable_routing(c)[0].empty());
  auto kc = c;
  kc.params["ffn/router_bias"].data[1] += 2.0f;  // the kernel's router prefers expert 1
  const auto got = driver::run_kernel(impl::cpu(), kc, 1);
  const auto v = oracles::compare(got, oracles::oracle_trace(c, 1, oracles::ErrorModel::standard, {}, &got));
  CHECK(v.state == State::fail);
  CHECK(v.first_divergent == "ffn.experts");
}

TEST_CASE("driver: the whole Block and a stack pass on both CPU kernels", "[driver][block]") {
  ref::Config cfg;
  cfg.d = 32;
  ref::BlockConfig b;
  b.heads = 2;
  b.head_dim = 8;
  b.experts = 4;
  b.inter = 16;
  b.layers = 2;
  for (Op op : oracles::block_ops())
    for (const auto* k : impl::backends())
      for (const char* prec : {"fp32", "bf16", "tf32"}) {
        const auto c = oracles::generate_block_case(op, cfg, b, 2, 3, 21, prec);
        const auto got = driver::run_kernel(*k, c, 1);
        const auto v = oracles::compare(got, oracles::oracle_trace(c, 1, oracles::ErrorModel::standard, {}, &got));
        CAPTURE(oracles::op_name(op), k->name, prec);
        for (const auto& s : v.stages) {
          CAPTURE(s.stage, s.reason);
          CHECK((s.state == State::pass || s.state == State::undecidable));
        }
        CHECK(v.state != State::fail);
      }
}

// A kernel that throws fails its case with the reason, and nothing else is lost.
TEST_CASE("driver: a kernel that throws gets a failed verdict with the reason", "[driver]") {
  impl::Backend b = impl::cpu();
  b.hc_pre = [](const impl::KernelConfig&, std::size_t, const float*, const float*, float*) {
    throw std::runtime_error("out of shared memory");
  };
  const auto c = oracles::generate_case(Op::pre, small(), 3, 1, "fp32");
  const auto j = driver::run_and_judge(b, c, oracles::ErrorModel::standard, 1);
  CHECK(j.verdict.state == State::fail);
  CHECK(j.verdict.first_divergent == "kernel");
  REQUIRE(j.verdict.stages.size() == 1u);
  CHECK(j.verdict.stages[0].rule == "threw");
  CHECK(j.verdict.stages[0].reason.find("out of shared memory") != std::string::npos);
  CHECK(j.got.empty());
  // The faithful kernel on the same case still passes through the same path.
  CHECK(driver::run_and_judge(impl::cpu(), c, oracles::ErrorModel::standard, 1).verdict.state == State::pass);
}

namespace {

// The case's first input (in the op's order) with one value of token 0 set to v.
oracles::OpCase hostile_case(Op op, float v, std::size_t at) {
  auto c = oracles::generate_case(op, small(), 3, 5, "fp32");
  static const char* order[] = {"x", "f", "mixes", "residual"};
  for (const char* name : order)
    if (c.inputs.count(name)) {
      auto& data = c.inputs[name].data;
      data[at % data.size()] = v;
      break;
    }
  return c;
}

}  // namespace

TEST_CASE("driver: NaN, Inf and subnormal activations get a verdict, never a crash or a false "
          "alarm",
          "[driver][hostile]") {
  const float values[] = {std::nanf(""), HUGE_VALF, -HUGE_VALF, 1e-40f, -1e-45f, 3e38f, 0.0f};
  for (const auto* b : impl::backends())
    for (Op op : oracles::all_ops())
      for (float v : values)
        for (std::size_t at : {std::size_t(0), std::size_t(7)}) {
          CAPTURE(b->name, oracles::op_name(op), v, at);
          const auto c = hostile_case(op, v, at);
          const auto j = driver::run_and_judge(*b, c, oracles::ErrorModel::standard, 1);
          // A faithful kernel is never failed: NaN where the oracle is NaN agrees, an infinite
          // bound is undecidable.
          CHECK(j.verdict.state != State::fail);
          // Subnormal and zero inputs leave every bound finite: those cases are decided.
          if (std::isfinite(v) && std::fabs(v) < 1) CHECK(j.verdict.state == State::pass);
        }
}

TEST_CASE("driver: a kernel that hides a NaN input behind a number fails", "[driver][hostile]") {
  impl::Backend zeroing = impl::cpu();
  zeroing.name = "zeroing";
  zeroing.hc_pre = [](const impl::KernelConfig& k, std::size_t T, const float* x, const float* p,
                      float* y) {
    impl::cpu().hc_pre(k, T, x, p, y);
    for (std::size_t i = 0; i < T * std::size_t(k.d); ++i)
      if (std::isnan(y[i])) y[i] = 0;  // "sanitised" output
  };
  const auto c = hostile_case(Op::pre, std::nanf(""), 0);
  const auto j = driver::run_and_judge(zeroing, c, oracles::ErrorModel::standard, 1);
  REQUIRE(j.verdict.state == State::fail);
  CHECK(j.verdict.stages[0].rule == "nan_agrees");
}
