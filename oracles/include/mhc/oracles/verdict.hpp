// Verdicts as structured data: every stage of a Trace judged element by element through an
// ordered list of named rules, then summarised (state, reason, worst element, statistics).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mhc/oracles/bounded.hpp"
#include "mhc/oracles/ops.hpp"

namespace mhc::oracles {

enum class State { pass, fail, mistrusted, undecidable, skipped, not_compiled };
inline constexpr State kStates[] = {State::pass,        State::fail,    State::mistrusted,
                                    State::undecidable, State::skipped, State::not_compiled};
std::string state_name(State s);
// The state state_name names; throws std::invalid_argument "unknown state 'NAME'" for any other.
State state_from_name(const std::string& name);

// The NaN payload written into every output before a kernel runs: an element that still holds
// it afterwards was never written.
constexpr std::uint32_t kPoisonBits = 0x7FC0DEADu;
float poison();
bool is_poison(float v);

// ULP distance between two fp32 values on the ordered line of floats: -0 and +0 are the same
// point (distance 0); NaN against NaN is 0, NaN against anything else is infinite.
double ulp_distance(float a, float b);

struct Element {
  std::size_t index = 0;  // flat index in the stage
  std::size_t token = 0;  // index / (elements per token)
  double got = 0, want = 0, bound = 0, ratio = 0;
  std::string rule;  // the rule that decided it
};

struct Metrics {
  double max_abs = 0;   // max |got - want|
  double max_rel = 0;   // max |got - want| / max(|want|, rel_floor)
  double max_ulp = 0;   // max ulp_distance(got, fp32(want))
  double normwise = 0;  // ||got - want||_2 / ||want||_2 (0 when both are 0)
  double rel_floor = 0;
};

// Histogram of ulp distances: bin 0 holds ulp == 0, bin b in 1..24 holds [2^(b-1), 2^b), the
// last bin 2^24 and beyond (NaN and Inf against a number included).
constexpr int kUlpBins = 26;
int ulp_bin(double ulp);
// The k-th smallest (from 0) of v, whose elements are nonnegative or +inf (the ratios): the p99 and
// the median of a stage, without reordering v.
double kth_nonnegative(const std::vector<double>& v, std::size_t k);
// The same for several k at once, sharing the passes over v.
std::vector<double> kth_nonnegative(const std::vector<double>& v,
                                    const std::vector<std::size_t>& ks);
// Elements kept per stage for plots of observed error against bound (evenly spaced, and the worst).
constexpr std::size_t kSamples = 48;

// The second tier's judgement of a stage (oracles/noise.hpp): z = |got - want| / s per element,
// s the legitimate rounding noise modelled from the data.
struct NoiseVerdict {
  State state = State::pass;  // pass, or fail (flagged)
  std::string reason;
  std::size_t elements = 0;  // judged (a finite scale)
  double z_max = 0, z_rms = 0;
  double z_limit = 0, rms_limit = 0;  // the limits it was judged by (0: not recorded)
  Element worst;                      // bound: its noise scale; ratio: its z
};

struct StageVerdict {
  std::string stage;
  State state = State::pass;
  std::string rule;    // the rule that set the state
  std::string reason;  // one line, for people
  std::size_t elements = 0, failed = 0, undecidable = 0;
  Element worst;  // the largest observed/bound ratio (the first failing rule's element on fail)
  double ratio_max = 0, ratio_p99 = 0, ratio_p50 = 0;  // observed error / bound, decided elements
  Metrics metrics;
  std::vector<std::uint64_t> ulp_hist;  // kUlpBins counts over the decided elements
  std::vector<Element> samples;         // up to kSamples + 1 decided elements, in index order
  bool has_noise = false;               // the second tier modelled this stage
  NoiseVerdict noise;
};

struct Verdict {
  State state = State::pass;
  std::string first_divergent;  // the first stage (in Trace order) that failed; empty if none
  std::vector<StageVerdict> stages;
};

// One rule of the ordered list: name and numerical justification (printed by `check --rules`).
struct RuleInfo {
  std::string name, justification;
};
const std::vector<RuleInfo>& rules();

// The floor of the relative metric by default: FLT_MIN.
constexpr double kRelFloor = 0x1.0p-126;
// Judges got[i] against the oracle's want[i] (value and bound). per_token: elements per token.
// rel_floor: the floor of the relative metric.
StageVerdict judge(const std::string& stage, const float* got, const bnd::Bounded* want,
                   std::size_t count, std::size_t per_token, double rel_floor = kRelFloor);

// Walks both Traces in the oracle's order; a stage the kernel did not produce is skipped. With
// threads > 1 (0: one per core) the stages are judged in parallel, largest first.
Verdict compare(const Trace<float>& got, const Trace<bnd::Bounded>& want, unsigned threads = 1);
// The case's state and first divergent stage from its stages' (after a stage changed).
void settle(Verdict& v);
// A stage the declaration stores narrower (declared_output_storage) must hold values of that
// format: its bound counts the storage's rounding as the kernel's error, so a value the format
// cannot hold fails the stage (rule "stored_as_declared"), whatever its distance to the oracle.
void stored_as_declared(const OpCase& c, const Trace<float>& got, Verdict& v);

}  // namespace mhc::oracles
