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

}  // namespace
}  // namespace fabench
