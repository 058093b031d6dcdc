// The oracle's and the judge's parallel work on one process-wide pool of threads (one fewer than
// the cores, started on first use). Starting threads per call cost about 0.2 ms each on the
// build machine, a tenth of a small judgement (bench/README.md, "The Python API in process").
// The caller always works too and waits only for work another thread has begun, so nested use
// cannot deadlock, and a process forked from a threaded one runs everything on its one thread.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

namespace mhc::par {

// fn(i) for every i in [0, n) on up to `threads` threads (0: every core), the caller one of them;
// returns when all are done, rethrowing the first exception.
void for_each(std::size_t n, unsigned threads, const std::function<void(std::size_t)>& fn);

// fn begun on an idle pool thread; wait() runs it on the caller where no thread has begun it,
// then rethrows its exception. The destructor waits too.
class Task {
 public:
  explicit Task(std::function<void()> fn);
  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task();
  void wait();
  struct State;

 private:
  std::shared_ptr<State> s_;
};

}  // namespace mhc::par
