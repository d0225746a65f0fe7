#include "core/thread_pool.h"

#include <immintrin.h>

#include "core/cpu.h"

namespace kvtax {

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads > 0 ? n_threads : cpu().physical_cores) {
  for (int t = 1; t < n_threads_; ++t) threads_.emplace_back([this, t] { worker(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int tid) {
  uint32_t seen = 0;
  for (;;) {
    // Spin first: the next job usually arrives within microseconds during decode.
    for (int i = 0; i < 20000 && generation_.load(std::memory_order_acquire) == seen; ++i) _mm_pause();
    generation_.wait(seen, std::memory_order_acquire);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    (*job_)(tid, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  fn(0, n_threads_);
  // Spin briefly, then yield: when the machine is oversubscribed the worker we wait for may need
  // this core to finish.
  for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) {
    if (i < 4096) _mm_pause();
    else std::this_thread::yield();
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  run([&](int tid, int nth) {
    const int64_t begin = n * tid / nth, end = n * (tid + 1) / nth;
    if (begin < end) fn(begin, end, tid);
  });
}

}  // namespace kvtax
