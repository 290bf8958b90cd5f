// libflash/cuda/sm90/dev/racecheck_mbarrier.cu -- does compute-sanitizer racecheck follow an mbarrier
// hand-over of plain shared-memory stores? The sm90 forward passes its block-sparse schedule from the
// producer warp to the consumers that way, and racecheck reports those pairs (perf-log v4, v5).
//
// Three kernels of two warps each; warp 0 stores 32 ints to shared memory, warp 1 loads them:
//   mbarrier  every lane of warp 0 arrives on an mbarrier (count 32) after its store; every lane of
//             warp 1 waits on it (try_wait.parity) before its load -- ordered by the PTX memory model
//             (arrive has release, a completed try_wait acquire semantics, per thread);
//   syncthreads  the same ordering through __syncthreads (the control racecheck surely follows);
//   mbarrier-tx  as mbarrier, but lane 0's arrival also expects 16 bytes that a bulk copy (TMA's async
//             proxy) completes -- how the sm90 kernel's q_full phase completed before perf-log v5;
//   none      no ordering at all (a real race racecheck must report).
// Build and run: nvcc -arch=sm_90a -o rc racecheck_mbarrier.cu && compute-sanitizer --tool racecheck ./rc K
// with K one of the three names. The program checks the values it loaded, so a wrong hand-over fails too.
#include <cstdio>
#include <cstring>

__device__ __forceinline__ void arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void wait_parity(unsigned bar, unsigned parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

template <int kMode>  // 0 mbarrier, 1 syncthreads, 2 none, 3 mbarrier-tx
__global__ void handover(int* out, const int4* src) {
  __shared__ alignas(8) unsigned long long bar;
  __shared__ int data[32];
  __shared__ alignas(16) int4 landed;
  const unsigned b = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 32;\n" ::"r"(b));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  if (warp == 0) {
    data[lane] = 1000 + lane;
    if (kMode == 0 || (kMode == 3 && lane != 0)) arrive(b);
    if (kMode == 3 && lane == 0) {
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 16;\n" ::"r"(b) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 16, [%2];\n" ::"r"(
                       static_cast<unsigned>(__cvta_generic_to_shared(&landed))),
                   "l"(src), "r"(b)
                   : "memory");
    }
  }
  if (kMode == 1) __syncthreads();
  if (warp == 1) {
    if (kMode == 0 || kMode == 3) wait_parity(b, 0);
    out[lane] = data[31 - lane];
  }
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "mbarrier";
  int* out;
  int4* src;
  cudaMalloc(&out, 32 * sizeof(int));
  cudaMalloc(&src, sizeof(int4));
  cudaMemset(out, 0, 32 * sizeof(int));
  if (!std::strcmp(mode, "mbarrier")) handover<0><<<1, 64>>>(out, src);
  else if (!std::strcmp(mode, "syncthreads")) handover<1><<<1, 64>>>(out, src);
  else if (!std::strcmp(mode, "mbarrier-tx")) handover<3><<<1, 64>>>(out, src);
  else handover<2><<<1, 64>>>(out, src);
  int host[32];
  const cudaError_t e = cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost);
  int wrong = 0;
  for (int i = 0; i < 32; ++i) wrong += host[i] != 1000 + 31 - i;
  std::printf("%s: %s, %d of 32 values wrong\n", mode, cudaGetErrorString(e), wrong);
  return e != cudaSuccess || (wrong != 0 && std::strcmp(mode, "none") != 0);
}
