// tests/support/harness.cpp -- see harness.hpp.
#include "harness.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#ifdef FLASH_TEST_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace flash_test {

uint64_t base_seed() {
  static const uint64_t seed = [] {
    if (const char* s = std::getenv("LIBFLASH_TEST_SEED")) return static_cast<uint64_t>(std::strtoull(s, nullptr, 10));
    return static_cast<uint64_t>(std::random_device{}()) << 32 | std::random_device{}();
  }();
  return seed;
}

static size_t esize(int32_t dtype) { return dtype == FLASH_DTYPE_FP32 ? 4 : 2; }

int64_t HostTensor::span_elements() const {
  int64_t last = 0;
  for (int i = 0; i < desc.ndim; ++i) last += (desc.shape[i] - 1) * desc.strides[i];
  return last + 1;
}

static HostTensor make_tensor(int32_t dtype, int ndim, const int64_t* shape, const int64_t* strides) {
  HostTensor t;
  t.desc.dtype = dtype;
  t.desc.device_type = FLASH_DEVICE_CPU;
  t.desc.device_id = 0;
  t.desc.ndim = ndim;
  for (int i = 0; i < ndim; ++i) t.desc.shape[i] = shape[i], t.desc.strides[i] = strides[i];
  t.bytes.assign(static_cast<size_t>(t.span_elements()) * esize(dtype), 0xFF);  // 0xFF..: NaN in every dtype
  t.desc.data = t.bytes.data();
  return t;
}

// Strides for [b, s, h, d] under a layout.
static void layout_strides(Layout layout, const int64_t* shape, int64_t* strides, std::mt19937_64& rng) {
  const int64_t S = shape[1], H = shape[2], D = shape[3];
  switch (layout) {
    case Layout::Contiguous:
      strides[3] = 1, strides[2] = D, strides[1] = H * D, strides[0] = S * H * D;
      break;
    case Layout::PaddedRows: {
      const int64_t head_pad = 8 * std::uniform_int_distribution<int>(0, 2)(rng);
      const int64_t row_pad = 8 * std::uniform_int_distribution<int>(1, 3)(rng);
      strides[3] = 1, strides[2] = D + head_pad, strides[1] = H * (D + head_pad) + row_pad, strides[0] = S * strides[1] + 24;
      break;
    }
    case Layout::HeadMajor:
      strides[3] = 1, strides[1] = D, strides[2] = S * D, strides[0] = H * S * D;
      break;
  }
}

static void fill_random(HostTensor& t, double magnitude, std::mt19937_64& rng) {
  std::normal_distribution<double> dist(0.0, magnitude);
  const flash_tensor& d = t.desc;
  for (int64_t a = 0; a < d.shape[0]; ++a)
    for (int64_t b = 0; b < d.shape[1]; ++b)
      for (int64_t c = 0; c < d.shape[2]; ++c)
        for (int64_t e = 0; e < d.shape[3]; ++e) {
          const int64_t off = flash_ref::offset4(d, a, b, c, e);
          const double x = dist(rng);
          if (d.dtype == FLASH_DTYPE_FP32) reinterpret_cast<float*>(t.bytes.data())[off] = static_cast<float>(x);
          else if (d.dtype == FLASH_DTYPE_FP16) reinterpret_cast<uint16_t*>(t.bytes.data())[off] = flash_ref::fp16_round(x);
          else reinterpret_cast<uint16_t*>(t.bytes.data())[off] = flash_ref::bf16_round(x);
        }
}

std::string CaseSpec::describe() const {
  std::ostringstream s;
  const char* dt = dtype == FLASH_DTYPE_FP32 ? "fp32" : dtype == FLASH_DTYPE_FP16 ? "fp16" : "bf16";
  s << "b=" << batch << " sq=" << seqlen_q << " sk=" << seqlen_k << " hq=" << heads_q << " hkv=" << heads_kv
    << " d=" << head_dim << " " << dt << " scale=" << softmax_scale << " layout=" << static_cast<int>(layout)
    << " causal=" << mask.causal << " align=" << (mask.alignment == FLASH_ALIGN_TOP_LEFT ? "tl" : "br")
    << " window=(" << mask.window_left << "," << mask.window_right << ")" << " mag=" << magnitude;
  if (!mask.listed.empty()) s << " block_mask=" << mask.block_m << "x" << mask.block_n;
  return s.str();
}

Case make_case(const CaseSpec& spec, std::mt19937_64& rng) {
  Case c;
  c.spec = spec;
  const int64_t qshape[4] = {spec.batch, spec.seqlen_q, spec.heads_q, spec.head_dim};
  const int64_t kshape[4] = {spec.batch, spec.seqlen_k, spec.heads_kv, spec.head_dim};
  int64_t qs[4], ks[4], vs[4], os[4];
  layout_strides(spec.layout, qshape, qs, rng);
  layout_strides(spec.layout, kshape, ks, rng);
  layout_strides(spec.layout, kshape, vs, rng);
  layout_strides(spec.layout, qshape, os, rng);
  c.q = make_tensor(spec.dtype, 4, qshape, qs);
  c.k = make_tensor(spec.dtype, 4, kshape, ks);
  c.v = make_tensor(spec.dtype, 4, kshape, vs);
  c.o = make_tensor(spec.dtype, 4, qshape, os);
  fill_random(c.q, spec.magnitude, rng);
  fill_random(c.k, spec.magnitude, rng);
  fill_random(c.v, 1.0, rng);
  if (spec.want_lse) {
    const int64_t lshape[3] = {spec.batch, spec.heads_q, spec.seqlen_q};
    const int64_t lstr[3] = {spec.heads_q * spec.seqlen_q, spec.seqlen_q, 1};
    c.lse = make_tensor(FLASH_DTYPE_FP32, 3, lshape, lstr);
  }
  const flash_ref::Mask& m = spec.mask;
  if (!m.listed.empty()) {
    // Compact form of the dense block map: per (b, h, qb), the listed kv blocks in a shuffled order
    // (the ABI does not require sorted indices), padded with -7 garbage past the count.
    flash_block_mask_init(&c.block_mask);
    c.block_mask.block_m = m.block_m;
    c.block_mask.block_n = m.block_n;
    c.block_mask.num_q_blocks = m.n_qb;
    c.block_mask.max_kv_blocks = m.n_kb;
    const int64_t MB = m.mask_batch, MH = m.mask_heads;
    c.kv_num_blocks.assign(MB * MH * m.n_qb, 0);
    c.kv_indices.assign(MB * MH * m.n_qb * m.n_kb, -7);
    for (int64_t b = 0; b < MB; ++b)
      for (int64_t h = 0; h < MH; ++h)
        for (int64_t qb = 0; qb < m.n_qb; ++qb) {
          std::vector<int32_t> list;
          for (int64_t kb = 0; kb < m.n_kb; ++kb)
            if (m.listed[((b * MH + h) * m.n_qb + qb) * m.n_kb + kb]) list.push_back(static_cast<int32_t>(kb));
          std::shuffle(list.begin(), list.end(), rng);
          const int64_t row = (b * MH + h) * m.n_qb + qb;
          c.kv_num_blocks[row] = static_cast<int32_t>(list.size());
          std::copy(list.begin(), list.end(), c.kv_indices.begin() + row * m.n_kb);
        }
    c.block_mask.kv_num_blocks_strides[0] = MB == 1 ? 0 : MH * m.n_qb;
    c.block_mask.kv_num_blocks_strides[1] = MH == 1 ? 0 : m.n_qb;
    c.block_mask.kv_num_blocks_strides[2] = 1;
    c.block_mask.kv_indices_strides[0] = MB == 1 ? 0 : MH * m.n_qb * m.n_kb;
    c.block_mask.kv_indices_strides[1] = MH == 1 ? 0 : m.n_qb * m.n_kb;
    c.block_mask.kv_indices_strides[2] = m.n_kb;
    c.block_mask.kv_indices_strides[3] = 1;
    c.block_mask.kv_num_blocks = c.kv_num_blocks.data();
    c.block_mask.kv_indices = c.kv_indices.data();
    c.has_block_mask = true;
  }
  return c;
}

CaseSpec random_spec(std::mt19937_64& rng, bool gpu, bool with_masks) {
  auto uni = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  CaseSpec s;
  static const int64_t dims[] = {8, 16, 24, 32, 40, 64, 72, 80, 96, 128, 136, 160, 192, 200, 224, 256};
  s.head_dim = dims[uni(0, 15)];
  const int64_t ratios[] = {1, 2, 4};
  s.heads_kv = uni(1, 2);
  s.heads_q = s.heads_kv * ratios[uni(0, 2)];
  s.batch = uni(1, 3);
  // Lengths 1..~1000, biased to odd values around the block sizes (63, 64, 65, 127, 129, ...).
  auto length = [&]() -> int64_t {
    switch (uni(0, 3)) {
      case 0: return uni(1, 17);
      case 1: return 64 * uni(1, 4) + uni(-1, 1);
      default: return uni(1, 1000);
    }
  };
  s.seqlen_q = length();
  s.seqlen_k = uni(0, 3) == 0 ? s.seqlen_q : length();
  // Keep the fp64 reference affordable: cap b*hq*sq*sk*d.
  while (s.batch * s.heads_q * s.seqlen_q * s.seqlen_k * s.head_dim > 60'000'000) {
    if (s.batch > 1) --s.batch;
    else if (s.heads_q > s.heads_kv) s.heads_q /= 2;
    else if (s.heads_kv > 1) s.heads_kv = s.heads_q = 1;
    else s.seqlen_k = std::max<int64_t>(1, s.seqlen_k * 2 / 3);
  }
  const int32_t dtypes_cpu[] = {FLASH_DTYPE_FP32, FLASH_DTYPE_FP16, FLASH_DTYPE_BF16};
  s.dtype = gpu ? dtypes_cpu[uni(1, 2)] : dtypes_cpu[uni(0, 2)];
  const float scales[] = {0.0f, 0.0f, 0.05f, 0.5f, 1.0f};
  s.softmax_scale = scales[uni(0, 4)];
  s.layout = static_cast<Layout>(uni(0, 2));
  s.want_lse = uni(0, 4) != 0;
  s.mask.causal = uni(0, 1);
  s.mask.alignment = uni(0, 1) ? FLASH_ALIGN_TOP_LEFT : FLASH_ALIGN_BOTTOM_RIGHT;
  if (with_masks && uni(0, 2) == 0) {
    s.mask.window_left = uni(0, 1) ? static_cast<int>(uni(0, 300)) : -1;
    s.mask.window_right = s.mask.causal ? 0 : (uni(0, 1) ? static_cast<int>(uni(0, 300)) : -1);
  }
  return s;
}

void fill_args(Case& c, flash_fwd_args* args, int32_t algorithm) {
  flash_fwd_args_init(args);
  args->q = c.q.desc;
  args->k = c.k.desc;
  args->v = c.v.desc;
  args->o = c.o.desc;
  if (c.spec.want_lse) args->lse = c.lse.desc;
  args->softmax_scale = c.spec.softmax_scale;
  args->causal = c.spec.mask.causal;
  args->causal_alignment = c.spec.mask.alignment;
  args->window_left = c.spec.mask.window_left;
  args->window_right = c.spec.mask.window_right;
  args->algorithm = algorithm;
  if (c.has_block_mask) args->block_mask = &c.block_mask;
}

int32_t run_cpu(Case& c, int32_t algorithm, int32_t* algorithm_used) {
  std::fill(c.o.bytes.begin(), c.o.bytes.end(), 0xFF);
  std::fill(c.lse.bytes.begin(), c.lse.bytes.end(), 0xFF);
  flash_fwd_args args;
  fill_args(c, &args, algorithm);
  const int32_t s = flash_fwd(&args);
  if (algorithm_used) *algorithm_used = args.algorithm_used;
  return s;
}

#ifdef FLASH_TEST_WITH_CUDA
bool cuda_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
void* cuda_alloc(size_t bytes) {
  void* p = nullptr;
  return cudaMalloc(&p, bytes) == cudaSuccess ? p : nullptr;
}
void cuda_free(void* ptr) { cudaFree(ptr); }
bool cuda_upload(void* dst, const void* src, size_t bytes) {
  return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
}
bool cuda_download(void* dst, const void* src, size_t bytes) {
  return cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
}


namespace {
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(size_t bytes) {
    if (bytes && cudaMalloc(&ptr, bytes) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() { if (ptr) cudaFree(ptr); }
};
}  // namespace

int32_t run_cuda(Case& c, int32_t algorithm, int device, int32_t* algorithm_used, void* workspace,
                 size_t workspace_size) {
  cudaSetDevice(device);
  auto upload = [&](HostTensor& t, DeviceBuffer& buf, flash_tensor* d) {
    cudaMemcpy(buf.ptr, t.bytes.data(), t.bytes.size(), cudaMemcpyHostToDevice);
    *d = t.desc;
    d->data = buf.ptr;
    d->device_type = FLASH_DEVICE_CUDA;
    d->device_id = device;
  };
  DeviceBuffer q(c.q.bytes.size()), k(c.k.bytes.size()), v(c.v.bytes.size()), o(c.o.bytes.size()),
      lse(c.lse.bytes.size()), nb(c.kv_num_blocks.size() * 4), idx(c.kv_indices.size() * 4);
  flash_fwd_args args;
  fill_args(c, &args, algorithm);
  // Outputs: poisoned (0xFF bytes = NaN) on the device before the call.
  std::fill(c.o.bytes.begin(), c.o.bytes.end(), 0xFF);
  std::fill(c.lse.bytes.begin(), c.lse.bytes.end(), 0xFF);
  upload(c.q, q, &args.q);
  upload(c.k, k, &args.k);
  upload(c.v, v, &args.v);
  upload(c.o, o, &args.o);
  if (c.spec.want_lse) upload(c.lse, lse, &args.lse);
  flash_block_mask dm = c.block_mask;
  if (c.has_block_mask) {
    cudaMemcpy(nb.ptr, c.kv_num_blocks.data(), c.kv_num_blocks.size() * 4, cudaMemcpyHostToDevice);
    if (!c.kv_indices.empty()) cudaMemcpy(idx.ptr, c.kv_indices.data(), c.kv_indices.size() * 4, cudaMemcpyHostToDevice);
    dm.kv_num_blocks = static_cast<const int32_t*>(nb.ptr);
    dm.kv_indices = static_cast<const int32_t*>(idx.ptr);
    args.block_mask = &dm;
  }
  // The uploads above ran on the legacy default stream: a pageable cudaMemcpy may return before its last DMA lands
  // and cudaMemset is asynchronous, and a non-blocking stream does not wait for either. Without this the call
  // can read a partly copied input (seen on the H200 under load: the backward's D = rowsum(dO o O) from a dO
  // whose last rows had not arrived, so dq and dk were wrong and dv right).
  cudaDeviceSynchronize();
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  args.stream = stream;
  args.workspace = workspace;
  args.workspace_size = workspace_size;
  const int32_t s = flash_fwd(&args);
  if (algorithm_used) *algorithm_used = args.algorithm_used;
  // The outputs are copied back in stream order, right behind the call, so every test also checks that work queued
  // after the call on its stream sees the outputs complete (sm90's d64 dense runs two kernels, the second of which may
  // start before the first has finished: sm90/fwd/plan.h, Launch::Pdl).
  cudaMemcpyAsync(c.o.bytes.data(), o.ptr, c.o.bytes.size(), cudaMemcpyDeviceToHost, stream);
  if (c.spec.want_lse) cudaMemcpyAsync(c.lse.bytes.data(), lse.ptr, c.lse.bytes.size(), cudaMemcpyDeviceToHost, stream);
  const cudaError_t e = cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  if (e != cudaSuccess) return FLASH_ERROR_CUDA;
  return s;
}
#else
bool cuda_available() { return false; }
void* cuda_alloc(size_t) { return nullptr; }
void cuda_free(void*) {}
bool cuda_upload(void*, const void*, size_t) { return false; }
bool cuda_download(void*, const void*, size_t) { return false; }
int32_t run_cuda(Case&, int32_t, int, int32_t*, void*, size_t) { return FLASH_ERROR_NO_CUDA_DEVICE; }
#endif

Check check_case(const Case& c, double multiple) {
  const CaseSpec& s = c.spec;
  flash_ref::Problem pr{s.batch, s.seqlen_q, s.seqlen_k, s.heads_q, s.heads_kv, s.head_dim,
                        s.softmax_scale != 0.0f ? static_cast<double>(s.softmax_scale) : 1.0 / std::sqrt(double(s.head_dim)),
                        s.mask};
  const flash_ref::Result exact = flash_ref::attention(pr, c.q.desc, c.k.desc, c.v.desc, 0);
  const flash_ref::Result naive = flash_ref::attention(pr, c.q.desc, c.k.desc, c.v.desc, 1);
  Check ch;
  double max_ref = 0;
  std::ostringstream msg;
  int64_t bad_rows = 0;
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < s.seqlen_q; ++i)
      for (int64_t h = 0; h < s.heads_q; ++h) {
        const bool empty_row = exact.lse[(b * s.heads_q + h) * s.seqlen_q + i] == -inf;
        for (int64_t e = 0; e < s.head_dim; ++e) {
          const int64_t ri = ((b * s.seqlen_q + i) * s.heads_q + h) * s.head_dim + e;
          const double got = flash_ref::load(c.o.bytes.data(), s.dtype, flash_ref::offset4(c.o.desc, b, i, h, e));
          const double ref = exact.o[ri];
          if (std::isnan(got) || std::isinf(got) || (empty_row && got != 0.0)) {
            if (bad_rows++ < 3)
              msg << "O[" << b << "," << i << "," << h << "," << e << "] = " << got << " (ref " << ref << "); ";
            ch.err = inf;
            continue;
          }
          ch.err = std::max(ch.err, std::fabs(got - ref));
          ch.naive_err = std::max(ch.naive_err, std::fabs(naive.o[ri] - ref));
          max_ref = std::max(max_ref, std::fabs(ref));
        }
      }
  const double ulp = s.dtype == FLASH_DTYPE_FP32 ? std::ldexp(1.0, -24) : s.dtype == FLASH_DTYPE_FP16 ? std::ldexp(1.0, -11)
                                                                                                        : std::ldexp(1.0, -8);
  ch.bound = multiple * ch.naive_err + ulp * max_ref;
  bool ok = ch.err <= ch.bound;
  if (s.want_lse) {
    double max_lse = 0;
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t h = 0; h < s.heads_q; ++h)
        for (int64_t i = 0; i < s.seqlen_q; ++i) {
          const double ref = exact.lse[(b * s.heads_q + h) * s.seqlen_q + i];
          const int64_t off = b * c.lse.desc.strides[0] + h * c.lse.desc.strides[1] + i * c.lse.desc.strides[2];
          const double got = reinterpret_cast<const float*>(c.lse.bytes.data())[off];
          if (ref == -inf) {
            if (got != -inf) {
              ok = false;
              msg << "LSE[" << b << "," << h << "," << i << "] = " << got << " but the row sees no key (want -inf); ";
            }
            continue;
          }
          if (std::isnan(got) || std::isinf(got)) {
            ok = false;
            msg << "LSE[" << b << "," << h << "," << i << "] = " << got << "; ";
            continue;
          }
          ch.lse_err = std::max(ch.lse_err, std::fabs(got - ref));
          ch.lse_naive_err = std::max(ch.lse_naive_err, std::fabs(naive.lse[(b * s.heads_q + h) * s.seqlen_q + i] - ref));
          max_lse = std::max(max_lse, std::fabs(ref));
        }
    // LSE is fp32 in every algorithm: one fp32 rounding of |LSE| plus the naive error's multiple.
    ch.lse_bound = multiple * ch.lse_naive_err + std::ldexp(1.0, -23) * std::max(1.0, max_lse) * 4;
    ok = ok && ch.lse_err <= ch.lse_bound;
  }
  ch.ok = ok;
  msg << "max|O-ref|=" << ch.err << " bound=" << ch.bound << " (naive same-dtype " << ch.naive_err << ")";
  if (s.want_lse) msg << " max|LSE-ref|=" << ch.lse_err << " bound=" << ch.lse_bound;
  ch.message = msg.str();
  return ch;
}

}  // namespace flash_test
