// cli/src/bench.cpp -- `fa-bench run`: one measured row per case.
//
// Per case: inputs generated on the host from the seed (uniform in [-1, 1), rounded to the dtype) and
// uploaded once per shape; the workspace sized by flash_fwd_workspace_size and passed explicitly, so the
// call's whole footprint is known; `warmup` untimed calls, then `reps` timed calls with the last-level
// cache flushed before each; with --check the output is poisoned (all bits set, a NaN in every dtype)
// before the first call and compared with the fp64 reference after the last.
//
// --mode decode (measure_decode): flash_fwd_kvcache on a contiguous or paged KV cache, every array (the index arrays
// too) on the run's device, the same timing; rows read against the device's copy bandwidth, measured once per run
// (Device::copy_bandwidth), through the call's minimum bytes (decode_min_bytes).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <unistd.h>

#include "bench.hpp"
#include "device.hpp"

#ifndef FA_BENCH_GIT_REVISION
#define FA_BENCH_GIT_REVISION ""
#endif

namespace fabench {
namespace {

using nlohmann::json;

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform values in [-1, 1), rounded to the dtype, written as the dtype's bits.
std::vector<unsigned char> random_tensor(size_t elements, int32_t dtype, uint64_t seed) {
  std::vector<unsigned char> out(elements * dtype_size(dtype));
  uint64_t state = seed;
  for (size_t i = 0; i < elements; ++i) {
    const float x = static_cast<float>(static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    if (dtype == FLASH_DTYPE_FP32) {
      reinterpret_cast<float*>(out.data())[i] = x;
    } else {
      reinterpret_cast<uint16_t*>(out.data())[i] = dtype == FLASH_DTYPE_FP16 ? float_to_fp16(x) : float_to_bf16(x);
    }
  }
  return out;
}

// Elements [first, first + count) of the sequence random_tensor(..., seed) writes (splitmix64 is counter based: element
// i is the mix of seed + (i + 1) * golden), into out[0, count), over the hardware threads.
void fill_random(unsigned char* out, size_t first, size_t count, int32_t dtype, uint64_t seed) {
  auto part = [&](size_t a, size_t z) {
    uint64_t state = seed + 0x9E3779B97F4A7C15ull * uint64_t(first + a);
    for (size_t i = a; i < z; ++i) {
      const float x = static_cast<float>(static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
      if (dtype == FLASH_DTYPE_FP32) reinterpret_cast<float*>(out)[i] = x;
      else reinterpret_cast<uint16_t*>(out)[i] = dtype == FLASH_DTYPE_FP16 ? float_to_fp16(x) : float_to_bf16(x);
    }
  };
  const size_t threads = count < (size_t{1} << 20) ? 1 : std::max(1u, std::thread::hardware_concurrency());
  const size_t slice = (count + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t)
    if (t * slice < count) pool.emplace_back(part, t * slice, std::min(count, (t + 1) * slice));
  part(0, std::min(count, slice));
  for (std::thread& th : pool) th.join();
}

// The inputs of one shape, shared by the algorithms measured on it.
struct Inputs {
  std::string key;
  Device* dev = nullptr;
  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;
  size_t q_bytes = 0, kv_bytes = 0;
  std::vector<unsigned char> hq, hk, hv;  // host copies (kept for --check)
  std::string error;                      // allocation failure
  void release() {
    if (dev) {
      dev->release(q), dev->release(k), dev->release(v), dev->release(o);
    }
    q = k = v = o = nullptr;
    hq.clear(), hk.clear(), hv.clear();
    hq.shrink_to_fit(), hk.shrink_to_fit(), hv.shrink_to_fit();
  }
  ~Inputs() { release(); }
};

// A varlen case's lengths in a few characters: the source and an FNV-1a hash of the lengths.
std::string varlen_key(const Case& c) {
  if (!c.is_varlen()) return "";
  uint64_t h = 0xcbf29ce484222325ull;
  for (int64_t L : c.varlen) h = (h ^ uint64_t(L)) * 0x100000001b3ull;
  return "/varlen:" + c.varlen_source + ":" + std::to_string(c.total_tokens()) + ":" + std::to_string(h % 1000003);
}

std::string shape_key(const Case& c) {
  return std::to_string(c.dtype) + "/" + std::to_string(c.batch) + "/" + std::to_string(c.heads_q) + "/" +
         std::to_string(c.heads_kv) + "/" + std::to_string(c.seqlen_q) + "/" + std::to_string(c.seqlen_k) + "/" +
         std::to_string(c.head_dim) + varlen_key(c);
}

std::string human_bytes(double b) {
  char buf[64];
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.2f MB", b / 1e6);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

void set_error(json& row, const std::string& status, int32_t code, const std::string& message) {
  row["error"] = {{"status", status}, {"code", code}, {"message", message}};
}

void set_flash_error(json& row, int32_t status, const std::string& context) {
  const std::string msg = flash_last_error_message();
  set_error(row, flash_status_string(status), status, context + (msg.empty() ? "" : ": " + msg));
}

// The keys every row has, with null for what was not measured (a dashboard can rely on them).
json base_row(const Case& c, const std::string& device) {
  json row;
  row["name"] = c.mode + "/" + dtype_name(c.dtype) + "/" + c.algo + "/b" + std::to_string(c.batch) + "/h" +
                std::to_string(c.heads_q) + "/hkv" + std::to_string(c.heads_kv) + "/sq" + std::to_string(c.seqlen_q) +
                "/sk" + std::to_string(c.seqlen_k) + "/d" + std::to_string(c.head_dim) + "/" + c.mask.label();
  if (c.is_varlen())
    row["name"] = row["name"].get<std::string>() + "/varlen:" + c.varlen_source + ":" + std::to_string(c.total_tokens());
  if (c.mode == "decode")
    row["name"] = row["name"].get<std::string>() + (c.page_size ? "/page" + std::to_string(c.page_size) : "/contiguous") +
                  (c.num_splits ? "/splits" + std::to_string(c.num_splits) : "") + (c.append ? "/append" : "") +
                  (c.cache_seqlens == "random" ? "/random" : "");
  row["device"] = device;
  row["algo"] = c.algo;
  row["algo_used"] = nullptr;
  row["mode"] = c.mode;
  row["dtype"] = dtype_name(c.dtype);
  row["batch"] = c.batch;
  row["heads_q"] = c.heads_q;
  row["heads_kv"] = c.heads_kv;
  row["seqlen_q"] = c.seqlen_q;
  row["seqlen_k"] = c.seqlen_k;
  row["head_dim"] = c.head_dim;
  row["mask"] = c.mask.label();
  row["causal"] = c.mask.causal;
  row["causal_alignment"] = c.mask.alignment == FLASH_ALIGN_TOP_LEFT ? "top_left" : "bottom_right";
  row["window_left"] = c.mask.window_left;
  row["window_right"] = c.mask.effective_window_right();
  row["block_sparse"] = nullptr;
  for (const char* k : {"warmup", "reps", "time_ms_median", "time_ms_min", "time_ms_max", "time_ms_mean", "flops",
                        "visible_pairs", "mask_density", "tflops", "tflops_peak", "peak_mem_bytes", "workspace_bytes",
                        "io_model_naive_bytes", "io_model_flash_bytes", "io_model_bytes", "io_model_gbps",
                        "max_abs_error", "max_rel_error", "check_tolerance", "check_passed", "check_sampled_heads",
                        "check_sampled_rows", "check_scope", "dq_max_rel_error", "dk_max_rel_error",
                        "dv_max_rel_error", "grad_check_tolerance", "speedup_over_naive", "sm_clock_mhz_median",
                        "sm_clock_mhz_min", "clock_limited_reps", "host_call_us_median", "host_call_us_max", "error",
                        // --mode decode (null in the other modes)
                        "page_size", "num_pages", "num_splits", "num_splits_used", "append", "cache_seqlens",
                        "keys_total", "bytes", "bytes_per_s", "copy_bandwidth_fraction", "check_append_mismatches",
                        // --varlen (null for dense rows)
                        "varlen"})
    row[k] = nullptr;
  if (c.is_varlen()) {
    int64_t empty = 0, longest = 0;
    for (int64_t L : c.varlen) empty += L == 0, longest = std::max(longest, L);
    row["varlen"] = {{"source", c.varlen_source},
                     {"sequences", c.batch},
                     {"total_tokens", c.total_tokens()},
                     {"max_seqlen", longest},
                     {"empty_sequences", empty},
                     {"lengths", c.varlen.size() <= 4096 ? json(c.varlen) : json()}};
  }
  return row;
}

double mode_factor(const std::string& mode) { return mode == "bwd" ? 2.5 : mode == "fwd_bwd" ? 3.5 : 1.0; }

// The timed repetitions of one case, shared by every mode.
struct Timed {
  std::vector<double> times;
  std::vector<double> clocks;   // the SM clock while each timed call ran, where the driver says (Device::call_clock)
  int clock_min = 0, limited_reps = 0;
  std::vector<double> host_us;  // the timed calls' host time (Device::last_host_call_us)
};

// `warmup` untimed calls, then `reps` timed calls with the last-level cache flushed before each (unless --no-flush);
// stops at the first status other than FLASH_OK.
void run_timed(const RunConfig& cfg, Device& dev, const std::function<int32_t()>& call, int32_t* status, Timed* t) {
  for (int w = 0; w < cfg.warmup && *status == FLASH_OK; ++w) dev.time_call(call, status);
  for (int r = 0; r < cfg.reps && *status == FLASH_OK; ++r) {
    if (cfg.flush) dev.flush_cache();
    t->times.push_back(dev.time_call(call, status));
    if (dev.last_host_call_us() >= 0) t->host_us.push_back(dev.last_host_call_us());
    double mean_mhz = 0;
    int min_mhz = 0;
    bool limited = false;
    if (dev.call_clock(&mean_mhz, &min_mhz, &limited)) {
      t->clock_min = t->clocks.empty() ? min_mhz : std::min(t->clock_min, min_mhz);
      t->clocks.push_back(mean_mhz), t->limited_reps += limited;
    }
  }
}

// The row's time_ms_*, host_call_us_* and clock fields; *median and *fastest in ms.
void record_timing(Timed t, json& row, double* median, double* fastest) {
  std::vector<double> sorted = t.times;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  *median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  *fastest = sorted.front();
  double mean = 0;
  for (double x : t.times) mean += x / double(n);
  row["time_ms_median"] = *median;
  row["time_ms_min"] = sorted.front();
  row["time_ms_max"] = sorted.back();
  row["time_ms_mean"] = mean;
  if (!t.host_us.empty()) {
    std::sort(t.host_us.begin(), t.host_us.end());
    row["host_call_us_median"] = t.host_us[t.host_us.size() / 2];
    row["host_call_us_max"] = t.host_us.back();
  }
  if (!t.clocks.empty()) {
    // The power cap lowers the clock of heavy calls, by an amount that can depend on what ran before: the clock the
    // reps ran at goes into the row, so ratios between rows can be read against it.
    std::sort(t.clocks.begin(), t.clocks.end());
    row["sm_clock_mhz_median"] = std::lround(t.clocks[t.clocks.size() / 2]);
    row["sm_clock_mhz_min"] = t.clock_min;
    row["clock_limited_reps"] = t.limited_reps;
  }
}

// ---- Packed variable-length batches (--varlen) --------------------------------------------------------------------
// Each sequence is the dense problem of batch 1 at its length (queries = keys), its rows a contiguous block of the
// packed [total_tokens, heads, d] tensors: sequence_case() is that problem, checked and modelled as any dense case.
Case sequence_case(const Case& c, int64_t length) {
  Case one = c;
  one.varlen.clear();
  one.varlen_source.clear();
  one.batch = 1;
  one.seqlen_q = one.seqlen_k = length;
  return one;
}

IoModel varlen_io_model(const Case& c, int64_t shared_mem_per_sm) {
  IoModel sum{};
  for (int64_t L : c.varlen) {
    if (L == 0) continue;
    const Case one = sequence_case(c, L);
    const double f = double(MaskModel(c.mask, L, L, nullptr).total_pairs()) / (double(L) * double(L));
    const IoModel m = io_model(one, shared_mem_per_sm, f);
    sum.naive_bytes += m.naive_bytes, sum.flash_bytes += m.flash_bytes, sum.block_c = m.block_c;
  }
  return sum;
}

// The fp64 reference check of a varlen forward, sequence by sequence; the worst error and the verdict over all.
CheckResult check_varlen_forward(const Case& c, const Inputs& in, const unsigned char* o, uint64_t seed) {
  CheckResult all;
  const size_t es = dtype_size(c.dtype);
  int64_t row = 0;
  for (int64_t L : c.varlen) {
    if (L > 0) {
      const Case one = sequence_case(c, L);
      const MaskModel m(c.mask, L, L, nullptr);
      const size_t q0 = size_t(row * c.heads_q * c.head_dim) * es, k0 = size_t(row * c.heads_kv * c.head_dim) * es;
      const CheckResult r = check_against_reference(one, m, in.hq.data() + q0, in.hk.data() + k0, in.hv.data() + k0,
                                                    o + q0, seed + uint64_t(row));
      all.max_abs_error = std::max(all.max_abs_error, r.max_abs_error);
      all.max_rel_error = std::max(all.max_rel_error, r.max_rel_error);
      all.tolerance = r.tolerance;
      all.sampled_heads += r.sampled_heads, all.sampled_rows += r.sampled_rows;
      all.passed = all.passed && r.passed;
    }
    row += L;
  }
  return all;
}

// The same for the backward's gradients (dk, dv unchecked, -1, if any sequence's were too large to check).
GradCheckResult check_varlen_backward(const Case& c, const Inputs& in, const unsigned char* d_o, const unsigned char* dq,
                                      const unsigned char* dk, const unsigned char* dv, uint64_t seed) {
  GradCheckResult all;
  all.dq_rel_error = all.dk_rel_error = all.dv_rel_error = 0;
  bool kv_checked = true;
  const size_t es = dtype_size(c.dtype);
  int64_t row = 0;
  for (int64_t L : c.varlen) {
    if (L > 0) {
      const Case one = sequence_case(c, L);
      const MaskModel m(c.mask, L, L, nullptr);
      const size_t q0 = size_t(row * c.heads_q * c.head_dim) * es, k0 = size_t(row * c.heads_kv * c.head_dim) * es;
      const GradCheckResult g = check_backward_against_reference(one, m, in.hq.data() + q0, in.hk.data() + k0,
                                                                 in.hv.data() + k0, d_o + q0, dq + q0, dk + k0, dv + k0,
                                                                 seed + uint64_t(row));
      all.dq_rel_error = std::max(all.dq_rel_error, g.dq_rel_error);
      kv_checked = kv_checked && g.dk_rel_error >= 0;
      all.dk_rel_error = std::max(all.dk_rel_error, g.dk_rel_error);
      all.dv_rel_error = std::max(all.dv_rel_error, g.dv_rel_error);
      all.tolerance = g.tolerance;
      all.sampled_heads += g.sampled_heads, all.sampled_rows += g.sampled_rows;
      all.passed = all.passed && g.passed;
    }
    row += L;
  }
  if (!kv_checked) all.dk_rel_error = all.dv_rel_error = -1;
  return all;
}

json measure(const Case& c, const RunConfig& cfg, Device& dev, const flash_device_info& info, Inputs& in) {
  json row = base_row(c, device_string(cfg.device_type, cfg.device_id));
  row["warmup"] = cfg.warmup;
  row["reps"] = cfg.reps;

  // The mask and its exact FLOP count.
  BlockPattern pattern;
  bool has_blocks = false;
  try {
    has_blocks = make_block_pattern(c.mask, c.seqlen_q, c.seqlen_k, cfg.seed, &pattern);
  } catch (const std::exception& e) {
    set_error(row, "FA_BENCH_BAD_MASK", -1, e.what());
    return row;
  }
  const MaskModel mask(c.mask, c.seqlen_q, c.seqlen_k, has_blocks ? &pattern : nullptr);
  // varlen: each sequence its own mask at its own length, the pairs summed over the sequences (one head).
  const int64_t pairs = c.is_varlen() ? varlen_visible_pairs(c) : mask.total_pairs();
  double all_pairs = double(c.seqlen_q) * double(c.seqlen_k);
  if (c.is_varlen()) {
    all_pairs = 0;
    for (int64_t L : c.varlen) all_pairs += double(L) * double(L);
  }
  const double fraction = all_pairs > 0 ? double(pairs) / all_pairs : 0.0;
  const double flops = forward_flops(pairs, c.is_varlen() ? 1 : c.batch, c.heads_q, c.head_dim) * mode_factor(c.mode);
  row["visible_pairs"] = pairs;
  row["mask_density"] = fraction;
  row["flops"] = flops;
  if (has_blocks)
    row["block_sparse"] = {{"block_m", pattern.block_m},
                           {"block_n", pattern.block_n},
                           {"num_q_blocks", pattern.num_q_blocks},
                           {"max_kv_blocks", pattern.max_kv_blocks},
                           {"block_density", pattern.block_density(c.seqlen_k)},
                           {"seed", cfg.seed}};
  const IoModel io = c.is_varlen() ? varlen_io_model(c, info.shared_mem_per_sm) : io_model(c, info.shared_mem_per_sm, fraction);
  row["io_model_naive_bytes"] = io.naive_bytes;
  row["io_model_flash_bytes"] = io.flash_bytes;

  const bool backward = c.mode != "fwd";
  if (backward) {
    // The IO model above is the forward's; the paper's backward model is not reproduced here.
    row["io_model_naive_bytes"] = nullptr;
    row["io_model_flash_bytes"] = nullptr;
    if (flash_version_number() < 10100) {  // flash_bwd arrived in 1.1
      set_error(row, "FA_BENCH_NOT_SUPPORTED", -1,
                "mode " + c.mode + " is not supported by this library (libflash " + flash_version_string() +
                    " has no flash_bwd; it needs 1.1)");
      return row;
    }
  }
  const int32_t algo = flash_algorithm_from_name(c.algo.c_str());
  if (algo < 0) {
    set_error(row, "FLASH_ERROR_ALGORITHM_UNAVAILABLE", FLASH_ERROR_ALGORITHM_UNAVAILABLE,
              "'" + c.algo + "' is not an algorithm of this library");
    return row;
  }

  // Inputs, shared across the algorithms of one shape.
  const size_t es = dtype_size(c.dtype);
  // (varlen: [total_tokens, heads, d], queries = keys in each sequence)
  const int64_t rows_q = c.is_varlen() ? c.total_tokens() : c.batch * c.seqlen_q;
  const int64_t rows_k = c.is_varlen() ? c.total_tokens() : c.batch * c.seqlen_k;
  const size_t q_elems = size_t(rows_q * c.heads_q * c.head_dim);
  const size_t kv_elems = size_t(rows_k * c.heads_kv * c.head_dim);
  const std::string key = shape_key(c);
  if (in.key != key) {
    in.release();
    in.key = key;
    in.error.clear();
    in.q_bytes = q_elems * es;
    in.kv_bytes = kv_elems * es;
    const double need = 2.0 * double(in.q_bytes) + 2.0 * double(in.kv_bytes);
    if (cfg.device_type == FLASH_DEVICE_CPU && info.total_memory_bytes > 0 && need > 0.75 * double(info.total_memory_bytes)) {
      in.error = "the inputs and output need " + human_bytes(need) + ", more than 3/4 of the host's memory";
    } else {
      in.q = dev.alloc(in.q_bytes), in.o = dev.alloc(in.q_bytes);
      in.k = dev.alloc(in.kv_bytes), in.v = dev.alloc(in.kv_bytes);
      if (!in.q || !in.k || !in.v || !in.o) {
        in.error = "could not allocate " + human_bytes(need) + " for q, k, v and o: " + dev.last_error();
      } else {
        uint64_t s = cfg.seed ^ 0xcbf29ce484222325ull;  // FNV-1a of the shape: the same inputs everywhere
        for (unsigned char ch : key) s = (s ^ ch) * 0x100000001b3ull;
        in.hq = random_tensor(q_elems, c.dtype, s + 1);
        in.hk = random_tensor(kv_elems, c.dtype, s + 2);
        in.hv = random_tensor(kv_elems, c.dtype, s + 3);
        if (!dev.upload(in.q, in.hq.data(), in.q_bytes) || !dev.upload(in.k, in.hk.data(), in.kv_bytes) ||
            !dev.upload(in.v, in.hv.data(), in.kv_bytes))
          in.error = "upload failed: " + dev.last_error();
        if (!cfg.check) in.hq.clear(), in.hk.clear(), in.hv.clear();
      }
    }
  }
  if (!in.error.empty()) {
    set_error(row, "FLASH_ERROR_OUT_OF_MEMORY", FLASH_ERROR_OUT_OF_MEMORY, "fa-bench: " + in.error);
    return row;
  }

  // The block mask, on the device of q.
  struct Owned {
    Device& d;
    void* p = nullptr;
    ~Owned() { d.release(p); }
  } mask_num{dev}, mask_idx{dev}, workspace{dev}, bwd_workspace{dev}, lse{dev}, d_o{dev}, dq{dev}, dk{dev}, dv{dev},
      cu_seqlens{dev};
  flash_block_mask bm;
  flash_block_mask_init(&bm);
  size_t mask_bytes = 0;
  if (has_blocks) {
    const size_t nb = pattern.kv_num_blocks.size() * 4, ib = pattern.kv_indices.size() * 4;
    mask_bytes = nb + ib;
    mask_num.p = dev.alloc(nb);
    mask_idx.p = dev.alloc(ib);
    if (!mask_num.p || !mask_idx.p || !dev.upload(mask_num.p, pattern.kv_num_blocks.data(), nb) ||
        (ib > 0 && !dev.upload(mask_idx.p, pattern.kv_indices.data(), ib))) {
      set_error(row, "FLASH_ERROR_OUT_OF_MEMORY", FLASH_ERROR_OUT_OF_MEMORY, "fa-bench: block mask upload failed: " + dev.last_error());
      return row;
    }
    bm.block_m = pattern.block_m;
    bm.block_n = pattern.block_n;
    bm.num_q_blocks = pattern.num_q_blocks;
    bm.max_kv_blocks = pattern.max_kv_blocks;
    bm.kv_num_blocks = static_cast<const int32_t*>(mask_num.p);
    bm.kv_indices = pattern.max_kv_blocks > 0 ? static_cast<const int32_t*>(mask_idx.p) : nullptr;
    // One pattern for every batch and head: stride 0 broadcasts.
    bm.kv_num_blocks_strides[0] = 0, bm.kv_num_blocks_strides[1] = 0, bm.kv_num_blocks_strides[2] = 1;
    bm.kv_indices_strides[0] = 0, bm.kv_indices_strides[1] = 0, bm.kv_indices_strides[2] = pattern.max_kv_blocks,
    bm.kv_indices_strides[3] = 1;
  }

  // A varlen case's offsets (cu_seqlens_q = cu_seqlens_k: queries = keys in each sequence), on the device of q.
  std::vector<int32_t> cu;
  if (c.is_varlen()) {
    if (flash_version_number() < 10300) {  // cu_seqlens arrived in 1.3
      set_error(row, "FA_BENCH_NOT_SUPPORTED", -1,
                std::string("--varlen is not supported by this library (libflash ") + flash_version_string() +
                    " has no cu_seqlens; it needs 1.3)");
      return row;
    }
    cu.assign(1, 0);
    for (int64_t L : c.varlen) cu.push_back(static_cast<int32_t>(cu.back() + L));
    mask_bytes += cu.size() * 4;
    cu_seqlens.p = dev.alloc(cu.size() * 4);
    if (!cu_seqlens.p || !dev.upload(cu_seqlens.p, cu.data(), cu.size() * 4)) {
      set_error(row, "FLASH_ERROR_OUT_OF_MEMORY", FLASH_ERROR_OUT_OF_MEMORY, "fa-bench: cu_seqlens upload failed: " + dev.last_error());
      return row;
    }
  }

  flash_fwd_args args;
  flash_fwd_args_init(&args);
  const int64_t qshape[4] = {c.batch, c.seqlen_q, c.heads_q, c.head_dim};
  const int64_t kshape[4] = {c.batch, c.seqlen_k, c.heads_kv, c.head_dim};
  const int64_t qshape3[3] = {rows_q, c.heads_q, c.head_dim}, kshape3[3] = {rows_k, c.heads_kv, c.head_dim};
  const int ndim = c.is_varlen() ? 3 : 4;
  const int64_t* qs = c.is_varlen() ? qshape3 : qshape;
  const int64_t* ks = c.is_varlen() ? kshape3 : kshape;
  args.q = flash_tensor_contiguous(in.q, c.dtype, cfg.device_type, cfg.device_id, ndim, qs);
  args.k = flash_tensor_contiguous(in.k, c.dtype, cfg.device_type, cfg.device_id, ndim, ks);
  args.v = flash_tensor_contiguous(in.v, c.dtype, cfg.device_type, cfg.device_id, ndim, ks);
  args.o = flash_tensor_contiguous(in.o, c.dtype, cfg.device_type, cfg.device_id, ndim, qs);
  if (c.is_varlen()) {
    args.cu_seqlens_q = args.cu_seqlens_k = static_cast<const int32_t*>(cu_seqlens.p);
    args.max_seqlen_q = static_cast<int32_t>(c.seqlen_q);
    args.max_seqlen_k = static_cast<int32_t>(c.seqlen_k);
    args.varlen_batch = static_cast<int32_t>(c.batch);
  }
  args.causal = c.mask.causal ? 1 : 0;
  args.causal_alignment = c.mask.alignment;
  args.window_left = c.mask.window_left;
  args.window_right = c.mask.window_right;
  args.algorithm = algo;
  args.block_mask = has_blocks ? &bm : nullptr;
  args.stream = dev.stream();

  // Backward: the forward's LSE, a random dO and the three gradients, all on the device.
  flash_bwd_args bargs;
  flash_bwd_args_init(&bargs);
  size_t bwd_bytes = 0;
  std::vector<unsigned char> hdo;  // dO on the host (for --check)
  if (backward) {
    const size_t lse_bytes = size_t(rows_q * c.heads_q) * 4;
    bwd_bytes = lse_bytes + 2 * in.q_bytes + 2 * in.kv_bytes;
    lse.p = dev.alloc(lse_bytes), d_o.p = dev.alloc(in.q_bytes), dq.p = dev.alloc(in.q_bytes);
    dk.p = dev.alloc(in.kv_bytes), dv.p = dev.alloc(in.kv_bytes);
    if (!lse.p || !d_o.p || !dq.p || !dk.p || !dv.p) {
      set_error(row, "FLASH_ERROR_OUT_OF_MEMORY", FLASH_ERROR_OUT_OF_MEMORY,
                "fa-bench: could not allocate " + human_bytes(double(bwd_bytes)) + " for lse, dO, dQ, dK, dV: " + dev.last_error());
      return row;
    }
    hdo = random_tensor(q_elems, c.dtype, cfg.seed ^ 0xD0D0D0D0ull);
    if (!dev.upload(d_o.p, hdo.data(), in.q_bytes)) {
      set_error(row, "FLASH_ERROR_CUDA", FLASH_ERROR_CUDA, "fa-bench: upload of dO failed: " + dev.last_error());
      return row;
    }
    const int64_t lshape[3] = {c.batch, c.heads_q, c.seqlen_q}, lshape2[2] = {c.heads_q, rows_q};
    args.lse = c.is_varlen() ? flash_tensor_contiguous(lse.p, FLASH_DTYPE_FP32, cfg.device_type, cfg.device_id, 2, lshape2)
                             : flash_tensor_contiguous(lse.p, FLASH_DTYPE_FP32, cfg.device_type, cfg.device_id, 3, lshape);
    bargs.q = args.q, bargs.k = args.k, bargs.v = args.v, bargs.o = args.o, bargs.lse = args.lse;
    bargs.d_o = flash_tensor_contiguous(d_o.p, c.dtype, cfg.device_type, cfg.device_id, ndim, qs);
    bargs.dq = flash_tensor_contiguous(dq.p, c.dtype, cfg.device_type, cfg.device_id, ndim, qs);
    bargs.dk = flash_tensor_contiguous(dk.p, c.dtype, cfg.device_type, cfg.device_id, ndim, ks);
    bargs.dv = flash_tensor_contiguous(dv.p, c.dtype, cfg.device_type, cfg.device_id, ndim, ks);
    bargs.cu_seqlens_q = args.cu_seqlens_q, bargs.cu_seqlens_k = args.cu_seqlens_k;
    bargs.max_seqlen_q = args.max_seqlen_q, bargs.max_seqlen_k = args.max_seqlen_k;
    bargs.varlen_batch = args.varlen_batch;
    bargs.causal = args.causal, bargs.causal_alignment = args.causal_alignment;
    bargs.window_left = args.window_left, bargs.window_right = args.window_right;
    bargs.algorithm = algo;
    bargs.block_mask = args.block_mask;
    bargs.stream = args.stream;
  }

  size_t ws = 0, bws = 0;
  if (const int32_t s = flash_fwd_workspace_size(&args, &ws); s != FLASH_OK) {
    set_flash_error(row, s, "flash_fwd_workspace_size");
    return row;
  }
  if (backward)
    if (const int32_t s = flash_bwd_workspace_size(&bargs, &bws); s != FLASH_OK) {
      set_flash_error(row, s, "flash_bwd_workspace_size");
      return row;
    }
  row["workspace_bytes"] = ws + bws;
  const double peak = double(2 * in.q_bytes + 2 * in.kv_bytes + ws + bws + bwd_bytes + mask_bytes);
  row["peak_mem_bytes"] = static_cast<int64_t>(peak);
  if (ws > 0) {
    if (cfg.device_type == FLASH_DEVICE_CPU && info.total_memory_bytes > 0 && peak > 0.75 * double(info.total_memory_bytes)) {
      set_error(row, "FLASH_ERROR_OUT_OF_MEMORY", FLASH_ERROR_OUT_OF_MEMORY,
                "fa-bench: the call needs " + human_bytes(peak) + " (workspace " + human_bytes(double(ws)) +
                    "), more than 3/4 of the host's memory; not attempted");
      return row;
    }
    workspace.p = dev.alloc(ws);
    if (!workspace.p) {
      set_error(row, "FLASH_ERROR_OUT_OF_MEMORY", FLASH_ERROR_OUT_OF_MEMORY,
                "fa-bench: could not allocate the " + human_bytes(double(ws)) +
                    " workspace flash_fwd_workspace_size asked for: " + dev.last_error());
      return row;
    }
    args.workspace = workspace.p;
    args.workspace_size = ws;
  }
  if (bws > 0) {
    bwd_workspace.p = dev.alloc(bws);
    if (!bwd_workspace.p) {
      set_error(row, "FLASH_ERROR_OUT_OF_MEMORY", FLASH_ERROR_OUT_OF_MEMORY,
                "fa-bench: could not allocate the " + human_bytes(double(bws)) +
                    " backward workspace flash_bwd_workspace_size asked for: " + dev.last_error());
      return row;
    }
    bargs.workspace = bwd_workspace.p;
    bargs.workspace_size = bws;
  }

  if (cfg.check) {  // poison o: a row the library forgets to write shows up as NaN
    std::vector<unsigned char> poison(in.q_bytes, 0xFF);
    dev.upload(in.o, poison.data(), in.q_bytes);
  }
  // The timed call: the forward, the backward (after one untimed forward made O and LSE), or both.
  // call_status is what libflash returned; a different status from time_call means the device failed
  // afterwards (an asynchronous kernel error caught by the event synchronisation).
  const char* failed_in = "flash_fwd";
  int32_t call_status = FLASH_OK;
  auto call = [&]() -> int32_t {
    if (c.mode != "bwd") {
      failed_in = "flash_fwd";
      if ((call_status = flash_fwd(&args)) != FLASH_OK) return call_status;
    }
    if (!backward) return FLASH_OK;
    failed_in = "flash_bwd";
    return call_status = flash_bwd(&bargs);
  };
  int32_t status = FLASH_OK;
  if (c.mode == "bwd") dev.time_call([&] { return call_status = flash_fwd(&args); }, &status);
  Timed timed;
  run_timed(cfg, dev, call, &status, &timed);
  if (status != FLASH_OK) {
    if (call_status == FLASH_OK)
      set_error(row, flash_status_string(status), status,
                std::string("CUDA error after ") + failed_in + " returned: " + dev.last_error());
    else
      set_flash_error(row, status, failed_in);
    return row;
  }
  const int32_t used = backward ? bargs.algorithm_used : args.algorithm_used;
  row["algo_used"] = flash_algorithm_name(used) ? flash_algorithm_name(used) : "unknown";
  double median = 0, fastest = 0;
  record_timing(timed, row, &median, &fastest);
  row["tflops"] = median > 0 ? flops / (median * 1e-3) / 1e12 : 0.0;
  row["tflops_peak"] = fastest > 0 ? flops / (fastest * 1e-3) / 1e12 : 0.0;
  if (!backward) {
    const double model = args.algorithm_used == FLASH_ALGO_NAIVE ? io.naive_bytes : io.flash_bytes;
    row["io_model_bytes"] = model;
    row["io_model_gbps"] = median > 0 ? model / (median * 1e-3) / 1e9 : 0.0;
  }

  if (cfg.check) {
    std::vector<unsigned char> ho(in.q_bytes);
    if (!dev.download(ho.data(), in.o, in.q_bytes)) {
      set_error(row, "FLASH_ERROR_CUDA", FLASH_ERROR_CUDA, "fa-bench: download of o failed: " + dev.last_error());
      return row;
    }
    const CheckResult r = c.is_varlen() ? check_varlen_forward(c, in, ho.data(), cfg.seed)
                                        : check_against_reference(c, mask, in.hq.data(), in.hk.data(), in.hv.data(), ho.data(),
                                                                  cfg.seed);
    row["max_abs_error"] = r.max_abs_error;
    row["max_rel_error"] = r.max_rel_error;
    row["check_tolerance"] = r.tolerance;
    row["check_passed"] = r.passed;
    row["check_sampled_heads"] = r.sampled_heads;
    row["check_sampled_rows"] = r.sampled_rows;
    row["check_scope"] = "o";
    if (backward) {
      std::vector<unsigned char> hdq(in.q_bytes), hdk(in.kv_bytes), hdv(in.kv_bytes);
      if (!dev.download(hdq.data(), dq.p, in.q_bytes) || !dev.download(hdk.data(), dk.p, in.kv_bytes) ||
          !dev.download(hdv.data(), dv.p, in.kv_bytes)) {
        set_error(row, "FLASH_ERROR_CUDA", FLASH_ERROR_CUDA, "fa-bench: download of dq, dk, dv failed: " + dev.last_error());
        return row;
      }
      const GradCheckResult g =
          c.is_varlen() ? check_varlen_backward(c, in, hdo.data(), hdq.data(), hdk.data(), hdv.data(), cfg.seed)
                        : check_backward_against_reference(c, mask, in.hq.data(), in.hk.data(), in.hv.data(), hdo.data(),
                                                           hdq.data(), hdk.data(), hdv.data(), cfg.seed);
      auto val = [](double e) { return e < 0 ? json() : json(e); };
      row["dq_max_rel_error"] = val(g.dq_rel_error);
      row["dk_max_rel_error"] = val(g.dk_rel_error);
      row["dv_max_rel_error"] = val(g.dv_rel_error);
      row["grad_check_tolerance"] = g.tolerance;
      row["check_passed"] = r.passed && g.passed;
      row["check_scope"] = g.dk_rel_error < 0 ? "o, dq (sampled rows); dk, dv too large to check"
                                               : "o, dq, dk, dv";
    }
  }
  return row;
}

// Fills the device buffer dst with the seeded random values (fill_random), through a bounded host buffer; with `keep`,
// the whole host copy stays there (for --check).
bool upload_random(Device& dev, void* dst, size_t elements, int32_t dtype, uint64_t seed, std::vector<unsigned char>* keep) {
  const size_t es = dtype_size(dtype);
  if (keep) {
    keep->resize(elements * es);
    fill_random(keep->data(), 0, elements, dtype, seed);
    return dev.upload(dst, keep->data(), elements * es);
  }
  const size_t chunk = std::max<size_t>(1, std::min(elements, (size_t{256} << 20) / es));
  std::vector<unsigned char> buf(chunk * es);
  for (size_t first = 0; first < elements; first += chunk) {
    const size_t n = std::min(chunk, elements - first);
    fill_random(buf.data(), first, n, dtype, seed);
    if (!dev.upload(static_cast<unsigned char*>(dst) + first * es, buf.data(), n * es)) return false;
  }
  return true;
}

// One --mode decode row: flash_fwd_kvcache on a KV cache of the case's layout. Everything lives on the run's device
// (Device: host memory on the CPU, cudaMalloc on a GPU), the index arrays included, as flash.h asks (index arrays
// on q's device). copy_bw: the device's measured copy bandwidth (bytes/s; <= 0 unknown).
json measure_decode(const Case& c, const RunConfig& cfg, Device& dev, const flash_device_info& info, double copy_bw) {
  json row = base_row(c, device_string(cfg.device_type, cfg.device_id));
  row["warmup"] = cfg.warmup;
  row["reps"] = cfg.reps;
  const int64_t b = c.batch, sq = c.seqlen_q, sk = c.seqlen_k, hq = c.heads_q, hkv = c.heads_kv, d = c.head_dim;
  const int64_t pps = decode_pages_per_seq(c), num_pages = c.page_size > 0 ? b * pps : 0;
  row["page_size"] = c.page_size;
  row["num_pages"] = c.page_size > 0 ? json(num_pages) : json();
  row["num_splits"] = c.num_splits;
  row["append"] = c.append;
  row["cache_seqlens"] = c.cache_seqlens;

  // The keys of each sequence, the exact FLOPs and the minimum bytes.
  const std::vector<int64_t> keys = decode_keys(c, cfg.seed);
  int64_t pairs = 0, keys_total = 0;
  std::map<int64_t, int64_t> pairs_at;  // keys -> visible pairs of one head
  for (int64_t L : keys) {
    auto it = pairs_at.find(L);
    if (it == pairs_at.end()) it = pairs_at.emplace(L, MaskModel(c.mask, sq, L, nullptr).total_pairs()).first;
    pairs += it->second;
    keys_total += L;
  }
  const double flops = forward_flops(pairs, 1, hq, d);  // pairs summed over the sequences: no batch factor
  const double bytes = decode_min_bytes(c, keys);
  row["keys_total"] = keys_total;
  row["visible_pairs"] = pairs;
  row["mask_density"] = double(pairs) / (double(sq) * double(keys_total));
  row["flops"] = flops;
  row["bytes"] = bytes;

  if (flash_version_number() < 10200) {  // flash_fwd_kvcache arrived in 1.2
    set_error(row, "FA_BENCH_NOT_SUPPORTED", -1,
              std::string("mode decode is not supported by this library (libflash ") + flash_version_string() +
                  " has no flash_fwd_kvcache; it needs 1.2)");
    return row;
  }
  const int32_t algo = flash_algorithm_from_name(c.algo.c_str());
  if (algo < 0) {
    set_error(row, "FLASH_ERROR_ALGORITHM_UNAVAILABLE", FLASH_ERROR_ALGORITHM_UNAVAILABLE,
              "'" + c.algo + "' is not an algorithm of this library");
    return row;
  }
  if (num_pages > INT32_MAX || pps > INT32_MAX || sk > INT32_MAX) {
    set_error(row, "FA_BENCH_NOT_SUPPORTED", -1,
              "the block table would need " + std::to_string(num_pages) + " pages: more than int32 holds");
    return row;
  }

  // Sizes: the cache is [batch, seqlen_k, heads_kv, d] or [num_pages, page_size, heads_kv, d].
  const size_t es = dtype_size(c.dtype);
  const int64_t cache_rows = c.page_size > 0 ? num_pages * c.page_size : b * sk;
  const size_t q_elems = size_t(b * sq * hq * d), new_elems = size_t(b * sq * hkv * d);
  const size_t cache_elems = size_t(cache_rows) * size_t(hkv * d);
  const size_t q_bytes = q_elems * es, new_bytes = c.append ? new_elems * es : 0, cache_bytes = cache_elems * es;
  const size_t index_bytes = size_t(b) * 4 + size_t(num_pages) * 4;
  const double device_bytes = 2.0 * double(q_bytes) + 2.0 * double(cache_bytes) + 2.0 * double(new_bytes) + double(index_bytes);
  if (cfg.device_type == FLASH_DEVICE_CPU && info.total_memory_bytes > 0) {
    const double host_copies = cfg.check ? double(q_bytes) + 2.0 * double(cache_bytes) + 2.0 * double(new_bytes) : 0.0;
    if (device_bytes + host_copies > 0.75 * double(info.total_memory_bytes)) {
      set_error(row, "FLASH_ERROR_OUT_OF_MEMORY", FLASH_ERROR_OUT_OF_MEMORY,
                "fa-bench: the cache, q, o" + std::string(c.append ? ", k_new, v_new" : "") +
                    (cfg.check ? " and their host copies" : "") + " need " + human_bytes(device_bytes + host_copies) +
                    ", more than 3/4 of the host's memory; not attempted");
      return row;
    }
  }
  struct Owned {
    Device& d;
    void* p = nullptr;
    ~Owned() { d.release(p); }
  } q{dev}, o{dev}, kc{dev}, vc{dev}, kn{dev}, vn{dev}, seqlens{dev}, table{dev}, workspace{dev};
  q.p = dev.alloc(q_bytes), o.p = dev.alloc(q_bytes), kc.p = dev.alloc(cache_bytes), vc.p = dev.alloc(cache_bytes);
  seqlens.p = dev.alloc(size_t(b) * 4);
  if (c.append) kn.p = dev.alloc(new_bytes), vn.p = dev.alloc(new_bytes);
  if (c.page_size > 0) table.p = dev.alloc(size_t(num_pages) * 4);
  if (!q.p || !o.p || !kc.p || !vc.p || !seqlens.p || (c.append && (!kn.p || !vn.p)) || (c.page_size > 0 && !table.p)) {
    set_error(row, "FLASH_ERROR_OUT_OF_MEMORY", FLASH_ERROR_OUT_OF_MEMORY,
              "fa-bench: could not allocate " + human_bytes(device_bytes) + " for the cache, q, o" +
                  (c.append ? ", k_new, v_new" : "") + " and the index arrays: " + dev.last_error());
    return row;
  }

  // The index arrays, on q's device: cache_seqlens (keys before the call), and for a paged cache a block table that
  // hands out every page once in a random order (so consecutive pages of a sequence are scattered).
  std::vector<int32_t> h_seqlens(size_t(b), 0), h_table;
  for (int64_t i = 0; i < b; ++i) h_seqlens[size_t(i)] = int32_t(keys[size_t(i)] - (c.append ? sq : 0));
  if (c.page_size > 0) {
    h_table.resize(size_t(num_pages));
    for (int64_t i = 0; i < num_pages; ++i) h_table[size_t(i)] = int32_t(i);
    std::mt19937_64 rng(cfg.seed ^ 0xB10CC7ABull ^ uint64_t(num_pages));
    std::shuffle(h_table.begin(), h_table.end(), rng);
  }
  if (!dev.upload(seqlens.p, h_seqlens.data(), size_t(b) * 4) ||
      (c.page_size > 0 && !dev.upload(table.p, h_table.data(), size_t(num_pages) * 4))) {
    set_error(row, "FLASH_ERROR_CUDA", FLASH_ERROR_CUDA, "fa-bench: upload of the index arrays failed: " + dev.last_error());
    return row;
  }

  flash_kvcache_args args;
  flash_kvcache_args_init(&args);
  const int64_t qshape[4] = {b, sq, hq, d}, nshape[4] = {b, sq, hkv, d};
  const int64_t cshape[4] = {c.page_size > 0 ? num_pages : b, c.page_size > 0 ? c.page_size : sk, hkv, d};
  args.q = flash_tensor_contiguous(q.p, c.dtype, cfg.device_type, cfg.device_id, 4, qshape);
  args.o = flash_tensor_contiguous(o.p, c.dtype, cfg.device_type, cfg.device_id, 4, qshape);
  args.k_cache = flash_tensor_contiguous(kc.p, c.dtype, cfg.device_type, cfg.device_id, 4, cshape);
  args.v_cache = flash_tensor_contiguous(vc.p, c.dtype, cfg.device_type, cfg.device_id, 4, cshape);
  if (c.append) {
    args.k_new = flash_tensor_contiguous(kn.p, c.dtype, cfg.device_type, cfg.device_id, 4, nshape);
    args.v_new = flash_tensor_contiguous(vn.p, c.dtype, cfg.device_type, cfg.device_id, 4, nshape);
  }
  args.cache_seqlens = static_cast<const int32_t*>(seqlens.p);
  if (c.page_size > 0) {
    args.block_table = static_cast<const int32_t*>(table.p);
    args.max_pages_per_seq = int32_t(pps);
  }
  args.causal = c.mask.causal ? 1 : 0;
  args.window_left = c.mask.window_left;
  args.window_right = c.mask.window_right;
  args.num_splits = c.num_splits;
  args.algorithm = algo;
  args.stream = dev.stream();

  // The workspace query validates everything (the library's refusal, e.g. CUDA tensors before the GPU kernels
  // exist, shows up here, before any data is generated).
  size_t ws = 0;
  if (const int32_t st = flash_fwd_kvcache_workspace_size(&args, &ws); st != FLASH_OK) {
    set_flash_error(row, st, "flash_fwd_kvcache_workspace_size");
    return row;
  }
  row["workspace_bytes"] = ws;
  row["peak_mem_bytes"] = static_cast<int64_t>(device_bytes + double(ws));
  if (ws > 0) {
    workspace.p = dev.alloc(ws);
    if (!workspace.p) {
      set_error(row, "FLASH_ERROR_OUT_OF_MEMORY", FLASH_ERROR_OUT_OF_MEMORY,
                "fa-bench: could not allocate the " + human_bytes(double(ws)) +
                    " workspace flash_fwd_kvcache_workspace_size asked for: " + dev.last_error());
      return row;
    }
    args.workspace = workspace.p;
    args.workspace_size = ws;
  }

  // The data: uniform in [-1, 1) from the seed and the shape (the layout does not change the values' seeds, only
  // where they sit); host copies kept for --check.
  std::string key = "decode/" + std::to_string(c.dtype) + "/" + std::to_string(b) + "/" + std::to_string(hq) + "/" +
                    std::to_string(hkv) + "/" + std::to_string(sq) + "/" + std::to_string(sk) + "/" + std::to_string(d);
  uint64_t seed = cfg.seed ^ 0xcbf29ce484222325ull;
  for (unsigned char ch : key) seed = (seed ^ ch) * 0x100000001b3ull;
  std::vector<unsigned char> hq_, hk, hv, hkn, hvn;
  const bool keep = cfg.check;
  if (!upload_random(dev, q.p, q_elems, c.dtype, seed + 1, keep ? &hq_ : nullptr) ||
      !upload_random(dev, kc.p, cache_elems, c.dtype, seed + 2, keep ? &hk : nullptr) ||
      !upload_random(dev, vc.p, cache_elems, c.dtype, seed + 3, keep ? &hv : nullptr) ||
      (c.append && (!upload_random(dev, kn.p, new_elems, c.dtype, seed + 4, keep ? &hkn : nullptr) ||
                    !upload_random(dev, vn.p, new_elems, c.dtype, seed + 5, keep ? &hvn : nullptr)))) {
    set_error(row, "FLASH_ERROR_CUDA", FLASH_ERROR_CUDA, "fa-bench: upload of the inputs failed: " + dev.last_error());
    return row;
  }
  if (cfg.check) {  // poison o: a row the library forgets to write shows up as NaN
    std::vector<unsigned char> poison(q_bytes, 0xFF);
    dev.upload(o.p, poison.data(), q_bytes);
  }

  // The timed call. With --append every call writes the same slots with the same values (cache_seqlens is unchanged),
  // so the repetitions are alike.
  int32_t call_status = FLASH_OK, status = FLASH_OK;
  Timed timed;
  run_timed(cfg, dev, [&] { return call_status = flash_fwd_kvcache(&args); }, &status, &timed);
  if (status != FLASH_OK) {
    if (call_status == FLASH_OK)
      set_error(row, flash_status_string(status), status,
                "CUDA error after flash_fwd_kvcache returned: " + dev.last_error());
    else
      set_flash_error(row, status, "flash_fwd_kvcache");
    return row;
  }
  row["algo_used"] = flash_algorithm_name(args.algorithm_used) ? flash_algorithm_name(args.algorithm_used) : "unknown";
  row["num_splits_used"] = args.num_splits_used;
  double median = 0, fastest = 0;
  record_timing(timed, row, &median, &fastest);
  row["tflops"] = median > 0 ? flops / (median * 1e-3) / 1e12 : 0.0;
  row["tflops_peak"] = fastest > 0 ? flops / (fastest * 1e-3) / 1e12 : 0.0;
  if (median > 0) {
    const double rate = bytes / (median * 1e-3);
    row["bytes_per_s"] = rate;
    if (copy_bw > 0) row["copy_bandwidth_fraction"] = rate / copy_bw;
  }

  if (cfg.check) {
    std::vector<unsigned char> ho(q_bytes);
    if (!dev.download(ho.data(), o.p, q_bytes)) {
      set_error(row, "FLASH_ERROR_CUDA", FLASH_ERROR_CUDA, "fa-bench: download of o failed: " + dev.last_error());
      return row;
    }
    const CheckResult r = check_decode_against_reference(c, keys, c.page_size > 0 ? h_table.data() : nullptr, hq_.data(),
                                                         hk.data(), hv.data(), c.append ? hkn.data() : nullptr,
                                                         c.append ? hvn.data() : nullptr, ho.data(), cfg.seed);
    row["max_abs_error"] = r.max_abs_error;
    row["max_rel_error"] = r.max_rel_error;
    row["check_tolerance"] = r.tolerance;
    row["check_passed"] = r.passed;
    row["check_sampled_heads"] = r.sampled_heads;
    row["check_sampled_rows"] = r.sampled_rows;
    row["check_scope"] = "o";
    if (c.append) {
      // The cache after the calls: every appended slot holds k_new/v_new, every other slot what was uploaded (bitwise),
      // one token row (heads_kv x d elements) at a time.
      std::vector<char> appended(size_t(cache_rows), 0);
      std::vector<int64_t> slot_of(size_t(b * sq));  // (sequence, new token) -> cache row
      for (int64_t i = 0; i < b; ++i)
        for (int64_t t = 0; t < sq; ++t) {
          const int64_t pos = h_seqlens[size_t(i)] + t;
          const int64_t r_ = c.page_size > 0
                                 ? int64_t(h_table[size_t(i * pps + pos / c.page_size)]) * c.page_size + pos % c.page_size
                                 : i * sk + pos;
          slot_of[size_t(i * sq + t)] = r_;
          appended[size_t(r_)] = 1;
        }
      const size_t row_bytes = size_t(hkv * d) * es;
      std::vector<unsigned char> after(cache_bytes);
      int64_t mismatches = 0;
      for (int which = 0; which < 2; ++which) {
        const std::vector<unsigned char>& before = which ? hv : hk;
        const std::vector<unsigned char>& fresh = which ? hvn : hkn;
        if (!dev.download(after.data(), which ? vc.p : kc.p, cache_bytes)) {
          set_error(row, "FLASH_ERROR_CUDA", FLASH_ERROR_CUDA, "fa-bench: download of the cache failed: " + dev.last_error());
          return row;
        }
        for (int64_t r_ = 0; r_ < cache_rows; ++r_)
          if (!appended[size_t(r_)])
            mismatches += std::memcmp(after.data() + size_t(r_) * row_bytes, before.data() + size_t(r_) * row_bytes, row_bytes) != 0;
        for (int64_t j = 0; j < b * sq; ++j)
          mismatches += std::memcmp(after.data() + size_t(slot_of[size_t(j)]) * row_bytes, fresh.data() + size_t(j) * row_bytes,
                                    row_bytes) != 0;
      }
      row["check_append_mismatches"] = mismatches;
      row["check_passed"] = r.passed && mismatches == 0;
      row["check_scope"] = "o; k_cache, v_cache after the append (bitwise)";
    }
  }
  return row;
}

std::string iso_date_utc() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void progress(size_t done, size_t total, const std::string& what) {
  constexpr int kWidth = 30;
  const int filled = total ? int(kWidth * done / total) : kWidth;
  std::fprintf(stderr, "\r[%.*s%*s] %zu/%zu %-60.60s", filled, "##############################", kWidth - filled, "", done,
               total, what.c_str());
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

}  // namespace

IoModel io_model(const Case& c, int64_t shared_mem_per_sm, double f) {
  const double e = double(dtype_size(c.dtype)), d = double(c.head_dim), sq = double(c.seqlen_q), sk = double(c.seqlen_k);
  const double bh = double(c.batch) * double(c.heads_q);
  IoModel m{};
  // Standard attention (paper, Algorithm 0): read Q, K; write S; read S, write P; read P, V; write O.
  m.naive_bytes = bh * e * (2 * sq * d + 2 * sk * d + 4 * sq * sk);
  // FlashAttention (Algorithm 1): K and V read once; for each of the Tc key blocks every query block
  // reads Q_i and O_i and writes O_i (3 e sq d) and reads and writes l_i, m_i in fp32 (16 sq). Key blocks
  // the mask skips entirely are not visited, so that term scales with the visible fraction f.
  const double M = shared_mem_per_sm > 0 ? double(shared_mem_per_sm) : 48.0 * 1024;
  m.block_c = std::max<int64_t>(1, int64_t(std::ceil(M / (4.0 * d * e))));
  const double tc = std::ceil(sk / double(m.block_c));
  m.flash_bytes = bh * (e * 2 * sk * d + f * tc * (3 * e * sq * d + 16 * sq));
  return m;
}

int64_t decode_pages_per_seq(const Case& c) {
  return c.page_size > 0 ? (c.seqlen_k + c.page_size - 1) / c.page_size : 0;
}

std::vector<int64_t> decode_keys(const Case& c, uint64_t seed) {
  std::vector<int64_t> keys(size_t(c.batch), c.seqlen_k);
  if (c.cache_seqlens != "random") return keys;
  const int64_t lo = std::min(c.seqlen_k, std::max<int64_t>(1, c.seqlen_q));
  std::mt19937_64 rng(seed ^ 0x5E9A11E5ull ^ (uint64_t(c.batch) << 32) ^ uint64_t(c.seqlen_k) ^ (uint64_t(c.seqlen_q) << 48));
  for (int64_t& k : keys) k = lo + int64_t(rng() % uint64_t(c.seqlen_k - lo + 1));
  return keys;
}

double decode_min_bytes(const Case& c, const std::vector<int64_t>& keys) {
  const double e = double(dtype_size(c.dtype)), d = double(c.head_dim);
  // Keys some query of the sequence sees: the union of the rows' windows (each row's is an interval).
  std::map<int64_t, int64_t> seen_at;
  double seen = 0;
  for (int64_t L : keys) {
    auto it = seen_at.find(L);
    if (it == seen_at.end()) {
      const MaskModel m(c.mask, c.seqlen_q, L, nullptr);
      std::vector<std::pair<int64_t, int64_t>> runs;
      for (int64_t i = 0; i < c.seqlen_q; ++i) m.for_each_run(i, [&](int64_t a, int64_t z) { runs.emplace_back(a, z); });
      std::sort(runs.begin(), runs.end());
      int64_t n = 0, end = 0;
      for (const auto& [a, z] : runs) {
        const int64_t from = std::max(a, end);
        if (z > from) n += z - from;
        end = std::max(end, z);
      }
      it = seen_at.emplace(L, n).first;
    }
    seen += double(it->second);
  }
  const double qo = 2.0 * e * double(c.batch) * double(c.seqlen_q) * double(c.heads_q) * d;
  const double kv = 2.0 * e * double(c.heads_kv) * d * seen;
  const double append = c.append ? 4.0 * e * double(c.batch) * double(c.seqlen_q) * double(c.heads_kv) * d : 0.0;
  return qo + kv + append;
}

json make_meta(const RunConfig& cfg) {
  json meta;
  meta["tool"] = "fa-bench";
  meta["argv"] = cfg.argv;
  meta["library_version"] = flash_version_string();
  meta["library_version_number"] = flash_version_number();
  meta["build_info"] = flash_build_info();
  const char* env_rev = std::getenv("FA_BENCH_GIT_REVISION");
  meta["git_revision"] = env_rev && *env_rev ? env_rev : FA_BENCH_GIT_REVISION;
  meta["date"] = iso_date_utc();
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  meta["hostname"] = host;
  meta["fa_bench_cuda_runtime"] = built_with_cuda();
  flash_device_info info;
  flash_device_info_init(&info);
  json dev;
  dev["type"] = cfg.device_type == FLASH_DEVICE_CUDA ? "cuda" : "cpu";
  dev["id"] = cfg.device_id;
  dev["string"] = device_string(cfg.device_type, cfg.device_id);
  if (flash_get_device_info(cfg.device_type, cfg.device_id, &info) == FLASH_OK) {
    dev["name"] = info.name;
    dev["compute_capability"] = std::to_string(info.cc_major) + "." + std::to_string(info.cc_minor);
    dev["multiprocessors"] = info.multiprocessors;
    dev["clock_khz"] = info.clock_khz;
    dev["memory_clock_khz"] = info.memory_clock_khz;
    dev["memory_bus_width_bits"] = info.memory_bus_width_bits;
    dev["shared_mem_per_sm_bytes"] = info.shared_mem_per_sm;
    dev["shared_mem_per_block_optin_bytes"] = info.shared_mem_per_block_optin;
    dev["l2_cache_bytes"] = info.l2_cache_bytes;
    dev["total_memory_bytes"] = info.total_memory_bytes;
    dev["algorithms"] = algorithm_names(info.algorithms);
  } else {
    dev["name"] = "unknown";
    dev["error"] = flash_last_error_message();
  }
  meta["device"] = dev;
  meta["timing"] = {{"method", cfg.device_type == FLASH_DEVICE_CUDA ? "cuda_events" : "steady_clock"},
                    {"statistic", "median, min, max and mean over reps, after warmup untimed calls"},
                    {"warmup", cfg.warmup},
                    {"reps", cfg.reps},
                    {"cache_flush", cfg.flush ? "a buffer of twice the last-level cache (l2_cache_bytes) is written before each timed call"
                                              : "none (--no-flush)"},
                    {"clock_sampling", cfg.sample_clock == "none"
                                           ? "none (--sample-clock)"
                                           : std::string("the SM clock and the driver's clock-limit reasons (power cap, "
                                                         "thermal, hardware slowdown) through NVML, ") +
                                                 (cfg.sample_clock == "after" ? "once just after each timed call"
                                                                              : "by a host thread from each timed call's "
                                                                                "start to its end") +
                                                 ": sm_clock_mhz_median (the median over reps of a call's mean), "
                                                 "sm_clock_mhz_min (the lowest sample), clock_limited_reps (calls with a "
                                                 "limit in any sample); null without NVML"}};
  meta["flop_model"] =
      "forward: 4 * head_dim FLOPs per visible (query, key) pair, pairs counted exactly from the mask applied "
      "(alignment, window, block mask), times batch * heads_q; bwd = 2.5x, fwd_bwd = 3.5x forward; decode: 4 * head_dim "
      "* heads_q per visible (new query, key) pair summed over the sequences (4 * batch * heads_q * seqlen_q * seqlen_k * "
      "head_dim for full caches without a mask); varlen: 4 * head_dim * heads_q per visible pair summed over the "
      "sequences, each under its own mask at its own length";
  meta["peak_mem_method"] =
      "analytic: bytes of q, k, v, o + flash_fwd_workspace_size (the workspace is passed explicitly, so the library "
      "allocates nothing else) + the block mask arrays";
  meta["io_model"] = {
      {"source", "FlashAttention (Dao et al. 2022): Algorithm 0 (standard) and Algorithm 1 / Theorem 2 (flash)"},
      {"naive_bytes", "e*b*h*(2*sq*d + 2*sk*d + 4*sq*sk): read Q,K; write S; read S, write P; read P,V; write O; S and P at the input dtype's size e"},
      {"flash_bytes", "b*h*(e*2*sk*d + f*Tc*(3*e*sq*d + 16*sq)), Bc = ceil(M/(4*d*e)), Tc = ceil(sk/Bc), f = visible fraction of the mask"},
      {"M_bytes", info.shared_mem_per_sm},
      {"M_source", "flash_device_info.shared_mem_per_sm"}};
  meta["check"] = {{"enabled", cfg.check},
                   {"reference", "fp64 on the host from the dtype-rounded inputs; max_rel_error = max|o-ref| / max|ref|"},
                   {"sampling", "all heads and rows up to 4e8 multiply-adds; beyond that 4 (batch, head) pairs and evenly spaced rows"}};
  meta["seed"] = cfg.seed;
  return meta;
}

void add_speedups(json& results) {
  std::map<std::string, double> naive;
  auto key = [](const json& r) {
    return r["mode"].get<std::string>() + "|" + r["dtype"].get<std::string>() + "|" + r["batch"].dump() + "|" +
           r["heads_q"].dump() + "|" + r["heads_kv"].dump() + "|" + r["seqlen_q"].dump() + "|" + r["seqlen_k"].dump() + "|" +
           r["head_dim"].dump() + "|" + r["mask"].get<std::string>();
  };
  for (const json& r : results)
    if (r["algo"] == "naive" && r["error"].is_null() && r["time_ms_median"].is_number())
      naive[key(r)] = r["time_ms_median"].get<double>();
  for (json& r : results) {
    if (r["algo"] == "naive" || !r["error"].is_null() || !r["time_ms_median"].is_number()) continue;
    const auto it = naive.find(key(r));
    const double t = r["time_ms_median"].get<double>();
    if (it != naive.end() && t > 0) r["speedup_over_naive"] = it->second / t;
  }
}

json run_benchmark(const RunConfig& cfg) {
  json doc;
  doc["schema_version"] = kSchemaVersion;
  doc["meta"] = make_meta(cfg);
  doc["results"] = json::array();
  flash_device_info info;
  flash_device_info_init(&info);
  if (flash_get_device_info(cfg.device_type, cfg.device_id, &info) != FLASH_OK)
    throw std::runtime_error("device " + device_string(cfg.device_type, cfg.device_id) + ": " + flash_last_error_message());
  std::string err;
  std::unique_ptr<Device> dev = open_device(cfg.device_type, cfg.device_id, info.l2_cache_bytes, &err);
  if (!dev) throw std::runtime_error(err);
  dev->set_clock_sampling(cfg.sample_clock == "after" ? 1 : cfg.sample_clock == "during" ? 2 : 0);
  doc["meta"]["timing"]["cache_flush_bytes"] = cfg.flush ? dev->flush_bytes() : 0;
  const std::vector<Case> cases = expand_cases(cfg);
  // Decode rows are read against the device's copy bandwidth, measured once per run.
  double copy_bw = -1;
  if (std::any_of(cases.begin(), cases.end(), [](const Case& c) { return c.mode == "decode"; })) {
    const bool gpu = cfg.device_type == FLASH_DEVICE_CUDA;
    int64_t buffer = gpu ? int64_t{1} << 30 : int64_t{256} << 20;
    if (info.total_memory_bytes > 0) buffer = std::min<int64_t>(buffer, info.total_memory_bytes / (gpu ? 8 : 16));
    const int copies = gpu ? 10 : 5;
    copy_bw = dev->copy_bandwidth(size_t(buffer), copies);
    json cb = {{"bytes_per_s", copy_bw > 0 ? json(copy_bw) : json()},
               {"buffer_bytes", buffer},
               {"copies", copies},
               {"method", gpu ? "cudaMemcpyAsync device to device on fa-bench's stream, timed with CUDA events"
                              : "host memcpy split over the hardware threads (std::thread::hardware_concurrency), timed "
                                "with steady_clock"},
               {"statistic", "median over the timed copies after one untimed copy; bytes = 2 x buffer (read + write)"}};
    if (copy_bw <= 0) cb["error"] = dev->last_error();
    doc["meta"]["copy_bandwidth"] = cb;
    doc["meta"]["decode_bytes_model"] =
        "minimum bytes of a decode call: q read + o written (2 * batch * seqlen_q * heads_q * d * e) + K and V of every "
        "key some new query of the sequence sees, read once per kv head (2 * heads_kv * d * e per key) + with --append "
        "k_new and v_new read and written into the cache (4 * batch * seqlen_q * heads_kv * d * e); the index arrays "
        "are not counted";
  }
  const bool bar = cfg.progress && cases.size() > 1 && isatty(STDERR_FILENO);
  Inputs inputs;
  inputs.dev = dev.get();
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    if (bar)
      progress(i, cases.size(), c.mode + " " + c.algo + " " + dtype_name(c.dtype) + " sq=" + std::to_string(c.seqlen_q) +
                                    (c.mode == "decode" ? " b=" + std::to_string(c.batch) + " sk=" + std::to_string(c.seqlen_k) +
                                                              " page=" + std::to_string(c.page_size)
                                                        : "") +
                                    " d=" + std::to_string(c.head_dim) + " " + c.mask.label());
    if (c.mode == "decode") {
      inputs.release();  // the shared inputs of the other modes are not used: free them for the cache
      inputs.key.clear();
      doc["results"].push_back(measure_decode(c, cfg, *dev, info, copy_bw));
    } else {
      doc["results"].push_back(measure(c, cfg, *dev, info, inputs));
    }
  }
  if (bar) progress(cases.size(), cases.size(), "done");
  add_speedups(doc["results"]);
  return doc;
}

}  // namespace fabench
