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

thread_local bool t_in_job = false;        // this thread is running a pool job
thread_local bool t_fork_blocked = false;  // this thread's fork holds the pool idle

class Pool {
 public:
  unsigned helpers() {  // started here on first use
    std::call_once(started_, [this] {
      const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
      {
        const std::lock_guard<std::mutex> lock(m_);
        busy_ += cores - 1;  // until each has started and waits
      }
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
  // fork(): a helper that is starting, or freeing a finished job's state, may hold the
  // allocator's lock (AddressSanitizer's is not fork-safe), and the child then waits for it
  // forever. So fork waits until every helper is idle and keeps them so (m_ held) until it
  // returns. A fork from inside a job does not wait (the pool may be waiting for that job).
  void before_fork() {
    std::unique_lock<std::mutex> lock(m_);
    idle_.wait(lock, [this] { return busy_ == 0; });
    lock.release();
  }
  void after_fork() { m_.unlock(); }

 private:
  void serve() {
    std::unique_lock<std::mutex> lock(m_);
    --busy_;
    idle_.notify_all();
    for (;;) {
      cv_.wait(lock, [this] { return !queue_.empty(); });
      std::function<void()> job = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
      lock.unlock();
      t_in_job = true;
      job();
      job = nullptr;
      num::release_thread_caches();  // as a thread of its own would at its end
      t_in_job = false;
      lock.lock();
      --busy_;
      idle_.notify_all();
    }
  }
  std::once_flag started_;
  unsigned count_ = 0, busy_ = 0;
  std::mutex m_;
  std::condition_variable cv_, idle_;
  std::deque<std::function<void()>> queue_;
};

// Never destroyed: its threads outlive static destruction. A forked child gets a new one (the
// parent's threads are not in the child, and its mutex is held by the fork).
Pool* the_pool = nullptr;
Pool& pool() {
  static const bool registered = [] {
    the_pool = new Pool;
    pthread_atfork(
        [] {
          if (t_in_job) return;
          the_pool->before_fork();
          t_fork_blocked = true;
        },
        [] {
          if (t_fork_blocked) the_pool->after_fork();
          t_fork_blocked = false;
        },
        [] {
          t_fork_blocked = false;
          the_pool = new Pool;
        });
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
