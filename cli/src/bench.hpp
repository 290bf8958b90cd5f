// cli/src/bench.hpp -- `fa-bench run`: the configuration, the expansion into cases, and one measured row
// per case.
#pragma once
#include <cstring>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "flash.h"
#include "mask.hpp"

namespace fabench {

// The version of the result files' layout (bench_results/README.md). Bump it when a key is renamed,
// removed or changes meaning; adding keys does not bump it.
constexpr int kSchemaVersion = 1;

struct RunConfig {
  int32_t device_type = FLASH_DEVICE_CPU;
  int32_t device_id = 0;
  bool device_given = false;
  std::vector<std::string> algos;     // empty: every concrete algorithm available on the device
  bool algos_given = false;           // --algo named them (decode then runs sm90 too, as an error row)
  std::vector<std::string> modes{"fwd"};
  std::vector<int32_t> dtypes;        // empty: bf16 on a GPU, fp32 on the CPU
  int64_t batch = 2;
  int64_t heads = 8;
  int64_t heads_kv = 0;               // 0: = heads
  std::vector<int64_t> seqlens;       // empty: {1024} (or the grid's)
  int64_t seqlen_k = 0;               // 0: = seqlen_q (decode: the cached keys per sequence, default 4096)
  std::vector<int64_t> head_dims;     // empty: {128} (or the grid's {64, 128})
  std::vector<MaskSpec> masks;        // default {none}; --causal adds causal to each
  bool causal = false;
  std::string grid;                   // "", "standard" or "decode"
  // --mode decode (flash_fwd_kvcache): --seqlen is the new tokens per sequence (default 1), --seqlen-k the keys
  // each sequence attends to (cache capacity per sequence).
  std::vector<int64_t> page_sizes;    // empty: {0} (the decode grid: {0, 16, 256}); 0 = contiguous cache
  int32_t num_splits = 0;             // 0: the library's choice
  bool append = false;                // pass k_new/v_new (appended at cache_seqlens, then attended)
  std::string cache_seqlens = "full"; // full | random (each sequence's length uniform in [max(1, seqlen), seqlen_k])
  // A packed variable-length batch (flash.h 1.3, cu_seqlens; modes fwd, bwd, fwd_bwd): each sequence's length
  // (queries = keys), from --varlen-lengths or drawn by --varlen uniform:LO:HI --total-tokens N --seed S.
  // Empty: dense. varlen_source: "lengths" or "uniform:LO:HI".
  std::vector<int64_t> varlen_lengths;
  std::string varlen_source;
  int warmup = -1, reps = -1;         // -1: per device (GPU 5 / 20, CPU 1 / 3)
  bool check = false;
  bool flush = true;
  std::string sample_clock = "none";  // none | after | during (Device::set_clock_sampling)
  std::string json_path, csv_path;
  uint64_t seed = 0x5eed;
  bool progress = true;
  std::vector<std::string> argv;
};

// One measurement to make.
struct Case {
  std::string algo;  // a name from flash_algorithm_name, as requested ("auto" included)
  std::string mode;  // fwd | bwd | fwd_bwd | decode
  int32_t dtype;
  int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim;
  MaskSpec mask;
  // decode only: seqlen_q = new tokens per sequence, seqlen_k = keys each sequence attends to (its cache capacity)
  int64_t page_size = 0;               // 0: contiguous [batch, seqlen_k, heads_kv, d]; else paged
  int32_t num_splits = 0;              // flash_kvcache_args.num_splits (0: the library's choice)
  bool append = false;                 // k_new/v_new given: the cache holds seqlen_k - seqlen_q keys before the call
  std::string cache_seqlens = "full";  // full | random
  // A packed variable-length batch: the sequences' lengths (queries = keys per sequence), empty: dense. Then batch is
  // the number of sequences and seqlen_q = seqlen_k the longest (max_seqlen_q/k).
  std::vector<int64_t> varlen;
  std::string varlen_source;  // "lengths" | "uniform:LO:HI"
  bool is_varlen() const { return !varlen.empty(); }
  int64_t total_tokens() const;  // sum of varlen (batch * seqlen_q when dense)
};

// Sequence lengths uniform in [lo, hi] (a 64-bit Mersenne Twister seeded with `seed`) until they sum to `total`, the
// last one cut to fit. Throws std::invalid_argument unless 0 <= lo <= hi, hi >= 1 and total >= 1.
std::vector<int64_t> varlen_uniform_lengths(int64_t lo, int64_t hi, int64_t total, uint64_t seed);
// Visible (query, key) pairs of one head summed over the sequences of a varlen case (each its own mask at its own
// length; a dense case: the one (batch, head)'s pairs).
int64_t varlen_visible_pairs(const Case& c);

// Pages per sequence (ceil(seqlen_k / page_size)); 0 for a contiguous cache.
int64_t decode_pages_per_seq(const Case& c);
// The keys each sequence attends to (L_i = cache_seqlens[i] + seqlen_q with --append, else cache_seqlens[i]):
// seqlen_k for every sequence, or with cache_seqlens "random" uniform in [append ? seqlen_q : 1, seqlen_k] from the seed.
std::vector<int64_t> decode_keys(const Case& c, uint64_t seed);
// Minimum bytes a decode call moves: q read + o written + K and V of every key some query of a sequence sees
// (read from the cache) + with --append k_new and v_new read and written into the cache.
double decode_min_bytes(const Case& c, const std::vector<int64_t>& keys);

std::string run_help();
// Throws std::invalid_argument on a bad flag value. argv[0] is the program, argv[1] may be "run".
RunConfig parse_run_args(int argc, const char* const* argv);
// Fills the device-dependent defaults (device, algos, dtypes, warmup/reps) from the library.
void resolve_defaults(RunConfig* cfg);
std::vector<Case> expand_cases(const RunConfig& cfg);

const char* dtype_name(int32_t dtype);
int32_t dtype_from_name(const std::string& name);  // -1 if unknown
size_t dtype_size(int32_t dtype);
std::string device_string(int32_t device_type, int32_t device_id);  // "cpu", "cuda:0"
// "cpu" | "cuda" | "cuda:N" -> type, id. Throws std::invalid_argument.
void parse_device(const std::string& s, int32_t* type, int32_t* id);
// Names of the algorithms set in a FLASH_ALGO_* bit mask (flash_algorithm_name).
std::vector<std::string> algorithm_names(uint32_t mask);

// The paper's IO model (FlashAttention, Theorem 2 and Algorithm 0), in bytes, for one forward.
struct IoModel {
  double naive_bytes;  // e * b * h * (2 sq d + 2 sk d + 4 sq sk)
  double flash_bytes;  // b * h * (e * 2 sk d + f * Tc * (3 e sq d + 16 sq)), Bc = ceil(M / (4 d e)), Tc = ceil(sk / Bc)
  int64_t block_c;     // Bc
};
IoModel io_model(const Case& c, int64_t shared_mem_per_sm, double visible_fraction);

// The fp64 reference check of one output (see reference.cpp).
struct CheckResult {
  double max_abs_error = 0, max_rel_error = 0, tolerance = 0;
  int64_t sampled_heads = 0, sampled_rows = 0;
  bool passed = true;
};
// q, k, v, o: host copies in `dtype`, [b, s, h, d] contiguous.
CheckResult check_against_reference(const Case& c, const MaskModel& mask, const void* q, const void* k, const void* v,
                                    const void* o, uint64_t seed);
double check_tolerance(int32_t dtype);

// The fp64 reference of --mode decode: each sequence's new queries over its first keys[b] keys, gathered from the
// cache as the library reads it (contiguous, or through block_table [batch, pages_per_seq] for a paged cache;
// positions at or past keys[b] - seqlen_q come from k_new/v_new when the call appends). q, o: [b, sq, hq, d];
// k_cache, v_cache: the cache as uploaded (before any append); k_new, v_new: [b, sq, hkv, d] or nullptr.
// The mask is c.mask, bottom-right aligned per sequence (flash.h). Sampled like check_against_reference.
CheckResult check_decode_against_reference(const Case& c, const std::vector<int64_t>& keys, const int32_t* block_table,
                                           const void* q, const void* k_cache, const void* v_cache, const void* k_new,
                                           const void* v_new, const void* o, uint64_t seed);

// The fp64 reference of the backward: dS = P * (dP - rowsum(dO * O)), dQ = scale dS K, dK = scale dS^T Q,
// dV = P^T dO (dK, dV summed over the query heads sharing a kv head). dQ is checked on the sampled rows of
// the sampled heads; dK and dV need every row of a head, so they are checked only when that fits the
// budget (else their errors stay negative = not checked). Errors are normwise per tensor.
struct GradCheckResult {
  double dq_rel_error = -1, dk_rel_error = -1, dv_rel_error = -1, tolerance = 0;
  int64_t sampled_heads = 0, sampled_rows = 0;
  bool passed = true;
};
GradCheckResult check_backward_against_reference(const Case& c, const MaskModel& mask, const void* q, const void* k,
                                                 const void* v, const void* d_o, const void* dq, const void* dk,
                                                 const void* dv, uint64_t seed);

// Measures every case; returns the complete result document ({schema_version, meta, results}).
nlohmann::json run_benchmark(const RunConfig& cfg);
// The meta block for a device.
nlohmann::json make_meta(const RunConfig& cfg);
// Fills speedup_over_naive in each successful non-naive row that has a successful naive twin.
void add_speedups(nlohmann::json& results);

}  // namespace fabench

// fp16 / bf16 <-> fp32 on the host (round to nearest even), for input generation and the reference check.
// Written here because fa-bench sees libflash only through flash.h.
namespace fabench {

inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float bf16_to_float(uint16_t h) { return bits_float(uint32_t{h} << 16); }
inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    const float f = static_cast<float>(mant) * 5.9604644775390625e-8f;  // mant * 2^-24
    return sign ? -f : f;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

inline uint16_t float_to_fp16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;
  if (a >= 0x477ff000u) return sign | 0x7c00u;
  if (a < 0x38800000u) {  // fp16 subnormal or zero
    const float scaled = bits_float(a) * 16777216.0f;
    uint32_t m = static_cast<uint32_t>(scaled);
    const float rem = scaled - static_cast<float>(m);
    if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
    return sign | static_cast<uint16_t>(m);
  }
  uint32_t r = a + 0x0fffu + ((a >> 13) & 1u);
  r -= 0x38000000u;
  return sign | static_cast<uint16_t>(r >> 13);
}

}  // namespace fabench
