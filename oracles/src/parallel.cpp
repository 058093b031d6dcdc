#include "mhc/oracles/parallel.hpp"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "mhc/oracles/pieces.hpp"

namespace mhc::par {

namespace {

class Pool {
 public:
  unsigned helpers() {  // started here on first use
    std::call_once(started_, [this] {
      const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
      for (unsigned w = 0; w + 1 < cores; ++w) std::thread([this] { serve(); }).detach();
      count_ = cores - 1;
    });
    return count_;
  }
  void post(std::function<void()> job) {
    {
      const std::lock_guard<std::mutex> lock(m_);
      queue_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

 private:
  void serve() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job();
      num::release_thread_caches();  // as a thread of its own would at its end
    }
  }
  std::once_flag started_;
  unsigned count_ = 0;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
};

// Never destroyed: its threads outlive static destruction. A forked child gets a new one (the
// parent's threads are not in the child, and its mutex may be held by one of them).
Pool* the_pool = nullptr;
Pool& pool() {
  static const bool registered = [] {
    the_pool = new Pool;
    pthread_atfork(nullptr, nullptr, [] { the_pool = new Pool; });
    return true;
  }();
  (void)registered;
  return *the_pool;
}

struct Loop {
  std::atomic<std::size_t> next{0}, done{0};
  std::size_t n = 0;
  const std::function<void(std::size_t)>* fn = nullptr;
  std::mutex m;
  std::condition_variable cv;
  std::exception_ptr error;
  // Claims indices until none is left; fn is read only under a claimed index, while the caller
  // still waits.
  void work() {
    for (std::size_t i; (i = next++) < n;) {
      try {
        (*fn)(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(m);
        if (!error) error = std::current_exception();
      }
      if (++done == n) {
        const std::lock_guard<std::mutex> lock(m);
        cv.notify_all();
      }
    }
  }
};

}  // namespace

void for_each(std::size_t n, unsigned threads, const std::function<void(std::size_t)>& fn) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t helpers = std::min<std::size_t>({threads - 1, n ? n - 1 : 0, pool().helpers()});
  if (helpers == 0) {
    for (std::size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  auto loop = std::make_shared<Loop>();
  loop->n = n;
  loop->fn = &fn;
  for (std::size_t h = 0; h < helpers; ++h) pool().post([loop] { loop->work(); });
  loop->work();
  std::unique_lock<std::mutex> lock(loop->m);
  loop->cv.wait(lock, [&] { return loop->done == n; });
  if (loop->error) std::rethrow_exception(loop->error);
}

struct Task::State {
  std::mutex m;
  std::condition_variable cv;
  bool begun = false, finished = false;
  std::function<void()> fn;
  std::exception_ptr error;
  void run() {  // by whoever begins it
    try {
      fn();
    } catch (...) {
      error = std::current_exception();
    }
    const std::lock_guard<std::mutex> lock(m);
    finished = true;
    cv.notify_all();
  }
  bool begin() {
    const std::lock_guard<std::mutex> lock(m);
    return !std::exchange(begun, true);
  }
};

Task::Task(std::function<void()> fn) : s_(std::make_shared<State>()) {
  s_->fn = std::move(fn);
  if (pool().helpers() > 0)
    pool().post([s = s_] {
      if (s->begin()) s->run();
    });
}

void Task::wait() {
  if (!s_) return;
  if (s_->begin()) {
    s_->run();
  } else {
    std::unique_lock<std::mutex> lock(s_->m);
    s_->cv.wait(lock, [&] { return s_->finished; });
  }
  const std::exception_ptr error = s_->error;
  s_.reset();
  if (error) std::rethrow_exception(error);
}

Task::~Task() {
  if (!s_) return;
  try {
    wait();
  } catch (...) {  // an exception not asked for with wait() is dropped
  }
}

}  // namespace mhc::par
