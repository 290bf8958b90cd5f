// cli/src/options.cpp -- `fa-bench run` flags, device defaults and the expansion into cases.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>

#include <cxxopts.hpp>

#include "bench.hpp"
#include "device.hpp"

namespace fabench {

const char* dtype_name(int32_t dtype) {
  switch (dtype) {
    case FLASH_DTYPE_FP32: return "fp32";
    case FLASH_DTYPE_FP16: return "fp16";
    case FLASH_DTYPE_BF16: return "bf16";
    default: return "unknown";
  }
}

int32_t dtype_from_name(const std::string& name) {
  if (name == "fp32" || name == "float32") return FLASH_DTYPE_FP32;
  if (name == "fp16" || name == "float16" || name == "half") return FLASH_DTYPE_FP16;
  if (name == "bf16" || name == "bfloat16") return FLASH_DTYPE_BF16;
  return -1;
}

size_t dtype_size(int32_t dtype) { return dtype == FLASH_DTYPE_FP32 ? 4 : 2; }

std::string device_string(int32_t type, int32_t id) {
  return type == FLASH_DEVICE_CUDA ? "cuda:" + std::to_string(id) : std::string("cpu");
}

void parse_device(const std::string& s, int32_t* type, int32_t* id) {
  if (s == "cpu") {
    *type = FLASH_DEVICE_CPU;
    *id = 0;
    return;
  }
  if (s == "cuda" || s == "gpu") {
    *type = FLASH_DEVICE_CUDA;
    *id = 0;
    return;
  }
  if (s.rfind("cuda:", 0) == 0) {
    const std::string n = s.substr(5);
    if (!n.empty() && std::all_of(n.begin(), n.end(), ::isdigit) && n.size() < 6) {
      *type = FLASH_DEVICE_CUDA;
      *id = std::stoi(n);
      return;
    }
  }
  throw std::invalid_argument("--device '" + s + "': expected cpu, cuda or cuda:N");
}

std::vector<std::string> algorithm_names(uint32_t mask) {
  std::vector<std::string> out;
  for (int32_t a = 0; a < 32; ++a)
    if (mask & (1u << a))
      if (const char* n = flash_algorithm_name(a)) out.push_back(n);
  return out;
}

namespace {

cxxopts::Options make_options() {
  cxxopts::Options o("fa-bench run", "Measure libflash attention (flash vs naive) on one shape or a sweep.");
  o.add_options()
    ("device", "cpu | cuda | cuda:N (default: the first GPU, else the CPU)", cxxopts::value<std::string>())
    ("algo", "algorithms, comma separated: auto, cpu, naive, sm80, sm90 (default: every one the device has)",
     cxxopts::value<std::vector<std::string>>())
    ("batch", "batch size", cxxopts::value<int64_t>()->default_value("2"))
    ("heads", "query heads", cxxopts::value<int64_t>()->default_value("8"))
    ("heads-kv", "key/value heads (GQA/MQA; default = --heads)", cxxopts::value<int64_t>())
    ("seqlen", "query sequence lengths, comma separated (default 1024; decode: new tokens per sequence, default 1)",
     cxxopts::value<std::vector<int64_t>>())
    ("seqlen-k", "key sequence length (default = each --seqlen; decode: the keys each sequence attends to, its cache "
                 "capacity, default 4096)", cxxopts::value<int64_t>())
    ("head-dim", "head dims, comma separated (default 128; the grid: 64,128)", cxxopts::value<std::vector<int64_t>>())
    ("dtype", "fp16 | bf16 | fp32, comma separated (default bf16 on a GPU and for --grid decode, fp32 on the CPU)",
     cxxopts::value<std::vector<std::string>>())
    ("causal", "causal mask (bottom-right aligned), added to every --mask")
    ("mask", "mask terms joined by '+', alternatives separated by ';': none, causal, causal-br, causal-tl, "
             "window:L,R, window-tl:L,R, block-sparse:DENSITY[:BLOCK], block-sparse-file:PATH (DENSITY: a random map of "
             "round(DENSITY x all blocks) blocks, every query block floor or ceil of the mean, from --seed). "
             "decode: none, causal, window:L,R only (bottom-right per sequence)",
     cxxopts::value<std::string>()->default_value("none"))
    ("mode", "fwd | bwd | fwd_bwd | decode, comma separated (bwd and fwd_bwd need libflash 1.1, decode 1.2; an "
             "algorithm without a backward gives an error row). decode: flash_fwd_kvcache, --seqlen new tokens of each "
             "of --batch sequences over a KV cache of --seqlen-k keys; the naive algorithm is skipped for decode, and sm90 "
             "unless named (the sm80 KV-cache kernels serve sm_90 too) "
             "(flash_fwd_kvcache has no naive backend, and naive flash_fwd on a gathered copy would time another "
             "operation: no paging, no append). decode rows report bytes/s against the device's copy bandwidth, measured once "
             "a run (GPU: device-to-device cudaMemcpy of 1 GiB; CPU: host memcpy of 256 MiB over the hardware threads)",
     cxxopts::value<std::vector<std::string>>()->default_value("fwd"))
    ("grid", "standard: the papers' grid (batch*seqlen = 16384, hidden 2048 so heads = 2048/d, seqlen 512..16384). "
             "decode: the issue's decode cases (implies --mode decode; bf16, heads 32/8, d 128, 1 new token, batch x keys "
             "1x8k 1x128k 16x8k 16x32k 64x4k 64x32k 128x2k, --page-size 0,16,256; --dtype, --head-dim, --seqlen and "
             "--page-size override, the grid fixes batch, keys and heads)",
     cxxopts::value<std::string>())
    ("page-size", "decode: KV cache page sizes, comma separated (a swept axis); 0 = contiguous [batch, seqlen_k, "
                  "heads_kv, d], else paged: batch * ceil(seqlen_k / page_size) pages of [page_size, heads_kv, d] with a "
                  "block table in a random page order (default 0; the decode grid 0,16,256)",
     cxxopts::value<std::vector<int64_t>>())
    ("num-splits", "decode: flash_kvcache_args.num_splits (0 = the library's choice, 1 = no split, up to 256)",
     cxxopts::value<int32_t>()->default_value("0"))
    ("append", "decode: pass k_new/v_new (--seqlen tokens appended to the cache first): the cache then holds "
               "seqlen_k - seqlen keys before the call, seqlen_k after")
    ("cache-seqlens", "decode: full (every sequence attends to --seqlen-k keys) | random (each sequence's key count "
                      "uniform in [max(1, --seqlen), --seqlen-k], from --seed)",
     cxxopts::value<std::string>()->default_value("full"))
    ("varlen", "a packed variable-length batch (flash.h 1.3, cu_seqlens; modes fwd, bwd, fwd_bwd): uniform:LO:HI "
               "draws sequence lengths uniform in [LO, HI] from --seed until they sum to --total-tokens (the last one "
               "cut to fit); queries = keys in each sequence. --batch, --seqlen and --seqlen-k do not apply",
     cxxopts::value<std::string>())
    ("varlen-lengths", "a packed variable-length batch of these sequence lengths, comma separated (0 allowed; "
                       "queries = keys in each sequence)", cxxopts::value<std::vector<int64_t>>())
    ("total-tokens", "--varlen uniform:LO:HI: the tokens of the batch (the sum of its lengths)", cxxopts::value<int64_t>())
    ("warmup", "untimed calls before timing (default GPU 5, CPU 1)", cxxopts::value<int>())
    ("reps", "timed repetitions (default GPU 20, CPU 3)", cxxopts::value<int>())
    ("check", "compare the output with an fp64 reference (heads and rows sampled for large shapes)")
    ("no-flush", "do not flush the last-level cache between repetitions")
    ("sample-clock", "none | after | during: read the SM clock and the clock-limit reasons through NVML just after each "
     "timed call, or from a host thread while it runs (about a sample a millisecond)",
     cxxopts::value<std::string>()->default_value("none"))
    ("json", "write results as JSON (schema: bench_results/README.md)", cxxopts::value<std::string>())
    ("csv", "write results as CSV", cxxopts::value<std::string>())
    ("seed", "random seed for inputs and random block masks", cxxopts::value<uint64_t>()->default_value("24301"))
    ("no-progress", "no progress bar on stderr")
    ("h,help", "this help");
  return o;
}

template <class T>
void require_positive(const std::vector<T>& v, const char* flag) {
  for (const T& x : v)
    if (x <= 0) throw std::invalid_argument(std::string("--") + flag + " values must be positive");
}

// --varlen / --varlen-lengths / --total-tokens into cfg->varlen_lengths (after --seed and the masks were read).
void parse_varlen(const cxxopts::ParseResult& r, bool decode, RunConfig* cfg) {
  const bool uniform = r.count("varlen") > 0, listed = r.count("varlen-lengths") > 0;
  if (!uniform && !listed) {
    if (r.count("total-tokens")) throw std::invalid_argument("--total-tokens applies to --varlen uniform:LO:HI only");
    return;
  }
  if (uniform && listed) throw std::invalid_argument("--varlen and --varlen-lengths are two ways to give the lengths: use one");
  if (decode) throw std::invalid_argument("--varlen with --mode decode: flash_fwd_kvcache has its own cache_seqlens");
  if (!cfg->grid.empty()) throw std::invalid_argument("--varlen with --grid: the grids are dense batches");
  for (const char* f : {"batch", "seqlen", "seqlen-k"})
    if (r.count(f))
      throw std::invalid_argument(std::string("--") + f + " does not apply to a packed variable-length batch (--varlen): "
                                  "the lengths give the sequences and their longest the max_seqlen");
  for (const MaskSpec& m : cfg->masks)
    if (m.block != MaskSpec::Block::kNone)
      throw std::invalid_argument("--mask '" + m.label() + "' with --varlen: block-sparse masks are not supported with "
                                  "packed variable-length batches (flash.h)");
  if (listed) {
    cfg->varlen_lengths = r["varlen-lengths"].as<std::vector<int64_t>>();
    cfg->varlen_source = "lengths";
    if (r.count("total-tokens")) throw std::invalid_argument("--total-tokens applies to --varlen uniform:LO:HI only");
  } else {
    const std::string spec = r["varlen"].as<std::string>();
    int64_t lo = -1, hi = -1;
    char tail = 0;
    if (std::sscanf(spec.c_str(), "uniform:%" SCNd64 ":%" SCNd64 "%c", &lo, &hi, &tail) != 2)
      throw std::invalid_argument("--varlen '" + spec + "': expected uniform:LO:HI (e.g. uniform:1:2048)");
    if (!r.count("total-tokens")) throw std::invalid_argument("--varlen " + spec + " needs --total-tokens N");
    cfg->varlen_lengths = varlen_uniform_lengths(lo, hi, r["total-tokens"].as<int64_t>(), cfg->seed);
    cfg->varlen_source = "uniform:" + std::to_string(lo) + ":" + std::to_string(hi);
  }
  int64_t total = 0;
  for (int64_t L : cfg->varlen_lengths) {
    if (L < 0 || L > (int64_t{1} << 30))
      throw std::invalid_argument("--varlen-lengths " + std::to_string(L) + ": each length must be in [0, 2^30]");
    total += L;
  }
  if (total < 1 || total > std::numeric_limits<int32_t>::max())
    throw std::invalid_argument("--varlen: the lengths sum to " + std::to_string(total) +
                                " tokens, but must be in [1, 2^31-1] (cu_seqlens are int32)");
  if (cfg->varlen_lengths.size() > size_t{std::numeric_limits<int32_t>::max() - 1})
    throw std::invalid_argument("--varlen: too many sequences");
}

}  // namespace

std::vector<int64_t> varlen_uniform_lengths(int64_t lo, int64_t hi, int64_t total, uint64_t seed) {
  if (lo < 0 || hi < lo || hi < 1)
    throw std::invalid_argument("--varlen uniform:" + std::to_string(lo) + ":" + std::to_string(hi) +
                                ": expected 0 <= LO <= HI and HI >= 1");
  if (total < 1) throw std::invalid_argument("--total-tokens must be positive");
  std::mt19937_64 rng(seed ^ 0x7a41e0ull);  // (raw draws, mapped here: the same lengths on every platform)
  std::vector<int64_t> out;
  for (int64_t sum = 0; sum < total;) {
    const int64_t L = std::min(lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1)), total - sum);
    out.push_back(L);
    sum += L;
  }
  return out;
}

int64_t Case::total_tokens() const {
  if (!is_varlen()) return batch * seqlen_q;
  int64_t t = 0;
  for (int64_t L : varlen) t += L;
  return t;
}

int64_t varlen_visible_pairs(const Case& c) {
  if (!c.is_varlen()) return MaskModel(c.mask, c.seqlen_q, c.seqlen_k, nullptr).total_pairs();
  std::map<int64_t, int64_t> at;  // length -> pairs of one sequence of that length
  int64_t pairs = 0;
  for (int64_t L : c.varlen) {
    if (L == 0) continue;
    auto it = at.find(L);
    if (it == at.end()) it = at.emplace(L, MaskModel(c.mask, L, L, nullptr).total_pairs()).first;
    pairs += it->second;
  }
  return pairs;
}

std::string run_help() { return make_options().help(); }

RunConfig parse_run_args(int argc, const char* const* argv) {
  // Skip a leading "run" so `fa-bench run ...` and `fa-bench ...` parse alike.
  std::vector<const char*> args(argv, argv + argc);
  if (args.size() > 1 && std::strcmp(args[1], "run") == 0) args.erase(args.begin() + 1);
  RunConfig cfg;
  for (int i = 0; i < argc; ++i) cfg.argv.push_back(argv[i]);
  cxxopts::Options options = make_options();
  cxxopts::ParseResult r;
  try {
    r = options.parse(static_cast<int>(args.size()), args.data());
  } catch (const cxxopts::exceptions::exception& e) {
    throw std::invalid_argument(e.what());
  }
  if (!r.unmatched().empty()) throw std::invalid_argument("unexpected argument '" + r.unmatched()[0] + "'");
  if (r.count("device")) {
    parse_device(r["device"].as<std::string>(), &cfg.device_type, &cfg.device_id);
    cfg.device_given = true;
  }
  if (r.count("algo")) {
    for (const std::string& a : r["algo"].as<std::vector<std::string>>()) {
      if (flash_algorithm_from_name(a.c_str()) < 0) {
        std::string known;
        for (int32_t i = 0; i < FLASH_ALGO_COUNT; ++i)
          if (const char* n = flash_algorithm_name(i)) known += std::string(known.empty() ? "" : ", ") + n;
        throw std::invalid_argument("--algo '" + a + "' is not an algorithm of this library (" + known + ")");
      }
      cfg.algos.push_back(a);
      cfg.algos_given = true;
    }
  }
  for (const std::string& m : r["mode"].as<std::vector<std::string>>()) {
    if (m != "fwd" && m != "bwd" && m != "fwd_bwd" && m != "decode")
      throw std::invalid_argument("--mode '" + m + "': expected fwd, bwd, fwd_bwd or decode");
  }
  cfg.modes = r["mode"].as<std::vector<std::string>>();
  if (r.count("dtype"))
    for (const std::string& d : r["dtype"].as<std::vector<std::string>>()) {
      const int32_t t = dtype_from_name(d);
      if (t < 0) throw std::invalid_argument("--dtype '" + d + "': expected fp16, bf16 or fp32");
      cfg.dtypes.push_back(t);
    }
  cfg.batch = r["batch"].as<int64_t>();
  cfg.heads = r["heads"].as<int64_t>();
  if (r.count("heads-kv")) cfg.heads_kv = r["heads-kv"].as<int64_t>();
  if (cfg.batch <= 0 || cfg.heads <= 0 || (r.count("heads-kv") && cfg.heads_kv <= 0))
    throw std::invalid_argument("--batch, --heads and --heads-kv must be positive");
  if (cfg.heads_kv > 0 && cfg.heads % cfg.heads_kv != 0)
    throw std::invalid_argument("--heads (" + std::to_string(cfg.heads) + ") must be a multiple of --heads-kv (" +
                                std::to_string(cfg.heads_kv) + ")");
  if (r.count("seqlen")) cfg.seqlens = r["seqlen"].as<std::vector<int64_t>>();
  require_positive(cfg.seqlens, "seqlen");
  if (r.count("seqlen-k")) {
    cfg.seqlen_k = r["seqlen-k"].as<int64_t>();
    if (cfg.seqlen_k <= 0) throw std::invalid_argument("--seqlen-k must be positive");
  }
  if (r.count("head-dim")) cfg.head_dims = r["head-dim"].as<std::vector<int64_t>>();
  require_positive(cfg.head_dims, "head-dim");
  cfg.causal = r.count("causal") > 0;
  cfg.masks = parse_mask_list(r["mask"].as<std::string>());
  if (cfg.causal)
    for (MaskSpec& m : cfg.masks) {
      if (m.causal && m.alignment != FLASH_ALIGN_BOTTOM_RIGHT)
        throw std::invalid_argument("--causal (bottom-right) conflicts with a top-left mask; use --mask causal-tl alone");
      m.causal = true;
    }
  if (r.count("grid")) {
    cfg.grid = r["grid"].as<std::string>();
    if (cfg.grid != "standard" && cfg.grid != "decode")
      throw std::invalid_argument("--grid '" + cfg.grid + "': the grids are 'standard' and 'decode'");
  }
  if (cfg.grid == "decode" && !r.count("mode")) cfg.modes = {"decode"};
  const bool decode = std::find(cfg.modes.begin(), cfg.modes.end(), "decode") != cfg.modes.end();
  if (cfg.grid == "decode" && (cfg.modes.size() != 1 || !decode))
    throw std::invalid_argument("--grid decode is the decode grid: use it with --mode decode alone");
  if (cfg.grid == "standard" && decode)
    throw std::invalid_argument("--grid standard has no decode cases: use --grid decode (with --mode decode alone)");
  // The decode options: only with --mode decode, each checked here so a bad value is a usage error.
  for (const char* f : {"page-size", "num-splits", "append", "cache-seqlens"})
    if (r.count(f) && !decode)
      throw std::invalid_argument(std::string("--") + f + " applies to --mode decode only");
  if (r.count("page-size")) {
    cfg.page_sizes = r["page-size"].as<std::vector<int64_t>>();
    for (int64_t p : cfg.page_sizes)
      if (p < 0 || p > (int64_t{1} << 30))
        throw std::invalid_argument("--page-size " + std::to_string(p) +
                                    ": expected 0 (a contiguous cache) or a positive page size in tokens");
  }
  cfg.num_splits = r["num-splits"].as<int32_t>();
  if (cfg.num_splits < 0 || cfg.num_splits > 256)
    throw std::invalid_argument("--num-splits " + std::to_string(cfg.num_splits) +
                                ": expected 0 (the library's choice) to 256");
  cfg.append = r.count("append") > 0;
  cfg.cache_seqlens = r["cache-seqlens"].as<std::string>();
  if (cfg.cache_seqlens != "full" && cfg.cache_seqlens != "random")
    throw std::invalid_argument("--cache-seqlens '" + cfg.cache_seqlens + "': expected full or random");
  if (decode) {
    for (const MaskSpec& m : cfg.masks)
      if (m.alignment != FLASH_ALIGN_BOTTOM_RIGHT || m.block != MaskSpec::Block::kNone)
        throw std::invalid_argument("--mask '" + m.label() + "' with --mode decode: flash_fwd_kvcache takes causal and "
                                    "windows, bottom-right aligned per sequence, and no block mask");
    const int64_t limit = int64_t{1} << 30;  // cache_seqlens and block tables are int32
    if (cfg.seqlen_k > limit) throw std::invalid_argument("--seqlen-k must be at most 2^30 for --mode decode");
    for (int64_t s : cfg.seqlens)
      if (s > limit) throw std::invalid_argument("--seqlen must be at most 2^30 for --mode decode");
    if (cfg.grid != "decode") {
      const int64_t keys = cfg.seqlen_k > 0 ? cfg.seqlen_k : 4096;
      for (int64_t s : cfg.seqlens.empty() ? std::vector<int64_t>{1} : cfg.seqlens)
        if (cfg.append && s > keys)
          throw std::invalid_argument("--append with --seqlen " + std::to_string(s) + " > --seqlen-k " +
                                      std::to_string(keys) + ": the cache holds seqlen_k - seqlen keys before the call");
    }
    if (!cfg.algos.empty() &&
        std::all_of(cfg.algos.begin(), cfg.algos.end(), [](const std::string& a) { return a == "naive"; }) &&
        cfg.modes.size() == 1)
      throw std::invalid_argument("--mode decode skips the naive algorithm (flash_fwd_kvcache has no naive backend): "
                                  "name another --algo (cpu, auto, sm80, sm90)");
  }
  cfg.seed = r["seed"].as<uint64_t>();
  parse_varlen(r, decode, &cfg);
  if (r.count("warmup")) cfg.warmup = r["warmup"].as<int>();
  if (r.count("reps")) cfg.reps = r["reps"].as<int>();
  if (r.count("warmup") && cfg.warmup < 0) throw std::invalid_argument("--warmup must be >= 0");
  if (r.count("reps") && cfg.reps < 1) throw std::invalid_argument("--reps must be >= 1");
  cfg.check = r.count("check") > 0;
  cfg.flush = r.count("no-flush") == 0;
  cfg.sample_clock = r["sample-clock"].as<std::string>();
  if (cfg.sample_clock != "none" && cfg.sample_clock != "after" && cfg.sample_clock != "during")
    throw std::invalid_argument("--sample-clock '" + cfg.sample_clock + "': none, after or during");
  cfg.progress = r.count("no-progress") == 0;
  if (r.count("json")) cfg.json_path = r["json"].as<std::string>();
  if (r.count("csv")) cfg.csv_path = r["csv"].as<std::string>();
  return cfg;
}

void resolve_defaults(RunConfig* cfg) {
  if (!cfg->device_given) {
    int32_t n = 0;
    if (built_with_cuda() && flash_device_count(FLASH_DEVICE_CUDA, &n) == FLASH_OK && n > 0) {
      cfg->device_type = FLASH_DEVICE_CUDA;
      cfg->device_id = 0;
    } else {
      cfg->device_type = FLASH_DEVICE_CPU;
      cfg->device_id = 0;
    }
  }
  const bool gpu = cfg->device_type == FLASH_DEVICE_CUDA;
  if (cfg->algos.empty()) {
    flash_device_info info;
    flash_device_info_init(&info);
    uint32_t mask = flash_compiled_algorithms();
    if (flash_get_device_info(cfg->device_type, cfg->device_id, &info) == FLASH_OK) mask = info.algorithms;
    mask &= ~(1u << FLASH_ALGO_AUTO);
    for (const std::string& n : algorithm_names(mask)) {
      // Only the algorithms of this device kind (a CUDA-built library also reports cpu as compiled).
      const int32_t id = flash_algorithm_from_name(n.c_str());
      if (gpu && id == FLASH_ALGO_CPU) continue;
      if (!gpu && (id == FLASH_ALGO_SM80 || id == FLASH_ALGO_SM90)) continue;
      cfg->algos.push_back(n);
    }
    if (cfg->algos.empty()) cfg->algos.push_back("auto");
  }
  if (cfg->dtypes.empty()) cfg->dtypes.push_back(gpu || cfg->grid == "decode" ? FLASH_DTYPE_BF16 : FLASH_DTYPE_FP32);
  if (cfg->warmup < 0) cfg->warmup = gpu ? 5 : 1;
  if (cfg->reps < 0) cfg->reps = gpu ? 20 : 3;
}

namespace {

// --mode decode: dtype x mask x head dim x new tokens x (batch, keys) x page size x algorithm (naive skipped).
void expand_decode(const RunConfig& cfg, std::vector<Case>* out) {
  const bool grid = cfg.grid == "decode";
  std::vector<int64_t> seqlens = cfg.seqlens, head_dims = cfg.head_dims, pages = cfg.page_sizes;
  if (seqlens.empty()) seqlens = {1};
  if (head_dims.empty()) head_dims = {128};
  if (pages.empty()) pages = grid ? std::vector<int64_t>{0, 16, 256} : std::vector<int64_t>{0};
  // The standard decode cases (batch x cached keys).
  std::vector<std::pair<int64_t, int64_t>> shapes{{1, 8192},    {1, 131072}, {16, 8192}, {16, 32768},
                                                  {64, 4096},   {64, 32768}, {128, 2048}};
  if (!grid) shapes = {{cfg.batch, cfg.seqlen_k > 0 ? cfg.seqlen_k : 4096}};
  for (int32_t dtype : cfg.dtypes)
    for (const MaskSpec& mask : cfg.masks)
      for (int64_t d : head_dims)
        for (int64_t s : seqlens)
          for (const auto& [batch, keys] : shapes)
            for (int64_t page : pages)
              for (const std::string& algo : cfg.algos) {
                // See --mode's help: no naive KV-cache backend; on Hopper the sm80 family serves flash_fwd_kvcache.
                if (algo == "naive" || (algo == "sm90" && !cfg.algos_given)) continue;
                if (cfg.append && s > keys)
                  throw std::invalid_argument("--append with --seqlen " + std::to_string(s) + " > " +
                                              std::to_string(keys) + " keys: the cache holds seqlen_k - seqlen keys "
                                              "before the call");
                Case c;
                c.algo = algo;
                c.mode = "decode";
                c.dtype = dtype;
                c.head_dim = d;
                c.seqlen_q = s;
                c.seqlen_k = keys;
                c.mask = mask;
                c.batch = batch;
                c.heads_q = grid ? 32 : cfg.heads;
                c.heads_kv = grid ? 8 : (cfg.heads_kv > 0 ? cfg.heads_kv : cfg.heads);
                c.page_size = page;
                c.num_splits = cfg.num_splits;
                c.append = cfg.append;
                c.cache_seqlens = cfg.cache_seqlens;
                out->push_back(c);
              }
}

}  // namespace

std::vector<Case> expand_cases(const RunConfig& cfg) {
  std::vector<Case> out;
  const bool grid = cfg.grid == "standard";
  std::vector<int64_t> seqlens = cfg.seqlens, head_dims = cfg.head_dims;
  if (seqlens.empty()) seqlens = grid ? std::vector<int64_t>{512, 1024, 2048, 4096, 8192, 16384} : std::vector<int64_t>{1024};
  if (!cfg.varlen_lengths.empty()) seqlens = {0};  // (one case per mask x head dim x algorithm: the lengths are given)
  if (head_dims.empty()) head_dims = grid ? std::vector<int64_t>{64, 128} : std::vector<int64_t>{128};
  for (int32_t dtype : cfg.dtypes)
    for (const std::string& mode : cfg.modes) {
      if (mode == "decode") {
        RunConfig one = cfg;
        one.dtypes = {dtype};
        expand_decode(one, &out);
        continue;
      }
      for (const MaskSpec& mask : cfg.masks)
        for (int64_t d : head_dims)
          for (int64_t s : seqlens)
            for (const std::string& algo : cfg.algos) {
              Case c;
              c.algo = algo;
              c.mode = mode;
              c.dtype = dtype;
              c.head_dim = d;
              c.seqlen_q = s;
              c.seqlen_k = cfg.seqlen_k > 0 ? cfg.seqlen_k : s;
              c.mask = mask;
              if (!cfg.varlen_lengths.empty()) {
                // A packed variable-length batch: batch = sequences, seqlen_q = seqlen_k = the longest.
                c.varlen = cfg.varlen_lengths;
                c.varlen_source = cfg.varlen_source;
                c.batch = static_cast<int64_t>(c.varlen.size());
                c.seqlen_q = c.seqlen_k = *std::max_element(c.varlen.begin(), c.varlen.end());
                c.heads_q = cfg.heads;
                c.heads_kv = cfg.heads_kv > 0 ? cfg.heads_kv : cfg.heads;
              } else if (grid) {
                // FlashAttention-2/3 papers: 16k tokens per batch, hidden size 2048.
                c.batch = std::max<int64_t>(1, 16384 / s);
                c.heads_q = std::max<int64_t>(1, 2048 / d);
                c.heads_kv = c.heads_q;
              } else {
                c.batch = cfg.batch;
                c.heads_q = cfg.heads;
                c.heads_kv = cfg.heads_kv > 0 ? cfg.heads_kv : cfg.heads;
              }
              out.push_back(c);
            }
    }
  return out;
}

}  // namespace fabench
