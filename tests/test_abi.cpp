// tests/test_abi.cpp -- the shape of the ABI itself: exported symbols, SONAME, versions, struct sizes,
// names, capability queries.
#include <gtest/gtest.h>

#include <array>
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
}

TEST(Abi, StructSizesMatchTheHeader) {
  EXPECT_EQ(flash_struct_size(FLASH_STRUCT_TENSOR), sizeof(flash_tensor));
  EXPECT_EQ(flash_struct_size(FLASH_STRUCT_FWD_ARGS), sizeof(flash_fwd_args));
  EXPECT_EQ(flash_struct_size(FLASH_STRUCT_BLOCK_MASK), sizeof(flash_block_mask));
  EXPECT_EQ(flash_struct_size(FLASH_STRUCT_DEVICE_INFO), sizeof(flash_device_info));
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
