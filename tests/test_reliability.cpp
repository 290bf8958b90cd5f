// tests/test_reliability.cpp -- the bad inputs of issue 70, each refused with a status and a message that
// names it, and nothing written: an output overlapping the block mask's arrays (or the workspace
// overlapping an input), CPU tensors with a device_id other than 0, softmax scales outside the documented
// range, and argument structs that never went through their init function; and what fuzz/fuzz_attention.cpp found
// since: flash_fwd_kvcache's workspace (and appended caches) over another array of the call, its uninitialised args,
// and an empty block mask whose NULL kv_indices the CPU backends offset.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "flash.h"

namespace {

constexpr int64_t B = 1, SQ = 70, SK = 70, HQ = 2, HKV = 1, D = 8;
constexpr int64_t kQ = B * SQ * HQ * D, kK = B * SK * HKV * D, kL = B * HQ * SQ;
constexpr int64_t kNQB = 2, kNKB = 2;  // 64-row blocks over 70 rows

// Every array of a forward and a backward call, fp32, in one arena (so tests can make any two overlap):
// inputs q, k, v, d_o; the forward's outputs o, lse (inputs of the backward); dq, dk, dv; a block mask
// [1, HQ, 2] / [1, HQ, 2, 2] listing both key blocks of every query block (stored as int32 in the arena);
// then padding, so that arrays moved over the mask stay inside the arena.
struct Arena {
  enum : int64_t { q = 0, k = q + kQ, v = k + kK, d_o = v + kK, o = d_o + kQ, lse = o + kQ, dq = lse + kL, dk = dq + kQ,
                   dv = dk + kK, num = dv + kK, idx = num + HQ * kNQB, pad = idx + HQ * kNQB * kNKB, end = pad + 8 * kQ };
  std::vector<float> mem;
  flash_block_mask mask;
  flash_fwd_args fwd;
  flash_bwd_args bwd;

  Arena() : mem(end) {
    for (int64_t i = 0; i < o; ++i) mem[i] = std::sin(0.37 * static_cast<double>(i));
    for (int64_t i = o; i < end; ++i) mem[i] = NAN;
    int32_t* n = ints(num);
    int32_t* x = ints(idx);
    for (int64_t r = 0; r < HQ * kNQB; ++r) {
      n[r] = 2;
      x[2 * r] = 1, x[2 * r + 1] = 0;
    }
    flash_block_mask_init(&mask);
    mask.block_m = mask.block_n = 64;
    mask.num_q_blocks = kNQB, mask.max_kv_blocks = kNKB;
    mask.kv_num_blocks = n, mask.kv_indices = x;
    mask.kv_num_blocks_strides[0] = HQ * kNQB, mask.kv_num_blocks_strides[1] = kNQB, mask.kv_num_blocks_strides[2] = 1;
    mask.kv_indices_strides[0] = HQ * kNQB * kNKB, mask.kv_indices_strides[1] = kNQB * kNKB;
    mask.kv_indices_strides[2] = kNKB, mask.kv_indices_strides[3] = 1;

    flash_fwd_args_init(&fwd);
    fwd.q = t4(q, SQ, HQ), fwd.k = t4(k, SK, HKV), fwd.v = t4(v, SK, HKV), fwd.o = t4(o, SQ, HQ), fwd.lse = t3(lse);
    fwd.block_mask = &mask;
    flash_bwd_args_init(&bwd);
    bwd.q = fwd.q, bwd.k = fwd.k, bwd.v = fwd.v, bwd.o = fwd.o, bwd.lse = fwd.lse, bwd.d_o = t4(d_o, SQ, HQ);
    bwd.dq = t4(dq, SQ, HQ), bwd.dk = t4(dk, SK, HKV), bwd.dv = t4(dv, SK, HKV);
    bwd.block_mask = &mask;
  }
  int32_t* ints(int64_t at) { return reinterpret_cast<int32_t*>(&mem[at]); }
  flash_tensor t4(int64_t at, int64_t s, int64_t h) {
    const int64_t shape[4] = {B, s, h, D};
    return flash_tensor_contiguous(&mem[at], FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, shape);
  }
  flash_tensor t3(int64_t at) {
    const int64_t shape[3] = {B, HQ, SQ};
    return flash_tensor_contiguous(&mem[at], FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 3, shape);
  }
  // Runs the forward so that o and lse hold a real forward's result (the backward's inputs).
  void forward() {
    ASSERT_EQ(flash_fwd(&fwd), FLASH_OK) << flash_last_error_message();
    fwd.o = t4(o, SQ, HQ);  // in case a test moved it
  }
};

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The call fails with `status` and a message containing `needle`, and the arena (every input, output and
// mask array) is bitwise what it was.
template <class Args, class Fn>
void expect_refused(Arena& a, Args* args, Fn call, int32_t status, const std::string& needle) {
  const std::vector<float> before = a.mem;
  const int32_t s = call(args);
  EXPECT_EQ(s, status) << flash_status_string(s) << ": " << flash_last_error_message();
  EXPECT_NE(std::string(flash_last_error_message()).find(needle), std::string::npos)
      << "wanted \"" << needle << "\"; message was: " << flash_last_error_message();
  EXPECT_TRUE(same_bytes(before, a.mem)) << "a refused call wrote memory";
}

int32_t fwd(flash_fwd_args* a) { return flash_fwd(a); }
int32_t bwd(flash_bwd_args* a) { return flash_bwd(a); }

}  // namespace

// The repro: an output placed over the mask it is validated against. Before the fix the mask was
// validated, then read again after the output overwrote it (segfaults, hangs, wrong answers).
TEST(Reliability, ForwardOutputOverlappingBlockMaskRefused) {
  for (int32_t algo : {FLASH_ALGO_CPU, FLASH_ALGO_NAIVE}) {
    {
      Arena a;
      a.fwd.algorithm = algo;
      a.fwd.o = a.t4(Arena::num - 16, SQ, HQ);  // o's last row runs over kv_num_blocks and into kv_indices
      a.fwd.lse.data = nullptr;
      expect_refused(a, &a.fwd, fwd, FLASH_ERROR_INVALID_ARGUMENT, "o overlaps block_mask->kv_num_blocks in memory");
    }
    {
      Arena a;
      a.fwd.algorithm = algo;
      a.fwd.lse = a.t3(Arena::idx + 1);  // lse starts inside kv_indices
      expect_refused(a, &a.fwd, fwd, FLASH_ERROR_INVALID_ARGUMENT, "lse overlaps block_mask->kv_indices in memory");
    }
  }
}

TEST(Reliability, BackwardGradientOverlappingBlockMaskRefused) {
  for (int32_t algo : {FLASH_ALGO_CPU, FLASH_ALGO_NAIVE}) {
    const struct {
      flash_tensor flash_bwd_args::*field;
      const char* message;
    } cases[] = {{&flash_bwd_args::dq, "dq overlaps block_mask->kv_num_blocks"},
                 {&flash_bwd_args::dk, "dk overlaps block_mask->kv_num_blocks"},
                 {&flash_bwd_args::dv, "dv overlaps block_mask->kv_num_blocks"}};
    for (const auto& c : cases) {
      Arena a;
      a.forward();
      a.bwd.algorithm = algo;
      flash_tensor& t = a.bwd.*c.field;
      t.data = &a.mem[Arena::num + 1 - (c.field == &flash_bwd_args::dq ? kQ : kK)];
      expect_refused(a, &a.bwd, bwd, FLASH_ERROR_INVALID_ARGUMENT, c.message);
    }
  }
}

// The same rule covers the caller's workspace, which the naive backends write: it may not overlap an input
// or an output (nor, on any entry point, an index array).
TEST(Reliability, WorkspaceOverlappingAnArrayRefused) {
  Arena a;
  a.fwd.algorithm = FLASH_ALGO_NAIVE;
  size_t need = 0;
  ASSERT_EQ(flash_fwd_workspace_size(&a.fwd, &need), FLASH_OK) << flash_last_error_message();
  ASSERT_GT(need, 0u);
  a.fwd.workspace = &a.mem[Arena::k - 2];
  a.fwd.workspace_size = need;
  expect_refused(a, &a.fwd, fwd, FLASH_ERROR_INVALID_ARGUMENT, "workspace overlaps q in memory");
  Arena b;
  b.fwd.algorithm = FLASH_ALGO_NAIVE;
  b.fwd.workspace = b.ints(Arena::idx);
  b.fwd.workspace_size = need;
  expect_refused(b, &b.fwd, fwd, FLASH_ERROR_INVALID_ARGUMENT, "workspace overlaps block_mask->kv_indices in memory");
  Arena d;
  d.fwd.algorithm = FLASH_ALGO_NAIVE;
  d.fwd.block_mask = nullptr;  // so that o is the only array the workspace meets
  d.fwd.workspace = &d.mem[Arena::o + 1];
  d.fwd.workspace_size = need;
  expect_refused(d, &d.fwd, fwd, FLASH_ERROR_INVALID_ARGUMENT, "workspace overlaps o in memory");
  // A workspace of its own still runs.
  Arena c;
  c.fwd.algorithm = FLASH_ALGO_NAIVE;
  std::vector<char> ws(need);
  c.fwd.workspace = ws.data();
  c.fwd.workspace_size = need;
  EXPECT_EQ(flash_fwd(&c.fwd), FLASH_OK) << flash_last_error_message();
}

// Inputs may share memory (q == k is a valid self-attention call); only writes are constrained.
TEST(Reliability, InputsMayAliasEachOther) {
  Arena a;
  a.fwd.k = a.fwd.v;
  a.fwd.q = a.t4(Arena::k, SQ, HKV);
  a.fwd.q.shape[2] = HQ, a.fwd.q.strides[2] = 0;  // both heads read the one kv head's rows
  a.fwd.q.strides[1] = D, a.fwd.q.strides[0] = SQ * D;
  EXPECT_EQ(flash_fwd(&a.fwd), FLASH_OK) << flash_last_error_message();
}

TEST(Reliability, CpuTensorsMustBeDeviceZero) {
  const struct {
    flash_tensor flash_fwd_args::*field;
    const char* name;
  } fields[] = {{&flash_fwd_args::q, "q"}, {&flash_fwd_args::k, "k"}, {&flash_fwd_args::v, "v"},
                {&flash_fwd_args::o, "o"}, {&flash_fwd_args::lse, "lse"}};
  for (const auto& f : fields) {
    Arena a;
    (a.fwd.*f.field).device_id = 5;
    expect_refused(a, &a.fwd, fwd, FLASH_ERROR_INVALID_ARGUMENT,
                   std::string(f.name) + ".device_id is 5 but the CPU is device 0");
  }
  Arena a;
  a.forward();
  a.bwd.dk.device_id = 1;
  expect_refused(a, &a.bwd, bwd, FLASH_ERROR_INVALID_ARGUMENT, "dk.device_id is 1 but the CPU is device 0");
}

// Scales past the documented 2^16 are refused on every entry point (before the fix the naive path
// returned FLASH_OK with NaN for 3e38 and inf/NaN for -1e30).
TEST(Reliability, SoftmaxScaleOutsideRangeRefused) {
  const struct {
    float scale;
    const char* text;
  } bad[] = {{3e38f, "softmax_scale is 3e+38 but |softmax_scale| must be at most 65536"},
             {-1e30f, "softmax_scale is -1e+30 but"},
             {65537.0f, "softmax_scale is 65537 but"},
             {-65536.0078125f, "softmax_scale is -65536.01 but"}};
  for (int32_t algo : {FLASH_ALGO_AUTO, FLASH_ALGO_CPU, FLASH_ALGO_NAIVE})
    for (const auto& b : bad) {
      Arena a;
      a.fwd.algorithm = algo;
      a.fwd.softmax_scale = b.scale;
      expect_refused(a, &a.fwd, fwd, FLASH_ERROR_INVALID_ARGUMENT, b.text);
      size_t n = 1;
      EXPECT_EQ(flash_fwd_workspace_size(&a.fwd, &n), FLASH_ERROR_INVALID_ARGUMENT);
      Arena c;
      c.forward();
      c.bwd.algorithm = algo;
      c.bwd.softmax_scale = b.scale;
      expect_refused(c, &c.bwd, bwd, FLASH_ERROR_INVALID_ARGUMENT, b.text);
    }
}

// At the edge of the range every CPU path still returns finite values: O a convex combination of V's rows,
// the gradients finite.
TEST(Reliability, SoftmaxScaleAtTheLimitIsFinite) {
  for (float scale : {65536.0f, -65536.0f})
    for (int32_t algo : {FLASH_ALGO_CPU, FLASH_ALGO_NAIVE}) {
      Arena a;
      a.fwd.algorithm = algo, a.bwd.algorithm = algo;
      a.fwd.softmax_scale = a.bwd.softmax_scale = scale;
      a.forward();
      ASSERT_EQ(flash_bwd(&a.bwd), FLASH_OK) << flash_last_error_message();
      for (int64_t i = Arena::o; i < Arena::num; ++i)
        ASSERT_TRUE(std::isfinite(a.mem[i])) << "element " << i << ", scale " << scale << ", " << flash_algorithm_name(algo);
      for (int64_t i = Arena::o; i < Arena::lse; ++i) EXPECT_LE(std::fabs(a.mem[i]), 1.0f + 1e-5f);  // |V| <= 1
    }
}

// A pointer between elements (a byte offset taken for an element offset) is refused: found by the fuzzer, an fp32
// tensor 2 bytes off its alignment ran (undefined behaviour on the CPU; the GPU's vector loads would fault).
TEST(Reliability, MisalignedDataRefused) {
  Arena a;
  a.fwd.v.data = reinterpret_cast<char*>(a.fwd.v.data) + 2;
  expect_refused(a, &a.fwd, fwd, FLASH_ERROR_INVALID_ARGUMENT, "v.data is not aligned to its fp32 elements (4 bytes)");
  Arena b;
  b.forward();
  b.bwd.dk.data = reinterpret_cast<char*>(b.bwd.dk.data) + 1;
  expect_refused(b, &b.bwd, bwd, FLASH_ERROR_INVALID_ARGUMENT, "dk.data is not aligned");
  Arena c;
  c.mask.kv_indices = reinterpret_cast<const int32_t*>(reinterpret_cast<const char*>(c.mask.kv_indices) + 2);
  expect_refused(c, &c.fwd, fwd, FLASH_ERROR_BAD_MASK, "block_mask->kv_indices is not aligned to its int32 elements");
}

// A zero-filled struct with only struct_size set (no init call): refused, not run as window (0, 0).
TEST(Reliability, UninitialisedArgsRefused) {
  Arena a;
  flash_fwd_args z;
  std::memset(&z, 0, sizeof z);
  z.struct_size = sizeof z;
  z.q = a.fwd.q, z.k = a.fwd.k, z.v = a.fwd.v, z.o = a.fwd.o;
  expect_refused(a, &z, fwd, FLASH_ERROR_INVALID_ARGUMENT, "the struct was not initialised");
  EXPECT_NE(std::string(flash_last_error_message()).find("flash_fwd_args_init"), std::string::npos);
  size_t n = 1;
  EXPECT_EQ(flash_fwd_workspace_size(&z, &n), FLASH_ERROR_INVALID_ARGUMENT);

  a.forward();
  flash_bwd_args zb;
  std::memset(&zb, 0, sizeof zb);
  zb.struct_size = sizeof zb;
  zb.q = a.bwd.q, zb.k = a.bwd.k, zb.v = a.bwd.v, zb.o = a.bwd.o, zb.d_o = a.bwd.d_o, zb.lse = a.bwd.lse;
  zb.dq = a.bwd.dq, zb.dk = a.bwd.dk, zb.dv = a.bwd.dv;
  expect_refused(a, &zb, bwd, FLASH_ERROR_INVALID_ARGUMENT, "flash_bwd_args_init(&args) first");

  // The same struct once initialised runs, and a struct reused after a successful call still runs.
  flash_fwd_args_init(&z);
  z.q = a.fwd.q, z.k = a.fwd.k, z.v = a.fwd.v, z.o = a.fwd.o;
  ASSERT_EQ(flash_fwd(&z), FLASH_OK) << flash_last_error_message();
  ASSERT_EQ(flash_fwd(&z), FLASH_OK) << flash_last_error_message();
}

TEST(Reliability, UninitialisedBlockMaskRefused) {
  Arena a;
  flash_block_mask m;
  std::memset(&m, 0, sizeof m);
  m.struct_size = sizeof m;
  m.num_q_blocks = kNQB, m.max_kv_blocks = kNKB, m.kv_num_blocks = a.mask.kv_num_blocks, m.kv_indices = a.mask.kv_indices;
  a.fwd.block_mask = &m;
  expect_refused(a, &a.fwd, fwd, FLASH_ERROR_BAD_MASK, "the mask was not initialised (call flash_block_mask_init");
}

// ---- flash_fwd_kvcache: the same overlap rule, the workspace included (found by fuzz/fuzz_attention.cpp) ----------
namespace {

constexpr int64_t KB = 2, KSN = 2, KHQ = 2, KHKV = 1, KLEN = 16, KD = 8, KPAGES = 4, KPAGE = 8;
constexpr int64_t kKq = KB * KSN * KHQ * KD, kKc = KB * KLEN * KHKV * KD, kKn = KB * KSN * KHKV * KD, kKl = KB * KHQ * KSN;

// Every array of a KV-cache call, fp32 (the index arrays int32), in one arena so that tests can make any two overlap:
// q, k_cache, cache_seqlens, v_cache, k_new, v_new, o, lse, a block table (for the paged variant: the caches read as
// KPAGES pages of KPAGE rows), then padding. num_splits 4 makes the call need a workspace.
struct KvArena {
  enum : int64_t { q = 0, kc = q + kKq, seqlens = kc + kKc, vc = seqlens + 2, kn = vc + kKc, vn = kn + kKn, o = vn + kKn,
                   lse = o + kKq, table = lse + kKl, pad = table + KB * 2, end = pad + 4096 };
  static_assert(KB <= 2, "cache_seqlens and each block-table row hold two entries");
  std::vector<float> mem;
  flash_kvcache_args args;

  explicit KvArena(bool paged = false) : mem(end) {
    for (int64_t i = 0; i < end; ++i) mem[i] = i < o ? static_cast<float>(std::sin(0.29 * static_cast<double>(i))) : NAN;
    int32_t* n = ints(seqlens);
    n[0] = 3, n[1] = 5;
    flash_kvcache_args_init(&args);
    const int64_t qs[4] = {KB, KSN, KHQ, KD}, ns[4] = {KB, KSN, KHKV, KD}, ls[3] = {KB, KHQ, KSN};
    const int64_t cs[4] = {paged ? KPAGES : KB, paged ? KPAGE : KLEN, KHKV, KD};
    args.q = t(q, 4, qs), args.o = t(o, 4, qs), args.lse = t(lse, 3, ls);
    args.k_cache = t(kc, 4, cs), args.v_cache = t(vc, 4, cs);
    args.k_new = t(kn, 4, ns), args.v_new = t(vn, 4, ns);
    args.cache_seqlens = n;
    if (paged) {
      int32_t* bt = ints(table);
      bt[0] = 2, bt[1] = 0, bt[2] = 3, bt[3] = 1;  // two pages a sequence
      args.block_table = bt;
      args.max_pages_per_seq = 2;
    }
    args.num_splits = 4;
  }
  int32_t* ints(int64_t at) { return reinterpret_cast<int32_t*>(&mem[at]); }
  flash_tensor t(int64_t at, int ndim, const int64_t* shape) {
    return flash_tensor_contiguous(&mem[at], FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, ndim, shape);
  }
  size_t workspace_needed() {
    size_t need = 0;
    EXPECT_EQ(flash_fwd_kvcache_workspace_size(&args, &need), FLASH_OK) << flash_last_error_message();
    EXPECT_GT(need, 0u);
    return need;
  }
};

// The KV-cache call and its workspace query both refuse with `status` and `needle`, writing nothing.
void expect_kv_refused(KvArena& a, int32_t status, const std::string& needle) {
  const std::vector<float> before = a.mem;
  const int32_t s = flash_fwd_kvcache(&a.args);
  EXPECT_EQ(s, status) << flash_status_string(s) << ": " << flash_last_error_message();
  EXPECT_NE(std::string(flash_last_error_message()).find(needle), std::string::npos)
      << "wanted \"" << needle << "\"; message was: " << flash_last_error_message();
  EXPECT_TRUE(same_bytes(before, a.mem)) << "a refused call wrote memory";
  size_t bytes = 1;
  EXPECT_EQ(flash_fwd_kvcache_workspace_size(&a.args, &bytes), status) << flash_last_error_message();
  EXPECT_NE(std::string(flash_last_error_message()).find(needle), std::string::npos)
      << "(workspace query) wanted \"" << needle << "\"; message was: " << flash_last_error_message();
}

}  // namespace

// Before the fix a workspace over q returned FLASH_OK with q overwritten by the split partials, and one over
// cache_seqlens crashed the CPU path (a length read back as garbage, then used as an index).
TEST(Reliability, KvcacheWorkspaceOverlappingAnArrayRefused) {
  const struct {
    int64_t at;
    bool paged, append;
    const char* message;
  } cases[] = {{KvArena::q, false, true, "workspace overlaps q in memory"},
               {KvArena::seqlens, false, true, "workspace overlaps cache_seqlens in memory"},
               {KvArena::kn + 2, false, true, "workspace overlaps k_new in memory"},
               {KvArena::kc - 2, false, true, "workspace overlaps q in memory"},  // (from q's tail into k_cache: q first)
               {KvArena::vc, false, false, "workspace overlaps v_cache in memory"},
               {KvArena::o + 4, false, true, "workspace overlaps o in memory"},
               {KvArena::lse, false, true, "workspace overlaps lse in memory"},
               {KvArena::table, true, true, "workspace overlaps block_table in memory"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(c.message);
    KvArena a(c.paged);
    if (!c.append) a.args.k_new.data = a.args.v_new.data = nullptr;
    const size_t need = a.workspace_needed();
    a.args.workspace = &a.mem[c.at];
    a.args.workspace_size = need;
    expect_kv_refused(a, FLASH_ERROR_INVALID_ARGUMENT, c.message);
  }
  for (bool append : {true, false}) {  // the caches (written when appending, read otherwise); a short workspace: the
    KvArena a;                         // overlap is refused before its size is looked at
    if (!append) a.args.k_new.data = a.args.v_new.data = nullptr;
    a.args.workspace = &a.mem[KvArena::kc + 8];
    a.args.workspace_size = 64;
    expect_kv_refused(a, FLASH_ERROR_INVALID_ARGUMENT, "workspace overlaps k_cache in memory");
  }
  for (bool paged : {false, true}) {  // a workspace of its own (8-byte aligned, past every array) still runs
    KvArena a(paged);
    const size_t need = a.workspace_needed();
    a.args.workspace = &a.mem[KvArena::pad + 2];
    a.args.workspace_size = need;
    ASSERT_EQ(flash_fwd_kvcache(&a.args), FLASH_OK) << flash_last_error_message();
    EXPECT_EQ(a.args.num_splits_used, 4);
  }
}

// Appending writes the caches: they may not overlap anything the call reads, the index arrays included.
TEST(Reliability, KvcacheAppendOverlappingAnIndexArrayRefused) {
  {
    KvArena a;
    a.args.k_cache.data = &a.mem[KvArena::kc + 2];  // k_cache's last elements over cache_seqlens
    expect_kv_refused(a, FLASH_ERROR_INVALID_ARGUMENT, "k_cache overlaps cache_seqlens in memory");
  }
  {
    KvArena a(true);
    int32_t* table = a.ints(KvArena::vc + 5);  // the block table inside v_cache's memory (its entries copied there)
    std::memcpy(table, a.args.block_table, KB * 2 * sizeof(int32_t));
    a.args.block_table = table;
    expect_kv_refused(a, FLASH_ERROR_INVALID_ARGUMENT, "v_cache overlaps block_table in memory");
  }
  {
    KvArena a;
    a.args.cache_batch_idx = a.ints(KvArena::o);
    expect_kv_refused(a, FLASH_ERROR_INVALID_ARGUMENT, "o overlaps cache_batch_idx in memory");
  }
}

// A zero-filled flash_kvcache_args with struct_size set (no init call) is refused like flash_fwd's: before the fix it ran
// as window (0, 0), each query seeing only its own diagonal key.
TEST(Reliability, UninitialisedKvcacheArgsRefused) {
  KvArena a;
  flash_kvcache_args z;
  std::memset(&z, 0, sizeof z);
  z.struct_size = sizeof z;
  z.q = a.args.q, z.k_cache = a.args.k_cache, z.v_cache = a.args.v_cache, z.k_new = a.args.k_new, z.v_new = a.args.v_new;
  z.o = a.args.o, z.lse = a.args.lse, z.cache_seqlens = a.args.cache_seqlens;
  a.args = z;
  expect_kv_refused(a, FLASH_ERROR_INVALID_ARGUMENT, "the struct was not initialised");
  EXPECT_NE(std::string(flash_last_error_message()).find("flash_kvcache_args_init(&args) first"), std::string::npos)
      << flash_last_error_message();
  // Initialised, the same call runs; and the struct of a successful call runs again (algorithm_used is now cpu).
  flash_kvcache_args_init(&z);
  z.q = a.args.q, z.k_cache = a.args.k_cache, z.v_cache = a.args.v_cache, z.o = a.args.o, z.cache_seqlens = a.args.cache_seqlens;
  ASSERT_EQ(flash_fwd_kvcache(&z), FLASH_OK) << flash_last_error_message();
  EXPECT_EQ(z.algorithm_used, FLASH_ALGO_CPU);
  ASSERT_EQ(flash_fwd_kvcache(&z), FLASH_OK) << flash_last_error_message();
}

// An empty block mask (max_kv_blocks 0, kv_indices NULL, every count 0) over several batches and heads: every row sees
// no key (O = 0, LSE = -inf; the gradients 0). Before the fix the CPU backends offset the NULL kv_indices by each
// (batch, head, query block)'s strides -- undefined behaviour with no visible effect, which clang's UBSan reports
// ("applying non-zero offset to null pointer": a clang build of this suite, and fuzz_attention) and gcc's does not.
TEST(Reliability, EmptyBlockMaskWithNullIndicesRuns) {
  constexpr int64_t b = 2, s = 5, h = 2, d = 8, n = b * s * h * d;
  std::vector<float> q(n), k(n), v(n), o(n, NAN), lse(b * h * s, NAN), d_o(n), dq(n, NAN), dk(n, NAN), dv(n, NAN);
  for (int64_t i = 0; i < n; ++i)
    q[i] = static_cast<float>(std::sin(0.1 * i)), k[i] = static_cast<float>(std::cos(0.2 * i)), v[i] = 0.5f, d_o[i] = 1.0f;
  std::vector<int32_t> counts(b * h, 0);
  flash_block_mask m;
  flash_block_mask_init(&m);
  m.block_m = m.block_n = 64;
  m.num_q_blocks = 1, m.max_kv_blocks = 0;
  m.kv_num_blocks = counts.data(), m.kv_indices = nullptr;
  m.kv_num_blocks_strides[0] = h, m.kv_num_blocks_strides[1] = 1, m.kv_num_blocks_strides[2] = 1;
  m.kv_indices_strides[0] = h * 4, m.kv_indices_strides[1] = 4, m.kv_indices_strides[2] = 1, m.kv_indices_strides[3] = 1;
  const int64_t shape[4] = {b, s, h, d}, lshape[3] = {b, h, s};
  auto t4 = [&](std::vector<float>& x) { return flash_tensor_contiguous(x.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, shape); };
  for (int32_t algo : {FLASH_ALGO_CPU, FLASH_ALGO_NAIVE}) {
    SCOPED_TRACE(flash_algorithm_name(algo));
    flash_fwd_args f;
    flash_fwd_args_init(&f);
    f.q = t4(q), f.k = t4(k), f.v = t4(v), f.o = t4(o);
    f.lse = flash_tensor_contiguous(lse.data(), FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 3, lshape);
    f.block_mask = &m;
    f.algorithm = algo;
    ASSERT_EQ(flash_fwd(&f), FLASH_OK) << flash_last_error_message();
    for (float x : o) ASSERT_EQ(x, 0.0f);
    for (float x : lse) ASSERT_EQ(x, -INFINITY);
    flash_bwd_args g;
    flash_bwd_args_init(&g);
    g.q = f.q, g.k = f.k, g.v = f.v, g.o = f.o, g.lse = f.lse, g.d_o = t4(d_o), g.dq = t4(dq), g.dk = t4(dk), g.dv = t4(dv);
    g.block_mask = &m;
    g.algorithm = algo;
    ASSERT_EQ(flash_bwd(&g), FLASH_OK) << flash_last_error_message();
    for (const std::vector<float>* x : {&dq, &dk, &dv})
      for (float y : *x) ASSERT_EQ(y, 0.0f);
  }
}
