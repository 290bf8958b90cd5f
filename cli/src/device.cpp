// cli/src/device.cpp -- host and (FA_BENCH_WITH_CUDA) CUDA implementations of Device.
#include "device.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "flash.h"

#ifdef FA_BENCH_WITH_CUDA
#include <cuda_runtime.h>
#include <dlfcn.h>
#endif

namespace fabench {
namespace {

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

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
  double copy_bandwidth(size_t bytes, int copies) override {
    std::vector<unsigned char> src, dst;
    try {
      src.assign(bytes, 1);
      dst.assign(bytes, 0);
    } catch (const std::bad_alloc&) {
      return -1.0;
    }
    // One slice a hardware thread, as the cpu algorithm uses them all.
    const size_t threads = std::max(1u, std::thread::hardware_concurrency());
    const size_t slice = (bytes + threads - 1) / threads;
    auto copy_once = [&] {
      std::vector<std::thread> pool;
      for (size_t t = 1; t < threads; ++t)
        if (t * slice < bytes)
          pool.emplace_back([&, t] { std::memcpy(dst.data() + t * slice, src.data() + t * slice, std::min(slice, bytes - t * slice)); });
      std::memcpy(dst.data(), src.data(), std::min(slice, bytes));
      for (std::thread& th : pool) th.join();
    };
    copy_once();
    std::vector<double> rates;
    for (int i = 0; i < copies; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      copy_once();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s > 0) rates.push_back(2.0 * double(bytes) / s);
    }
    return rates.empty() ? -1.0 : median_of(rates);
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
// The driver's management library, opened at run time (fa-bench links no libnvidia-ml, and CI's machines have none):
// the SM clock and the active clock-limit reasons of one device, found by its PCI bus id (CUDA's and NVML's device
// orders can differ). Every call fails quietly where the library or the device is missing.
class Nvml {
 public:
  explicit Nvml(int cuda_device) {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) return;
    using Init = int (*)();
    using ByBus = int (*)(const char*, void**);
    auto init = reinterpret_cast<Init>(dlsym(lib_, "nvmlInit_v2"));
    auto by_bus = reinterpret_cast<ByBus>(dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
    clock_ = reinterpret_cast<Clock>(dlsym(lib_, "nvmlDeviceGetClockInfo"));
    reasons_ = reinterpret_cast<Reasons>(dlsym(lib_, "nvmlDeviceGetCurrentClocksEventReasons"));
    if (!reasons_) reasons_ = reinterpret_cast<Reasons>(dlsym(lib_, "nvmlDeviceGetCurrentClocksThrottleReasons"));
    char bus[32] = {};
    if (!init || !by_bus || !clock_ || init() != 0 || cudaDeviceGetPCIBusId(bus, sizeof bus, cuda_device) != cudaSuccess ||
        by_bus(bus, &device_) != 0)
      device_ = nullptr;
  }
  ~Nvml() {
    if (lib_) {
      if (device_)
        if (auto shutdown = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlShutdown"))) shutdown();
      dlclose(lib_);
    }
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;
  bool available() const { return device_ != nullptr; }
  bool sample(int* mhz, bool* limited) const {
    unsigned int sm = 0;
    if (!device_ || clock_(device_, 1 /* NVML_CLOCK_SM */, &sm) != 0) return false;
    unsigned long long why = 0;
    // Software power cap 0x4, hardware slowdown 0x8, software thermal 0x20, hardware thermal 0x40, power brake 0x80
    // (nvmlClocksEventReasons); not idle (0x1), which a finished call sets.
    const bool known = reasons_ && reasons_(device_, &why) == 0;
    *mhz = int(sm);
    *limited = known && (why & 0xECull) != 0;
    return true;
  }

 private:
  using Clock = int (*)(void*, int, unsigned int*);
  using Reasons = int (*)(void*, unsigned long long*);
  void* lib_ = nullptr;
  void* device_ = nullptr;
  Clock clock_ = nullptr;
  Reasons reasons_ = nullptr;
};

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
  bool upload(void* dst, const void* src, size_t n) override {
    // From pageable memory cudaMemcpy may return before its DMA has landed, and fa-bench's stream does not wait for the
    // legacy stream: wait here, so the next call on the stream sees the data.
    return ok(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice)) && ok(cudaStreamSynchronize(nullptr));
  }
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
    // The clock sampler runs from before the start event to after the stop event has completed (call_clock).
    std::atomic<bool> done{false};
    clock_n_ = 0, clock_sum_ = 0.0, clock_min_ = 0, clock_limited_ = false;
    std::thread sampler;
    const auto take = [&] {
      int mhz = 0;
      bool limited = false;
      if (!nvml_->sample(&mhz, &limited)) return false;
      clock_min_ = clock_n_ == 0 ? mhz : std::min(clock_min_, mhz);
      clock_sum_ += mhz, ++clock_n_, clock_limited_ = clock_limited_ || limited;
      return true;
    };
    const bool sampling = clock_mode_ > 0 && nvml_ && nvml_->available();
    if (sampling && clock_mode_ == 2)
      sampler = std::thread([&] {
        while (take() && !done.load(std::memory_order_relaxed)) {
        }
      });
    cudaEventRecord(start_, stream_);
    const auto t0 = std::chrono::steady_clock::now();
    *status = call();
    host_us_ = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    cudaEventRecord(stop_, stream_);
    const cudaError_t synced = cudaEventSynchronize(stop_);
    done.store(true, std::memory_order_relaxed);
    if (sampler.joinable()) sampler.join();
    if (sampling && clock_mode_ == 1) take();
    if (!ok(synced)) {
      if (*status == FLASH_OK) *status = FLASH_ERROR_CUDA;
      return 0.0;
    }
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start_, stop_);
    return ms;
  }
  double copy_bandwidth(size_t bytes, int copies) override {
    void *src = nullptr, *dst = nullptr;
    if (!ok(cudaMalloc(&src, bytes)) || !ok(cudaMalloc(&dst, bytes))) {
      cudaGetLastError();
      if (src) cudaFree(src);
      return -1.0;
    }
    double result = -1.0;
    std::vector<double> rates;
    bool good = ok(cudaMemsetAsync(src, 1, bytes, stream_)) && ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
    for (int i = 0; good && i < copies; ++i) {
      good = ok(cudaEventRecord(start_, stream_)) && ok(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_)) &&
             ok(cudaEventRecord(stop_, stream_)) && ok(cudaEventSynchronize(stop_));
      float ms = 0.0f;
      if (good && ok(cudaEventElapsedTime(&ms, start_, stop_)) && ms > 0.0f) rates.push_back(2.0 * double(bytes) / (ms * 1e-3));
    }
    if (good && !rates.empty()) result = median_of(rates);
    cudaFree(src);
    cudaFree(dst);
    return result;
  }
  bool call_clock(double* mean_mhz, int* min_mhz, bool* limited) const override {
    if (clock_n_ == 0) return false;
    *mean_mhz = clock_sum_ / clock_n_, *min_mhz = clock_min_, *limited = clock_limited_;
    return true;
  }
  double last_host_call_us() const override { return host_us_; }
  void set_clock_sampling(int mode) override {
    clock_mode_ = mode;
    if (mode > 0 && !nvml_) nvml_ = std::make_unique<Nvml>(id_);  // only when asked: NVML's init is not free
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
  std::unique_ptr<Nvml> nvml_;
  double host_us_ = -1.0;
  int clock_mode_ = 0;               // set_clock_sampling
  int clock_n_ = 0, clock_min_ = 0;  // the last call's clock samples (time_call)
  double clock_sum_ = 0.0;
  bool clock_limited_ = false;
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
