// The driver and the differential core on deliberately broken backends: the verdict must name
// the right rule and the first divergent stage.
#include <catch2/catch.hpp>

#include "driver.hpp"
#include "mhc/oracles/verdict.hpp"

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
