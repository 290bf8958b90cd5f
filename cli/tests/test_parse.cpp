// Flag parsing: `fa-bench run` options, masks, devices.
#include <gtest/gtest.h>

#include "bench.hpp"

namespace fabench {
namespace {

RunConfig parse(std::vector<const char*> args) {
  args.insert(args.begin(), "fa-bench");
  return parse_run_args(static_cast<int>(args.size()), args.data());
}

TEST(Parse, Defaults) {
  const RunConfig c = parse({});
  EXPECT_EQ(c.batch, 2);
  EXPECT_EQ(c.heads, 8);
  EXPECT_TRUE(c.algos.empty());
  ASSERT_EQ(c.masks.size(), 1u);
  EXPECT_EQ(c.masks[0].label(), "none");
  EXPECT_EQ(c.modes, std::vector<std::string>{"fwd"});
  EXPECT_FALSE(c.check);
}

TEST(Parse, RunWordIsOptionalAndListsSplit) {
  const RunConfig c = parse({"run", "--device", "cpu", "--algo", "cpu,naive", "--seqlen", "128,256", "--head-dim", "64",
                             "--dtype", "bf16,fp32", "--batch", "3", "--heads", "6", "--heads-kv", "2", "--seqlen-k",
                             "512", "--warmup", "0", "--reps", "4", "--check", "--json", "x.json", "--seed", "7"});
  EXPECT_EQ(c.device_type, FLASH_DEVICE_CPU);
  EXPECT_EQ(c.algos, (std::vector<std::string>{"cpu", "naive"}));
  EXPECT_EQ(c.seqlens, (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(c.head_dims, (std::vector<int64_t>{64}));
  EXPECT_EQ(c.dtypes, (std::vector<int32_t>{FLASH_DTYPE_BF16, FLASH_DTYPE_FP32}));
  EXPECT_EQ(c.batch, 3);
  EXPECT_EQ(c.heads_kv, 2);
  EXPECT_EQ(c.seqlen_k, 512);
  EXPECT_EQ(c.warmup, 0);
  EXPECT_EQ(c.reps, 4);
  EXPECT_TRUE(c.check);
  EXPECT_EQ(c.json_path, "x.json");
  EXPECT_EQ(c.seed, 7u);
}

TEST(Parse, Devices) {
  int32_t t = 0, id = -1;
  parse_device("cuda:3", &t, &id);
  EXPECT_EQ(t, FLASH_DEVICE_CUDA);
  EXPECT_EQ(id, 3);
  parse_device("cuda", &t, &id);
  EXPECT_EQ(id, 0);
  parse_device("cpu", &t, &id);
  EXPECT_EQ(t, FLASH_DEVICE_CPU);
  EXPECT_THROW(parse_device("cuda:x", &t, &id), std::invalid_argument);
  EXPECT_THROW(parse_device("tpu", &t, &id), std::invalid_argument);
}

TEST(Parse, BadValuesAreRejected) {
  EXPECT_THROW(parse({"--algo", "fastest"}), std::invalid_argument);
  EXPECT_THROW(parse({"--dtype", "fp8"}), std::invalid_argument);
  EXPECT_THROW(parse({"--mode", "train"}), std::invalid_argument);
  EXPECT_THROW(parse({"--heads", "6", "--heads-kv", "4"}), std::invalid_argument);
  EXPECT_THROW(parse({"--seqlen", "0"}), std::invalid_argument);
  EXPECT_THROW(parse({"--grid", "huge"}), std::invalid_argument);
  EXPECT_THROW(parse({"--reps", "0"}), std::invalid_argument);
  EXPECT_THROW(parse({"--no-such-flag"}), std::invalid_argument);
  EXPECT_THROW(parse({"--batch", "two"}), std::invalid_argument);
  EXPECT_THROW(parse({"--mask", "diagonal"}), std::invalid_argument);
}

TEST(Parse, MaskSpecs) {
  EXPECT_EQ(parse_mask_spec("none").label(), "none");
  EXPECT_EQ(parse_mask_spec("causal-br").label(), "causal");
  const MaskSpec tl = parse_mask_spec("causal-tl");
  EXPECT_TRUE(tl.causal);
  EXPECT_EQ(tl.alignment, FLASH_ALIGN_TOP_LEFT);
  const MaskSpec w = parse_mask_spec("window:256,0");
  EXPECT_EQ(w.window_left, 256);
  EXPECT_EQ(w.window_right, 0);
  EXPECT_FALSE(w.causal);
  EXPECT_EQ(w.label(), "window:256,0");
  const MaskSpec b = parse_mask_spec("causal+block-sparse:0.25:64");
  EXPECT_TRUE(b.causal);
  EXPECT_EQ(b.block, MaskSpec::Block::kRandom);
  EXPECT_DOUBLE_EQ(b.density, 0.25);
  EXPECT_EQ(b.block_size, 64);
  EXPECT_EQ(b.label(), "causal+block-sparse:0.25:64");
  EXPECT_EQ(parse_mask_spec("block-sparse:0.5").block_size, 128);
  EXPECT_EQ(parse_mask_spec("block-sparse-file:/a/b/p.json").label(), "block-sparse-file:p.json");
  EXPECT_THROW(parse_mask_spec("block-sparse:1.5"), std::invalid_argument);
  EXPECT_THROW(parse_mask_spec("block-sparse:0.5:32"), std::invalid_argument);
  EXPECT_THROW(parse_mask_spec("window:3"), std::invalid_argument);
  EXPECT_THROW(parse_mask_spec("window:-2,0"), std::invalid_argument);
  EXPECT_THROW(parse_mask_spec("causal-tl+window:4,4"), std::invalid_argument);  // two alignments
  EXPECT_NO_THROW(parse_mask_spec("causal-tl+window-tl:4,4"));
  const auto list = parse_mask_list("none;causal;window:8,8");
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[2].label(), "window:8,8");
}

TEST(Parse, CausalFlagAppliesToEveryMask) {
  const RunConfig c = parse({"--causal", "--mask", "none;block-sparse:0.5"});
  ASSERT_EQ(c.masks.size(), 2u);
  EXPECT_EQ(c.masks[0].label(), "causal");
  EXPECT_EQ(c.masks[1].label(), "causal+block-sparse:0.5:128");
  EXPECT_THROW(parse({"--causal", "--mask", "causal-tl"}), std::invalid_argument);
}

TEST(Parse, StandardGrid) {
  RunConfig c = parse({"--device", "cpu", "--grid", "standard", "--algo", "cpu"});
  resolve_defaults(&c);
  const auto cases = expand_cases(c);
  ASSERT_EQ(cases.size(), 12u);  // 6 seqlens x 2 head dims
  for (const Case& k : cases) {
    EXPECT_EQ(k.batch * k.seqlen_q, 16384);
    EXPECT_EQ(k.heads_q * k.head_dim, 2048);
    EXPECT_EQ(k.seqlen_k, k.seqlen_q);
  }
  EXPECT_EQ(cases.front().seqlen_q, 512);
  EXPECT_EQ(cases.back().seqlen_q, 16384);
}

TEST(Parse, CpuDefaultsComeFromTheLibrary) {
  RunConfig c = parse({"--device", "cpu"});
  resolve_defaults(&c);
  EXPECT_FALSE(c.algos.empty());
  for (const std::string& a : c.algos) EXPECT_GE(flash_algorithm_from_name(a.c_str()), 0) << a;
  EXPECT_EQ(c.dtypes, std::vector<int32_t>{FLASH_DTYPE_FP32});
  EXPECT_GE(c.reps, 1);
}

// --mode decode: its options, the decode grid, and the refusals (each a usage error naming the problem).
TEST(Parse, DecodeOptions) {
  RunConfig c = parse({"--device", "cpu", "--mode", "decode", "--algo", "cpu", "--batch", "3", "--heads", "8", "--heads-kv",
                       "2", "--seqlen-k", "1000", "--head-dim", "64", "--page-size", "0,16", "--num-splits", "4",
                       "--append", "--cache-seqlens", "random"});
  resolve_defaults(&c);
  EXPECT_EQ(c.page_sizes, (std::vector<int64_t>{0, 16}));
  EXPECT_EQ(c.num_splits, 4);
  EXPECT_TRUE(c.append);
  EXPECT_EQ(c.cache_seqlens, "random");
  const auto cases = expand_cases(c);
  ASSERT_EQ(cases.size(), 2u);
  for (const Case& k : cases) {
    EXPECT_EQ(k.mode, "decode");
    EXPECT_EQ(k.seqlen_q, 1);  // one new token by default
    EXPECT_EQ(k.seqlen_k, 1000);
    EXPECT_EQ(k.batch, 3);
    EXPECT_EQ(k.heads_q, 8);
    EXPECT_EQ(k.heads_kv, 2);
    EXPECT_EQ(k.num_splits, 4);
    EXPECT_TRUE(k.append);
  }
  EXPECT_EQ(cases[0].page_size, 0);
  EXPECT_EQ(cases[1].page_size, 16);
  EXPECT_EQ(decode_pages_per_seq(cases[1]), 63);  // ceil(1000 / 16)
  // Random cache lengths: in [seqlen, seqlen_k], reproducible from the seed.
  Case r = cases[0];
  r.batch = 64;
  r.seqlen_q = 5;
  const auto keys = decode_keys(r, 7);
  ASSERT_EQ(keys.size(), 64u);
  for (int64_t k : keys) {
    EXPECT_GE(k, 5);
    EXPECT_LE(k, 1000);
  }
  EXPECT_EQ(keys, decode_keys(r, 7));
  EXPECT_NE(keys, decode_keys(r, 8));
  r.cache_seqlens = "full";
  EXPECT_EQ(decode_keys(r, 7), std::vector<int64_t>(64, 1000));
}

TEST(Parse, DecodeSkipsNaiveAndKeepsOtherModes) {
  RunConfig c = parse({"--device", "cpu", "--mode", "fwd,decode", "--algo", "cpu,naive", "--seqlen", "32", "--seqlen-k", "64"});
  resolve_defaults(&c);
  const auto cases = expand_cases(c);
  int fwd = 0, decode = 0;
  for (const Case& k : cases) {
    if (k.mode == "decode") {
      ++decode;
      EXPECT_EQ(k.algo, "cpu");
      EXPECT_EQ(k.seqlen_q, 32);
    } else {
      ++fwd;
    }
  }
  EXPECT_EQ(fwd, 2);
  EXPECT_EQ(decode, 1);
}

TEST(Parse, DecodeGrid) {
  RunConfig c = parse({"--device", "cpu", "--grid", "decode", "--algo", "cpu"});
  resolve_defaults(&c);
  EXPECT_EQ(c.modes, std::vector<std::string>{"decode"});
  EXPECT_EQ(c.dtypes, std::vector<int32_t>{FLASH_DTYPE_BF16});  // the cases are bf16, even on the CPU
  const auto cases = expand_cases(c);
  ASSERT_EQ(cases.size(), 21u);  // 7 (batch, keys) x page sizes 0, 16, 256
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (const Case& k : cases) {
    EXPECT_EQ(k.mode, "decode");
    EXPECT_EQ(k.heads_q, 32);
    EXPECT_EQ(k.heads_kv, 8);
    EXPECT_EQ(k.head_dim, 128);
    EXPECT_EQ(k.seqlen_q, 1);
    EXPECT_EQ(k.dtype, FLASH_DTYPE_BF16);
    if (k.page_size == 0) shapes.emplace_back(k.batch, k.seqlen_k);
  }
  EXPECT_EQ(shapes, (std::vector<std::pair<int64_t, int64_t>>{
                        {1, 8192}, {1, 131072}, {16, 8192}, {16, 32768}, {64, 4096}, {64, 32768}, {128, 2048}}));
  EXPECT_EQ(cases[0].page_size, 0);
  EXPECT_EQ(cases[1].page_size, 16);
  EXPECT_EQ(cases[2].page_size, 256);
  // --page-size and --dtype override the grid's.
  RunConfig o = parse({"--device", "cpu", "--grid", "decode", "--algo", "cpu", "--page-size", "64", "--dtype", "fp16"});
  resolve_defaults(&o);
  const auto oc = expand_cases(o);
  ASSERT_EQ(oc.size(), 7u);
  for (const Case& k : oc) {
    EXPECT_EQ(k.page_size, 64);
    EXPECT_EQ(k.dtype, FLASH_DTYPE_FP16);
  }
}

std::string refusal(std::vector<const char*> args) {
  try {
    parse(std::move(args));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(Parse, DecodeRefusals) {
  auto has = [](const std::string& msg, const char* what) { return msg.find(what) != std::string::npos; };
  EXPECT_PRED2(has, refusal({"--mode", "decode", "--page-size", "-4"}), "--page-size -4");
  EXPECT_PRED2(has, refusal({"--mode", "decode", "--page-size", "0,-1"}), "--page-size -1");
  EXPECT_PRED2(has, refusal({"--mode", "decode", "--heads", "32", "--heads-kv", "6"}), "must be a multiple of --heads-kv");
  EXPECT_PRED2(has, refusal({"--mode", "decode", "--heads-kv", "0"}), "must be positive");
  EXPECT_PRED2(has, refusal({"--mode", "decode", "--seqlen-k", "0"}), "--seqlen-k must be positive");
  EXPECT_PRED2(has, refusal({"--mode", "decode", "--num-splits", "-1"}), "--num-splits -1");
  EXPECT_PRED2(has, refusal({"--mode", "decode", "--num-splits", "257"}), "--num-splits 257");
  EXPECT_PRED2(has, refusal({"--mode", "decode", "--cache-seqlens", "half"}), "--cache-seqlens 'half'");
  EXPECT_PRED2(has, refusal({"--mode", "decode", "--append", "--seqlen", "9", "--seqlen-k", "8"}), "--append with --seqlen 9");
  EXPECT_PRED2(has, refusal({"--mode", "decode", "--mask", "causal-tl"}), "bottom-right");
  EXPECT_PRED2(has, refusal({"--mode", "decode", "--mask", "window-tl:4,4"}), "bottom-right");
  EXPECT_PRED2(has, refusal({"--mode", "decode", "--mask", "block-sparse:0.5"}), "no block mask");
  EXPECT_PRED2(has, refusal({"--mode", "decode", "--algo", "naive"}), "skips the naive algorithm");
  EXPECT_PRED2(has, refusal({"--page-size", "16"}), "--page-size applies to --mode decode only");
  EXPECT_PRED2(has, refusal({"--append"}), "--append applies to --mode decode only");
  EXPECT_PRED2(has, refusal({"--mode", "fwd", "--num-splits", "2"}), "--num-splits applies to --mode decode only");
  EXPECT_PRED2(has, refusal({"--grid", "decode", "--mode", "fwd"}), "--grid decode");
  EXPECT_PRED2(has, refusal({"--grid", "decode", "--mode", "decode,fwd"}), "--grid decode");
  EXPECT_PRED2(has, refusal({"--grid", "standard", "--mode", "decode"}), "use --grid decode");
  // Accepted: causal and bottom-right windows, page sizes larger than the cache.
  EXPECT_EQ(refusal({"--mode", "decode", "--mask", "none;causal;window:64,0", "--page-size", "0,100000"}), "(accepted)");
}

// --varlen: explicit lengths or a seeded uniform draw summing to --total-tokens; one case per mask x head dim x algo.
TEST(Parse, VarlenLengths) {
  const RunConfig c = parse({"--varlen-lengths", "100,0,37,1", "--heads", "4", "--heads-kv", "2", "--mask", "none;causal",
                             "--algo", "cpu", "--dtype", "fp32"});
  EXPECT_EQ(c.varlen_lengths, (std::vector<int64_t>{100, 0, 37, 1}));
  EXPECT_EQ(c.varlen_source, "lengths");
  const std::vector<Case> cases = expand_cases(c);
  ASSERT_EQ(cases.size(), 2u);
  for (const Case& k : cases) {
    EXPECT_TRUE(k.is_varlen());
    EXPECT_EQ(k.batch, 4);
    EXPECT_EQ(k.seqlen_q, 100);
    EXPECT_EQ(k.seqlen_k, 100);
    EXPECT_EQ(k.total_tokens(), 138);
    EXPECT_EQ(k.heads_q, 4);
    EXPECT_EQ(k.heads_kv, 2);
  }
}

TEST(Parse, VarlenUniformIsSeededAndSumsToTheTotal) {
  const RunConfig a = parse({"--varlen", "uniform:0:50", "--total-tokens", "1000", "--seed", "11"});
  const RunConfig b = parse({"--varlen", "uniform:0:50", "--total-tokens", "1000", "--seed", "11"});
  const RunConfig c = parse({"--varlen", "uniform:0:50", "--total-tokens", "1000", "--seed", "12"});
  EXPECT_EQ(a.varlen_source, "uniform:0:50");
  EXPECT_EQ(a.varlen_lengths, b.varlen_lengths);
  EXPECT_NE(a.varlen_lengths, c.varlen_lengths);
  int64_t sum = 0;
  for (int64_t L : a.varlen_lengths) {
    EXPECT_GE(L, 0);
    EXPECT_LE(L, 50);
    sum += L;
  }
  EXPECT_EQ(sum, 1000);
  // The last one is cut to fit.
  const std::vector<int64_t> one = varlen_uniform_lengths(7, 7, 20, 1);
  EXPECT_EQ(one, (std::vector<int64_t>{7, 7, 6}));
}

TEST(Parse, VarlenRefusals) {
  EXPECT_THROW(parse({"--varlen", "uniform:1:9"}), std::invalid_argument);                            // no total
  EXPECT_THROW(parse({"--varlen", "normal:1:9", "--total-tokens", "9"}), std::invalid_argument);      // distribution
  EXPECT_THROW(parse({"--varlen", "uniform:9:1", "--total-tokens", "9"}), std::invalid_argument);     // lo > hi
  EXPECT_THROW(parse({"--varlen", "uniform:0:0", "--total-tokens", "9"}), std::invalid_argument);     // hi = 0
  EXPECT_THROW(parse({"--total-tokens", "9"}), std::invalid_argument);                                // no --varlen
  EXPECT_THROW(parse({"--varlen-lengths", "0,0"}), std::invalid_argument);                            // no token
  EXPECT_THROW(parse({"--varlen-lengths", "4,-1"}), std::invalid_argument);
  EXPECT_THROW(parse({"--varlen-lengths", "4", "--varlen", "uniform:1:2", "--total-tokens", "3"}), std::invalid_argument);
  EXPECT_THROW(parse({"--varlen-lengths", "4", "--seqlen", "4"}), std::invalid_argument);
  EXPECT_THROW(parse({"--varlen-lengths", "4", "--batch", "2"}), std::invalid_argument);
  EXPECT_THROW(parse({"--varlen-lengths", "4", "--mode", "decode"}), std::invalid_argument);
  EXPECT_THROW(parse({"--varlen-lengths", "4", "--grid", "standard"}), std::invalid_argument);
  EXPECT_THROW(parse({"--varlen-lengths", "4", "--mask", "block-sparse:0.5:64"}), std::invalid_argument);
}

}  // namespace
}  // namespace fabench
