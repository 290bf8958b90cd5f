// cluster_probe: how many thread-block clusters of 1, 2 and 4 CTAs the GPU runs at once when each CTA holds an SM
// alone (the sm90 forward's shape: 384 threads and ~200 KB of shared memory), and whether a persistent grid of that
// many clusters really runs all at once. The question behind it (session 49, hopper-plan "next call"): a cluster pair
// sharing K and V by TMA multicast needs the persistent grid in pairs; if the GPCs leave SMs that no pair can use, the
// multicast's gain must first pay for them. Not part of the build:
//   nvcc -std=c++17 -gencode arch=compute_90a,code=sm_90a -o cluster_probe libflash/cuda/sm90/dev/cluster_probe.cu
#include "dev_common.h"

// Each CTA spins for `cycles` SM clocks and records the SM it ran on.
__global__ void spin(long long cycles, int* sm_of_cta) {
  extern __shared__ unsigned char smem[];
  if (threadIdx.x == 0) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    sm_of_cta[blockIdx.x] = int(sm);
    smem[0] = 1;
  }
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

int main() {
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const int smem = 200 * 1024, threads = 384;
  CK(cudaFuncSetAttribute(spin, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CK(cudaFuncSetAttribute(spin, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  int* sm_of_cta;
  CK(cudaMalloc(&sm_of_cta, 4096 * sizeof(int)));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::printf("SMs %d; one CTA an SM (%d threads, %d KB of shared memory)\n", sms, threads, smem / 1024);
  for (int cluster : {1, 2, 4}) {
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(cluster), attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cfg.gridDim = dim3(unsigned(sms / cluster * cluster));
    int max_clusters = 0;
    CK(cudaOccupancyMaxActiveClusters(&max_clusters, (void*)spin, &cfg));
    // A grid of exactly that many clusters: one wave if they all run at once (time ~ one spin), two if not.
    const long long cycles = 2000000;  // ~1 ms at 1.98 GHz
    const int grid = max_clusters * cluster;
    cfg.gridDim = dim3(unsigned(grid));
    float ms_one = 0, ms_more = 0;
    for (int rep = 0; rep < 3; ++rep) {
      CK(cudaEventRecord(e0));
      CK(cudaLaunchKernelEx(&cfg, spin, cycles, sm_of_cta));
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaEventElapsedTime(&ms_one, e0, e1));
    }
    int host[4096];
    CK(cudaMemcpy(host, sm_of_cta, grid * sizeof(int), cudaMemcpyDeviceToHost));
    int used[1024] = {0}, distinct = 0;
    for (int i = 0; i < grid; ++i)
      if (host[i] >= 0 && host[i] < 1024 && used[host[i]]++ == 0) ++distinct;
    // One cluster more than that: a second wave if the occupancy figure is exact.
    cfg.gridDim = dim3(unsigned(grid + cluster));
    CK(cudaEventRecord(e0));
    CK(cudaLaunchKernelEx(&cfg, spin, cycles, sm_of_cta));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms_more, e0, e1));
    std::printf("cluster %d: max active clusters %d (%d CTAs, %d distinct SMs, %d SMs idle); a grid of them %.3f ms, "
                "one cluster more %.3f ms\n",
                cluster, max_clusters, grid, distinct, sms - distinct, ms_one, ms_more);
  }
  return 0;
}
