#include "mhc/reports/report.hpp"

#include "build_info.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mhc::reports {

namespace {

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  return "unknown CPU";
}

}  // namespace

Meta make_meta(int argc, const char* const* argv) {
  Meta m;
  m.version = MHC_VERSION;
  m.git_commit = MHC_GIT_COMMIT;
  m.compiler = MHC_COMPILER;
  m.build_type = MHC_BUILD_TYPE;
  m.fp_flags = MHC_FP_FLAGS;
  m.host = cpu_model() + ", " + std::to_string(std::thread::hardware_concurrency()) + " threads";
  m.device = "none";
  for (int i = 0; i < argc; ++i) {
    if (i) m.command += ' ';
    m.command += argv[i];
  }
  if (argc > 1) m.subcommand = argv[1];
  // The campaign: the command line without the options that do not change the results.
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    bool skip = false;
    for (const char* flag : {"--json", "--md", "--html", "--junit", "--threads"}) {
      if (a == flag) {
        skip = true;
        ++i;  // and its value
      }
      if (a.rfind(std::string(flag) + "=", 0) == 0) skip = true;
    }
    if (skip) continue;
    if (!m.campaign.empty()) m.campaign += ' ';
    m.campaign += a;
  }
  m.started = now_utc();
  return m;
}

void Entry::add_case(CaseRecord c) {
  for (auto& s : c.verdict.stages) {
    auto it = std::find_if(stages.begin(), stages.end(),
                           [&](const StageAggregate& a) { return a.stage == s.stage; });
    const bool fresh = it == stages.end();
    if (fresh) {
      stages.push_back({});
      it = stages.end() - 1;
      it->stage = s.stage;
      it->ulp_hist.assign(oracles::kUlpBins, 0);
    }
    StageAggregate& a = *it;
    ++a.states[oracles::state_name(s.state)];
    if (fresh || s.ratio_max > a.ratio_max) {
      a.ratio_max = s.ratio_max;
      a.worst = s.worst;
      a.worst_case = c.index;
    }
    a.ratio_p99 = std::max(a.ratio_p99, s.ratio_p99);
    a.max_ulp = std::max(a.max_ulp, s.metrics.max_ulp);
    a.max_rel = std::max(a.max_rel, s.metrics.max_rel);
    if (s.state == oracles::State::pass || s.state == oracles::State::fail) {
      a.case_medians.push_back(s.ratio_p50);
      std::vector<double> m = a.case_medians;
      std::nth_element(m.begin(), m.begin() + std::ptrdiff_t(m.size() / 2), m.end());
      a.ratio_median = m[m.size() / 2];
    }
    if (a.case_errors.size() <= c.index) a.case_errors.resize(c.index + 1, std::nan(""));
    a.case_errors[c.index] = s.metrics.normwise;
    for (std::size_t b = 0; b < s.ulp_hist.size() && b < a.ulp_hist.size(); ++b)
      a.ulp_hist[b] += s.ulp_hist[b];
    // Keep the plot readable and the report small: the samples of the first cases by index, as
    // many as fill the cap (an entry that keeps only failures in detail: the first case's), and
    // each case's worst element. A rule on the case's index alone, so that shards of a campaign
    // keep between them what the whole campaign keeps.
    const std::size_t cap = (keep_passing ? 4 : 1) * oracles::kSamples;
    const bool sampled = c.index * s.samples.size() < cap;
    for (const auto& e : s.samples)
      if (sampled || e.index == s.worst.index) a.samples.push_back(e);
    s.samples.clear();
    s.ulp_hist.clear();
  }
  if (!keep_passing && c.verdict.state == oracles::State::pass) c.verdict.stages.clear();
  cases.push_back(std::move(c));
}

void Entry::join(Entry other) {
  const bool first =
      other.cases.empty() || cases.empty() || other.cases.front().index < cases.front().index;
  for (auto& c : other.cases) cases.push_back(std::move(c));
  std::stable_sort(cases.begin(), cases.end(),
                   [](const CaseRecord& a, const CaseRecord& b) { return a.index < b.index; });
  // Stages in the order the case with the lowest index has them.
  std::vector<StageAggregate> merged = first ? std::move(other.stages) : std::move(stages);
  for (auto& s : first ? stages : other.stages) {
    auto it = std::find_if(merged.begin(), merged.end(),
                           [&](const StageAggregate& a) { return a.stage == s.stage; });
    if (it == merged.end()) {
      merged.push_back(std::move(s));
      continue;
    }
    StageAggregate& a = *it;
    for (const auto& [k, v] : s.states) a.states[k] += v;
    if (s.ratio_max > a.ratio_max || (s.ratio_max == a.ratio_max && s.worst_case < a.worst_case)) {
      a.ratio_max = s.ratio_max;
      a.worst = s.worst;
      a.worst_case = s.worst_case;
    }
    a.ratio_p99 = std::max(a.ratio_p99, s.ratio_p99);
    a.max_ulp = std::max(a.max_ulp, s.max_ulp);
    a.max_rel = std::max(a.max_rel, s.max_rel);
    for (std::size_t b = 0; b < s.ulp_hist.size() && b < a.ulp_hist.size(); ++b)
      a.ulp_hist[b] += s.ulp_hist[b];
    a.samples.insert(a.samples.end(), s.samples.begin(), s.samples.end());
    a.case_medians.insert(a.case_medians.end(), s.case_medians.begin(), s.case_medians.end());
    if (a.case_errors.size() < s.case_errors.size())
      a.case_errors.resize(s.case_errors.size(), std::nan(""));
    for (std::size_t i = 0; i < s.case_errors.size(); ++i)
      if (!std::isnan(s.case_errors[i])) a.case_errors[i] = s.case_errors[i];
  }
  stages = std::move(merged);
  // The median over the decided cases, as add_case takes it: from the cases' own stages when the
  // aggregates came from a file (which holds no per-case medians).
  for (auto& a : stages) {
    std::vector<double> m;
    for (const auto& c : cases)
      for (const auto& s : c.verdict.stages)
        if (s.stage == a.stage &&
            (s.state == oracles::State::pass || s.state == oracles::State::fail))
          m.push_back(s.ratio_p50);
    if (m.size() < a.case_medians.size()) m = a.case_medians;
    if (m.empty()) continue;
    std::nth_element(m.begin(), m.begin() + std::ptrdiff_t(m.size() / 2), m.end());
    a.ratio_median = m[m.size() / 2];
  }
  // Sinkhorn curves: those of the lowest cases ("case N ..."), as many as a run keeps.
  for (auto& s : other.sinkhorn) sinkhorn.push_back(std::move(s));
  auto case_of = [](const SinkhornCurve& s) {
    return s.label.rfind("case ", 0) == 0 ? std::strtoull(s.label.c_str() + 5, nullptr, 10) : 0;
  };
  std::stable_sort(
      sinkhorn.begin(), sinkhorn.end(),
      [&](const SinkhornCurve& a, const SinkhornCurve& b) { return case_of(a) < case_of(b); });
  if (sinkhorn.size() > kSinkhornCurves) sinkhorn.resize(kSinkhornCurves);
  // A NaN wins: the larger of two values whatever order the shards come in.
  auto larger = [](double a, double b) { return std::isnan(a) || a >= b ? a : b; };
  // Map cells: one key's cases add; a cell only the other shard has comes after ours.
  for (auto& c : other.map) {
    auto it = std::find_if(map.begin(), map.end(), [&](const MapCell& m) {
      return m.family == c.family && m.scale == c.scale && m.eps == c.eps && m.rounds == c.rounds;
    });
    if (it == map.end()) {
      map.push_back(std::move(c));
      continue;
    }
    it->cases += c.cases;
    it->above_1e3 += c.above_1e3;
    it->above_1e6 += c.above_1e6;
    it->max_residual = larger(it->max_residual, c.max_residual);
  }
  // Gain curves: one label's take the larger value at each depth, over the longer curve.
  auto take_larger = [&](std::vector<double>& mine, const std::vector<double>& theirs) {
    const std::size_t n = std::min(mine.size(), theirs.size());
    for (std::size_t d = 0; d < n; ++d) mine[d] = larger(mine[d], theirs[d]);
    mine.insert(mine.end(), theirs.begin() + std::ptrdiff_t(n), theirs.end());
  };
  for (auto& g : other.gains) {
    auto it = std::find_if(gains.begin(), gains.end(),
                           [&](const GainCurve& x) { return x.label == g.label; });
    if (it == gains.end()) {
      gains.push_back(std::move(g));
      continue;
    }
    take_larger(it->forward, g.forward);
    take_larger(it->backward, g.backward);
    take_larger(it->spectral, g.spectral);
  }
  if (facts.empty()) facts = std::move(other.facts);
  if (problem.empty()) problem = std::move(other.problem);
}

int Entry::count(oracles::State s) const {
  return int(std::count_if(cases.begin(), cases.end(),
                           [&](const CaseRecord& c) { return c.verdict.state == s; }));
}

bool Entry::ok() const {
  const bool caught = count(oracles::State::fail) > 0;
  return problem.empty() && (expect == "fail" ? caught : !caught);
}

Entry& Report::entry(const std::string& id) {
  for (auto& e : entries)
    if (e.id == id) return e;
  entries.push_back({});
  entries.back().id = id;
  return entries.back();
}

Report::Summary Report::summary() const {
  Summary s;
  s.entries = int(entries.size());
  for (const auto& e : entries) {
    s.ok += e.ok();
    s.cases += int(e.cases.size());
  }
  s.pass = s.ok == s.entries && complete && exit_code == 0;
  return s;
}

void write_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot write report " + path + ": cannot create " + tmp);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error("cannot write report " + path + ": write failed (disk full?)");
    }
    done += std::size_t(n);
  }
  const bool synced = ::fsync(fd) == 0;
  if (::close(fd) != 0 || !synced || std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot write report " + path + ": rename from " + tmp + " failed");
  }
}

namespace {

// The absolute form of a path whose last component may not exist yet: its directory resolved.
std::string absolute(const std::string& p) {
  const std::size_t slash = p.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : p.substr(0, slash + 1);
  char* real = ::realpath(dir.c_str(), nullptr);
  if (!real) return p;
  std::string a = real;
  std::free(real);
  return a + "/" + (slash == std::string::npos ? p : p.substr(slash + 1));
}

int g_report_stdout = STDOUT_FILENO;  // where reports to "-" go

}  // namespace

const char* file_kind(unsigned mode) {
  const mode_t m = mode_t(mode);
  return S_ISDIR(m)                 ? "a directory"
         : S_ISFIFO(m)              ? "a FIFO"
         : S_ISCHR(m) || S_ISBLK(m) ? "a device"
         : S_ISSOCK(m)              ? "a socket"
                                    : "another kind";
}

std::string written_file(const std::string& path) {
  struct stat ls {};
  if (::lstat(path.c_str(), &ls) != 0 || !S_ISLNK(ls.st_mode)) return path;
  if (char* real = ::realpath(path.c_str(), nullptr)) {
    std::string file = real;
    std::free(real);
    return file;
  }
  char buf[4096];  // to a file not written yet: the link's own target, beside the link
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return "";
  std::string file(buf, std::size_t(n));
  const std::size_t slash = path.rfind('/');
  if (file[0] != '/' && slash != std::string::npos) file = path.substr(0, slash + 1) + file;
  return file;
}

void reserve_stdout_for_reports() {
  if (g_report_stdout != STDOUT_FILENO) return;
  std::fflush(stdout);
  const int fd = ::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3);
  if (fd < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
    throw std::runtime_error("cannot keep standard output for the report");
  g_report_stdout = fd;
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  const bool ea = ::stat(a.c_str(), &sa) == 0, eb = ::stat(b.c_str(), &sb) == 0;
  if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
  return !ea && !eb && absolute(a) == absolute(b);
}

void require_regular_file(const std::string& what, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    throw std::invalid_argument(what + " " + path + ": not a regular file (" +
                                file_kind(st.st_mode) + ")");
}

Writer::Writer(Outputs out) : out_(std::move(out)), start_(std::chrono::steady_clock::now()) {
  const char* formats[] = {"--json", "--md", "--html", "--junit"};
  for (const std::string* p : {&out_.json, &out_.md, &out_.html, &out_.junit}) {
    if (p->empty()) {
      targets_.push_back({});
      continue;
    }
    Target t;
    t.path = t.file = *p;
    auto fail = [&](const std::string& why) {
      for (const auto& x : targets_) {
        if (x.lock >= 0) {
          ::unlink((x.file + ".lock").c_str());
          ::close(x.lock);
        }
        if (x.fifo >= 0) ::close(x.fifo);
      }
      throw std::runtime_error("cannot write report " + *p + ": " + why);
    };
    if (*p == "-") {
      t.stream = true;
      for (std::size_t i = 0; i < targets_.size(); ++i)
        if (targets_[i].path == "-")
          fail("standard output is also the " + std::string(formats[i]) + " report");
    } else {
      t.file = written_file(*p);  // a symlink is followed, the link stays
      if (t.file.empty()) fail("an unreadable symlink");
      struct stat st {};
      if (::stat(t.file.c_str(), &st) == 0) {  // else a symlink to a file to be created
        if (S_ISDIR(st.st_mode)) fail("a directory");
        t.stream = !S_ISREG(st.st_mode);
        if (S_ISFIFO(st.st_mode)) {  // without a reader, its open would wait for one forever
          t.fifo = ::open(t.file.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
          if (t.fifo < 0)
            fail(errno == ENXIO ? "a FIFO that no process reads (the run would wait for one)"
                                : "cannot open the FIFO");
          ::fcntl(t.fifo, F_SETFL, ::fcntl(t.fifo, F_GETFL) & ~O_NONBLOCK);
        }
      }
    }
    if (!t.stream) {  // replacing a file the run reads or writes would lose it
      for (const auto& r : out_.reads)
        if (same_file(t.file, r)) fail("it would replace " + r + ", which this run reads");
      for (const auto& w : out_.writes)
        if (same_file(t.file, w)) fail("it would replace " + w + ", which this run writes");
      for (std::size_t i = 0; i < targets_.size(); ++i)
        if (!targets_[i].file.empty() && !targets_[i].stream && same_file(t.file, targets_[i].file))
          fail("it is also the " + std::string(formats[i]) + " report");
    }
    if (!t.stream) {
      const std::string lock = t.file + ".lock";
      t.lock = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
      if (t.lock < 0) fail("cannot create its lock " + lock);
      if (::flock(t.lock, LOCK_EX | LOCK_NB) != 0) {
        ::close(t.lock);
        fail("another run is writing it (" + lock + " is locked)");
      }
    }
    targets_.push_back(t);
  }
}

Writer::~Writer() {
  for (const auto& t : targets_) {
    if (t.lock >= 0) {
      ::unlink((t.file + ".lock").c_str());
      ::close(t.lock);
    }
    if (t.fifo >= 0) ::close(t.fifo);
  }
}

void Writer::put(const Target& t, const std::string& text) const {
  if (!t.stream) return write_atomic(t.file, text);
  const int fd = t.path == "-" ? ::dup(g_report_stdout)
                 : t.fifo >= 0 ? ::dup(t.fifo)
                               : ::open(t.file.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot write report " + t.path + ": cannot open it");
  std::fflush(stdout);
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) {
      ::close(fd);
      throw std::runtime_error("cannot write report " + t.path + ": write failed");
    }
    done += std::size_t(n);
  }
  ::close(fd);
}

void Writer::write(Report& r, bool final) {
  if (!out_.any()) return;
  const auto now = std::chrono::steady_clock::now();
  if (!final && written_ && now - last_ < 10 * last_cost_) return;
  r.meta.finished = now_utc();
  r.meta.wall_s = std::chrono::duration<double>(now - start_).count();
  std::string (*const render[])(const Report&) = {to_json, to_markdown, to_html, to_junit};
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    const Target& t = targets_[i];
    if (t.path.empty() || (t.stream && !(final && written_))) continue;
    put(t, render[i](r));
  }
  last_ = std::chrono::steady_clock::now();
  last_cost_ = last_ - now;
  written_ = true;
}

namespace {
std::atomic<int> g_signal{0};
std::atomic<long long> g_first_ns{0};

long long monotonic_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

// The first signal asks the run to stop; one that comes at least a second later ends the process.
// One sooner is the same request delivered twice: `timeout` and job controls signal the process
// and then its whole group, microseconds apart, and another thread may be handling the first (its
// time not stored yet: 0, read as just now).
extern "C" void on_signal(int sig) {
  const long long now = monotonic_ns();
  int none = 0;
  if (g_signal.compare_exchange_strong(none, sig)) {
    g_first_ns.store(now);
  } else if (const long long first = g_first_ns.load(); first != 0 && now - first >= 1000000000LL) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}
}  // namespace

void install_interrupt_handler() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

const char* interrupted() {
  switch (g_signal.load()) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    default:
      return nullptr;
  }
}

}  // namespace mhc::reports
