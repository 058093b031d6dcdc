// A kernel run in a worker process: fork, the kernel on the child's copy of the case, its outputs
// through shared memory. Whatever the kernel does to its process (a crash, abort, a hang, exit(),
// signals ignored, a stack overflow, memory exhausted) ends that process only.
#include "worker.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "mhc/impl/plugin.hpp"
#include "mhc/reports/report.hpp"
#include "mhc/runner/driver.hpp"

namespace mhc::runner {

namespace {

enum Status : int { running = 0, done = 1, threw = 2, cannot_run = 3, too_large = 4 };

struct Header {
  std::atomic<int> status;
  std::size_t used;  // bytes of payload
  char message[2048];
  char wrote[256];
};

// Upper bound of the outputs' bytes: the op table's stages at this case's sizes.
std::size_t payload_bytes(const oracles::OpCase& c) {
  std::size_t floats = 0, stages = 0;
  auto add = [&](const std::vector<oracles::TensorSpec>& ts, std::size_t times) {
    for (const auto& t : ts) {
      std::size_t n = c.tokens;
      for (auto x : oracles::resolve(t.dims, c.cfg, c.block)) n *= x;
      floats += n * times;
      stages += times;
    }
  };
  const auto& spec = oracles::op_spec(c.op);
  if (spec.whole) {
    add(oracles::block_stages(), std::size_t(c.block.layers));
    add(oracles::final_stages(), 1);
    if (spec.backward) {
      add(oracles::block_backward_stages(), std::size_t(c.block.layers));
      add(spec.outputs, 1);
    }
  } else {
    add(spec.outputs, 1);
  }
  return floats * sizeof(float) + stages * 512 + 4096;
}

template <class T>
void put(char*& p, const T& v) {
  std::memcpy(p, &v, sizeof v);
  p += sizeof v;
}
// Reads the payload back. The worker's process is the kernel's, so what it left is untrusted:
// every length is checked against the bytes there; false when they do not add up.
struct Payload {
  const char* p;
  const char* end;
  template <class T>
  bool take(T& v) {
    if (std::size_t(end - p) < sizeof v) return false;
    std::memcpy(&v, p, sizeof v);
    p += sizeof v;
    return true;
  }
  bool bytes(void* to, std::uint64_t count) {
    if (std::uint64_t(end - p) < count) return false;
    if (count > 0) std::memcpy(to, p, count);
    p += count;
    return true;
  }
};

bool read_trace(Payload in, oracles::Trace<float>& got) {
  std::uint32_t stages = 0;
  if (!in.take(stages)) return false;
  for (std::uint32_t s = 0; s < stages; ++s) {
    oracles::Stage<float> stage;
    std::uint32_t len = 0, rank = 0;
    std::uint64_t count = 0;
    if (!in.take(len) || std::uint64_t(in.end - in.p) < len) return false;
    stage.name.assign(in.p, len);
    in.p += len;
    if (!in.take(rank) || std::uint64_t(in.end - in.p) / 8 < rank) return false;
    for (std::uint32_t k = 0; k < rank; ++k) {
      std::uint64_t x = 0;
      in.take(x);
      stage.shape.push_back(std::size_t(x));
    }
    if (!in.take(count) || std::uint64_t(in.end - in.p) / sizeof(float) < count) return false;
    stage.values.resize(std::size_t(count));
    in.bytes(stage.values.data(), count * sizeof(float));
    got.push_back(std::move(stage));
  }
  return in.p == in.end;
}

void copy_message(char* to, std::size_t size, const std::string& from) {
  std::snprintf(to, size, "%s", from.c_str());
}

// The child's whole life: never returns.
[[noreturn]] void child(const impl::Backend& b, const oracles::OpCase& c, unsigned threads,
                        Header* h, char* payload, std::size_t capacity, std::size_t memory) {
  // Dies with the parent's SIGKILL only, or with the parent itself.
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGTERM, SIG_DFL);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // What a kernel prints goes to stderr: the harness's stdout carries its own lines only (a
  // plug-in's "check: PASS" or "REPRO:" there would read as the harness's).
  std::fflush(stdout);
  ::dup2(STDERR_FILENO, STDOUT_FILENO);
  if (memory > 0) {
    std::ifstream status("/proc/self/status");
    unsigned long long vm_kb = 0;
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmSize:", 0) == 0) vm_kb = std::strtoull(line.c_str() + 7, nullptr, 10);
    const rlimit r{vm_kb * 1024 + memory, vm_kb * 1024 + memory};
    ::setrlimit(RLIMIT_AS, &r);
  }
  try {
    oracles::OpCase mine = c;
    const oracles::Trace<float> got = run_kernel(b, mine, threads);
    std::string wrote = changed_input(c, mine);
    copy_message(h->wrote, sizeof h->wrote, wrote);
    char* p = payload;
    std::size_t need = sizeof(std::uint32_t);
    for (const auto& s : got)
      need += 4 + s.name.size() + 4 + 8 * s.shape.size() + 8 + s.values.size() * sizeof(float);
    if (need > capacity) {
      h->status.store(too_large);
      ::_exit(0);
    }
    put(p, std::uint32_t(got.size()));
    for (const auto& s : got) {
      put(p, std::uint32_t(s.name.size()));
      std::memcpy(p, s.name.data(), s.name.size());
      p += s.name.size();
      put(p, std::uint32_t(s.shape.size()));
      for (auto x : s.shape) put(p, std::uint64_t(x));
      put(p, std::uint64_t(s.values.size()));
      std::memcpy(p, s.values.data(), s.values.size() * sizeof(float));
      p += s.values.size() * sizeof(float);
    }
    h->used = std::size_t(p - payload);
    h->status.store(done);
  } catch (const impl::NotCompiled& e) {
    copy_message(h->message, sizeof h->message, e.what());
    h->status.store(cannot_run);
  } catch (const std::bad_alloc&) {
    copy_message(
        h->message, sizeof h->message,
        "the kernel ran out of memory (worker budget " + std::to_string(memory >> 20) + " MiB)");
    h->status.store(threw);
  } catch (const std::exception& e) {
    copy_message(h->message, sizeof h->message, e.what());
    h->status.store(threw);
  }
  std::fflush(nullptr);
  ::_exit(0);
}

}  // namespace

Ran run_in_worker(const impl::Backend& b, const oracles::OpCase& c, unsigned threads,
                  const Judging& j) {
  Ran r;
  const std::size_t capacity = payload_bytes(c);
  const std::size_t bytes = sizeof(Header) + capacity;
  void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) throw std::runtime_error("cannot map the worker's shared memory");
  auto* h = new (mem) Header{};
  char* payload = static_cast<char*>(mem) + sizeof(Header);
  // The child holds the write end of a pipe: its end, however it comes, wakes poll() at once.
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    ::munmap(mem, bytes);
    throw std::runtime_error("cannot start a worker process (pipe failed)");
  }
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    ::munmap(mem, bytes);
    throw std::runtime_error("cannot start a worker process (fork failed)");
  }
  // The worker leads a process group of its own: what a kernel forks goes with it, and a signal
  // a kernel sends to its group (kill(0, ...)) stays there.
  if (pid == 0) {
    ::setpgid(0, 0);
    ::close(pipe_fds[0]);
    child(b, c, threads, h, payload, capacity, std::size_t(j.limits.memory));
  }
  ::setpgid(pid, pid);
  ::close(pipe_fds[1]);
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  bool timed_out = false, interrupted = false;
  auto stop_child = [&] {
    ::kill(-pid, SIGKILL);
    ::kill(pid, SIGKILL);
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  };
  for (;;) {
    pollfd p{pipe_fds[0], POLLIN, 0};
    const int ready = ::poll(&p, 1, 100);  // the interrupt flag is looked at every 100 ms
    if (ready > 0) {  // end of file: the child is gone (or a stray write: read and go on)
      char sink[64];
      if (::read(pipe_fds[0], sink, sizeof sink) <= 0) {
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        break;
      }
      continue;
    }
    // Gone while a process it forked still holds the pipe open.
    if (::waitpid(pid, &status, WNOHANG) == pid) break;
    if (reports::interrupted()) {  // the run stops: the case in progress is not waited for
      stop_child();
      interrupted = true;
      break;
    }
    if (std::chrono::steady_clock::now() - start >
        std::chrono::duration<double>(j.kernel_seconds)) {
      stop_child();
      timed_out = true;
      break;
    }
  }
  ::close(pipe_fds[0]);
  ::kill(-pid, SIGKILL);  // whatever the worker left running
  auto fail = [&](const std::string& why) {
    r.verdict = kernel_verdict(oracles::State::fail, "crashed", "the kernel's worker " + why);
  };
  const int st = h->status.load();
  h->message[sizeof h->message - 1] = h->wrote[sizeof h->wrote - 1] = '\0';
  if (interrupted) {
    r.verdict = kernel_verdict(oracles::State::skipped, "interrupted",
                               std::string("the run was interrupted by ") + reports::interrupted());
  } else if (timed_out) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", j.kernel_seconds);
    fail(std::string("took longer than its time limit of ") + buf + " s: killed");
  } else if (WIFSIGNALED(status)) {
    fail("died of " + impl::signal_text(WTERMSIG(status)));
  } else if (st == done) {
    if (h->used > capacity || !read_trace({payload, payload + h->used}, r.got)) {
      r.got.clear();
      fail("left a malformed result (its lengths do not add up to the bytes it wrote)");
    } else {
      r.wrote = h->wrote;
      if (!r.wrote.empty()) r.wrote = "the kernel wrote its input " + r.wrote;
    }
  } else if (st == threw) {
    r.verdict = kernel_verdict(oracles::State::fail, "threw",
                               std::string("the kernel threw: ") + h->message);
  } else if (st == cannot_run) {
    r.verdict = kernel_verdict(oracles::State::skipped, "cannot_run",
                               "kernel " + b.name + " cannot run here: " + h->message);
  } else if (st == too_large) {
    fail("produced more output than its op's stages hold");
  } else {
    fail("ended its process (exit code " + std::to_string(WEXITSTATUS(status)) +
         ") before the kernel returned");
  }
  ::munmap(mem, bytes);
  return r;
}

}  // namespace mhc::runner
