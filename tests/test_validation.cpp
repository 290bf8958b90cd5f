// tests/test_validation.cpp -- every validation path returns its status and a message naming the
// problem; nothing crashes, nothing is written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "flash.h"

namespace {

struct Fixture {
  std::vector<float> q, k, v, o, lse;
  flash_fwd_args args;
  Fixture(int64_t b = 2, int64_t sq = 10, int64_t sk = 12, int64_t hq = 4, int64_t hkv = 2, int64_t d = 64) {
    q.assign(b * sq * hq * d, 0.5f);
    k.assign(b * sk * hkv * d, 0.25f);
    v.assign(b * sk * hkv * d, 1.0f);
    o.assign(b * sq * hq * d, NAN);
    lse.assign(b * hq * sq, NAN);
    const int64_t qs[4] = {b, sq, hq, d}, ks[4] = {b, sk, hkv, d}, ls[3] = {b, hq, sq};
    flash_fwd_args_init(&args);
    args.q = flash_tensor_contiguous(q.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, qs);
    args.k = flash_tensor_contiguous(k.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, ks);
    args.v = flash_tensor_contiguous(v.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, ks);
    args.o = flash_tensor_contiguous(o.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, qs);
    args.lse = flash_tensor_contiguous(lse.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 3, ls);
  }
  bool untouched() const {
    for (float x : o) if (!std::isnan(x)) return false;
    for (float x : lse) if (!std::isnan(x)) return false;
    return true;
  }
};

// Expects `status` and a message containing `needle`, and outputs left alone.
void expect_error(Fixture& f, int32_t status, const std::string& needle) {
  const int32_t s = flash_fwd(&f.args);
  EXPECT_EQ(s, status) << flash_status_string(s) << ": " << flash_last_error_message();
  EXPECT_NE(std::string(flash_last_error_message()).find(needle), std::string::npos)
      << "message was: " << flash_last_error_message();
  EXPECT_TRUE(f.untouched()) << "a failed call wrote its outputs";
}

}  // namespace

TEST(Validation, ValidCallSucceeds) {
  Fixture f;
  ASSERT_EQ(flash_fwd(&f.args), FLASH_OK) << flash_last_error_message();
  EXPECT_EQ(f.args.algorithm_used, FLASH_ALGO_CPU);
}

TEST(Validation, NullArgs) {
  EXPECT_EQ(flash_fwd(nullptr), FLASH_ERROR_NULL_POINTER);
  EXPECT_NE(std::string(flash_last_error_message()).find("args is NULL"), std::string::npos);
  EXPECT_EQ(flash_fwd_args_init_sized(nullptr, sizeof(flash_fwd_args)), FLASH_ERROR_NULL_POINTER);
  size_t n;
  EXPECT_EQ(flash_fwd_workspace_size(nullptr, &n), FLASH_ERROR_NULL_POINTER);
}

TEST(Validation, NullDataPointers) {
  for (const char* name : {"q", "k", "v", "o"}) {
    Fixture f;
    flash_tensor* t = !std::strcmp(name, "q") ? &f.args.q : !std::strcmp(name, "k") ? &f.args.k
                    : !std::strcmp(name, "v") ? &f.args.v : &f.args.o;
    t->data = nullptr;
    expect_error(f, FLASH_ERROR_NULL_POINTER, std::string(name) + ".data is NULL");
  }
}

TEST(Validation, StructSizeTooSmall) {
  Fixture f;
  f.args.struct_size = 16;
  expect_error(f, FLASH_ERROR_STRUCT_SIZE, "struct_size is 16");
}

TEST(Validation, ZeroAndNegativeShapes) {
  {
    Fixture f;
    f.args.q.shape[1] = 0;
    expect_error(f, FLASH_ERROR_BAD_SHAPE, "q.shape[1] is 0");
  }
  {
    Fixture f;
    f.args.k.shape[0] = -3;
    expect_error(f, FLASH_ERROR_BAD_SHAPE, "k.shape[0] is -3");
  }
}

TEST(Validation, OverflowingShapes) {
  Fixture f;
  f.args.q.shape[1] = int64_t{1} << 40;
  expect_error(f, FLASH_ERROR_BAD_SHAPE, "larger than 2^31-1");
  Fixture g;
  g.args.q.shape[0] = g.args.q.shape[1] = g.args.q.shape[2] = int64_t{1} << 30;
  g.args.o.shape[0] = g.args.o.shape[1] = g.args.o.shape[2] = int64_t{1} << 30;
  g.args.q.strides[0] = g.args.q.strides[1] = g.args.q.strides[2] = int64_t{1} << 20;
  expect_error(g, FLASH_ERROR_BAD_SHAPE, "2^63");
}

TEST(Validation, MismatchedShapes) {
  {
    Fixture f(2, 10, 12, 4, 2, 128);
    f.args.k.shape[3] = 96;
    expect_error(f, FLASH_ERROR_BAD_SHAPE, "k.shape[3] is 96 but q.shape[3] is 128");
  }
  {
    Fixture f;
    f.args.v.shape[1] = 11;
    expect_error(f, FLASH_ERROR_BAD_SHAPE, "v.shape[1] is 11 but k.shape[1] is 12");
  }
  {
    Fixture f;
    f.args.o.shape[2] = 3;
    expect_error(f, FLASH_ERROR_BAD_SHAPE, "o.shape[2] is 3 but q.shape[2] is 4");
  }
  {
    Fixture f(2, 10, 12, 4, 3, 64);  // 4 query heads, 3 kv heads
    expect_error(f, FLASH_ERROR_BAD_SHAPE, "not a multiple of k.shape[2]");
  }
  {
    Fixture f;
    f.args.k.shape[0] = 1;
    expect_error(f, FLASH_ERROR_BAD_SHAPE, "k.shape[0] is 1 but q.shape[0] is 2");
  }
}

TEST(Validation, WrongNdim) {
  Fixture f;
  f.args.q.ndim = 3;
  expect_error(f, FLASH_ERROR_BAD_SHAPE, "q.ndim is 3 but must be 4");
}

TEST(Validation, MismatchedDtypes) {
  Fixture f;
  f.args.v.dtype = FLASH_DTYPE_BF16;
  expect_error(f, FLASH_ERROR_DTYPE_MISMATCH, "v.dtype is bf16 but q.dtype is fp32");
  Fixture g;
  g.args.q.dtype = 77;
  expect_error(g, FLASH_ERROR_UNSUPPORTED_DTYPE, "q.dtype is 77");
}

TEST(Validation, MismatchedDevices) {
  Fixture f;
  f.args.k.device_type = FLASH_DEVICE_CUDA;
  expect_error(f, FLASH_ERROR_DEVICE_MISMATCH, "k is on cuda:0 but q is on cpu");
  Fixture g;
  g.args.q.device_type = 9;
  expect_error(g, FLASH_ERROR_INVALID_ARGUMENT, "q.device_type is 9");
}

TEST(Validation, UnsupportedHeadDims) {
  for (int64_t d : {4, 12, 100, 264, 512}) {
    Fixture f(1, 5, 5, 1, 1, d);
    expect_error(f, FLASH_ERROR_UNSUPPORTED_HEAD_DIM, "head_dim (q.shape[3]) is " + std::to_string(d));
  }
}

TEST(Validation, NonContiguousLastDim) {
  Fixture f;
  f.args.q.strides[3] = 2;
  expect_error(f, FLASH_ERROR_BAD_STRIDE, "q.strides[3] is 2 but the last dimension must be contiguous");
}

TEST(Validation, BadStrides) {
  {
    Fixture f;
    f.args.k.strides[1] = -64;
    expect_error(f, FLASH_ERROR_BAD_STRIDE, "k.strides[1] is -64");
  }
  {
    Fixture f;  // output rows aliasing each other
    f.args.o.strides[1] = 0;
    expect_error(f, FLASH_ERROR_BAD_STRIDE, "o.strides[1] is 0");
  }
  {
    Fixture f;  // output overlapping an input
    f.args.o.data = f.q.data();
    f.args.o = f.args.q;
    expect_error(f, FLASH_ERROR_INVALID_ARGUMENT, "o overlaps q");
  }
}

// A tensor whose last element sits at offset INT64_MAX: its span (INT64_MAX + 1 elements) does not fit in int64. Found
// by the fuzzer: the span computation overflowed on that "+ 1" (undefined behaviour, reported by the sanitizer build);
// it is a bad stride, refused on every entry point with the same words.
TEST(Validation, SpanPastInt64MaxRefused) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  {
    Fixture f(1, 2, 12, 1, 1, 64);  // lse [1, 1, 2]
    f.args.lse.strides[2] = kMax;
    expect_error(f, FLASH_ERROR_BAD_STRIDE, "lse spans more than 2^63 bytes with these strides");
  }
  {
    Fixture f;  // q [2, ...]: batch 1 at offset INT64_MAX
    f.args.q.strides[0] = kMax;
    expect_error(f, FLASH_ERROR_BAD_STRIDE, "q spans more than 2^63 bytes with these strides");
  }
  {
    Fixture f;  // k [2, 12, 2, 64]: the offsets of its last element adding up to exactly INT64_MAX
    f.args.k.strides[0] = kMax - 11 * f.args.k.strides[1] - f.args.k.strides[2] - 63;
    expect_error(f, FLASH_ERROR_BAD_STRIDE, "k spans more than 2^63 bytes");
  }
  {  // flash_combine's tensors go through the same check
    float part[8] = {0}, part_lse[2] = {0}, out[8], out_lse[2] = {NAN, NAN};
    const int64_t os[4] = {1, 2, 1, 4}, ls[3] = {1, 1, 2};
    flash_tensor op = flash_tensor_contiguous(part, FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, os);
    flash_tensor lp = flash_tensor_contiguous(part_lse, FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 3, ls);
    flash_combine_args c;
    flash_combine_args_init(&c);
    c.num_parts = 1, c.o_parts = &op, c.lse_parts = &lp;
    c.o = flash_tensor_contiguous(out, FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, os);
    c.lse = flash_tensor_contiguous(out_lse, FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 3, ls);
    c.lse.strides[2] = kMax;
    EXPECT_EQ(flash_combine(&c), FLASH_ERROR_BAD_STRIDE) << flash_last_error_message();
    EXPECT_NE(std::string(flash_last_error_message()).find("lse spans more than 2^63 bytes"), std::string::npos)
        << flash_last_error_message();
    EXPECT_TRUE(std::isnan(out_lse[0]) && std::isnan(out_lse[1]));
  }
}

TEST(Validation, WrongLseShapeAndDtype) {
  {
    Fixture f;
    f.args.lse.shape[2] = 9;
    expect_error(f, FLASH_ERROR_BAD_SHAPE, "lse.shape[2] is 9 but q.shape[1] is 10");
  }
  {
    Fixture f;
    f.args.lse.shape[1] = 2;
    expect_error(f, FLASH_ERROR_BAD_SHAPE, "lse.shape[1] is 2 but q.shape[2] is 4");
  }
  {
    Fixture f;
    f.args.lse.ndim = 4;
    expect_error(f, FLASH_ERROR_BAD_SHAPE, "lse.ndim is 4 but must be 3");
  }
  {
    Fixture f;
    f.args.lse.dtype = FLASH_DTYPE_FP16;
    expect_error(f, FLASH_ERROR_DTYPE_MISMATCH, "lse.dtype is fp16 but must be fp32");
  }
}

TEST(Validation, BadScalars) {
  {
    Fixture f;
    f.args.softmax_scale = NAN;
    expect_error(f, FLASH_ERROR_INVALID_ARGUMENT, "softmax_scale is not finite");
  }
  {
    Fixture f;
    f.args.causal = 2;
    expect_error(f, FLASH_ERROR_INVALID_ARGUMENT, "causal is 2");
  }
  {
    Fixture f;
    f.args.causal_alignment = 5;
    expect_error(f, FLASH_ERROR_INVALID_ARGUMENT, "causal_alignment is 5");
  }
  {
    Fixture f;
    f.args.window_left = -2;
    expect_error(f, FLASH_ERROR_BAD_MASK, "window_left is -2");
  }
  {
    Fixture f;
    f.args.algorithm = 42;
    expect_error(f, FLASH_ERROR_INVALID_ARGUMENT, "algorithm is 42");
  }
  {
    Fixture f;
    f.args.flags = 0x80;
    expect_error(f, FLASH_ERROR_INVALID_ARGUMENT, "flags has unknown bits");
  }
}

TEST(Validation, AlgorithmOnWrongDevice) {
  Fixture f;
  f.args.algorithm = FLASH_ALGO_SM80;
  const uint32_t compiled = flash_compiled_algorithms();
  if (compiled & (1u << FLASH_ALGO_SM80))
    expect_error(f, FLASH_ERROR_ALGORITHM_UNAVAILABLE, "algorithm sm80 does not run on the CPU");
  else
    expect_error(f, FLASH_ERROR_ALGORITHM_UNAVAILABLE, "algorithm sm80 is not built into this library");
}

TEST(Validation, GpuTensorWithoutGpu) {
  int32_t n = -1;
  ASSERT_EQ(flash_device_count(FLASH_DEVICE_CUDA, &n), FLASH_OK);
  if (n > 0) GTEST_SKIP() << "this machine has a CUDA device";
  Fixture f;
  for (flash_tensor* t : {&f.args.q, &f.args.k, &f.args.v, &f.args.o, &f.args.lse}) t->device_type = FLASH_DEVICE_CUDA;
  f.args.q.dtype = f.args.k.dtype = f.args.v.dtype = f.args.o.dtype = FLASH_DTYPE_BF16;
  expect_error(f, FLASH_ERROR_NO_CUDA_DEVICE, "no CUDA device");
}

TEST(Validation, Fp32OnGpuRejected) {
  Fixture f;
  for (flash_tensor* t : {&f.args.q, &f.args.k, &f.args.v, &f.args.o, &f.args.lse}) t->device_type = FLASH_DEVICE_CUDA;
  expect_error(f, FLASH_ERROR_UNSUPPORTED_DTYPE, "CUDA tensors must be fp16 or bf16");
}

TEST(Validation, BlockMaskErrors) {
  std::vector<int32_t> counts(4 * 1, 1), idx(4 * 1, 0);
  auto make = [&](Fixture& f, flash_block_mask* m) {
    flash_block_mask_init(m);
    m->block_m = 64, m->block_n = 64, m->num_q_blocks = 1, m->max_kv_blocks = 1;
    m->kv_num_blocks = counts.data();
    m->kv_indices = idx.data();
    m->kv_num_blocks_strides[1] = 1;
    m->kv_indices_strides[1] = 1;
    f.args.block_mask = m;
  };
  {
    Fixture f;
    flash_block_mask m;
    make(f, &m);
    ASSERT_EQ(flash_fwd(&f.args), FLASH_OK) << flash_last_error_message();
  }
  {
    Fixture f;
    flash_block_mask m;
    make(f, &m);
    m.block_m = 32;
    expect_error(f, FLASH_ERROR_BAD_MASK, "block size is 32");
  }
  {
    Fixture f;
    flash_block_mask m;
    make(f, &m);
    m.num_q_blocks = 3;
    expect_error(f, FLASH_ERROR_BAD_MASK, "num_q_blocks is 3");
  }
  {
    Fixture f;
    flash_block_mask m;
    make(f, &m);
    idx[2] = 5;
    expect_error(f, FLASH_ERROR_BAD_MASK, "kv_indices[0,2,0,0] is 5");
    idx[2] = 0;
  }
  {
    Fixture f;
    flash_block_mask m;
    make(f, &m);
    m.kv_num_blocks = nullptr;
    expect_error(f, FLASH_ERROR_NULL_POINTER, "kv_num_blocks is NULL");
  }
  {
    Fixture f;
    flash_block_mask m;
    make(f, &m);
    m.struct_size = 8;
    expect_error(f, FLASH_ERROR_STRUCT_SIZE, "block_mask->struct_size is 8");
  }
}

TEST(Validation, WorkspaceTooSmall) {
  Fixture f;
  f.args.algorithm = FLASH_ALGO_NAIVE;
  size_t need = 0;
  ASSERT_EQ(flash_fwd_workspace_size(&f.args, &need), FLASH_OK);
  ASSERT_GT(need, 0u);
  std::vector<char> ws(need);
  f.args.workspace = ws.data();
  f.args.workspace_size = need - 1;
  expect_error(f, FLASH_ERROR_WORKSPACE_TOO_SMALL, "workspace_size is " + std::to_string(need - 1));
  f.args.workspace_size = need;
  EXPECT_EQ(flash_fwd(&f.args), FLASH_OK) << flash_last_error_message();
}

TEST(Validation, MessagesAreThreadLocal) {
  Fixture f;
  f.args.q.shape[1] = 0;
  EXPECT_EQ(flash_fwd(&f.args), FLASH_ERROR_BAD_SHAPE);
  std::string other;
  std::thread([&] { other = flash_last_error_message(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_NE(std::string(flash_last_error_message()), "");
}

TEST(Validation, NaiveOutOfMemoryIsAStatusNotACrash) {
  // seqlen 2^20 x 2^20: naive would materialise a 4 TiB score matrix. Inputs alias one row (stride 0 is
  // fine for inputs); the output is real memory.
  const int64_t n = int64_t{1} << 20, d = 8;
  std::vector<float> row(d, 0.5f), o(n * d);
  const int64_t shape[4] = {1, n, 1, d};
  flash_fwd_args a;
  flash_fwd_args_init(&a);
  a.q = a.k = a.v = flash_tensor_contiguous(row.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, shape);
  a.q.strides[0] = a.q.strides[1] = a.k.strides[0] = a.k.strides[1] = a.v.strides[0] = a.v.strides[1] = 0;
  a.o = flash_tensor_contiguous(o.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, shape);
  a.algorithm = FLASH_ALGO_NAIVE;
  size_t need = 0;
  ASSERT_EQ(flash_fwd_workspace_size(&a, &need), FLASH_OK) << flash_last_error_message();
  EXPECT_GE(need, size_t{1} << 42);
  EXPECT_EQ(flash_fwd(&a), FLASH_ERROR_OUT_OF_MEMORY) << flash_last_error_message();
  EXPECT_NE(std::string(flash_last_error_message()).find("could not allocate"), std::string::npos);
}
