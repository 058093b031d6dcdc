#include "mhc/runner/session.hpp"

#include <pthread.h>
#include <unistd.h>
#include <atomic>
#include <csignal>
#include <cstdio>

#include "mhc/impl/cuda.hpp"
#include "mhc/impl/kernels.hpp"

namespace mhc::runner {

namespace {
int g_argc = 0;
const char* const* g_argv = nullptr;
}  // namespace

void set_command_line(int argc, const char* const* argv) {
  g_argc = argc;
  g_argv = argv;
}

Session::Session(const reports::Outputs& out, unsigned threads) : writer_(out) {
  for (const std::string* p : {&out.json, &out.md, &out.html, &out.junit})
    if (*p == "-") reports::reserve_stdout_for_reports();
  report.meta = reports::make_meta(g_argc, g_argv);
  report.meta.threads = threads;
  if (impl::cuda_device_count() > 0) report.meta.device = impl::cuda_device_name();
  reports::install_interrupt_handler();
  writer_.write(report, true);  // an unwritable path fails now, not after the run
}

void Session::set_shard(const Shard& shard) {
  report.meta.shard = shard.index;
  report.meta.shards = shard.count;
  report.meta.shard_source = shard.source;
  if (shard.count > 1) std::fprintf(stderr, "mhc-verify: %s\n", shard.text().c_str());
}

void Session::update() {
  writer_.write(report);
}

bool Session::stop() const {
  return reports::interrupted() != nullptr;
}

int Session::finish(int code, bool complete) {
  if (const char* sig = reports::interrupted()) {
    report.interrupted = sig;
    report.complete = false;
    code = 128 + (report.interrupted == "SIGINT" ? SIGINT : SIGTERM);
    std::fprintf(stderr, "mhc-verify: interrupted by %s: the report holds the finished cases\n",
                 sig);
  } else {
    report.complete = complete;
  }
  report.exit_code = code;
  writer_.write(report, true);
  return code;
}

namespace {

std::atomic<const char*> g_phase{"starting"};

// Held by a heartbeat while it is awake (allocating, printing). fork() waits for it: a child
// forked while another thread holds the allocator's or stderr's lock would deadlock on its first
// allocation or message (the fixture reader's and the workers' children allocate and print).
std::mutex g_awake;

void guard_forks() {
  static std::once_flag once;
  std::call_once(once, [] {
    pthread_atfork([] { g_awake.lock(); }, [] { g_awake.unlock(); }, [] { g_awake.unlock(); });
  });
}

}  // namespace

void set_phase(const char* phase) {
  g_phase.store(phase, std::memory_order_relaxed);
}

Progress::Progress(std::string what, long total, double seconds)
    : what_(std::move(what)),
      total_(total),
      seconds_(seconds),
      tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {
  guard_forks();
  beat_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    started_ = true;
    wake_.notify_all();
    const auto quiet = std::chrono::seconds(tty_ ? 1 : 10);
    while (!wake_.wait_for(lock, std::chrono::milliseconds(250), [this] { return finished_; })) {
      const auto now = std::chrono::steady_clock::now();
      if (now - start_ < std::chrono::seconds(2) || now - last_ < quiet) continue;
      std::lock_guard<std::mutex> awake(g_awake);
      std::string status = g_phase.load(std::memory_order_relaxed);
      if (total_ > 0 && done_ < total_)
        status = "item " + std::to_string(done_ + 1) + ": " + status;
      print(done_, status);
    }
  });
  // Until the thread runs its own code, its start-up may hold the allocator's lock: a fork then
  // would leave the child a lock nobody releases.
  std::unique_lock<std::mutex> lock(mu_);
  wake_.wait(lock, [this] { return started_; });
}

Progress::~Progress() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ = true;
  }
  wake_.notify_all();
  beat_.join();
  done();
}

void Progress::step(long done, const std::string& status) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ = done;
  const auto now = std::chrono::steady_clock::now();
  const double t = std::chrono::duration<double>(now - start_).count();
  const long tenth = seconds_ > 0 ? long(t * 10 / seconds_) : total_ > 0 ? done * 10 / total_ : 0;
  if (t < 2.0 || (total_ > 0 && total_ < 2)) return;  // short runs and single items need none
  if (!tty_ && total_ > 0 && done >= total_) return;  // the summary follows at once
  if (tty_) {
    if (now - last_ < std::chrono::milliseconds(100) && done < total_) return;
  } else if (tenth == last_tenth_ && now - last_ < std::chrono::seconds(30)) {
    return;
  }
  last_tenth_ = tenth;
  print(done, status);
}

void Progress::print(long done, const std::string& status) {
  const auto now = std::chrono::steady_clock::now();
  const double t = std::chrono::duration<double>(now - start_).count();
  last_ = now;
  const double eta = done > 0 && total_ > done ? t / double(done) * double(total_ - done) : 0;
  char line[320];
  if (seconds_ > 0)
    std::snprintf(line, sizeof line, "%s: %ld done, %.1f of %.4g s%s%s", what_.c_str(), done, t,
                  seconds_, status.empty() ? "" : ", ", status.c_str());
  else
    std::snprintf(line, sizeof line, "%s: %ld/%ld, %.1f s%s%s%s", what_.c_str(), done, total_, t,
                  eta > 0 ? (", ~" + std::to_string(long(eta + 0.5)) + " s left").c_str() : "",
                  status.empty() ? "" : ", ", status.c_str());
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s", line);
    dirty_ = true;
  } else {
    std::fprintf(stderr, "%s\n", line);
  }
  std::fflush(stderr);
}

bool nothing_decided(long judged, long decided) {
  return judged > 0 && decided == 0 && !reports::interrupted();
}

std::string run_outcome(bool ok) {
  if (const char* sig = reports::interrupted()) return std::string("INTERRUPTED by ") + sig;
  return ok ? "PASS" : "FAIL";
}

void Progress::done() {
  // Called while a step may be printing from the heartbeat: under the lock. The destructor calls
  // it after the heartbeat has ended.
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  if (!finished_) lock.lock();
  if (tty_ && dirty_) std::fprintf(stderr, "\r\033[K");
  dirty_ = false;
}

std::string stage_table(const reports::Entry& e) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-16s %5s %5s %6s %6s %11s %11s %11s %9s %11s  %s\n", "stage",
                "pass", "fail", "undec", "mistr", "max ratio", "p99 ratio", "med ratio", "max ulp",
                "max rel", "worst");
  out += line;
  for (const auto& a : e.stages) {
    auto n = [&](const char* s) {
      const auto it = a.states.find(s);
      return it == a.states.end() ? 0 : it->second;
    };
    char worst[96];
    std::snprintf(worst, sizeof worst, "case %zu token %zu elem %zu", a.worst_case, a.worst.token,
                  a.worst.index);
    std::snprintf(line, sizeof line,
                  "%-16s %5d %5d %6d %6d %11.3g %11.3g %11.3g %9.3g %11.3g  %s\n", a.stage.c_str(),
                  n("pass"), n("fail"), n("undecidable"), n("mistrusted"), a.ratio_max, a.ratio_p99,
                  a.ratio_median, a.max_ulp, a.max_rel, worst);
    out += line;
  }
  return out +
         "\nratio: observed error / derived bound per element (pass needs <= 1); med: median\n"
         "over cases of each case's median.\n";
}

void print_stage_table(const reports::Entry& e) {
  std::printf("\n%s", stage_table(e).c_str());
}

}  // namespace mhc::runner
