// libflash/cuda/sm90/dev/launch_gap.cu -- what a 4-byte cudaMemsetAsync ahead of a kernel costs on the GPU's timeline
// (the dynamic tile order's counter, fwd_kernel.cuh launch), measured as fa-bench times a call: L2 flushed by a 256 MB
// write, then CUDA events around the call; the variants interleaved rep by rep, medians. Dev only (not built by CMake):
//   nvcc -O2 -gencode arch=compute_90a,code=sm_90a -o launch_gap launch_gap.cu && ./launch_gap [reps] [spin_us]
// The "call" is a persistent spin kernel (one CTA per SM, each spinning spin_us of globaltimer) that takes its CTAs'
// first work from an int counter as the sm90 kernels do, so a memset ahead of it is on its critical path.
#include "dev_common.h"

// Each CTA spins spin_ns, then bumps the counter once (as a persistent CTA's last, failing take would).
__global__ void spin(int* counter, unsigned long long spin_ns, int* sink) {
  if (threadIdx.x != 0) return;
  const unsigned long long t0 = now_ns();
  while (now_ns() - t0 < spin_ns) {
  }
  const int v = atomicAdd(counter, 1);
  if (v == -12345) *sink = v;
}
__global__ void zero(int* counter) { *counter = 0; }

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 300;
  const double spin_us = argc > 2 ? std::atof(argv[2]) : 150.0;
  EventTimer timer(size_t(256) << 20);  // (flushed by flush_write below, not the timer's memset)
  const int sms = timer.sms;
  const cudaStream_t s = timer.stream;
  int *counter, *sink;
  CK(cudaMalloc(&counter, 256));
  CK(cudaMalloc(&sink, 4));
  const unsigned long long spin_ns = (unsigned long long)(spin_us * 1000.0);

  enum { kPlain, kMemset, kZeroKernel, kMemsetOutside, kVariants };
  const char* names[kVariants] = {"kernel alone (counter zeroed before the start event)", "cudaMemsetAsync + kernel",
                                  "zeroing kernel + kernel", "memset outside the window + kernel"};
  std::vector<std::vector<float>> t(kVariants);
  auto call = [&](int v) {
    flush_write<<<sms * 4, 512, 0, s>>>(static_cast<uint4*>(timer.flush), timer.flush_bytes / sizeof(uint4));
    if (v == kPlain || v == kMemsetOutside) CK(cudaMemsetAsync(counter, 0, 4, s));
    return timer.time_us([&] {
      if (v == kMemset) CK(cudaMemsetAsync(counter, 0, 4, s));
      if (v == kZeroKernel) zero<<<1, 1, 0, s>>>(counter);
      spin<<<sms, 128, 0, s>>>(counter, spin_ns, sink);
    });
  };
  for (int w = 0; w < 20; ++w)
    for (int v = 0; v < kVariants; ++v) call(v);
  std::vector<float> diff_memset, diff_zero;
  for (int r = 0; r < reps; ++r) {
    float x[kVariants];
    for (int k = 0; k < kVariants; ++k) {
      const int v = (k + r) % kVariants;  // rotate the order rep by rep
      x[v] = call(v);
      t[v].push_back(x[v]);
    }
    diff_memset.push_back(x[kMemset] - x[kPlain]);
    diff_zero.push_back(x[kZeroKernel] - x[kPlain]);
  }
  auto med = [](const std::vector<float>& v) { return quantile(v, .5); };
  auto pct = [](const std::vector<float>& v, double q) { return quantile(v, q); };
  std::printf("launch_gap: %d SMs, spin %.1f us, %d reps interleaved (rotated), event-timed after a 256 MB flush\n", sms,
              spin_us, reps);
  for (int v = 0; v < kVariants; ++v)
    std::printf("  %-58s median %8.2f us  p10 %8.2f  p90 %8.2f\n", names[v], med(t[v]), pct(t[v], .1), pct(t[v], .9));
  std::printf("  paired difference, memset + kernel - kernel: median %.2f us (p10 %.2f, p90 %.2f)\n", med(diff_memset),
              pct(diff_memset, .1), pct(diff_memset, .9));
  std::printf("  paired difference, zero kernel + kernel - kernel: median %.2f us (p10 %.2f, p90 %.2f)\n", med(diff_zero),
              pct(diff_zero, .1), pct(diff_zero, .9));
  return 0;
}
