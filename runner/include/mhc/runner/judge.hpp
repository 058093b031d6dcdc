// The one judging lifecycle every front end calls (check, gate, compare, fuzz, mutants, the
// property tests, the benchmarks):
//   prepare a case -> run the kernel (or take captured outputs) -> evaluate the oracle (anchored
//   or shared) -> judge every stage -> diagnose a failure -> a report record with its REPRO line.
// Nothing a kernel does escapes as an exception: an exception or an error code is a failed
// verdict with the reason (rule "threw"), "cannot run here" (no device, an op or n the backend
// lacks) a skipped one with the reason ("cannot_run"), and a kernel that writes into its inputs
// fails the case ("wrote_input") while its outputs are judged against the pristine case.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "mhc/impl/kernels.hpp"
#include "mhc/oracles/error_model.hpp"
#include "mhc/oracles/ops.hpp"
#include "mhc/oracles/verdict.hpp"
#include "mhc/reports/report.hpp"

namespace mhc::runner {

// What one case may cost: memory (the judging estimate, and the address space of a kernel's
// worker beyond the harness's) and the reference's arithmetic operations (judging time; 1e11 is
// about 10 minutes of one core: bench/README.md, "Judging limits"). A case beyond them is refused
// before anything runs: TooLarge, naming the sizes, the estimate and the option that raises it.
struct Limits {
  double memory = 16.0 * double(1ull << 30);  // bytes (--case-memory, in GiB)
  double operations = 1e11;                   // --case-operations
};
struct TooLarge : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Estimated cost of judging a case of these sizes (tokens: all of them; for block and stack,
// batch sequences of tokens / batch positions): peak bytes and the reference's operations.
struct Cost {
  double bytes = 0, operations = 0;
};
Cost judging_cost(oracles::Op op, const ref::Config& c, const ref::BlockConfig& b, double tokens,
                  double batch = 1);
// Throws TooLarge when a case of these sizes is beyond the limits.
void within_limits(oracles::Op op, const ref::Config& c, const ref::BlockConfig& b, double tokens,
                   double batch, const Limits& limits);
void within_limits(const oracles::OpCase& c, const Limits& limits);

struct Judging {
  oracles::ErrorModel model = oracles::ErrorModel::standard;
  unsigned threads = 0;  // 0: one per core
  bool diagnose = true;  // on a failure, look for the catalogued deviation that explains it
  // Kernels that are not ours (plug-ins), and ours too with `isolate`, run in a worker process
  // with these limits: a crash, a hang, exit() or exhausted memory fail the case, not the run.
  // A kernel that needs the GPU runs in a worker only while this process holds no CUDA context:
  // a run that judges a plug-in isolates all its kernels, so that ours never create one here.
  bool isolate = false;
  double kernel_seconds = 60;  // per case
  Limits limits;
};

// The kernel's run, on its own copy of the case's tensors: its outputs, or why there are none (a
// failed or skipped verdict).
struct Ran {
  oracles::Trace<float> got;
  oracles::Verdict verdict;  // pass when the kernel ran; fail ("threw") or skipped ("cannot_run")
  std::string wrote;         // non-empty when the kernel wrote into an input or param: which, where
  bool ran() const { return verdict.state == oracles::State::pass; }
};
Ran run(const impl::Backend& b, const oracles::OpCase& c, unsigned threads);  // in this process
Ran run(const impl::Backend& b, const oracles::OpCase& c, const Judging& j);  // isolated or not

// Where a block or stack oracle takes the stages it reads. For the mHC pieces and the boundary
// the two are the same oracle.
//   anchored: from the kernel's own values of the earlier stages, so that bounds do not compound
//             through the sublayers and the first failing stage is where the fault is;
//   shared:   evaluated once on its own, for every kernel judged on the case.
struct SharedOracle {
  oracles::Trace<bnd::Bounded> want;
};
SharedOracle shared_oracle(const oracles::OpCase& c, const Judging& j);

struct Outcome {
  oracles::Trace<float> got;  // empty when the kernel did not run
  oracles::Verdict verdict;
  std::string diagnosis;                // one line; empty unless the case failed and was diagnosed
  std::vector<std::string> deviations;  // the catalogued deviations that explain the failure
  // Non-empty when a second run of the kernel on the same case gave other bits (reduction orders
  // that change from run to run, as atomics give): where the runs first differ. The first run is
  // the one judged.
  std::string nondeterministic;
  double seconds = 0;  // wall time of the judgement: the kernel's runs, the oracle, the diagnosis
};

// Where two runs' outputs first differ bit for bit ("stage[index]: a vs b, k of n elements of
// the stage differ"), or "" when they are identical.
std::string first_difference(const oracles::Trace<float>& a, const oracles::Trace<float>& b);

// Runs the kernel (twice: a difference is reported as Outcome::nondeterministic) and judges the
// first run against the anchored oracle.
Outcome judge(const impl::Backend& b, const oracles::OpCase& c, const Judging& j);
// Runs the kernel and judges it against an oracle shared by the kernels judged on this case.
Outcome judge(const impl::Backend& b, const oracles::OpCase& c, const Judging& j,
              const SharedOracle& shared);
// Judges outputs an implementation produced elsewhere (a fixture's); stages listed in stored were
// stored in that format (bf16, fp16), and that rounding is added to their bounds.
Outcome judge_outputs(const oracles::OpCase& c, oracles::Trace<float> got, const Judging& j,
                      const bnd::StoredFormats& stored = {});

// The same against an oracle evaluated once for the case (the pieces and the boundary: their
// oracle does not read the kernel's trace), for many sets of outputs of one case.
Outcome judge_outputs(const oracles::OpCase& c, oracles::Trace<float> got, const Judging& j,
                      const SharedOracle& shared);

// The oracle judge_outputs compares with.
oracles::Trace<bnd::Bounded> outputs_oracle(const oracles::OpCase& c,
                                            const oracles::Trace<float>& got, const Judging& j,
                                            const bnd::StoredFormats& stored = {});

// The report record of a judged case (index in the run, its seed, its REPRO line).
reports::CaseRecord record(const Outcome& o, std::size_t index, std::uint64_t seed,
                           std::string repro);

// FNV-1a of n bytes, continuing from h: stable names for saved cases.
inline std::uint64_t fnv1a(const void* p, std::size_t n,
                           std::uint64_t h = 14695981039346656037ull) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

// Saves a case and the kernel's outputs as an mhc-fixture file in dir (created), named from
// the kernel, op and seed; returns the path, or "" with a warning on stderr when it cannot.
std::string save_case(const std::string& dir, const std::string& name, const oracles::OpCase& c,
                      const oracles::Trace<float>& got, const std::string& producer,
                      const bnd::StoredFormats& stored = {});

}  // namespace mhc::runner
