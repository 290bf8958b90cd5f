// libflash/cpu/parallel.h -- spreads independent work items over the host's threads.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <thread>
#include <vector>

namespace flash::cpu {

// Worker threads for a call: LIBFLASH_NUM_THREADS if set, else the hardware's.
inline int num_threads() {
  if (const char* s = std::getenv("LIBFLASH_NUM_THREADS")) {
    const int n = std::atoi(s);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// Calls fn(item, thread_index) for every item in [0, n), items handed out dynamically so uneven work
// (causal rows, sparse blocks) balances. fn must not throw.
template <class F>
void parallel_for(int64_t n, F&& fn) {
  const int threads = static_cast<int>(std::min<int64_t>(num_threads(), n));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  auto worker = [&](int t) {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < n;) fn(i, t);
  };
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (auto& th : pool) th.join();
}

}  // namespace flash::cpu
