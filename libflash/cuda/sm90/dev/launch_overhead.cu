// libflash/cuda/sm90/dev/launch_overhead.cu -- what a call's event-timed window holds beyond its CTAs' own span, as
// fa-bench times a call (a buffer of twice L2 written by cudaMemsetAsync, then events round the call). Dev only (not
// built by CMake):
//   nvcc -O2 -std=c++17 -gencode arch=compute_90a,code=sm_90a -o launch_overhead launch_overhead.cu
//   ./launch_overhead [reps] [spin_us]
// The "call" is a persistent spin kernel, one CTA an SM, each CTA spinning spin_us of %globaltimer from its own start,
// which writes its start and end. So (event time - spin_us) is the window's overhead, and (first start, last end)
// splits nothing off the spin itself. Variants, interleaved rep by rep (rotated), medians:
//   - the launch shape: 128 threads and no shared memory against the sm90 forward's (384 threads, 200 KB dynamic);
//   - the flush: cudaMemsetAsync (fa-bench's) against a kernel that writes the buffer, with no shared memory or with the
//     same 200 KB dynamic shared memory as the call (the SMs' L1 / shared split then needs no change at the call);
//   - programmatic stream serialisation on the call (griddepcontrol.wait first);
//   - no flush, the call behind an identical call (the least a launch costs here).
#include "dev_common.h"

#include <cstring>

// Thread 0 of each CTA spins spin_ns from its CTA's start; times[2 c], times[2 c + 1] = start, end.
__global__ void spin(unsigned long long spin_ns, unsigned long long* times, int pdl_wait) {
  if (pdl_wait) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (threadIdx.x != 0) return;
  const unsigned long long t0 = now_ns();
  while (now_ns() - t0 < spin_ns) {
  }
  times[2 * blockIdx.x] = t0;
  times[2 * blockIdx.x + 1] = now_ns();
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 300;
  const double spin_us = argc > 2 ? std::atof(argv[2]) : 60.0;
  EventTimer timer;
  const int sms = timer.sms;
  const size_t flush_bytes = timer.flush_bytes;
  void* const flush = timer.flush;
  unsigned long long* times;
  CK(cudaMalloc(&times, 2 * sizeof(unsigned long long) * sms));
  const int big = 200 * 1024;
  CK(cudaFuncSetAttribute(spin, cudaFuncAttributeMaxDynamicSharedMemorySize, big));
  CK(cudaFuncSetAttribute(flush_write, cudaFuncAttributeMaxDynamicSharedMemorySize, big));
  const cudaStream_t s = timer.stream;
  const unsigned long long spin_ns = (unsigned long long)(spin_us * 1000.0);

  struct Variant {
    const char* name;
    int flush;  // 0 memset, 1 kernel without shared memory, 2 kernel with the call's shared memory, 3 none (call twice)
    bool big_call, pdl;
  };
  const Variant vs[] = {
      {"memset flush, call 128 thr / 0 smem", 0, false, false},
      {"memset flush, call 384 thr / 200 KB", 0, true, false},
      {"kernel flush 0 smem, call 384 / 200 KB", 1, true, false},
      {"kernel flush 200 KB, call 384 / 200 KB", 2, true, false},
      {"memset flush, call 384 / 200 KB + PDL", 0, true, true},
      {"kernel flush 200 KB, call 384 / 200 KB + PDL", 2, true, true},
      {"no flush, behind the same call, 384 / 200 KB", 3, true, false},
  };
  const int nv = int(sizeof(vs) / sizeof(vs[0]));
  std::vector<std::vector<float>> t(nv), span(nv);
  std::vector<unsigned long long> h(2 * sms);
  auto launch_call = [&](const Variant& v) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(sms);
    cfg.blockDim = dim3(v.big_call ? 384 : 128);
    cfg.dynamicSmemBytes = v.big_call ? big : 0;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = v.pdl ? 1 : 0;
    CK(cudaLaunchKernelEx(&cfg, spin, spin_ns, times, int(v.pdl)));
  };
  auto call = [&](int vi, float* sp) {
    const Variant& v = vs[vi];
    if (v.flush == 0) timer.dirty_flush();
    if (v.flush == 1) flush_write<<<sms * 4, 512, 0, s>>>(static_cast<uint4*>(flush), flush_bytes / 16);
    if (v.flush == 2) flush_write<<<sms, 512, big, s>>>(static_cast<uint4*>(flush), flush_bytes / 16);
    if (v.flush == 3) launch_call(v);
    const float us = timer.time_us([&] { launch_call(v); });
    CK(cudaMemcpy(h.data(), times, h.size() * 8, cudaMemcpyDeviceToHost));
    unsigned long long a = ~0ull, b = 0;
    for (int c = 0; c < sms; ++c) a = std::min(a, h[2 * c]), b = std::max(b, h[2 * c + 1]);
    *sp = float(double(b - a) / 1e3);
    return us;
  };
  float sp;
  for (int w = 0; w < 20; ++w)
    for (int v = 0; v < nv; ++v) call(v, &sp);
  for (int r = 0; r < reps; ++r)
    for (int k = 0; k < nv; ++k) {
      const int v = (k + r) % nv;
      t[v].push_back(call(v, &sp));
      span[v].push_back(sp);
    }
  std::printf("launch_overhead: %d SMs, flush %zu MB, spin %.1f us, %d reps interleaved (rotated)\n", sms,
              flush_bytes >> 20, spin_us, reps);
  std::printf("  %-48s %9s %9s %9s %9s %12s\n", "variant", "event med", "p10", "p90", "span med", "event-spin");
  for (int v = 0; v < nv; ++v)
    std::printf("  %-48s %9.2f %9.2f %9.2f %9.2f %12.2f\n", vs[v].name, quantile(t[v], .5), quantile(t[v], .1),
                quantile(t[v], .9), quantile(span[v], .5), quantile(t[v], .5) - float(spin_us));
  return 0;
}
