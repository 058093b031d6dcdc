#include "mhc/runner/judge.hpp"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include "mhc/fixtures/fixture.hpp"
#include "mhc/oracles/diagnosis.hpp"
#include "mhc/runner/driver.hpp"
#include "worker.hpp"

namespace mhc::runner {

namespace {}  // namespace

oracles::Verdict kernel_verdict(oracles::State state, const std::string& rule,
                                const std::string& why) {
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

namespace {

Outcome finish(oracles::Trace<float> got, const oracles::Trace<bnd::Bounded>& want,
               const oracles::OpCase& c, const Judging& j, const std::string& wrote = "") {
  Outcome o;
  o.verdict = oracles::compare(got, want);
  if (!wrote.empty()) {  // a failure of the case before any stage's
    oracles::Verdict v = kernel_verdict(oracles::State::fail, "wrote_input", wrote);
    v.stages.insert(v.stages.end(), o.verdict.stages.begin(), o.verdict.stages.end());
    o.verdict = std::move(v);
  }
  o.got = std::move(got);
  if (j.diagnose && o.verdict.state == oracles::State::fail && !o.got.empty()) {
    o.deviations = oracles::diagnose(c, o.got, j.threads);
    o.diagnosis = oracles::describe_diagnosis(o.deviations);
  }
  return o;
}

}  // namespace

namespace {

std::string changed(const std::map<std::string, oracles::Tensor>& before,
                    const std::map<std::string, oracles::Tensor>& after) {
  for (const auto& [name, t] : before) {
    const auto& now = after.at(name).data;
    if (std::memcmp(t.data.data(), now.data(), t.data.size() * sizeof(float)) == 0) continue;
    for (std::size_t i = 0; i < t.data.size(); ++i)
      if (std::memcmp(&t.data[i], &now[i], sizeof(float)) != 0) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s (element %zu: %.9g -> %.9g)", name.c_str(), i,
                      double(t.data[i]), double(now[i]));
        return buf;
      }
  }
  return "";
}

}  // namespace

std::string changed_input(const oracles::OpCase& before, const oracles::OpCase& after) {
  const std::string in = changed(before.inputs, after.inputs);
  return in.empty() ? changed(before.params, after.params) : in;
}

Ran run(const impl::Backend& b, const oracles::OpCase& c, unsigned threads) {
  Ran r;
  // The kernel works on a copy of the case: one that writes into its (const) inputs is caught,
  // and the oracle reads the pristine case.
  oracles::OpCase mine = c;
  try {
    r.got = run_kernel(b, mine, threads);
  } catch (const impl::NotCompiled& e) {
    r.got.clear();
    r.verdict = kernel_verdict(oracles::State::skipped, "cannot_run",
                               "kernel " + b.name + " cannot run here: " + e.what());
    return r;
  } catch (const std::exception& e) {
    r.got.clear();
    r.verdict =
        kernel_verdict(oracles::State::fail, "threw", std::string("the kernel threw: ") + e.what());
    return r;
  }
  const std::string what = changed_input(c, mine);
  if (!what.empty()) r.wrote = "the kernel wrote its input " + what;
  return r;
}

Ran run(const impl::Backend& b, const oracles::OpCase& c, const Judging& j) {
  const bool theirs = b.name.rfind("plugin:", 0) == 0;
  if ((theirs || j.isolate) && !b.in_process) return run_in_worker(b, c, j.threads, j);
  return run(b, c, j.threads);
}

SharedOracle shared_oracle(const oracles::OpCase& c, const Judging& j) {
  return {oracles::oracle_trace(c, j.threads, j.model)};
}

Outcome judge(const impl::Backend& b, const oracles::OpCase& c, const Judging& j) {
  Ran r = run(b, c, j);
  if (!r.ran()) return {{}, std::move(r.verdict), {}, {}};
  const auto want = oracles::oracle_trace(c, j.threads, j.model, {}, &r.got);
  return finish(std::move(r.got), want, c, j, r.wrote);
}

Outcome judge(const impl::Backend& b, const oracles::OpCase& c, const Judging& j,
              const SharedOracle& shared) {
  Ran r = run(b, c, j);
  if (!r.ran()) return {{}, std::move(r.verdict), {}, {}};
  return finish(std::move(r.got), shared.want, c, j, r.wrote);
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
