// The oracle's MoE routing near ties, against a kernel run through the driver: a tie the oracle
// cannot decide is judged with the kernel's reported choice, or is undecidable; a decidable one
// chosen differently fails.
#include <catch2/catch.hpp>

#include <algorithm>

#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/verdict.hpp"
#include "mhc/runner/driver.hpp"

using namespace mhc;
using oracles::Op;
using oracles::State;

namespace {

// A small Block case with k of 3 experts (k = 1 unless given) where experts 0 and 1 have
// identical router rows and biases: every token's selection is an exact tie between them (expert
// 2 is pushed away).
oracles::OpCase tied_case(int top_k = 1) {
  ref::Config cfg;
  cfg.n = 2;
  cfg.d = 16;
  cfg.iters = 5;
  ref::BlockConfig b;
  b.heads = 1;
  b.head_dim = 4;
  b.experts = 3;
  b.top_k = top_k;
  b.inter = 4;
  auto c = oracles::generate_block_case(Op::block, cfg, b, 1, 3, 5, oracles::Precision::fp32());
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
  const auto got = runner::run_kernel(impl::cpu(), kc, 1);
  for (const auto& s : got)
    if (s.name == "ffn.experts")
      for (float e : s.values) CHECK(e == 1.0f);
  const auto want = oracles::oracle_trace(c, 1, oracles::ErrorModel::standard, {}, &got);
  const auto v = oracles::compare(got, want);
  CHECK(v.state == State::pass);
  // The oracle's own choice (expert 0) would have failed it: the forcing is what passes.
  const auto own =
      oracles::compare(got, oracles::oracle_trace(c, 1, oracles::ErrorModel::standard));
  CHECK(own.state != State::pass);
}

// ffn.experts lists the choice in selection order: with experts 0 and 1 both chosen (k = 2 of 3,
// and k = 3 of 3), their order is a tie too, and a kernel that lists them the other way passes.
// (Only the k-th margin decided the routing before: the order was taken as decided, and failed.)
TEST_CASE("routing: a tie inside the choice is judged with the kernel's order", "[routing]") {
  for (int k : {2, 3}) {
    auto c = tied_case(k);
    if (k == 3) c.params["ffn/router_bias"].data[2] = -1.0f;  // chosen, last
    CAPTURE(k);
    CHECK(oracles::undecidable_routing(c)[0].size() == 3u);
    auto kc = c;
    kc.params["ffn/router_bias"].data[0] -= 1e-6f;
    const auto got = runner::run_kernel(impl::cpu(), kc, 1);
    for (const auto& s : got)
      if (s.name == "ffn.experts")
        for (std::size_t t = 0; t < 3; ++t) CHECK(s.values[t * std::size_t(k)] == 1.0f);
    const auto v =
        oracles::compare(got, oracles::oracle_trace(c, 1, oracles::ErrorModel::standard, {}, &got));
    CHECK(v.state == State::pass);
  }
}

TEST_CASE("routing: a tie the kernel does not report makes the token undecidable, never failed",
          "[routing]") {
  const auto c = tied_case();
  auto kc = c;
  kc.params["ffn/router_bias"].data[0] -= 1e-6f;
  auto got = runner::run_kernel(impl::cpu(), kc, 1);
  got.erase(
      std::remove_if(got.begin(), got.end(), [](const auto& s) { return s.name == "ffn.experts"; }),
      got.end());
  const auto v =
      oracles::compare(got, oracles::oracle_trace(c, 1, oracles::ErrorModel::standard, {}, &got));
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
  const auto got = runner::run_kernel(impl::cpu(), kc, 1);
  CHECK(oracles::compare(got, oracles::oracle_trace(c, 1, oracles::ErrorModel::standard, {}, &got))
            .state == State::pass);
}

// A decidable routing chosen differently is a failure of the ffn.experts stage.
TEST_CASE("routing: a different choice with a decidable margin fails", "[routing]") {
  auto c = tied_case();
  c.params["ffn/router_bias"].data[1] -= 1.0f;  // expert 0 clearly first
  CHECK(oracles::undecidable_routing(c)[0].empty());
  auto kc = c;
  kc.params["ffn/router_bias"].data[1] += 2.0f;  // the kernel's router prefers expert 1
  const auto got = runner::run_kernel(impl::cpu(), kc, 1);
  const auto v =
      oracles::compare(got, oracles::oracle_trace(c, 1, oracles::ErrorModel::standard, {}, &got));
  CHECK(v.state == State::fail);
  CHECK(v.first_divergent == "ffn.experts");
}
