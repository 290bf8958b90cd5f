// tests/sweep.hpp -- the randomized sweep shared by the CPU and GPU suites.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>

#include "support/harness.hpp"

namespace flash_test {

// Runs one random case on (device, algorithm) and checks it. `index` picks the case: the same index
// and LIBFLASH_TEST_SEED give the same case.
inline void sweep_case(int index, int32_t device_type, int32_t algorithm, bool with_masks) {
  std::mt19937_64 rng(base_seed() + 7919u * static_cast<uint64_t>(index) + 104729u * static_cast<uint64_t>(algorithm));
  CaseSpec spec = random_spec(rng, device_type == FLASH_DEVICE_CUDA, with_masks);
  if (algorithm == FLASH_ALGO_SM90) {
    // sm90 runs head dims 64, 128 and 256 (AUTO hands the others to sm80; GpuEdges checks the refusal).
    spec.head_dim = int64_t{64} << (index % 3);
    while (spec.batch * spec.heads_q * spec.seqlen_q * spec.seqlen_k * spec.head_dim > 60'000'000)
      spec.seqlen_k = std::max<int64_t>(1, spec.seqlen_k * 2 / 3);  // the reference's cost cap
  }
  Case c = make_case(spec, rng);
  int32_t used = -1;
  const int32_t s = device_type == FLASH_DEVICE_CUDA ? run_cuda(c, algorithm, 0, &used) : run_cpu(c, algorithm, &used);
  ASSERT_EQ(s, FLASH_OK) << flash_status_string(s) << ": " << flash_last_error_message() << "\n  case: " << spec.describe()
                         << "\n  LIBFLASH_TEST_SEED=" << base_seed();
  EXPECT_EQ(used, algorithm);
  const Check ch = check_case(c);
  EXPECT_TRUE(ch.ok) << ch.message << "\n  case: " << spec.describe() << "\n  LIBFLASH_TEST_SEED=" << base_seed();
}

}  // namespace flash_test
