// tests/support/harness.hpp -- random attention problems, run through flash.h on any device, checked
// against the fp64 reference with the error bounded by a multiple of the naive same-dtype error.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "flash.h"
#include "reference.hpp"

namespace flash_test {

// Seed for this process: LIBFLASH_TEST_SEED if set (to reproduce a failure), else fresh.
uint64_t base_seed();

// A host tensor: bytes plus a descriptor whose strides may leave gaps.
struct HostTensor {
  std::vector<unsigned char> bytes;
  flash_tensor desc{};
  int64_t span_elements() const;
};

// How the [b, s, h, d] tensors are laid out in memory.
enum class Layout {
  Contiguous,  // [b, s, h, d] packed
  PaddedRows,  // [b, s, h, d] with gaps after each row and head (strides still multiples of 8)
  HeadMajor,   // memory order [b, h, s, d] (a transposed view, as PyTorch's [b, h, s, d] tensors)
};

struct CaseSpec {
  int64_t batch = 1, seqlen_q = 1, seqlen_k = 1, heads_q = 1, heads_kv = 1, head_dim = 64;
  int32_t dtype = FLASH_DTYPE_FP32;
  float softmax_scale = 0.0f;  // 0: default 1/sqrt(d)
  flash_ref::Mask mask;
  bool want_lse = true;
  Layout layout = Layout::Contiguous;
  double magnitude = 1.0;       // inputs ~ N(0, magnitude^2)
  std::string describe() const;
};

struct Case {
  CaseSpec spec;
  HostTensor q, k, v, o, lse;
  // Compact block mask built from spec.mask.listed (host arrays; copied for GPU runs).
  std::vector<int32_t> kv_num_blocks, kv_indices;
  flash_block_mask block_mask{};
  bool has_block_mask = false;
};

// Builds a case with fresh random inputs (rounded to the dtype) and NaN-poisoned outputs.
Case make_case(const CaseSpec& spec, std::mt19937_64& rng);

// Random spec for the randomized sweep: sizes from 1 to ~1000 with odd lengths, GQA ratios 1/2/4,
// head dims 8..256, scales, layouts, masks. `gpu` restricts dtypes to fp16/bf16.
CaseSpec random_spec(std::mt19937_64& rng, bool gpu, bool with_masks);

// Fills args for `c` (host descriptors). The caller may retarget the data pointers.
void fill_args(Case& c, flash_fwd_args* args, int32_t algorithm);

// Runs the forward on the host. Returns the status; outputs land in c.o / c.lse.
int32_t run_cpu(Case& c, int32_t algorithm, int32_t* algorithm_used = nullptr);

// Runs the forward on CUDA device `device`: copies inputs over, poisons outputs, copies outputs back.
// Returns FLASH_ERROR_NO_CUDA_DEVICE when the test binary has no CUDA.
// workspace / workspace_size: the caller's device scratch for flash_fwd (nullptr: the library allocates).
int32_t run_cuda(Case& c, int32_t algorithm, int device, int32_t* algorithm_used = nullptr, void* workspace = nullptr,
                 size_t workspace_size = 0);
bool cuda_available();
// Device memory on the current device for tests that hand buffers to flash.h (nullptr without CUDA).
void* cuda_alloc(size_t bytes);
void cuda_free(void* ptr);
// Synchronous copies to and from such memory (false on failure or without CUDA).
bool cuda_upload(void* dst, const void* src, size_t bytes);
bool cuda_download(void* dst, const void* src, size_t bytes);

struct Check {
  bool ok = false;
  double err = 0, naive_err = 0, bound = 0;     // max |O - O_ref|
  double lse_err = 0, lse_naive_err = 0, lse_bound = 0;
  std::string message;
};

// Compares c's outputs with the fp64 reference. Bound: 2 x the naive same-dtype error plus one
// rounding of the output (half an ulp of max |O|), which no algorithm can avoid. NaN never passes;
// rows that see no key must have O == 0 exactly and LSE == -inf.
Check check_case(const Case& c, double multiple = 2.0);

}  // namespace flash_test
