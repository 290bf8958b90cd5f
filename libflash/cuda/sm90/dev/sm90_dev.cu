// libflash/cuda/sm90/dev/sm90_dev.cu -- developer driver for tuning the sm90 forward (not built by default:
// `ninja sm90_dev`). Instantiates candidate shapes of the kernel, checks each against the production
// instantiation (which the test suite checks against the fp64 reference) on the same random inputs, and
// times them on the standard grid (b*seqlen = 16384, h = 2048/d, bf16): median of CUDA-event timings
// after warm-up, inputs rotated across 4 sets so L2 never holds a whole problem (and no candidate runs on the set the
// one before it just read). One line per candidate.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "libflash/cuda/sm90/fwd_kernel.cuh"
#include "libflash/cuda/sm90/top_rows.cuh"

using flash::DType;
using flash::FwdParams;

#define CK(x)                                                                                    \
  do {                                                                                           \
    cudaError_t e_ = (x);                                                                        \
    if (e_ != cudaSuccess) {                                                                     \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(2);                                                                              \
    }                                                                                            \
  } while (0)

namespace {

// A problem: head dim d, seqlen n, mask; batch * n = 16384 * grid_scale (the standard grid has 1; issue 7's
// mask grid, batch 2 at 4k-16k, is given by batch), heads 2048 / d.
struct Problem {
  int d, n, batch;
  bool causal;
  double density;  // block-sparse: fraction of 128 x 128 blocks kept per query block (0: no block mask)
  int window = -1;  // >= 0: the sliding window (window, 0) (causal then ignored)
  int nq = 0;       // seqlen_q when it differs from seqlen_k (n); the rows are the last nq of n (bottom-right causal)
  int skew = 0;     // block-sparse, > 0: odd query blocks keep 1 / skew as many key blocks (lists of unequal length)
};

void* g_workspace = nullptr;  // the dynamic tile order's counter (causal, block-sparse), or the tail split's counters and partials
constexpr size_t kWorkspaceBytes = size_t(64) << 20;
int32_t* g_mask_num = nullptr;  // block-sparse: kv_num_blocks [num_q_blocks], broadcast over batch and heads
int32_t* g_mask_idx = nullptr;  // kv_indices [num_q_blocks][per_row]

// The same kind of pattern as fa-bench's block-sparse:DENSITY:128 -- round(density * key blocks) distinct
// key blocks per query block, chosen at random, one pattern for every batch and head -- uploaded to the
// device; returns the BlockMaskParams naming it.
flash::BlockMaskParams upload_pattern(int n, double density, uint64_t seed, int skew = 0) {
  const int blocks = (n + 127) / 128;
  int per_row = int(std::llround(density * blocks));
  per_row = std::min(std::max(per_row, 1), blocks);
  std::vector<int32_t> num(blocks, per_row), idx(size_t(blocks) * per_row), all(blocks);
  if (skew > 0)  // odd query blocks: per_row / skew of their slots used (the rest of the row's indices ignored)
    for (int qb = 1; qb < blocks; qb += 2) num[qb] = std::max(1, per_row / skew);
  std::mt19937_64 rng(seed ^ uint64_t(n) << 20 ^ uint64_t(density * 1000));
  for (int qb = 0; qb < blocks; ++qb) {
    for (int j = 0; j < blocks; ++j) all[j] = j;
    for (int t = 0; t < per_row; ++t) std::swap(all[t], all[t + int(rng() % uint64_t(blocks - t))]);
    std::sort(all.begin(), all.begin() + per_row);
    std::copy(all.begin(), all.begin() + per_row, idx.begin() + size_t(qb) * per_row);
  }
  CK(cudaMemcpy(g_mask_num, num.data(), num.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(g_mask_idx, idx.data(), idx.size() * 4, cudaMemcpyHostToDevice));
  flash::BlockMaskParams m{};
  m.kv_num_blocks = g_mask_num, m.kv_indices = g_mask_idx;
  m.num_qblock_stride = 1;
  m.idx_qblock_stride = per_row, m.idx_stride = 1;
  m.block_m = m.block_n = 128, m.num_q_blocks = blocks, m.max_kv_blocks = per_row;
  return m;
}

FwdParams make_params(const Problem& pr, void* q, void* k, void* v, void* o, const flash::BlockMaskParams& bm) {
  FwdParams p{};
  p.workspace = g_workspace, p.workspace_size = kWorkspaceBytes;
  const int b = pr.batch, h = 2048 / pr.d;
  p.q = q, p.k = k, p.v = v, p.o = o, p.lse = nullptr;
  const int64_t row = int64_t(h) * pr.d, batch = row * pr.n;
  p.q_batch_stride = p.k_batch_stride = p.v_batch_stride = p.o_batch_stride = batch;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.o_row_stride = row;
  p.q_head_stride = p.k_head_stride = p.v_head_stride = p.o_head_stride = pr.d;
  p.batch = b, p.heads_q = p.heads_kv = h, p.head_ratio = 1;
  p.seqlen_q = p.seqlen_k = pr.n, p.head_dim = pr.d, p.dtype = DType::BF16;
  p.scale = 1.f / std::sqrt(float(pr.d));
  p.scale_log2 = p.scale * 1.4426950408889634f;
  p.window_left = pr.window, p.window_right = pr.causal || pr.window >= 0 ? 0 : -1;
  p.diag_offset = 0;
  p.is_causal = pr.causal && pr.window < 0, p.has_window = pr.causal || pr.window >= 0;
  // (Q and O keep n rows a batch: their strides above.) Bottom-right: query i sees keys j <= i + n - nq.
  if (pr.nq > 0) p.seqlen_q = pr.nq, p.diag_offset = pr.n - pr.nq;
  p.has_block_mask = pr.density > 0;
  if (p.has_block_mask) p.block_mask = bm;
  p.device_id = 0, p.stream = nullptr;
  return p;
}

using Launch = int32_t (*)(const FwdParams&);

// An environment variable's comma-separated items (none when it is unset or empty): the SM90_DEV_* filters.
std::vector<std::string> env_list(const char* name) {
  std::vector<std::string> items;
  const char* v = std::getenv(name);
  for (std::string rest = v ? v : ""; !rest.empty();) {
    const size_t comma = rest.find(',');
    if (comma != 0) items.push_back(rest.substr(0, comma));
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
  }
  return items;
}
// An SM90_DEV_PROBLEMS item "N:S": seqlen N and block density S (no ":S": 0, the dense problem).
std::pair<int, double> problem_item(const std::string& item) {
  const size_t colon = item.find(':');
  return {std::atoi(item.c_str()), colon == std::string::npos ? 0.0 : std::atof(item.c_str() + colon + 1)};
}

// The median of a list of measurements (its upper middle for an even count; 0 for none).
template <class T>
double median(std::vector<T> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return double(v[v.size() / 2]);
}

struct Candidate {
  const char* name;
  int d;
  bool sparse;
  Launch fn;
};

template <int D, int BN, int ST, int WG = 2, int POLY = 0, int TMA_STORE = 0, bool SPARSE = false, bool ALIGN_END = true>
int32_t run(const FwdParams& p) {
  return flash::sm90::launch<flash::sm90::Traits<D, BN, ST, DType::BF16, SPARSE, WG, POLY, TMA_STORE>>(p, {ALIGN_END});
}
// Launch-option launchers (no candidate uses them since session 28's pruning; kept for the launch options' questions).
// The tail split's instantiations (Traits::kTailSplit; production for dense d128 and d256 from 8k keys), with the split
// or with the last round run whole (LaunchOptions::tail_split off; perf-log v41).
template <int D, int BN, int ST, int WG, int TMA_STORE, bool SPLIT = true>
int32_t run_split(const FwdParams& p) {
  flash::sm90::LaunchOptions opt;
  opt.tail_split = SPLIT;
  return flash::sm90::launch<flash::sm90::Traits<D, BN, ST, DType::BF16, false, WG, 0, TMA_STORE, true>>(p, opt);
}
// Production shapes with the causal order's (batch, head) groups sized by an L2 budget in MB and a last group of at
// least TAIL_TENTHS / 10 grids of tiles (LaunchOptions::l2_budget_mb, tail_grids; production: L2 / 3 (d64: L2 / 2)
// and 2).
template <int D, int BN, int ST, int WG, int TMA_STORE, int MB, int TAIL_TENTHS>
int32_t run_group(const FwdParams& p) {
  flash::sm90::LaunchOptions opt;
  opt.l2_budget_mb = MB;
  opt.tail_grids = TAIL_TENTHS / 10.0;
  return flash::sm90::launch<flash::sm90::Traits<D, BN, ST, DType::BF16, false, WG, 0, TMA_STORE>>(p, opt);
}
// The same over a Traits class (a mixin's).
template <class K, int MB, int TAIL_TENTHS>
int32_t run_group_k(const FwdParams& p) {
  flash::sm90::LaunchOptions opt;
  opt.l2_budget_mb = MB;
  opt.tail_grids = TAIL_TENTHS / 10.0;
  return flash::sm90::launch<K>(p, opt);
}
// Without a workspace: no tile counter, so no memset before the launch and the static tile order even for causal and
// block-sparse masks (what a caller gets who passes none: libflash then allocates one, so this is for measuring only).
template <int D, int BN, int ST, int WG, int TMA_STORE, bool SPARSE = false>
int32_t run_static(const FwdParams& p) {
  FwdParams q = p;
  q.workspace = nullptr, q.workspace_size = 0;
  return flash::sm90::launch<flash::sm90::Traits<D, BN, ST, DType::BF16, SPARSE, WG, 0, TMA_STORE>>(q);
}
// Traits of a bf16 instantiation: head dim, key block, ring stages, consumer warpgroups, O's epilogue (shapes.h
// store_o), block-sparse, the tail split. Variants are mixins over it (each overrides one Traits member) and run
// through one launcher, run_k, or the profiled one, run_prof_k.
template <int D, int BN, int ST, int WG, int STORE_O, bool SPARSE = false, bool SPLIT = false>
using Tr = flash::sm90::Traits<D, BN, ST, DType::BF16, SPARSE, WG, 0, STORE_O, SPLIT>;
template <class K>
int32_t run_k(const FwdParams& p) {
  return flash::sm90::launch<K>(p);
}
// d64 causal's first rows apart (shapes.h, d64_causal_top_rows; perf-log v76; production since session 46): rows [r,
// seqlen_q) on the three-warpgroup kernel, the first r on the top-rows kernel behind it with PDL. kRestAlone: the rest
// alone (rows [0, r) left unwritten: the check fails by design), what the partial tiles cost.
template <bool kRestAlone = false, class KA = Tr<64, 128, 4, 3, 1>>
int32_t run_top(const FwdParams& p) {
  const int64_t r = flash::sm90::d64_causal_top_rows(p);
  if (r == 0) return flash::sm90::launch<KA>(p);
  if (const int32_t st = flash::sm90::launch<KA>(flash::sm90::rows_view(p, r, p.seqlen_q)); st != 0 || kRestAlone) return st;
  return flash::sm90::launch_top_rows<DType::BF16>(flash::sm90::rows_view(p, 0, r));
}
// d64 dense in two kernels (shapes.h, d64_split_rows; perf-log v53): rows [0, rows_a) on the three-warpgroup kernel, the
// rest on KB (two warpgroups, 128-row tiles) launched behind it, with PDL (production, KB the dense two-warpgroup
// kernel) or plainly one after the other. Problems that do not split run as run_top (d64 causal below 2048 rows in two
// kernels, the rest on the three-warpgroup kernel whole).
template <class KB, bool kPdl, class KA = Tr<64, 128, 4, 3, 1>>
int32_t run_rows(const FwdParams& p) {
  using flash::sm90::Rows;
  const int64_t rows_a = flash::sm90::d64_split_rows(p);
  if (rows_a < 0) return run_top<false, KA>(p);
  if (rows_a == 0) return flash::sm90::launch<KB>(p);
  flash::sm90::LaunchOptions oa, ob;
  oa.rows = Rows{0, int32_t(rows_a), kPdl ? Rows::kPdlPrimary : Rows::kNoPdl};
  ob.rows = Rows{int32_t(rows_a), -1, kPdl ? Rows::kPdlSecondary : Rows::kNoPdl};
  if (const int32_t st = flash::sm90::launch<KA>(p, oa); st != 0) return st;
  return flash::sm90::launch<KB>(p, ob);
}
// The static order's last round as a kernel of its own (shapes.h, pair_split; perf-log v54): KA (a dense instantiation,
// Traits::kPdlPrimary) runs the whole rounds, KB (one with the tail split compiled in) the last round's pieces behind it
// with PDL, planned on KB's key blocks with the margin kMargin. Problems that do not split run on KA whole.
// kPart (dev, s31-2: where the pair's time goes): 0 the pair, 1 without PDL (the secondary launched plainly), 2 the
// primary alone (the whole rounds), 3 the secondary alone (the pieces; their counts not zeroed, so O is wrong).
template <class KA, class KB, int kMargin, int kPart = 0>
int32_t run_pair(const FwdParams& p) {
  using namespace flash::sm90;
  const int grid = persistent_grid(tiles_of(p, KA::kShape), flash::cuda::persistent_ctas(p.device_id));
  const TailSplit t = tail_split_applies(p) ? tail_split(tiles_of(p, KA::kShape), grid,
                                                         (int64_t(p.seqlen_k) + KB::kBlockN - 1) / KB::kBlockN, kMargin)
                                            : TailSplit{};
  if (t.units == 0) return launch<KA>(p);
  LaunchOptions oa, ob;
  oa.rows.pieces = ob.rows.pieces = t;
  oa.rows.pdl = Rows::kPdlPrimary;
  ob.rows.pdl = Rows::kPdlSecondary;
  ob.pdl_attr = kPart != 1;
  if (kPart == 3) return launch<KB>(p, ob);
  if (const int32_t st = launch<KA>(p, oa); st != 0 || kPart == 2) return st;
  return launch<KB>(p, ob);
}
// The profiling variant (Traits::kProfile): clock64 phase counters.
template <class T>
struct Profiled : T {
  static constexpr bool kProfile = true;
};
// Prof::kPerWg counters per consumer warpgroup (at most 3) and the producer's after them.
constexpr int kProfCounters = flash::sm90::Prof::kPerWg * 4;
unsigned long long* g_profile = nullptr;
template <class K>
int32_t run_prof_k(const FwdParams& p) {
  return flash::sm90::launch<Profiled<K>>(p, {true, g_profile});
}
// The early-probe variant (Traits::kEarlyProbe, session 24): the next block's K/V barriers probed after each turn's issue.
template <class T, bool ON = true>
struct EarlyProbe : T {
  static constexpr bool kEarlyProbe = ON;
};
// O rescaled inside the turn, between S_j's and P_{j-1} V_{j-1}'s issue (ON), or after the P V wait (Traits::
// kRescaleInTurn): production has it in the turn since session 25 but for the two-ring kernel (5-10% slower there,
// perf-log v45), so RescaleInTurn<T, false> gives the s24 kernels.
template <class T, bool ON>
struct RescaleInTurn : T {
  static constexpr bool kRescaleInTurn = ON;
};
// Two rings with fixed roles and no tile-end barrier (Traits::kFixedRings, session 26: 2-5% slower alone, perf-log v48;
// production with PinSoftmax 3 since session 27, v49), or with rotating roles and the barrier (ON false: session 26's).
template <class T, bool ON>
struct FixedRings : T {
  static constexpr bool kFixedRings = ON;
};
// The loop's step after the softmax (Traits::kPinSoftmax): 0 none, 1 a warpgroup barrier (s27-1: it does not move an exp
// before the P V wait in the two-ring kernel, nor did a __syncwarp, removed), 3 a clock read kept by a shared store
// (production for the two-ring kernel since session 27, perf-log v49).
template <class T, int PIN>
struct PinSoftmax : T {
  static constexpr int kPinSoftmax = PIN;
};
// Turns at the SFU (Traits::kSfuTurns; perf-log v56, production for d64's three-warpgroup dense kernel), on or off (ON),
// with the products' turns (ping-pong) kept or dropped (PP false).
template <class T, bool PP = true, bool ON = true>
struct SfuTurns : T {
  static constexpr bool kSfuTurns = ON;
  static constexpr bool kPingPong = PP;
};
// The tile decoded once by the producer (Traits::kTileInSmem, session 38).
template <class T, bool ON = true>
struct TileInSmem : T {
  static constexpr bool kTileInSmem = ON;
};
// The k-steps' descriptors made from one per operand and block (Traits::kDescPlus, session 40, perf-log v73).
template <class T, bool ON = true>
struct DescPlus : T {
  static constexpr bool kDescPlus = ON;
};
// The two-ring consumers' ring position, ring and row group broadcast from lane 0 (Traits::kUniformIt, session 40, v73).
template <class T, bool ON = true>
struct UniformIt : T {
  static constexpr bool kUniformIt = ON;
};
// The warpgroup index broadcast from lane 0 at the kernel's start (Traits::kUniformWg: production for d64 and d256 dense
// since session 41, perf-log v74).
template <class T, bool ON = true>
struct UniformWg : T {
  static constexpr bool kUniformWg = ON;
};
// The O store deferred to the next tile's prologue (Traits::kDeferStore; session 55).
template <class T, bool ON = true>
struct DeferStore : T {
  static constexpr bool kDeferStore = ON;
};
// The boundary probes (Traits::kDevNoEpilogue, kDevNoSoftmax0; session 55): a tile's epilogue, or its prologue's softmax,
// left out. Wrong results by design (the check column). NoSoftmax0 only where no SFU turns run (the skipped softmax
// would leave its SFU turn untaken where other warpgroups take theirs: d128, d256).
template <class T>
struct NoEpilogue : T {
  static constexpr bool kDevNoEpilogue = true;
};
template <class T>
struct NoSoftmax0 : T {
  static constexpr bool kDevNoSoftmax0 = true;
};
// The memory probes (Traits::kDevSkipKVOdd, kDevKVHot, kDevAlwaysRescale; session 42): K/V loads left out in odd CTAs,
// every K/V load from key block 0, O rescaled after every block. Wrong results by design (the check column).
template <class T>
struct SkipKVOdd : T {
  static constexpr bool kDevSkipKVOdd = true;
};
// The two-ring kernel's single warpgroup by shifts (ON, production since session 57) or by two divisions (Traits::
// kSingleShift).
template <class T, bool ON = true>
struct SingleShift : T {
  static constexpr bool kSingleShift = ON;
};
// The block-sparse K/V loaders' tile decode from the scheduler (ON, Traits::kLoaderMhb) or their own divisions.
template <class T, bool ON = true>
struct LoaderMhb : T {
  static constexpr bool kLoaderMhb = ON;
};
template <class T>
struct KVHot : T {
  static constexpr bool kDevKVHot = true;
};
template <class T>
struct AlwaysRescale : T {
  static constexpr bool kDevAlwaysRescale = true;
};
// Session 50: each CTA's start and end (Traits::kDevCtaTimes; sm90_dev's "ctatimes" mode).
template <class T>
struct CtaTimes : T {
  static constexpr bool kDevCtaTimes = true;
};
unsigned long long* g_cta_times = nullptr;
template <class K>
int32_t run_cta_times(const FwdParams& p) {
  flash::sm90::LaunchOptions opt;
  opt.profile = g_cta_times;
  return flash::sm90::launch<CtaTimes<K>>(p, opt);
}
// The prologue's mask, softmax and pack on the first block's visible columns only (Traits::kHalfDiag: 0 off, 1 by the
// tile's key end, 2 by each warpgroup's rows; 2 production for d64's three warpgroups since session 47, perf-log v77).
template <class T, int V = 1>
struct HalfDiag : T {
  static constexpr int kHalfDiag = V;
};
// Session 51: a warpgroup that sees no key of its tile's first block starts one block further (Traits::kSkipDiag).
template <class T, bool ON = true>
struct SkipDiag : T {
  static constexpr bool kSkipDiag = ON;
};
// Dense walks upwards (Traits::kUpward; session 53): fwd_kernel.cuh's Upward mixin.
using flash::sm90::Upward;
// The two-ring kernel's warpgroups without turns (session 41's production; Traits::kRingTurns off, the clock pin on).
template <class T>
struct FreeRings : T {
  static constexpr bool kRingTurns = false;
  static constexpr bool kPingPong = false;
  static constexpr bool kSfuTurns = false;
  static constexpr bool kRescaleInTurn = false;
  static constexpr int kPinSoftmax = 3;
};
// d128 block-sparse as production runs it since session 33 (perf-log v59): lists of >= kSfuTurnsMinBlocks key blocks on the
// instantiation with SFU turns (SfuTurnsOn), shorter ones on the one without.
template <class T>
int32_t run_turns_by_length(const FwdParams& p) {
  return flash::sm90::sfu_turns_by_length(p) ? flash::sm90::launch<flash::sm90::SfuTurnsOn<T>>(p) : flash::sm90::launch<T>(p);
}
// The d64 block-sparse two-ring instantiation (shapes.h kTwoRingShape).
using TwoRings = Tr<64, 128, 2, 3, 1, true>;
struct ProfCase {
  const char* name;
  int d, n, batch;
  bool causal;
  double density;
  int consumers;
  Launch fn;
  int nq = 0;  // Problem::nq
};
const ProfCase kProfCases[] = {
    {"d64 dense", 64, 1024, 16, false, 0, 3, run_prof_k<Tr<64, 128, 4, 3, 1, false>>},
    {"d64 dense", 64, 16384, 1, false, 0, 3, run_prof_k<Tr<64, 128, 4, 3, 1, false>>},
    // Issue 7's 4k grid (batch 2): the dense whole-tile kernel, and the two-ring kernel with every key block listed (s45-2).
    {"d64 dense b2", 64, 4096, 2, false, 0, 3, run_prof_k<Tr<64, 128, 4, 3, 1, false>>},
    {"d64 2ring 1.0", 64, 4096, 2, false, 1.0, 3, run_prof_k<Tr<64, 128, 2, 3, 1, true>>},
    {"d64 causal", 64, 1024, 16, true, 0, 3, run_prof_k<Tr<64, 128, 4, 3, 1, false>>},
    // Bottom-right causal without each head's first 64 (cq960) and 256 rows (cq768): what the partial tile (64 real rows,
    // one key block) and the 2-block tile after it cost (s39-3).
    {"d64 causal cq960", 64, 1024, 16, true, 0, 3, run_prof_k<Tr<64, 128, 4, 3, 1, false>>, 960},
    {"d64 causal cq768", 64, 1024, 16, true, 0, 3, run_prof_k<Tr<64, 128, 4, 3, 1, false>>, 768},
    {"d64 2wg rows", 64, 16384, 1, false, 0, 2, run_prof_k<Tr<64, 128, 4, 2, 1>>},
    {"d128 dense", 128, 1024, 16, false, 0, 2, run_prof_k<Tr<128, 128, 2, 2, 1, false>>},
    {"d128 dense", 128, 16384, 1, false, 0, 2, run_prof_k<Tr<128, 128, 2, 2, 1, false>>},
    {"d128 causal", 128, 1024, 16, true, 0, 2, run_prof_k<Tr<128, 128, 2, 2, 1, false>>},
    {"d128 s24 dense", 128, 1024, 16, false, 0, 2, run_prof_k<RescaleInTurn<Tr<128, 128, 2, 2, 1, false>, false>>},
    {"d128 s24 dense", 128, 16384, 1, false, 0, 2, run_prof_k<RescaleInTurn<Tr<128, 128, 2, 2, 1, false>, false>>},
    // d256's production shape (O staged in the ring, store_o 3) and, as "d256 direct", the direct-store epilogue.
    {"d256 dense", 256, 1024, 16, false, 0, 2, run_prof_k<Tr<256, 80, 2, 2, 3, false>>},
    {"d256 dense", 256, 16384, 1, false, 0, 2, run_prof_k<Tr<256, 80, 2, 2, 3, false>>},
    {"d256 causal", 256, 1024, 16, true, 0, 2, run_prof_k<Tr<256, 80, 2, 2, 3, false>>},
    {"d256 direct", 256, 1024, 16, false, 0, 2, run_prof_k<Tr<256, 80, 2, 2, 0, false>>},
    {"d256 direct cau", 256, 1024, 16, true, 0, 2, run_prof_k<Tr<256, 80, 2, 2, 0, false>>},
    {"d128 dense b2", 128, 4096, 2, false, 0, 2, run_prof_k<Tr<128, 128, 2, 2, 1, false>>},
    {"d128 bs0.1 b2", 128, 4096, 2, false, 0.1, 2, run_prof_k<Tr<128, 128, 2, 2, 2, true>>},
    {"d64 bs0.1 b2", 64, 4096, 2, false, 0.1, 2, run_prof_k<Tr<64, 128, 4, 2, 1, true>>},
    {"d64 bs.5 b2", 64, 4096, 2, false, 0.5, 2, run_prof_k<Tr<64, 128, 4, 2, 1, true>>},
    {"d128 bs.5 b2", 128, 4096, 2, false, 0.5, 2, run_prof_k<Tr<128, 128, 2, 2, 2, true>>},
    {"d64 bs.5 16k", 64, 16384, 2, false, 0.5, 2, run_prof_k<Tr<64, 128, 4, 2, 1, true>>},
    {"d64 2ring .5", 64, 4096, 2, false, 0.5, 3, run_prof_k<Tr<64, 128, 2, 3, 1, true>>},
    {"d64 2ring .5 16k", 64, 16384, 2, false, 0.5, 3, run_prof_k<Tr<64, 128, 2, 3, 1, true>>},
    {"d64 2ring .1", 64, 4096, 2, false, 0.1, 3, run_prof_k<Tr<64, 128, 2, 3, 1, true>>},
    {"d64 2ring .25", 64, 4096, 2, false, 0.25, 3, run_prof_k<Tr<64, 128, 2, 3, 1, true>>},
    {"d64 2ring s26 .5", 64, 4096, 2, false, 0.5, 3, run_prof_k<FixedRings<FreeRings<TwoRings>, false>>},
    {"d64 2ring s26 .5 16k", 64, 16384, 2, false, 0.5, 3, run_prof_k<FixedRings<FreeRings<TwoRings>, false>>},
    {"d64 2ring s26 .25", 64, 4096, 2, false, 0.25, 3, run_prof_k<FixedRings<FreeRings<TwoRings>, false>>},
    // s43-7: K and V always from key block 0 (KVHot: L2 hits, no DRAM) -- do the short lists' K/V waits go with it?
    {"d64 2ring hot .1", 64, 4096, 2, false, 0.1, 3, run_prof_k<KVHot<TwoRings>>},
    {"d128 bs0.1 hot b2", 128, 4096, 2, false, 0.1, 2, run_prof_k<KVHot<Tr<128, 128, 2, 2, 2, true>>>},
};

// Candidates: the production shape of each head dim and mask kind first (the reference for the check).
// Run s12-2 compared d64 bn192 st3, d128 bn176 st2 / bn96 st3, d256 bn80 and 2-CTA cluster multicast
// (perf-log); session 13 (runs s13-1/2): three consumer warpgroups (192-row tiles; d64's production shape
// since) and "poly N" (every N-th 8-column group of P exponentiated on the FMA pipe: no consistent gain);
// run s13-8: two Q buffers (2Q) bought with fewer or narrower K/V stages at d128/d256 (2 stages + 2Q won:
// d128's production shape since); run s14-1: the TMA-store epilogue (d64's and d128's production since);
// run s14-2: the next tile's S_0 issued before this tile's epilogue (commit 61802af, reverted: equal dense,
// 5-17% slower causal). Session 15 (run s15-1): tiles aligned to the end of the sequence under a
// right-edged mask ("no shift": aligned to row 0 as before); block-sparse with the TMA-store epilogue (one
// Q buffer at d128), deeper rings, the FMA-pipe exp2 at d64 (poly2: 5-10% slower); run s15-2: block-sparse
// schedules' first key blocks prefetched to L2 (cp.async.bulk.prefetch.tensor, 4 blocks a tile ahead):
// 5-20% slower, removed; run s15-5: one Q buffer (d256, d128 block-sparse) with the next tile's Q
// prefetched to L2 when the producer has issued this tile's last load: no effect (d256 dense 1k 0.2443 /
// 0.2454 / 0.2448 ms prefetch / none / prefetch again), removed; run s15-7: the per-warpgroup mask (perf-log
// v12); run s15-10: d256 with O staged in each warpgroup's own Q rows and TMA-stored (Traits kStoreO 2);
// run s15-12: one-Q-buffer kernels loading and releasing Q per warpgroup (commit 1568f72, reverted: perf-log v16);
// run s16-1: key blocks walked upwards (kAscending, causal only: the same within the spread; perf-log v17,
// removed); run s16-2: the next tile's S_0 joined to this tile's last turn (Traits::kJoinTiles: slower,
// perf-log v18, commit de2be94, reverted); run s16-3: block-sparse with O staged in Q (store_o 2), which frees
// the room for a second Q buffer at d128 and a fifth K/V stage at d64 (`sm90_dev N sparse`: the mask grid
// only): no gain; run s16-4: the same with the scheduler warp (perf-log v19): d128 2Q + O-in-Q won at 4k;
// run s16-5: that shape with the Q release deferred to the next prologue (production) against the staging
// tile with one Q buffer (production before), and O-in-Q at d64; run s16-8: d256 with 48-key blocks, which
// leave room for two Q buffers (O staged in Q, its release deferred to the next prologue): 12-20% slower
// dense, equal causal 1k (perf-log v21; wgmma N = 48 removed again); run s16-9: d128 block-sparse with a
// third K/V stage (one Q buffer, O staged in Q; the schedules then cap seqlen_k near 30k): the loop 13% faster
// per block, but the wait for Q (one buffer) lost more at 4k; run s16-10: a third stage for K or for V alone,
// with two Q buffers (a kVStages Traits parameter, removed again): K2V3 1-2% faster at 4k s = 0.1, the same
// elsewhere, not worth its seqlen_k cap (perf-log v22). Session 17: s17-1 S one key block ahead of the softmax
// (Traits::kSAhead at block_n 64, commit 7c68fee, removed: 10-30% slower, v23); s17-2 no ping-pong and the FMA-pipe
// exp2 at d64 block-sparse (not kept) with the loop step profile; s17-4 a wgmma.fence before P V and s17-5 a
// named barrier or clock read pinning the softmax before the P V wait (equal times, v24); s17-6 the mask test from
// per-tile bounds (v25) and s17-7 the K/V waits probed together (v26), production since; s17-9 tree reductions
// (v27, removed); s17-12 the right-edge-only mask (v28, production since). Session 18: s18-1/2 a warpgroup's
// turns of wholly masked leading blocks taken empty (Traits::kSkipMaskedWg, removed: d64 causal 3-4% slower) and the
// causal order's L2 groups (LaunchOptions::l2_budget_mb / tail_grids, v30: L2 / 3 and a 2-grid last group in
// production since); s18-4 the next tile's Q loaded during this tile (Traits::kQEarly against the load after the
// tile's last K/V: v32, production since); s18-5 the tile counter zeroed by a kernel the forward overlaps through a
// programmatic dependent launch instead of a memset (LaunchOptions::pdl, v33: 1-5% slower, removed); s18-5/6 d64's
// groups with half of L2 (production since); s18-10 the static order without a workspace (run_static: block-sparse
// within 0-2%, causal 30-50% slower) and a 3-grid tail (not better). Session 19: s19-1/2 split tiles (v34: a tile
// of <= 64 real rows on all three warpgroups, every third key block each, merged through shared memory; commit
// fe2d573, reverted: 8-10% slower everywhere); s19-4 d256's O staged in the tile's last K and V slots with a test in
// the loop (v35, commit aa7b8d2, reverted: 2.5-4% slower than O in Q); s19-6/7 the same with the loop untouched
// (store_o 3, v36: d256 dense 1k +1.5%, causal 1k +2%; production since, "O in Q" its reference). Session 20: s20-1/4
// the block-sparse instantiation on d64 problems without a block mask ("listed", v37: windows of <= 768 keys production
// since; causal and dense slower), s20-5 d256 causal on d256's block-sparse instantiation (64-key blocks: 10-29%
// slower), s20-7 block-sparse L2 prefetch of the schedule's key blocks from the loader (v38, commit bffc476, reverted:
// 1-25% slower). Session 21: s21-1 .. s21-8 d64 block-sparse on three warpgroups and two K/V rings (v39: production for
// lists of >= 12 key blocks), with three stages per ring and one Q buffer (s21-3), fixed rings (s21-5 .. s21-8) and the
// pair's ping-pong (s21-5, s21-7) not kept; `sm90_dev 10 profile NAME` profiles only the cases whose name holds NAME.
// Session 22 (v40): s22-1 one K/V loader per ring against v39's single one (1-2% faster, production since) and ring 1
// loading K alone (timing only: a quarter less K/V traffic, 0-2% faster, so no cluster multicast); s22-2/4 rings of
// unequal depth (ring 0 three or four stages, O staged in Q or one Q buffer; a Traits parameter, removed: 1-8% slower);
// s22-3 a Q loader thread of its own in the block-sparse producers (production since: 1-5.5% faster); s22-6/7 the
// block-sparse early start (first Q at once, list loaded with its count, descriptors prefetched; production since);
// s22-11 the two-ring warpgroups taking turns in tiles of equally long lists (Traits::kDevTurns, removed: equal at 4k,
// 1-2% slower at 8k-16k). Session 23: s23-1 d128 key blocks of 160/176/192 with O staged in the ring (bn192 on long
// ranges: production since, kLongShape); s23-2 .. s23-7 the tail split (Traits::kTailSplit, perf-log v41), against the
// last round run whole and against session 22's kernel (commit fe62f45's fwd_kernel.cuh compiled in under its own
// namespace, dev/fwd_kernel_s22.cuh in commit 4097c0a, removed since): the split's code cost 1-3.5% where compiled in,
// so it has instantiations of its own (use_split_kernel). Session 24: s24-1 d128 with O staged in Q at 128 and 160 keys
// (perf-log v43, not kept); s24-2 the early probe of a block's K/V barriers (EarlyProbe, v44: production for the
// long-range instantiations). Session 25: s25-1 O rescaled inside the turn (Traits::kRescaleInTurn, v45: production
// since, but for the two-ring kernel; RescaleInTurn<T, false> gives the s24 kernels), s25-5 the two-ring kernel with
// the rescale just before the next S's issue (1-4% slower, removed). Session 26: s26-1 a tile's Q full barrier probed
// together with its first K's (kJoinStartWaits, commit 16e0e6d, removed: the wait moved into the prologue, times
// equal; perf-log v46); s26-2 the next tile's Q prefetched to L2 early in the one-Q-buffer kernels (kPrefetchNextQ,
// commit 49c12ed, removed: d256 causal 1k 6% slower, v47); s26-3 the two rings with fixed roles and no tile-end
// barrier (FixedRings: 2-6% slower unprofiled, 5% faster profiled, v48). Session 27: s27-1 .. s27-3 the softmax pinned
// before the P V wait (PinSoftmax: a warpgroup barrier and a __syncwarp do not move it, a clock read does) -- fixed rings
// with the clock pin production since (v49); the tail split at 128-key blocks for d128 2k-4k (not routed).
// The candidates below are the production kernels, each timed twice: the list to start the next comparison from. Candidates are timed in
// interleaved rounds since s18-2: timed one after the other, the same kernel measured 1-15% slower first than
// again (runs s15-5, s18-1).
// Session 40: s40-1 ncu's source page of the two-ring and dense d64 loops (device-sm90.sh ncu-src); s40-2/3 the k-steps'
// descriptors from one per operand and block (DescPlus) and the two-ring ring position broadcast from lane 0 (UniformIt):
// both production for the two-ring kernel since (v73), DescPlus 0-2% slower elsewhere; s40-5 the warpgroup index
// broadcast (UniformWg).
// Session 28 pruned the list to the production kernels and this session's candidates; the references it dropped (each
// measured against production in its session: the s24 kernels without the in-turn rescale, d128 bn192 without the early
// probe, the listed kernel on dense problems, session 27's rotating-ring pins) are in git history (commit b489dbe).
const Candidate kCandidates[] = {
    // d64 dense: since session 30 (v53) two kernels, whole 192-row tiles on three warpgroups and the rows left on two
    // behind them with PDL (run_rows); the three-warpgroup kernel alone on every row is session 29's production.
    {"d64  split (prod)", 64, false, run_rows<Tr<64, 128, 4, 2, 1>, true>},
    {"d64  split (prod again)", 64, false, run_rows<Tr<64, 128, 4, 2, 1>, true>},
    // Session 57 (s57-3, perf-log v85; production since): the three-warpgroup kernel's tile decoded by its producer
    // (TileInSmem; s38-6 measured d64 causal 1k 0.6-1.3% faster and dense 0.5-1% slower, before v76-v84), two rounds of
    // 100 reps paired: causal 1k .981 / .983, 2k .986 / .986, 4k .993 / .993, dense 1k-4k .998-1.001, 8k 1.003. The
    // kernel before:
    {"d64  split s56 (no tile in smem)", 64, false, run_rows<Tr<64, 128, 4, 2, 1>, true, TileInSmem<Tr<64, 128, 4, 3, 1>, false>>},
    // Session 55 (s55-5, paired, 40 reps): the O store deferred to the next tile's prologue (DeferStore, both kernels of the
    // pair): dense 1k-16k 1.006-1.009, causal 1.000-1.005 (the three warpgroups' SFU turns wait on the flush). s55-10 (60
    // reps; code in commit 74601d7): the flush after the prologue's softmax, past the SFU turn, on the three-warpgroup kernel
    // 1.000-1.006, on both 1.001-1.011; on the rows kernel alone .9999-1.008. Not taken.
    // Session 56 (s56-3, 60 reps, paired; code in commit 13871a8): the staged O stored by a producer warp per consumer
    // warpgroup (Traits kStoreWarps: named barrier 12 + wg from the warpgroup to its warp, an mbarrier back), on the
    // three-warpgroup kernel / on both (the rows kernel with 32 producer registers, 232 consumer): dense 1k .999 / 1.011,
    // 2k .998 / 1.001, 4k .998 / 1.002, 16k .999 / .999; causal 1k 1.002 / .998, 2k .998 / .996, 4k 1.001 / .998, 16k .998
    // / .999 -- production's warm copy .998-1.001. Not taken. (s56-2, the hand-over to the warp an mbarrier whose try_wait
    // loop the warp spun on: 1-1.5% slower.)
    // s56-4 (50 reps, paired; code in commit ddd6fee): every mbarrier wait of the producer (1) or of all (2) with try_wait's
    // suspend-time hint (10 ms, CUTLASS's), both kernels of the pair: dense 1k-16k 1.000-1.001 / 1.004-1.010, causal
    // 1.000-1.004 / 1.003-1.008. Not taken (so the loader's probe loop takes nothing from the consumers' issue).
    {"d64  split s55 no epilogue (wrong)", 64, false, run_rows<NoEpilogue<Tr<64, 128, 4, 2, 1>>, true, NoEpilogue<Tr<64, 128, 4, 3, 1>>>},
    // Session 45 (s45-2): d64's three-warpgroup dense kernel on a two-stage ring (Tr<64, 128, 2, 3, 1>, the two-ring
    // kernel's depth per ring) against its four stages, the whole-tile kernel alone: 4k 1.1364 against 1.1284 ms, 16k and
    // causal within 0.3%; its loop's K/V wait the same (profile: 298 against 299 cycles a block). Removed.
    // Session 36 (s36-3/4, perf-log v67; commit 861dce5): L2 eviction priorities on the TMA's traffic (an L2Hints mixin
    // over Traits kL2HintKV / Q / O, the .L2::cache_hint operand of tma_load_4d / tma_store_4d): 1 K and V evict_last,
    // Q and O evict_first; 2 K and V evict_last alone; 3 Q and O evict_first alone, at d64 (both kernels of the pair), d128
    // (128- and 192-key) and d256 (dense and split). With the input sets rotated per candidate (s36-4): no gain anywhere
    // -- d256 causal 1k .1723 / .1731 / .1743 against .1732 / .1713 ms, dense and causal 2k-16k 0-1% slower, d64 causal
    // 16k 1-4% slower. (s36-3's 2.5% at d256 causal 1k was the previous candidate's inputs left in L2.) Removed.
    // Session 37 (perf-log v68; dev/wgmma_issue.cu found a turn's wgmma issue waiting for the tensor cores). s37-2 (commit
    // a1f59af): the turn handed on once S_j is issued, before O's rescale and P_{j-1} V_{j-1} (a kPassAfterS Traits member,
    // PassAfterS mixin): d64 2.5-5% slower, dense and causal 1k-16k; d128 and d256 0-2% slower (causal 1k 1-2%).
    // s37-3/4 (commit 247cba5): a turn issuing P_{j-1} V_{j-1} first and S_j behind it, then waiting for both, the softmax
    // after with no product in flight (a kPvFirst Traits member, PvFirst mixin): d64 4-9% slower, d128 and d256 2-7%;
    // with a clock pin after P's pack (kPvFirst 2) d64 2-6%, d128 1.6-6%, d256 2-5% slower -- though its profiled build
    // (s37-3) ran 1.6% faster per block at d64 dense 16k and 3.9% per tile at causal 1k than production's profiled build.
    // The softmax overlapping the warpgroup's own P V is worth more than a shorter turn. Both removed.
    // Session 40 (s40-2, perf-log v73): the k-steps' descriptors from one per operand and block (DescPlus) in both kernels
    // of the pair, run_rows<DescPlus<Tr<64, 128, 4, 2, 1>>, true, DescPlus<Tr<64, 128, 4, 3, 1>>>: 1-2% slower, dense and
    // causal 1k-16k (16k dense 4.227 against 4.156 / 4.147 ms). Not kept.
    // Sessions 40-41 (s40-5, s41-2, perf-log v74): UniformWg (Traits::kUniformWg) 0-1.2% faster in two rounds, dense and
    // causal (1k dense +1.2% both times): production since. The pair without it, as the reference:
    // Session 46 (s46-1 .. s46-4, perf-log v76): d64 causal's first seqlen_q mod 192 rows (each head's partial tile) as a
    // problem of their own on an sm80-bodied kernel. Without PDL, before or after the three-warpgroup kernel: 1k 0.8% with
    // 64 x 64 tiles on 4 warps, 3% slower with production's sm80 shape (128 x 128), 2k-16k 0.3-1% slower. Behind it with
    // PDL (run_top): 1k 2.2-3.0% faster in three runs, 2k (seqlen_q mod 192 = 128) 0-0.3% slower, 4k and 16k within 0.2%;
    // 128 x 128 tiles 1% slower at 1k; only CTA 0 waiting for the primary (the others freeing their SMs at once) no
    // different; the first 192 + 64 rows on it (64 x 64 or 64 x 128 tiles) 1-3% slower at 1k. The rest alone 5-5.5% faster
    // at 1k, equal from 4k: what the partial tiles cost. Production since (below 2048 rows). The kernel before, and that
    // upper bound:
    // Session 48 (s48-1, s48-2, perf-log "the top-rows kernel's tail"; code in commit f0f8258): the top-rows kernel's
    // ~4.4 us behind the three-warpgroup one at 1k. Its launch bounds at 6 or 8 CTAs an SM (80 / 64 registers, 104 / 300 B of
    // spills) 1-3% slower; the top rows' Q, K and V prefetched to L2 by the three-warpgroup producers once the tiles run
    // out (a kTopPrefetch Traits member, cp.async.bulk.prefetch.L2 in 32 KB pieces) 0-1.3% slower; the top kernel first,
    // as the PDL primary, the three-warpgroup one behind it 1-2% slower. Split of the 4.4 us (60 reps, two runs): the pair
    // .2167 ms, with an empty 512-CTA secondary .2130, an empty 1-CTA one .2110, the rest alone .2100 -- the second kernel
    // ~1 us, its CTAs ~2 us, their work ~3.7 us (12.6 MB of Q and of K and V's first 64 rows, ~4 us of DRAM at full rate).
    // Session 47 (s47-1, s47-2, perf-log v77): the prologue's softmax on the diagonal block's visible columns (HalfDiag)
    // in the three-warpgroup kernel. By the tile's key end (1) against none: s47-1 causal 1k +0.5%, 2k +0.8%, 4k +0.4%;
    // s47-2 1k +2.4%, 2k +1.3%, 4k +1%; by each warpgroup's rows (2) against 1: 1k +0.9%, 2k +1%, 4k +0.8%; 16k equal.
    // With P_0 V_0 on half V_0's rows as well (a branch at the loop's P V issue) 1-5% slower. 2 production since; the
    // kernel without it and with 1:
    // Session 51 (s51-1, s51-2; perf-log v78): the diagonal block left out by warpgroups that see none of it (SkipDiag,
    // production since; the rows kernel, two warpgroups, has none). Paired against it, none / form 1 (V's slot handed
    // back before the prologue, commit cf556d2): causal 1k 1.016 / 1.007, 2k 1.009 / 1.004, 4k 1.005 / 1.003, 8k 1.004 /
    // 1.001, 16k 1.002 / 1.001; dense within 0.4%.
    // Session 51 (s51-10, 60 reps, paired; run_top with LaunchOptions, code in commit 2d5a1ca): the causal order's groups at
    // d64 (production: half of L2, 25 MB, and a 2-grid last group). 12 MB t2 1k .997, 2k 1.001; 12 MB t1 1.009 / 1.040;
    // 25 MB t1 1.003 / 1.002; 8 MB t2 .998 / 1.009. Nothing beyond the spread.
    {"d64  split no skip diag", 64, false, run_rows<Tr<64, 128, 4, 2, 1>, true, SkipDiag<Tr<64, 128, 4, 3, 1>, false>>},
    {"d64  causal s46 (no half diag)", 64, false, run_top<false, HalfDiag<Tr<64, 128, 4, 3, 1>, 0>>},
    {"d64  causal half-diag by tile", 64, false, run_top<false, HalfDiag<Tr<64, 128, 4, 3, 1>, 1>>},
    {"d64  causal s45 (no top rows)", 64, false, run_k<Tr<64, 128, 4, 3, 1>>},
    {"d64  causal rest alone (wrong)", 64, false, run_top<true>},
    {"d64  split s40 (no uniform wg)", 64, false, run_rows<UniformWg<Tr<64, 128, 4, 2, 1>, false>, true, UniformWg<Tr<64, 128, 4, 3, 1>, false>>},
    {"d64  split s31 (no sfu turns)", 64, false, run_rows<Tr<64, 128, 4, 2, 1>, true, SfuTurns<Tr<64, 128, 4, 3, 1>, true, false>>},
    {"d64  3wg whole (s29)", 64, false, run_k<SfuTurns<Tr<64, 128, 4, 3, 1>, true, false>>},
    // Session 32 (s32-4, perf-log v56): SFU turns alone (no products' turns; SfuTurns<Tr<64, 128, 4, 3, 1>, false>) 5-15%
    // slower; on two warpgroups (SfuTurns<Tr<64, 128, 4, 2, 1>>) 1-4% slower, alone 1-3% slower.
    {"d64  3wg sfu turns (whole)", 64, false, run_k<Tr<64, 128, 4, 3, 1>>},
    // Session 42 (s42-6): K/V loads left out in odd CTAs, SkipKVOdd<Tr<64, 128, 4, 3, 1>> (without AlwaysRescale, so an
    // upper bound): dense 0-0.5%, causal 1-1.8% faster (1k .2238 against .2266 ms) -- K and V's bytes are not d64's limit.
    // Session 38 (s38-1, perf-log v69; commit 28af72d): two CTAs per SM (a kCtasPerSm Traits member in the launch bounds
    // and the persistent grid; a TwoPerSm mixin: producer 24, consumers 104 registers from 80 at launch, 3 stages of
    // 64-key blocks, 97 KB each), two warpgroups on 128-row tiles, so that one CTA's tile boundaries overlap the other's
    // loop: 7-12% faster than the same shape on one CTA per SM, but that shape is 25-43% behind production (causal 1k
    // .2465 against .2291 ms, dense 16k 5.83 against 4.06; d64 block-sparse 4k s = .1 .190 against the two-ring .175 of
    // dense, 16k s = .5 .673 against .582). At 104 registers ptxas waits after every P V wgmma (gsb0) and spills P.
    // s38-6 (perf-log v71): the tile decoded by the producer (TileInSmem: Traits::kTileInSmem, production for the two-ring
    // kernel since) at d64 dense and causal: dense 2k-16k 0.5-1% slower, causal 1k .2264 against .2277 / .2294 ms, 2k-16k
    // 0-1% slower; at d128 (TileInSmem<Tr<128, 128, 2, 2, 1>>) causal 1k-4k 0.6-2% faster, dense within 0.5%; at d256
    // (TileInSmem<Tr<256, 80, 2, 2, 3>>) within 0.6% everywhere. Not taken there; the dense producer's form was removed in
    // session 39 (commit b6ce965 has it), so TileInSmem now takes block-sparse instantiations only.
    // s38-2 .. s38-4 (perf-log v70; commits c5be974, 2d103dc, e48cdc1): the element mask skipped by a thread (or a warp,
    // by vote) whose rows see all of a cut block (a kWarpMaskSkip Traits member): with the vote 5-30% slower at every
    // head dim and length; without it, the window test inside the element loops, ptxas branched round every element
    // (30% slower); fixed, d64 and d128 causal within 1% of production (1k .2363 against .2336 / .2363 ms), d256 3-5%
    // slower (52 B of spills). The mask is not where a causal tile's prologue goes. Removed.
    // Session 35 (s35-3, perf-log "the causal order's partial group"; commit fd2fbd8): a partial group before the causal
    // order's last, which then holds only the tail's 2 grids of tiles (at 1k d64 44 pairs instead of 112, d128 33 instead
    // of 58, d256 33 instead of 48; CausalOrder::partial, LaunchOptions::causal_partial, a run_order launcher): d64 causal
    // 1k +0.5%, 2k-16k 1.3-1.8% slower; d128 equal at 1k, 1-2% slower at 2k-16k; d256 1k +0.5%, 2k -1.3%, 4k -3%, 16k
    // equal; with a 1-grid tail 1-7% slower, a 3-grid one (d256) within 1% but 16k +1.2%. Removed.
    // Session 34 (s34-7, perf-log v63; commit 19ed955): the P V wait before the warpgroup takes its SFU turn (a
    // kWaitPvBeforeSfu Traits member) instead: 1-2.6% slower, dense and causal 1k-16k. Removed.
    // Session 34 (s34-6): with the SFU turns, ptxas puts the P V wait (WARPGROUP.DEPBAR.LE gsb0, 0x0) inside the turn, after
    // its BAR.SYNC and before the first exp (SASS s34-5), so a warpgroup holds the SFU turn while its P V finishes. The clock
    // pin (v49/v50) keeps the wait after the softmax (sass-overlap s34-6: 66 exps before it), and is 2-7% slower for it
    // (run_rows<..., PinSoftmax<Tr<64, 128, 4, 3, 1>, 3>>: dense 2k-16k 5-7%, causal 1k 2.3%, 16k 6.5%). Not kept.
    // Session 34 (s34-3, perf-log v61; commit b7a28ef): cuDNN's d64 loop (ncu s32-3: no S ahead -- S_j,
    // wait, max, [SFU turn: exps], P_j V_j, wait -- with SFU turns instead of the products') on two warpgroups, a kSeqLoop
    // Traits member: 10-19% slower than the two-warpgroup dense kernel (Tr<64, 128, 4, 2, 1>), itself 7-28% behind
    // production; with both turns or none 5-14%; on three warpgroups 10-20% behind production. Removed.
    // Session 34 (s34-1/2, perf-log v60; commits 1239ac9, b357b96): four consumer warpgroups (256-row tiles; 112 registers
    // each, enough only for 64-key blocks): 2% slower at 1k, 8-11% at 4k-16k, causal 1k 6%; at 64-key blocks the fourth
    // warpgroup was worth 13-25% over three, but 64-key blocks cost three 26-27%. The loop without S one block ahead (a
    // kSeqLoop Traits member: what 128-key blocks on four would need) 4-11% slower on three. Removed.
    // Session 33 (s33-2, perf-log v58): P's row sums by the tensor cores (a kRowSumMma Traits member, commit 9f7393d,
    // removed): each P V also multiplied P by a 128 x 8 block of ones (m64n8k16, the sums in its accumulator, rescaled with
    // O) instead of the softmax's FADDs and the epilogue's quad reduction: the pair 2.5-4% slower at 2k-16k, 1-2.5% at 1k.
    // Session 33 (s33-1, perf-log v57): a share of the exps on the FMA pipe (Traits kPolyEvery: every 8th / 4th 8-column
    // group by exp2_fma) with the SFU turns, among the SFU's exps or before the warpgroup's turn (a kPolyFirst Traits
    // member, removed): every 8th 6-8% slower, every 4th 12-16%, every 2nd (before the turn) 23-30%, dense and causal.
    // Session 32 (s32-1, perf-log v55, commit 394c49e): causal's first seqlen_q mod 192 + 192 x E rows on the
    // two-warpgroup kernel (128-row tiles ending there) behind the three-warpgroup one with PDL: E = 1 1k +0.9%, 2k -3%,
    // 4k -0.4%, 8k-16k within 0.5%; E = 0 within 1%; E = 2 1k -9%; the two-warpgroup kernel on every row 1k -7%. Removed.
    // Session 30 (v53), the second kernel: s30-1 the block-sparse instantiation (run_rows<Tr<64, 128, 4, 2, 1, true>,
    // true>) 0.1-0.4% slower than the dense two-warpgroup one, and without PDL (..., false>) 8k-16k 4% slower than the
    // three-warpgroup kernel alone; s30-2 its tiles from a counter in the workspace (commit adb83b5) no faster than the
    // static order; s30-3 only the last r rows on it where seqlen_q mod 192 is r in 1..64 (one 128-row tile, commit
    // 5407c61) no gain at 1k (.3317 against the three-warpgroup kernel's .3306 ms).
    // Session 28 (s28-1): the clock pin (v49) in the ping-pong kernels -- v24's pins (a barrier, a clock read ptxas
    // dropped) never moved the dense kernels' exps. At d64 (three warpgroups, PinSoftmax<Tr<64, 128, 4, 3, 1>, 3>) 1-2%
    // slower: not kept.
    {"d128 (prod)", 128, false, run<128, 128, 2, 2, 0, 1>},
    {"d128 (prod again)", 128, false, run<128, 128, 2, 2, 0, 1>},
    // Session 60 (s60-2, 25 reps, two rounds, paired): S ahead (Traits::kSAhead) on dense 96-key blocks, where the
    // registers hold it (16 B of spills), against the same shape without it: dense 1k / 4k / 8k / 16k 1.237-1.255 /
    // 1.176-1.181 / 1.163-1.169 / 1.159-1.161 against 1.110-1.112 / 1.096-1.097 / 1.093-1.094 / 1.082-1.083, causal 1k /
    // 4k / 16k 1.159-1.195 / 1.139-1.153 / 1.151-1.156 against 1.100-1.106 / 1.080-1.094 / 1.080-1.081. Not kept.
    // Session 57 (s57-9, two rounds of 80 reps, paired): the tile decoded by the producer (TileInSmem, v85's form; s49-1
    // before v84: causal 1k-4k 0.3-0.7% faster, dense within 0.4%): causal 1k 1.000 / .998, 2k .994 / .995, 4k .997 / .999,
    // dense 1k 1.002 / 1.007, 2k .996 / .998, 4k .9995 / .999, 8k 1.004 / 1.003 (the warm copy .998-1.002). Not taken:
    // d128 dense 1k is issue 9's lowest cell, causal 1k gains nothing.
    // Session 55 (s55-5, perf-log v84): the O store deferred to the next tile's prologue (Traits::kDeferStore), production
    // since; the kernel before it:
    {"d128 s54 (store in the epilogue)", 128, false, run_k<DeferStore<Tr<128, 128, 2, 2, 1>, false>>},
    // Session 56 (s56-3, 60 reps, paired; code in commit 13871a8): the staged O stored by producer warps (kStoreWarps, with
    // 32 producer registers and 232 consumer) instead of deferred: dense 1k-16k 1.007-1.013, causal 1.001-1.010, as the
    // store in the epilogue (s54: 1.002-1.011) -- not the v84 gain; 32 / 232 registers alone 0.997-1.010. s56-2, the
    // warps spinning on an mbarrier's try_wait for the hand-over: 1.03-1.08. Not taken.
    // s56-4 (50 reps, paired; commit ddd6fee): mbarrier waits with the suspend-time hint, the producer's / all: dense 1k-16k
    // 1.001-1.003 / .9998-1.006, causal .9995-1.004 / .997-1.004. Not taken.
    {"d128 s55 no epilogue (wrong)", 128, false, run_k<NoEpilogue<Tr<128, 128, 2, 2, 1>>>},
    {"d128 s55 no softmax0 (wrong)", 128, false, run_k<NoSoftmax0<Tr<128, 128, 2, 2, 1>>>},
    {"d128 s55 neither (wrong)", 128, false, run_k<NoSoftmax0<NoEpilogue<Tr<128, 128, 2, 2, 1>>>>},
    // Session 55 (s55-1, `sm90-s55/candidates/dev-*-s55-1.txt`, 60 and 100 reps, paired; code in commit c774d87): the
    // epilogue's O staged by stmatrix.x4 (Traits::kStMatrixO: kHeadDim / 16 shared stores a thread instead of kHeadDim / 4)
    // and the staging tile's read wait moved before the drain's turn, whose barrier then orders it, one warpgroup barrier
    // fewer (kStageWaitEarly), at d128, both d64 dense kernels, d256 (stmatrix) and the two-ring kernel. Against
    // production's first copy, its warm second copy .993-1.000: d128 dense 1k .9996 / 1.0001 / .9956 (stmatrix / wait /
    // both; 100 reps: 1.0034 / 1.0004 / .9995), 2k 1.0035 / 1.0028 / 1.0012 (1.0010 / 1.0012 / .9995), 4k-16k and causal
    // within .996-1.004; d64 1.000-1.004, d256 .997-1.006, two-ring 4k s = .25 .995 against the warm copy's .976. The
    // epilogue's instructions are not on the path that sets a tile's time. Removed.
    // Session 54 (s54-8, `sm90-s54/candidates/dev-d128-s3-s54-8.txt`): three K/V stages with O staged in the last block's
    // ring slots (d256's epilogue, store_o 3) and one Q buffer released after the tile's last S, Tr<128, 128, 3, 2, 3>
    // (230400 B of shared memory; ptxas 0 spills against production's 16 B), with and without EarlyProbe: paired against
    // production, dense 1k 1.113 / 1.102, 2k 1.066 / 1.062, 4k 1.036 / 1.030, 16k 1.021 / 1.010; causal 1k 1.093 / 1.099,
    // 2k-16k 1.015-1.046. The next tile's Q load, exposed again, costs more than the third stage gives. Removed.
    // Session 54 (s54-2, `sm90-s54/candidates/dev-d128-3wg-s54-2.txt`): d128 on three consumer warpgroups (192-row
    // tiles, 160 registers each), which fits only with narrower key blocks: Tr<128, 64, 4, 3, 2> (64 keys, 4 stages) and
    // Tr<128, 80, 3, 3, 2> (80 keys, 3 stages), O staged in Q, two Q buffers. ptxas: 0 spills at 64 and 80 keys; 96 spill
    // 132 B and serialise the wgmmas (C7512), 128 496 B. Paired against production at seqlens of whole 192-row tiles
    // (SM90_DEV_SEQLENS=1152,2304,4608,16128) and the standard ones: dense 1.16-1.32, causal 1.12-1.32 (bn80 the less
    // slow: dense 1152 1.21, 16128 1.25). A 64- or 80-key block carries a 128-key block's turn, barriers and row
    // reductions for half or less of its products. Removed.
    // Session 50 (s50-10): the causal order's zigzag (see d256's) on the 128-key kernel: causal 1k 1.006, 2k .997, 4k .990,
    // 16k .989 (production runs 8k-16k on the 192-key kernel); with a one-grid last group 1.005 / 1.013 / 1.011 / 1.019.
    // Not kept: d128 causal 4k is already 1.08 of cuDNN, and 1k is slower.
    // Session 50 (s50-6 .. s50-8, perf-log "the tile shift again, what a cold instruction cache costs, cluster pairs"; code
    // in commit a175dba): the dense static order on clusters of two CTAs, query blocks 2i and 2i + 1 of a head, each CTA
    // loading half of every K/V block and multicasting it to both (Traits::kDevClusterPair; d128 only: d64 has one page a
    // block, d256 stages O in the ring). Paired against production, 1k / 2k / 16k: form 1 (the producers forward their
    // consumers' releases through per-slot peer barriers) 1.037 / 1.007 / 1.006; form 2 (each consumer warp also arrives
    // on the partner's empty barrier) 1.029 / 1.014 / 1.008; the same clusters without multicast 1.026 / 1.009 / 1.004,
    // and without the start and end cluster barriers 1.007 / 1.002 / .999. With `.release.cluster` on the remote arrives
    // forms 1 and 2 were 14-29% and 71-77% slower (s50-6/7). Multicast adds nothing over the clusters, which cost
    // 0.4-2.6%: s42's skip-odd bound (1.6% at 1k) is not reached. Removed.
    // Session 49 (s49-1, two runs of 50 reps; commit d510b37 has the code): the tile decoded by the dense producer again
    // (TileInSmem<Tr<128, 128, 2, 2, 1>>, s38-6's form, with a kTileInSmem path in the dense producer's start_tile):
    // causal 1k .1627 / .1579 against .1637-.1638 / .1584-.1585 ms (+0.3-0.6%), 2k +0.4-0.7%, 4k +0.3-0.4%, 8k-16k 0.1-0.3%
    // slower; dense 1k-4k within 0.4% either way, 8k-16k 0.2-0.3% slower (ptxas: 24 / 32 B of spills against 20 / 24).
    // Not taken: d128 causal 1k's ~0.5% does not need an instantiation of its own.
    // Session 48 (s48-3, two runs of 50 reps): the causal order's L2 budget (run_group, MB) again at 1k-2k. d256 causal 1k
    // 12 MB .1656 / .1657 against production's .1671 / .1678 / .1673 / .1665 ms (1% faster, as s42-9), 2k 0.7% slower, 8 /
    // 10 / 14 MB within 0.5%; d128 causal 8 / 12 MB equal at 1k, 1% slower at 2k. Not taken: a 1k-only rule for 1%.
    // Session 47 (s47-4): the prologue's softmax by each warpgroup's rows (HalfDiag 2, perf-log v77) at d128, where a
    // causal 128-row tile's warpgroup 0 sees half of the diagonal block in every tile: 128-key blocks causal 1k 2.5%,
    // 2k 6%, 4k 7%, 16k 9% slower (HalfDiag<Tr<128, 128, 2, 2, 1>, 2>). Not taken.
    // The memory probes (session 42, see d256's): causal 1k .1550 (skip) / .1533 (hot) against .1622 ms, 2k .2447 / .2484
    // against .2533; dense 1k .2284 / .2275 against .2322, 2k .4303 / .4335 against .4340.
    // Session 51 (s51-8): a 1-grid last causal group (run_group<128, 128, 2, 2, 1, 16, 10>): causal 1k 1.003, 2k 1.015,
    // 4k 1.023 (80 reps, paired). Not taken (shapes.h causal_tail_grids).
    {"d128 always rescale", 128, false, run_k<AlwaysRescale<Tr<128, 128, 2, 2, 1>>>},
    {"d128 ar skip kv odd", 128, false, run_k<AlwaysRescale<SkipKVOdd<Tr<128, 128, 2, 2, 1>>>>},
    {"d128 ar kv hot", 128, false, run_k<AlwaysRescale<KVHot<Tr<128, 128, 2, 2, 1>>>>},
    // Session 33 (s33-2): the SFU turns (v56) on d128's two warpgroups, whose softmaxes overlap where the products (~1000
    // cycles a block) are shorter than a softmax (~1450): SfuTurns<Tr<128, 128, 2, 2, 1>> within 1% either way, dense and
    // causal 1k-16k, not kept (the block-sparse kernel takes them on long lists, below).
    // s33-6: the turns without the clock pin (the block-sparse kernel, which gains 2-4% from them, has none),
    // PinSoftmax<SfuTurns<Tr<128, 128, 2, 2, 1>>, 0>: 1-3% slower than production, 0-1% faster than no pin alone.
    // Session 31 (v54): the last round's pieces as a PDL secondary behind the whole rounds (production from the pair's
    // margin, kPairMargin: 4k on the standard grid), on the 128-key split instantiation without the early probe.
    // s31-1/2 (margin 2, pairing 1k-4k): 1k -5%, 2k 0, 4k +1.4-1.5%; with the probe 4k 0.8% slower, on the 192-key split
    // 0.2-1% slower, the secondary launched plainly (run_pair<..., 1>) 0.3-1% slower; the primary alone (..., 2) 1k
    // .2284 against the pair's .2528 ms, the pieces alone (..., 3) 32 / 43 / 54 us at 1k / 2k / 4k (runs of 4, 8, 17
    // key blocks; a whole tile 15 / 29 / 57 us): the pieces' kernel has a fixed ~20 us of its own.
    // Session 40 (s40-3, v73): DescPlus<Tr<128, 128, 2, 2, 1>> 0.3-1.6% slower, dense and causal 1k-16k. Not kept.
    // UniformWg<Tr<128, 128, 2, 2, 1>>: s40-5 0-0.8% faster dense, causal 1k equal; s41-2 1k dense 1.9% and causal 0.9%
    // slower, 4k-16k 0.3-0.7% faster. Not taken at d128 (perf-log v74); removed.
    {"d128 pair", 128, false, run_pair<Tr<128, 128, 2, 2, 1>, Tr<128, 128, 2, 2, 1, false, true>, flash::sm90::kPairMargin>},
    {"d128 pair m2 (all three)", 128, false, run_pair<Tr<128, 128, 2, 2, 1>, Tr<128, 128, 2, 2, 1, false, true>, 2>},
    {"d128 s27 (no pin)", 128, false, run_k<PinSoftmax<Tr<128, 128, 2, 2, 1>, 0>>},
    // Session 28 (s28-6): with the pin, the early K/V probe (v44; 0.5-1% slower at d128, 0.3-1.5% faster at d256:
    // production there since s28-7) and O rescaled after the P V wait (s24's place, v45: 1-2% slower at both):
    // EarlyProbe<Tr<128, 128, 2, 2, 1>> and RescaleInTurn<Tr<128, 128, 2, 2, 1>, false>.
    // The long-range instantiations (production from 8192 keys, dense and causal: kLongShape, and d256 with the
    // split) probe early since session 24 (LongRange, perf-log v44).
    {"d128 bn192 split (long prod)", 128, false, run_k<EarlyProbe<Tr<128, 192, 2, 2, 3, false, true>>>},
    {"d128 bn192 ring (long prod)", 128, false, run_k<EarlyProbe<Tr<128, 192, 2, 2, 3>>>},
    // Session 51 (s51-1): SkipDiag<EarlyProbe<Tr<128, 192, 2, 2, 3>>, 1> (perf-log v78; warpgroup 0 sees none of the first
    // 192-key block in some causal tiles): 8-9% slower at 8k-16k, dense as well, where it never skips. Not taken.
    // s33-6: the long-range kernels with SFU turns (96 exps a thread per 192-key block; no pin there), SfuTurns<...> of
    // the two above: within 0.5% of them at 1k-16k, dense and causal.
    // Session 28: the pin at 192-key blocks (PinSoftmax<EarlyProbe<Tr<128, 192, 2, 2, 3>>, 3>) 1.5-2% slower; the tail
    // split at 128-key blocks with the pin (Tr<128, 128, 2, 2, 1, false, true>, pinned as production's 128-key kernel)
    // 0.8% faster at 4k, 1.5-2% slower than the 192-key split at 8k-16k (s28-2): neither routed.
    // Session 27 (s27-3): the tail split at 128-key blocks for d128 dense 2k-4k, run_k<Tr<128, 128, 2, 2, 1, false, true>>:
    // 4k 1% faster than production, 2k 5% slower, 1k 3% slower (no split there: the code's cost). Not routed.

    {"d256 (prod)", 256, false, run<256, 80, 2, 2, 0, 3>},
    {"d256 (prod again)", 256, false, run<256, 80, 2, 2, 0, 3>},
    // s56-4 (40 reps, paired; commit ddd6fee): mbarrier waits with the suspend-time hint, the producer's / all: 1k, 4k, 16k
    // dense 1.001-1.002 / .999-1.001, causal 1.000-1.004 / 1.001-1.005. Not taken.
    // Session 51 (s51-1, s51-2; perf-log v78): the diagonal block left out by warpgroups that see none of it (SkipDiag,
    // production since): warpgroup 0 in 7 of a 1k head's 8 causal tiles. Paired against it, none / form 1 (cf556d2):
    // causal 1k 1.018 / 1.012, 2k 1.020 / 1.011, 4k 1.007 / 1.009, 8k 1.004 / 1.002, 16k 1.003 / 1.005; dense within 0.3%. The
    // 12 MB causal L2 budget on top (run_group<256, 80, 2, 2, 3, 12, 20>): 1k .997, 2k 1.002, 4k 1.006, 8k 1.020.
    // Session 51 (s51-7, s51-8; perf-log v79): the causal order's groups and last group again, with DRAM bytes under ncu
    // (run_group<256, 80, 2, 2, 3, MB, TAIL_TENTHS>), paired against the 2-grid tail of then: causal 1k tail 1 grid .987-.989
    // (DRAM 247-256 MB against 288), tail 3 1.058 (346 MB), 8 MB groups .991-.992 (273 MB), 24 MB 1.045 (308 MB), one group
    // (128 MB) 1.64 (669 MB); 2k tail 1 1.012-1.016 (302 against 331-353 MB), 8 MB 1.006-1.008; 4k tail 1 1.033, 8 MB 1.017.
    // So production takes a 1-grid tail at d256 1k only (shapes.h causal_tail_grids); the rule before, as the reference:
    {"d256 grp 16MB t2 (s50)", 256, false, run_group<256, 80, 2, 2, 3, 16, 20>},
    // Session 53 (s53-1): smaller groups again with the 1-grid tail at 1k (s48-3: 12 MB 1% faster; s51-10: 8 MB .992).
    {"d256 grp 8MB t1", 256, false, run_group<256, 80, 2, 2, 3, 8, 10>},
    {"d256 grp 6MB t1", 256, false, run_group<256, 80, 2, 2, 3, 6, 10>},
    {"d256 grp 4MB t1", 256, false, run_group<256, 80, 2, 2, 3, 4, 10>},
    {"d256 grp 2MB t1", 256, false, run_group<256, 80, 2, 2, 3, 2, 10>},
    // Session 53 (s53-5, s53-6; perf-log v82): the walk upwards (a head's tiles read each K/V block together when its
    // tiles start together), with production's groups (a third of L2) and with heads one after another (1-4 MB): s53-5
    // without the last block left out, causal 1k 1.013 / 1.001 / .995 (production's groups / 1 / 2 MB; DRAM 260 / 224 /
    // 227 MB against 248), 2k 1.016 / 1.038 / 1.044; downwards without kSkipDiag, 1 MB 1.043 (245 MB), production's
    // groups 1.020. s53-6, leaving it out: 1k .997 / .983 / .982 / .981 (4 MB; DRAM 268 / 227 / 228 / 241 MB against
    // 245), 2k .994 / 1.019 / 1.027 / 1.021, 4k .993 / 1.053 / 1.058 / 1.059; dense 0.4-1.5% slower. Production since
    // v82 for d256 causal, with two heads' groups at 1k (shapes.h use_upward_kernel, causal_l2_budget): "d256 up" below
    // is the production choice.
    {"d256 up", 256, false, run_k<Upward<Tr<256, 80, 2, 2, 3>>>},
    {"d256 up grp 1MB t1", 256, false, run_group_k<Upward<Tr<256, 80, 2, 2, 3>>, 1, 10>},
    {"d256 up grp 2MB t1", 256, false, run_group_k<Upward<Tr<256, 80, 2, 2, 3>>, 2, 10>},
    {"d256 up grp 4MB t1", 256, false, run_group_k<Upward<Tr<256, 80, 2, 2, 3>>, 4, 10>},
    {"d256 noskip grp 1MB t1", 256, false, run_group_k<SkipDiag<Tr<256, 80, 2, 2, 3>, false>, 1, 10>},
    // s51-10, with the 1-grid tail: 8 MB groups causal 1k .992, 12 MB 1.001 (60 reps, paired). Not taken: another 1k rule
    // for 0.8%.
    {"d256 no skip diag", 256, false, run_k<SkipDiag<Tr<256, 80, 2, 2, 3>, false>>},
    // Session 51 (s51-4; code in commit d663ec2): S_0 as an m64n64 product where the warpgroup sees <= 64 of its 80 columns
    // (a kNarrowS0 Traits member; each branch waiting for its own product, else ptxas serialised every wgmma, C7511; N = 48
    // and d64's three warpgroups serialised all the same): causal 1k 1.0006, 2k 1.008, 4k 1.009, 8k 1.009, 16k 1.003
    // paired against production (two injected arrives, C7519). Not kept.
    // Session 50 (s50-10, 40 reps, paired; code in commit 2956b67): the causal order's full groups decoded longest,
    // shortest, second longest, ... (Traits::kDevZigzag), which a simulation gave the same makespan with ~18% fewer
    // heads' K/V in flight: causal 1k 1.022, 2k 1.002, 4k 1.004, 16k .994; with a last group of one grid instead of two
    // 1.007 / 1.016 / 1.030 / 1.026; the 12 MB L2 budget .997 / .995 / 1.016 / 1.001. Not kept.
    // Session 49 (s49-1): TileInSmem<Tr<256, 80, 2, 2, 3>> (the dense producer's decode, as d128's above): dense 1k
    // 3.5% slower (.2305 / .2316 against .2223-.2238 ms), 2k 2%, 4k 1.2%, causal 1k 1-2%, 8k-16k within 0.5%; with the
    // causal order's 12 MB budget as well (run_group over it) causal 1k 1-1.5% slower, 8k 2%. Not kept.
    // Session 47 (s47-2): the prologue's softmax on the diagonal block's visible columns (HalfDiag; 128-row causal tiles
    // end 16 or 32 keys into an 80-key block in two of every five): by the tile's key end 0.4-0.8% slower at 1k-4k, by
    // each warpgroup's rows -0.6% at 1k to +0.5% at 16k. Not taken.
    // Session 31 (v54, s31-1): the pair as d128's (run_pair<Tr<256, 80, 2, 2, 3>, EarlyProbe<Tr<256, 80, 2, 2, 3, false,
    // true>>, M>): margin 6 (2k, 4k) 2k 3% slower, 4k equal; margin 2 (1k too) 1k 8% slower; 8k-16k equal to the
    // split kernel alone (0-0.4% faster). Not routed.
    // s33-6: SFU turns at d256 (40 exps a thread per 80-key block), SfuTurns<Tr<256, 80, 2, 2, 3>>: 0.5-1.5% slower;
    // without the pin as well 2-5% slower.
    // Session 34 (s34-4, perf-log v62; commit 4c69406): O staged in the ring with the slots swapped (warpgroup 0 in K_last's,
    // freed by warpgroup 1's last S; 1 in V_last's, freed by 0's last P V; a kOStageSwap Traits member): the epilogue 1-1.5k
    // cycles shorter, the next tile's Q wait as much longer; causal 1k-8k 0.6-1.5% faster, dense 1k 2.5% and 2k 1.2%
    // slower. Removed.
    // Session 36 (s36-1/2, perf-log v66; commit 9f57fc5): cuDNN's d256 shape (ncu s35-2) -- 128-key blocks on a K/V ring
    // of one stage (Q + K + V 192 KB), no S ahead: a turn issues P_{j-1} V_{j-1}, waits for it, issues S_j; the softmax runs
    // in S's registers (a kSeqTurn Traits member, SeqTurn mixin) -- with O staged in V_last's slot and a 32 KB tile of its
    // own (store_o 4, so K_last's slot goes back after the last S) or in K_last's and V_last's (3). Against production:
    // dense 7-15% slower (1k .2451 against .2281 ms, 16k 3.409 against 2.967), causal 1k 2.3% (.1695 / .1657), 2k-16k
    // 5-10%; store_o 3 1-2.5% behind 4; the sequential turn on production's shape (80 keys, 2 stages) 5-14% slower, so
    // the turn costs more than 128-key blocks gain (+1.2% at causal 1k, seq against seq). Profile (dense 1k): 5962 cycles
    // a 128-key block against 3154 an 80-key one (46.6 against 39.4 a key); the K/V waits of the one-stage ring 600-750,
    // the P V wait inside the turn. 128-key blocks with S ahead need 288 registers. Removed.
    // Session 40 (s40-3, v73): DescPlus<Tr<256, 80, 2, 2, 3>> within 1% (0.2-1.6% slower but at dense 16k). Not kept.
    // Session 41 (s41-2, perf-log v74): UniformWg<Tr<256, 80, 2, 2, 3>> dense +0.4-1.4%, causal -0.1 to +0.9%: production
    // (not with the tail split) since. The dense kernel without it, as the reference:
    {"d256 s40 (no uniform wg)", 256, false, run_k<UniformWg<Tr<256, 80, 2, 2, 3>, false>>},
    // Session 42: K and V loads left out in odd CTAs (SkipKVOdd; wrong results by design): what a cluster pair's multicast
    // could save where L2 is busiest (ncu s42-4: causal 1k at 84% of L2's peak, 13% less time per tile on 66 CTAs).
    // The memory probes (s42-5, s42-7, s42-8; without AlwaysRescale the probes also skip the rescales production does, so only
    // the "ar" forms compare): causal 1k .1522 (skip) and .1497 (hot) against .1651 ms, 2k .2275 / .2272 against .2452;
    // dense 1k .2321 / .2381 against .2384.
    {"d256 always rescale", 256, false, run_k<AlwaysRescale<Tr<256, 80, 2, 2, 3>>>},
    {"d256 ar skip kv odd", 256, false, run_k<AlwaysRescale<SkipKVOdd<Tr<256, 80, 2, 2, 3>>>>},
    {"d256 ar kv hot", 256, false, run_k<AlwaysRescale<KVHot<Tr<256, 80, 2, 2, 3>>>>},
    // Session 42 (s42-9): the causal order's L2 budget again (v30, s18-2: 8 and 24 MB within 1-3% of 16), run_group<256,
    // 80, 2, 2, 3, MB, 20> at 6 / 10 / 12 MB: causal 1k .1648 / .1636 / .1614 against .1659 / .1641 ms, 2k within 1%, 4k-8k
    // 1-2.5% slower; d128 at 6 / 10 MB equal at 1k and 1-2% slower from 2k. Not kept.
    {"d256 s28-5 (no probe)", 256, false, run_k<EarlyProbe<Tr<256, 80, 2, 2, 3>, false>>},
    {"d256 s27 (no pin)", 256, false, run_k<PinSoftmax<EarlyProbe<Tr<256, 80, 2, 2, 3>, false>, 0>>},
    {"d256 split (long prod)", 256, false, run_k<EarlyProbe<Tr<256, 80, 2, 2, 3, false, true>>>},
    // Session 35 (s35-1, perf-log v65; commit ef47aaa): Q loaded as two 64-row halves, each warpgroup waiting on a full
    // barrier of its own (a kQHalves Traits member, 64-row Q boxes; the buffer still released by both): 0.5-3% slower at
    // every dense and causal length, the split kernel alike; the tile start's Q wait unchanged in the profile (1377 against
    // 1405 cycles at dense 1k): halving the bytes a warpgroup waits for does not shorten the load's latency. Removed.
    {"d256 split s27 (no pin)", 256, false, run_k<PinSoftmax<EarlyProbe<Tr<256, 80, 2, 2, 3, false, true>>, 0>>},

    // d64 block-sparse: two warpgroups on one ring (production below 3 key blocks per list since session 41, 6 before),
    // and since session 21 three on two K/V rings (Traits::kTwoRings; production from 3 blocks, shapes.h use_two_rings;
    // sm90_dev times both kernels at every density). The two-warpgroup kernel
    // with the clock pin: 2-4% slower (s27-2).
    {"d64  bs 2wg (prod)", 64, true, run<64, 128, 4, 2, 0, 1, true>},
    {"d64  bs 2wg (prod again)", 64, true, run<64, 128, 4, 2, 0, 1, true>},
    {"d64  bs 3wg 2 rings", 64, true, run<64, 128, 2, 3, 0, 1, true>},
    {"d64  bs 3wg 2 rings again", 64, true, run<64, 128, 2, 3, 0, 1, true>},
    // Session 57 (s57-10, perf-log v86; two rounds of 80 reps, paired): the single warpgroup's index by two divisions at
    // every tile start, as before v86 (kSingleShift off): 4k s = .1 1.022 / 1.028, .25 1.006 / 1.008, .5 1.004 / 1.004, 8k
    // s = .25 1.003 / 1.003, 16k 1.002 / 1.002 of production's first copy (its warm copy .964 / .976, .982 / .985, .988 /
    // .991, .993 / .994, .998 / .998).
    // Session 58 (perf-log "Tried and not kept -- session 58"; code in commits of session 58, removed; two rounds of 60
    // reps, paired, fa-bench's dirty flush (SM90_DEV_FLUSH=256)), the two-ring kernel against production's first copy
    // (its warm copy .982-.998): Q loaded with L2 evict_first (s58-1, H100, with the flush and without) 4k s = .1 1.015 /
    // 1.017, .25 .998-.999, .5 1.000; the first Q after the first schedule (s58-4, s58-5, H200) 4k s = .1 1.016-1.020,
    // .25 1.007-1.010; the scheduler's L2 prefetch of each schedule's first 4 / 2 key blocks (prefetch.global.L2 per
    // line; s58-4, H200) 4k s = .1 1.231-1.244 / 1.175-1.180, .25 1.038-1.042 / 1.021-1.024, 8k-16k 1.03-1.08 /
    // 1.02-1.05; the next tile asked for after the slot wait, one tile fewer claimed ahead (s58-5, H200) 4k s = .1 1.013 /
    // 1.018, .25 .995 / .995, 8k-16k 1.001-1.003, ctatimes' idle at the end 5.3 -> 5.1% (s = .1). None taken.
    // Session 59 (s59-2, H100, two rounds of 60 reps, paired, the dirty flush; code in commit a1e6e6f, removed): the
    // scheduler's first take compared after the build (kDevRawTake) 4k s = .1 1.003 / 1.005, .25-.5 and 8k-16k .999-1.001;
    // with the first list prefetched to L2 at the start as well (kDevListPrefetch) 4k s = .1 1.024 / 1.029, .25 1.012,
    // .5 1.007, 8k 1.009, 16k 1.001-1.002 (the warm copy .983-.999). Not taken. s59-5 (commit d03ef3b): the CTAs' first K/V
    // loads staggered by 250 / 700 cycles x (CTA % 8) (kDevStagger), warm against warm 4k s = .1 .996 / .995 and .998 /
    // .997, .25 1.003 / 1.003 and 1.006 / 1.005. Not taken.
    {"d64  bs 2 rings s57 (single by division)", 64, true, run_k<SingleShift<TwoRings, false>>},
    // Session 57 (s57-12, perf-log v87; two rounds of 80 reps, paired): the K/V loaders decoding each tile themselves, as
    // before kLoaderMhb: 4k s = .1 1.031 / 1.032, .25 1.007 / 1.007, .5 1.006 / 1.006, 8k s = .1 1.012, 16k 1.002-1.003.
    // s57-13 (one round of 80 reps; commit 514b7da): the Q loader taking the scheduler's decode too (a kQLoaderMhb Traits
    // member): 4k s = .1 / .25 / .5 1.003 / 1.001 / 1.000, 8k s = .1 .996 (the warm copy .981 / .987 / .992 / .987). Removed.
    {"d64  bs 2 rings s57 (loaders decode)", 64, true, run_k<LoaderMhb<TwoRings, false>>},
    // Session 57 (s57-2, 60 reps; code in commit ad61196, Traits kVStages and a VStages mixin): O staged in Q (store_o 2),
    // which leaves room for a third stage of K or of V in both rings: 4k s = .1 / .25 / .5 .0851 / .1660 / .3122 ms, with
    // K3V2 .0872 / .1649 / .3137, with K2V3 .0858 / .1659 / .3119, 8k-16k within 1% (s57-1's production: .0789-.0816 /
    // .1633-.1647 / .3050-.3083). Neither depth pays for O in Q (s44-1: 0-2.5% slower). Removed.
    // Session 57 (s57-1, 60 reps, paired; code in commit 055cecc): K and V of the heads a round ahead prefetched to L2 by
    // each tile's Q loader (Traits kPrefetchHeads: tile x prefetches key blocks x mod num_m_blocks, + num_m_blocks, ... of
    // the (batch, head) prefetch_ahead tiles on, cp.async.bulk.prefetch.tensor), 6 heads ahead (a round) / 12: 4k s = .1
    // 1.051 / 1.040, .25 1.024 / .998, .5 1.010 / .996, 8k s = .1 1.023 / 1.000, 16k .999-1.006, against the warm copy's
    // .963 / .977 / .989 / .982. d128 block-sparse (5 / 10 heads ahead): 4k s = .1 1.224 / 1.208, .25 1.071 / 1.049, .5
    // 1.025 / 1.016, 8k s = .1 1.064 / 1.046; the nearer the prefetch to its use, the slower. Removed.
    // s56-4 (50 reps, paired; commit ddd6fee): mbarrier waits with the suspend-time hint, the producer's / all: 4k s = .1
    // 1.007 / 1.001, .25 1.002 / 1.007, .5 .999 / 1.012, 16k s = .25 1.000 / 1.008, against the warm copy's .965 / .980
    // / .989 / .998. Not taken.
    // Session 55 (s55-5, 60 reps): the two-ring kernel with the O store deferred (DeferStore): 4k s = .1 / .25 / .5 1.014 /
    // 1.001 / 1.009 of its first copy (the warm copy .955 / .981 / .991), 16k s = .25 1.009. Not taken.
    {"d64  bs 3wg 2 rings s55 no epilogue (wrong)", 64, true, run_k<NoEpilogue<Tr<64, 128, 2, 3, 1, true>>>},
    // Session 50 (s50-12, 60 reps, rotated, paired; code in commit 5e66458): the last S tiles handed out as a pair-only and a
    // single-only half each (the other ring's list empty, its rows not stored; Traits::kDevSplitHalves). S = 44 at 4k
    // s = .1 / .25 / .5: .983 / .987 / .996 against the two-ring kernel's cold first copy, but its warm second copy
    // (the halves run warm: each follows the same instantiation) .971 / .974 / .989, so ~1% slower; S = 24 and 88
    // 1-2% slower; 8k-16k 0.7-3% slower. ctatimes: the CTAs' mean idle 5.5 / 4.6 / 4.7% -> 4.6 / 2.8 / 2.9% of the
    // launch, but each half pays a tile's fixed cost and its Q load. Removed.
    // Session 50 (s50-1, perf-log "the tile shift again, what a cold instruction cache costs, cluster pairs"; code in
    // commit ed1e0d9, session 45's 7fd72e8): the two-ring tile shift (TileShift 1) and with the short tiles last (2), timed
    // in rotated rounds against the two-ring kernel's first copy (paired, two runs of 80 reps): 4k s = .1 1.012 / 1.004
    // and 1.026 / 1.020, s = .25 .999 / 1.003 and .996 / .999, s = .5 1.002 / 1.000 and .993 / .990; 8k and 16k 0-0.5%
    // slower. The ~2% a greedy simulation gave is not there. Removed again.
    // Session 49 (s49-2/3, two runs of 40 reps; commit cc5a220 has the code): d64 block-sparse in two kernels, as d64
    // dense (v53): the two-ring kernel on rows [0, 192 k) (k even, so the rest starts on a 128-row mask block) as the PDL
    // primary, the two-warpgroup block-sparse kernel on the rest behind it (a PdlRole mixin; launch took block-sparse row
    // parts, the secondary counting tiles on the workspace's second int, zeroed with the primary's). Against the two-ring
    // kernel (two copies): 4k s = .1 .0883 / .0878 against .0829 / .0798 and .0820 / .0798 ms (6-10% slower), s = .25
    // 2-4%, s = .5 0.5-2%, skewed 2-4%; 8k 0-1.5% slower; 16k within 0.5%. The second kernel's launch and its CTAs' first
    // schedules cost more than the 11 -> ~10.8 rounds it saves (predicted +2%). Removed.
    // Session 42 (s42-12, perf-log v75): the three warpgroups taking dense's turns, products and SFU, O rescaled in the
    // turn, no clock pin, with empty turns owed where a list is shorter (a kDevRingTurns Traits member then): against
    // production then (free, pinned) 4k s = .1 .0809 against .0809 / .0802 ms, s = .25 .1623 against .1649
    // / .1632, s = .5 .3077 against .3174 / .3165; 8k +1.4 / +3.8 / +4.5%, 16k +3.2 / +3.9 / +4.9%. With the pin 1-2.5%
    // slower than without, products' turns alone (no SFU turns) within 1% of free. Production since; "s41 (free)" is the
    // kernel before. s42-14: turns only in the tiles whose lists
    // differ by no more than an eighth, the others free (a run-time choice: tile_turns around every barrier), no faster
    // than free (8k s = .5 1.1587 / 1.1539 against 1.1660, always 1.1158 ms). Production takes them in every tile. s42-15:
    // on skewed lists ("bs0.50k4": odd query blocks keep a quarter as many) 4k equal to free, 16k 4.5-5.4% slower.
    // Session 43 (perf-log "Measurement -- block-sparse tile starts and short lists"; commit 1121081 has the code),
    // sm90_dev against production, none kept:
    //  - s43-3 SchedLead (the tile atomic asked after the first schedule, two rings' lists loaded together): first schedule
    //    published at 5.8k cycles against 6.5k (two rings), 5.0k against 4.8k (d128); times within the spread.
    //  - s43-5/6 VEarly (a tile's V_1 loaded before its K_2): d128 4k s = .1 .0674 / .0663 against .0660 / .0656 / .0656
    //    ms (40 reps), two rings 0-1% slower; SplitKV (one ring: K and V from loader threads of their own) 1-3% slower.
    //  - s43-8 PrefetchHeads (the scheduler warp prefetching to L2, by prefetch.global.L2, the K and V of the head whose
    //    first tile comes one round later): d128 4k s = .1 .0766 / .0746 against .0654 / .0652 / .0638 (15% slower), two
    //    rings 1-5% slower; its profile's K/V waits fell only 5-20%.
    // Session 44 (perf-log "short lists' DRAM traffic, deeper rings again, the counter's memset"; commit b6bdd30 has the
    // code), against production, none kept:
    //  - s44-1 the rings' depths again after v73 / v75 (v64, session 35: 4-24% slower): O staged in Q (store_o 2, the O
    //    tile's 24 KB freed) alone 0-2.5% slower; with ring 0 at three stages (RingDepths<.., 3, 2>: Traits kStages1,
    //    ring_parity, Shape stages1) 3-7% slower at every cell (4k s = .1 .0889 against .0857 / .0829 ms), ring 1 at three
    //    4-9%. Profile at 4k s = .1: the pair's K/V wait 1652 -> 705 cycles a loop block, but the turns' wait 205 -> 549 and
    //    the drain 881 -> 1351 (the single's ring is now the laggard its turns wait on): the tile only 1.5% shorter.
    //  - s44-5 the tile counter zeroed by the kernel's last CTA instead of a memset before the launch (kDevSelfReset, on a
    //    workspace of its own): within the spread everywhere (d128 4k s = .1 .0661 against .0675 / .0662 ms; causal 1k-16k
    //    within 0.5%).
    {"d64  bs 2 rings s41 (free)", 64, true, run_k<FreeRings<TwoRings>>},
    // Session 45 (s45-3/4, perf-log "the two-ring kernel at density 1, the tile shift"; commit 7fd72e8 has the code): the
    // tiles shifted 64 rows where seqlen_q mod 192 is 64 (Traits kDevTileShift, LaunchOptions::sparse_shift), so each
    // head's first and last tiles hold the pair's 128 real rows where its last held the single's 64, alone and with
    // those short tiles handed out after every middle one: s45-3 0.3-3% faster at 4k, s45-4 (40 reps) within the spread
    // of production's two copies (4k s = .1 .0840 / .0862 against .0840 / .0800 ms, s = .5 .3020 / .2964 against .3018 /
    // .2970). Removed.
    // Session 42 (s42-5, perf-log "what K and V's bytes cost"; commit ba8fbbd): the two-ring kernel with ring 1's K/V loads
    // left out in odd CTAs (what multicasting the shared list to a cluster pair would save) and in every CTA (half its
    // L2 -> SMEM bytes): within 1% of production at 4k-16k, every density (4k s = .5 .3156 / .3180 against .3169 / .3165
    // ms) -- its L2 traffic (52-64% of L2's peak) is not what it waits on. A kDevSkipRing1 Traits member; removed.
    // s38-6 (perf-log v71): the tile decoded by the producer (TileInSmem), production for the two-ring kernel since; on
    // the two-warpgroup one (TileInSmem<Tr<64, 128, 4, 2, 1, true>>) 4k s = .1 1-3% faster, 8k 1% slower (where production
    // runs the two-ring kernel): taken in session 39 (v72), below.
    // Session 40 (s40-2/3, perf-log v73): the two-ring kernel with its descriptors from one per operand and block
    // (DescPlus) and its ring position, ring and row group broadcast from lane 0 (UniformIt), production since: 16k s = .5
    // 4.660 against 5.213 / 5.190 ms, 8k 1.184 against 1.279 / 1.276, 4k .324 against .347 / .344; DescPlus alone 2-6%
    // faster, UniformIt alone 0-6%. The s39 candidate below is the kernel without both. On the two-warpgroup kernel
    // DescPlus<Tr<64, 128, 4, 2, 1, true>> was within 1% (s40-2). d128 block-sparse with it (DescPlus<...> under
    // run_turns_by_length) 0-1% slower. Not kept there.
    // UniformWg on the v73 two-ring kernel 0.5-1% slower (s40-5) and 0.5-1.3% (s41-2); on the two-warpgroup one within
    // 1% both times. Removed.
    {"d64  bs 2 rings s39 (no desc+, uniform)", 64, true, run_k<UniformIt<DescPlus<FreeRings<TwoRings>, false>, false>>},
    {"d64  bs 2 rings s37 (no tile in smem)", 64, true, run_k<TileInSmem<FreeRings<TwoRings>, false>>},
    // Session 39 (s39-4, perf-log v72): the tile decoded by the producer on the two-warpgroup kernel too (production since),
    // which runs lists of < 6 blocks (4k s = .1: 0.3-3% faster) and, listed, d64's windows of <= 768 keys (1-4%); the
    // "s38" candidates are the kernels without it.
    {"d64  bs 2wg s38 (no tile in smem)", 64, true, run_k<TileInSmem<Tr<64, 128, 4, 2, 1, true>, false>>},
    {"d64  listed", 64, false, run_k<Tr<64, 128, 4, 2, 1, true>>},
    {"d64  listed s38 (no tile in smem)", 64, false, run_k<TileInSmem<Tr<64, 128, 4, 2, 1, true>, false>>},
    // Session 35 (s35-1, perf-log v64; commit ef47aaa): rings of unequal depth again (s22-2/4 had them before the fixed
    // roles and the clock pin), ring 0 (the pair's) deeper: 3/2 with one Q buffer and the O tile, 3/2 with two Q buffers and
    // O staged in Q, 4/2 with one Q buffer and O in Q (a RingDepths mixin over Traits kStages1 / ring_parity, Shape
    // stages1): 4-24% slower at every density and length (16k s = .5: 5.11 / 5.17 / 5.17 against 4.93 / 4.95 ms; 4k s = .1
    // .103 / .094 / .110 against .091 / .087). Profile (3/2, one Q buffer): the loop 3481 against 3577 cycles a block, its
    // K/V waits 393 against 419, but the tile start's Q wait 2202 against 457. Removed.
    // Session 32 (s32-4): the two-warpgroup kernel with SFU turns (SfuTurns<Tr<64, 128, 4, 2, 1, true>>): 4k s = .1
    // equal, s = .5 +2.5%, 8k-16k +3-8%, still 2-6% behind the two-ring kernel; SFU turns alone 10-20% slower.
    // Session 33 (s33-1): the two-ring kernel with every 8th / 4th 8-column group of P on the FMA pipe 4-6% / 8-13% slower;
    // the two-warpgroup kernel with every 4th 0-3% slower, with SFU turns and the FMA share before them 4-7% slower.
    // Session 27 (perf-log v49): production is fixed rings with the clock pin; session 26's rotating rings without it.
    // (run_k<PinSoftmax<FixedRings<TwoRings, false>, 0>>: 2-4% slower than production in s32-4.)
    // Session 33 (s33-9, perf-log "two-ring pair's turns without branches"): the pair's turns at the tensor cores, at the
    // SFU, or both, on barriers whose id and count a select chose (the single syncing and arriving on stand-ins of its own
    // 128 threads; a kPairTurns Traits member, commit 6965047, removed), with the clock pin and without: every form 1-8%
    // slower than production; the pair's SFU turns without the pin closest (16k s = .5 0.7%, 4k 3-6% slower).
    // Session 28 (s28-1): the pair taking ping-pong turns, the single none (Traits::kPairTurns, commit a112468, removed):
    // 1-3% slower at s = .5, as on rotating rings without the pin (s21-5/7).
    // Since session 33 (v59) lists of >= 6 key blocks on the instantiation with SFU turns (s33-2 .. s33-4, SFU turns on
    // every list, SfuTurns<Tr<128, 128, 2, 2, 2, true>>: 4k s = .1 0-3.5% slower, 6-8 blocks 0-3% faster, 13-64 blocks
    // 3-5%; the turns switched at run time in one instantiation, predicated or branched round, slower than none).
    {"d128 bs (prod)", 128, true, run_turns_by_length<Tr<128, 128, 2, 2, 2, true>>},
    {"d128 bs (prod again)", 128, true, run_turns_by_length<Tr<128, 128, 2, 2, 2, true>>},
    // Session 63 (s63-7, two rounds of 60 reps, paired, dirty flush; code in commit 8add64a, removed): the next tile's Q
    // issued only once 1 / 2 / all but one of the running tile's K/V blocks were (Traits::kQAfterKV; dev/io_floor_tma.cu's
    // model, s63-6, had it 1% faster at 4k s = .1 and 2% at 8k). Against production's first copy: 4k s = .1 .998-1.005 /
    // .997-1.000 / .998-1.000 (the warm copy .985 / .994), .25 1.000-1.004, .5 1.004-1.009, 8k .998-1.008, 16k 1.006-1.011.
    // Outputs bit-identical. Not kept.
    // Session 60 (s60-6, three rounds of 60 reps, dirty flush; code in commit b6052d4): S_0
    // and / or the drain's P V issued without a ping-pong turn. Warm against production's warm copy (.983-.988 at 4k s =
    // .1): S_0 free .982-.986, the drain free .985-.988, both .988-.991; at 4k s = .25 and 8k s = .1 S_0 free 1.010-1.012
    // warm (production .989-.994). Nothing measurable at s = .1, slower on longer lists. Removed.
    // Session 60 (s60-1, 40 reps, two rounds, paired against production's first copy with the dirty flush): one consumer
    // warpgroup per CTA and two CTAs an SM (Traits::kCtasPerSm), 64-row tiles and 64-key blocks (two Q buffers, two
    // stages, O staged in Q: 97 KB a CTA), so that one CTA's tile boundary runs beside the other CTA's loop; each 128-row
    // mask block's K/V crosses L2 -> SMEM twice. Tr<128, 64, 2, 1, 2, true>, 128 registers at launch (40 / 216 after
    // setmaxnreg), no spills: 4k s = .1 / .25 / .5 1.149-1.169 / 1.240-1.252 / 1.259-1.270, 8k s = .1 1.224-1.231, 16k
    // s = .1 1.255-1.261 (production's warm copy .983-.999); with the softmax pinned before the P V wait (kPinSoftmax 3)
    // 1.18-1.30; the same kernel on one CTA an SM (OnePerSm) 1.53-1.89. Commit 2438f06 has the code (consumers 1,
    // Traits::kCtasPerSm, Shape::smem_limit). Not kept.
    // Session 60 (s60-2, 40 reps, two rounds, paired, dirty flush): S_{j+1} issued with P_{j-1} V_{j-1} (Traits::kSAhead)
    // on 64-key blocks, four stages (at 128 keys ptxas serialises the wgmmas for registers, C7512, 208 B of spills): 4k s =
    // .1 / .25 / .5 1.103-1.152 / 1.294-1.320 / 1.346-1.364, 16k s = .1 1.428-1.432, against the same shape without it
    // 1.024-1.042 / 1.157-1.168 / 1.186-1.196 / 1.254-1.257. On d128 dense 96-key blocks (16 B of spills) 5-12% slower
    // than without it (the dense comment above). Commit 2438f06 has Traits::kSAhead. Not kept.
    // Session 60 (s60-4): a third stage of V (K2V3, s57-2's .991 against the warm copy's .979) or of K (K3V2), two Q
    // buffers (sm90_dev's VStages mixin over s57-2's Traits::kVStages), under fa-bench's dirty flush.
    //   Three rounds of 60 reps (commit 2438f06 has the code): 4k s = .1 K2V3 1.000 / .999 / .995 cold, .987 / .984 / .984
    //   warm against production's warm copy .988 / .982 / .986; K3V2 1.007-1.009 / .994-.997; s = .25 K2V3 1.035-1.044,
    //   K3V2 1.019-1.030. Outputs bit-identical. Neither deeper ring pays under the dirty flush either. Removed.
    // Session 59 (perf-log "Tried and not kept -- session 59"; removed), paired against production with the dirty flush
    // (SM90_DEV_FLUSH=256), 50-60 reps, H100. A candidate whose code differs from the launch before it runs with a cold
    // instruction cache, as production's first copy does; a copy right after it runs warm, as "(prod again)" (.983-.995):
    //  - s59-1, s59-3, s59-4: the late epilogue (Traits::kLateEpilogue, commit 6832017): the short-list tile loop rotated,
    //    an iteration ending once the next tile's S_0 is done, so the tile's epilogue ran under that S_0 (outputs
    //    bit-identical, no C75xx; a P V carried over the loop's back edge made ptxas serialise every wgmma, C7514/C7515).
    //    4k s = .1, warm against warm: 1.023 / 1.023 (S_0 always first), 1.026-1.028 (S_0 first only where Q and K_0 had
    //    landed by the drain, a barrier's AND over the warpgroup: kLateAdaptive, commit 73c676b), 1.021-1.025 and
    //    1.037-1.039 with the Q buffer released once the next S_0 is done (kLateQEarly, commit ed2705c); cold against cold
    //    1.079-1.095. On every list (no SFU turns on the long ones) 4k s = .25 1.11, 8k / 16k s = .1 1.09 / 1.12.
    //  - s59-2: the scheduler's first take kept raw and compared after the build (kDevRawTake, commit a1e6e6f): 4k s = .1
    //    1.005 / 1.007, elsewhere .999-1.004; the first schedule was published at 6832 cycles against 6853 (the compare did
    //    not wait on the atomic). With the first list and count prefetched to L2 at the kernel's start (kDevListPrefetch):
    //    published at 5226, the first tile's wait 5498 cycles against 7240, but 4k s = .1 1.008 / 1.015, .25 1.004-1.007,
    //    8k 1.006-1.007 (the two-ring kernel 1.024 / 1.029 at 4k s = .1): as s58-2, an earlier start did not pay.
    //  - s59-5: the CTAs' first K/V loads held back by 250 / 700 cycles x (CTA % 8) after the first schedule, so that the
    //    first rounds do not start in step (kDevStagger, commit d03ef3b), warm against warm: 4k s = .1 .999 / 1.001 and
    //    1.004 / 1.002, .25 1.006 / 1.005 and 1.010 / 1.013, 8k s = .1 1.001 / 1.002 and 1.004 / 1.003.
    // Session 58 (perf-log "Tried and not kept -- session 58"; removed), paired against production's first copy with
    // fa-bench's dirty flush (SM90_DEV_FLUSH=256), production's warm copy .987-.998 in the same runs:
    //  - s58-1 (H100, 60 reps): L2 eviction priorities (a kL2HintQ / KV / O Traits triple, v67's) -- Q evict_first, Q and
    //    O evict_first, Q and K/V evict_first, Q evict_first with K/V evict_last: 4k s = .1 .999 / .996 / 1.259 / .994,
    //    .25 .999 / .999 / 1.084 / 1.000, .5 1.000 / .999 / 1.025 / 1.002, 8k-16k .999-1.002 but K/V evict_first
    //    (1.05-1.16). ncu under the dirty flush (ncu's cache control off), 4k s = .1: production writes 42.5 MB to DRAM
    //    during the launch (23-26 after a clean flush, s44-3), Q evict_first 40.2, Q and O 39.3, in the same time (ncu
    //    58.3-60.4 us against 59.7-60.0); with K/V evict_first it reads 127 MB instead of 97.
    //  - s58-2 (H100, 60 reps): the first Q after the first schedule (kDevFirstQAfterSched): 4k s = .1 1.019 / 1.021,
    //    .25 1.010, .5 1.006-1.007, 8k 1.006. The first schedule was published 1.1k cycles earlier (3706 against 4765:
    //    the first Q's DRAM traffic does hold the list read back) and the first tile waited 4295 against 5151 cycles, but
    //    the first Q then waited 981 cycles a tile on average where it waited 327.
    //  - s58-3 (H100, 80 reps, three rounds): the 3-block lists without ping-pong turns (kPingPong off; with the clock pin,
    //    kPinSoftmax 3): 4k s = .1 1.020 / 1.019 / 1.018 and 1.017 / 1.019 / 1.022.
    //  - s58-4 (H200, 60 reps): the scheduler's L2 prefetch (prefetch.global.L2, a line per lane) of each schedule's first
    //    4 / 2 key blocks once published: 4k s = .1 1.134 / 1.128 and 1.095 / 1.084, .25 1.043-1.044 / 1.020-1.021, .5
    //    1.015 / 1.004-1.005, 8k 1.05 / 1.03, 16k 1.02 / 1.01; the profile's loop K/V wait 342 -> 713 cycles a block.
    //    (L2 prefetch has lost every time: s15-2, s43-8, s57-1.)
    //  - s58-5 (H200, 60 reps): the next tile asked for after the slot wait (kDevLateTake): 4k s = .1 .997 / .995, .25
    //    1.001 / 1.002, .5 .997 / .998, 8k 1.004 / 1.005, 16k .999-1.000 (the warm copy .990-.998); ctatimes' idle at
    //    the end 3.7% of the launch either way.
    //  - s58-7 (H100, 60 reps): 64-key blocks on a four-stage ring, the same shared memory (two Q buffers, O staged in Q),
    //    every list: Tr<128, 64, 4, 2, 2, true>, 168 registers, no spills. 4k s = .1 1.046 / 1.045, .25 1.166 / 1.162, 8k
    //    s = .1 1.164 / 1.165 (the warm copy .991-.997).
    // Session 57 (s57-12, perf-log v87; two rounds of 80 reps, paired): the K/V loader decoding each tile itself, as before
    // kLoaderMhb: 4k s = .1 1.023 / 1.031, .25 1.006 / 1.011, .5 .998 / 1.002, 8k s = .1 1.006 / 1.001, 16k 1.001 / 1.001.
    // s57-13 (one round; commit 514b7da): the Q loader with the scheduler's decode too: 4k s = .1 / .25 / .5 1.008 / .998 /
    // .991, 8k .993 (the warm copy .990 / .991 / .991 / .987). Removed.
    {"d128 bs s57 (loaders decode)", 128, true, run_turns_by_length<LoaderMhb<Tr<128, 128, 2, 2, 2, true>, false>>},
    // Session 57 (s57-9, two rounds of 60 reps, paired): the short lists with the SFU turns too (v59: 3-block lists -3.9%
    // to +2.4%) / with the early probe (Traits::kEarlyProbe, the long ones as production): 4k s = .1 1.010 / 1.019 and
    // 1.001 / 1.019, against the warm copy's .990 / .992; the long lists' cells as production's. Not taken.
    // Session 57 (s57-2, 60 reps, paired; code in commit ad61196): V's ring three deep (v22's K2V3, session 16: 4k s = .1
    // 1-2% faster then), two Q buffers, 2 KB left for the schedules (launch fails at 16k), on the short lists with the
    // long ones on the SFU-turn instantiation: 4k s = .1 .991 against the warm copy's .979; s = .25-.5 and 8k-16k .990-.998
    // (the warm copy .989-.998). On every list (no SFU turns) 4-6% slower at s = .25-.5. Removed.
    // s56-4 (50 reps; commit ddd6fee): mbarrier waits with the suspend-time hint, the producer's / all, by time: 4k s = .1
    // .0680 / .0676 ms against .0663 / .0654, .25 .1281 / .1282 against .1267 / .1257, .5 .2315 / .2316 against .2325 /
    // .2294, 16k s = .25 1.7360 / 1.7272 against 1.7365 / 1.7361. Not taken.
    // Session 56 (s56-1, 60 reps, paired; shapes.h's schedule reserve in Shape::q_stages 2 KB instead of 4 so that two Q
    // buffers fit, not committed): Tr<128, 128, 2, 2, 1, true>, a staging tile of its own (store_o 1, Q released after the
    // tile's last S), on the short lists' kernel, alone / with the deferred store (DeferStore): 4k s = .1 1.006 / 1.016,
    // s = .25 .981 / .984, s = .5 .981 / .986, 8k s = .1 .982 / .980, 16k s = .1 .995 / .995, against production's warm
    // copy .989 / .986 / .985 / .981 / .997 -- none more than .001 beyond it. Also on the long lists' (turns) kernel: 4k
    // s = .1 .998 / 1.013; at 16k its launch failed (400). Not taken.
    // Session 55 (s55-8, 60 reps, paired; code in commit 70af399, perf-log v84): the deferred O store here (O staged in
    // Q: the store issued after the next tile's S_0, the Q buffer released after that tile's first softmax): 4k s = .1 / .25
    // / .5 1.059 / 1.041 / 1.040, 8k s = .1 1.042, 16k s = .25 1.057. Not taken.
    // (UniformWg on it: 0.5-1% slower in s40-5, 0.9-2.6% in s41-2. Removed.)
    {"d128 bs s32 (no sfu turns)", 128, true, run<128, 128, 2, 2, 0, 2, true>},
    // s39-4 (perf-log v72): d128 block-sparse with the tile decoded by the producer (production since): 4k 0-2%, 8k-16k
    // 2-4% faster. The candidate below is the kernel without it.
    {"d128 bs s38 (no tile in smem)", 128, true, run_turns_by_length<TileInSmem<Tr<128, 128, 2, 2, 2, true>, false>>},
    // s34-7 (perf-log v63): with the P V wait before the SFU turn (kWaitPvBeforeSfu), the turns' gain gone (as slow as none).
    // s33-8: the turns with the clock pin as well (v49's; within 1% either way without the turns, s28-2),
    // PinSoftmax<SfuTurnsOn<Tr<128, 128, 2, 2, 2, true>>, 3>: the turns' gain gone (1% slower than none).
    // Session 28 (s28-2): with the clock pin (PinSoftmax<Tr<128, 128, 2, 2, 2, true>, 3>), within 1% either way (not
    // kept).
};

}  // namespace

// SM90_DEV_SPIN (session 50): a one-thread kernel that keeps the GPU busy for that many cycles before each timed launch,
// so the host's side of the launch (tensor maps, attributes, the counter's memset) overlaps it and the events bracket
// the kernel alone, as scripts/interleave.py's sleep does for the peers. Unset: none (the host's work inside the events).
__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// SM90_DEV_EVICT (session 50): before each timed launch of an even-numbered candidate of the problem (production's
// first copy: "(prod)"), a kernel of 131 KB of code (ptxas caps the unroll) on every SM, evicting the SMs' instruction caches,
// so that the odd one after it (its "again") shows what a launch whose code is already cached saves.
__global__ void icache_evict_kernel(float* out, float seed) {
  float x = seed + float(threadIdx.x);
#pragma unroll
  for (int i = 0; i < 32768; ++i) x = fmaf(x, 1.0f + float(i) * 1e-7f, float(i & 1023) * 1e-3f);
  if (x == 12345.678f) out[blockIdx.x] = x;  // (never true for these inputs; keeps the chain)
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 30;
  const bool profile_only = argc > 2 && std::strcmp(argv[2], "profile") == 0;
  const bool causal_only = argc > 2 && std::strcmp(argv[2], "causal") == 0;  // the causal problems, no profile
  const bool sparse_only = argc > 2 && std::strcmp(argv[2], "sparse") == 0;  // the mask grid, no profile
  const bool listed_only = argc > 2 && std::strcmp(argv[2], "listed") == 0;  // d64 causal and windows, no profile
  // "partial": d64 causal with and without a head's first seqlen_q mod 192 rows (what the partial tiles cost).
  const bool partial_only = argc > 2 && std::strcmp(argv[2], "partial") == 0;
  // "dNNN": head dim NNN's candidates on the standard grid's dense and causal problems (8k added), no profile.
  const int only_d = argc > 2 && argv[2][0] == 'd' && std::atoi(argv[2] + 1) > 0 ? std::atoi(argv[2] + 1) : 0;
  constexpr int kSets = 4;
  const size_t elems = size_t(32768) * 2048;  // b*n*h*d of the largest problem (the mask grid at 16k)
  std::vector<void*> q(kSets), k(kSets), v(kSets);
  void *o, *o_ref;
  {
    std::vector<__nv_bfloat16> host(elems);
    std::mt19937 rng(1234);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (int s = 0; s < kSets; ++s)
      for (void** dst : {&q[s], &k[s], &v[s]}) {
        for (auto& x : host) x = __float2bfloat16(nd(rng));
        CK(cudaMalloc(dst, elems * 2));
        CK(cudaMemcpy(*dst, host.data(), elems * 2, cudaMemcpyHostToDevice));
      }
  }
  CK(cudaMalloc(&g_workspace, kWorkspaceBytes));
  CK(cudaMalloc(&g_mask_num, 4 * 1024));
  CK(cudaMalloc(&g_mask_idx, 4 * 1024 * 1024));
  CK(cudaMalloc(&o, elems * 2));
  CK(cudaMalloc(&o_ref, elems * 2));
  std::vector<__nv_bfloat16> a(elems), r(elems);
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  const long long spin_cycles = std::getenv("SM90_DEV_SPIN") ? std::atoll(std::getenv("SM90_DEV_SPIN")) : 0;
  // SM90_DEV_FLUSH=MB (session 50): that many MB written before each timed launch (after the spin), evicting L2 -- data
  // and the kernels' code -- as interleave.py's cache write does.
  const size_t flush_bytes = std::getenv("SM90_DEV_FLUSH") ? size_t(std::atoll(std::getenv("SM90_DEV_FLUSH"))) << 20 : 0;
  void* flush_buf = nullptr;
  if (flush_bytes > 0) CK(cudaMalloc(&flush_buf, flush_bytes));
  const bool evict = std::getenv("SM90_DEV_EVICT") != nullptr;
  float* evict_out = nullptr;
  if (evict) CK(cudaMalloc(&evict_out, 4096));
  auto timed = [&](Launch fn, const FwdParams& p, bool cold = false) {  // one launch, timed with CUDA events (ms)
    if (cold) icache_evict_kernel<<<264, 128>>>(evict_out, 0.5f);
    if (flush_bytes > 0) CK(cudaMemsetAsync(flush_buf, 0, flush_bytes));
    if (spin_cycles > 0) spin_kernel<<<1, 1>>>(spin_cycles);
    CK(cudaEventRecord(e0));
    fn(p);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
  };

  // Dense candidates on the standard grid, dense and causal; block-sparse ones on issue 7's grid (batch 2)
  // at three densities, after the dense production kernel of the same head dim on that grid (the ratio's
  // denominator, printed as "time/dense").
  std::vector<Problem> problems;
  // SM90_DEV_SEQLENS=N,...: the standard grid's seqlens instead of 1k-16k (batch 16384 / N), e.g. multiples of 192 rows
  // for three-warpgroup candidates without partial tiles (session 54).
  std::vector<int> seqlens = {1024, 2048, 4096, 8192, 16384};
  if (const std::vector<std::string> own = env_list("SM90_DEV_SEQLENS"); !own.empty()) {
    seqlens.clear();
    for (const std::string& item : own) seqlens.push_back(std::atoi(item.c_str()));
  }
  for (bool causal : {false, true})
    for (int n : seqlens)
      if (n != 8192 || only_d) problems.push_back({0, n, 16384 / n, causal, 0.0});
  // Sliding windows (w, 0) on the standard grid (issue 7: (256, 0) at 16k against causal 16k).
  for (int w : {128, 256, 512, 768, 1024})
    for (int n : {4096, 16384}) problems.push_back({0, n, 16384 / n, false, 0.0, w});
  for (int n : {4096, 8192, 16384})
    for (double s : {0.0, 0.1, 0.25, 0.5}) problems.push_back({0, n, 2, false, s});
  // Lists of unequal length (session 42: the two-ring kernel's turns): odd query blocks keep a quarter as many.
  for (int n : {4096, 16384}) problems.push_back({0, n, 2, false, 0.5, -1, 0, 4});
  if (partial_only) {
    problems.clear();
    for (int n : {1024, 2048, 4096})
      for (int cut : {0, n % 192, 192 + n % 192}) problems.push_back({0, n, 16384 / n, true, 0.0, -1, n - cut});
  }

  std::printf("%-30s %-7s %6s %5s %9s %8s %10s %9s %8s\n", "candidate", "mask", "seqlen", "batch", "ms", "TFLOP/s", "max|d|/max",
              "time/dense", "paired");
  std::map<std::pair<int, int>, double> dense_ms;  // (d, n): the dense production time on the mask grid
  if (profile_only || (argc > 2 && std::strcmp(argv[2], "ctatimes") == 0)) problems.clear();
  if (sparse_only) problems.erase(std::remove_if(problems.begin(), problems.end(), [](const Problem& pr) { return pr.batch != 2; }), problems.end());
  if (listed_only)
    problems.erase(std::remove_if(problems.begin(), problems.end(), [](const Problem& pr) { return pr.batch == 2 || (!pr.causal && pr.window < 0 && pr.n > 1024); }),
                   problems.end());
  if (only_d)
    problems.erase(std::remove_if(problems.begin(), problems.end(), [](const Problem& pr) { return pr.batch != 16384 / pr.n || pr.window >= 0 || pr.density > 0; }),
                   problems.end());
  if (causal_only) problems.erase(std::remove_if(problems.begin(), problems.end(), [](const Problem& pr) { return !pr.causal; }), problems.end());
  // An SM90_DEV_PROBLEMS item N:S (problem_item) whose density S is not on the grid (e.g. 4096:1, every key block listed)
  // adds that problem to the mask grid.
  const std::vector<std::string> only_problems = env_list("SM90_DEV_PROBLEMS");
  for (const std::string& item : only_problems) {
    const auto [n, dens] = problem_item(item);
    if (dens != 0.0 && dens != 0.1 && dens != 0.25 && dens != 0.5) problems.push_back({0, n, 2, false, dens});
  }
  // SM90_DEV_PROBLEMS=N:S,...: only the problems of seqlen N and density S (0: the dense reference) and no skew -- e.g. for
  // ncu on a few launches.
  if (!only_problems.empty())
    problems.erase(std::remove_if(problems.begin(), problems.end(),
                                  [&](const Problem& pr) {
                                    for (const std::string& item : only_problems) {
                                      const auto [n, dens] = problem_item(item);
                                      if (pr.n == n && std::fabs(pr.density - dens) < 1e-6 && pr.skew == 0 && pr.window < 0)
                                        return false;
                                    }
                                    return true;
                                  }),
                   problems.end());
  const std::vector<std::string> only_candidates = env_list("SM90_DEV_ONLY");
  // Per problem: every candidate checked, then timed in interleaved rounds (one launch of each candidate per round),
  // so a drift of the clocks over the problem's runs (session 18's first call: the same kernel 5-12% faster when timed
  // later at 16k) falls on every candidate alike.
  for (const Problem& base : problems) {
    const bool sparse = base.density > 0;
    struct Entry {
      const Candidate* c;
      Problem pr;
      flash::BlockMaskParams bm;
      double err;
      std::vector<float> t;
    };
    std::vector<Entry> entries;
    const flash::BlockMaskParams bm = sparse ? upload_pattern(base.n, base.density, 7, base.skew) : flash::BlockMaskParams{};
    for (const Candidate& c : kCandidates) {
      if (c.sparse != sparse) continue;
      if (listed_only && c.d != 64) continue;
      if (partial_only && (c.d != 64 || std::strstr(c.name, "(prod") == nullptr)) continue;
      if (only_d && c.d != only_d) continue;
      // SM90_DEV_ONLY=a,b: only the candidates whose name holds one of the comma-separated substrings, and the production
      // ones ("(prod": the check's reference and the time / dense denominator).
      if (!only_candidates.empty() && std::strstr(c.name, "(prod") == nullptr &&
          std::none_of(only_candidates.begin(), only_candidates.end(),
                       [&](const std::string& sub) { return std::strstr(c.name, sub.c_str()) != nullptr; }))
        continue;
      // The mask grid's dense reference: the production dense kernels only.
      if (!sparse && base.batch == 2 && !only_d && std::strstr(c.name, "(prod)") == nullptr) continue;
      Problem pr = base;
      pr.d = c.d;
      const bool prod = std::strstr(c.name, "(prod)") != nullptr;  // first of its head dim and kind ("(prod again)": checked)
      // Check: this candidate vs the production instantiation, inputs of set 0, outputs poisoned.
      FwdParams p = make_params(pr, q[0], k[0], v[0], prod ? o_ref : o, bm);
      const size_t n_elems = size_t(pr.batch) * pr.n * 2048;
      CK(cudaMemset(p.o, 0xff, n_elems * 2));
      if (const int32_t st = c.fn(p); st != 0) {
        std::printf("%-30s launch failed (%d)\n", c.name, st);
        continue;
      }
      CK(cudaDeviceSynchronize());
      double err = 0;
      if (!prod) {
        CK(cudaMemcpy(a.data(), o, n_elems * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(r.data(), o_ref, n_elems * 2, cudaMemcpyDeviceToHost));
        double mx = 0, md = 0;
        for (size_t i = 0; i < n_elems; ++i) {
          if (pr.nq > 0 && int(i / 2048 % pr.n) >= pr.nq) continue;  // (rows past seqlen_q: poison in both)
          const double x = __bfloat162float(a[i]), y = __bfloat162float(r[i]);
          mx = std::max(mx, std::fabs(y));
          md = std::isnan(x) || std::isnan(y) ? INFINITY : std::max(md, std::fabs(x - y));
        }
        err = md / mx;
      }
      entries.push_back({&c, pr, bm, err, {}});
    }
    // Each candidate on a different input set from the one before it in the round (session 36): with one set per round,
    // every candidate but the first found the previous one's Q, K and V in L2 (s36-3: the same kernel 2.3% faster second
    // than first at d256 causal 1k).
    // Round i starts at candidate i mod n (session 50): in a fixed order the same kernel measured 1.6-5% faster as the
    // second of two identical copies at 4k in every run (s45-4, s49-3), so each candidate now takes every place in the
    // round alike.
    for (int i = 0; i < reps + 5; ++i)
      for (size_t pos = 0; pos < entries.size(); ++pos) {
        const size_t c = (pos + size_t(i)) % entries.size();
        Entry& e = entries[c];
        const int set = int((i + c) % kSets);
        const float ms = timed(e.c->fn, make_params(e.pr, q[set], k[set], v[set], o, e.bm), evict && c % 2 == 0);
        if (i >= 5) e.t.push_back(ms);
      }
    // The paired ratio (session 50): per round, each candidate's time over the reference's of the same round, the median
    // of those. The reference is the first candidate of the same head dim whose name holds SM90_DEV_REF (unset: the
    // first of that head dim).
    const std::vector<std::string> ref_names = env_list("SM90_DEV_REF");
    auto ref_of = [&](const Entry& e) -> const Entry* {
      for (const Entry& r : entries)
        if (r.c->d == e.c->d && (ref_names.empty() || std::strstr(r.c->name, ref_names[0].c_str()) != nullptr)) return &r;
      return nullptr;
    };
    std::vector<double> paired(entries.size(), 0.0);
    for (size_t c = 0; c < entries.size(); ++c)
      if (const Entry* r = ref_of(entries[c]); r != nullptr && r->t.size() == entries[c].t.size()) {
        std::vector<double> q2;
        for (size_t i = 0; i < r->t.size(); ++i) q2.push_back(entries[c].t[i] / r->t[i]);
        paired[c] = median(q2);
      }
    for (size_t c = 0; c < entries.size(); ++c) {
      Entry& e = entries[c];
      const Problem& pr = e.pr;
      const double ms = median(e.t);
      double frac = pr.causal ? 0.5 : 1.0;
      if (pr.nq > 0) frac = (double(pr.n) * pr.n / 2 - double(pr.n - pr.nq) * (pr.n - pr.nq) / 2) / (double(pr.n) * pr.n);
      if (pr.window >= 0) {  // keys per row: min(i, w) + 1
        const double w = std::min(pr.window, pr.n - 1);
        frac = ((w + 1) * pr.n - w * (w + 1) / 2) / (double(pr.n) * pr.n);
      }
      if (sparse) frac = double(e.bm.max_kv_blocks) / e.bm.num_q_blocks;
      const double flops = 4.0 * pr.batch * pr.n * 2048.0 * pr.n * frac;
      char mask[16];
      std::snprintf(mask, sizeof mask, "%s", sparse ? "" : pr.causal ? "causal" : "dense");
      if (pr.window >= 0) std::snprintf(mask, sizeof mask, "w%d", pr.window);
      if (sparse) std::snprintf(mask, sizeof mask, pr.skew > 0 ? "bs%.2fk%d" : "bs%.2f", pr.density, pr.skew);
      double& ref = dense_ms[{pr.d, pr.n}];
      if (!sparse && pr.batch == 2) ref = ms;
      if (pr.nq > 0) std::snprintf(mask, sizeof mask, "cq%d", pr.nq);
      std::printf("%-30s %-7s %6d %5d %9.4f %8.1f %10.2e", e.c->name, mask, pr.n, pr.batch, ms, flops / ms / 1e9, e.err);
      std::printf(" %9.3f", sparse && ref > 0 ? ms / ref : 0.0);
      std::printf(" %8.4f", paired[c]);
      std::printf("\n");
    }
    std::fflush(stdout);
  }

  // "ctatimes" (session 50): how evenly the persistent CTAs of one launch start and finish (%globaltimer). Per case: the
  // span from the first start to the last end; the CTAs' starts' spread; the mean and the largest gap between a CTA's end
  // and the last end, as fractions of the span (the grid's fill: what the last round leaves idle).
  if (argc > 2 && std::strcmp(argv[2], "ctatimes") == 0) {
    struct CtaCase {
      const char* name;
      int d, n, batch;
      bool causal;
      double density;
      Launch fn;
    };
    const CtaCase cases[] = {
        {"d64 2ring s.1", 64, 4096, 2, false, 0.1, run_cta_times<Tr<64, 128, 2, 3, 1, true>>},
        {"d64 2ring s.25", 64, 4096, 2, false, 0.25, run_cta_times<Tr<64, 128, 2, 3, 1, true>>},
        {"d64 2ring s.5", 64, 4096, 2, false, 0.5, run_cta_times<Tr<64, 128, 2, 3, 1, true>>},
        {"d64 2ring s.5 8k", 64, 8192, 2, false, 0.5, run_cta_times<Tr<64, 128, 2, 3, 1, true>>},
        {"d64 3wg dense", 64, 4096, 2, false, 0.0, run_cta_times<Tr<64, 128, 4, 3, 1>>},
        {"d128 bs s.1", 128, 4096, 2, false, 0.1, run_cta_times<Tr<128, 128, 2, 2, 2, true>>},
        {"d128 dense 4k", 128, 4096, 2, false, 0.0, run_cta_times<Tr<128, 128, 2, 2, 1>>},
        {"d128 dense 1k", 128, 1024, 16, false, 0.0, run_cta_times<Tr<128, 128, 2, 2, 1>>},
        {"d128 causal 1k", 128, 1024, 16, true, 0.0, run_cta_times<Tr<128, 128, 2, 2, 1>>},
        {"d256 causal 1k", 256, 1024, 16, true, 0.0, run_cta_times<Tr<256, 80, 2, 2, 3>>},
        {"d64 3wg causal 1k", 64, 1024, 16, true, 0.0, run_cta_times<Tr<64, 128, 4, 3, 1>>},
    };
    CK(cudaMalloc(&g_cta_times, 4 * 1024 * sizeof(unsigned long long)));  // times, then clocks (kDevCtaClocks)
    std::printf("%-20s %6s %9s %9s %9s %9s %9s %6s %9s %9s %8s %8s\n", "case", "seqlen", "span us", "start sd", "idle mean",
                "idle max", "idle>1/2", "ctas", "event us", "ev-span", "MHz", "MHz min");
    for (const CtaCase& cc : cases) {
      const Problem pr{cc.d, cc.n, cc.batch, cc.causal, cc.density};
      const flash::BlockMaskParams bm = pr.density > 0 ? upload_pattern(pr.n, pr.density, 7) : flash::BlockMaskParams{};
      const FwdParams p = make_params(pr, q[1], k[1], v[1], o, bm);
      std::vector<double> span_v, sd_v, mean_v, max_v, half_v, event_v, mhz_v, mhz_min_v;
      int ctas = 0;
      for (int rep = 0; rep < reps; ++rep) {
        CK(cudaMemset(g_cta_times, 0, 4 * 1024 * sizeof(unsigned long long)));
        // Session 63: timed as every other launch here (the SM90_DEV_FLUSH flush, then events round the call), so that the
        // event window can be set against the CTAs' span: what the window holds beyond the kernel's own work.
        event_v.push_back(1e3 * timed(cc.fn, p));
        std::vector<unsigned long long> h(4 * 1024);
        CK(cudaMemcpy(h.data(), g_cta_times, h.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
        unsigned long long t0 = ~0ull, t1 = 0;
        ctas = 0;
        for (int c = 0; c < 1024 && h[2 * c + 1] != 0; ++c, ++ctas) t0 = std::min(t0, h[2 * c]), t1 = std::max(t1, h[2 * c + 1]);
        if (ctas == 0) break;
        const double span = double(t1 - t0);
        double s1 = 0, s2 = 0, idle = 0, idle_max = 0;
        int half = 0;
        for (int c = 0; c < ctas; ++c) {
          const double st = double(h[2 * c] - t0), gap = double(t1 - h[2 * c + 1]);
          s1 += st, s2 += st * st, idle += gap, idle_max = std::max(idle_max, gap);
          half += gap > span / (2.0 * 11);  // (more than half of an 11th of the span: ~half a round at 4k)
        }
        span_v.push_back(span / 1e3);
        sd_v.push_back(std::sqrt(std::max(0.0, s2 / ctas - (s1 / ctas) * (s1 / ctas))) / 1e3);
        mean_v.push_back(idle / ctas / span);
        max_v.push_back(idle_max / span);
        half_v.push_back(double(half) / ctas);
        // Session 63: each CTA's SM clock over its own run (%clock64 cycles over %globaltimer ns; kDevCtaClocks).
        std::vector<double> mhz;
        for (int c = 0; c < ctas; ++c) {
          const unsigned long long* k = &h[Tr<64, 128, 2, 2, 1>::kDevCtaClocks + 2 * c];
          if (h[2 * c + 1] > h[2 * c]) mhz.push_back(1e3 * double(k[1] - k[0]) / double(h[2 * c + 1] - h[2 * c]));
        }
        if (!mhz.empty()) mhz_v.push_back(median(mhz)), mhz_min_v.push_back(*std::min_element(mhz.begin(), mhz.end()));
      }
      std::printf("%-20s %6d %9.1f %9.2f %9.4f %9.4f %9.3f %6d %9.2f %9.2f %8.0f %8.0f\n", cc.name, cc.n, median(span_v),
                  median(sd_v), median(mean_v), median(max_v), median(half_v), ctas, median(event_v),
                  median(event_v) - median(span_v), mhz_v.empty() ? 0.0 : median(mhz_v),
                  mhz_min_v.empty() ? 0.0 : median(mhz_min_v));
    }
    return 0;
  }

  // Where a tile's time goes (Traits::kProfile): per consumer warpgroup, cycles per tile in each phase
  // (averaged over warpgroups and tiles), the loop's cycles per key block, and the producer's waits.
  if (causal_only || sparse_only || listed_only || only_d || partial_only) return 0;
  CK(cudaMalloc(&g_profile, kProfCounters * sizeof(unsigned long long)));
  std::printf("\nprofile (SM cycles per tile, mean over consumer warpgroups)\n%-14s %6s %5s %8s %7s %7s %8s %8s %7s %8s %8s %8s %7s %7s %8s\n",
              "problem", "seqlen", "ms", "tiles", "blk/t", "wTile", "wQ", "prolog", "loop", "drain", "epilog", "sum",
              "lp/blk", "pQslot", "pRing%");
  const char* prof_filter = argc > 3 ? argv[3] : "";  // profile mode: only the cases whose name contains this
  for (const ProfCase& pc : kProfCases) {
    if (std::strstr(pc.name, prof_filter) == nullptr) continue;
    const Problem pr{pc.d, pc.n, pc.batch, pc.causal, pc.density, -1, pc.nq};
    const flash::BlockMaskParams bm = pr.density > 0 ? upload_pattern(pr.n, pr.density, 7) : flash::BlockMaskParams{};
    FwdParams p = make_params(pr, q[1], k[1], v[1], o, bm);
    pc.fn(p);  // warm
    CK(cudaDeviceSynchronize());
    CK(cudaMemset(g_profile, 0, kProfCounters * sizeof(unsigned long long)));
    const float ms = timed(pc.fn, p);
    unsigned long long h[kProfCounters];
    constexpr int W = flash::sm90::Prof::kPerWg;
    CK(cudaMemcpy(h, g_profile, sizeof h, cudaMemcpyDeviceToHost));
    double ph[6] = {}, st[7] = {}, tiles = 0, blocks = 0;
    for (int w = 0; w < pc.consumers; ++w) {
      for (int i = 0; i < 6; ++i) ph[i] += double(h[W * w + i]);
      for (int i = 0; i < 7; ++i) st[i] += double(h[W * w + 8 + i]);
      tiles += double(h[W * w + 6]);
      blocks += double(h[W * w + 7]);
    }
    const double per = tiles > 0 ? 1.0 / tiles : 0;
    double sum = 0;
    for (double x : ph) sum += x * per;
    const unsigned long long* pp = h + W * pc.consumers;
    std::printf("%-14s %6d %5.3f %8.0f %7.2f %7.0f %8.0f %8.0f %7.0f %8.0f %8.0f %8.0f %7.0f %7.0f %8.1f\n", pc.name, pc.n, ms,
                tiles / pc.consumers, blocks / tiles, ph[0] * per, ph[1] * per, ph[2] * per, ph[3] * per, ph[4] * per,
                ph[5] * per, sum, blocks > tiles ? ph[3] / (blocks - tiles) : 0.0,
                double(pp[0]) / (tiles / pc.consumers), pp[2] > 0 ? 100.0 * double(pp[1]) / double(pp[2]) : 0.0);
    // The loop's blocks, step by step (cycles per block, 32-bit clock).
    const double lb = blocks > tiles ? 1.0 / (blocks - tiles) : 0.0;
    std::printf("  loop block: waitKV %.0f turn %.0f issue %.0f waitS %.0f softmax %.0f waitPV %.0f tail %.0f\n", st[0] * lb,
                st[1] * lb, st[2] * lb, st[3] * lb, st[4] * lb, st[5] * lb, st[6] * lb);
    auto wsum = [&](int i) { return double(h[W * 0 + i] + h[W * 1 + i] + (pc.consumers > 2 ? h[W * 2 + i] : 0)) * per; };
    {
      // The CTA's first tile apart (wTile above is the other tiles' wait per tile, over all tiles): its wait from the
      // consumers' start, and its loop blocks' K/V waits against the other tiles' (s43-2).
      using P = flash::sm90::Prof;
      int sms = 0;
      CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
      const double ctas = std::min<double>(sms, tiles / pc.consumers);
      double first_wait = 0, first_kv = 0, first_blocks = 0;
      for (int w = 0; w < pc.consumers; ++w)
        first_wait += double(h[W * w + P::kWaitTileFirst]), first_kv += double(h[W * w + P::kStepWaitKVFirst]),
            first_blocks += double(h[W * w + P::kBlocksFirst]);
      const double rest_blocks = blocks - tiles - first_blocks;
      double bar_wait = 0;
      for (int w = 0; w < pc.consumers; ++w) bar_wait += double(h[W * w + P::kWaitTileBar]);
      std::printf("  first tile: wait %.0f per warpgroup (the other tiles' %.0f per tile, %.0f of it on tile_full); waitKV per"
                  " loop block %.0f there, %.0f in the others\n",
                  first_wait / (ctas * pc.consumers), ph[0] / std::max(1.0, tiles - ctas * pc.consumers),
                  bar_wait / std::max(1.0, tiles - ctas * pc.consumers),
                  first_blocks > 0 ? first_kv / first_blocks : 0.0, rest_blocks > 0 ? (st[0] - first_kv) / rest_blocks : 0.0);
      double wk = 0;
      for (int w = 0; w < pc.consumers; ++w) wk += double(h[W * w + P::kStepWaitK]);
      std::printf("  loop block: K_j's wait alone %.0f of waitKV\n", blocks > tiles ? wk / (blocks - tiles) : 0.0);
      double owed = 0, owed_n = 0;
      for (int w = 0; w < pc.consumers; ++w) owed += double(h[W * w + P::kOwed]), owed_n += double(h[W * w + P::kOwedTurns]);
      if (owed > 0) std::printf("  owed turns: %.2f per tile, %.0f cycles per tile (not in wTile)\n", owed_n / tiles, owed / tiles);
      if (pp[P::kSchedFirst] > 0)
        std::printf("  scheduler: first schedule published at %.0f; per tile after it: slot wait %.0f, build %.0f\n",
                    double(pp[P::kSchedFirst]) / ctas,
                    double(pp[P::kSchedWaitEmpty]) / std::max(1.0, tiles / pc.consumers - ctas),
                    double(pp[P::kSchedBuild]) / std::max(1.0, tiles / pc.consumers - ctas));
    }
    std::printf("  prologue: setup %.0f waitK0 %.0f turn %.0f (not in prolog)\n", wsum(flash::sm90::Prof::kProSetup),
                wsum(flash::sm90::Prof::kProWaitK), wsum(flash::sm90::Prof::kProTurn));
    // Q's load at the tile start, from the producer's issue (Prof::kQLandedSum ..): where the wait waited, its latency.
    const double waited = double(pp[4]), starts = tiles;  // (one start per warpgroup and tile)
    std::printf("  tile start: Q waited at %.0f%% of starts, issue -> landed %.0f cycles there; issue -> ready %.0f mean\n",
                starts > 0 ? 100.0 * waited / starts : 0.0, waited > 0 ? double(pp[3]) / waited : 0.0,
                starts > 0 ? double(pp[5]) / starts : 0.0);
    std::fflush(stdout);
  }
  return 0;
}
