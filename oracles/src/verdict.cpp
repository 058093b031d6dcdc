#include "mhc/oracles/verdict.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <thread>

#include "mhc/oracles/generate.hpp"
#include "mhc/oracles/ops.hpp"
#include "mhc/oracles/parallel.hpp"

namespace mhc::oracles {

std::string state_name(State s) {
  switch (s) {
    case State::pass:
      return "pass";
    case State::fail:
      return "fail";
    case State::mistrusted:
      return "mistrusted";
    case State::undecidable:
      return "undecidable";
    case State::skipped:
      return "skipped";
    case State::not_compiled:
      return "not_compiled";
  }
  return "?";
}

State state_from_name(const std::string& name) {
  for (State s : kStates)
    if (state_name(s) == name) return s;
  throw std::invalid_argument("unknown state '" + name + "'");
}

float poison() {
  float f;
  std::memcpy(&f, &kPoisonBits, 4);
  return f;
}
bool is_poison(float v) {
  std::uint32_t u;
  std::memcpy(&u, &v, 4);
  return u == kPoisonBits;
}

double ulp_distance(float a, float b) {
  if (std::isnan(a) || std::isnan(b))
    return std::isnan(a) && std::isnan(b) ? 0 : std::numeric_limits<double>::infinity();
  auto ordered = [](float f) {
    std::int32_t i;
    std::memcpy(&i, &f, 4);
    // sign-magnitude to a line where -0 and +0 both map to 0
    return i < 0 ? -std::int64_t(i & 0x7FFFFFFF) : std::int64_t(i);
  };
  return double(std::llabs(ordered(a) - ordered(b)));
}

namespace {

using Decision = std::optional<State>;
struct Rule {
  RuleInfo info;
  Decision (*decide)(float got, const bnd::Bounded& want);  // a plain function: called per element
};

// The ordered rules; the first that decides an element decides it.
const std::vector<Rule>& element_rules() {
  static const std::vector<Rule> r{
      {{"unwritten",
        "the output still holds the poison NaN payload written before the call: the kernel never "
        "wrote it"},
       [](float g, const bnd::Bounded&) -> Decision {
         return is_poison(g) ? Decision(State::fail) : std::nullopt;
       }},
      {{"nan_agrees",
        "the oracle is NaN with a finite bound only where the exact result is undefined (0 * inf "
        "with norm_eps = 0, a NaN input): a NaN there agrees, a number there does not. A NaN "
        "with an infinite bound is the model's own overflow (inf - inf from activations a Block "
        "kernel overflowed): undecidable"},
       [](float g, const bnd::Bounded& w) -> Decision {
         if (!std::isnan(w.v)) return std::nullopt;
         if (w.e == HUGE_VAL) return State::undecidable;
         return std::isnan(g) ? State::pass : State::fail;
       }},
      {{"unbounded",
        "the bound is infinite (the model's fp32 evaluation overflows, or a denominator's bound "
        "reaches 0): any value, Inf and NaN included, is consistent with it"},
       [](float, const bnd::Bounded& w) -> Decision {
         return std::isfinite(w.e) ? std::nullopt : Decision(State::undecidable);
       }},
      {{"nonfinite",
        "NaN or Inf where the oracle is finite is never rounding: the bounds are finite there"},
       [](float g, const bnd::Bounded& w) -> Decision {
         if (std::isfinite(g)) return std::nullopt;
         if (std::isinf(g) && std::isinf(w.v) && (g > 0) == (w.v > 0)) return State::pass;
         return State::fail;
       }},
      {{"within_bound",
        "|got - want| <= bound, the derived error bound of the declared precision model (it "
        "includes the double oracle's own rounding)"},
       [](float g, const bnd::Bounded& w) -> Decision {
         return std::fabs(double(g) - w.v) <= w.e ? State::pass : State::fail;
       }},
  };
  return r;
}

}  // namespace

const std::vector<RuleInfo>& rules() {
  static const std::vector<RuleInfo> all = [] {
    std::vector<RuleInfo> v;
    for (const auto& r : element_rules()) v.push_back(r.info);
    v.push_back({"empty", "a stage with no elements proves nothing: mistrusted"});
    v.push_back({"stored_as_declared",
                 "a stage the declaration stores in bf16 or fp16 holds only that format's values: "
                 "its bound counts that rounding as the kernel's error, so a value the format "
                 "cannot hold (an fp32 kernel declaring a narrower storage) fails"});
    v.push_back({"noise",
                 "second tier, statistical, only where the bounds pass: the error of a modelled "
                 "stage (mixes, the comb, the weights, RMSNorm, the backward's sums) is more than "
                 "6 times (the weights, whose scale is a "
                 "worst case: 1 time) its modelled fp32 rounding noise at some element, or more "
                 "than 1.5 times in root mean square "
                 "over the stage "
                 "(oracles/noise.hpp; false alarms measured in bench/README.md)"});
    // Rules of a whole case (stage "kernel"), applied by the runner before any stage's.
    v.push_back({"threw",
                 "the kernel threw or returned an error code: the case fails with its "
                 "message"});
    v.push_back({"cannot_run",
                 "the kernel cannot run here (no device, an op or configuration it "
                 "lacks): the case is skipped with the reason"});
    v.push_back({"wrote_input",
                 "the kernel changed a bit of an input or param it was given "
                 "const: the case fails (the oracle reads the pristine copy)"});
    v.push_back({"crashed",
                 "the kernel's worker process ended before it returned (a signal, exit(), its "
                 "time limit) or left a malformed result: the case fails with what happened"});
    v.push_back({"absent_output",
                 "the kernel's trace lacks an output of the op (a stage left out is not judged): "
                 "the case fails"});
    v.push_back({"invalid",
                 "compare: a file or case that is unreadable, malformed or holds nothing to judge "
                 "(stage \"file\"): counted invalid, exit 2"});
    v.push_back({"degenerate",
                 "every oracle and kernel value is exactly zero: a kernel that writes zeros would "
                 "pass too, so the data cannot tell: mistrusted (not a stage of indices, "
                 "ffn.experts, where 0 is an expert like any other)"});
    return v;
  }();
  return all;
}

namespace {

// Nonnegative doubles and +inf order as their bit patterns: a radix selection on twelve bits at a
// time (sign and exponent first, then the mantissa's top) narrows the candidates to the elements
// that share the k-th's leading bits, and nth_element orders what is left.
std::size_t radix_key(double d, int shift) {
  std::uint64_t b;
  std::memcpy(&b, &d, 8);
  return std::size_t(b >> shift) & 0xfff;
}

std::vector<std::uint32_t> histogram(const std::vector<double>& from, int shift) {
  std::vector<std::uint32_t> hist(4096, 0);
  for (double d : from) ++hist[radix_key(d, shift)];
  return hist;
}

// The bin holding the k-th; k becomes its rank within the bin.
std::size_t bin_of(const std::vector<std::uint32_t>& hist, std::size_t& k) {
  std::size_t bin = 0;
  while (k >= hist[bin]) k -= hist[bin++];
  return bin;
}

double select_from(std::vector<double> keep, std::size_t k, int shift) {
  for (; shift >= 28 && keep.size() > 64; shift -= 12) {
    const std::size_t bin = bin_of(histogram(keep, shift), k);
    std::vector<double> next;
    for (double d : keep)
      if (radix_key(d, shift) == bin) next.push_back(d);
    keep = std::move(next);
  }
  std::nth_element(keep.begin(), keep.begin() + std::ptrdiff_t(k), keep.end());
  return keep[k];
}

}  // namespace

std::vector<double> kth_nonnegative(const std::vector<double>& v,
                                    const std::vector<std::size_t>& ks) {
  std::vector<double> out;
  if (v.size() <= 64) {
    for (std::size_t k : ks) out.push_back(select_from(v, k, 0));
    return out;
  }
  // The first pass's histogram and its split serve every k.
  std::vector<std::size_t> bins, ranks = ks;
  const std::vector<std::uint32_t> hist = histogram(v, 52);
  for (std::size_t& k : ranks) bins.push_back(bin_of(hist, k));
  std::vector<std::size_t> distinct = bins;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::vector<std::vector<double>> parts(distinct.size());
  for (double d : v) {
    const std::size_t key = radix_key(d, 52);
    for (std::size_t i = 0; i < distinct.size(); ++i)
      if (key == distinct[i]) parts[i].push_back(d);
  }
  for (std::size_t i = 0; i < ks.size(); ++i) {
    const std::size_t part =
        std::size_t(std::lower_bound(distinct.begin(), distinct.end(), bins[i]) - distinct.begin());
    out.push_back(select_from(parts[part], ranks[i], 40));
  }
  return out;
}

double kth_nonnegative(const std::vector<double>& v, std::size_t k) {
  return kth_nonnegative(v, std::vector<std::size_t>{k})[0];
}

int ulp_bin(double ulp) {
  if (!(ulp < 0x1p24)) return kUlpBins - 1;
  if (ulp < 1) return 0;
  std::uint64_t bits;  // a normal double in [1, 2^24): 1 + its exponent
  std::memcpy(&bits, &ulp, 8);
  return 1 + int(bits >> 52) - 1023;
}

namespace {

// A stage is judged in chunks of elements (in parallel by compare()) whose tallies merge in index
// order. Chunk boundaries are multiples of the sample step and do not depend on the thread count,
// so neither does any number of the verdict (the norms' sums are added chunk by chunk).
constexpr std::size_t kChunk = std::size_t(1) << 15;

struct Tally {
  std::size_t failed = 0, undecidable = 0;
  bool all_zero = true;
  double diff2 = 0, want2 = 0;
  Metrics metrics;
  std::vector<std::uint64_t> ulp_hist = std::vector<std::uint64_t>(kUlpBins, 0);
  std::vector<double> ratios;
  Element worst;
  std::optional<Element> first_fail;
  std::vector<Element> samples;
};

struct StageJob {  // a stage that is not judged (absent, wrong shape) has no elements
  const float* got = nullptr;
  const bnd::Bounded* want = nullptr;
  std::size_t count = 0, per_token = 1, sample_step = 1, chunk = 1;
  double rel_floor = kRelFloor;
  std::size_t chunks() const { return (count + chunk - 1) / chunk; }
};

StageJob stage_job(const float* got, const bnd::Bounded* want, std::size_t count,
                   std::size_t per_token, double rel_floor) {
  const std::size_t step = std::max<std::size_t>(1, count / kSamples);
  return {got,      want,
          count,    std::max<std::size_t>(per_token, 1),
          step,     std::max(step, kChunk / step * step),
          rel_floor};
}

void tally(const StageJob& job, std::size_t chunk, Tally& s) {
  const std::size_t i0 = chunk * job.chunk, i1 = std::min(job.count, i0 + job.chunk);
  s.ratios.reserve(i1 - i0);
  s.metrics.rel_floor = job.rel_floor;
  std::size_t next_sample = i0;  // every sample_step-th element (i0 is a multiple)
  const auto& rules = element_rules();
  // A finite got against a number with a finite bound: every rule before within_bound abstains
  // (none of them looks at anything else), so it is decided here without calling them.
  const std::size_t within = rules.size() - 1;
  for (std::size_t i = i0; i < i1; ++i) {
    const float g = job.got[i];
    const bnd::Bounded& w = job.want[i];
    s.all_zero = s.all_zero && g == 0 && w.v == 0;
    const bool sample_point = i == next_sample;
    if (sample_point) next_sample += job.sample_step;
    std::size_t decided = rules.size();  // the rule that decided, if any
    State st = State::pass;
    if (std::isfinite(g) && std::isfinite(w.e) && !std::isnan(w.v)) {
      decided = within;
      st = std::fabs(double(g) - w.v) <= w.e ? State::pass : State::fail;
    } else {
      for (std::size_t r = 0; r < rules.size(); ++r)
        if (auto d = rules[r].decide(g, w)) {
          st = *d;
          decided = r;
          break;
        }
    }
    if (st == State::undecidable) {
      ++s.undecidable;
      continue;
    }
    const double diff = std::fabs(double(g) - w.v);
    double ratio = diff == 0 ? 0 : (w.e > 0 ? diff / w.e : std::numeric_limits<double>::infinity());
    // No difference to measure (NaN against NaN, inf against inf): no error where a rule passed it.
    if (std::isnan(diff)) ratio = st == State::pass ? 0 : std::numeric_limits<double>::infinity();
    if (std::isnan(ratio)) ratio = std::numeric_limits<double>::infinity();
    // Built only where kept: most elements are counted, not recorded.
    auto element = [&] {
      return Element{i,
                     i / job.per_token,
                     double(g),
                     w.v,
                     w.e,
                     ratio,
                     decided < rules.size() ? rules[decided].info.name : std::string()};
    };
    if (std::isfinite(diff)) {
      s.metrics.max_abs = std::max(s.metrics.max_abs, diff);
      s.metrics.max_rel =
          std::max(s.metrics.max_rel, diff / std::max(std::fabs(w.v), job.rel_floor));
      s.diff2 += diff * diff;
      s.want2 += w.v * w.v;
    }
    const double ulp = ulp_distance(g, float(w.v));
    s.metrics.max_ulp = std::max(s.metrics.max_ulp, ulp);
    ++s.ulp_hist[std::size_t(ulp_bin(ulp))];
    if (st == State::fail) {
      ++s.failed;
      if (!s.first_fail) s.first_fail = element();
    }
    if (s.ratios.empty() || ratio > s.worst.ratio) s.worst = element();
    if (sample_point) s.samples.push_back(element());
    s.ratios.push_back(ratio);
  }
}

// The chunks' tallies in index order, into the stage's verdict.
StageVerdict verdict_of(const std::string& stage, const StageJob& job, std::vector<Tally>& parts) {
  StageVerdict s;
  s.stage = s.rule = stage;
  s.elements = job.count;
  s.metrics.rel_floor = job.rel_floor;
  s.ulp_hist.assign(kUlpBins, 0);
  if (job.count == 0) {
    s.state = State::mistrusted;
    s.rule = "empty";
    s.reason = "no elements";
    return s;
  }
  std::optional<Element> first_fail;
  bool all_zero = true, any = false;
  double diff2 = 0, want2 = 0;
  std::vector<double> ratios;
  std::size_t decided = 0;
  for (const Tally& t : parts) decided += t.ratios.size();
  ratios.reserve(decided);
  for (Tally& t : parts) {
    s.failed += t.failed;
    s.undecidable += t.undecidable;
    all_zero = all_zero && t.all_zero;
    diff2 += t.diff2;
    want2 += t.want2;
    s.metrics.max_abs = std::max(s.metrics.max_abs, t.metrics.max_abs);
    s.metrics.max_rel = std::max(s.metrics.max_rel, t.metrics.max_rel);
    s.metrics.max_ulp = std::max(s.metrics.max_ulp, t.metrics.max_ulp);
    for (int b = 0; b < kUlpBins; ++b) s.ulp_hist[std::size_t(b)] += t.ulp_hist[std::size_t(b)];
    if (!first_fail && t.first_fail) first_fail = t.first_fail;
    if (!t.ratios.empty() && (!any || t.worst.ratio > s.worst.ratio)) s.worst = t.worst;
    any = any || !t.ratios.empty();
    for (auto& e : t.samples)
      if (s.samples.size() < kSamples) s.samples.push_back(std::move(e));
    ratios.insert(ratios.end(), t.ratios.begin(), t.ratios.end());
  }
  const bool worst_kept = std::any_of(s.samples.begin(), s.samples.end(),
                                      [&](const Element& e) { return e.index == s.worst.index; });
  if (!ratios.empty() && !worst_kept) {
    s.samples.push_back(s.worst);
    std::sort(s.samples.begin(), s.samples.end(),
              [](const Element& a, const Element& b) { return a.index < b.index; });
  }
  s.metrics.normwise = want2 > 0 ? std::sqrt(diff2 / want2) : (diff2 > 0 ? HUGE_VAL : 0.0);
  if (!ratios.empty()) {
    s.ratio_max = *std::max_element(ratios.begin(), ratios.end());
    const std::size_t k = std::min(ratios.size() - 1, std::size_t(0.99 * double(ratios.size())));
    const std::vector<double> q = kth_nonnegative(ratios, {k, ratios.size() / 2});
    s.ratio_p99 = q[0];
    s.ratio_p50 = q[1];
  }
  const std::size_t count = job.count;
  char buf[256];
  if (s.failed > 0) {
    s.state = State::fail;
    s.rule = first_fail->rule;
    std::snprintf(buf, sizeof buf,
                  "%zu of %zu elements fail; first at %zu (token %zu) by rule %s: got %.9g, want "
                  "%.9g +- %.3g",
                  s.failed, count, first_fail->index, first_fail->token, first_fail->rule.c_str(),
                  first_fail->got, first_fail->want, first_fail->bound);
    s.reason = buf;
  } else if (s.undecidable > 0) {
    s.state = State::undecidable;
    s.rule = "unbounded";
    std::snprintf(buf, sizeof buf, "%zu of %zu elements have no finite bound", s.undecidable,
                  count);
    s.reason = buf;
  } else if (all_zero && !index_stage(stage)) {
    s.state = State::mistrusted;
    s.rule = "degenerate";
    s.reason = "every oracle and kernel value is 0";
  } else {
    s.state = State::pass;
    s.rule = "within_bound";
    std::snprintf(buf, sizeof buf, "all %zu within bound; max ratio %.3g", count, s.ratio_max);
    s.reason = buf;
  }
  return s;
}

}  // namespace

StageVerdict judge(const std::string& stage, const float* got, const bnd::Bounded* want,
                   std::size_t count, std::size_t per_token, double rel_floor) {
  const StageJob job = stage_job(got, want, count, per_token, rel_floor);
  std::vector<Tally> parts(job.chunks());
  for (std::size_t k = 0; k < parts.size(); ++k) tally(job, k, parts[k]);
  return verdict_of(stage, job, parts);
}

void settle(Verdict& v) {
  bool any_undecidable = false, any_mistrusted = false;
  v.first_divergent.clear();
  for (const auto& sv : v.stages) {
    if (sv.state == State::fail && v.first_divergent.empty()) v.first_divergent = sv.stage;
    any_undecidable = any_undecidable || sv.state == State::undecidable;
    any_mistrusted = any_mistrusted || sv.state == State::mistrusted;
  }
  v.state = !v.first_divergent.empty() ? State::fail
            : any_undecidable          ? State::undecidable
            : any_mistrusted           ? State::mistrusted
                                       : State::pass;
}

void stored_as_declared(const OpCase& c, const Trace<float>& got, Verdict& v) {
  bool changed = false;
  for (auto& sv : v.stages) {
    const bnd::Format f = declared_output_storage(c, sv.stage);
    const Stage<float>* g = find_stage(got, sv.stage);  // anchored stages: not the kernel's
    if (f == bnd::Format::fp32 || !g || sv.state == State::fail) continue;
    for (std::size_t i = 0; i < g->values.size(); ++i) {
      const float x = g->values[i];
      if (!std::isfinite(x) || gen::round_to(f, x) == x) continue;
      const std::string fmt = bnd::format_info(f).name;
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "%s.flat[%zu] = %.9g is not a %s value, though the declaration stores %s in %s "
                    "(the nearest is %.9g): the kernel did not store it as declared",
                    sv.stage.c_str(), i, double(x), fmt.c_str(), sv.stage.c_str(), fmt.c_str(),
                    double(gen::round_to(f, x)));
      sv.state = State::fail;
      sv.rule = "stored_as_declared";
      sv.reason = buf;
      changed = true;
      break;
    }
  }
  if (changed) settle(v);
}

Verdict compare(const Trace<float>& got, const Trace<bnd::Bounded>& want, unsigned threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  Verdict v;
  v.stages.resize(want.size());
  // Every chunk of every stage the kernel produced in the right shape is a task; the others are
  // decided here.
  std::vector<StageJob> jobs(want.size());
  std::vector<std::vector<Tally>> parts(want.size());
  std::vector<std::pair<std::size_t, std::size_t>> tasks;  // (stage, chunk)
  for (std::size_t k = 0; k < want.size(); ++k) {
    const Stage<bnd::Bounded>& w = want[k];
    const Stage<float>* g = find_stage(got, w.name);
    StageVerdict& sv = v.stages[k];
    sv.stage = w.name;
    if (!g) {
      sv.state = State::skipped;
      sv.rule = "absent";
      sv.reason = "the kernel did not produce this stage";
    } else if (g->values.size() != w.values.size()) {
      sv.state = State::fail;
      sv.rule = "shape";
      sv.reason = "the kernel produced " + std::to_string(g->values.size()) +
                  " elements, expected " + std::to_string(w.values.size());
    } else {
      const std::size_t per_token =
          w.shape.empty() || w.shape[0] == 0 ? w.values.size() : w.values.size() / w.shape[0];
      jobs[k] = stage_job(g->values.data(), w.values.data(), w.values.size(), per_token, kRelFloor);
      parts[k].resize(jobs[k].chunks());
      for (std::size_t c = 0; c < parts[k].size(); ++c) tasks.emplace_back(k, c);
      if (parts[k].empty()) sv = verdict_of(w.name, jobs[k], parts[k]);
    }
  }
  // A thread for every chunk's worth of elements at most: small cases stay on this one.
  std::size_t elements = 0;
  for (const auto& j : jobs) elements += j.count;
  threads = unsigned(std::min<std::size_t>(threads, elements / kChunk + 1));
  par::for_each(tasks.size(), threads, [&](std::size_t t) {
    tally(jobs[tasks[t].first], tasks[t].second, parts[tasks[t].first][tasks[t].second]);
  });
  std::vector<std::size_t> judged;
  for (std::size_t k = 0; k < want.size(); ++k)
    if (!parts[k].empty()) judged.push_back(k);
  par::for_each(judged.size(), threads, [&](std::size_t i) {
    const std::size_t k = judged[i];
    v.stages[k] = verdict_of(want[k].name, jobs[k], parts[k]);
  });
  settle(v);
  return v;
}

}  // namespace mhc::oracles
