// cli/src/device.hpp -- where fa-bench puts its tensors and how it times a call.
//
// libflash itself is reached only through flash.h. fa-bench needs a few things the ABI deliberately does
// not offer (device allocation, copies, timing events), so on a CUDA build (FA_BENCH_WITH_CUDA, set by
// cli/CMakeLists.txt) it uses the CUDA runtime directly for those.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace fabench {

class Device {
 public:
  virtual ~Device() = default;
  // nullptr when the allocation fails (the caller turns that into an out-of-memory row).
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual bool upload(void* dst, const void* src, size_t bytes) = 0;
  virtual bool download(void* dst, const void* src, size_t bytes) = 0;
  // Evicts the inputs from the last-level cache between repetitions: writes a buffer twice its size.
  virtual void flush_cache() = 0;
  virtual size_t flush_bytes() const = 0;
  // Runs `call` once and returns its time in milliseconds (CUDA events around it on the stream, or
  // steady_clock on the host). *status receives call()'s return value.
  virtual double time_call(const std::function<int32_t()>& call, int32_t* status) = 0;
  // How long the last timed call() took on the host (microseconds): the enqueueing, which the GPU waits for whenever it
  // is longer than the work ahead of it in the stream (the flush). Negative where unknown.
  virtual double last_host_call_us() const { return -1.0; }
  // Clock sampling (--sample-clock): 0 none, 1 one sample just after each timed call, 2 a host thread sampling from
  // the call's start to its end. The GPU's clock returns to its maximum as soon as it idles, so a sample after the call
  // shows only limits that outlast it; samples during the call show what it ran at, but NVML answers slowly (a sample
  // or two a millisecond; the sampling thread moved the H100's 4k times by under 0.5%, session 61).
  virtual void set_clock_sampling(int mode) { (void)mode; }
  // The last timed call's SM clock samples (MHz): their mean and lowest, and whether the driver reported a clock limit
  // (power cap, thermal or hardware slowdown) in any: NVML, loaded at run time where the driver has it. False where
  // unknown (sampling off, the host, no NVML), leaving the outputs untouched.
  virtual bool call_clock(double* mean_mhz, int* min_mhz, bool* limited) const {
    (void)mean_mhz, (void)min_mhz, (void)limited;
    return false;
  }
  // The device's copy bandwidth (bytes/s, read + write counted): `copies` timed copies of a `bytes` buffer into another
  // (cudaMemcpyAsync device to device timed with events; on the host memcpy split over the hardware threads, timed
  // with steady_clock), after one untimed copy; the median. Negative on failure (last_error()); frees its buffers.
  virtual double copy_bandwidth(size_t bytes, int copies) = 0;
  virtual void* stream() = 0;  // what goes into flash_fwd_args::stream
  virtual const char* timing_method() const = 0;
  virtual std::string last_error() const = 0;
};

// device_type is FLASH_DEVICE_*. llc_bytes: the last-level cache size to flush (device_info.l2_cache_bytes).
// On failure returns nullptr and sets *error.
std::unique_ptr<Device> open_device(int32_t device_type, int32_t device_id, int64_t llc_bytes, std::string* error);

// True when this fa-bench was built with the CUDA runtime.
bool built_with_cuda();

}  // namespace fabench
