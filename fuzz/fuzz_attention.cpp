// fuzz/fuzz_attention.cpp -- libFuzzer target over flash.h's entry points on the CPU path (flash_fwd,
// flash_bwd and their workspace queries).
//
// Each input decodes into one call: a small attention problem (sizes, dtype, layouts with gaps, GQA, masks,
// a block mask, a workspace), then zero to four mutations drawn from what callers get wrong (a field set to
// an extreme, a NULL, an output placed over another array, a struct never initialised, a mask entry out of
// range...). Everything the call can see -- the argument struct, the block-mask struct, every tensor, the
// mask's index arrays, the workspace -- lives in ONE arena whose every other byte holds a canary pattern.
//
// An oracle written from flash.h's text (not from capi/validate.cpp) classifies the final call as VALID,
// INVALID (some documented rule is broken) or UNSURE (only the library's conservative overlap rule may
// refuse it). After the call:
//   - failed:      the arena must be bitwise unchanged (outputs untouched, nothing else written), and the
//                  call must not have been VALID;
//   - FLASH_OK:    the call must not have been INVALID; no byte may have changed but the output elements the
//                  call named (their exact element bytes, not the gaps between them), algorithm_used and the
//                  workspace; VALID results must be finite and match an fp64 reference computed here.
// Any violation aborts with a message (libFuzzer then saves the input). Counts are printed at exit.
//
// New entry points plug in as one more Op: a way to lay out their arrays (Arena::place), their rules in
// the oracle (Rules), their reads and writes (the overlap lists) and a reference.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "flash.h"

namespace {

// ---- dtype conversions, written from the formats' definitions ----------------------------------------------
float f32_of_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
uint32_t bits_of_f32(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
double bf16_value(uint16_t h) { return f32_of_bits(uint32_t(h) << 16); }
uint16_t bf16_from(float x) {  // round to nearest even (finite inputs only here)
  const uint32_t u = bits_of_f32(x);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
double fp16_value(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? std::ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : std::ldexp(1.0 + m / 1024.0, e - 15);
  return (h & 0x8000) ? -v : v;
}
uint16_t fp16_from(double x) {  // round to nearest even; |x| < 65520 here (inputs are at most 4 in magnitude)
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double m = std::fabs(x);
  if (m < 0x1p-14) return sign | static_cast<uint16_t>(std::nearbyint(m * 0x1p24));  // subnormals: a grid of 2^-24
  int e;
  std::frexp(m, &e);  // m in [2^(e-1), 2^e)
  double f = std::nearbyint(std::ldexp(m, 11 - e));  // 11 significant bits, in [1024, 2048]
  int biased = e - 1 + 15;
  if (f == 2048.0) f = 1024.0, ++biased;
  return sign | static_cast<uint16_t>((biased << 10) | (static_cast<int>(f) - 1024));
}
int esize(int32_t dtype) { return dtype == FLASH_DTYPE_FP32 ? 4 : 2; }
double load(const uint8_t* p, int32_t dtype) {
  if (dtype == FLASH_DTYPE_FP32) { float f; std::memcpy(&f, p, 4); return f; }
  uint16_t h; std::memcpy(&h, p, 2);
  return dtype == FLASH_DTYPE_FP16 ? fp16_value(h) : bf16_value(h);
}
double store(uint8_t* p, int32_t dtype, double x) {  // returns the value stored
  if (dtype == FLASH_DTYPE_FP32) { const float f = static_cast<float>(x); std::memcpy(p, &f, 4); return f; }
  const uint16_t h = dtype == FLASH_DTYPE_FP16 ? fp16_from(x) : bf16_from(static_cast<float>(x));
  std::memcpy(p, &h, 2);
  return load(p, dtype);
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string g_call;  // the call being checked, in words (printed with a violation)

[[noreturn]] void violation(const char* what, const std::string& detail) {
  std::fprintf(stderr, "\n*** fuzz_attention: %s: %s\n    call: %s\n", what, detail.c_str(), g_call.c_str());
  std::abort();
}

// ---- counts, printed at exit -----------------------------------------------------------------------------------
struct Counts {
  std::atomic<uint64_t> calls{0}, skipped{0}, valid_ok{0}, compared{0}, invalid_refused{0}, unsure_ok{0},
      unsure_refused{0}, queries{0};
  ~Counts() {
    std::fprintf(stderr,
                 "fuzz_attention counts: calls %llu (VALID and FLASH_OK %llu, of which compared with the reference %llu; "
                 "INVALID and refused %llu; UNSURE ok %llu / refused %llu; workspace queries %llu); inputs skipped "
                 "(arrays outside the arena, or over the argument structs) %llu; violations 0 (any would have aborted)\n",
                 (unsigned long long)calls, (unsigned long long)valid_ok, (unsigned long long)compared,
                 (unsigned long long)invalid_refused, (unsigned long long)unsure_ok, (unsigned long long)unsure_refused,
                 (unsigned long long)queries, (unsigned long long)skipped);
  }
} g_counts;

// ---- the arena ------------------------------------------------------------------------------------------------
constexpr size_t kMargin = 256;  // canary bytes before the first and after the last array

struct Arena {
  std::vector<uint8_t> mem;  // sized once per input; every byte not handed out keeps the canary pattern
  size_t cursor = kMargin;
  explicit Arena(size_t bytes) : mem(bytes + 2 * kMargin) {
    for (size_t i = 0; i < mem.size(); ++i) mem[i] = static_cast<uint8_t>(0xA5 ^ (i * 131));
  }
  // `bytes` at the next offset aligned to `align` after a gap of `gap` bytes; nullptr if it does not fit.
  uint8_t* place(size_t bytes, size_t align, size_t gap) {
    size_t at = (cursor + gap + align - 1) / align * align;
    if (at + bytes > mem.size() - kMargin) return nullptr;
    cursor = at + bytes;
    return mem.data() + at;
  }
  bool contains(const void* p, uint64_t bytes) const {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(mem.data()), x = reinterpret_cast<uintptr_t>(p);
    return x >= lo && x <= lo + mem.size() && bytes <= lo + mem.size() - x;
  }
  size_t offset(const void* p) const { return static_cast<const uint8_t*>(p) - mem.data(); }
};

// ---- tensors ----------------------------------------------------------------------------------------------------
// The element offsets (in elements) of a tensor whose fields are valid, in index order; empty if it has
// more than `limit` elements.
std::vector<int64_t> element_offsets(const flash_tensor& t, int ndim, size_t limit = 1 << 20) {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= t.shape[i];
  std::vector<int64_t> out;
  if (static_cast<size_t>(n) > limit) return out;
  out.reserve(n);
  int64_t idx[4] = {0, 0, 0, 0};
  for (int64_t e = 0; e < n; ++e) {
    int64_t off = 0;
    for (int i = 0; i < ndim; ++i) off += idx[i] * t.strides[i];
    out.push_back(off);
    for (int i = ndim - 1; i >= 0; --i) {
      if (++idx[i] < t.shape[i]) break;
      idx[i] = 0;
    }
  }
  return out;
}

// Span of a tensor in bytes (last element's end), or -1 if it overflows int64 / fields are invalid.
int64_t span_bytes(const int64_t* shape, const int64_t* strides, int ndim, int64_t elem) {
  __int128 last = 0;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] <= 0 || strides[i] < 0) return -1;
    last += static_cast<__int128>(shape[i] - 1) * strides[i];
  }
  const __int128 bytes = (last + 1) * elem;
  return bytes > std::numeric_limits<int64_t>::max() ? -1 : static_cast<int64_t>(bytes);
}

// Lays out a [d0, d1, d2, d3] tensor (d3 contiguous) with the outer dims in one of several memory orders
// and gaps: the descriptor without its data, and in *gap the bytes to leave before it.
flash_tensor plan_tensor(FuzzedDataProvider& in, const int64_t* shape, int ndim, int32_t dtype, size_t* gap) {
  flash_tensor t;
  std::memset(&t, 0, sizeof t);
  t.dtype = dtype, t.device_type = FLASH_DEVICE_CPU, t.device_id = 0, t.ndim = ndim;
  for (int i = 0; i < ndim; ++i) t.shape[i] = shape[i];
  // Memory order of the outer dims (innermost last): identity, or the [b, h, s, d] transpose of PyTorch.
  int order[4] = {0, 1, 2, 3};
  if (in.ConsumeBool()) std::swap(order[1], order[2]);
  int64_t stride = 1;
  for (int k = ndim - 1; k >= 0; --k) {
    const int d = order[k];
    t.strides[d] = stride;
    stride = stride * shape[d] + (k < ndim - 1 ? in.ConsumeIntegralInRange<int64_t>(0, 3) * (in.ConsumeBool() ? 8 : 1) : 0);
  }
  *gap = in.ConsumeIntegralInRange<size_t>(0, 48);
  return t;
}

// Places a planned tensor in the arena and fills it (values in [-mag, mag], rounded to the dtype) or leaves
// the canary there (outputs). False if it does not fit.
bool place_tensor(Arena& a, flash_tensor& t, size_t gap, bool fill, uint64_t& rng, double mag) {
  const int64_t bytes = span_bytes(t.shape, t.strides, t.ndim, esize(t.dtype));
  uint8_t* p = a.place(static_cast<size_t>(bytes), esize(t.dtype), gap);
  t.data = p;
  if (p != nullptr && fill)
    for (int64_t off : element_offsets(t, t.ndim))
      store(p + off * esize(t.dtype), t.dtype, mag * (static_cast<double>(splitmix(rng) >> 11) * 0x1p-53 * 2 - 1));
  return p != nullptr;
}

// ---- the call ---------------------------------------------------------------------------------------------------
enum Op { FWD = 0, BWD = 1, FWD_QUERY = 2, BWD_QUERY = 3 };

// A view over flash_fwd_args / flash_bwd_args: their common fields by pointer, and the tensors by role.
struct Call {
  Op op;
  void* args = nullptr;  // in the arena
  size_t args_size = 0;
  flash_block_mask* mask = nullptr;  // in the arena, or nullptr
  size_t* query_out = nullptr;       // the workspace query's out parameter, in the arena
  // Common fields.
  size_t* struct_size;
  float* softmax_scale;
  int32_t *causal, *causal_alignment, *window_left, *window_right, *algorithm, *algorithm_used;
  uint32_t* flags;
  const flash_block_mask** block_mask;
  void** workspace;
  size_t* workspace_size;
  // Tensors: name, pointer, expected ndim, like (0: q, 1: k, 2: lse), input?
  struct T {
    const char* name;
    flash_tensor* t;
    int ndim, like;
    bool input;
  };
  std::vector<T> tensors;
  bool backward() const { return op == BWD || op == BWD_QUERY; }
  flash_tensor& q() const { return *tensors[0].t; }
  flash_tensor& k() const { return *tensors[1].t; }
  flash_tensor& v() const { return *tensors[2].t; }
  const T* find(const char* n) const {
    for (const T& x : tensors)
      if (!std::strcmp(x.name, n)) return &x;
    return nullptr;
  }
};

template <class Args>
void bind_common(Call& c, Args* a) {
  c.struct_size = &a->struct_size;
  c.softmax_scale = &a->softmax_scale;
  c.causal = &a->causal, c.causal_alignment = &a->causal_alignment;
  c.window_left = &a->window_left, c.window_right = &a->window_right;
  c.algorithm = &a->algorithm, c.algorithm_used = &a->algorithm_used, c.flags = &a->flags;
  c.block_mask = &a->block_mask, c.workspace = &a->workspace, c.workspace_size = &a->workspace_size;
}

// ---- the oracle: flash.h's rules ------------------------------------------------------------------------------
enum Verdict { VALID = 0, UNSURE = 1, INVALID = 2 };

struct Rules {
  Verdict v = VALID;
  std::string why;  // the first definite violation
  void invalid(const std::string& w) {
    if (v != INVALID) why = w;
    v = INVALID;
  }
  void unsure() { if (v == VALID) v = UNSURE; }
};

bool tensor_fields_ok(const flash_tensor& t, int ndim, std::string* why) {
  if (t.data == nullptr) return *why = "data NULL", false;
  if (t.ndim != ndim) return *why = "ndim", false;
  if (t.dtype != FLASH_DTYPE_FP32 && t.dtype != FLASH_DTYPE_FP16 && t.dtype != FLASH_DTYPE_BF16) return *why = "dtype", false;
  if (reinterpret_cast<uintptr_t>(t.data) % esize(t.dtype)) return *why = "data not aligned to its elements", false;
  if (t.device_type != FLASH_DEVICE_CPU) return *why = "device_type (no GPU here)", false;
  if (t.device_id != 0) return *why = "CPU device_id != 0", false;
  for (int i = 0; i < ndim; ++i) {
    if (t.shape[i] <= 0 || t.shape[i] > INT32_MAX) return *why = "shape", false;
    if (t.strides[i] < 0) return *why = "negative stride", false;
  }
  if (ndim == 4 && t.strides[3] != 1 && t.shape[3] > 1) return *why = "last dim not contiguous", false;
  if (span_bytes(t.shape, t.strides, ndim, esize(t.dtype)) < 0) return *why = "span overflows", false;
  return true;
}

// An array the call reads or writes, as exact element byte ranges (start, length) in the arena.
struct Footprint {
  const char* name;
  const uint8_t* base;
  std::vector<int64_t> elems;  // element offsets in elements
  int elem;                    // bytes per element
  uint64_t span;               // bytes from base to the end of the last element
};

Footprint tensor_footprint(const char* name, const flash_tensor& t, int ndim) {
  Footprint f{name, static_cast<const uint8_t*>(t.data), element_offsets(t, ndim), esize(t.dtype), 0};
  f.span = static_cast<uint64_t>(span_bytes(t.shape, t.strides, ndim, esize(t.dtype)));
  return f;
}

// INVALID if two footprints share a byte; UNSURE if only their [start, end) ranges meet.
void overlap_rule(Rules& r, const Arena& a, const Footprint& w, const Footprint& x) {
  const uintptr_t w0 = reinterpret_cast<uintptr_t>(w.base), x0 = reinterpret_cast<uintptr_t>(x.base);
  if (!(w0 < x0 + x.span && x0 < w0 + w.span)) return;
  static std::vector<uint8_t> mark;  // reused: allocating it per pair cost more than the check
  mark.assign(a.mem.size(), 0);
  const size_t wo = a.offset(w.base), xo = a.offset(x.base);
  for (int64_t e : w.elems) std::fill_n(mark.begin() + wo + e * w.elem, w.elem, 1);
  for (int64_t e : x.elems)
    for (int b = 0; b < x.elem; ++b)
      if (mark[xo + e * x.elem + b]) return r.invalid(std::string(w.name) + " shares bytes with " + x.name);
  r.unsure();
}

// Whether an output's elements are plainly nested (sorted by stride, each steps past everything inside it):
// the layouts the library proves free of self-overlap. Others without an actual collision are UNSURE.
bool nested_layout(const flash_tensor& t, int ndim) {
  std::vector<int> dims;
  for (int i = 0; i < ndim; ++i)
    if (t.shape[i] > 1) dims.push_back(i);
  std::sort(dims.begin(), dims.end(), [&](int x, int y) { return t.strides[x] < t.strides[y]; });
  int64_t inner = 1;
  for (int d : dims) {
    if (t.strides[d] < inner) return false;
    inner += t.strides[d] * (t.shape[d] - 1);
  }
  return true;
}

struct MaskView {  // the block mask, when its fields are valid and its arrays lie in the arena
  bool readable = false;
  int64_t nqb = 0, nkb = 0;
  Footprint num, idx;
};

int64_t cdiv(int64_t x, int64_t y) { return (x + y - 1) / y; }

// Applies every rule of flash.h to the call. Returns the verdict; *mv describes the mask's arrays; *skip is
// set when a VALID/UNSURE call's arrays leave the arena (memory the caller does not own: outside the
// contract, not the library's to detect) or a mask the library would read does.
Rules judge(const Call& c, const Arena& a, MaskView* mv, bool* skip) {
  Rules r;
  *skip = false;
  const size_t first = c.backward() ? offsetof(flash_bwd_args, workspace_size) + sizeof(size_t)
                                    : offsetof(flash_fwd_args, workspace_size) + sizeof(size_t);
  if (*c.struct_size < first || *c.struct_size > c.args_size) r.invalid("args struct_size");
  if (*c.algorithm_used == 0) r.invalid("uninitialised args (algorithm_used 0)");

  // Tensors' own fields.
  bool fields_ok = true;
  std::vector<Footprint> reads, writes;
  for (const Call::T& x : c.tensors) {
    std::string why;
    if (!c.backward() && !strcmp(x.name, "lse") && x.t->data == nullptr) continue;  // optional
    if (!tensor_fields_ok(*x.t, x.ndim, &why)) {
      r.invalid(std::string(x.name) + ": " + why);
      fields_ok = false;
    }
  }
  if (fields_ok) {
    const flash_tensor &q = c.q(), &k = c.k();
    for (const Call::T& x : c.tensors) {
      const flash_tensor& t = *x.t;
      if (t.data == nullptr) continue;
      if (x.like == 2) {
        if (t.dtype != FLASH_DTYPE_FP32) r.invalid("lse not fp32");
        if (t.shape[0] != q.shape[0] || t.shape[1] != q.shape[2] || t.shape[2] != q.shape[1]) r.invalid("lse shape");
      } else {
        if (t.dtype != q.dtype) r.invalid(std::string(x.name) + " dtype");
        const flash_tensor& like = x.like == 0 ? q : k;
        if (&t != &q && &t != &k)
          for (int i = 0; i < 4; ++i)
            if (t.shape[i] != like.shape[i]) r.invalid(std::string(x.name) + " shape");
      }
    }
    if (k.shape[0] != q.shape[0] || k.shape[3] != q.shape[3]) r.invalid("k shape vs q");
    if (q.shape[2] % k.shape[2] != 0) r.invalid("heads_q % heads_kv");
    if (q.shape[3] % 8 != 0 || q.shape[3] > 256) r.invalid("head_dim");
  }
  // Options.
  const float s = *c.softmax_scale;
  if (!std::isfinite(s) || std::fabs(s) > 65536.0f) r.invalid("softmax_scale");
  if (*c.causal != 0 && *c.causal != 1) r.invalid("causal");
  if (*c.causal_alignment != 0 && *c.causal_alignment != 1) r.invalid("causal_alignment");
  if (*c.window_left < -1 || *c.window_right < -1) r.invalid("window");
  if (*c.algorithm != FLASH_ALGO_AUTO && *c.algorithm != FLASH_ALGO_CPU && *c.algorithm != FLASH_ALGO_NAIVE)
    r.invalid("algorithm not usable on the CPU");
  if (*c.flags & ~FLASH_FLAG_DETERMINISTIC) r.invalid("flags");

  // The block mask.
  const flash_block_mask* m = *c.block_mask;
  if (m != nullptr) {
    const size_t mfirst = offsetof(flash_block_mask, kv_indices_strides) + 4 * sizeof(int64_t);
    bool ok = true;
    auto bad = [&](const char* w) { r.invalid(std::string("block_mask ") + w), ok = false; };
    if (m->struct_size < mfirst || m->struct_size > sizeof(flash_block_mask)) bad("struct_size");
    if ((m->block_m != 64 && m->block_m != 128) || (m->block_n != 64 && m->block_n != 128)) bad("block size");
    if (m->kv_num_blocks == nullptr) bad("kv_num_blocks NULL");
    if (m->kv_indices == nullptr && m->max_kv_blocks > 0) bad("kv_indices NULL");
    if (reinterpret_cast<uintptr_t>(m->kv_num_blocks) % 4 || reinterpret_cast<uintptr_t>(m->kv_indices) % 4) bad("array not aligned");
    for (int i = 0; i < 3; ++i)
      if (m->kv_num_blocks_strides[i] < 0) bad("negative stride");
    for (int i = 0; i < 4; ++i)
      if (m->kv_indices_strides[i] < 0) bad("negative stride");
    if (ok && fields_ok) {
      const flash_tensor &q = c.q(), &k = c.k();
      mv->nqb = cdiv(q.shape[1], m->block_m), mv->nkb = cdiv(k.shape[1], m->block_n);
      if (m->num_q_blocks != mv->nqb) bad("num_q_blocks");
      if (m->max_kv_blocks < 0 || m->max_kv_blocks > mv->nkb) bad("max_kv_blocks");
      if (ok) {
        const int64_t ns[3] = {q.shape[0], q.shape[2], m->num_q_blocks};
        const int64_t is[4] = {q.shape[0], q.shape[2], m->num_q_blocks, m->max_kv_blocks};
        const int64_t nspan = span_bytes(ns, m->kv_num_blocks_strides, 3, 4);
        const int64_t ispan = m->max_kv_blocks > 0 ? span_bytes(is, m->kv_indices_strides, 4, 4) : 0;
        if (nspan < 0 || ispan < 0) {
          bad("array span overflows");
        } else if (ns[0] * ns[1] * ns[2] > (1 << 16)) {
          // q claims more (batch, head) rows than the arena holds; the library (and this oracle) would check every
          // entry of a broadcast mask for them: outside the arena's contract, like any array it does not hold.
          *skip = true;
          return r;
        } else if (!a.contains(m->kv_num_blocks, nspan) || (ispan > 0 && !a.contains(m->kv_indices, ispan))) {
          *skip = true;  // the library reads these while validating: they must be memory the caller owns
          return r;
        } else {
          flash_tensor tn{}, ti{};
          tn.data = const_cast<int32_t*>(m->kv_num_blocks), tn.dtype = FLASH_DTYPE_FP32;
          ti.data = const_cast<int32_t*>(m->kv_indices), ti.dtype = FLASH_DTYPE_FP32;
          for (int i = 0; i < 3; ++i) tn.shape[i] = ns[i], tn.strides[i] = m->kv_num_blocks_strides[i];
          for (int i = 0; i < 4; ++i) ti.shape[i] = is[i], ti.strides[i] = m->kv_indices_strides[i];
          mv->num = tensor_footprint("block_mask->kv_num_blocks", tn, 3);
          mv->idx = m->max_kv_blocks > 0 ? tensor_footprint("block_mask->kv_indices", ti, 4) : Footprint{"", nullptr, {}, 4, 0};
          mv->readable = true;
          // Entries.
          for (int64_t b = 0; b < ns[0] && ok; ++b)
            for (int64_t h = 0; h < ns[1] && ok; ++h)
              for (int64_t qb = 0; qb < ns[2] && ok; ++qb) {
                const int32_t n = m->kv_num_blocks[b * tn.strides[0] + h * tn.strides[1] + qb * tn.strides[2]];
                if (n < 0 || n > m->max_kv_blocks) { bad("kv_num_blocks entry"); break; }
                std::vector<char> seen(mv->nkb, 0);
                for (int32_t t = 0; t < n; ++t) {
                  const int32_t kb = m->kv_indices[b * ti.strides[0] + h * ti.strides[1] + qb * ti.strides[2] + t * ti.strides[3]];
                  if (kb < 0 || kb >= mv->nkb) { bad("kv_indices entry out of range"); break; }
                  if (seen[kb]++) { bad("kv_indices entry repeated"); break; }
                }
              }
        }
      }
    }
  }

  // Arrays in the arena (for calls that may run), then the overlap rules.
  if (fields_ok) {
    for (const Call::T& x : c.tensors) {
      if (x.t->data == nullptr) continue;
      const int64_t sp = span_bytes(x.t->shape, x.t->strides, x.ndim, esize(x.t->dtype));
      if (!a.contains(x.t->data, sp)) {
        if (r.v != INVALID) *skip = true;
        return r;
      }
    }
    // An array over the argument struct or the mask struct: flash.h says nothing of it (the library copies both
    // first); the harness reads them after the call, so such inputs are out of its scope.
    std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
    for (const Call::T& x : c.tensors)
      if (x.t->data != nullptr) {
        const uintptr_t lo = reinterpret_cast<uintptr_t>(x.t->data);
        ranges.push_back({lo, lo + static_cast<uintptr_t>(span_bytes(x.t->shape, x.t->strides, x.ndim, esize(x.t->dtype)))});
      }
    if (*c.workspace != nullptr)
      ranges.push_back({reinterpret_cast<uintptr_t>(*c.workspace), reinterpret_cast<uintptr_t>(*c.workspace) + *c.workspace_size});
    for (const auto& [lo, hi] : ranges) {
      for (const auto& [p, n] : {std::pair<const void*, size_t>{c.args, c.args_size}, {c.mask, c.mask ? sizeof(flash_block_mask) : 0}})
        if (n && lo < reinterpret_cast<uintptr_t>(p) + n && reinterpret_cast<uintptr_t>(p) < hi) {
          if (r.v != INVALID) *skip = true;
          return r;
        }
    }
    if (*c.workspace != nullptr && !a.contains(*c.workspace, *c.workspace_size)) {
      if (r.v != INVALID) *skip = true;
      return r;
    }
    for (const Call::T& x : c.tensors) {
      if (x.t->data == nullptr) continue;
      Footprint f = tensor_footprint(x.name, *x.t, x.ndim);
      if (x.input) {
        reads.push_back(std::move(f));
      } else {
        std::vector<int64_t> sorted = f.elems;
        std::sort(sorted.begin(), sorted.end());
        if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) r.invalid(std::string(x.name) + " self-overlaps");
        else if (!nested_layout(*x.t, x.ndim)) r.unsure();
        writes.push_back(std::move(f));
      }
    }
    if (mv->readable) {
      reads.push_back(mv->num);
      if (mv->idx.base) reads.push_back(mv->idx);
    }
    if (*c.workspace != nullptr && *c.workspace_size > 0) {
      Footprint w{"workspace", static_cast<const uint8_t*>(*c.workspace), {}, 1, *c.workspace_size};
      for (uint64_t i = 0; i < *c.workspace_size; ++i) w.elems.push_back(static_cast<int64_t>(i));
      writes.push_back(std::move(w));
    }
    for (size_t i = 0; i < writes.size(); ++i) {
      for (const Footprint& x : reads) overlap_rule(r, a, writes[i], x);
      for (size_t j = 0; j < i; ++j) overlap_rule(r, a, writes[i], writes[j]);
    }
  }
  return r;
}

// ---- the fp64 reference ---------------------------------------------------------------------------------------
struct Problem {
  int64_t b, sq, sk, hq, hkv, d;
  double scale;
  int64_t wl, wr, diag;
  const flash_block_mask* mask;
};

Problem problem_of(const Call& c) {
  const flash_tensor &q = c.q(), &k = c.k();
  Problem p{q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3], 0, 0, 0, 0, *c.block_mask};
  p.scale = *c.softmax_scale != 0.0f ? static_cast<double>(*c.softmax_scale) : 1.0 / std::sqrt(static_cast<double>(p.d));
  p.scale = static_cast<float>(p.scale);  // the library holds it as a float
  p.wl = *c.window_left, p.wr = *c.causal ? 0 : *c.window_right;
  p.diag = *c.causal_alignment == FLASH_ALIGN_BOTTOM_RIGHT ? p.sk - p.sq : 0;
  return p;
}

bool visible(const Problem& p, int64_t b, int64_t h, int64_t i, int64_t j) {
  const int64_t dg = i + p.diag;
  if (p.wl >= 0 && j < dg - p.wl) return false;
  if (p.wr >= 0 && j > dg + p.wr) return false;
  if (p.mask) {
    const flash_block_mask& m = *p.mask;
    const int64_t qb = i / m.block_m, kb = j / m.block_n;
    const int32_t n = m.kv_num_blocks[b * m.kv_num_blocks_strides[0] + h * m.kv_num_blocks_strides[1] + qb * m.kv_num_blocks_strides[2]];
    for (int32_t t = 0; t < n; ++t)
      if (m.kv_indices[b * m.kv_indices_strides[0] + h * m.kv_indices_strides[1] + qb * m.kv_indices_strides[2] +
                       t * m.kv_indices_strides[3]] == kb)
        return true;
    return false;
  }
  return true;
}

double at(const flash_tensor& t, int64_t a, int64_t b, int64_t c, int64_t e) {
  return load(static_cast<const uint8_t*>(t.data) + (a * t.strides[0] + b * t.strides[1] + c * t.strides[2] + e * t.strides[3]) * esize(t.dtype),
              t.dtype);
}
uint8_t* ptr(const flash_tensor& t, int64_t a, int64_t b, int64_t c, int64_t e) {
  return static_cast<uint8_t*>(t.data) + (a * t.strides[0] + b * t.strides[1] + c * t.strides[2] + e * t.strides[3]) * esize(t.dtype);
}
uint8_t* lse_ptr(const flash_tensor& t, int64_t b, int64_t h, int64_t i) {
  return static_cast<uint8_t*>(t.data) + (b * t.strides[0] + h * t.strides[1] + i * t.strides[2]) * 4;
}

// A [b, s, h, d] tensor decoded once into doubles, packed.
struct Dense {
  int64_t s, h, d;
  std::vector<double> x;
  Dense(const flash_tensor& t) : s(t.shape[1]), h(t.shape[2]), d(t.shape[3]), x(t.shape[0] * s * h * d) {
    for (int64_t a = 0; a < t.shape[0]; ++a)
      for (int64_t i = 0; i < s; ++i)
        for (int64_t c = 0; c < h; ++c)
          for (int64_t e = 0; e < d; ++e) x[((a * s + i) * h + c) * d + e] = at(t, a, i, c, e);
  }
  const double* row(int64_t a, int64_t i, int64_t c) const { return &x[((a * s + i) * h + c) * d]; }
};

// Scores row (scaled, -inf where masked) and its max |score|.
void scores(const Problem& p, const Dense& q, const Dense& k, int64_t b, int64_t h, int64_t i,
            std::vector<double>& s, double* smax_abs) {
  const int64_t hk = h / (p.hq / p.hkv);
  const double* qr = q.row(b, i, h);
  for (int64_t j = 0; j < p.sk; ++j) {
    if (!visible(p, b, h, i, j)) { s[j] = -INFINITY; continue; }
    const double* kr = k.row(b, j, hk);
    double dot = 0;
    for (int64_t e = 0; e < p.d; ++e) dot += qr[e] * kr[e];
    s[j] = dot * p.scale;
    *smax_abs = std::max(*smax_abs, std::fabs(s[j]));
  }
}

struct Ref {
  std::vector<double> o, lse;  // o[((b*sq+i)*hq+h)*d+e], lse[(b*hq+h)*sq+i]
  double smax = 0;
};

Ref forward_ref(const Problem& p, const flash_tensor& qt, const flash_tensor& kt, const flash_tensor& vt) {
  const Dense q(qt), k(kt), v(vt);
  Ref r;
  r.o.assign(p.b * p.sq * p.hq * p.d, 0.0);
  r.lse.assign(p.b * p.hq * p.sq, -INFINITY);
  std::vector<double> s(p.sk);
  for (int64_t b = 0; b < p.b; ++b)
    for (int64_t h = 0; h < p.hq; ++h)
      for (int64_t i = 0; i < p.sq; ++i) {
        scores(p, q, k, b, h, i, s, &r.smax);
        double mx = -INFINITY;
        for (double x : s) mx = std::max(mx, x);
        if (mx == -INFINITY) continue;
        double sum = 0;
        for (double& x : s) sum += (x = x == -INFINITY ? 0.0 : std::exp(x - mx));
        r.lse[(b * p.hq + h) * p.sq + i] = mx + std::log(sum);
        const int64_t hk = h / (p.hq / p.hkv);
        for (int64_t j = 0; j < p.sk; ++j)
          if (s[j] != 0.0)
            for (int64_t e = 0; e < p.d; ++e) r.o[((b * p.sq + i) * p.hq + h) * p.d + e] += s[j] / sum * v.row(b, j, hk)[e];
      }
  return r;
}

double eps_of(int32_t dtype) { return dtype == FLASH_DTYPE_BF16 ? 0x1p-8 : dtype == FLASH_DTYPE_FP16 ? 0x1p-11 : 0x1p-24; }
// The spacing of the dtype's subnormals: an output below the normal range is rounded to this absolute grid (a tiny
// softmax_scale gives gradients of 1e-9, which fp16 holds as 0).
double subnormal_of(int32_t dtype) { return dtype == FLASH_DTYPE_BF16 ? 0x1p-133 : dtype == FLASH_DTYPE_FP16 ? 0x1p-24 : 0x1p-149; }
double max_abs(const flash_tensor& t, int ndim) {
  double m = 0;
  for (int64_t off : element_offsets(t, ndim)) m = std::max(m, std::fabs(load(static_cast<uint8_t*>(t.data) + off * esize(t.dtype), t.dtype)));
  return m;
}

// A gradient whose exact value lies past the output dtype's largest finite value is correctly inf.
double max_finite(int32_t dtype) { return dtype == FLASH_DTYPE_FP16 ? 65504.0 : dtype == FLASH_DTYPE_BF16 ? 3.3895313892515355e38 : 3.4028234663852886e38; }

void compare(const char* what, double got, double want, double tol, const std::string& where, int32_t dtype = FLASH_DTYPE_FP32) {
  // (At |softmax_scale| near 2^16 the gradients are ill-conditioned -- an fp32 rounding of a score moves P by
  // O(1) -- and the tolerance spans both signs; an inf is right when the tolerated interval reaches past the
  // dtype's range on its side.)
  if (got == INFINITY && !std::isinf(want) && want + tol >= max_finite(dtype)) return;
  if (got == -INFINITY && !std::isinf(want) && want - tol <= -max_finite(dtype)) return;
  if (!std::isfinite(got) && !(std::isinf(want) && got == want))
    violation("non-finite result", std::string(what) + " " + std::to_string(got) + " at " + where);
  if (std::isinf(want) || std::isinf(got)) {
    if (got != want) violation("wrong result", std::string(what) + " " + std::to_string(got) + " vs " + std::to_string(want) + " at " + where);
    return;
  }
  if (!(std::fabs(got - want) <= tol))
    violation("wrong result", std::string(what) + " " + std::to_string(got) + " vs reference " + std::to_string(want) +
                                  " (tolerance " + std::to_string(tol) + ") at " + where);
}

// The expected results, computed from the inputs before the call (an input may share memory with a field the
// call writes, such as algorithm_used: legal, but the reference must see what the library saw).
struct Expected {
  Ref r;                                 // forward
  std::vector<double> gq, gk, gv;        // backward
  double tol_o = 0, rel = 0, tq = 0, tk = 0, tv = 0;
};

Expected expect_forward(const Call& c, const Problem& p) {
  Expected x;
  x.r = forward_ref(p, c.q(), c.k(), c.v());
  const double u = 0x1p-24, vmax = max_abs(c.v(), 4);
  // An fp32 score's rounding error follows sum |q_e k_e| * |scale|, which cancellation can put far above |score|.
  const double dots = p.d * max_abs(c.q(), 4) * max_abs(c.k(), 4) * std::fabs(p.scale);
  x.rel = 64 * u * (1 + x.r.smax + p.d + dots) + 8 * u * p.sk;
  x.tol_o = vmax * (4 * eps_of(c.find("o")->t->dtype) + 4 * x.rel) + subnormal_of(c.find("o")->t->dtype) + 1e-30;
  return x;
}

void check_forward(const Call& c, const Problem& p, const Expected& x) {
  const flash_tensor &o = *c.find("o")->t, &lse = *c.find("lse")->t;
  const Ref& r = x.r;
  const double u = 0x1p-24, rel = x.rel, tol_o = x.tol_o;
  for (int64_t b = 0; b < p.b; ++b)
    for (int64_t i = 0; i < p.sq; ++i)
      for (int64_t h = 0; h < p.hq; ++h) {
        for (int64_t e = 0; e < p.d; ++e)
          compare("o", load(ptr(o, b, i, h, e), o.dtype), r.o[((b * p.sq + i) * p.hq + h) * p.d + e], tol_o,
                  "b" + std::to_string(b) + " i" + std::to_string(i) + " h" + std::to_string(h) + " e" + std::to_string(e));
        if (lse.data) {
          float got;
          std::memcpy(&got, lse_ptr(lse, b, h, i), 4);
          const double want = r.lse[(b * p.hq + h) * p.sq + i];
          compare("lse", got, std::isinf(want) ? want : static_cast<float>(want), rel * (1 + std::fabs(want)) + 4 * u * std::fabs(want),
                  "b" + std::to_string(b) + " h" + std::to_string(h) + " i" + std::to_string(i));
        }
      }
}

// Writes the forward's O (rounded to the dtype) and LSE (fp32) into the backward's o and lse, as a caller
// would hand them over.
void fill_forward_outputs(const Call& c, const Problem& p) {
  const flash_tensor &o = *c.find("o")->t, &lse = *c.find("lse")->t;
  const Ref r = forward_ref(p, c.q(), c.k(), c.v());
  for (int64_t b = 0; b < p.b; ++b)
    for (int64_t i = 0; i < p.sq; ++i)
      for (int64_t h = 0; h < p.hq; ++h) {
        for (int64_t e = 0; e < p.d; ++e) store(ptr(o, b, i, h, e), o.dtype, r.o[((b * p.sq + i) * p.hq + h) * p.d + e]);
        const float l = static_cast<float>(r.lse[(b * p.hq + h) * p.sq + i]);
        std::memcpy(lse_ptr(lse, b, h, i), &l, 4);
      }
}

Expected expect_backward(const Call& c, const Problem& p) {
  const flash_tensor &q = c.q(), &k = c.k(), &v = c.v(), &o = *c.find("o")->t, &d_o = *c.find("d_o")->t,
                     &lse = *c.find("lse")->t;
  const Dense Q(q), K(k), V(v), O(o), DO(d_o);
  const int64_t ratio = p.hq / p.hkv;
  Expected x;
  std::vector<double>&gq = x.gq, &gk = x.gk, &gv = x.gv;
  gq.assign(p.b * p.sq * p.hq * p.d, 0.0), gk.assign(p.b * p.sk * p.hkv * p.d, 0.0), gv.assign(gk.size(), 0.0);
  std::vector<double> s(p.sk);
  double smax = 0, lmax = 0;
  for (int64_t b = 0; b < p.b; ++b)
    for (int64_t h = 0; h < p.hq; ++h) {
      const int64_t hk = h / ratio;
      for (int64_t i = 0; i < p.sq; ++i) {
        scores(p, Q, K, b, h, i, s, &smax);
        float l;
        std::memcpy(&l, lse_ptr(lse, b, h, i), 4);
        if (std::isinf(l)) continue;
        lmax = std::max(lmax, std::fabs(static_cast<double>(l)));
        const double *dor = DO.row(b, i, h), *orow = O.row(b, i, h), *qr = Q.row(b, i, h);
        double D = 0;
        for (int64_t e = 0; e < p.d; ++e) D += dor[e] * orow[e];
        for (int64_t j = 0; j < p.sk; ++j) {
          if (s[j] == -INFINITY) continue;
          const double P = std::exp(s[j] - l);
          const double *vr = V.row(b, j, hk), *kr = K.row(b, j, hk);
          double dP = 0;
          for (int64_t e = 0; e < p.d; ++e) dP += dor[e] * vr[e];
          const double dS = P * (dP - D);
          for (int64_t e = 0; e < p.d; ++e) {
            gq[((b * p.sq + i) * p.hq + h) * p.d + e] += p.scale * dS * kr[e];
            gk[((b * p.sk + j) * p.hkv + hk) * p.d + e] += p.scale * dS * qr[e];
            gv[((b * p.sk + j) * p.hkv + hk) * p.d + e] += P * dor[e];
          }
        }
      }
    }
  const double u = 0x1p-24;
  const double mq = max_abs(q, 4), mk = max_abs(k, 4), mv = max_abs(v, 4), mdo = max_abs(d_o, 4);
  const double rel = 64 * u * (1 + smax + lmax + p.d + p.d * mq * mk * std::fabs(p.scale)) + 8 * u * (p.sk + p.sq);
  const double dmag = 2 * p.d * mdo * std::max(mv, max_abs(o, 4));  // |dP| + |D|
  auto tol = [&](const std::vector<double>& g, double mag) {
    double m = 0;
    for (double x : g) m = std::max(m, std::fabs(x));
    return 4 * eps_of(q.dtype) * m + 8 * rel * mag + subnormal_of(q.dtype) + 1e-30;
  };
  x.tq = tol(gq, std::fabs(p.scale) * p.sk * mk * dmag * p.d);
  x.tk = tol(gk, std::fabs(p.scale) * p.sq * ratio * mq * dmag * p.d);
  x.tv = tol(gv, p.sq * ratio * mdo);
  return x;
}

void check_backward(const Call& c, const Problem& p, const Expected& x) {
  const flash_tensor &dq = *c.find("dq")->t, &dk = *c.find("dk")->t, &dv = *c.find("dv")->t;
  const std::vector<double>&gq = x.gq, &gk = x.gk, &gv = x.gv;
  const double tq = x.tq, tk = x.tk, tv = x.tv;
  for (int64_t b = 0; b < p.b; ++b)
    for (int64_t i = 0; i < p.sq; ++i)
      for (int64_t h = 0; h < p.hq; ++h)
        for (int64_t e = 0; e < p.d; ++e)
          compare("dq", load(ptr(dq, b, i, h, e), dq.dtype), gq[((b * p.sq + i) * p.hq + h) * p.d + e], tq,
                  "b" + std::to_string(b) + " i" + std::to_string(i) + " h" + std::to_string(h) + " e" + std::to_string(e), dq.dtype);
  for (int64_t b = 0; b < p.b; ++b)
    for (int64_t j = 0; j < p.sk; ++j)
      for (int64_t h = 0; h < p.hkv; ++h)
        for (int64_t e = 0; e < p.d; ++e) {
          const std::string where = "b" + std::to_string(b) + " j" + std::to_string(j) + " h" + std::to_string(h) + " e" + std::to_string(e);
          compare("dk", load(ptr(dk, b, j, h, e), dk.dtype), gk[((b * p.sk + j) * p.hkv + h) * p.d + e], tk, where, dk.dtype);
          compare("dv", load(ptr(dv, b, j, h, e), dv.dtype), gv[((b * p.sk + j) * p.hkv + h) * p.d + e], tv, where, dv.dtype);
        }
}

// Whether the reference comparison applies: the inputs hold the generator's values (finite, |x| <= 64) -- not
// another array's bytes, which a mutation may point an input at (NaN or 1e38 from canary bytes make "the right
// answer" a matter of fp32 overflow) -- and no two inputs (block-mask arrays included) share memory (the
// backward's o and lse, written here from the forward of q, k, v, would change an input that overlaps them).
bool comparable(const Call& c, const MaskView& mv) {
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  // The mask's arrays too: the backward's o and lse are written here, and must not change them.
  for (const Footprint* f : {&mv.num, &mv.idx})
    if (mv.readable && f->base) ranges.push_back({reinterpret_cast<uintptr_t>(f->base), reinterpret_cast<uintptr_t>(f->base) + f->span});
  for (const Call::T& x : c.tensors) {
    if (!x.input || x.t->data == nullptr) continue;
    const bool written_here = c.backward() && (!strcmp(x.name, "o") || !strcmp(x.name, "lse"));
    if (written_here) {  // a broadcast (stride 0) o or lse cannot hold a forward's result: no right answer to compare
      std::vector<int64_t> e = element_offsets(*x.t, x.ndim);
      std::sort(e.begin(), e.end());
      if (std::adjacent_find(e.begin(), e.end()) != e.end()) return false;
    } else
      for (int64_t off : element_offsets(*x.t, x.ndim))
        if (!(std::fabs(load(static_cast<const uint8_t*>(x.t->data) + off * esize(x.t->dtype), x.t->dtype)) <= 64.0)) return false;
    const uintptr_t lo = reinterpret_cast<uintptr_t>(x.t->data);
    const uintptr_t hi = lo + static_cast<uintptr_t>(span_bytes(x.t->shape, x.t->strides, x.ndim, esize(x.t->dtype)));
    for (const auto& [l, h] : ranges)
      if (lo < h && l < hi) return false;
    ranges.push_back({lo, hi});
  }
  return true;
}

std::string describe(const Call& c) {
  static const char* ops[] = {"flash_fwd", "flash_bwd", "flash_fwd_workspace_size", "flash_bwd_workspace_size"};
  std::string s = ops[c.op];
  auto num = [](double x) { char b[32]; std::snprintf(b, sizeof b, "%g", x); return std::string(b); };
  for (const Call::T& x : c.tensors) {
    const flash_tensor& t = *x.t;
    s += std::string(" ") + x.name + (t.data ? "" : "(NULL)") + "[dt" + std::to_string(t.dtype) + " dev" +
         std::to_string(t.device_type) + ":" + std::to_string(t.device_id) + " nd" + std::to_string(t.ndim) + " shape";
    for (int i = 0; i < 4; ++i) s += " " + std::to_string(t.shape[i]);
    s += " strides";
    for (int i = 0; i < 4; ++i) s += " " + std::to_string(t.strides[i]);
    s += "]";
  }
  s += " scale " + num(*c.softmax_scale) + " causal " + std::to_string(*c.causal) + " align " + std::to_string(*c.causal_alignment) +
       " window (" + std::to_string(*c.window_left) + ", " + std::to_string(*c.window_right) + ") algo " +
       std::to_string(*c.algorithm) + " flags " + std::to_string(*c.flags);
  if (const flash_block_mask* m = *c.block_mask) {
    s += " mask[" + std::to_string(m->block_m) + "x" + std::to_string(m->block_n) + " nq " + std::to_string(m->num_q_blocks) +
         " maxk " + std::to_string(m->max_kv_blocks) + " num strides";
    for (int i = 0; i < 3; ++i) s += " " + std::to_string(m->kv_num_blocks_strides[i]);
    s += " idx strides";
    for (int i = 0; i < 4; ++i) s += " " + std::to_string(m->kv_indices_strides[i]);
    if (c.mask && m == c.mask && m->kv_num_blocks && m->kv_indices) {  // the fuzzer's own arrays: the first entries
      s += " num";
      for (int i = 0; i < 16; ++i) s += " " + std::to_string(m->kv_num_blocks[i]);
      s += " idx";
      for (int i = 0; i < 24; ++i) s += " " + std::to_string(m->kv_indices[i]);
    }
    s += "]";
  }
  if (*c.workspace) s += " workspace " + std::to_string(*c.workspace_size) + " bytes";
  return s;
}

// ---- decoding ---------------------------------------------------------------------------------------------------
int64_t interesting_int(FuzzedDataProvider& in) {
  static const int64_t v[] = {0, 1, -1, -2, 2, 7, 8, 9, 63, 64, 65, 127, 128, 255, 256, 257, 1 << 20,
                              INT32_MAX, int64_t{INT32_MAX} + 1, int64_t{1} << 32, (int64_t{1} << 32) + 1, INT32_MIN,
                              int64_t{INT32_MIN} - 1, int64_t{1} << 62, INT64_MAX, INT64_MIN};
  if (in.ConsumeBool()) return in.ConsumeIntegral<int64_t>();
  return v[in.ConsumeIntegralInRange<size_t>(0, sizeof v / sizeof v[0] - 1)];
}
float interesting_scale(FuzzedDataProvider& in) {
  static const float v[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.125f, 65536.0f, -65536.0f, 65536.0078125f, 1e4f, -1e4f, 3e38f,
                            -1e30f, 1e-45f, 1e-30f, NAN, INFINITY, -INFINITY, 100.0f};
  if (in.ConsumeBool()) return in.ConsumeFloatingPoint<float>();
  return v[in.ConsumeIntegralInRange<size_t>(0, sizeof v / sizeof v[0] - 1)];
}

void mutate_tensor(FuzzedDataProvider& in, flash_tensor& t, Arena& a, const Call& c) {
  switch (in.ConsumeIntegralInRange(0, 8)) {
    case 0: t.data = nullptr; break;
    case 1: t.ndim = in.ConsumeIntegralInRange(-1, 5); break;
    case 2: t.dtype = in.ConsumeIntegralInRange(-1, 4); break;
    case 3: t.device_type = in.ConsumeIntegralInRange(0, 3); break;
    case 4: t.device_id = static_cast<int32_t>(interesting_int(in)); break;
    case 5: t.shape[in.ConsumeIntegralInRange(0, 3)] = in.ConsumeBool() ? interesting_int(in) : in.ConsumeIntegralInRange<int64_t>(0, 130); break;
    case 6: t.strides[in.ConsumeIntegralInRange(0, 3)] = in.ConsumeBool() ? interesting_int(in) : in.ConsumeIntegralInRange<int64_t>(-1, 40); break;
    case 7: {  // onto another array of the call (overlap), somewhere around its start
      const Call::T& other = c.tensors[in.ConsumeIntegralInRange<size_t>(0, c.tensors.size() - 1)];
      if (other.t->data == nullptr) break;
      const int64_t shift = in.ConsumeIntegralInRange<int64_t>(-64, 64) * esize(t.dtype);
      const size_t base = a.offset(other.t->data);
      if (static_cast<int64_t>(base) + shift >= 0 && base + shift < a.mem.size()) t.data = a.mem.data() + base + shift;
      break;
    }
    case 8: {  // onto the block mask's arrays
      const flash_block_mask* m = *c.block_mask;
      if (m == nullptr || m->kv_num_blocks == nullptr) break;
      const int64_t shift = in.ConsumeIntegralInRange<int64_t>(-256, 16) * 4;
      const size_t base = a.offset(in.ConsumeBool() || !m->kv_indices ? m->kv_num_blocks : m->kv_indices);
      if (static_cast<int64_t>(base) + shift >= 0 && base + shift < a.mem.size()) t.data = a.mem.data() + base + shift;
      break;
    }
  }
}

void mutate(FuzzedDataProvider& in, Call& c, Arena& a) {
  switch (in.ConsumeIntegralInRange(0, 6)) {
    case 0:
    case 1: mutate_tensor(in, *c.tensors[in.ConsumeIntegralInRange<size_t>(0, c.tensors.size() - 1)].t, a, c); break;
    case 2:
      switch (in.ConsumeIntegralInRange(0, 6)) {
        case 0: *c.softmax_scale = interesting_scale(in); break;
        case 1: *c.causal = static_cast<int32_t>(interesting_int(in)); break;
        case 2: *c.causal_alignment = static_cast<int32_t>(interesting_int(in)); break;
        case 3: *c.window_left = static_cast<int32_t>(interesting_int(in)); break;
        case 4: *c.window_right = static_cast<int32_t>(interesting_int(in)); break;
        case 5: *c.algorithm = in.ConsumeIntegralInRange(-2, 7); break;
        case 6: *c.flags = in.ConsumeIntegral<uint32_t>(); break;
      }
      break;
    case 3:
      switch (in.ConsumeIntegralInRange(0, 2)) {
        case 0: *c.struct_size = in.ConsumeIntegralInRange<size_t>(0, c.args_size + 16); break;
        case 1: *c.algorithm_used = 0; break;
        case 2: {  // zero-filled, struct_size set, tensors and pointers kept (issue 70, item 7)
          std::vector<uint8_t> keep(static_cast<uint8_t*>(c.args), static_cast<uint8_t*>(c.args) + c.args_size);
          std::vector<flash_tensor> ts;
          for (const Call::T& x : c.tensors) ts.push_back(*x.t);
          const flash_block_mask* m = *c.block_mask;
          std::memset(c.args, 0, c.args_size);
          *c.struct_size = c.args_size;
          for (size_t i = 0; i < ts.size(); ++i) *c.tensors[i].t = ts[i];
          *c.block_mask = m;
          break;
        }
      }
      break;
    case 4: {  // the block mask
      flash_block_mask* m = c.mask;
      if (m == nullptr) break;
      switch (in.ConsumeIntegralInRange(0, 9)) {
        case 0: m->struct_size = in.ConsumeIntegralInRange<size_t>(0, sizeof *m + 16); break;
        case 1: m->block_m = static_cast<int32_t>(interesting_int(in)); break;
        case 2: m->block_n = static_cast<int32_t>(interesting_int(in)); break;
        case 3: m->num_q_blocks = static_cast<int32_t>(int64_t{m->num_q_blocks} + in.ConsumeIntegralInRange(-2, 2)); break;
        case 4:
          m->max_kv_blocks = static_cast<int32_t>(in.ConsumeBool() ? interesting_int(in)
                                                                   : int64_t{m->max_kv_blocks} + in.ConsumeIntegralInRange(-2, 2));
          break;
        case 5: (in.ConsumeBool() ? m->kv_num_blocks : m->kv_indices) = nullptr; break;
        case 6: m->kv_num_blocks_strides[in.ConsumeIntegralInRange(0, 2)] = in.ConsumeBool() ? interesting_int(in) : in.ConsumeIntegralInRange<int64_t>(-1, 6); break;
        case 7: m->kv_indices_strides[in.ConsumeIntegralInRange(0, 3)] = in.ConsumeBool() ? interesting_int(in) : in.ConsumeIntegralInRange<int64_t>(-1, 6); break;
        case 8:
        case 9: {  // an entry of one of the arrays (the arrays are the fuzzer's own: write through them)
          const bool num = in.ConsumeBool() || m->kv_indices == nullptr;
          int32_t* arr = const_cast<int32_t*>(num ? m->kv_num_blocks : m->kv_indices);
          if (arr == nullptr) break;
          const size_t n = num ? 2 * 4 * 2 : 2 * 4 * 2 * 3;  // within what was laid out (see build())
          const size_t at = in.ConsumeIntegralInRange<size_t>(0, n - 1);
          if (!a.contains(arr + at, 4)) break;
          arr[at] = in.ConsumeBool() ? static_cast<int32_t>(interesting_int(in)) : in.ConsumeIntegralInRange(-1, 4);
          break;
        }
      }
      break;
    }
    case 5: {  // workspace onto an array, or an odd size
      if (in.ConsumeBool()) {
        const Call::T& other = c.tensors[in.ConsumeIntegralInRange<size_t>(0, c.tensors.size() - 1)];
        if (other.t->data) *c.workspace = other.t->data;
      }
      *c.workspace_size = in.ConsumeIntegralInRange<size_t>(0, 1 << 16);
      break;
    }
    case 6: mutate_tensor(in, *c.tensors[in.ConsumeIntegralInRange<size_t>(3, c.tensors.size() - 1)].t, a, c); break;
  }
}

int run(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const Op op = static_cast<Op>(in.ConsumeIntegralInRange(0, 3));
  const bool bwd = op == BWD || op == BWD_QUERY;
  const int32_t dtype = in.ConsumeIntegralInRange(1, 3);
  // Mostly tiny problems; sometimes past one 64-row block so that block masks have several blocks.
  const bool big = in.ConsumeIntegralInRange(0, 63) == 0;
  const int64_t batch = big ? 1 : in.ConsumeIntegralInRange(1, 2);
  const int64_t sq = big ? in.ConsumeIntegralInRange(60, 140) : in.ConsumeIntegralInRange(1, 9);
  const int64_t sk = big ? in.ConsumeIntegralInRange(60, 140) : in.ConsumeIntegralInRange(1, 9);
  const int64_t hkv = in.ConsumeIntegralInRange(1, 2), hq = hkv * (big ? 1 : in.ConsumeIntegralInRange(1, 3));
  const int64_t d = big ? 8 : 8 * in.ConsumeIntegralInRange(1, 4);
  const double mag = in.ConsumeBool() ? 1.0 : 4.0;
  uint64_t rng = in.ConsumeIntegral<uint64_t>();

  // Plan every array, then size the arena to hold them (with their gaps), the structs, the mask's arrays and
  // a workspace (the naive path's S and P rows, the CPU backward's dQ accumulator and D).
  const int64_t qshape[4] = {batch, sq, hq, d}, kshape[4] = {batch, sk, hkv, d}, lshape[3] = {batch, hq, sq};
  struct Role {
    const char* name;
    int like;
    bool input;
  };
  static const Role fwd_roles[] = {{"q", 0, true}, {"k", 1, true}, {"v", 1, true}, {"o", 0, false}, {"lse", 2, false}};
  static const Role bwd_roles[] = {{"q", 0, true},   {"k", 1, true},   {"v", 1, true},  {"o", 0, true},  {"d_o", 0, true},
                                   {"lse", 2, true}, {"dq", 0, false}, {"dk", 1, false}, {"dv", 1, false}};
  const Role* roles = bwd ? bwd_roles : fwd_roles;
  const size_t n_roles = bwd ? 9 : 5;
  std::vector<flash_tensor> plans(n_roles);
  std::vector<size_t> gaps(n_roles);
  size_t total = 2 * sizeof(flash_bwd_args) + sizeof(flash_block_mask) + 64;
  for (size_t i = 0; i < n_roles; ++i) {
    const int ndim = roles[i].like == 2 ? 3 : 4;
    plans[i] = plan_tensor(in, roles[i].like == 0 ? qshape : roles[i].like == 1 ? kshape : lshape, ndim,
                           roles[i].like == 2 ? FLASH_DTYPE_FP32 : dtype, &gaps[i]);
    total += static_cast<size_t>(span_bytes(plans[i].shape, plans[i].strides, ndim, esize(plans[i].dtype))) + gaps[i] + 8;
  }
  const bool want_mask = in.ConsumeIntegralInRange(0, 2) == 0;
  const int32_t bm = in.ConsumeBool() ? 64 : 128, bn = in.ConsumeBool() ? 64 : 128;
  const int64_t nqb = cdiv(sq, bm), nkb = cdiv(sk, bn);
  // Mask arrays sized for the largest entry a mutation writes (2 batches x 4 heads x 2 x 3) at least.
  const int64_t mb = std::max<int64_t>(batch, 2), mh = std::max<int64_t>(hq, 4), mq = std::max<int64_t>(nqb, 2),
                mk = std::max<int64_t>(nkb, 3);
  if (want_mask) total += static_cast<size_t>(mb * mh * mq * (1 + mk) * 4) + 2 * 32 + 16;
  const bool want_ws = in.ConsumeIntegralInRange(0, 3) == 0;
  if (want_ws) total += static_cast<size_t>(4 * (batch * hq * sq * (d + 2) + 4 * sq * sk + 1024)) + 64 + 64 + 16;

  Arena a(total);
  Call c;
  c.op = op;
  c.args_size = bwd ? sizeof(flash_bwd_args) : sizeof(flash_fwd_args);
  c.args = a.place(c.args_size, 8, 0);
  if (bwd) {
    auto* x = static_cast<flash_bwd_args*>(c.args);
    flash_bwd_args_init(x);
    bind_common(c, x);
    c.tensors = {{"q", &x->q, 4, 0, true},   {"k", &x->k, 4, 1, true},    {"v", &x->v, 4, 1, true},
                 {"o", &x->o, 4, 0, true},   {"d_o", &x->d_o, 4, 0, true}, {"lse", &x->lse, 3, 2, true},
                 {"dq", &x->dq, 4, 0, false}, {"dk", &x->dk, 4, 1, false}, {"dv", &x->dv, 4, 1, false}};
  } else {
    auto* x = static_cast<flash_fwd_args*>(c.args);
    flash_fwd_args_init(x);
    bind_common(c, x);
    c.tensors = {{"q", &x->q, 4, 0, true}, {"k", &x->k, 4, 1, true}, {"v", &x->v, 4, 1, true},
                 {"o", &x->o, 4, 0, false}, {"lse", &x->lse, 3, 2, false}};
  }
  for (size_t i = 0; i < n_roles; ++i) {
    const Call::T& x = c.tensors[i];
    const bool filled = x.input && strcmp(x.name, "o") && strcmp(x.name, "lse");
    *x.t = plans[i];
    if (!place_tensor(a, *x.t, gaps[i], filled, rng, mag)) violation("fuzzer bug", "arena too small for the tensors");
  }
  if (!bwd && in.ConsumeBool()) c.find("lse")->t->data = nullptr;  // the optional LSE not wanted

  // Options.
  *c.causal = in.ConsumeBool();
  *c.causal_alignment = in.ConsumeBool();
  if (in.ConsumeBool()) {
    *c.window_left = in.ConsumeIntegralInRange(-1, static_cast<int>(sk) + 1);
    *c.window_right = in.ConsumeIntegralInRange(-1, static_cast<int>(sk) + 1);
  }
  static const int32_t algos[] = {FLASH_ALGO_AUTO, FLASH_ALGO_CPU, FLASH_ALGO_NAIVE};
  *c.algorithm = algos[in.ConsumeIntegralInRange(0, 2)];
  if (in.ConsumeBool()) *c.flags = FLASH_FLAG_DETERMINISTIC;
  switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0: break;  // default
    case 1: *c.softmax_scale = static_cast<float>(in.ConsumeFloatingPointInRange<double>(-4.0, 4.0)); break;
    case 2: *c.softmax_scale = in.ConsumeBool() ? 65536.0f : -65536.0f; break;
    case 3: *c.softmax_scale = static_cast<float>(in.ConsumeFloatingPointInRange<double>(-300.0, 300.0)); break;
  }
  if (want_mask) {
    flash_block_mask* m = reinterpret_cast<flash_block_mask*>(a.place(sizeof(flash_block_mask), 8, 0));
    flash_block_mask_init(m);
    m->block_m = bm, m->block_n = bn;
    m->num_q_blocks = static_cast<int32_t>(nqb), m->max_kv_blocks = static_cast<int32_t>(nkb);
    const bool bcast_b = in.ConsumeBool(), bcast_h = in.ConsumeBool();
    int32_t* num = reinterpret_cast<int32_t*>(a.place(mb * mh * mq * 4, 4, in.ConsumeIntegralInRange<size_t>(0, 32)));
    int32_t* idx = reinterpret_cast<int32_t*>(a.place(mb * mh * mq * mk * 4, 4, in.ConsumeIntegralInRange<size_t>(0, 32)));
    if (!m || !num || !idx) violation("fuzzer bug", "arena too small for the mask");
    m->kv_num_blocks_strides[0] = bcast_b ? 0 : mh * mq, m->kv_num_blocks_strides[1] = bcast_h ? 0 : mq, m->kv_num_blocks_strides[2] = 1;
    m->kv_indices_strides[0] = bcast_b ? 0 : mh * mq * mk, m->kv_indices_strides[1] = bcast_h ? 0 : mq * mk;
    m->kv_indices_strides[2] = mk, m->kv_indices_strides[3] = 1;
    for (int64_t r = 0; r < mb * mh * mq; ++r) {  // a random subset of the key blocks, in random order
      std::vector<int32_t> ks2;
      for (int32_t kb = 0; kb < nkb; ++kb)
        if (splitmix(rng) & 1) ks2.push_back(kb);
      for (size_t i = ks2.size(); i > 1; --i) std::swap(ks2[i - 1], ks2[splitmix(rng) % i]);
      num[r] = static_cast<int32_t>(ks2.size());
      for (int64_t t = 0; t < mk; ++t) idx[r * mk + t] = t < static_cast<int64_t>(ks2.size()) ? ks2[t] : -7;  // padding: never read
    }
    m->kv_num_blocks = num, m->kv_indices = idx;
    c.mask = m;
    *c.block_mask = m;
  }
  // Workspace: sometimes the caller's own (sized by the query), in the arena.
  if (want_ws) {
    size_t ws = 0;
    const int32_t s = bwd ? flash_bwd_workspace_size(static_cast<flash_bwd_args*>(c.args), &ws)
                          : flash_fwd_workspace_size(static_cast<flash_fwd_args*>(c.args), &ws);
    if (s == FLASH_OK && ws > 0) {
      const size_t extra = in.ConsumeIntegralInRange<size_t>(0, 64);
      uint8_t* w = a.place(ws + extra, 16, in.ConsumeIntegralInRange<size_t>(0, 64));
      if (w) *c.workspace = w, *c.workspace_size = ws + extra - (in.ConsumeIntegralInRange(0, 7) == 0 ? extra + 1 : 0);
    }
  }
  const size_t* query_out = nullptr;
  if (op == FWD_QUERY || op == BWD_QUERY) {
    c.query_out = reinterpret_cast<size_t*>(a.place(sizeof(size_t), 8, 0));
    if (!c.query_out) return 0;
    query_out = c.query_out;
  }

  const int n_mut = in.ConsumeIntegralInRange(0, 4);
  for (int i = 0; i < n_mut && in.remaining_bytes() > 0; ++i) mutate(in, c, a);

  MaskView mv;
  bool skip = false;
  Rules rules = judge(c, a, &mv, &skip);
  if (skip) {
    ++g_counts.skipped;
    return 0;
  }
  const bool valid = rules.v == VALID;
  // A workspace smaller than what the query says is a documented error too (the query is the rule's source).
  if (valid && *c.workspace != nullptr && (op == FWD || op == BWD)) {  // a size query ignores the workspace
    size_t ws = 0;
    std::vector<uint8_t> copy(static_cast<uint8_t*>(c.args), static_cast<uint8_t*>(c.args) + c.args_size);
    const int32_t s = bwd ? flash_bwd_workspace_size(reinterpret_cast<flash_bwd_args*>(copy.data()), &ws)
                          : flash_fwd_workspace_size(reinterpret_cast<flash_fwd_args*>(copy.data()), &ws);
    if (s != FLASH_OK) violation("workspace query refused a VALID call", flash_last_error_message());
    if (ws > 0 && *c.workspace_size < ws) rules.invalid("workspace smaller than the query says");
  }
  Problem prob{};
  Expected expected;
  const bool compare_results = rules.v == VALID && (op == FWD || op == BWD) && comparable(c, mv);
  if (rules.v == VALID) {
    prob = problem_of(c);
    if (bwd && compare_results) fill_forward_outputs(c, prob);
    if (compare_results) expected = bwd ? expect_backward(c, prob) : expect_forward(c, prob);
  }

  g_call = describe(c);
  // The call, and what it may write.
  static std::vector<uint8_t> before, may;  // reused across inputs (fresh pages per input were a tenth of the time)
  before.assign(a.mem.begin(), a.mem.end());
  int32_t status;
  ++g_counts.calls;
  switch (op) {
    case FWD: status = flash_fwd(static_cast<flash_fwd_args*>(c.args)); break;
    case BWD: status = flash_bwd(static_cast<flash_bwd_args*>(c.args)); break;
    case FWD_QUERY: status = flash_fwd_workspace_size(static_cast<flash_fwd_args*>(c.args), c.query_out); break;
    default: status = flash_bwd_workspace_size(static_cast<flash_bwd_args*>(c.args), c.query_out); break;
  }
  const std::string message = flash_last_error_message();
  const bool query = op == FWD_QUERY || op == BWD_QUERY;

  may.assign(a.mem.size(), 0);  // bytes the call may have changed
  if (query) {
    std::fill_n(may.begin() + a.offset(query_out), sizeof(size_t), 1);  // *bytes = 0 even on failure
  } else if (status == FLASH_OK) {
    std::fill_n(may.begin() + a.offset(c.algorithm_used), sizeof(int32_t), 1);
    for (const Call::T& x : c.tensors)
      if (!x.input && x.t->data)
        for (int64_t e : element_offsets(*x.t, x.ndim)) std::fill_n(may.begin() + a.offset(x.t->data) + e * esize(x.t->dtype), esize(x.t->dtype), 1);
    if (*c.workspace && *c.workspace_size) std::fill_n(may.begin() + a.offset(*c.workspace), *c.workspace_size, 1);
  }
  if (std::memcmp(a.mem.data(), before.data(), before.size()) != 0)
    for (size_t i = 0; i < a.mem.size(); ++i)
      if (a.mem[i] != before[i] && !may[i])
      violation(status == FLASH_OK ? "stray write" : "a refused call wrote memory",
                "arena byte " + std::to_string(i) + " (status " + flash_status_string(status) + ")");

  if (rules.v == INVALID && status == FLASH_OK)
    violation("FLASH_OK on invalid input", rules.why);
  if (rules.v == VALID && status != FLASH_OK)
    violation("a valid call was refused", std::string(flash_status_string(status)) + ": " + message);
  if (status != FLASH_OK && message.empty()) violation("a refusal without a message", flash_status_string(status));
  if (rules.v == INVALID) ++g_counts.invalid_refused;
  if (rules.v == UNSURE) ++(status == FLASH_OK ? g_counts.unsure_ok : g_counts.unsure_refused);
  if (query) {
    ++g_counts.queries;
    return 0;
  }
  if (rules.v == VALID) {
    ++g_counts.valid_ok;
    if (*c.algorithm_used != FLASH_ALGO_CPU && *c.algorithm_used != FLASH_ALGO_NAIVE)
      violation("algorithm_used", std::to_string(*c.algorithm_used));
    if (compare_results) {
      if (bwd) check_backward(c, prob, expected);
      else check_forward(c, prob, expected);
      ++g_counts.compared;
    }
  }
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  setenv("LIBFLASH_NUM_THREADS", "1", 1);  // tiny problems: threads cost more than they give, and one is reproducible
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return run(data, size); }
