#include "core/thread_pool.h"

#include <immintrin.h>

#include "core/cpu.h"

namespace kvtax {

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads > 0 ? n_threads : cpu().physical_cores) {
  for (int t = 1; t < n_threads_; ++t) threads_.emplace_back([this, t] { worker(t); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);  // wakes the workers; they see stop_ and exit
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int) {
  uint32_t seen = 0;
  for (;;) {
    // Spin first: the next job usually arrives within microseconds during decode.
    for (int i = 0; i < 20000 && generation_.load(std::memory_order_acquire) == seen; ++i) _mm_pause();
    if (generation_.load(std::memory_order_acquire) == seen) {
      sleepers_.fetch_add(1);
      generation_.wait(seen, std::memory_order_acquire);
      sleepers_.fetch_sub(1);
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    drain(seen);
  }
}

void ThreadPool::drain(uint32_t gen) {
  uint64_t v = claim_.load(std::memory_order_acquire);
  while (uint32_t(v >> 32) == gen && int(uint32_t(v)) < n_threads_) {
    if (!claim_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) continue;
    (*job_)(int(uint32_t(v)), n_threads_);
    done_.fetch_add(1, std::memory_order_acq_rel);
    v = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
  job_ = &fn;
  done_.store(0, std::memory_order_relaxed);
  claim_.store(uint64_t(gen) << 32, std::memory_order_release);
  generation_.store(gen, std::memory_order_release);
  if (sleepers_.load() > 0) generation_.notify_all();
  drain(gen);
  // Every tid is claimed by now; wait for the ones other threads are still running.
  for (int i = 0; done_.load(std::memory_order_acquire) != n_threads_; ++i) {
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
