// One report model for every subcommand: run metadata, then entries (a kernel x op x settings,
// a fixture file, a self-test variant), each holding its cases' Verdicts and per-stage
// aggregates. Rendered as JSON (schema mhc-report/1, reports/schema/), Markdown, a
// self-contained HTML page and JUnit XML; written atomically (temp file + rename).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mhc/oracles/verdict.hpp"

namespace mhc::reports {

inline constexpr const char* kSchema = "mhc-report/1";

struct Meta {
  std::string tool = "mhc-verify", version, git_commit, command, subcommand;
  std::string compiler, build_type, fp_flags, host, device;
  unsigned threads = 0;  // as asked (0: one per core); results do not depend on it
  // A shard of a campaign (runner/shard.hpp): index of count, and where the index came from.
  int shard = 0, shards = 1;
  std::string shard_source;
  // The command line without its report paths and --threads (which change no result): what the
  // shards of one campaign share.
  std::string campaign;
  // Timing: the only fields that differ between two runs of the same command.
  std::string started, finished;
  double wall_s = 0;
};
// Metadata of this build and machine, for the given command line.
Meta make_meta(int argc, const char* const* argv);

// The Sinkhorn of one token: max over rows and columns of |line sum - 1| after each step of the
// double reference (softmax, column, row, column, ...), and the same residual of the kernel's comb.
inline constexpr std::size_t kSinkhornCurves = 4;  // an entry keeps at most this many
struct SinkhornCurve {
  std::string label;  // "case 3 token 0"
  std::vector<double> residual;
  double kernel_residual = 0;
};

// A cell of a convergence map (mhc-verify sinkhorn map): the cases of one structure family, logit
// scale, hc_eps and number of rounds, and how many ended with a line sum off from the limit's
// 1 - hc_eps (docs/semantics.md, "Sinkhorn convergence") by more than
// 1e-3 and by more than 1e-6. The cells of shards add.
struct MapCell {
  std::string family;
  double scale = 0, eps = 0;
  int rounds = 0;
  long cases = 0, above_1e3 = 0, above_1e6 = 0;
  double max_residual = 0;
};

// The gain of the composite residual mapping (the product of the combs over depth) against
// depth: at each depth the largest, over tokens, of its largest absolute row sum (forward
// signal), column sum (backward gradient) and spectral norm. Curves of one label from two shards
// take the larger value at each depth.
struct GainCurve {
  std::string label;  // whose combs: "oracle", "kernel cpu-fused"
  std::vector<double> forward, backward, spectral;
};

struct CaseRecord {
  std::size_t index = 0;
  std::uint64_t seed = 0;
  std::string label;  // what the case is, when not a generated seed (a fixture file)
  oracles::Verdict verdict;
  std::string diagnosis, repro, saved;
  std::string nondeterministic;  // two runs of the kernel differed: where (Outcome)
  double seconds = 0;  // wall time of its judgement (a timing field: differs between runs)
};

// A stage over all cases of an entry.
struct StageAggregate {
  std::string stage;
  std::map<std::string, int> states;  // state name -> cases
  double ratio_max = 0, ratio_p99 = 0, ratio_median = 0, max_ulp = 0, max_rel = 0;
  std::size_t worst_case = 0;
  oracles::Element worst;
  std::vector<std::uint64_t> ulp_hist;    // summed over cases
  std::vector<oracles::Element> samples;  // for the error-against-bound plot
  std::vector<double> case_medians;       // median ratio of each decided case
  // Each case's normwise error ||got - want|| / ||want||, by case index (NaN: no such case).
  std::vector<double> case_errors;
};

struct Entry {
  std::string id;    // unique in the report, e.g. "check cpu-fused boundary fp32"
  std::string kind;  // check, compare, mutant, variant, selfcheck, fuzz
  std::string kernel, op, precision, error_model;
  std::vector<std::pair<std::string, std::string>> settings;  // configuration, sizes
  std::string expect = "pass";  // "fail": a wrong kernel that the harness must catch
  std::vector<CaseRecord> cases;
  std::vector<StageAggregate> stages;  // in the order first seen
  std::vector<SinkhornCurve> sinkhorn;
  std::vector<MapCell> map;      // a convergence map, in the order first seen
  std::vector<GainCurve> gains;  // composite gain against depth
  std::vector<std::pair<std::string, std::string>> facts;  // results that are not verdicts
  std::string problem;       // what is wrong beyond the verdicts (a wrong diagnosis); "" if none
  bool keep_passing = true;  // false: a passing case keeps its state, not its stage details

  // Records a case: its stages' samples and histograms move into the aggregates.
  void add_case(CaseRecord c);
  // Takes in the same entry of another shard of the campaign (disjoint cases): the result is
  // what one run of all the cases records.
  void join(Entry other);
  int count(oracles::State s) const;  // cases in that state
  // True when the cases meet the expectation (expect pass: none failed; expect fail: one did)
  // and there is no problem.
  bool ok() const;
};

struct Report {
  Meta meta;
  std::vector<Entry> entries;
  bool complete = false;    // false while running, and in a run that was interrupted
  std::string interrupted;  // the signal's name when one stopped the run
  int exit_code = 0;
  Entry& entry(const std::string& id);  // finds or appends
  struct Summary {
    int entries = 0, ok = 0, cases = 0;
    bool pass = false;  // every entry as expected, complete, exit code 0
  };
  Summary summary() const;
};

std::string to_json(const Report& r);
// Reads a report written by to_json (throws std::invalid_argument naming the file and what is
// wrong). Aggregates come back as written; samples keep |got - want| and the bound.
Report read_report(const std::string& path);
std::string to_markdown(const Report& r);
std::string to_html(const Report& r);
std::string to_junit(const Report& r);

// Where reports go (empty: not written). Writes are atomic: a reader, a crash or a kill only
// ever sees a complete earlier report or a complete later one. reads and writes: the other files
// the run reads (fixtures, a suite, a baseline, reports to merge) and writes (a capture, a
// baseline), which no report may replace.
struct Outputs {
  std::string json, md, html, junit;
  std::vector<std::string> reads, writes;
  bool any() const { return !(json.empty() && md.empty() && html.empty() && junit.empty()); }
};

// True when paths a and b name the same file: the same device and inode where both exist (through
// symlinks and hard links), else the same absolute path (a file still to be written).
bool same_file(const std::string& a, const std::string& b);
// The file a write to path replaces: path, or the file a symlink names (the link stays), also
// one still to be written (relative to the link's directory); "" for an unreadable symlink.
std::string written_file(const std::string& path);
// What kind of file a stat mode is, for a message refusing it: "a directory", "a FIFO", ...
const char* file_kind(unsigned mode);
// Throws std::invalid_argument "WHAT PATH: not a regular file (a FIFO)" for an existing path that
// is not a regular file (a FIFO would block its reader, a device feed it without end); nothing for
// a path that does not exist (its reader says so).
void require_regular_file(const std::string& what, const std::string& path);

class Writer {
 public:
  // Checks every path: "-" is standard output; an existing path that is not a regular file (a
  // device, a FIFO) is written in place; a symlink is followed; a directory is refused; a report
  // another run is writing (its lock, PATH.lock, is held) is refused; so is a path that names a
  // file the run reads or writes (Outputs::reads, writes) or another of its reports. Throws
  // std::runtime_error naming the path.
  explicit Writer(Outputs out);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  // Writes every requested format. Unless `final`, a write is skipped while the time since the
  // previous one is less than 10 times what that one took (writing stays under ~10% of a run).
  // Standard output and other streams get only the final reports after the first write, never
  // the partial ones. Throws std::runtime_error naming the file on an I/O error.
  void write(Report& r, bool final = false);

 private:
  struct Target {
    std::string path;     // as given
    std::string file;     // written: the symlink's target, or the path
    bool stream = false;  // "-", a device or a FIFO: written in place, final reports only
    int lock = -1;        // flock'ed PATH.lock of a regular file
    int fifo = -1;        // a FIFO: opened (a reader there) when the run starts, written at its end
  };
  void put(const Target& t, const std::string& text) const;
  Outputs out_;
  std::vector<Target> targets_;  // json, md, html, junit (those requested)
  std::chrono::steady_clock::time_point start_, last_;
  std::chrono::duration<double> last_cost_{0};
  bool written_ = false;
};

// For a run with a report on standard output ("-"): from now on the run's own lines go to standard
// error, and the reports written to "-" to what was standard output, so that it holds the report
// alone (a command-line run; not for a host process such as Python's).
void reserve_stdout_for_reports();

// Writes text to path atomically: a temp file beside it, flushed, then renamed over it.
void write_atomic(const std::string& path, const std::string& text);

// SIGINT and SIGTERM: the first sets a flag that long loops poll (so the run can write its
// report of finished cases and exit); a second one, a second or more later, ends the process at
// once (sooner, it is the first delivered twice).
void install_interrupt_handler();
const char* interrupted();  // nullptr, "SIGINT" or "SIGTERM"

}  // namespace mhc::reports
