// fuzz/fuzz_attention.cpp -- libFuzzer target over flash.h's entry points on the CPU path (flash_fwd,
// flash_bwd and their workspace queries; since ABI 1.2 flash_fwd_kvcache, flash_fwd_kvcache_workspace_size and
// flash_combine, see the section "ABI 1.2" below; since ABI 1.3 packed variable-length flash_fwd and flash_bwd, see
// "ABI 1.3"). One byte of the input picks the entry point (enum Op).
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
// Any violation aborts with a message (libFuzzer then saves the input). Counts are printed at exit, in total and
// per entry point. Every rule is enforced: the library has no known deviation from flash.h left (the four this harness
// found -- flash_fwd_kvcache's workspace overlaps and uninitialised args, an empty block mask's NULL kv_indices, a span
// ending at INT64_MAX -- are fixed, each with a regression test in tests/test_reliability.cpp or test_validation.cpp).
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
#include <initializer_list>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
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
// Totals (the first line, which scripts/ci-reliability.sh greps) and one row per entry point.
enum Family { FAM_FWD = 0, FAM_BWD = 1, FAM_KVCACHE = 2, FAM_COMBINE = 3, FAM_VARLEN_FWD = 4, FAM_VARLEN_BWD = 5, FAM_COUNT = 6 };
struct Tally {
  std::atomic<uint64_t> calls{0}, skipped{0}, valid_ok{0}, compared{0}, invalid_refused{0}, unsure_ok{0}, unsure_refused{0},
      queries{0};
};
struct Counts {
  Tally all, fam[FAM_COUNT];
  ~Counts() {
    std::fprintf(stderr,
                 "fuzz_attention counts: calls %llu (VALID and FLASH_OK %llu, of which compared with the reference %llu; "
                 "INVALID and refused %llu; UNSURE ok %llu / refused %llu; workspace queries %llu); inputs skipped "
                 "(arrays outside the arena, or over the argument structs) %llu; violations 0 (any would have aborted)\n",
                 (unsigned long long)all.calls, (unsigned long long)all.valid_ok, (unsigned long long)all.compared,
                 (unsigned long long)all.invalid_refused, (unsigned long long)all.unsure_ok,
                 (unsigned long long)all.unsure_refused, (unsigned long long)all.queries, (unsigned long long)all.skipped);
    static const char* names[FAM_COUNT] = {"flash_fwd", "flash_bwd", "flash_fwd_kvcache", "flash_combine", "flash_fwd varlen",
                                            "flash_bwd varlen"};
    for (int f = 0; f < FAM_COUNT; ++f) {
      const Tally& t = fam[f];
      std::fprintf(stderr,
                   "fuzz_attention counts %-18s calls %llu: VALID-ok %llu (compared %llu), INVALID-refused %llu, UNSURE "
                   "ok/refused %llu/%llu, of them workspace queries %llu; skipped %llu\n",
                   names[f], (unsigned long long)t.calls, (unsigned long long)t.valid_ok, (unsigned long long)t.compared,
                   (unsigned long long)t.invalid_refused, (unsigned long long)t.unsure_ok,
                   (unsigned long long)t.unsure_refused, (unsigned long long)t.queries, (unsigned long long)t.skipped);
    }
  }
} g_counts;
void tally(int fam, std::atomic<uint64_t> Tally::*f) {
  ++(g_counts.all.*f);
  ++(g_counts.fam[fam].*f);
}

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
// The first byte the input gives (FuzzedDataProvider takes integers from the input's end) picks the entry point,
// modulo 8: 0-3 as before ABI 1.2, then flash_fwd_kvcache (4), its workspace query (5), flash_combine (6), and (7) a
// packed variable-length flash_fwd, flash_bwd or workspace query (ABI 1.3; the next byte picks which of 0-3).
enum Op { FWD = 0, BWD = 1, FWD_QUERY = 2, BWD_QUERY = 3, KVC = 4, KVC_QUERY = 5, COMBINE = 6 };

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
  std::string why;  // the first broken rule
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

void init_args(flash_fwd_args* a) { flash_fwd_args_init(a); }
void init_args(flash_bwd_args* a) { flash_bwd_args_init(a); }
int32_t call(flash_fwd_args* a) { return flash_fwd(a); }
int32_t call(flash_bwd_args* a) { return flash_bwd(a); }
int32_t query(flash_fwd_args* a, size_t* n) { return flash_fwd_workspace_size(a, n); }
int32_t query(flash_bwd_args* a, size_t* n) { return flash_bwd_workspace_size(a, n); }

// The arguments as the library reads them: the caller's struct_size bytes over the init function's defaults (a struct
// of the 1.2 layout has no varlen fields: they read as 0 / NULL). struct_size must be in range.
template <class Args>
Args effective_args(const Args& user) {
  Args e;
  init_args(&e);
  std::memcpy(static_cast<void*>(&e), &user, std::min(user.struct_size, sizeof e));
  e.struct_size = sizeof e;
  return e;
}

// ABI 1.3's varlen fields away from their dense defaults (0 / NULL): flash.h refuses any of them without cu_seqlens_q,
// and a dense call's 4-d tensors with it.
template <class Args>
bool varlen_fields_set(const Args& A) {
  return A.cu_seqlens_q || A.cu_seqlens_k || A.seqused_k || A.varlen_batch || A.max_seqlen_q || A.max_seqlen_k || A.reserved_1_3;
}

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
  if (*c.struct_size >= first && *c.struct_size <= c.args_size &&
      (c.backward() ? varlen_fields_set(effective_args(*static_cast<const flash_bwd_args*>(c.args)))
                    : varlen_fields_set(effective_args(*static_cast<const flash_fwd_args*>(c.args)))))
    r.invalid("a varlen field set on a dense call");

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
  Dense(int64_t s_, int64_t h_, int64_t d_) : s(s_), h(h_), d(d_), x(s_ * h_ * d_) {}  // one batch, filled by the caller
  const double* row(int64_t a, int64_t i, int64_t c) const { return &x[((a * s + i) * h + c) * d]; }
  double* row(int64_t a, int64_t i, int64_t c) { return &x[((a * s + i) * h + c) * d]; }
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

Ref forward_ref_dense(const Problem& p, const Dense& q, const Dense& k, const Dense& v) {
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
Ref forward_ref(const Problem& p, const flash_tensor& qt, const flash_tensor& kt, const flash_tensor& vt) {
  return forward_ref_dense(p, Dense(qt), Dense(kt), Dense(vt));
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
  const auto varlen_words = [&](const auto& A) {
    if (varlen_fields_set(A))
      s += " varlen fields: cu_seqlens_q " + std::string(A.cu_seqlens_q ? "set" : "NULL") + " cu_seqlens_k " +
           (A.cu_seqlens_k ? "set" : "NULL") + " seqused_k " + (A.seqused_k ? "set" : "NULL") + " varlen_batch " +
           std::to_string(A.varlen_batch) + " max_seqlen_q " + std::to_string(A.max_seqlen_q) + " max_seqlen_k " +
           std::to_string(A.max_seqlen_k) + " reserved_1_3 " + std::to_string(A.reserved_1_3);
  };
  if (c.backward()) varlen_words(*static_cast<const flash_bwd_args*>(c.args));
  else varlen_words(*static_cast<const flash_fwd_args*>(c.args));
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

// A valid call's softmax scale: the default (left as is), the ordinary range, +-65536 (S overflows without the
// online rescaling), or wide.
void draw_scale(FuzzedDataProvider& in, float* scale) {
  switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0: break;
    case 1: *scale = static_cast<float>(in.ConsumeFloatingPointInRange<double>(-4.0, 4.0)); break;
    case 2: *scale = in.ConsumeBool() ? 65536.0f : -65536.0f; break;
    case 3: *scale = static_cast<float>(in.ConsumeFloatingPointInRange<double>(-300.0, 300.0)); break;
  }
}
// The caller's own workspace of the `ws` bytes the query gave, in the arena, now and then one byte short.
void place_workspace(FuzzedDataProvider& in, Arena& a, size_t ws, void** workspace, size_t* workspace_size) {
  const size_t extra = in.ConsumeIntegralInRange<size_t>(0, 64);
  uint8_t* w = a.place(ws + extra, 16, in.ConsumeIntegralInRange<size_t>(0, 64));
  if (w) *workspace = w, *workspace_size = ws + extra - (in.ConsumeIntegralInRange(0, 7) == 0 ? extra + 1 : 0);
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

// =================================================================================================================
// ABI 1.2: flash_fwd_kvcache (with flash_fwd_kvcache_workspace_size) and flash_combine.
//
// The same scheme: one arena holds the argument struct, every tensor, the host index arrays (cache_seqlens,
// cache_batch_idx, block_table) and the caller's workspace; flash_combine's o_parts and lse_parts descriptor arrays
// too. An oracle written from flash.h's text classifies the call, and after it
//   - failed:   the arena is bitwise unchanged (the cache included: nothing is appended by a refused call);
//   - FLASH_OK: nothing changed but o, lse, algorithm_used, num_splits_used, the workspace and -- with k_new --
//               the appended cache slots (exact element bytes); VALID calls: those slots hold k_new's and v_new's
//               bytes, num_splits_used is the num_splits asked for (or in [1, 256]), and O and LSE match an fp64
//               reference: each sequence's keys gathered through the block table / cache_batch_idx from the cache as
//               it is after the appends, attended with flash_fwd's reference and the bottom-right mask (kvcache), or
//               flash.h's combine formula in double (combine).
// =================================================================================================================

uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }
bool meets(const void* p, uint64_t n, const void* q, uint64_t m) {
  return n && m && addr(p) < addr(q) + m && addr(q) < addr(p) + n;
}

// An int32 index array's footprint: the elements the call reads.
Footprint int32_footprint(const char* name, const int32_t* p, std::vector<int64_t> elems) {
  Footprint f{name, reinterpret_cast<const uint8_t*>(p), std::move(elems), 4, 0};
  int64_t last = -1;
  for (int64_t e : f.elems) last = std::max(last, e);
  f.span = static_cast<uint64_t>(last + 1) * 4;
  return f;
}
Footprint bytes_footprint(const char* name, const void* p, uint64_t n) {
  Footprint f{name, static_cast<const uint8_t*>(p), {}, 1, n};
  f.elems.resize(n);
  for (uint64_t i = 0; i < n; ++i) f.elems[i] = static_cast<int64_t>(i);
  return f;
}

// An output's own layout: an element collision is INVALID (flash.h: writes that share memory), a layout that only
// the library's conservative nesting rule refuses is UNSURE.
void output_layout_rule(Rules& r, const Footprint& f, const flash_tensor& t, int ndim, bool collision_invalid) {
  std::vector<int64_t> sorted = f.elems;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    if (collision_invalid) r.invalid(std::string(f.name) + " self-overlaps");
    else r.unsure();
  } else if (!nested_layout(t, ndim)) {
    r.unsure();
  }
}

void pairwise_overlaps(Rules& r, const Arena& a, const std::vector<Footprint>& writes, const std::vector<Footprint>& reads) {
  for (size_t i = 0; i < writes.size(); ++i) {
    for (const Footprint& x : reads) overlap_rule(r, a, writes[i], x);
    for (size_t j = 0; j < i; ++j) overlap_rule(r, a, writes[i], writes[j]);
  }
}

std::string tensor_words(const char* name, const flash_tensor& t) {
  std::string s = std::string(" ") + name + (t.data ? "" : "(NULL)") + "[dt" + std::to_string(t.dtype) + " dev" +
                  std::to_string(t.device_type) + ":" + std::to_string(t.device_id) + " nd" + std::to_string(t.ndim) + " shape";
  for (int i = 0; i < 4; ++i) s += " " + std::to_string(t.shape[i]);
  s += " strides";
  for (int i = 0; i < 4; ++i) s += " " + std::to_string(t.strides[i]);
  return s + "]";
}
std::string num_words(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}
// An int32 array's first entries, when they lie in the arena.
std::string int32_words(const char* name, const int32_t* p, int64_t n, const Arena& a) {
  std::string s = std::string(" ") + name;
  if (p == nullptr) return s + " NULL";
  if (n < 0 || n > 64 || addr(p) % 4 || !a.contains(p, static_cast<uint64_t>(n) * 4)) return s + " (" + std::to_string(n) + " entries, not shown)";
  s += " [";
  for (int64_t i = 0; i < n; ++i) s += (i ? " " : "") + std::to_string(p[i]);
  return s + "]";
}

// After a call: every changed byte must be one the call may write, and the status must agree with the verdict.
void check_status(const Arena& a, const std::vector<uint8_t>& before, const std::vector<uint8_t>& may, int32_t status,
                  const Rules& rules, int fam, bool query) {
  const std::string message = flash_last_error_message();
  if (std::memcmp(a.mem.data(), before.data(), before.size()) != 0)
    for (size_t i = 0; i < a.mem.size(); ++i)
      if (a.mem[i] != before[i] && !may[i])
        violation(status == FLASH_OK ? "stray write" : "a refused call wrote memory",
                  "arena byte " + std::to_string(i) + " (status " + flash_status_string(status) + ")");
  if (rules.v == INVALID && status == FLASH_OK) violation("FLASH_OK on invalid input", rules.why);
  if (rules.v == VALID && status != FLASH_OK)
    violation("a valid call was refused", std::string(flash_status_string(status)) + ": " + message);
  if (status != FLASH_OK && message.empty()) violation("a refusal without a message", flash_status_string(status));
  if (rules.v == INVALID) tally(fam, &Tally::invalid_refused);
  if (rules.v == UNSURE) tally(fam, status == FLASH_OK ? &Tally::unsure_ok : &Tally::unsure_refused);
  if (query) tally(fam, &Tally::queries);
  else if (rules.v == VALID) tally(fam, &Tally::valid_ok);
}

void mark_bytes(std::vector<uint8_t>& may, const Arena& a, const void* p, uint64_t n) {
  if (p != nullptr && a.contains(p, n)) std::fill_n(may.begin() + a.offset(p), n, 1);
}
void mark_tensor(std::vector<uint8_t>& may, const Arena& a, const flash_tensor& t, int ndim) {
  if (t.data == nullptr) return;
  for (int64_t e : element_offsets(t, ndim)) mark_bytes(may, a, static_cast<const uint8_t*>(t.data) + e * esize(t.dtype), esize(t.dtype));
}

// A tensor field set wrong, or its data moved onto (near) another array of the call.
void mutate_tensor_onto(FuzzedDataProvider& in, flash_tensor& t, Arena& a, const std::vector<const void*>& onto) {
  switch (in.ConsumeIntegralInRange(0, 8)) {
    case 0: t.data = nullptr; break;
    case 1: t.ndim = in.ConsumeIntegralInRange(-1, 5); break;
    case 2: t.dtype = in.ConsumeIntegralInRange(-1, 4); break;
    case 3: t.device_type = in.ConsumeIntegralInRange(0, 3); break;
    case 4: t.device_id = static_cast<int32_t>(interesting_int(in)); break;
    case 5: t.shape[in.ConsumeIntegralInRange(0, 3)] = in.ConsumeBool() ? interesting_int(in) : in.ConsumeIntegralInRange<int64_t>(0, 40); break;
    case 6: t.strides[in.ConsumeIntegralInRange(0, 3)] = in.ConsumeBool() ? interesting_int(in) : in.ConsumeIntegralInRange<int64_t>(-1, 40); break;
    case 7: {
      if (onto.empty()) break;
      const void* other = onto[in.ConsumeIntegralInRange<size_t>(0, onto.size() - 1)];
      if (other == nullptr || !a.contains(other, 0)) break;
      const int64_t shift = in.ConsumeIntegralInRange<int64_t>(-64, 64) * (t.dtype == FLASH_DTYPE_FP32 ? 4 : 2);
      const int64_t at = static_cast<int64_t>(a.offset(other)) + shift;
      if (at >= 0 && at < static_cast<int64_t>(a.mem.size())) t.data = a.mem.data() + at;
      break;
    }
    case 8: t.strides[in.ConsumeIntegralInRange(0, 2)] = 0; break;  // a broadcast: fine to read, a collision to write
  }
}

// An int32 pointer moved onto (near) another array, kept 4-byte aligned.
const int32_t* int32_onto(FuzzedDataProvider& in, Arena& a, const std::vector<const void*>& onto, const int32_t* keep) {
  if (onto.empty()) return keep;
  const void* other = onto[in.ConsumeIntegralInRange<size_t>(0, onto.size() - 1)];
  if (other == nullptr || !a.contains(other, 0)) return keep;
  const int64_t at = static_cast<int64_t>(a.offset(other)) + in.ConsumeIntegralInRange<int64_t>(-16, 16) * 4;
  if (at < 0 || at >= static_cast<int64_t>(a.mem.size())) return keep;
  return reinterpret_cast<const int32_t*>(addr(a.mem.data() + at) & ~uintptr_t{3});
}

// ---- flash_fwd_kvcache: the oracle -----------------------------------------------------------------------------
// What the oracle derived from the arguments, for the write set and the reference.
struct KvView {
  bool fields_ok = false, append = false, paged = false, indices_ok = false;
  int64_t batch = 0, sn = 0, hq = 0, hkv = 0, d = 0, rows = 0, len = 0, bt_stride = 0;
  std::vector<int64_t> n;  // cache_seqlens (indices_ok)
};

// (cache row or page, position in it) of key position t of sequence b; the entries read are in range.
std::pair<int64_t, int64_t> kv_slot(const flash_kvcache_args& A, const KvView& v, int64_t b, int64_t t) {
  if (v.paged) return {A.block_table[b * v.bt_stride + t / v.len], t % v.len};
  return {A.cache_batch_idx ? A.cache_batch_idx[b] : b, t};
}

Rules judge_kvcache(const flash_kvcache_args& A, const Arena& a, KvView* v, bool* skip) {
  Rules r;
  *skip = false;
  if (A.struct_size < offsetof(flash_kvcache_args, workspace_size) + sizeof(size_t) || A.struct_size > sizeof A)
    r.invalid("args struct_size");
  // CONVENTIONS: a struct that skipped its init function is refused; the init functions write algorithm_used = -1.
  if (A.algorithm_used == 0) r.invalid("uninitialised args (algorithm_used 0)");
  v->append = A.k_new.data != nullptr || A.v_new.data != nullptr;
  bool fields_ok = true;
  if (v->append && (A.k_new.data == nullptr || A.v_new.data == nullptr)) {
    r.invalid("k_new / v_new: one given without the other");
    fields_ok = false;
  }
  std::vector<std::pair<const char*, const flash_tensor*>> ts = {{"q", &A.q}, {"k_cache", &A.k_cache}, {"v_cache", &A.v_cache}, {"o", &A.o}};
  if (v->append && fields_ok) ts.insert(ts.end(), {{"k_new", &A.k_new}, {"v_new", &A.v_new}});
  for (const auto& [n, t] : ts) {
    std::string why;
    if (!tensor_fields_ok(*t, 4, &why)) r.invalid(std::string(n) + ": " + why), fields_ok = false;
  }
  if (A.lse.data != nullptr) {
    std::string why;
    if (!tensor_fields_ok(A.lse, 3, &why)) r.invalid("lse: " + why), fields_ok = false;
  }
  const flash_tensor &q = A.q, &kc = A.k_cache, &vc = A.v_cache, &o = A.o;
  if (fields_ok) {
    v->batch = q.shape[0], v->sn = q.shape[1], v->hq = q.shape[2], v->d = q.shape[3];
    v->rows = kc.shape[0], v->len = kc.shape[1], v->hkv = kc.shape[2];
    if (kc.dtype != q.dtype) r.invalid("k_cache dtype");
    if (o.dtype != q.dtype) r.invalid("o dtype");
    if (vc.dtype != q.dtype) r.unsure();  // "shape of k_cache": flash.h does not name v_cache's dtype
    for (int i = 0; i < 4; ++i) {
      if (o.shape[i] != q.shape[i]) r.invalid("o shape");
      if (vc.shape[i] != kc.shape[i]) r.invalid("v_cache shape");
    }
    if (kc.shape[3] != v->d) r.invalid("k_cache head_dim");
    if (v->hq % v->hkv != 0) r.invalid("heads_q % heads_kv");
    if (v->d % 8 != 0 || v->d > 256) r.invalid("head_dim");
    if (v->append) {
      const int64_t want[4] = {v->batch, v->sn, v->hkv, v->d};
      for (int i = 0; i < 4; ++i) {
        if (A.k_new.shape[i] != want[i]) r.invalid("k_new shape");
        if (A.v_new.shape[i] != A.k_new.shape[i]) r.invalid("v_new shape");
      }
      if (A.k_new.dtype != q.dtype || A.v_new.dtype != q.dtype) r.unsure();  // not named either
    }
    if (A.lse.data != nullptr) {
      if (A.lse.dtype != FLASH_DTYPE_FP32) r.invalid("lse not fp32");
      if (A.lse.shape[0] != v->batch || A.lse.shape[1] != v->hq || A.lse.shape[2] != v->sn) r.invalid("lse shape");
    }
  }
  // The cache's addressing.
  v->paged = A.block_table != nullptr;
  if (A.cache_seqlens == nullptr) r.invalid("cache_seqlens NULL");
  bool table_ok = true;  // the block table's geometry is one flash.h describes
  if (v->paged) {
    if (A.cache_batch_idx != nullptr) r.invalid("cache_batch_idx with a block_table (contiguous cache only)");
    if (A.max_pages_per_seq < 0) r.invalid("max_pages_per_seq negative"), table_ok = false;
    else if (A.max_pages_per_seq == 0) r.unsure(), table_ok = false;  // a table of no columns: flash.h does not say
    if (A.block_table_stride < 0) r.unsure(), table_ok = false;       // a negative row stride: not said either
    // A row stride no table could have (the library bounds it by the address space even when batch is 1 and no
    // second row is read): not said either.
    if (A.block_table_stride > (int64_t{1} << 32)) r.unsure();
    v->bt_stride = A.block_table_stride != 0 ? A.block_table_stride : A.max_pages_per_seq;
  } else if (fields_ok && A.cache_batch_idx == nullptr && v->rows < v->batch) {
    r.invalid("batch_cache < batch without cache_batch_idx");
  }
  // Options.
  if (!std::isfinite(A.softmax_scale) || std::fabs(A.softmax_scale) > 65536.0f) r.unsure();  // kvcache: no range said
  if (A.causal != 0 && A.causal != 1) r.invalid("causal");
  if (A.window_left < -1 || A.window_right < -1) r.invalid("window");
  if (A.num_splits < 0 || A.num_splits > 256) r.invalid("num_splits");
  if (A.algorithm != FLASH_ALGO_AUTO && A.algorithm != FLASH_ALGO_CPU) r.invalid("algorithm not usable on CPU tensors");
  if (A.flags != 0) r.invalid("flags");
  if (A.workspace != nullptr && addr(A.workspace) % 8 != 0) r.invalid("workspace not 8-byte aligned");
  v->fields_ok = fields_ok;
  if (!fields_ok) return r;  // (the library refuses before it reads an index array)

  // Arrays in the arena. The library reads the index arrays while validating: they must be memory the caller owns
  // whatever the verdict.
  std::vector<std::pair<const char*, const flash_tensor*>> all = ts;
  if (A.lse.data != nullptr) all.push_back({"lse", &A.lse});
  for (const auto& [n, t] : all)
    if (!a.contains(t->data, span_bytes(t->shape, t->strides, t->ndim == 3 ? 3 : 4, esize(t->dtype)))) {
      if (r.v != INVALID) *skip = true;
      return r;
    }
  std::vector<Footprint> index_reads;
  for (const auto& [n, p] : {std::pair<const char*, const int32_t*>{"cache_seqlens", A.cache_seqlens}, {"cache_batch_idx", A.cache_batch_idx}}) {
    if (p == nullptr) continue;
    if (!a.contains(p, static_cast<uint64_t>(v->batch) * 4)) return *skip = true, r;
    std::vector<int64_t> e(v->batch);
    for (int64_t b = 0; b < v->batch; ++b) e[b] = b;
    index_reads.push_back(int32_footprint(n, p, std::move(e)));
  }
  if (v->paged && table_ok) {
    const __int128 entries = static_cast<__int128>(v->batch - 1) * v->bt_stride + A.max_pages_per_seq;
    if (entries > (1 << 24) || !a.contains(A.block_table, static_cast<uint64_t>(entries) * 4)) return *skip = true, r;
    std::vector<int64_t> e;
    for (int64_t b = 0; b < v->batch; ++b)
      for (int64_t j = 0; j < A.max_pages_per_seq; ++j) e.push_back(b * v->bt_stride + j);
    index_reads.push_back(int32_footprint("block_table", A.block_table, std::move(e)));
  }
  // An array over the argument struct: the library writes algorithm_used and num_splits_used there; out of scope.
  std::vector<std::pair<const void*, uint64_t>> ranges;
  for (const auto& [n, t] : all) ranges.push_back({t->data, static_cast<uint64_t>(span_bytes(t->shape, t->strides, t->ndim == 3 ? 3 : 4, esize(t->dtype)))});
  for (const Footprint& f : index_reads) ranges.push_back({f.base, f.span});
  if (A.workspace != nullptr) ranges.push_back({A.workspace, A.workspace_size});
  for (const auto& [p, n] : ranges)
    if (meets(p, n, &A, sizeof A)) {
      if (r.v != INVALID) *skip = true;
      return r;
    }
  if (A.workspace != nullptr && !a.contains(A.workspace, A.workspace_size)) {
    if (r.v != INVALID) *skip = true;
    return r;
  }

  // The index arrays' entries (flash.h: checked element by element before anything is written).
  if (A.cache_seqlens != nullptr && (!v->paged || (table_ok && A.cache_batch_idx == nullptr))) {
    const int64_t cap = v->paged ? int64_t{A.max_pages_per_seq} * v->len : v->len;
    bool ok = true;
    for (int64_t b = 0; b < v->batch; ++b) {
      const int64_t n = A.cache_seqlens[b], L = n + (v->append ? v->sn : 0);
      v->n.push_back(n);
      if (n < 0) { r.invalid("cache_seqlens[" + std::to_string(b) + "] negative"); ok = false; continue; }
      if (L > cap) { r.invalid("cache_seqlens[" + std::to_string(b) + "]: L_i past the capacity"); ok = false; continue; }
      if (v->paged) {
        for (int64_t j = 0; j < (L + v->len - 1) / v->len; ++j) {
          const int64_t page = A.block_table[b * v->bt_stride + j];
          if (page < 0 || page >= v->rows) { r.invalid("block_table entry used out of range"); ok = false; break; }
        }
      } else if (A.cache_batch_idx != nullptr && (A.cache_batch_idx[b] < 0 || A.cache_batch_idx[b] >= v->rows)) {
        r.invalid("cache_batch_idx entry out of range");
        ok = false;
      }
    }
    v->indices_ok = ok;
    if (ok && v->append) {
      // Slots as one number; a sequence's appended ones and read ones.
      const auto key = [&](int64_t b, int64_t t) { const auto [row, pos] = kv_slot(A, *v, b, t); return row * v->len + pos; };
      std::vector<std::pair<int64_t, int64_t>> written;  // (slot, sequence)
      for (int64_t b = 0; b < v->batch; ++b)
        for (int64_t t = v->n[b]; t < v->n[b] + v->sn; ++t) written.push_back({key(b, t), b});
      std::sort(written.begin(), written.end());
      for (size_t i = 1; i < written.size(); ++i)
        if (written[i].first == written[i - 1].first) {
          if (written[i].second != written[i - 1].second) r.invalid("two sequences append to one cache slot");
          else r.unsure();  // one sequence appending twice to one slot (a page twice in its row): flash.h does not say
        }
      for (int64_t b = 0; b < v->batch; ++b)
        for (int64_t t = 0; t < v->n[b]; ++t) {
          auto it = std::lower_bound(written.begin(), written.end(), std::make_pair(key(b, t), int64_t{-1}));
          for (; it != written.end() && it->first == key(b, t); ++it)
            if (it->second != b) r.invalid("a sequence appends to a cache slot another sequence reads");
        }
      // flash.h's words are "a cache row another sequence appends to or reads": rows (pages) shared without a slot
      // in common are the library's to take or refuse.
      std::vector<std::vector<int64_t>> app(v->batch), touch(v->batch);
      for (int64_t b = 0; b < v->batch; ++b)
        for (int64_t t = 0; t < v->n[b] + v->sn; ++t) (t >= v->n[b] ? app : touch)[b].push_back(kv_slot(A, *v, b, t).first);
      for (int64_t b = 0; b < v->batch; ++b)
        for (int64_t b2 = 0; b2 < v->batch; ++b2)
          if (b2 != b)
            for (int64_t row : app[b])
              if (std::count(app[b2].begin(), app[b2].end(), row) || std::count(touch[b2].begin(), touch[b2].end(), row)) r.unsure();
    }
  }

  // Overlaps: o, lse, the workspace and (appending) the caches are written; q, k_new, v_new (or the caches) and the
  // index arrays are read.
  std::vector<Footprint> reads = index_reads, writes;
  reads.push_back(tensor_footprint("q", q, 4));
  if (v->append) {
    reads.push_back(tensor_footprint("k_new", A.k_new, 4));
    reads.push_back(tensor_footprint("v_new", A.v_new, 4));
    for (const auto& [n, t] : {std::pair<const char*, const flash_tensor*>{"k_cache", &kc}, {"v_cache", &vc}}) {
      writes.push_back(tensor_footprint(n, *t, 4));
      output_layout_rule(r, writes.back(), *t, 4, false);  // only the appended slots are written: collisions elsewhere are no race
    }
  } else {
    reads.push_back(tensor_footprint("k_cache", kc, 4));
    reads.push_back(tensor_footprint("v_cache", vc, 4));
  }
  writes.push_back(tensor_footprint("o", o, 4));
  output_layout_rule(r, writes.back(), o, 4, true);
  if (A.lse.data != nullptr) {
    writes.push_back(tensor_footprint("lse", A.lse, 3));
    output_layout_rule(r, writes.back(), A.lse, 3, true);
  }
  pairwise_overlaps(r, a, writes, reads);
  // The workspace: written too, so flash.h's CONVENTIONS forbid it to overlap any array of the call.
  if (A.workspace != nullptr && A.workspace_size > 0) {
    const Footprint w = bytes_footprint("workspace", A.workspace, A.workspace_size);
    Rules wr;
    for (const Footprint& x : reads) overlap_rule(wr, a, w, x);
    for (const Footprint& x : writes) overlap_rule(wr, a, w, x);
    if (wr.v == INVALID) r.invalid(wr.why);
    if (wr.v == UNSURE) r.unsure();
  }
  return r;
}

// ---- flash_fwd_kvcache: the reference --------------------------------------------------------------------------
struct KvExpected {
  bool comparable = true;
  std::vector<Ref> ref;                    // per sequence (batch 1)
  std::vector<double> tol_o, rel;          // per sequence
};

KvExpected expect_kvcache(const flash_kvcache_args& A, const KvView& v) {
  KvExpected x;
  const flash_tensor &q = A.q, &kc = A.k_cache, &vc = A.v_cache;
  // Appended slots -> (sequence, row of k_new): what the cache holds there after step 1.
  std::vector<std::pair<int64_t, std::pair<int64_t, int64_t>>> app;
  if (v.append)
    for (int64_t b = 0; b < v.batch; ++b)
      for (int64_t r = 0; r < v.sn; ++r) {
        const auto [row, pos] = kv_slot(A, v, b, v.n[b] + r);
        app.push_back({row * v.len + pos, {b, r}});
      }
  std::sort(app.begin(), app.end());
  const double scale = A.softmax_scale != 0.0f ? A.softmax_scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(v.d)));
  auto ok = [&](double y) { if (!(std::fabs(y) <= 64.0)) x.comparable = false; return y; };
  for (int64_t b = 0; b < v.batch; ++b) {
    const int64_t L = v.n[b] + (v.append ? v.sn : 0);
    Dense Q(v.sn, v.hq, v.d), K(L, v.hkv, v.d), V(L, v.hkv, v.d);
    double mq = 0, mk = 0, mv = 0;
    for (int64_t i = 0; i < v.sn; ++i)
      for (int64_t h = 0; h < v.hq; ++h)
        for (int64_t e = 0; e < v.d; ++e) mq = std::max(mq, std::fabs(Q.row(0, i, h)[e] = ok(at(q, b, i, h, e))));
    for (int64_t t = 0; t < L; ++t) {
      const auto [row, pos] = kv_slot(A, v, b, t);
      auto it = std::lower_bound(app.begin(), app.end(), std::make_pair(row * v.len + pos, std::make_pair(int64_t{-1}, int64_t{-1})));
      const bool appended = it != app.end() && it->first == row * v.len + pos;
      for (int64_t h = 0; h < v.hkv; ++h)
        for (int64_t e = 0; e < v.d; ++e) {
          const double kx = appended ? at(A.k_new, it->second.first, it->second.second, h, e) : at(kc, row, pos, h, e);
          const double vx = appended ? at(A.v_new, it->second.first, it->second.second, h, e) : at(vc, row, pos, h, e);
          mk = std::max(mk, std::fabs(K.row(0, t, h)[e] = ok(kx)));
          mv = std::max(mv, std::fabs(V.row(0, t, h)[e] = ok(vx)));
        }
    }
    if (!x.comparable) return x;
    Problem p{1, v.sn, L, v.hq, v.hkv, v.d, static_cast<double>(static_cast<float>(scale)), A.window_left,
              A.causal ? 0 : A.window_right, L - v.sn, nullptr};
    x.ref.push_back(forward_ref_dense(p, Q, K, V));
    const double u = 0x1p-24, dots = v.d * mq * mk * std::fabs(p.scale);
    const double rel = 64 * u * (1 + x.ref.back().smax + v.d + dots) + 8 * u * L;
    x.rel.push_back(rel);
    x.tol_o.push_back(mv * (4 * eps_of(A.o.dtype) + 4 * rel) + subnormal_of(A.o.dtype) + 1e-30);
  }
  return x;
}

void check_kvcache(const flash_kvcache_args& A, const KvView& v, const KvExpected& x) {
  const double u = 0x1p-24;
  for (int64_t b = 0; b < v.batch; ++b) {
    const Ref& r = x.ref[b];
    for (int64_t i = 0; i < v.sn; ++i)
      for (int64_t h = 0; h < v.hq; ++h) {
        const std::string where = "b" + std::to_string(b) + " i" + std::to_string(i) + " h" + std::to_string(h);
        for (int64_t e = 0; e < v.d; ++e)
          compare("o", load(ptr(A.o, b, i, h, e), A.o.dtype), r.o[(i * v.hq + h) * v.d + e], x.tol_o[b], where + " e" + std::to_string(e));
        if (A.lse.data) {
          float got;
          std::memcpy(&got, lse_ptr(A.lse, b, h, i), 4);
          const double want = r.lse[h * v.sn + i];
          compare("lse", got, std::isinf(want) ? want : static_cast<float>(want),
                  x.rel[b] * (1 + std::fabs(want)) + 4 * u * std::fabs(want), where);
        }
      }
  }
}

// ---- flash_fwd_kvcache: the input -----------------------------------------------------------------------------
std::string describe_kvcache(Op op, const flash_kvcache_args& A, const Arena& a) {
  std::string s = op == KVC ? "flash_fwd_kvcache" : "flash_fwd_kvcache_workspace_size";
  s += " struct_size " + std::to_string(A.struct_size);
  s += tensor_words("q", A.q) + tensor_words("k_cache", A.k_cache) + tensor_words("v_cache", A.v_cache) +
       tensor_words("k_new", A.k_new) + tensor_words("v_new", A.v_new) + tensor_words("o", A.o) + tensor_words("lse", A.lse);
  const int64_t b = A.q.shape[0];
  s += int32_words("cache_seqlens", A.cache_seqlens, b, a) + int32_words("cache_batch_idx", A.cache_batch_idx, b, a);
  const int64_t bs = A.block_table_stride ? A.block_table_stride : A.max_pages_per_seq;
  s += " block_table_stride " + std::to_string(A.block_table_stride) + " max_pages_per_seq " + std::to_string(A.max_pages_per_seq);
  s += int32_words("block_table", A.block_table, b >= 1 && b < 64 && bs >= 0 && bs < 64 ? (b - 1) * bs + A.max_pages_per_seq : -1, a);
  s += " scale " + num_words(A.softmax_scale) + " causal " + std::to_string(A.causal) + " window (" +
       std::to_string(A.window_left) + ", " + std::to_string(A.window_right) + ") num_splits " + std::to_string(A.num_splits) +
       " algo " + std::to_string(A.algorithm) + " flags " + std::to_string(A.flags) + " algorithm_used " +
       std::to_string(A.algorithm_used);
  if (A.workspace) s += " workspace " + std::to_string(A.workspace_size) + " bytes at arena offset " + std::to_string(a.offset(A.workspace));
  return s;
}

// The mutations: what callers of flash_fwd_kvcache get wrong.
void mutate_kvcache(FuzzedDataProvider& in, flash_kvcache_args& A, Arena& a, const flash_tensor& k_new, const flash_tensor& v_new) {
  flash_tensor* ts[] = {&A.q, &A.k_cache, &A.v_cache, &A.k_new, &A.v_new, &A.o, &A.lse};
  const std::vector<const void*> onto = {A.q.data, A.k_cache.data, A.v_cache.data, k_new.data, v_new.data, A.o.data,
                                         A.lse.data, A.cache_seqlens, A.cache_batch_idx, A.block_table, A.workspace};
  switch (in.ConsumeIntegralInRange(0, 8)) {
    case 0:
    case 1: mutate_tensor_onto(in, *ts[in.ConsumeIntegralInRange(0, 6)], a, onto); break;
    case 2:
      switch (in.ConsumeIntegralInRange(0, 6)) {
        case 0: A.softmax_scale = interesting_scale(in); break;
        case 1: A.causal = static_cast<int32_t>(interesting_int(in)); break;
        case 2: A.window_left = in.ConsumeBool() ? static_cast<int32_t>(interesting_int(in)) : in.ConsumeIntegralInRange(-2, 8); break;
        case 3: A.window_right = in.ConsumeBool() ? static_cast<int32_t>(interesting_int(in)) : in.ConsumeIntegralInRange(-2, 8); break;
        case 4: A.num_splits = in.ConsumeBool() ? static_cast<int32_t>(interesting_int(in)) : in.ConsumeIntegralInRange(-1, 12); break;
        case 5: A.algorithm = in.ConsumeIntegralInRange(-2, 7); break;
        case 6: A.flags = in.ConsumeBool() ? 1u : in.ConsumeIntegral<uint32_t>(); break;
      }
      break;
    case 3:
      switch (in.ConsumeIntegralInRange(0, 2)) {
        case 0: A.struct_size = in.ConsumeIntegralInRange<size_t>(0, sizeof A + 16); break;
        case 1: A.algorithm_used = 0; break;
        case 2: {  // zero-filled with struct_size set, the tensors and index arrays the caller needs set (window (0, 0))
          const flash_kvcache_args keep = A;
          std::memset(static_cast<void*>(&A), 0, sizeof A);
          A.struct_size = sizeof A;
          A.q = keep.q, A.k_cache = keep.k_cache, A.v_cache = keep.v_cache, A.k_new = keep.k_new, A.v_new = keep.v_new;
          A.o = keep.o, A.lse = keep.lse, A.cache_seqlens = keep.cache_seqlens, A.cache_batch_idx = keep.cache_batch_idx;
          A.block_table = keep.block_table, A.block_table_stride = keep.block_table_stride, A.max_pages_per_seq = keep.max_pages_per_seq;
          break;
        }
      }
      break;
    case 4: {  // an index array's pointer
      const int32_t** p = in.ConsumeIntegralInRange(0, 2) == 0 ? &A.cache_seqlens : in.ConsumeBool() ? &A.cache_batch_idx : &A.block_table;
      switch (in.ConsumeIntegralInRange(0, 2)) {
        case 0: *p = nullptr; break;  // (block_table NULL: the paged cache read as a contiguous one)
        case 1: *p = int32_onto(in, a, onto, *p); break;
        case 2:  // cache_batch_idx and block_table together
          if (p == &A.cache_batch_idx && A.cache_batch_idx == nullptr) A.cache_batch_idx = A.cache_seqlens;
          else if (A.block_table == nullptr) A.block_table = A.cache_seqlens;
          break;
      }
      break;
    }
    case 5: {  // an index array's entry (the arrays are the fuzzer's own: write through them, inside the arena)
      int32_t* p = const_cast<int32_t*>(in.ConsumeIntegralInRange(0, 2) == 0 ? A.cache_seqlens : in.ConsumeBool() ? A.cache_batch_idx : A.block_table);
      if (p == nullptr) break;
      int32_t* e = p + in.ConsumeIntegralInRange(0, 11);
      if (!a.contains(e, 4)) break;
      *e = in.ConsumeBool() ? static_cast<int32_t>(interesting_int(in)) : in.ConsumeIntegralInRange(-2, 12);
      break;
    }
    case 6:  // the paged geometry
      if (in.ConsumeBool()) A.block_table_stride = in.ConsumeBool() ? interesting_int(in) : in.ConsumeIntegralInRange<int64_t>(-1, 8);
      else A.max_pages_per_seq = static_cast<int32_t>(in.ConsumeBool() ? interesting_int(in) : int64_t{A.max_pages_per_seq} + in.ConsumeIntegralInRange(-2, 2));
      break;
    case 7:  // the append: one of the pair, none, or both again
      switch (in.ConsumeIntegralInRange(0, 3)) {
        case 0: A.k_new.data = nullptr; break;
        case 1: A.v_new.data = nullptr; break;
        case 2: A.k_new.data = nullptr, A.v_new.data = nullptr; break;
        case 3: A.k_new = k_new, A.v_new = v_new; break;
      }
      break;
    case 8:  // the workspace: onto an array, misaligned, an odd size
      switch (in.ConsumeIntegralInRange(0, 2)) {
        case 0: {
          const void* w = onto[in.ConsumeIntegralInRange<size_t>(0, onto.size() - 1)];
          if (w) A.workspace = const_cast<void*>(w), A.workspace_size = in.ConsumeIntegralInRange<size_t>(1, 4096);
          break;
        }
        case 1: if (A.workspace) A.workspace = static_cast<uint8_t*>(A.workspace) + in.ConsumeIntegralInRange(1, 8); break;
        case 2: A.workspace_size = in.ConsumeIntegralInRange<size_t>(0, 1 << 16); break;
      }
      break;
  }
}

int run_kvcache(FuzzedDataProvider& in, Op op) {
  const int32_t dtype = in.ConsumeIntegralInRange(1, 3);
  // Mostly tiny problems; sometimes a cache past one 64-key block, or past 64 new rows (chunked prefill).
  const bool big = in.ConsumeIntegralInRange(0, 31) == 0;
  const int64_t batch = in.ConsumeIntegralInRange(1, 3);
  const int64_t sn = big && in.ConsumeBool() ? in.ConsumeIntegralInRange(60, 70) : in.ConsumeIntegralInRange(1, 4);
  const int64_t hkv = in.ConsumeIntegralInRange(1, 2), hq = hkv * (big ? 1 : in.ConsumeIntegralInRange(1, 3));
  const int64_t d = big ? 8 : 8 * in.ConsumeIntegralInRange(1, 4);
  const bool append = in.ConsumeBool(), paged = in.ConsumeBool();
  int64_t rows, len, maxp = 0, bt_stride = 0;
  bool want_idx = false;
  if (paged) {
    len = big ? in.ConsumeIntegralInRange(16, 80) : in.ConsumeIntegralInRange(1, 6);  // page_size
    maxp = in.ConsumeIntegralInRange(1, 5);
    rows = in.ConsumeIntegralInRange(1, 10);  // num_pages
    switch (in.ConsumeIntegralInRange(0, 5)) {
      case 0: bt_stride = maxp + in.ConsumeIntegralInRange(1, 3); break;  // padded rows
      case 1: bt_stride = in.ConsumeIntegralInRange<int64_t>(1, maxp); break;  // rows overlapping (or exactly maxp)
      default: bt_stride = 0; break;  // the default: max_pages_per_seq
    }
  } else {
    rows = in.ConsumeIntegralInRange(1, 4);  // batch_cache
    len = big ? in.ConsumeIntegralInRange(60, 200) : in.ConsumeIntegralInRange(1, 12);  // max_len
    want_idx = in.ConsumeBool();
  }
  const double mag = in.ConsumeBool() ? 1.0 : 4.0;
  uint64_t rng = in.ConsumeIntegral<uint64_t>();
  const int64_t cap = paged ? maxp * len : len, room = std::max<int64_t>(0, cap - (append ? sn : 0));
  const int64_t bs = bt_stride ? bt_stride : maxp, table_entries = paged ? (batch - 1) * bs + maxp : 0;

  // Plan the tensors: q, k_cache, v_cache, k_new, v_new, o, lse.
  const int64_t qs[4] = {batch, sn, hq, d}, cs[4] = {rows, len, hkv, d}, ns[4] = {batch, sn, hkv, d}, ls[4] = {batch, hq, sn, 0};
  const int64_t* shapes[7] = {qs, cs, cs, ns, ns, qs, ls};
  flash_tensor plans[7];
  size_t gaps[7], total = sizeof(flash_kvcache_args) + 64 + 3 * 32 + static_cast<size_t>(2 * batch + table_entries) * 4 + 64;
  for (int i = 0; i < 7; ++i) {
    plans[i] = plan_tensor(in, shapes[i], i == 6 ? 3 : 4, i == 6 ? FLASH_DTYPE_FP32 : dtype, &gaps[i]);
    total += static_cast<size_t>(span_bytes(plans[i].shape, plans[i].strides, plans[i].ndim, esize(plans[i].dtype))) + gaps[i] + 8;
  }
  // num_splits: mostly few (the workspace then holds splits x rows of partial O and LSE).
  int32_t num_splits;
  switch (in.ConsumeIntegralInRange(0, 7)) {
    case 0: case 1: num_splits = 0; break;
    case 2: num_splits = 1; break;
    case 7: num_splits = in.ConsumeBool() ? 256 : in.ConsumeIntegralInRange(9, 40); break;
    default: num_splits = in.ConsumeIntegralInRange(2, 8); break;
  }
  const bool want_ws = in.ConsumeIntegralInRange(0, 2) == 0 && num_splits <= 16;
  if (want_ws) total += static_cast<size_t>(std::max(num_splits, 1) * batch * hq * sn * (d + 1) * 8) + 64 + 64 + 16;
  total += 16;  // the query's out parameter

  Arena a(total);
  auto* A = reinterpret_cast<flash_kvcache_args*>(a.place(sizeof(flash_kvcache_args), 8, 0));
  flash_kvcache_args_init(A);
  flash_tensor* ts[7] = {&A->q, &A->k_cache, &A->v_cache, &A->k_new, &A->v_new, &A->o, &A->lse};
  for (int i = 0; i < 7; ++i) {
    *ts[i] = plans[i];
    if (!place_tensor(a, *ts[i], gaps[i], i < 5, rng, mag)) violation("fuzzer bug", "arena too small for the kvcache tensors");
  }
  const flash_tensor k_new = A->k_new, v_new = A->v_new;
  if (!append) A->k_new.data = nullptr, A->v_new.data = nullptr;
  if (in.ConsumeBool()) A->lse.data = nullptr;

  // The index arrays, from the input (so the fuzzer steers them): mostly in range, sometimes one past, negative,
  // a row or page shared between sequences (two appending to one slot, one appending to a slot another reads).
  int32_t* seqlens = reinterpret_cast<int32_t*>(a.place(batch * 4, 4, in.ConsumeIntegralInRange<size_t>(0, 32)));
  if (!seqlens) violation("fuzzer bug", "arena too small for cache_seqlens");
  for (int64_t b = 0; b < batch; ++b) {
    const int m = in.ConsumeIntegralInRange(0, 15);
    seqlens[b] = m <= 10 ? static_cast<int32_t>(in.ConsumeIntegralInRange<int64_t>(0, room)) : m == 11 ? static_cast<int32_t>(room)
               : m == 12 ? 0 : m == 13 ? static_cast<int32_t>(room + 1) : m == 14 ? -1 : static_cast<int32_t>(interesting_int(in));
  }
  A->cache_seqlens = seqlens;
  if (want_idx) {
    int32_t* idx = reinterpret_cast<int32_t*>(a.place(batch * 4, 4, in.ConsumeIntegralInRange<size_t>(0, 32)));
    if (!idx) violation("fuzzer bug", "arena too small for cache_batch_idx");
    std::vector<int32_t> perm(rows);
    for (int64_t i = 0; i < rows; ++i) perm[i] = static_cast<int32_t>(i);
    for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[splitmix(rng) % i]);
    for (int64_t b = 0; b < batch; ++b) {
      const int m = in.ConsumeIntegralInRange(0, 15);
      idx[b] = m <= 11 ? perm[b % rows] : m == 12 ? perm[(b + 1) % rows] /* shared with the next */ : m == 13 ? static_cast<int32_t>(rows)
             : m == 14 ? -1 : static_cast<int32_t>(interesting_int(in));
    }
    A->cache_batch_idx = idx;
  }
  if (paged) {
    int32_t* table = reinterpret_cast<int32_t*>(a.place(table_entries * 4, 4, in.ConsumeIntegralInRange<size_t>(0, 32)));
    if (!table) violation("fuzzer bug", "arena too small for block_table");
    for (int64_t i = 0; i < table_entries; ++i) table[i] = static_cast<int32_t>(splitmix(rng) % (rows + 4)) - 2;  // padding: never read
    std::vector<int32_t> pool;
    size_t next = 0;
    auto fresh_page = [&]() {  // distinct pages while they last, then a reshuffled pool (pages shared)
      if (next == pool.size()) {
        pool.resize(rows);
        for (int64_t i = 0; i < rows; ++i) pool[i] = static_cast<int32_t>(i);
        for (size_t i = pool.size(); i > 1; --i) std::swap(pool[i - 1], pool[splitmix(rng) % i]);
        next = 0;
      }
      return pool[next++];
    };
    for (int64_t b = 0; b < batch; ++b) {
      const int share = in.ConsumeIntegralInRange(0, 7);
      for (int64_t j = 0; j < maxp; ++j) {
        int32_t page = fresh_page();
        if (b > 0 && (share == 0 || (share == 1 && j == 0))) page = table[(b - 1) * bs + j];  // a prefix shared with b - 1
        if (in.ConsumeIntegralInRange(0, 31) == 0)
          page = in.ConsumeBool() ? static_cast<int32_t>(in.ConsumeIntegralInRange<int64_t>(-2, rows + 1)) : static_cast<int32_t>(interesting_int(in));
        table[b * bs + j] = page;
      }
    }
    A->block_table = table;
    A->block_table_stride = bt_stride;
    A->max_pages_per_seq = static_cast<int32_t>(maxp);
  }
  // Options.
  A->causal = in.ConsumeBool();
  if (in.ConsumeBool()) {
    A->window_left = in.ConsumeIntegralInRange(-1, static_cast<int>(std::min<int64_t>(cap, 300)) + 1);
    A->window_right = in.ConsumeIntegralInRange(-1, static_cast<int>(std::min<int64_t>(cap, 300)) + 1);
  }
  A->num_splits = num_splits;
  A->algorithm = in.ConsumeBool() ? FLASH_ALGO_AUTO : FLASH_ALGO_CPU;
  draw_scale(in, &A->softmax_scale);
  if (want_ws) {  // the caller's workspace, sized by the query
    size_t ws = 0;
    if (flash_fwd_kvcache_workspace_size(A, &ws) == FLASH_OK && ws > 0) {
      place_workspace(in, a, ws, &A->workspace, &A->workspace_size);
    }
  }
  size_t* query_out = nullptr;
  if (op == KVC_QUERY) {
    query_out = reinterpret_cast<size_t*>(a.place(sizeof(size_t), 8, 0));
    if (!query_out) return 0;
  }
  const int n_mut = in.ConsumeIntegralInRange(0, 4);
  for (int i = 0; i < n_mut && in.remaining_bytes() > 0; ++i) mutate_kvcache(in, *A, a, k_new, v_new);

  KvView v;
  bool skip = false;
  Rules rules = judge_kvcache(*A, a, &v, &skip);
  // The query's out parameter under an array the call reads (the query writes *bytes = 0 first): flash.h says nothing
  // of an out parameter aliasing an input; out of scope, like an array over the argument struct.
  if (query_out != nullptr && v.fields_ok) {
    const flash_tensor* ts2[] = {&A->q, &A->k_cache, &A->v_cache, &A->k_new, &A->v_new, &A->o, &A->lse};
    for (const flash_tensor* t : ts2)
      if (t->data && meets(query_out, sizeof(size_t), t->data, std::max<int64_t>(0, span_bytes(t->shape, t->strides, t == &A->lse ? 3 : 4, esize(t->dtype)))))
        skip = true;
    const __int128 entries = std::max<__int128>(std::max<__int128>(v.batch, A->max_pages_per_seq), 0) +
                             static_cast<__int128>(std::max<int64_t>(v.batch - 1, 0)) * std::max<int64_t>(v.bt_stride, 0);
    const uint64_t bytes = static_cast<uint64_t>(std::min<__int128>(entries, __int128{1} << 40)) * 4;
    for (const int32_t* p : {A->cache_seqlens, A->cache_batch_idx, A->block_table})
      if (p && meets(query_out, sizeof(size_t), p, bytes)) skip = true;
  }
  if (skip) {
    tally(FAM_KVCACHE, &Tally::skipped);
    return 0;
  }
  // A workspace smaller than what the query says is a documented error too.
  if (rules.v == VALID && A->workspace != nullptr && op == KVC) {
    flash_kvcache_args copy = *A;
    size_t ws = 0;
    if (flash_fwd_kvcache_workspace_size(&copy, &ws) != FLASH_OK) violation("workspace query refused a VALID call", flash_last_error_message());
    if (ws > 0 && A->workspace_size < ws) rules.invalid("workspace smaller than the query says");
  }
  KvExpected expected;
  bool compare_results = false;
  if (rules.v == VALID && op == KVC) {
    expected = expect_kvcache(*A, v);
    compare_results = expected.comparable;
  }

  g_call = describe_kvcache(op, *A, a);
  static std::vector<uint8_t> before, may;
  before.assign(a.mem.begin(), a.mem.end());
  tally(FAM_KVCACHE, &Tally::calls);
  const int32_t status = op == KVC ? flash_fwd_kvcache(A) : flash_fwd_kvcache_workspace_size(A, query_out);

  may.assign(a.mem.size(), 0);
  if (op == KVC_QUERY) {
    mark_bytes(may, a, query_out, sizeof(size_t));  // *bytes = 0 even on failure
  } else if (status == FLASH_OK) {
    mark_bytes(may, a, &A->algorithm_used, 4);
    mark_bytes(may, a, &A->num_splits_used, 4);
    mark_tensor(may, a, A->o, 4);
    mark_tensor(may, a, A->lse, 3);
    if (A->workspace && A->workspace_size) mark_bytes(may, a, A->workspace, A->workspace_size);
    if (v.append && v.indices_ok)  // the appended slots' elements, and nothing else of the caches
      for (int64_t b = 0; b < v.batch; ++b)
        for (int64_t t = v.n[b]; t < v.n[b] + v.sn; ++t) {
          const auto [row, pos] = kv_slot(*A, v, b, t);
          for (int64_t h = 0; h < v.hkv; ++h)
            for (int64_t e = 0; e < v.d; ++e) {
              mark_bytes(may, a, ptr(A->k_cache, row, pos, h, e), esize(A->k_cache.dtype));
              mark_bytes(may, a, ptr(A->v_cache, row, pos, h, e), esize(A->v_cache.dtype));
            }
        }
  }
  check_status(a, before, may, status, rules, FAM_KVCACHE, op == KVC_QUERY);
  if (op == KVC_QUERY || rules.v != VALID) return 0;
  if (A->algorithm_used != FLASH_ALGO_CPU) violation("algorithm_used", std::to_string(A->algorithm_used));
  if (A->num_splits_used < 1 || A->num_splits_used > 256 || (A->num_splits > 0 && A->num_splits_used != A->num_splits))
    violation("num_splits_used", std::to_string(A->num_splits_used) + " for num_splits " + std::to_string(A->num_splits));
  if (v.append)  // step 1: the appended slots hold k_new's and v_new's elements exactly
    for (int64_t b = 0; b < v.batch; ++b)
      for (int64_t r = 0; r < v.sn; ++r) {
        const auto [row, pos] = kv_slot(*A, v, b, v.n[b] + r);
        for (int64_t h = 0; h < v.hkv; ++h)
          for (int64_t e = 0; e < v.d; ++e)
            for (const auto& [cache, src, name] : {std::tuple<const flash_tensor*, const flash_tensor*, const char*>{&A->k_cache, &A->k_new, "k_cache"},
                                                   {&A->v_cache, &A->v_new, "v_cache"}}) {
              const int es = esize(cache->dtype);
              if (std::memcmp(ptr(*cache, row, pos, h, e), before.data() + a.offset(ptr(*src, b, r, h, e)), es) != 0)
                violation("append", std::string(name) + " slot (" + std::to_string(row) + ", " + std::to_string(pos) + ") of sequence " +
                                        std::to_string(b) + " row " + std::to_string(r) + " h" + std::to_string(h) + " e" + std::to_string(e) +
                                        " does not hold the new element");
            }
      }
  if (compare_results) {
    check_kvcache(*A, v, expected);
    tally(FAM_KVCACHE, &Tally::compared);
  }
  return 0;
}

// ---- flash_combine ------------------------------------------------------------------------------------------------
Rules judge_combine(const flash_combine_args& A, const Arena& a, bool* skip) {
  Rules r;
  *skip = false;
  if (A.struct_size < offsetof(flash_combine_args, stream) + sizeof(void*) || A.struct_size > sizeof A) r.invalid("args struct_size");
  if (A.num_parts < 1) r.invalid("num_parts < 1");
  if (A.o_parts == nullptr) r.invalid("o_parts NULL");
  if (A.lse_parts == nullptr) r.invalid("lse_parts NULL");
  std::string why;
  bool fields_ok = true;
  if (!tensor_fields_ok(A.o, 4, &why)) r.invalid("o: " + why), fields_ok = false;
  if (A.lse.data && !tensor_fields_ok(A.lse, 3, &why)) r.invalid("lse: " + why), fields_ok = false;
  if (r.v == INVALID && (A.num_parts < 1 || !A.o_parts || !A.lse_parts)) return r;
  // The descriptor arrays: the library reads num_parts of each first (they must be the caller's memory).
  const uint64_t dbytes = static_cast<uint64_t>(std::max(A.num_parts, 0)) * sizeof(flash_tensor);
  if (!a.contains(A.o_parts, dbytes) || !a.contains(A.lse_parts, dbytes) || addr(A.o_parts) % alignof(flash_tensor) ||
      addr(A.lse_parts) % alignof(flash_tensor))
    return *skip = true, r;
  const flash_tensor& o = A.o;
  for (int32_t s = 0; s < A.num_parts; ++s) {
    const flash_tensor &op = A.o_parts[s], &lp = A.lse_parts[s];
    const std::string on = "o_parts[" + std::to_string(s) + "]", ln = "lse_parts[" + std::to_string(s) + "]";
    if (!tensor_fields_ok(op, 4, &why)) { r.invalid(on + ": " + why), fields_ok = false; continue; }
    if (!tensor_fields_ok(lp, 3, &why)) { r.invalid(ln + ": " + why), fields_ok = false; continue; }
    if (op.dtype != A.o_parts[0].dtype) r.invalid(on + " dtype differs from o_parts[0]'s");
    if (lp.dtype != FLASH_DTYPE_FP32) r.invalid(ln + " not fp32");
    if (fields_ok) {
      for (int i = 0; i < 4; ++i)
        if (op.shape[i] != o.shape[i]) r.invalid(on + " shape");
      if (lp.shape[0] != o.shape[0] || lp.shape[1] != o.shape[2] || lp.shape[2] != o.shape[1]) r.invalid(ln + " shape");
    }
  }
  if (fields_ok && A.lse.data) {
    if (A.lse.dtype != FLASH_DTYPE_FP32) r.invalid("lse not fp32");
    if (A.lse.shape[0] != o.shape[0] || A.lse.shape[1] != o.shape[2] || A.lse.shape[2] != o.shape[1]) r.invalid("lse shape");
  }
  if (!fields_ok) return r;
  // Arrays in the arena; an output over the argument struct or a descriptor array is out of scope.
  std::vector<Footprint> reads, writes;
  for (int32_t s = 0; s < A.num_parts; ++s) {
    reads.push_back(tensor_footprint("o_parts[s]", A.o_parts[s], 4));
    reads.push_back(tensor_footprint("lse_parts[s]", A.lse_parts[s], 3));
  }
  writes.push_back(tensor_footprint("o", o, 4));
  if (A.lse.data) writes.push_back(tensor_footprint("lse", A.lse, 3));
  for (const std::vector<Footprint>* fs : {&reads, &writes})
    for (const Footprint& f : *fs)
      if (!a.contains(f.base, f.span)) {
        if (r.v != INVALID) *skip = true;
        return r;
      }
  for (const Footprint& f : writes)
    if (meets(f.base, f.span, &A, sizeof A) || meets(f.base, f.span, A.o_parts, dbytes) || meets(f.base, f.span, A.lse_parts, dbytes)) {
      if (r.v != INVALID) *skip = true;
      return r;
    }
  output_layout_rule(r, writes[0], o, 4, true);
  if (A.lse.data) output_layout_rule(r, writes[1], A.lse, 3, true);
  pairwise_overlaps(r, a, writes, reads);
  return r;
}

struct CombineExpected {
  bool comparable = true;  // some row is
  std::vector<double> o, lse, tol_o, tol_lse;  // o[((b*s+i)*h+hh)*d+e], tol_o per row; lse[(b*h+hh)*s+i]
  std::vector<char> row_ok;                    // per row (b, i, h): flash.h gives its result
};

// flash.h: M = max_p LSE_p, w_p = exp(LSE_p - M), O = sum_p w_p O_p / sum_p w_p, LSE = M + log(sum_p w_p); a part
// with LSE = -inf contributes nothing (whatever its O holds); every part -inf: O = 0, LSE = -inf. In double.
CombineExpected expect_combine(const flash_combine_args& A) {
  CombineExpected x;
  const int64_t B = A.o.shape[0], S = A.o.shape[1], H = A.o.shape[2], D = A.o.shape[3];
  x.o.assign(B * S * H * D, 0.0), x.lse.assign(B * H * S, -INFINITY), x.tol_o.assign(B * S * H, 0.0), x.tol_lse.assign(B * H * S, 0.0);
  x.row_ok.assign(B * S * H, 1);
  std::vector<double> acc(D);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < S; ++i)
      for (int64_t h = 0; h < H; ++h) {
        char& ok = x.row_ok[(b * S + i) * H + h];
        double m = -INFINITY;
        for (int32_t p = 0; p < A.num_parts; ++p) {
          float l;
          std::memcpy(&l, lse_ptr(A.lse_parts[p], b, h, i), 4);
          if (std::isnan(l) || l == INFINITY) ok = 0;  // flash.h does not say
          m = std::max(m, static_cast<double>(l));
        }
        if (!ok || m == -INFINITY) continue;
        std::fill(acc.begin(), acc.end(), 0.0);
        double sum = 0, mx = 0;
        for (int32_t p = 0; p < A.num_parts; ++p) {
          float l;
          std::memcpy(&l, lse_ptr(A.lse_parts[p], b, h, i), 4);
          if (l == -INFINITY) continue;
          const double w = std::exp(static_cast<double>(l) - m);
          sum += w;
          for (int64_t e = 0; e < D; ++e) {
            const double y = at(A.o_parts[p], b, i, h, e);
            if (!(std::fabs(y) <= 1e30)) ok = 0;  // (a part that saw keys holding NaN, inf or 1e38: another array's bytes)
            mx = std::max(mx, std::fabs(y));
            acc[e] += w * y;
          }
        }
        if (!ok) continue;
        for (int64_t e = 0; e < D; ++e) x.o[((b * S + i) * H + h) * D + e] = acc[e] / sum;
        const double lse = m + std::log(sum);
        x.lse[(b * H + h) * S + i] = lse;
        x.tol_o[(b * S + i) * H + h] = A.num_parts * 0x1p-48 * mx;  // the double sums' order
        x.tol_lse[(b * H + h) * S + i] = 0x1p-22 * std::fabs(lse) + 1e-12 * (1 + std::fabs(m));
      }
  x.comparable = std::count(x.row_ok.begin(), x.row_ok.end(), 1) > 0;
  return x;
}

void check_combine(const flash_combine_args& A, const CombineExpected& x) {
  const int64_t B = A.o.shape[0], S = A.o.shape[1], H = A.o.shape[2], D = A.o.shape[3];
  const int32_t dt = A.o.dtype;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < S; ++i)
      for (int64_t h = 0; h < H; ++h) {
        if (!x.row_ok[(b * S + i) * H + h]) continue;
        const std::string where = "b" + std::to_string(b) + " i" + std::to_string(i) + " h" + std::to_string(h);
        for (int64_t e = 0; e < D; ++e) {
          const double want = x.o[((b * S + i) * H + h) * D + e];
          // O rounded through fp32 to the output dtype: within one unit of each rounding.
          const double tol = 2 * (eps_of(dt) + 0x1p-24) * std::fabs(want) + x.tol_o[(b * S + i) * H + h] + subnormal_of(dt) + 0x1p-149;
          compare("o", load(ptr(A.o, b, i, h, e), dt), want, tol, where + " e" + std::to_string(e), dt);
        }
        if (A.lse.data) {
          float got;
          std::memcpy(&got, lse_ptr(A.lse, b, h, i), 4);
          const double want = x.lse[(b * H + h) * S + i];
          compare("lse", got, std::isinf(want) ? want : static_cast<float>(want), x.tol_lse[(b * H + h) * S + i], where);
        }
      }
}

std::string describe_combine(const flash_combine_args& A, const Arena& a) {
  std::string s = "flash_combine struct_size " + std::to_string(A.struct_size) + " num_parts " + std::to_string(A.num_parts);
  s += tensor_words("o", A.o) + tensor_words("lse", A.lse);
  const int32_t n = std::min(A.num_parts, 16);
  for (int32_t p = 0; p < n; ++p) {
    const std::string on = "o_parts[" + std::to_string(p) + "]", ln = "lse_parts[" + std::to_string(p) + "]";
    if (A.o_parts && a.contains(A.o_parts + p, sizeof(flash_tensor))) s += tensor_words(on.c_str(), A.o_parts[p]);
    if (A.lse_parts && a.contains(A.lse_parts + p, sizeof(flash_tensor))) s += tensor_words(ln.c_str(), A.lse_parts[p]);
  }
  if (!A.o_parts) s += " o_parts NULL";
  if (!A.lse_parts) s += " lse_parts NULL";
  return s;
}

int run_combine(FuzzedDataProvider& in) {
  int32_t P = in.ConsumeIntegralInRange(1, 4);
  if (in.ConsumeIntegralInRange(0, 15) == 0) P = in.ConsumeIntegralInRange(5, 12);
  const int64_t B = in.ConsumeIntegralInRange(1, 2), S = in.ConsumeIntegralInRange(1, 4), H = in.ConsumeIntegralInRange(1, 3);
  const int64_t D = in.ConsumeBool() ? 8 * in.ConsumeIntegralInRange(1, 4) : in.ConsumeIntegralInRange(1, 20);
  const int32_t pdt = in.ConsumeIntegralInRange(1, 3), odt = in.ConsumeIntegralInRange(1, 3);
  const double mag = in.ConsumeBool() ? 1.0 : 4.0;
  uint64_t rng = in.ConsumeIntegral<uint64_t>();
  const int64_t os[4] = {B, S, H, D}, ls[4] = {B, H, S, 0};
  // Plans: o, lse, then each part's O and LSE.
  const int n = 2 + 2 * P;
  std::vector<flash_tensor> plans(n);
  std::vector<size_t> gaps(n);
  const size_t slots = static_cast<size_t>(P) + 2;  // descriptors laid out: two more than num_parts (canary), for num_parts + 1, + 2
  size_t total = sizeof(flash_combine_args) + 64 + 2 * (slots * sizeof(flash_tensor) + 64);
  for (int k = 0; k < n; ++k) {
    const bool is_lse = k % 2 == 1;
    plans[k] = plan_tensor(in, is_lse ? ls : os, is_lse ? 3 : 4, is_lse ? FLASH_DTYPE_FP32 : k == 0 ? odt : pdt, &gaps[k]);
    total += static_cast<size_t>(span_bytes(plans[k].shape, plans[k].strides, plans[k].ndim, esize(plans[k].dtype))) + gaps[k] + 8;
  }
  Arena a(total);
  auto* A = reinterpret_cast<flash_combine_args*>(a.place(sizeof(flash_combine_args), 8, 0));
  flash_combine_args_init(A);
  auto* od = reinterpret_cast<flash_tensor*>(a.place(slots * sizeof(flash_tensor), 8, in.ConsumeIntegralInRange<size_t>(0, 4) * 8));
  auto* ld = reinterpret_cast<flash_tensor*>(a.place(slots * sizeof(flash_tensor), 8, in.ConsumeIntegralInRange<size_t>(0, 4) * 8));
  if (!A || !od || !ld) violation("fuzzer bug", "arena too small for the combine structs");
  A->o = plans[0], A->lse = plans[1];
  if (!place_tensor(a, A->o, gaps[0], false, rng, mag) || !place_tensor(a, A->lse, gaps[1], false, rng, mag))
    violation("fuzzer bug", "arena too small for o");
  if (in.ConsumeBool()) A->lse.data = nullptr;
  for (int32_t p = 0; p < P; ++p) {
    od[p] = plans[2 + 2 * p], ld[p] = plans[3 + 2 * p];
    if (!place_tensor(a, od[p], gaps[2 + 2 * p], true, rng, mag) || !place_tensor(a, ld[p], gaps[3 + 2 * p], false, rng, mag))
      violation("fuzzer bug", "arena too small for the parts");
    // LSE values: ordinary, some rows that saw no key (-inf), far apart (exp underflows), or +inf / NaN.
    const int mode = in.ConsumeIntegralInRange(0, 7);
    const bool nan_o = (mode == 4 || mode == 5) && in.ConsumeBool();  // a part that saw no key contributes nothing, NaN or not
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < S; ++i) {
          const double u01 = static_cast<double>(splitmix(rng) >> 11) * 0x1p-53;
          float l = static_cast<float>(12 * u01 - 6);
          if (mode == 5 || (mode == 4 && (splitmix(rng) & 1))) l = -INFINITY;
          if (mode == 6) l = static_cast<float>((splitmix(rng) & 1 ? 1 : -1) * std::pow(10.0, std::floor(u01 * 31)));
          if (mode == 7) {
            const uint64_t c = splitmix(rng) % 4;
            l = c == 0 ? NAN : c == 1 ? INFINITY : c == 2 ? -INFINITY : l;
          }
          std::memcpy(lse_ptr(ld[p], b, h, i), &l, 4);
          if (nan_o && l == -INFINITY)
            for (int64_t e = 0; e < D; ++e) {  // a quiet NaN of the dtype
              const uint32_t bits = pdt == FLASH_DTYPE_FP32 ? 0x7fc00000u : pdt == FLASH_DTYPE_FP16 ? 0x7e00u : 0x7fc0u;
              std::memcpy(ptr(od[p], b, i, h, e), &bits, esize(pdt));  // (little-endian: the low bytes)
            }
        }
  }
  A->num_parts = P, A->o_parts = od, A->lse_parts = ld;

  const int n_mut = in.ConsumeIntegralInRange(0, 4);
  for (int m = 0; m < n_mut && in.remaining_bytes() > 0; ++m) {
    std::vector<const void*> onto = {A->o.data, A->lse.data};
    for (int32_t p = 0; p < P; ++p) onto.push_back(od[p].data), onto.push_back(ld[p].data);
    onto.push_back(od), onto.push_back(ld);
    switch (in.ConsumeIntegralInRange(0, 6)) {
      case 0:
      case 1: {
        const size_t k = in.ConsumeIntegralInRange<size_t>(0, 2 * P + 1);
        flash_tensor& t = k == 0 ? A->o : k == 1 ? A->lse : k % 2 == 0 ? od[(k - 2) / 2] : ld[(k - 2) / 2];
        mutate_tensor_onto(in, t, a, onto);
        break;
      }
      case 2: A->num_parts = in.ConsumeBool() ? static_cast<int32_t>(interesting_int(in)) : in.ConsumeIntegralInRange(-1, P + 2); break;
      case 3:
        switch (in.ConsumeIntegralInRange(0, 3)) {
          case 0: A->o_parts = nullptr; break;
          case 1: A->lse_parts = nullptr; break;
          case 2: A->lse_parts = A->o_parts; break;  // 4-d O descriptors where the 3-d LSE ones belong
          case 3: A->o_parts = od + 1, A->lse_parts = ld + 1; break;  // shifted by one: the canary descriptor at the end
        }
        break;
      case 4: A->struct_size = in.ConsumeIntegralInRange<size_t>(0, sizeof *A + 16); break;
      case 5: A->lse.data = nullptr; break;
      case 6: {  // one dtype changed: a part's (INVALID: one dtype for all parts) or o's (any dtype; its span changes)
        const size_t k = in.ConsumeIntegralInRange<size_t>(0, P);
        (k == 0 ? A->o : od[k - 1]).dtype = in.ConsumeIntegralInRange(1, 3);
        break;
      }
    }
  }

  bool skip = false;
  const Rules rules = judge_combine(*A, a, &skip);
  if (skip) {
    tally(FAM_COMBINE, &Tally::skipped);
    return 0;
  }
  CombineExpected expected;
  if (rules.v == VALID) expected = expect_combine(*A);
  g_call = describe_combine(*A, a);
  static std::vector<uint8_t> before, may;
  before.assign(a.mem.begin(), a.mem.end());
  tally(FAM_COMBINE, &Tally::calls);
  const int32_t status = flash_combine(A);
  may.assign(a.mem.size(), 0);
  if (status == FLASH_OK) {
    mark_tensor(may, a, A->o, 4);
    mark_tensor(may, a, A->lse, 3);
  }
  check_status(a, before, may, status, rules, FAM_COMBINE, false);
  if (rules.v == VALID && expected.comparable) {
    check_combine(*A, expected);
    tally(FAM_COMBINE, &Tally::compared);
  }
  return 0;
}

// =================================================================================================================
// ABI 1.3: packed variable-length batches of flash_fwd and flash_bwd (and their workspace queries), selector 7.
//
// The same scheme: one arena holds the argument struct, every tensor ([total, heads, head_dim]; lse [heads, total_q]),
// the index arrays cu_seqlens_q, cu_seqlens_k and seqused_k (each with spare entries after the real ones, so that a
// varlen_batch a few past the real one still reads the caller's memory), a block mask (to set where flash.h forbids
// one) and the caller's workspace. The lengths come from the input -- zero-length sequences, rows past the last
// sequence, seqused_k, max_seqlen_* above the longest -- then the mutations callers get wrong: offsets not starting at
// 0, decreasing, past the tensors, max_seqlen_* too small or negative, varlen fields given without cu_seqlens_q, an
// output or the workspace over an offsets array, a struct of the 1.2 layout... The oracle applies flash.h's rules
// (reading the arguments as the library does: fields past struct_size hold their defaults), and after the call
//   - failed:   the arena is bitwise unchanged;
//   - FLASH_OK: nothing changed but the sequences' rows of the outputs (o, lse, dq: rows below cu_seqlens_q[n]; dk,
//               dv: rows below cu_seqlens_k[n]), algorithm_used and the workspace; for VALID calls every sequence's
//               rows are bitwise those of the dense call of batch 1 it is (flash.h: "exactly as a dense call of batch
//               1 with seqlen_q_i and seqlen_k_i would") -- the library's own flash_fwd / flash_bwd on 4-d views of its
//               rows with the algorithm that ran, whose results the dense ops check against the fp64 reference -- and
//               flash.h's values where no dense call exists: O = 0, LSE = -inf and dq = 0 for a sequence without
//               keys, dk = dv = 0 for keys no query sees (past seqused_k, or in a sequence without queries).
// =================================================================================================================

// A tensor of a varlen call by role: like 0 [total_q, hq, d], 1 [total_k, hkv, d], 2 lse [hq, total_q].
struct VT {
  const char* name;
  flash_tensor* t;
  int like;
  bool input;
  int ndim() const { return like == 2 ? 2 : 3; }
};
std::vector<VT> var_tensors(flash_fwd_args& A) {
  return {{"q", &A.q, 0, true}, {"k", &A.k, 1, true}, {"v", &A.v, 1, true}, {"o", &A.o, 0, false}, {"lse", &A.lse, 2, false}};
}
std::vector<VT> var_tensors(flash_bwd_args& A) {
  return {{"q", &A.q, 0, true},    {"k", &A.k, 1, true},    {"v", &A.v, 1, true},    {"o", &A.o, 0, true},  {"d_o", &A.d_o, 0, true},
          {"lse", &A.lse, 2, true}, {"dq", &A.dq, 0, false}, {"dk", &A.dk, 1, false}, {"dv", &A.dv, 1, false}};
}
template <class Args>
constexpr bool is_bwd() { return std::is_same_v<Args, flash_bwd_args>; }

// A packed tensor ([rows, heads, head_dim], or lse [heads, rows]) row-major or heads-outer ([h, rows, d] in memory, as
// a transposed [b, h, s, d] tensor gives), with padding between rows and heads, and the gap to leave before it.
flash_tensor plan_packed(FuzzedDataProvider& in, const int64_t* shape, int ndim, int32_t dtype, size_t* gap) {
  flash_tensor t;
  std::memset(&t, 0, sizeof t);
  t.dtype = dtype, t.device_type = FLASH_DEVICE_CPU, t.device_id = 0, t.ndim = ndim;
  for (int i = 0; i < ndim; ++i) t.shape[i] = shape[i];
  int order[3] = {0, 1, 2};  // memory order, outermost first
  if (in.ConsumeBool()) std::swap(order[0], order[1]);
  int64_t stride = 1;
  for (int k = ndim - 1; k >= 0; --k) {
    const int d = order[k];
    t.strides[d] = stride;
    stride = stride * shape[d] + (k < ndim - 1 ? in.ConsumeIntegralInRange<int64_t>(0, 3) * (in.ConsumeBool() ? 8 : 1) : 0);
  }
  *gap = in.ConsumeIntegralInRange<size_t>(0, 48);
  return t;
}

// What the oracle read of the index arrays (contents), for the write set and the comparison.
struct VarView {
  bool contents = false;   // the index arrays lie in the arena and hold offsets flash.h accepts
  int64_t n = 0;           // varlen_batch
  std::vector<int64_t> cq, ck, lk;  // cu_seqlens_q, cu_seqlens_k (n + 1 each); keys used by each sequence
};

int64_t rows_of(const VarView& v, int like) { return like == 1 ? v.ck[v.n] : v.cq[v.n]; }

template <class Args>
Rules judge_varlen(const Args& user, const Arena& a, const void* query_out, VarView* v, bool* skip) {
  Rules r;
  *skip = false;
  if (user.struct_size < offsetof(Args, workspace_size) + sizeof(size_t) || user.struct_size > sizeof(Args)) {
    r.invalid("args struct_size");
    return r;
  }
  Args A = effective_args(user);
  std::vector<VT> ts = var_tensors(A);
  if (A.algorithm_used == 0) r.invalid("uninitialised args (algorithm_used 0)");
  if (A.reserved_1_3 != 0) r.invalid("reserved_1_3 not 0");
  if (A.cu_seqlens_q == nullptr) {  // a dense call (also the 1.2 layout): with packed tensors, refused
    if (A.cu_seqlens_k != nullptr) r.invalid("cu_seqlens_k without cu_seqlens_q");
    if (A.seqused_k != nullptr) r.invalid("seqused_k without cu_seqlens_q");
    if (A.varlen_batch != 0 || A.max_seqlen_q != 0 || A.max_seqlen_k != 0) r.invalid("varlen_batch or max_seqlen_* without cu_seqlens_q");
    bool dense_ndims = true;
    for (const VT& x : ts)
      if (x.t->data != nullptr || x.input || strcmp(x.name, "lse")) dense_ndims &= x.t->ndim == x.ndim() + 1;
    if (!dense_ndims) r.invalid("a dense call of packed (3-d) tensors");
    else if (r.v != INVALID) *skip = true;  // a dense call of whatever the mutations left: the dense ops' business
    return r;
  }
  if (A.cu_seqlens_k == nullptr) r.invalid("cu_seqlens_k NULL with cu_seqlens_q");
  if (A.varlen_batch < 1) r.invalid("varlen_batch < 1");
  if (A.max_seqlen_q < 0 || A.max_seqlen_k < 0) r.invalid("max_seqlen_* negative");
  if (addr(A.cu_seqlens_q) % 4 || addr(A.cu_seqlens_k) % 4 || addr(A.seqused_k) % 4) r.invalid("an index array not 4-byte aligned");
  if (A.block_mask != nullptr) r.invalid("block_mask with cu_seqlens_q (unsupported)");

  // Tensors: each one's fields, then dtypes and shapes.
  bool fields_ok = true;
  for (const VT& x : ts) {
    if (!is_bwd<Args>() && !strcmp(x.name, "lse") && x.t->data == nullptr) continue;  // the forward's optional LSE
    std::string why;
    if (!tensor_fields_ok(*x.t, x.ndim(), &why)) r.invalid(std::string(x.name) + ": " + why), fields_ok = false;
    else if (x.like != 2 && x.t->strides[2] != 1 && x.t->shape[2] > 1) r.invalid(std::string(x.name) + ": last dim not contiguous");
  }
  const flash_tensor &q = A.q, &k = A.k;
  if (fields_ok) {
    for (const VT& x : ts) {
      const flash_tensor& t = *x.t;
      if (t.data == nullptr) continue;
      if (x.like == 2) {
        if (t.dtype != FLASH_DTYPE_FP32) r.invalid("lse not fp32");
        if (t.shape[0] != q.shape[1] || t.shape[1] != q.shape[0]) r.invalid("lse shape");
      } else {
        if (t.dtype != q.dtype) r.invalid(std::string(x.name) + " dtype");
        const flash_tensor& like = x.like == 0 ? q : k;
        if (&t != &q && &t != &k)
          for (int i = 0; i < 3; ++i)
            if (t.shape[i] != like.shape[i]) r.invalid(std::string(x.name) + " shape");
      }
    }
    if (k.shape[2] != q.shape[2]) r.invalid("k head_dim vs q");
    if (q.shape[1] % k.shape[1] != 0) r.invalid("heads_q % heads_kv");
    if (q.shape[2] % 8 != 0 || q.shape[2] > 256) r.invalid("head_dim");
  }
  // Options (the algorithm last: the library refuses one that cannot run only after reading the index arrays).
  if (!std::isfinite(A.softmax_scale) || std::fabs(A.softmax_scale) > 65536.0f) r.invalid("softmax_scale");
  if (A.causal != 0 && A.causal != 1) r.invalid("causal");
  if (A.causal_alignment != 0 && A.causal_alignment != 1) r.invalid("causal_alignment");
  if (A.window_left < -1 || A.window_right < -1) r.invalid("window");
  if (A.algorithm < 0 || A.algorithm >= FLASH_ALGO_COUNT) r.invalid("algorithm not a FLASH_ALGO_* value");
  if (A.flags & ~FLASH_FLAG_DETERMINISTIC) r.invalid("flags");
  const auto algorithm_rule = [&] {
    if (A.algorithm != FLASH_ALGO_AUTO && A.algorithm != FLASH_ALGO_CPU && A.algorithm != FLASH_ALGO_NAIVE)
      r.invalid("algorithm not usable on the CPU");
  };
  if (r.v == INVALID) return algorithm_rule(), r;  // (refused before the index arrays are read)

  // Every array in the arena, none over the argument struct or the query's out parameter (out of scope: flash.h says
  // nothing of arrays over them; the harness reads the struct after the call).
  const int64_t n = A.varlen_batch;
  const int64_t counts[3] = {n + 1, n + 1, n};
  const int32_t* arrays[3] = {A.cu_seqlens_q, A.cu_seqlens_k, A.seqused_k};
  const char* array_names[3] = {"cu_seqlens_q", "cu_seqlens_k", "seqused_k"};
  std::vector<std::pair<const void*, uint64_t>> ranges;
  for (const VT& x : ts)
    if (x.t->data != nullptr) ranges.push_back({x.t->data, static_cast<uint64_t>(span_bytes(x.t->shape, x.t->strides, x.ndim(), esize(x.t->dtype)))});
  for (int i = 0; i < 3; ++i)
    if (arrays[i] != nullptr) ranges.push_back({arrays[i], static_cast<uint64_t>(counts[i]) * 4});
  if (A.workspace != nullptr && A.workspace_size > 0) ranges.push_back({A.workspace, A.workspace_size});
  for (const auto& [p, bytes] : ranges)
    if (n > (1 << 16) || !a.contains(p, bytes) || meets(p, bytes, &user, sizeof user) || meets(p, bytes, query_out, query_out ? sizeof(size_t) : 0))
      return *skip = true, r;

  // Overlaps: outputs and the workspace against the inputs and the index arrays, and each other.
  std::vector<Footprint> reads, writes;
  for (const VT& x : ts) {
    if (x.t->data == nullptr) continue;
    Footprint f = tensor_footprint(x.name, *x.t, x.ndim());
    if (x.input) {
      reads.push_back(std::move(f));
    } else {
      output_layout_rule(r, f, *x.t, x.ndim(), true);
      writes.push_back(std::move(f));
    }
  }
  for (int i = 0; i < 3; ++i)
    if (arrays[i] != nullptr) {
      std::vector<int64_t> e(static_cast<size_t>(counts[i]));
      for (int64_t j = 0; j < counts[i]; ++j) e[j] = j;
      reads.push_back(int32_footprint(array_names[i], arrays[i], std::move(e)));
    }
  if (A.workspace != nullptr && A.workspace_size > 0) writes.push_back(bytes_footprint("workspace", A.workspace, A.workspace_size));
  pairwise_overlaps(r, a, writes, reads);
  if (r.v == INVALID) return algorithm_rule(), r;  // (refused before the index arrays are read)

  // The index arrays' contents (flash.h: checked element by element before anything is written).
  const int32_t *cq = A.cu_seqlens_q, *ck = A.cu_seqlens_k, *used = A.seqused_k;
  bool ok = true;
  auto bad = [&](const std::string& w) { r.invalid(w), ok = false; };
  int64_t longest_q = 0, longest_k = 0;
  for (const auto& [cu, name, total] : {std::tuple<const int32_t*, const char*, int64_t>{cq, "cu_seqlens_q", q.shape[0]},
                                        {ck, "cu_seqlens_k", k.shape[0]}}) {
    if (cu[0] != 0) bad(std::string(name) + "[0] not 0");
    for (int64_t i = 1; i <= n; ++i)
      if (cu[i] < cu[i - 1]) bad(std::string(name) + " decreases");
    if (cu[n] > total) bad(std::string(name) + "[n] past the tensors' rows");
  }
  v->n = n;
  for (int64_t i = 0; i < n && ok; ++i) {
    const int64_t slot = int64_t{ck[i + 1]} - ck[i];
    if (used != nullptr && (used[i] < 0 || used[i] > slot)) bad("seqused_k entry outside [0, slot]");
    longest_q = std::max<int64_t>(longest_q, int64_t{cq[i + 1]} - cq[i]);
    longest_k = std::max<int64_t>(longest_k, used ? int64_t{used[i]} : slot);
    v->lk.push_back(used ? int64_t{used[i]} : slot);
  }
  if (ok && A.max_seqlen_q < longest_q) bad("max_seqlen_q below the longest sequence");
  if (ok && A.max_seqlen_k < longest_k) bad("max_seqlen_k below the longest sequence");
  algorithm_rule();
  if (!ok) return r;
  v->contents = true;
  v->cq.assign(cq, cq + n + 1);
  v->ck.assign(ck, ck + n + 1);
  // The naive algorithm sizes its scratch by max_seqlen_q x max_seqlen_k (flash.h: "a larger bound is allowed but
  // costs memory"): beyond what the harness may allocate (libFuzzer's malloc limit), a VALID call is out of its scope.
  if (A.algorithm == FLASH_ALGO_NAIVE && r.v != INVALID &&
      (A.max_seqlen_q + 1.0) * (A.max_seqlen_k + 1.0) + static_cast<double>(A.max_seqlen_k) * q.shape[2] > (1 << 22))
    *skip = true;
  return r;
}

// Sequence i's rows of a packed tensor as the 4-d tensor of a dense call of batch 1 ([1, rows, h, d]; lse [1, h, rows]).
flash_tensor seq_view(const flash_tensor& t, int64_t row0, int64_t rows, bool lse) {
  flash_tensor x = t;
  const int row_axis = lse ? 1 : 0;
  x.data = static_cast<uint8_t*>(t.data) + row0 * t.strides[row_axis] * esize(t.dtype);
  x.ndim = lse ? 3 : 4;
  if (lse) {
    const int64_t shape[3] = {1, t.shape[0], rows}, strides[3] = {0, t.strides[0], t.strides[1]};
    for (int i = 0; i < 3; ++i) x.shape[i] = shape[i], x.strides[i] = strides[i];
    x.shape[3] = x.strides[3] = 0;
  } else {
    const int64_t shape[4] = {1, rows, t.shape[1], t.shape[2]}, strides[4] = {0, t.strides[0], t.strides[1], t.strides[2]};
    for (int i = 0; i < 4; ++i) x.shape[i] = shape[i], x.strides[i] = strides[i];
  }
  return x;
}
uint8_t* packed_ptr(const flash_tensor& t, int64_t row, int64_t h, int64_t e) {
  return static_cast<uint8_t*>(t.data) + (row * t.strides[0] + h * t.strides[1] + e * t.strides[2]) * esize(t.dtype);
}
uint8_t* packed_lse_ptr(const flash_tensor& t, int64_t h, int64_t row) {
  return static_cast<uint8_t*>(t.data) + (h * t.strides[0] + row * t.strides[1]) * 4;
}

// A fresh packed buffer for a dense call's output.
struct Out {
  std::vector<uint8_t> bytes;
  flash_tensor t;
  Out(int32_t dtype, int ndim, const int64_t* shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    bytes.assign(static_cast<size_t>(n) * esize(dtype) + 8, 0xA5);
    t = flash_tensor_contiguous(bytes.data(), dtype, FLASH_DEVICE_CPU, 0, ndim, shape);
  }
};

std::string seq_words(int64_t i, int64_t row) { return "sequence " + std::to_string(i) + " row " + std::to_string(row); }

// Element (row, h, e) of the packed output `got` against element (0, r, h, e) of the dense call's `want` (bitwise), or
// against 0 when want is NULL.
void same_element(const char* name, const flash_tensor& got, int64_t row, int64_t h, int64_t e, const flash_tensor* want,
                  int64_t r, const std::string& where) {
  const uint8_t* g = packed_ptr(got, row, h, e);
  if (want == nullptr) {
    if (load(g, got.dtype) != 0.0)
      violation("varlen result", std::string(name) + " " + num_words(load(g, got.dtype)) + " where flash.h says 0 at " + where +
                                     " h" + std::to_string(h) + " e" + std::to_string(e));
    return;
  }
  if (std::memcmp(g, ptr(*want, 0, r, h, e), esize(got.dtype)) != 0)
    violation("varlen result differs from the dense call of its sequence",
              std::string(name) + " " + std::to_string(load(g, got.dtype)) + " vs dense " + std::to_string(at(*want, 0, r, h, e)) + " at " +
                  where + " h" + std::to_string(h) + " e" + std::to_string(e));
}

// Checks a VALID varlen forward's rows against each sequence's dense call (same options, the algorithm that ran).
void check_varlen_fwd(const flash_fwd_args& A, const VarView& v) {
  const int64_t hq = A.q.shape[1], d = A.q.shape[2];
  for (int64_t i = 0; i < v.n; ++i) {
    const int64_t q0 = v.cq[i], lq = v.cq[i + 1] - q0, k0 = v.ck[i], lk = v.lk[i];
    if (lq == 0) continue;
    const int64_t os[4] = {1, lq, hq, d}, ls[3] = {1, hq, lq};
    Out o(A.o.dtype, 4, os), lse(FLASH_DTYPE_FP32, 3, ls);
    const bool dense = lk > 0;
    if (dense) {
      flash_fwd_args D;
      flash_fwd_args_init(&D);
      D.q = seq_view(A.q, q0, lq, false), D.k = seq_view(A.k, k0, lk, false), D.v = seq_view(A.v, k0, lk, false);
      D.o = o.t, D.lse = lse.t;
      D.softmax_scale = A.softmax_scale, D.causal = A.causal, D.causal_alignment = A.causal_alignment;
      D.window_left = A.window_left, D.window_right = A.window_right, D.algorithm = A.algorithm_used, D.flags = A.flags;
      if (const int32_t s = flash_fwd(&D); s != FLASH_OK)
        violation("the dense call of a sequence was refused", "sequence " + std::to_string(i) + ": " + flash_status_string(s) + ": " +
                                                                  flash_last_error_message());
    }
    for (int64_t r = 0; r < lq; ++r)
      for (int64_t h = 0; h < hq; ++h) {
        for (int64_t e = 0; e < d; ++e) same_element("o", A.o, q0 + r, h, e, dense ? &o.t : nullptr, r, seq_words(i, r));
        if (A.lse.data == nullptr) continue;
        float got, want = -INFINITY;
        std::memcpy(&got, packed_lse_ptr(A.lse, h, q0 + r), 4);
        if (dense) std::memcpy(&want, lse_ptr(lse.t, 0, h, r), 4);
        if (bits_of_f32(got) != bits_of_f32(want))
          violation(dense ? "varlen result differs from the dense call of its sequence" : "varlen result",
                    "lse " + std::to_string(got) + " vs " + std::to_string(want) + " at " + seq_words(i, r) + " h" + std::to_string(h));
      }
  }
}

void check_varlen_bwd(const flash_bwd_args& A, const VarView& v) {
  const int64_t hq = A.q.shape[1], hkv = A.k.shape[1], d = A.q.shape[2];
  for (int64_t i = 0; i < v.n; ++i) {
    const int64_t q0 = v.cq[i], lq = v.cq[i + 1] - q0, k0 = v.ck[i], lk = v.lk[i], slot = v.ck[i + 1] - k0;
    const int64_t qs[4] = {1, std::max<int64_t>(lq, 1), hq, d}, ks[4] = {1, std::max<int64_t>(lk, 1), hkv, d};
    Out dq(A.dq.dtype, 4, qs), dk(A.dk.dtype, 4, ks), dv(A.dv.dtype, 4, ks);
    const bool dense = lq > 0 && lk > 0;
    if (dense) {
      flash_bwd_args D;
      flash_bwd_args_init(&D);
      D.q = seq_view(A.q, q0, lq, false), D.k = seq_view(A.k, k0, lk, false), D.v = seq_view(A.v, k0, lk, false);
      D.o = seq_view(A.o, q0, lq, false), D.d_o = seq_view(A.d_o, q0, lq, false), D.lse = seq_view(A.lse, q0, lq, true);
      D.dq = dq.t, D.dk = dk.t, D.dv = dv.t;
      D.softmax_scale = A.softmax_scale, D.causal = A.causal, D.causal_alignment = A.causal_alignment;
      D.window_left = A.window_left, D.window_right = A.window_right, D.algorithm = A.algorithm_used, D.flags = A.flags;
      if (const int32_t s = flash_bwd(&D); s != FLASH_OK)
        violation("the dense call of a sequence was refused", "sequence " + std::to_string(i) + ": " + flash_status_string(s) + ": " +
                                                                  flash_last_error_message());
    }
    for (int64_t r = 0; r < lq; ++r)  // no keys: dq = 0
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t e = 0; e < d; ++e) same_element("dq", A.dq, q0 + r, h, e, dense ? &dq.t : nullptr, r, seq_words(i, r));
    for (int64_t r = 0; r < slot; ++r)  // keys past seqused_k, or of a sequence without queries: dk = dv = 0
      for (int64_t h = 0; h < hkv; ++h)
        for (int64_t e = 0; e < d; ++e) {
          const bool seen = dense && r < lk;
          same_element("dk", A.dk, k0 + r, h, e, seen ? &dk.t : nullptr, r, "sequence " + std::to_string(i) + " key " + std::to_string(r));
          same_element("dv", A.dv, k0 + r, h, e, seen ? &dv.t : nullptr, r, "sequence " + std::to_string(i) + " key " + std::to_string(r));
        }
  }
}

// The backward's o and lse as a forward would have left them (fp64 reference per sequence, rounded to the dtypes), so
// the compared gradients are those of a real problem -- when o and lse are plain layouts that share no memory with
// another input or an index array (writing them must change nothing the oracle looked at).
// `others`: every other array the oracle looked at (the inputs but o and lse, the index arrays).
void fill_varlen_forward(flash_bwd_args& A, const VarView& v, const std::vector<std::pair<const void*, uint64_t>>& others) {
  for (const flash_tensor* t : {&A.o, &A.lse}) {
    const int nd = t == &A.lse ? 2 : 3;
    std::vector<int64_t> e = element_offsets(*t, nd);
    std::sort(e.begin(), e.end());
    if (e.empty() || std::adjacent_find(e.begin(), e.end()) != e.end()) return;
    const uint64_t bytes = static_cast<uint64_t>(span_bytes(t->shape, t->strides, nd, esize(t->dtype)));
    for (const auto& [p, n] : others)
      if (meets(t->data, bytes, p, n)) return;
  }
  if (meets(A.o.data, static_cast<uint64_t>(span_bytes(A.o.shape, A.o.strides, 3, esize(A.o.dtype))), A.lse.data,
            static_cast<uint64_t>(span_bytes(A.lse.shape, A.lse.strides, 2, 4))))
    return;
  const int64_t hq = A.q.shape[1], hkv = A.k.shape[1], d = A.q.shape[2];
  const double scale = A.softmax_scale != 0.0f ? A.softmax_scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  // The inputs must hold the generator's values (finite, |x| <= 64), not another array's bytes that a mutation pointed
  // an input at: else there is no forward to write (and the comparison needs none).
  bool finite = true;
  auto value = [&](double x) { finite &= std::fabs(x) <= 64.0; return x; };
  std::vector<Ref> refs(static_cast<size_t>(v.n));
  for (int64_t i = 0; i < v.n && finite; ++i) {
    const int64_t q0 = v.cq[i], lq = v.cq[i + 1] - q0, k0 = v.ck[i], lk = v.lk[i];
    if (lq == 0) continue;
    Dense Q(lq, hq, d), K(std::max<int64_t>(lk, 1), hkv, d), V(std::max<int64_t>(lk, 1), hkv, d);
    for (int64_t r = 0; r < lq; ++r)
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t e = 0; e < d; ++e) Q.row(0, r, h)[e] = value(load(packed_ptr(A.q, q0 + r, h, e), A.q.dtype));
    for (int64_t r = 0; r < lk; ++r)
      for (int64_t h = 0; h < hkv; ++h)
        for (int64_t e = 0; e < d; ++e) {
          K.row(0, r, h)[e] = value(load(packed_ptr(A.k, k0 + r, h, e), A.k.dtype));
          V.row(0, r, h)[e] = value(load(packed_ptr(A.v, k0 + r, h, e), A.v.dtype));
        }
    if (!finite) break;
    const int64_t wr = A.causal ? 0 : A.window_right;
    Problem p{1, lq, lk, hq, hkv, d, static_cast<double>(static_cast<float>(scale)), A.window_left, wr,
              A.causal_alignment == FLASH_ALIGN_BOTTOM_RIGHT ? lk - lq : 0, nullptr};
    refs[i] = forward_ref_dense(p, Q, K, V);
  }
  if (!finite) return;
  for (int64_t i = 0; i < v.n; ++i) {
    const int64_t q0 = v.cq[i], lq = v.cq[i + 1] - q0;
    for (int64_t r = 0; r < lq; ++r)
      for (int64_t h = 0; h < hq; ++h) {
        for (int64_t e = 0; e < d; ++e) store(packed_ptr(A.o, q0 + r, h, e), A.o.dtype, refs[i].o[(r * hq + h) * d + e]);
        const float l = static_cast<float>(refs[i].lse[h * lq + r]);
        std::memcpy(packed_lse_ptr(A.lse, h, q0 + r), &l, 4);
      }
  }
}

template <class Args>
std::string describe_varlen(Op op, const Args& A, const Arena& a) {
  static const char* ops[] = {"flash_fwd", "flash_bwd", "flash_fwd_workspace_size", "flash_bwd_workspace_size"};
  std::string s = std::string(ops[op]) + " (varlen) struct_size " + std::to_string(A.struct_size);
  Args copy = A;
  for (const VT& x : var_tensors(copy)) s += tensor_words(x.name, *x.t);
  const int64_t n = A.varlen_batch;
  s += " varlen_batch " + std::to_string(n) + " max_seqlen_q " + std::to_string(A.max_seqlen_q) + " max_seqlen_k " +
       std::to_string(A.max_seqlen_k) + " reserved_1_3 " + std::to_string(A.reserved_1_3);
  s += int32_words("cu_seqlens_q", A.cu_seqlens_q, n + 1, a) + int32_words("cu_seqlens_k", A.cu_seqlens_k, n + 1, a) +
       int32_words("seqused_k", A.seqused_k, n, a);
  s += " scale " + num_words(A.softmax_scale) + " causal " + std::to_string(A.causal) + " align " + std::to_string(A.causal_alignment) +
       " window (" + std::to_string(A.window_left) + ", " + std::to_string(A.window_right) + ") algo " + std::to_string(A.algorithm) +
       " flags " + std::to_string(A.flags) + " algorithm_used " + std::to_string(A.algorithm_used) +
       (A.block_mask ? " block_mask set" : "");
  if (A.workspace) s += " workspace " + std::to_string(A.workspace_size) + " bytes at arena offset " + std::to_string(a.offset(A.workspace));
  return s;
}

// The mutations: what callers of a packed varlen flash_fwd / flash_bwd get wrong.
template <class Args>
void mutate_varlen(FuzzedDataProvider& in, Args& A, Arena& a, const flash_block_mask* mask, int32_t* const* arrays, int64_t entries) {
  std::vector<VT> ts = var_tensors(A);
  std::vector<const void*> onto;
  for (const VT& x : ts) onto.push_back(x.t->data);
  for (int i = 0; i < 3; ++i) onto.push_back(arrays[i]);
  onto.push_back(A.workspace);
  const int32_t** ptrs[3] = {&A.cu_seqlens_q, &A.cu_seqlens_k, &A.seqused_k};
  switch (in.ConsumeIntegralInRange(0, 9)) {
    case 0:
    case 1: mutate_tensor_onto(in, *ts[in.ConsumeIntegralInRange<size_t>(0, ts.size() - 1)].t, a, onto); break;
    case 2:
      switch (in.ConsumeIntegralInRange(0, 7)) {
        case 0: A.softmax_scale = interesting_scale(in); break;
        case 1: A.causal = static_cast<int32_t>(interesting_int(in)); break;
        case 2: A.causal_alignment = in.ConsumeBool() ? static_cast<int32_t>(interesting_int(in)) : in.ConsumeIntegralInRange(0, 1); break;
        case 3: A.window_left = in.ConsumeBool() ? static_cast<int32_t>(interesting_int(in)) : in.ConsumeIntegralInRange(-2, 8); break;
        case 4: A.window_right = in.ConsumeBool() ? static_cast<int32_t>(interesting_int(in)) : in.ConsumeIntegralInRange(-2, 8); break;
        case 5: A.algorithm = in.ConsumeIntegralInRange(-2, 7); break;
        case 6: A.flags = in.ConsumeBool() ? FLASH_FLAG_DETERMINISTIC : in.ConsumeIntegral<uint32_t>(); break;
        case 7: A.reserved_1_3 = in.ConsumeBool() ? 1 : static_cast<int32_t>(interesting_int(in)); break;
      }
      break;
    case 3:
      switch (in.ConsumeIntegralInRange(0, 3)) {
        case 0: A.struct_size = in.ConsumeIntegralInRange<size_t>(0, sizeof A + 16); break;
        case 1: A.struct_size = offsetof(Args, cu_seqlens_q); break;  // a caller of flash.h 1.2: no varlen fields
        case 2: A.algorithm_used = 0; break;
        case 3: {  // zero-filled with struct_size set: the tensors and the varlen fields kept (window (0, 0))
          const Args keep = A;
          std::memset(static_cast<void*>(&A), 0, sizeof A);
          A.struct_size = sizeof A;
          Args k2 = keep;
          std::vector<VT> from = var_tensors(k2), to = var_tensors(A);
          for (size_t i = 0; i < from.size(); ++i) *to[i].t = *from[i].t;
          A.cu_seqlens_q = keep.cu_seqlens_q, A.cu_seqlens_k = keep.cu_seqlens_k, A.seqused_k = keep.seqused_k;
          A.max_seqlen_q = keep.max_seqlen_q, A.max_seqlen_k = keep.max_seqlen_k, A.varlen_batch = keep.varlen_batch;
          break;
        }
      }
      break;
    case 4: {  // the lengths
      int32_t* f = in.ConsumeIntegralInRange(0, 2) == 0 ? &A.varlen_batch : in.ConsumeBool() ? &A.max_seqlen_q : &A.max_seqlen_k;
      *f = in.ConsumeBool() ? static_cast<int32_t>(interesting_int(in)) : static_cast<int32_t>(int64_t{*f} + in.ConsumeIntegralInRange(-2, 3));
      break;
    }
    case 5: {  // an index array's pointer
      const int32_t** p = ptrs[in.ConsumeIntegralInRange(0, 2)];
      switch (in.ConsumeIntegralInRange(0, 4)) {
        case 0: *p = nullptr; break;
        case 1: *p = int32_onto(in, a, onto, *p); break;
        case 2: std::swap(A.cu_seqlens_q, A.cu_seqlens_k); break;
        case 3: if (*p) *p = reinterpret_cast<const int32_t*>(reinterpret_cast<const uint8_t*>(*p) + in.ConsumeIntegralInRange(1, 3)); break;
        case 4: *p = arrays[in.ConsumeIntegralInRange(0, 2)]; break;  // one array for two (or seqused_k given back)
      }
      break;
    }
    case 6:
    case 7: {  // an entry (the arrays are the fuzzer's own: write through them, inside their spare entries)
      int32_t* arr = arrays[in.ConsumeIntegralInRange(0, 2)];
      int32_t* e = arr + in.ConsumeIntegralInRange<int64_t>(0, entries - 1);
      switch (in.ConsumeIntegralInRange(0, 3)) {
        case 0: *e = static_cast<int32_t>(interesting_int(in)); break;
        case 1: *e = static_cast<int32_t>(int64_t{*e} + in.ConsumeIntegralInRange(-3, 3)); break;
        case 2: *e = in.ConsumeIntegralInRange(-1, 12); break;
        case 3: if (e > arr) std::swap(e[0], e[-1]); break;  // two neighbours swapped: decreasing offsets
      }
      break;
    }
    case 8:  // the workspace: onto an array (an offsets array too), or an odd size
      if (in.ConsumeBool()) {
        const void* w = onto[in.ConsumeIntegralInRange<size_t>(0, onto.size() - 1)];
        if (w) A.workspace = const_cast<void*>(w), A.workspace_size = in.ConsumeIntegralInRange<size_t>(1, 4096);
      } else {
        A.workspace_size = in.ConsumeIntegralInRange<size_t>(0, 1 << 16);
      }
      break;
    case 9: A.block_mask = mask; break;  // flash.h: not with cu_seqlens_q
  }
}

template <class Args>
int run_varlen_typed(FuzzedDataProvider& in, Op op) {
  constexpr bool bwd = is_bwd<Args>();
  const int fam = bwd ? FAM_VARLEN_BWD : FAM_VARLEN_FWD;
  const int32_t dtype = in.ConsumeIntegralInRange(1, 3);
  // Mostly tiny sequences (0, 1 and odd lengths); sometimes one past a 64-row block.
  const bool big = in.ConsumeIntegralInRange(0, 31) == 0;
  const int64_t n = in.ConsumeIntegralInRange(1, 4);
  const int64_t hkv = in.ConsumeIntegralInRange(1, 2), hq = hkv * (big ? 1 : in.ConsumeIntegralInRange(1, 3));
  const int64_t d = big ? 8 : 8 * in.ConsumeIntegralInRange(1, 4);
  const bool want_used = in.ConsumeIntegralInRange(0, 2) == 0;
  auto length = [&](bool large) -> int64_t {
    if (large) return in.ConsumeIntegralInRange(60, 70);
    switch (in.ConsumeIntegralInRange(0, 7)) {
      case 0: return 0;
      case 1: return 1;
      default: return in.ConsumeIntegralInRange(1, 7);
    }
  };
  std::vector<int64_t> lq(n), slot(n), used(n);
  const int64_t large = big ? in.ConsumeIntegralInRange<int64_t>(0, n - 1) : -1;
  for (int64_t i = 0; i < n; ++i) {
    lq[i] = length(i == large && in.ConsumeBool());
    slot[i] = length(i == large);
    used[i] = want_used ? in.ConsumeIntegralInRange<int64_t>(0, slot[i]) : slot[i];
  }
  int64_t sum_q = 0, sum_k = 0, longest_q = 0, longest_k = 0;
  for (int64_t i = 0; i < n; ++i) sum_q += lq[i], sum_k += slot[i], longest_q = std::max(longest_q, lq[i]), longest_k = std::max(longest_k, used[i]);
  const int64_t total_q = std::max<int64_t>(1, sum_q + in.ConsumeIntegralInRange(0, 2));
  const int64_t total_k = std::max<int64_t>(1, sum_k + in.ConsumeIntegralInRange(0, 2));
  const int64_t max_q = longest_q + (in.ConsumeIntegralInRange(0, 3) == 0 ? in.ConsumeIntegralInRange(1, 9) : 0);
  const int64_t max_k = longest_k + (in.ConsumeIntegralInRange(0, 3) == 0 ? in.ConsumeIntegralInRange(1, 9) : 0);
  const double mag = in.ConsumeBool() ? 1.0 : 4.0;
  uint64_t rng = in.ConsumeIntegral<uint64_t>();

  // Plan every tensor, then size the arena: them, the structs, the index arrays (n + 4 entries each) and a workspace.
  Args proto;
  init_args(&proto);
  const std::vector<VT> roles = var_tensors(proto);
  const int64_t qshape[3] = {total_q, hq, d}, kshape[3] = {total_k, hkv, d}, lshape[2] = {hq, total_q};
  std::vector<flash_tensor> plans(roles.size());
  std::vector<size_t> gaps(roles.size());
  const int64_t entries = n + 4;
  size_t total = sizeof(Args) + sizeof(flash_block_mask) + 3 * (static_cast<size_t>(entries) * 4 + 32) + 64;
  for (size_t i = 0; i < roles.size(); ++i) {
    const int like = roles[i].like;
    plans[i] = plan_packed(in, like == 0 ? qshape : like == 1 ? kshape : lshape, roles[i].ndim(), like == 2 ? FLASH_DTYPE_FP32 : dtype, &gaps[i]);
    total += static_cast<size_t>(span_bytes(plans[i].shape, plans[i].strides, plans[i].ndim, esize(plans[i].dtype))) + gaps[i] + 8;
  }
  const bool want_ws = in.ConsumeIntegralInRange(0, 3) == 0;
  if (want_ws) total += static_cast<size_t>(4 * (total_q * hq * (d + 2) + 2 * (max_q + 1) * (max_k + 1) + 2 * (max_k + 1) * d + 1024)) + 64 + 64;
  total += 16;  // the query's out parameter

  Arena a(total);
  auto* A = reinterpret_cast<Args*>(a.place(sizeof(Args), 8, 0));
  init_args(A);
  std::vector<VT> ts = var_tensors(*A);
  for (size_t i = 0; i < ts.size(); ++i) {
    *ts[i].t = plans[i];
    const bool filled = ts[i].input && strcmp(ts[i].name, "lse");
    if (!place_tensor(a, *ts[i].t, gaps[i], filled, rng, mag)) violation("fuzzer bug", "arena too small for the varlen tensors");
  }
  if (bwd) {  // lse: plausible values until fill_varlen_forward writes a forward's
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t r = 0; r < total_q; ++r) {
        const float l = static_cast<float>(4.0 * static_cast<double>(splitmix(rng) >> 11) * 0x1p-53);
        std::memcpy(packed_lse_ptr(A->lse, h, r), &l, 4);
      }
  } else if (in.ConsumeBool()) {
    A->lse.data = nullptr;  // the optional LSE not wanted
  }
  // The index arrays: the real entries, then spare ones continuing them (a varlen_batch past the real one reads those).
  int32_t* arrays[3];
  for (int k = 0; k < 3; ++k) {
    arrays[k] = reinterpret_cast<int32_t*>(a.place(static_cast<size_t>(entries) * 4, 4, in.ConsumeIntegralInRange<size_t>(0, 8) * 4));
    if (!arrays[k]) violation("fuzzer bug", "arena too small for the index arrays");
  }
  arrays[0][0] = arrays[1][0] = 0;
  for (int64_t i = 0; i < entries - 1; ++i) {
    arrays[0][i + 1] = static_cast<int32_t>(arrays[0][i] + (i < n ? lq[i] : static_cast<int64_t>(splitmix(rng) % 3)));
    arrays[1][i + 1] = static_cast<int32_t>(arrays[1][i] + (i < n ? slot[i] : static_cast<int64_t>(splitmix(rng) % 3)));
    arrays[2][i] = static_cast<int32_t>(i < n ? used[i] : static_cast<int64_t>(splitmix(rng) % 3));
  }
  arrays[2][entries - 1] = 0;
  A->cu_seqlens_q = arrays[0], A->cu_seqlens_k = arrays[1];
  if (want_used) A->seqused_k = arrays[2];
  A->varlen_batch = static_cast<int32_t>(n);
  A->max_seqlen_q = static_cast<int32_t>(max_q), A->max_seqlen_k = static_cast<int32_t>(max_k);
  auto* mask = reinterpret_cast<flash_block_mask*>(a.place(sizeof(flash_block_mask), 8, 0));
  flash_block_mask_init(mask);

  // Options.
  A->causal = in.ConsumeBool();
  A->causal_alignment = in.ConsumeBool();
  if (in.ConsumeBool()) {
    A->window_left = in.ConsumeIntegralInRange(-1, static_cast<int>(max_k) + 1);
    A->window_right = in.ConsumeIntegralInRange(-1, static_cast<int>(max_k) + 1);
  }
  static const int32_t algos[] = {FLASH_ALGO_AUTO, FLASH_ALGO_CPU, FLASH_ALGO_NAIVE};
  A->algorithm = algos[in.ConsumeIntegralInRange(0, 2)];
  if (in.ConsumeBool()) A->flags = FLASH_FLAG_DETERMINISTIC;
  draw_scale(in, &A->softmax_scale);
  if (want_ws) {  // the caller's workspace, sized by the query
    size_t ws = 0;
    if (query(A, &ws) == FLASH_OK && ws > 0) {
      place_workspace(in, a, ws, &A->workspace, &A->workspace_size);
    }
  }
  const bool is_query = op == FWD_QUERY || op == BWD_QUERY;
  size_t* query_out = nullptr;
  if (is_query) {
    query_out = reinterpret_cast<size_t*>(a.place(sizeof(size_t), 8, 0));
    if (!query_out) return 0;
  }
  const int n_mut = in.ConsumeIntegralInRange(0, 4);
  for (int i = 0; i < n_mut && in.remaining_bytes() > 0; ++i) mutate_varlen(in, *A, a, mask, arrays, entries);

  VarView v;
  bool skip = false;
  Rules rules = judge_varlen(*A, a, query_out, &v, &skip);
  if (skip) {
    tally(fam, &Tally::skipped);
    return 0;
  }
  // A workspace smaller than what the query says is a documented error too.
  if (rules.v == VALID && A->workspace != nullptr && !is_query) {
    Args copy = *A;
    size_t ws = 0;
    if (query(&copy, &ws) != FLASH_OK) violation("workspace query refused a VALID call", flash_last_error_message());
    if (ws > 0 && A->workspace_size < ws) rules.invalid("workspace smaller than the query says");
  }
  if constexpr (bwd) {
    if (rules.v == VALID && !is_query) {
      std::vector<std::pair<const void*, uint64_t>> others;
      for (const VT& x : ts)
        if (x.input && x.t->data && strcmp(x.name, "o") && strcmp(x.name, "lse")) others.push_back({x.t->data, static_cast<uint64_t>(span_bytes(x.t->shape, x.t->strides, x.ndim(), esize(x.t->dtype)))});
      for (const int32_t* p : {A->cu_seqlens_q, A->cu_seqlens_k, A->seqused_k})
        if (p) others.push_back({p, static_cast<uint64_t>(entries) * 4});
      fill_varlen_forward(*A, v, others);
    }
  }

  g_call = describe_varlen(op, *A, a);
  static std::vector<uint8_t> before, may;
  before.assign(a.mem.begin(), a.mem.end());
  tally(fam, &Tally::calls);
  const int32_t status = is_query ? query(A, query_out) : call(A);

  may.assign(a.mem.size(), 0);
  if (is_query) {
    mark_bytes(may, a, query_out, sizeof(size_t));  // *bytes = 0 even on failure
  } else if (status == FLASH_OK) {
    mark_bytes(may, a, &A->algorithm_used, 4);
    if (A->workspace && A->workspace_size) mark_bytes(may, a, A->workspace, A->workspace_size);
    for (const VT& x : ts) {  // the sequences' rows (all rows of a call the oracle did not look into)
      if (x.input || x.t->data == nullptr) continue;
      const flash_tensor& t = *x.t;
      const int64_t rows = v.contents ? rows_of(v, x.like) : t.shape[x.like == 2 ? 1 : 0];
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t h = 0; h < t.shape[x.like == 2 ? 0 : 1]; ++h) {
          if (x.like == 2) { mark_bytes(may, a, packed_lse_ptr(t, h, r), 4); continue; }
          for (int64_t e = 0; e < t.shape[2]; ++e) mark_bytes(may, a, packed_ptr(t, r, h, e), esize(t.dtype));
        }
    }
  }
  check_status(a, before, may, status, rules, fam, is_query);
  if (is_query || rules.v != VALID) return 0;
  if (A->algorithm_used != FLASH_ALGO_CPU && A->algorithm_used != FLASH_ALGO_NAIVE) violation("algorithm_used", std::to_string(A->algorithm_used));
  if (A->algorithm != FLASH_ALGO_AUTO && A->algorithm_used != A->algorithm) violation("algorithm_used", "not the algorithm asked for");
  if constexpr (bwd) check_varlen_bwd(*A, v);
  else check_varlen_fwd(*A, v);
  tally(fam, &Tally::compared);
  return 0;
}

int run_varlen(FuzzedDataProvider& in) {
  const Op op = static_cast<Op>(in.ConsumeIntegralInRange(0, 3));  // FWD, BWD, FWD_QUERY, BWD_QUERY
  return op == BWD || op == BWD_QUERY ? run_varlen_typed<flash_bwd_args>(in, op) : run_varlen_typed<flash_fwd_args>(in, op);
}

int run(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  const int selector = in.ConsumeIntegralInRange(0, 7);
  if (selector == 7) return run_varlen(in);
  const Op op = static_cast<Op>(selector);
  if (op == KVC || op == KVC_QUERY) return run_kvcache(in, op);
  if (op == COMBINE) return run_combine(in);
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
  draw_scale(in, c.softmax_scale);
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
      place_workspace(in, a, ws, c.workspace, c.workspace_size);
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
  // ABI 1.3: a varlen field set on this dense call (flash.h: all 0 / NULL without cu_seqlens_q). Drawn after the
  // mutations, from what the input has left, so that the inputs of earlier versions of this harness decode as before.
  if (in.remaining_bytes() > 0 && in.ConsumeIntegralInRange(0, 7) == 0) {
    const auto stray = [&](auto& A) {
      const int32_t* somewhere = static_cast<const int32_t*>(c.args);  // (never read: refused first)
      switch (in.ConsumeIntegralInRange(0, 6)) {
        case 0: A.cu_seqlens_q = somewhere; break;
        case 1: A.cu_seqlens_k = somewhere; break;
        case 2: A.seqused_k = somewhere; break;
        case 3: A.varlen_batch = in.ConsumeBool() ? 1 : static_cast<int32_t>(interesting_int(in)); break;
        case 4: A.max_seqlen_q = in.ConsumeBool() ? 1 : static_cast<int32_t>(interesting_int(in)); break;
        case 5: A.max_seqlen_k = in.ConsumeBool() ? 1 : static_cast<int32_t>(interesting_int(in)); break;
        case 6: A.reserved_1_3 = in.ConsumeBool() ? 1 : static_cast<int32_t>(interesting_int(in)); break;
      }
    };
    if (bwd) stray(*static_cast<flash_bwd_args*>(c.args));
    else stray(*static_cast<flash_fwd_args*>(c.args));
  }

  MaskView mv;
  bool skip = false;
  Rules rules = judge(c, a, &mv, &skip);
  const int fam = bwd ? FAM_BWD : FAM_FWD;
  if (skip) {
    tally(fam, &Tally::skipped);
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
  tally(fam, &Tally::calls);
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
  if (rules.v == INVALID) tally(fam, &Tally::invalid_refused);
  if (rules.v == UNSURE) tally(fam, status == FLASH_OK ? &Tally::unsure_ok : &Tally::unsure_refused);
  if (query) {
    tally(fam, &Tally::queries);
    return 0;
  }
  if (rules.v == VALID) {
    tally(fam, &Tally::valid_ok);
    if (*c.algorithm_used != FLASH_ALGO_CPU && *c.algorithm_used != FLASH_ALGO_NAIVE)
      violation("algorithm_used", std::to_string(*c.algorithm_used));
    if (compare_results) {
      if (bwd) check_backward(c, prob, expected);
      else check_forward(c, prob, expected);
      tally(fam, &Tally::compared);
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
