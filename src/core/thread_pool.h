#pragma once
// A fixed pool of worker threads for data-parallel kernels. The calling thread takes part, so a pool
// of size N runs N-way. Workers spin briefly between jobs (decode issues a job every few microseconds)
// and then sleep on an atomic wait.
#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace kvtax {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads <= 0: all physical cores
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(tid, nth) once for each tid in [0, nth), nth = size(), spread over the pool's threads (a
  // thread may run several tids one after another; no two run the same tid); returns when all finished.
  void run(const std::function<void(int tid, int nth)>& fn);

  // Splits [0, n) into contiguous ranges, at most one per thread, and runs fn(begin, end, tid) on each.
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end, int tid)>& fn);

 private:
  void worker(int tid);
  int n_threads_;
  std::vector<std::thread> threads_;
  void drain(uint32_t gen);
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint32_t> generation_{0};
  // Tasks (tid values) are claimed, not assigned: (generation << 32) | next tid. Whoever is running takes
  // the next one, so a job never waits for a worker the OS has not scheduled yet (oversubscribed machines).
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> done_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace kvtax
