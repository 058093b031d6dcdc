#include "mhc/runner/judge.hpp"

#include <cstdio>
#include <filesystem>

#include "mhc/fixtures/fixture.hpp"
#include "mhc/oracles/diagnosis.hpp"
#include "mhc/runner/driver.hpp"

namespace mhc::runner {

namespace {

oracles::Verdict one_stage(oracles::State state, const std::string& rule, const std::string& why) {
  oracles::Verdict v;
  v.state = state;
  oracles::StageVerdict sv;
  sv.stage = "kernel";
  sv.state = state;
  sv.rule = rule;
  sv.reason = why;
  v.stages.push_back(sv);
  if (state == oracles::State::fail) v.first_divergent = "kernel";
  return v;
}

Outcome finish(oracles::Trace<float> got, const oracles::Trace<bnd::Bounded>& want,
               const oracles::OpCase& c, const Judging& j) {
  Outcome o;
  o.verdict = oracles::compare(got, want);
  o.got = std::move(got);
  if (j.diagnose && o.verdict.state == oracles::State::fail && !o.got.empty()) {
    o.deviations = oracles::diagnose(c, o.got, j.threads);
    o.diagnosis = oracles::describe_diagnosis(o.deviations);
  }
  return o;
}

}  // namespace

Ran run(const impl::Backend& b, const oracles::OpCase& c, unsigned threads) {
  Ran r;
  try {
    r.got = run_kernel(b, c, threads);
  } catch (const impl::NotCompiled& e) {
    r.got.clear();
    r.verdict = one_stage(oracles::State::skipped, "cannot_run",
                          "kernel " + b.name + " cannot run here: " + e.what());
  } catch (const std::exception& e) {
    r.got.clear();
    r.verdict =
        one_stage(oracles::State::fail, "threw", std::string("the kernel threw: ") + e.what());
  }
  return r;
}

SharedOracle shared_oracle(const oracles::OpCase& c, const Judging& j) {
  return {oracles::oracle_trace(c, j.threads, j.model)};
}

Outcome judge(const impl::Backend& b, const oracles::OpCase& c, const Judging& j) {
  Ran r = run(b, c, j.threads);
  if (!r.ran()) return {{}, std::move(r.verdict), {}, {}};
  const auto want = oracles::oracle_trace(c, j.threads, j.model, {}, &r.got);
  return finish(std::move(r.got), want, c, j);
}

Outcome judge(const impl::Backend& b, const oracles::OpCase& c, const Judging& j,
              const SharedOracle& shared) {
  Ran r = run(b, c, j.threads);
  if (!r.ran()) return {{}, std::move(r.verdict), {}, {}};
  return finish(std::move(r.got), shared.want, c, j);
}

oracles::Trace<bnd::Bounded> outputs_oracle(const oracles::OpCase& c,
                                            const oracles::Trace<float>& got, const Judging& j,
                                            const std::vector<std::string>& bf16) {
  auto want = oracles::oracle_trace(c, j.threads, j.model, {}, &got);
  // An output stored as bf16 carries its rounding to bf16 as well.
  const bnd::ModelScope scope(bnd::bf16());
  for (auto& st : want)
    for (const auto& name : bf16)
      if (st.name == name)
        for (auto& b : st.values) b = bnd::stored(b);
  return want;
}

Outcome judge_outputs(const oracles::OpCase& c, oracles::Trace<float> got, const Judging& j,
                      const std::vector<std::string>& bf16) {
  const auto want = outputs_oracle(c, got, j, bf16);
  return finish(std::move(got), want, c, j);
}

reports::CaseRecord record(const Outcome& o, std::size_t index, std::uint64_t seed,
                           std::string repro) {
  reports::CaseRecord rec;
  rec.index = index;
  rec.seed = seed;
  rec.verdict = o.verdict;
  rec.diagnosis = o.diagnosis;
  if (o.verdict.state == oracles::State::fail) rec.repro = std::move(repro);
  return rec;
}

std::string save_case(const std::string& dir, const std::string& name, const oracles::OpCase& c,
                      const oracles::Trace<float>& got, const std::string& producer) {
  std::string file = name;
  for (char& ch : file)
    if (ch == ':' || ch == '/' || ch == ' ') ch = '_';
  const std::string path = dir + "/" + file + ".h5";
  try {
    std::filesystem::create_directories(dir);
    fixtures::write_fixture(path, c, got, producer);
    return path;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mhc-verify: warning: could not save %s: %s\n", path.c_str(), e.what());
    return "";
  }
}

}  // namespace mhc::runner
