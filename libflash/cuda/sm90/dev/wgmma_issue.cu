// libflash/cuda/sm90/dev/wgmma_issue.cu -- how long a warpgroup takes to *issue* one loop block's wgmmas (perf-log v68).
//
// The profiles of the forward (Prof's kStepIssue) put ~550 cycles a block on issuing d64's 12 wgmmas (4 x m64n128k16 for
// S = Q K^T, 8 x m64n64k16 for P V) -- about what the tensor cores take to run them (512 cycles at 2048 MACs a clock), so
// "async" wgmmas behave as if each waited for the one before. This driver times one loop block's issue, S wait and P V
// wait on 1-3 warpgroups (no producer, operands already in shared memory, one CTA on every SM), with the descriptors
// formed three ways (inline: wg::desc per wgmma, as production; add: the slot's base descriptor plus offset >> 4; hoisted:
// all formed before the loop), in four orders (S then P V, P V then S, either alone), and with the warpgroups issuing at
// once or taking turns (named barriers, the forward's ping-pong) handed on at the end of the issue, after S's, or at once.
// What it found (s37-1/2, perf-log v68):
//   - the descriptors' form makes no difference (one warpgroup: 342 / 341 / 343 cycles to issue);
//   - four m64n128k16 with both operands in shared memory issue in ~20 cycles; eight m64n64k16 with A from registers
//     take ~136 (about six can wait in the queue), and behind S's four they wait for S to run (S then P V: 342 cycles);
//     S behind P V queues at once (P V then S: 260);
//   - without softmaxes three warpgroups issuing freely keep the tensor cores 100% busy; taking turns handed on at the
//     end of the issue 81%, after S's wgmmas 90%, at once 95%; P V first with turns 88%.
// In the forward none of these orders was faster (v68): the turn's length is not what the loop loses.
//
// Build (device): nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -I. -Ilibflash \
//                   libflash/cuda/sm90/dev/wgmma_issue.cu -o build-h100/wgmma_issue
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "libflash/cuda/wgmma.cuh"

namespace {

using flash::DType;
namespace wg = flash::wg;

constexpr int kBlockN = 128, kHeadDim = 64, kStages = 4;
constexpr int kQBytes = 64 * kHeadDim * 2, kKVBytes = kBlockN * kHeadDim * 2;
constexpr int kSmem = 3 * kQBytes + 2 * kStages * kKVBytes + 1024;

enum Form : int { kInline = 0, kAdd = 1, kHoisted = 2 };

// The cycles of each phase, summed over blocks, per warpgroup (thread 0 of each), per CTA.
struct Out {
  unsigned long long issue, wait_s, wait_pv, total;
};

// kPass: where a warpgroup hands the turn on -- 0 after its last wgmma is issued (the forward's ping-pong), 1 after S's
// (before P V's), 2 as soon as it has the turn (before any). kOrder: 0 S then P V, 1 P V then S, 2 S alone, 3 P V alone.
template <int kForm, bool kTurns, int kPass = 0, int kOrder = 0>
__global__ void __launch_bounds__(384, 1) issue_kernel(int blocks, int consumers, Out* out, float* sink) {
  extern __shared__ uint8_t smem_raw[];
  const uint32_t smem = (static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) + 1023u) & ~1023u;
  // Zeroed operands (the tensor cores' time does not depend on the values).
  for (int i = threadIdx.x; i < (kSmem - 1024) / 16; i += blockDim.x)
    asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(smem + 16 * i), "r"(0));
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const int w = threadIdx.x / 128;
  if (w >= consumers) return;
  const uint32_t q_wg = smem + w * kQBytes;
  const uint32_t k0 = smem + 3 * kQBytes, v0 = k0 + kStages * kKVBytes;

  float acc_s[kBlockN / 2], acc_o[kHeadDim / 2];
  uint32_t p_frag[kBlockN / 16][4];
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) acc_o[i] = 0.f;
#pragma unroll
  for (int i = 0; i < kBlockN / 16; ++i) p_frag[i][0] = p_frag[i][1] = p_frag[i][2] = p_frag[i][3] = 0u;

  // kHoisted: every descriptor of slot 0, formed once.
  uint64_t hq[4], hk[4], hv[kBlockN / 16];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    hq[kk] = wg::desc(q_wg + kk * 32, 16);
    hk[kk] = wg::desc(k0 + kk * 32, 16);
  }
#pragma unroll
  for (int kc = 0; kc < kBlockN / 16; ++kc) hv[kc] = wg::desc(v0 + kc * 2048, kBlockN * 128);

  if (kTurns && w == consumers - 1 && consumers > 1) asm volatile("bar.arrive 1, 256;\n" ::: "memory");
  unsigned long long issue = 0, wait_s = 0, wait_pv = 0;
  const long long t_begin = clock64();
  for (int j = 0; j < blocks; ++j) {
    const int s = j % kStages;
    const uint32_t k_s = k0 + s * kKVBytes, v_s = v0 + s * kKVBytes;
    if (kTurns && consumers > 1) asm volatile("bar.sync %0, 256;\n" ::"r"(1 + w) : "memory");
    const uint32_t t0 = static_cast<uint32_t>(clock());
    wg::fence();
    auto pass = [&]() {
      if (kTurns && consumers > 1) asm volatile("bar.arrive %0, 256;\n" ::"r"(1 + (w + 1) % consumers) : "memory");
    };
    if constexpr (kForm == kInline) {
      auto issue_s = [&]() {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
          const uint64_t da = wg::desc(q_wg + kk * 32, 16), db = wg::desc(k_s + kk * 32, 16);
          if (kk == 0) wg::SS<kBlockN, 0, 0, DType::BF16>::zero(acc_s, da, db);
          else wg::SS<kBlockN, 0, 0, DType::BF16>::mma(acc_s, da, db, 1);
        }
        wg::commit();
      };
      auto issue_pv = [&]() {
#pragma unroll
        for (int kc = 0; kc < kBlockN / 16; ++kc)
          wg::RS<kHeadDim, 1, DType::BF16>::mma(acc_o, p_frag[kc], wg::desc(v_s + kc * 2048, kBlockN * 128), 1);
        wg::commit();
      };
      if constexpr (kPass == 2) pass();
      if constexpr (kOrder == 0 || kOrder == 2) issue_s();
      if constexpr (kOrder == 1 || kOrder == 3) issue_pv();
      if constexpr (kPass == 1) pass();
      if constexpr (kOrder == 0) issue_pv();
      if constexpr (kOrder == 1) issue_s();
      if constexpr (kOrder >= 2) wg::commit();  // (an empty group, so wait<1> / wait<0> mean the same as with both)
    } else if constexpr (kForm == kAdd) {
      const uint64_t dq = wg::desc(q_wg, 16), dk = wg::desc(k_s, 16), dv = wg::desc(v_s, kBlockN * 128);
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        if (kk == 0) wg::SS<kBlockN, 0, 0, DType::BF16>::zero(acc_s, dq, dk);
        else wg::SS<kBlockN, 0, 0, DType::BF16>::mma(acc_s, dq + 2 * kk, dk + 2 * kk, 1);
      }
      wg::commit();
#pragma unroll
      for (int kc = 0; kc < kBlockN / 16; ++kc) wg::RS<kHeadDim, 1, DType::BF16>::mma(acc_o, p_frag[kc], dv + 128 * kc, 1);
      wg::commit();
    } else {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        if (kk == 0) wg::SS<kBlockN, 0, 0, DType::BF16>::zero(acc_s, hq[kk], hk[kk]);
        else wg::SS<kBlockN, 0, 0, DType::BF16>::mma(acc_s, hq[kk], hk[kk], 1);
      }
      wg::commit();
#pragma unroll
      for (int kc = 0; kc < kBlockN / 16; ++kc) wg::RS<kHeadDim, 1, DType::BF16>::mma(acc_o, p_frag[kc], hv[kc], 1);
      wg::commit();
    }
    const uint32_t t1 = static_cast<uint32_t>(clock());
    if constexpr (kPass == 0) pass();
    // "waitS" is the first commit group's wait and "waitPV" the second's: with kOrder 1 they are P V's and S's.
    wg::wait<1>();
    wg::fence_regs(acc_s);
    const uint32_t t2 = static_cast<uint32_t>(clock());
    wg::wait<0>();
    wg::fence_regs(acc_o);
    wg::fence_regs(p_frag);
    const uint32_t t3 = static_cast<uint32_t>(clock());
    issue += t1 - t0, wait_s += t2 - t1, wait_pv += t3 - t2;
    // P for the next block from S (as the forward's pack does), so the RS operand is produced each block.
#pragma unroll
    for (int i = 0; i < kBlockN / 16; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) p_frag[i][e] = __float_as_uint(acc_s[4 * i + e]) & 0x00ff00ffu;
  }
  const long long t_end = clock64();
  if (threadIdx.x % 128 == 0) {
    Out& o = out[blockIdx.x * 3 + w];
    o.issue = issue, o.wait_s = wait_s, o.wait_pv = wait_pv, o.total = static_cast<unsigned long long>(t_end - t_begin);
  }
  float sum = 0.f;
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) sum += acc_o[i];
  if (sum == 12345.f) sink[threadIdx.x] = sum;  // keeps the products alive
}

template <int kForm, bool kTurns, int kPass = 0, int kOrder = 0>
void run(const char* name, int sms, int consumers, int blocks, Out* d_out, float* d_sink) {
  auto k = issue_kernel<kForm, kTurns, kPass, kOrder>;
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem);
  cudaMemset(d_out, 0, sizeof(Out) * sms * 3);
  k<<<sms, 384, kSmem>>>(blocks / 8, consumers, d_out, d_sink);  // warm-up
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  k<<<sms, 384, kSmem>>>(blocks, consumers, d_out, d_sink);
  cudaEventRecord(e1);
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    std::printf("%s: %s\n", name, cudaGetErrorString(e));
    std::exit(1);
  }
  float ms = 0.f;
  cudaEventElapsedTime(&ms, e0, e1);
  std::vector<Out> h(sms * 3);
  cudaMemcpy(h.data(), d_out, sizeof(Out) * sms * 3, cudaMemcpyDeviceToHost);
  double issue = 0, ws = 0, wpv = 0, total = 0;
  for (int c = 0; c < sms; ++c)
    for (int w = 0; w < consumers; ++w) {
      const Out& o = h[c * 3 + w];
      issue += o.issue, ws += o.wait_s, wpv += o.wait_pv, total += o.total;
    }
  const double n = double(sms) * consumers * blocks;
  // Tensor-core share: each warpgroup block is 2 x 64 x 128 x 64 MACs = 512 cycles at 2048 MACs a clock per SM.
  const double per_block = total / (double(sms) * consumers) / blocks;
  std::printf("%-14s %-6s wgs %d  issue %6.1f  waitS %6.1f  waitPV %6.1f  | CTA cycles per block step %7.1f (tensor %5.1f%%)  %.3f ms\n",
              name, kTurns ? "turns" : "free", consumers, issue / n, ws / n, wpv / n, per_block,
              100.0 * 512.0 * consumers / per_block, ms);
}

}  // namespace

int main(int argc, char** argv) {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int blocks = argc > 1 ? std::atoi(argv[1]) : 4096;
  Out* d_out;
  float* d_sink;
  cudaMalloc(&d_out, sizeof(Out) * sms * 3);
  cudaMalloc(&d_sink, sizeof(float) * 384);
  std::printf("wgmma issue timing: d64 loop block (4 x m64n128k16 SS + 8 x m64n64k16 RS), %d blocks, %d CTAs\n", blocks, sms);
  // The descriptors' form (s37-1, v68): inline, add and hoisted issue alike; only inline for the orders and turns.
  run<kInline, false>("S+PV", sms, 1, blocks, d_out, d_sink);
  run<kAdd, false>("S+PV add", sms, 1, blocks, d_out, d_sink);
  run<kHoisted, false>("S+PV hoisted", sms, 1, blocks, d_out, d_sink);
  run<kInline, false, 0, 1>("PV+S", sms, 1, blocks, d_out, d_sink);
  run<kInline, false, 0, 2>("S alone", sms, 1, blocks, d_out, d_sink);
  run<kInline, false, 0, 3>("PV alone", sms, 1, blocks, d_out, d_sink);
  for (int consumers = 2; consumers <= 3; ++consumers) {
    run<kInline, false>("S+PV", sms, consumers, blocks, d_out, d_sink);
    run<kInline, true, 0>("S+PV pass end", sms, consumers, blocks, d_out, d_sink);
    run<kInline, true, 1>("S+PV pass S", sms, consumers, blocks, d_out, d_sink);
    run<kInline, true, 2>("S+PV pass now", sms, consumers, blocks, d_out, d_sink);
    run<kInline, true, 0, 1>("PV+S pass end", sms, consumers, blocks, d_out, d_sink);
    run<kInline, true, 1, 1>("PV+S pass PV", sms, consumers, blocks, d_out, d_sink);
  }
  return 0;
}
