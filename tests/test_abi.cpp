// tests/test_abi.cpp -- the shape of the ABI itself: exported symbols, SONAME, versions, struct sizes,
// names, capability queries.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "flash.h"

namespace {
std::string run(const std::string& cmd) {
  std::string out;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  if (!pipe) return out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe.get())) out.append(buf.data(), n);
  return out;
}
}  // namespace

TEST(Abi, OnlyFlashSymbolsAreExported) {
  const std::string out = run("nm -D --defined-only " LIBFLASH_FILE);
  ASSERT_FALSE(out.empty()) << "nm printed nothing for " LIBFLASH_FILE;
  std::istringstream lines(out);
  std::string line;
  int exported = 0;
  while (std::getline(lines, line)) {
    std::istringstream f(line);
    std::string addr, type, name;
    f >> addr >> type >> name;
    if (name.empty() || type == "A") continue;  // version-node markers (FLASH_1)
    EXPECT_EQ(name.rfind("flash_", 0), 0u) << "exported symbol outside the ABI: " << name;
    ++exported;
  }
  EXPECT_GE(exported, 20);
}

TEST(Abi, SonameCarriesTheMajorVersion) {
  const std::string out = run("readelf -d " LIBFLASH_FILE);
  EXPECT_NE(out.find("[libflash.so." + std::to_string(FLASH_VERSION_MAJOR) + "]"), std::string::npos) << out;
}

TEST(Abi, NoDynamicDependencyOnCudaLibraries) {
  // The CUDA runtime is linked statically and cuBLAS is opened on demand: the library needs only libc & co.
  const std::string out = run("readelf -d " LIBFLASH_FILE);
  EXPECT_EQ(out.find("libcudart"), std::string::npos) << out;
  EXPECT_EQ(out.find("libcublas"), std::string::npos) << out;
  EXPECT_EQ(out.find("libcuda.so"), std::string::npos) << out;
}

TEST(Abi, VersionsAgree) {
  EXPECT_EQ(flash_version_number(), static_cast<uint32_t>(FLASH_VERSION_NUMBER));
  EXPECT_EQ(flash_version_major(), static_cast<uint32_t>(FLASH_VERSION_MAJOR));
  EXPECT_EQ(flash_version_minor(), static_cast<uint32_t>(FLASH_VERSION_MINOR));
  EXPECT_EQ(flash_version_patch(), static_cast<uint32_t>(FLASH_VERSION_PATCH));
  const std::string v = std::to_string(FLASH_VERSION_MAJOR) + "." + std::to_string(FLASH_VERSION_MINOR) + "." +
                        std::to_string(FLASH_VERSION_PATCH);
  EXPECT_EQ(std::string(flash_version_string()), v);
  EXPECT_NE(std::string(flash_build_info()).find(v), std::string::npos);
  // The CPU kernels' level picked at run time ends it (capi/api.cpp): "avx512 + avx512bf16", "sve256", "neon", ...
  EXPECT_NE(std::string(flash_build_info()).find("; CPU kernels "), std::string::npos) << flash_build_info();
}

TEST(Abi, StructSizesMatchTheHeader) {
  EXPECT_EQ(flash_struct_size(FLASH_STRUCT_TENSOR), sizeof(flash_tensor));
  EXPECT_EQ(flash_struct_size(FLASH_STRUCT_FWD_ARGS), sizeof(flash_fwd_args));
  EXPECT_EQ(flash_struct_size(FLASH_STRUCT_BLOCK_MASK), sizeof(flash_block_mask));
  EXPECT_EQ(flash_struct_size(FLASH_STRUCT_DEVICE_INFO), sizeof(flash_device_info));
  EXPECT_EQ(flash_struct_size(FLASH_STRUCT_BWD_ARGS), sizeof(flash_bwd_args));
  EXPECT_EQ(flash_struct_size(FLASH_STRUCT_KVCACHE_ARGS), sizeof(flash_kvcache_args));
  EXPECT_EQ(flash_struct_size(FLASH_STRUCT_COMBINE_ARGS), sizeof(flash_combine_args));
  EXPECT_EQ(flash_struct_size(12345), 0u);
}

TEST(Abi, InitSetsDefaults) {
  flash_fwd_args a;
  std::memset(&a, 0x5a, sizeof(a));
  ASSERT_EQ(flash_fwd_args_init(&a), FLASH_OK);
  EXPECT_EQ(a.struct_size, sizeof(a));
  EXPECT_EQ(a.window_left, -1);
  EXPECT_EQ(a.window_right, -1);
  EXPECT_EQ(a.algorithm, FLASH_ALGO_AUTO);
  EXPECT_EQ(a.causal_alignment, FLASH_ALIGN_BOTTOM_RIGHT);
  EXPECT_EQ(a.softmax_scale, 0.0f);
  EXPECT_EQ(a.block_mask, nullptr);
  EXPECT_EQ(a.lse.data, nullptr);
  // 1.3: not varlen.
  EXPECT_EQ(a.cu_seqlens_q, nullptr);
  EXPECT_EQ(a.cu_seqlens_k, nullptr);
  EXPECT_EQ(a.seqused_k, nullptr);
  EXPECT_EQ(a.max_seqlen_q, 0);
  EXPECT_EQ(a.max_seqlen_k, 0);
  EXPECT_EQ(a.varlen_batch, 0);
  EXPECT_EQ(a.reserved_1_3, 0);
  flash_bwd_args b;
  std::memset(&b, 0x5a, sizeof(b));
  ASSERT_EQ(flash_bwd_args_init(&b), FLASH_OK);
  EXPECT_EQ(b.cu_seqlens_q, nullptr);
  EXPECT_EQ(b.cu_seqlens_k, nullptr);
  EXPECT_EQ(b.seqused_k, nullptr);
  EXPECT_EQ(b.max_seqlen_q, 0);
  EXPECT_EQ(b.max_seqlen_k, 0);
  EXPECT_EQ(b.varlen_batch, 0);
  EXPECT_EQ(b.reserved_1_3, 0);
}

// The layout of the 1.3 fields (LP64: the platforms the bindings are built for), appended after each struct's 1.2
// layout with no padding before them or at the end (flash.h, ABI RULES).
TEST(Abi, VarlenFieldsLayout) {
  EXPECT_GE(FLASH_VERSION_NUMBER, 10300);
  if (sizeof(void*) != 8) GTEST_SKIP() << "offsets pinned for LP64";
  EXPECT_EQ(offsetof(flash_fwd_args, workspace_size), 504u);  // the 1.0-1.2 struct ends at 512
  EXPECT_EQ(offsetof(flash_fwd_args, cu_seqlens_q), 512u);
  EXPECT_EQ(offsetof(flash_fwd_args, cu_seqlens_k), 520u);
  EXPECT_EQ(offsetof(flash_fwd_args, max_seqlen_q), 528u);
  EXPECT_EQ(offsetof(flash_fwd_args, max_seqlen_k), 532u);
  EXPECT_EQ(offsetof(flash_fwd_args, seqused_k), 536u);
  EXPECT_EQ(offsetof(flash_fwd_args, varlen_batch), 544u);
  EXPECT_EQ(offsetof(flash_fwd_args, reserved_1_3), 548u);
  EXPECT_EQ(sizeof(flash_fwd_args), 552u);
  EXPECT_EQ(offsetof(flash_bwd_args, workspace_size), 856u);  // the 1.1-1.2 struct ends at 864
  EXPECT_EQ(offsetof(flash_bwd_args, cu_seqlens_q), 864u);
  EXPECT_EQ(offsetof(flash_bwd_args, cu_seqlens_k), 872u);
  EXPECT_EQ(offsetof(flash_bwd_args, max_seqlen_q), 880u);
  EXPECT_EQ(offsetof(flash_bwd_args, max_seqlen_k), 884u);
  EXPECT_EQ(offsetof(flash_bwd_args, seqused_k), 888u);
  EXPECT_EQ(offsetof(flash_bwd_args, varlen_batch), 896u);
  EXPECT_EQ(offsetof(flash_bwd_args, reserved_1_3), 900u);
  EXPECT_EQ(sizeof(flash_bwd_args), 904u);
  EXPECT_EQ(flash_struct_size(FLASH_STRUCT_FWD_ARGS), 552u);
  EXPECT_EQ(flash_struct_size(FLASH_STRUCT_BWD_ARGS), 904u);
}

// A caller built against flash.h 1.0-1.2 passes the struct up to workspace_size: the library must never read past
// it (the 1.3 fields there are the caller's other memory, garbage here) and must run the call dense.
TEST(Abi, OldCallersStructsRunDense) {
  const size_t fwd_old = offsetof(flash_fwd_args, cu_seqlens_q), bwd_old = offsetof(flash_bwd_args, cu_seqlens_q);
  const int64_t shape[4] = {2, 5, 2, 16}, lshape[3] = {2, 2, 5};
  std::vector<float> q(2 * 5 * 2 * 16), k(q.size()), v(q.size()), o(q.size()), o_new(q.size()), d_o(q.size());
  std::vector<float> lse(2 * 2 * 5), dq(q.size()), dk(q.size()), dv(q.size()), dq_new(q.size());
  for (size_t i = 0; i < q.size(); ++i)
    q[i] = std::sin(0.1f * i), k[i] = std::cos(0.07f * i), v[i] = 0.01f * (i % 17), d_o[i] = 0.5f - 0.03f * (i % 11);
  auto t = [](std::vector<float>& x, int ndim, const int64_t* sh) {
    return flash_tensor_contiguous(x.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, ndim, sh);
  };
  // The current layout, as a 1.3 caller makes it.
  flash_fwd_args now;
  flash_fwd_args_init(&now);
  now.q = t(q, 4, shape), now.k = t(k, 4, shape), now.v = t(v, 4, shape), now.o = t(o_new, 4, shape);
  now.causal = 1;
  ASSERT_EQ(flash_fwd(&now), FLASH_OK) << flash_last_error_message();
  // The old caller: its struct followed by unrelated memory (0x5a bytes where the 1.3 fields would be).
  struct {
    flash_fwd_args a;
    unsigned char guard[64];
  } old;
  std::memset(&old, 0x5a, sizeof(old));
  ASSERT_EQ(flash_fwd_args_init_sized(&old.a, fwd_old), FLASH_OK);
  EXPECT_EQ(old.a.struct_size, fwd_old);
  for (size_t b = fwd_old; b < sizeof(old); ++b) ASSERT_EQ(reinterpret_cast<unsigned char*>(&old)[b], 0x5a) << b;
  old.a.q = now.q, old.a.k = now.k, old.a.v = now.v, old.a.o = t(o, 4, shape);
  old.a.lse = t(lse, 3, lshape);
  old.a.causal = 1;
  ASSERT_EQ(flash_fwd(&old.a), FLASH_OK) << flash_last_error_message();
  EXPECT_EQ(o, o_new);
  EXPECT_EQ(old.a.algorithm_used, FLASH_ALGO_CPU);
  EXPECT_EQ(old.guard[0], 0x5a);

  flash_bwd_args bnow;
  flash_bwd_args_init(&bnow);
  bnow.q = now.q, bnow.k = now.k, bnow.v = now.v, bnow.o = old.a.o, bnow.lse = old.a.lse, bnow.d_o = t(d_o, 4, shape);
  bnow.dq = t(dq_new, 4, shape), bnow.dk = t(dk, 4, shape), bnow.dv = t(dv, 4, shape);
  bnow.causal = 1;
  ASSERT_EQ(flash_bwd(&bnow), FLASH_OK) << flash_last_error_message();
  struct {
    flash_bwd_args a;
    unsigned char guard[64];
  } bold;
  std::memset(&bold, 0x5a, sizeof(bold));
  ASSERT_EQ(flash_bwd_args_init_sized(&bold.a, bwd_old), FLASH_OK);
  for (size_t b = bwd_old; b < sizeof(bold); ++b) ASSERT_EQ(reinterpret_cast<unsigned char*>(&bold)[b], 0x5a) << b;
  const size_t keep = bold.a.struct_size;
  std::memcpy(&bold.a, &bnow, bwd_old);
  bold.a.struct_size = keep;
  bold.a.dq = t(dq, 4, shape);
  ASSERT_EQ(flash_bwd(&bold.a), FLASH_OK) << flash_last_error_message();
  EXPECT_EQ(dq, dq_new);
}

TEST(Abi, StatusStringsArePinned) {
  EXPECT_STREQ(flash_status_string(FLASH_OK), "FLASH_OK");
  EXPECT_STREQ(flash_status_string(110), "FLASH_ERROR_BAD_SHAPE");
  EXPECT_STREQ(flash_status_string(200), "FLASH_ERROR_NO_CUDA_DEVICE");
  EXPECT_STREQ(flash_status_string(300), "FLASH_ERROR_OUT_OF_MEMORY");
  EXPECT_STREQ(flash_status_string(-5), "FLASH_ERROR_UNKNOWN_STATUS");
}

TEST(Abi, AlgorithmNamesRoundTrip) {
  for (int32_t a = 0; a < FLASH_ALGO_COUNT; ++a) {
    ASSERT_NE(flash_algorithm_name(a), nullptr);
    EXPECT_EQ(flash_algorithm_from_name(flash_algorithm_name(a)), a);
  }
  EXPECT_EQ(flash_algorithm_name(FLASH_ALGO_COUNT), nullptr);
  EXPECT_EQ(flash_algorithm_from_name("flash9000"), -1);
  EXPECT_EQ(flash_algorithm_from_name(nullptr), -1);
  const uint32_t compiled = flash_compiled_algorithms();
  EXPECT_TRUE(compiled & (1u << FLASH_ALGO_CPU));
  EXPECT_TRUE(compiled & (1u << FLASH_ALGO_NAIVE));
}

TEST(Abi, CapabilityQuery) {
  int32_t n = -1;
  ASSERT_EQ(flash_device_count(FLASH_DEVICE_CPU, &n), FLASH_OK);
  EXPECT_EQ(n, 1);
  ASSERT_EQ(flash_device_count(FLASH_DEVICE_CUDA, &n), FLASH_OK);
  EXPECT_GE(n, 0);
  flash_device_info info;
  ASSERT_EQ(flash_device_info_init(&info), FLASH_OK);
  ASSERT_EQ(flash_get_device_info(FLASH_DEVICE_CPU, 0, &info), FLASH_OK);
  EXPECT_GT(info.multiprocessors, 0);
  EXPECT_GT(info.total_memory_bytes, 0);
  EXPECT_TRUE(info.algorithms & (1u << FLASH_ALGO_CPU));
  EXPECT_GT(std::string(info.name).size(), 0u);
  for (int32_t d = 0; d < n; ++d) {
    ASSERT_EQ(flash_get_device_info(FLASH_DEVICE_CUDA, d, &info), FLASH_OK) << flash_last_error_message();
    EXPECT_GT(info.multiprocessors, 0);
    EXPECT_GT(info.shared_mem_per_sm, 0);
  }
  EXPECT_EQ(flash_get_device_info(FLASH_DEVICE_CUDA, n, &info), FLASH_ERROR_NO_CUDA_DEVICE);
  EXPECT_EQ(flash_get_device_info(FLASH_DEVICE_CPU, 1, &info), FLASH_ERROR_INVALID_ARGUMENT);
  info.struct_size = 4;
  EXPECT_EQ(flash_get_device_info(FLASH_DEVICE_CPU, 0, &info), FLASH_ERROR_STRUCT_SIZE);
}

// A caller built against an older flash.h passes a smaller struct; one built against a newer header
// passes a larger one. The init functions write only the caller's bytes; calls read fields the caller
// lacks as defaults and refuse fields the library does not know.
TEST(Abi, InitWritesOnlyTheCallersBytes) {
  struct Padded {
    flash_fwd_args args;
    unsigned char guard[64];
  } buf;
  std::memset(&buf, 0xAB, sizeof(buf));
  ASSERT_EQ(flash_fwd_args_init_sized(&buf.args, sizeof(flash_fwd_args)), FLASH_OK);
  for (unsigned char g : buf.guard) ASSERT_EQ(g, 0xAB);
  // Smaller than any version of the struct: refused, nothing written.
  std::memset(&buf, 0xAB, sizeof(buf));
  EXPECT_EQ(flash_fwd_args_init_sized(&buf.args, 8), FLASH_ERROR_STRUCT_SIZE);
  EXPECT_EQ(reinterpret_cast<unsigned char*>(&buf.args)[0], 0xAB);
  // Larger than this library knows (a newer header): refused, not silently truncated.
  EXPECT_EQ(flash_fwd_args_init_sized(&buf.args, sizeof(flash_fwd_args) + 16), FLASH_ERROR_STRUCT_SIZE);
  EXPECT_NE(std::string(flash_last_error_message()).find("newer flash.h"), std::string::npos);
  flash_device_info info;
  EXPECT_EQ(flash_device_info_init_sized(&info, sizeof(info) + 8), FLASH_ERROR_STRUCT_SIZE);
}

TEST(Abi, NewerCallerStructIsRefused) {
  std::vector<float> q(64, 0.5f), o(64);
  const int64_t shape[4] = {1, 1, 1, 64};
  struct Bigger {
    flash_fwd_args args;
    int32_t future_field;
  } b;
  ASSERT_EQ(flash_fwd_args_init(&b.args), FLASH_OK);
  b.args.q = b.args.k = b.args.v = flash_tensor_contiguous(q.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, shape);
  b.args.o = flash_tensor_contiguous(o.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, shape);
  ASSERT_EQ(flash_fwd(&b.args), FLASH_OK) << flash_last_error_message();
  b.args.struct_size = sizeof(b);
  EXPECT_EQ(flash_fwd(&b.args), FLASH_ERROR_STRUCT_SIZE);
}

// KV-cache and combine arguments (since 1.2): defaults, the caller's bytes only, newer structs refused.
TEST(Abi, KvcacheAndCombineInit) {
  flash_kvcache_args a;
  std::memset(&a, 0x5a, sizeof(a));
  ASSERT_EQ(flash_kvcache_args_init(&a), FLASH_OK);
  EXPECT_EQ(a.struct_size, sizeof(a));
  EXPECT_EQ(a.k_new.data, nullptr);
  EXPECT_EQ(a.lse.data, nullptr);
  EXPECT_EQ(a.cache_seqlens, nullptr);
  EXPECT_EQ(a.cache_batch_idx, nullptr);
  EXPECT_EQ(a.block_table, nullptr);
  EXPECT_EQ(a.block_table_stride, 0);
  EXPECT_EQ(a.softmax_scale, 0.0f);
  EXPECT_EQ(a.causal, 0);
  EXPECT_EQ(a.window_left, -1);
  EXPECT_EQ(a.window_right, -1);
  EXPECT_EQ(a.num_splits, 0);
  EXPECT_EQ(a.algorithm, FLASH_ALGO_AUTO);
  EXPECT_EQ(a.flags, 0u);
  EXPECT_EQ(a.workspace, nullptr);
  flash_combine_args c;
  std::memset(&c, 0x5a, sizeof(c));
  ASSERT_EQ(flash_combine_args_init(&c), FLASH_OK);
  EXPECT_EQ(c.struct_size, sizeof(c));
  EXPECT_EQ(c.num_parts, 0);
  EXPECT_EQ(c.o_parts, nullptr);
  EXPECT_EQ(c.lse.data, nullptr);
  struct Padded {
    flash_kvcache_args args;
    unsigned char guard[64];
  } buf;
  std::memset(&buf, 0xAB, sizeof(buf));
  ASSERT_EQ(flash_kvcache_args_init_sized(&buf.args, sizeof(flash_kvcache_args)), FLASH_OK);
  for (unsigned char g : buf.guard) ASSERT_EQ(g, 0xAB);
  EXPECT_EQ(flash_kvcache_args_init_sized(&buf.args, 8), FLASH_ERROR_STRUCT_SIZE);
  EXPECT_EQ(flash_kvcache_args_init_sized(&buf.args, sizeof(flash_kvcache_args) + 16), FLASH_ERROR_STRUCT_SIZE);
  EXPECT_NE(std::string(flash_last_error_message()).find("newer flash.h"), std::string::npos);
  EXPECT_EQ(flash_combine_args_init_sized(&c, sizeof(c) + 8), FLASH_ERROR_STRUCT_SIZE);
  EXPECT_EQ(flash_combine_args_init_sized(nullptr, sizeof(c)), FLASH_ERROR_NULL_POINTER);
}
