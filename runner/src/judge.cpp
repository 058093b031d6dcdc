#include "mhc/runner/judge.hpp"
#include "mhc/impl/plugin.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include "mhc/fixtures/fixture.hpp"
#include "mhc/impl/cuda.hpp"
#include "mhc/oracles/anchored.hpp"
#include "mhc/oracles/diagnosis.hpp"
#include "mhc/oracles/noise.hpp"
#include "mhc/oracles/parallel.hpp"
#include "mhc/reports/text.hpp"
#include "mhc/runner/driver.hpp"
#include "mhc/runner/session.hpp"
#include "worker.hpp"

namespace mhc::runner {

Cost judging_cost(oracles::Op op, const ref::Config& c, const ref::BlockConfig& b, double tokens,
                  double batch) {
  const oracles::Elements e = oracles::case_elements(op, c, b, tokens);
  Cost cost;
  // Peak resident bytes, above what `compare` measured on the V4.1 captures (4 per input element
  // and 30 per stage element for the pieces, about 50 per element for a Block): the inputs and
  // params twice as floats (the pristine case and the kernel's copy), the stages as the kernel's
  // floats and the oracle's bound-carrying values.
  cost.bytes = 8 * (e.inputs + e.params) + 64 * e.stages;
  const double n = c.n, d = c.d, M = c.mix(), nd = n * d;
  const oracles::OpSpec& spec = oracles::op_spec(op);
  if (spec.whole) {
    // Per token and layer: two projections to mixes, q/k/v/o, attention over the sequence's
    // positions, the router, the chosen and the shared experts; a backward, about three times
    // that (its forward, and each product again for the gradient with the bounds' passes).
    // Captured sublayers: the projections alone.
    const double hd = double(b.heads) * b.head_dim, positions = tokens / std::max(batch, 1.0);
    const double layer = b.captured_sublayers ? 2 * M * nd
                                              : 2 * M * nd + 4 * d * hd + 2 * positions * hd +
                                                    double(b.experts) * d +
                                                    (double(b.top_k) + 1) * 3 * double(b.inter) * d;
    cost.operations = tokens * layer * (spec.forward == oracles::Op::stack ? b.layers : 1) *
                          (spec.backward ? 3 : 1) +
                      4 * (e.inputs + e.stages);
  } else {
    // The projection (hc_fn against every token) where the op has one, the Sinkhorn rounds and
    // the comb's bound, and a few operations per stream element.
    const bool projects =
        std::any_of(spec.params.begin(), spec.params.end(),
                    [](const oracles::TensorSpec& t) { return t.name == "hc_fn"; });
    const bool splits =
        std::any_of(spec.params.begin(), spec.params.end(),
                    [](const oracles::TensorSpec& t) { return t.name == "hc_base"; });
    // The comb's bound sweeps its 2 iters steps once per entry (bnd::sinkhorn): n^4, not n^2.
    const double forward =
        (projects ? M * nd : 0) + 4 * double(c.iters) * n * n * (1 + (splits ? 2 * n * n : 0));
    cost.operations = tokens * forward + (n + 1) * (e.inputs + e.stages);
    if (spec.backward) {
      // Composed a token (docs/semantics.md, "The backward ops"): the split's two programs
      // recorded (about 100 nodes per Sinkhorn element and round), each swept once per 8 of its
      // 2 M + 3 gradient elements; a few passes over hc_fn (forward, d x in two programs, d
      // hc_fn's three sums) and a few tens of operations per stream element.
      const double split = splits ? 2 * 100 * double(c.iters) * n * n * (2 * M + 3) / 8 : 0;
      cost.operations = tokens * (split + (projects ? 8 * M * nd : 0) + 20 * nd) +
                        (n + 1) * (e.inputs + e.stages);
    }
  }
  return cost;
}

void within_limits(oracles::Op op, const ref::Config& c, const ref::BlockConfig& b, double tokens,
                   double batch, const Limits& limits) {
  const Cost cost = judging_cost(op, c, b, tokens, batch);
  auto g = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return std::string(buf);
  };
  const std::string what = "a " + oracles::op_name(op) + " case of " + g(tokens) +
                           " tokens, n=" + std::to_string(c.n) + ", d=" + std::to_string(c.d);
  if (cost.bytes > limits.memory)
    throw TooLarge(what + " needs about " + g(cost.bytes / double(1ull << 30)) +
                   " GiB to judge, beyond the limit of " + g(limits.memory / double(1ull << 30)) +
                   " GiB (--case-memory)");
  if (cost.operations > limits.operations)
    throw TooLarge(what + " needs about " + g(cost.operations) +
                   " operations to judge, beyond the limit of " + g(limits.operations) +
                   " (--case-operations)");
}

void within_limits(const oracles::OpCase& c, const Limits& limits) {
  within_limits(c.op, c.cfg, c.block, double(c.tokens), double(c.batch), limits);
}

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

// want_of(got): the oracle's Trace (computed for the kernel's trace, or shared by a run's cases).
template <class WantOf>
Outcome finish(oracles::Trace<float> got, WantOf want_of, const oracles::OpCase& c,
               const Judging& j, const std::string& wrote = "",
               const bnd::StoredFormats& stored = {}) {
  Outcome o;
  // The anchored stages and the second tier's models read only the case and the kernel's trace:
  // with a second core they are computed while the oracle evaluates the case.
  oracles::Trace<bnd::Bounded> anchored;
  oracles::NoiseModels models;
  auto side = [&] {
    anchored = oracles::anchored_trace(c, got, j.threads, j.model, stored);
    models = oracles::noise_models(c, got, stored);
  };
  const unsigned threads = j.threads ? j.threads : std::thread::hardware_concurrency();
  // Only mixes and boundary have anchored stages and the projection's tier worth a thread.
  const bool heavy = c.op == oracles::Op::mixes || c.op == oracles::Op::boundary;
  std::optional<par::Task> beside;
  if (threads > 1 && heavy)
    beside.emplace(side);
  else
    side();
  set_phase("evaluating the oracle");
  const oracles::Trace<bnd::Bounded>& want = want_of(got);
  set_phase("judging the outputs");
  o.verdict = oracles::compare(got, want, j.threads);
  if (beside) beside->wait();
  oracles::add_anchored(oracles::anchored_stages(c, got, anchored), o.verdict);
  oracles::second_tier(models, c, got, o.verdict);
  oracles::stored_as_declared(c, got, o.verdict);
  if (!wrote.empty()) {  // a failure of the case before any stage's
    oracles::Verdict v = kernel_verdict(oracles::State::fail, "wrote_input", wrote);
    v.stages.insert(v.stages.end(), o.verdict.stages.begin(), o.verdict.stages.end());
    o.verdict = std::move(v);
  }
  o.got = std::move(got);
  if (j.diagnose && o.verdict.state == oracles::State::fail && !o.got.empty()) {
    set_phase("diagnosing the failure");
    // Within the worst-case bounds, every deviation too small to leave them would "explain" an
    // output that failed tighter ones: judge the alternatives by the bounds it failed instead,
    // and by the second tier, as the case.
    const bool worst_case =
        j.model != oracles::ErrorModel::rigorous && oracles::within_worst_case(c, o.got, j.threads);
    std::vector<std::string> failed;
    for (const auto& s : o.verdict.stages)
      if (s.state == oracles::State::fail) failed.push_back(s.stage);
    oracles::Trace<bnd::Bounded> own = want;
    own.insert(own.end(), anchored.begin(), anchored.end());
    const oracles::ErrorModel model = worst_case ? j.model : oracles::ErrorModel::rigorous;
    o.deviations = oracles::diagnose(c, o.got, j.threads, model, failed, &own, &models, stored);
    // An error beyond a bound, no deviation: how narrow a precision would account for its size.
    const bool beyond_bound = std::any_of(
        o.verdict.stages.begin(), o.verdict.stages.end(),
        [](const auto& s) { return s.state == oracles::State::fail && s.rule == "within_bound"; });
    if (o.deviations.empty() && beyond_bound)
      o.deviations = oracles::undeclared_precision(c, o.got, j.threads, model, stored);
    o.diagnosis = worst_case && o.deviations.empty() ? oracles::kWithinWorstCase
                                                     : oracles::describe_diagnosis(o.deviations);
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
  if (impl::is_plugin(b.name) || j.isolate) {
    if (!b.device || !impl::cuda_in_use()) return run_in_worker(b, c, j.threads, j);
    static bool told = false;
    if (!told)
      std::fprintf(stderr,
                   "mhc-verify: warning: %s needs the GPU and this process already holds a CUDA "
                   "context (an earlier run in it used our CUDA kernels unisolated): it runs in "
                   "this process, unprotected\n",
                   reports::clean_text(b.name).c_str());
    told = true;
  }
  return run(b, c, j.threads);
}

SharedOracle shared_oracle(const oracles::OpCase& c, const Judging& j) {
  return {oracles::oracle_trace(c, j.threads, j.model)};
}

std::string first_difference(const oracles::Trace<float>& a, const oracles::Trace<float>& b) {
  for (std::size_t s = 0; s < a.size() && s < b.size(); ++s) {
    const auto& x = a[s].values;
    const auto& y = b[s].values;
    std::size_t first = x.size(), count = 0;
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i)
      if (std::memcmp(&x[i], &y[i], sizeof(float)) != 0) {
        first = std::min(first, i);
        ++count;
      }
    if (count == 0) continue;
    char text[256];
    std::snprintf(text, sizeof text, "%s[%zu]: %.9g, then %.9g; %zu of %zu elements differ",
                  a[s].name.c_str(), first, double(x[first]), double(y[first]), count, x.size());
    return text;
  }
  return "";
}

namespace {
// The first of the op's outputs the kernel's trace lacks ("" when none): a stage left out is not
// judged, so a kernel that leaves out an output fails rather than passes on what it did not give.
std::string missing_output(const oracles::OpCase& c, const oracles::Trace<float>& got) {
  for (const auto& o : oracles::op_spec(c.op).outputs) {
    const std::string stage = oracles::stage_of_output(c, o.name);
    if (std::none_of(got.begin(), got.end(), [&](const auto& s) { return s.name == stage; }))
      return stage;
  }
  return "";
}

// The kernel run twice. The first run, unless the second did not run (a kernel that crashes or
// errs on a repeat fails the case); where the two runs' outputs differ, `differs` says where and
// `again` holds the second's, which is judged too.
Ran run_twice(const impl::Backend& b, const oracles::OpCase& c, const Judging& j,
              std::string& differs, oracles::Trace<float>& again) {
  Ran r = run(b, c, j);
  if (!r.ran()) return r;
  Ran second = run(b, c, j);
  if (!second.ran()) {
    for (auto& s : second.verdict.stages) s.reason = "on a second run of the case: " + s.reason;
    second.got.clear();
    return second;
  }
  for (const auto* run : {&r.got, &second.got})
    if (const std::string lacks = missing_output(c, *run); !lacks.empty()) {
      r.verdict = kernel_verdict(
          oracles::State::fail, "absent_output",
          "the kernel's trace has no stage " + lacks + ", an output of " + oracles::op_name(c.op));
      r.got.clear();
      return r;
    }
  if (r.wrote.empty() && !second.wrote.empty())
    r.wrote = "on a second run of the case: " + second.wrote;
  differs = first_difference(r.got, second.got);
  if (!differs.empty()) again = std::move(second.got);
  return r;
}
}  // namespace

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

namespace {
// A kernel's case: run twice, judged; where the runs differ, the second is judged as well and a
// failure of either fails the case (a kernel wrong on some runs alone is not let through).
template <class WantOf>
Outcome judge_kernel(const impl::Backend& b, const oracles::OpCase& c, const Judging& j,
                     WantOf want_of) {
  const auto t0 = std::chrono::steady_clock::now();
  set_phase("running the kernel");
  std::string differs;
  oracles::Trace<float> again;
  Ran r = run_twice(b, c, j, differs, again);
  if (!r.ran()) return {{}, std::move(r.verdict), {}, {}, {}, since(t0)};
  Outcome o = finish(std::move(r.got), want_of, c, j, r.wrote);
  if (!differs.empty() && o.verdict.state != oracles::State::fail) {
    Outcome second = finish(std::move(again), want_of, c, j, r.wrote);
    if (second.verdict.state == oracles::State::fail) {
      for (auto& s : second.verdict.stages)
        if (s.state == oracles::State::fail) s.reason = "on the second run: " + s.reason;
      o = std::move(second);
    }
  }
  o.nondeterministic = differs;
  o.seconds = since(t0);
  return o;
}
}  // namespace

Outcome judge(const impl::Backend& b, const oracles::OpCase& c, const Judging& j) {
  oracles::Trace<bnd::Bounded> want;
  // A forward piece's oracle reads the case alone: a second run's judgement reuses it.
  const bool reads_kernel = oracles::op_spec(c.op).whole || oracles::op_spec(c.op).backward;
  return judge_kernel(b, c, j,
                      [&](const oracles::Trace<float>& got) -> const oracles::Trace<bnd::Bounded>& {
                        if (want.empty() || reads_kernel)
                          want = oracles::oracle_trace(c, j.threads, j.model, {}, &got);
                        return want;
                      });
}

Outcome judge(const impl::Backend& b, const oracles::OpCase& c, const Judging& j,
              const SharedOracle& shared) {
  return judge_kernel(b, c, j,
                      [&](const oracles::Trace<float>&) -> const oracles::Trace<bnd::Bounded>& {
                        return shared.want;
                      });
}

oracles::Trace<bnd::Bounded> outputs_oracle(const oracles::OpCase& c,
                                            const oracles::Trace<float>& got, const Judging& j,
                                            const bnd::StoredFormats& stored) {
  auto want = oracles::oracle_trace(c, j.threads, j.model, {}, &got);
  // An output stored in a narrower format carries its rounding to that format as well, unless
  // the declaration stores it so: that rounding is in its bound already.
  for (const auto& [name, format] : stored) {
    if (format == oracles::declared_output_storage(c, name)) continue;
    bnd::Declaration d;
    d.streams = format;
    const bnd::ModelScope scope(bnd::model_for(d, bnd::format_info(format).name));
    for (auto& st : want)
      if (st.name == name)
        for (auto& b : st.values) b = bnd::stored(b);
  }
  return want;
}

Outcome judge_outputs(const oracles::OpCase& c, oracles::Trace<float> got, const Judging& j,
                      const bnd::StoredFormats& stored) {
  const auto t0 = std::chrono::steady_clock::now();
  oracles::Trace<bnd::Bounded> want;
  Outcome o = finish(
      std::move(got),
      [&](const oracles::Trace<float>& given) -> const oracles::Trace<bnd::Bounded>& {
        return want = outputs_oracle(c, given, j, stored);
      },
      c, j, "", stored);
  o.seconds = since(t0);
  return o;
}

Outcome judge_outputs(const oracles::OpCase& c, oracles::Trace<float> got, const Judging& j,
                      const SharedOracle& shared) {
  const auto t0 = std::chrono::steady_clock::now();
  Outcome o = finish(
      std::move(got),
      [&](const oracles::Trace<float>&) -> const oracles::Trace<bnd::Bounded>& {
        return shared.want;
      },
      c, j);
  o.seconds = since(t0);
  return o;
}

reports::CaseRecord record(const Outcome& o, std::size_t index, std::uint64_t seed,
                           std::string repro) {
  reports::CaseRecord rec;
  rec.index = index;
  rec.seed = seed;
  rec.verdict = o.verdict;
  rec.diagnosis = o.diagnosis;
  rec.nondeterministic = o.nondeterministic;
  rec.seconds = o.seconds;
  if (o.verdict.state == oracles::State::fail) rec.repro = std::move(repro);
  return rec;
}

std::string save_case(const std::string& dir, const std::string& name, const oracles::OpCase& c,
                      const oracles::Trace<float>& got, const std::string& producer,
                      const bnd::StoredFormats& stored) {
  // The name carries a kernel's (a plug-in's path): only characters no shell or terminal acts on,
  // and where others were replaced, a hash of the name, so that two names stay two files.
  std::string file = name;
  bool replaced = false;
  for (char& ch : file) {
    if (std::isalnum(static_cast<unsigned char>(ch)) || (ch && std::strchr("._+=,-", ch))) continue;
    replaced = replaced || !ch || !std::strchr(":/ ", ch);  // plugin:dir/k.so as always, no hash
    ch = '_';
  }
  if (replaced) {
    char tag[20];
    std::snprintf(tag, sizeof tag, "_%08llx",
                  static_cast<unsigned long long>(fnv1a(name.data(), name.size()) >> 32));
    file += tag;
  }
  const std::string path = dir + "/" + file + ".h5";
  try {
    std::filesystem::create_directories(dir);
    fixtures::write_fixture(path, c, got, producer, stored);
    return path;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mhc-verify: warning: could not save %s: %s\n",
                 reports::clean_text(path).c_str(), reports::clean_text(e.what()).c_str());
    return "";
  }
}

}  // namespace mhc::runner
