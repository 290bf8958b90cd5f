// cli/src/device.cpp -- host and (FA_BENCH_WITH_CUDA) CUDA implementations of Device.
#include "device.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "flash.h"

#ifdef FA_BENCH_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace fabench {
namespace {

// The buffer written between repetitions: twice the cache, at least 8 MiB, at most 512 MiB.
size_t flush_size(int64_t llc_bytes) {
  const int64_t want = llc_bytes > 0 ? 2 * llc_bytes : (64ll << 20);
  return static_cast<size_t>(std::clamp<int64_t>(want, 8ll << 20, 512ll << 20));
}

class HostDevice final : public Device {
 public:
  explicit HostDevice(int64_t llc) : flush_(flush_size(llc)) {}
  void* alloc(size_t bytes) override { return std::malloc(bytes == 0 ? 1 : bytes); }
  void release(void* p) override { std::free(p); }
  bool upload(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); return true; }
  bool download(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); return true; }
  void flush_cache() override {
    if (buffer_.empty()) buffer_.resize(flush_);
    ++stamp_;
    std::memset(buffer_.data(), stamp_, buffer_.size());
  }
  size_t flush_bytes() const override { return flush_; }
  double time_call(const std::function<int32_t()>& call, int32_t* status) override {
    const auto t0 = std::chrono::steady_clock::now();
    *status = call();
    const auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::milli>(t1 - t0).count();
  }
  void* stream() override { return nullptr; }
  const char* timing_method() const override { return "steady_clock"; }
  std::string last_error() const override { return "host allocation failed"; }

 private:
  size_t flush_;
  std::vector<unsigned char> buffer_;
  unsigned char stamp_ = 0;
};

#ifdef FA_BENCH_WITH_CUDA
class CudaDevice final : public Device {
 public:
  CudaDevice(int id, int64_t llc) : id_(id), flush_(flush_size(llc)) {}
  bool init(std::string* error) {
    if (!ok(cudaSetDevice(id_)) || !ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)) ||
        !ok(cudaEventCreate(&start_)) || !ok(cudaEventCreate(&stop_))) {
      *error = "CUDA device " + std::to_string(id_) + ": " + error_;
      return false;
    }
    return true;
  }
  ~CudaDevice() override {
    if (flush_buffer_) cudaFree(flush_buffer_);
    if (start_) cudaEventDestroy(start_);
    if (stop_) cudaEventDestroy(stop_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  void* alloc(size_t bytes) override {
    void* p = nullptr;
    if (!ok(cudaMalloc(&p, bytes == 0 ? 1 : bytes))) {
      cudaGetLastError();  // clear the sticky-free error so later calls work
      return nullptr;
    }
    return p;
  }
  void release(void* p) override {
    if (p) cudaFree(p);
  }
  bool upload(void* dst, const void* src, size_t n) override { return ok(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice)); }
  bool download(void* dst, const void* src, size_t n) override {
    return ok(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
  }
  void flush_cache() override {
    if (!flush_buffer_ && !ok(cudaMalloc(&flush_buffer_, flush_))) {
      flush_buffer_ = nullptr;
      cudaGetLastError();
      return;
    }
    ++stamp_;
    cudaMemsetAsync(flush_buffer_, stamp_, flush_, stream_);
  }
  size_t flush_bytes() const override { return flush_; }
  double time_call(const std::function<int32_t()>& call, int32_t* status) override {
    cudaEventRecord(start_, stream_);
    *status = call();
    cudaEventRecord(stop_, stream_);
    if (!ok(cudaEventSynchronize(stop_))) {
      if (*status == FLASH_OK) *status = FLASH_ERROR_CUDA;
      return 0.0;
    }
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start_, stop_);
    return ms;
  }
  void* stream() override { return stream_; }
  const char* timing_method() const override { return "cuda_events"; }
  std::string last_error() const override { return error_; }

 private:
  bool ok(cudaError_t e) {
    if (e == cudaSuccess) return true;
    error_ = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    return false;
  }
  int id_;
  size_t flush_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  void* flush_buffer_ = nullptr;
  unsigned char stamp_ = 0;
  std::string error_;
};
#endif

}  // namespace

bool built_with_cuda() {
#ifdef FA_BENCH_WITH_CUDA
  return true;
#else
  return false;
#endif
}

std::unique_ptr<Device> open_device(int32_t device_type, int32_t device_id, int64_t llc_bytes, std::string* error) {
  if (device_type == FLASH_DEVICE_CPU) return std::make_unique<HostDevice>(llc_bytes);
#ifdef FA_BENCH_WITH_CUDA
  auto d = std::make_unique<CudaDevice>(device_id, llc_bytes);
  if (!d->init(error)) return nullptr;
  return d;
#else
  (void)device_id;
  *error = "this fa-bench was built without the CUDA runtime (configure with FLASH_WITH_CUDA=ON)";
  return nullptr;
#endif
}

}  // namespace fabench
