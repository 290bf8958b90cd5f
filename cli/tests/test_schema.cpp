// The result document: what run_benchmark produces validates, survives a write/read round trip
// unchanged, carries the documented keys, and broken documents are rejected with a reason.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "bench.hpp"
#include "results.hpp"

namespace fabench {
namespace {

using nlohmann::json;

json tiny_run(std::vector<const char*> extra = {}) {
  std::vector<const char*> args = {"fa-bench", "run", "--device", "cpu", "--seqlen", "64", "--head-dim", "32",
                                   "--batch", "1", "--heads", "2", "--warmup", "0", "--reps", "2", "--check",
                                   "--no-progress", "--no-flush"};
  args.insert(args.end(), extra.begin(), extra.end());
  RunConfig cfg = parse_run_args(static_cast<int>(args.size()), args.data());
  resolve_defaults(&cfg);
  return run_benchmark(cfg);
}

TEST(Schema, RunProducesAValidDocument) {
  const json doc = tiny_run();
  EXPECT_TRUE(validate_document(doc).empty()) << validate_document(doc)[0];
  EXPECT_EQ(doc["schema_version"], kSchemaVersion);
  const json& m = doc["meta"];
  for (const char* k : {"argv", "library_version", "build_info", "git_revision", "date", "timing", "io_model",
                        "flop_model", "peak_mem_method"})
    EXPECT_TRUE(m.contains(k)) << k;
  for (const char* k : {"name", "multiprocessors", "clock_khz", "shared_mem_per_sm_bytes", "l2_cache_bytes",
                        "total_memory_bytes", "algorithms"})
    EXPECT_TRUE(m["device"].contains(k)) << k;
  EXPECT_EQ(m["library_version"], flash_version_string());
  ASSERT_GE(doc["results"].size(), 1u);
  for (const json& r : doc["results"]) {
    EXPECT_TRUE(r["error"].is_null()) << r.dump();
    EXPECT_GT(r["time_ms_median"].get<double>(), 0.0);
    EXPECT_LE(r["time_ms_min"].get<double>(), r["time_ms_median"].get<double>());
    EXPECT_GE(r["time_ms_max"].get<double>(), r["time_ms_median"].get<double>());
    EXPECT_DOUBLE_EQ(r["flops"].get<double>(), 4.0 * 32 * 64 * 64 * 1 * 2);
    EXPECT_TRUE(r["check_passed"].get<bool>());
    EXPECT_GE(r["peak_mem_bytes"].get<int64_t>(), 4 * 64 * 2 * 32 * 4);
    // The clock fields are always present; null without --sample-clock (and on the host, which has no NVML).
    for (const char* k : {"sm_clock_mhz_median", "sm_clock_mhz_min", "clock_limited_reps"}) {
      ASSERT_TRUE(r.contains(k)) << k;
      EXPECT_TRUE(r[k].is_null()) << k;
    }
  }
  EXPECT_TRUE(m["timing"].contains("clock_sampling"));
}

TEST(Schema, RoundTripThroughAFile) {
  const json doc = tiny_run({"--algo", "naive", "--mask", "causal"});
  const std::string path = ::testing::TempDir() + "fa_bench_schema_roundtrip.json";
  write_json(doc, path);
  const json back = load_document(path);
  EXPECT_EQ(back, doc);
  std::remove(path.c_str());
}

TEST(Schema, BackwardModesAndErrorRows) {
  const json doc = tiny_run({"--algo", "cpu", "--mode", "fwd,bwd,fwd_bwd"});
  ASSERT_EQ(doc["results"].size(), 3u);
  EXPECT_TRUE(validate_document(doc).empty());
  const double fwd_flops = doc["results"][0]["flops"].get<double>();
  for (const json& r : doc["results"]) {
    if (r["mode"] == "fwd") continue;
    if (flash_version_number() < 10100) {  // a library without flash_bwd: an error row, not a gap
      EXPECT_EQ(r["error"]["status"], "FA_BENCH_NOT_SUPPORTED");
      continue;
    }
    ASSERT_TRUE(r["error"].is_null()) << r.dump();
    EXPECT_GT(r["time_ms_median"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(r["flops"].get<double>(), fwd_flops * (r["mode"] == "bwd" ? 2.5 : 3.5));
    EXPECT_TRUE(r["io_model_flash_bytes"].is_null());
  }
  // A CUDA-only algorithm on the CPU: the library's own status and message, as a row.
  const json sm = tiny_run({"--algo", "sm80"});
  ASSERT_EQ(sm["results"].size(), 1u);
  EXPECT_EQ(sm["results"][0]["error"]["status"], "FLASH_ERROR_ALGORITHM_UNAVAILABLE");
  EXPECT_TRUE(sm["results"][0]["time_ms_median"].is_null());
  EXPECT_FALSE(sm["results"][0]["error"]["message"].get<std::string>().empty());
}

TEST(Schema, RejectsBrokenDocuments) {
  json doc = tiny_run({"--algo", "cpu"});
  json bad = doc;
  bad["schema_version"] = kSchemaVersion + 1;
  EXPECT_FALSE(validate_document(bad).empty());
  bad = doc;
  bad["results"][0].erase("time_ms_median");
  EXPECT_FALSE(validate_document(bad).empty());
  bad = doc;
  bad["results"][0]["seqlen_q"] = "64";
  EXPECT_FALSE(validate_document(bad).empty());
  bad = doc;
  bad.erase("meta");
  EXPECT_FALSE(validate_document(bad).empty());
  EXPECT_FALSE(validate_document(json::array()).empty());
}

TEST(Schema, CsvHasAHeaderAndOneLinePerRow) {
  const json doc = tiny_run({"--algo", "cpu,naive"});
  std::ostringstream os;
  write_csv(doc, os);
  std::istringstream in(os.str());
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) ++lines;
  EXPECT_EQ(lines, 3);
  EXPECT_NE(os.str().find("time_ms_median"), std::string::npos);
}

TEST(Schema, SpeedupOverNaiveWhenBothRan) {
  const json doc = tiny_run({"--algo", "cpu,naive"});
  EXPECT_TRUE(doc["results"][0]["speedup_over_naive"].is_number());
  EXPECT_TRUE(doc["results"][1]["speedup_over_naive"].is_null());
}

// --mode decode on the CPU: contiguous and paged caches, fp32 and bf16, checked against the fp64 reference; the row's
// decode fields, bytes and FLOPs by their documented formulas, and the run's copy bandwidth in meta.
json decode_run(std::vector<const char*> extra) {
  // No --algo: the CPU's algorithms (cpu, naive), naive skipped for decode.
  std::vector<const char*> args = {"fa-bench", "run",      "--device",   "cpu", "--mode",    "decode",
                                   "--batch",  "3",        "--heads",    "4",   "--heads-kv", "2",     "--seqlen-k", "100",
                                   "--head-dim", "32",     "--warmup",   "0",   "--reps",    "2",      "--check",
                                   "--no-progress", "--no-flush"};
  args.insert(args.end(), extra.begin(), extra.end());
  RunConfig cfg = parse_run_args(static_cast<int>(args.size()), args.data());
  resolve_defaults(&cfg);
  return run_benchmark(cfg);
}

TEST(Schema, DecodeRowsCarryTheirFields) {
  const json doc = decode_run({"--dtype", "fp32,bf16", "--page-size", "0,16"});
  EXPECT_TRUE(validate_document(doc).empty()) << validate_document(doc)[0];
  const json& cb = doc["meta"]["copy_bandwidth"];
  ASSERT_TRUE(cb.is_object());
  ASSERT_TRUE(cb["bytes_per_s"].is_number());
  const double copy_bw = cb["bytes_per_s"].get<double>();
  EXPECT_GT(copy_bw, 0.0);
  EXPECT_GT(cb["buffer_bytes"].get<int64_t>(), 0);
  EXPECT_TRUE(doc["meta"]["decode_bytes_model"].is_string());
  ASSERT_EQ(doc["results"].size(), 4u);
  std::set<std::string> keys;
  for (const json& r : doc["results"]) {
    ASSERT_TRUE(r["error"].is_null()) << r.dump();
    keys.insert(row_key(r));
    EXPECT_EQ(r["mode"], "decode");
    EXPECT_EQ(r["algo_used"], "cpu");
    EXPECT_EQ(r["batch"], 3);
    EXPECT_EQ(r["seqlen_q"], 1);
    EXPECT_EQ(r["seqlen_k"], 100);
    EXPECT_EQ(r["heads_q"], 4);
    EXPECT_EQ(r["heads_kv"], 2);
    EXPECT_EQ(r["keys_total"], 300);
    EXPECT_EQ(r["append"], false);
    EXPECT_EQ(r["cache_seqlens"], "full");
    EXPECT_EQ(r["num_splits"], 0);
    EXPECT_GE(r["num_splits_used"].get<int64_t>(), 1);
    const int64_t page = r["page_size"].get<int64_t>();
    EXPECT_TRUE(page == 0 || page == 16);
    if (page) EXPECT_EQ(r["num_pages"], 3 * 7);  // batch * ceil(100 / 16)
    else EXPECT_TRUE(r["num_pages"].is_null());
    const double e = r["dtype"] == "fp32" ? 4 : 2;
    // q read + o written + K and V of the 100 keys of each sequence, per kv head
    EXPECT_DOUBLE_EQ(r["bytes"].get<double>(), e * (2.0 * 3 * 1 * 4 * 32 + 2.0 * 2 * 32 * 300));
    EXPECT_DOUBLE_EQ(r["flops"].get<double>(), 4.0 * 3 * 4 * 1 * 100 * 32);  // 4 * batch * heads_q * new * keys * d
    const double t = r["time_ms_median"].get<double>() * 1e-3;
    EXPECT_NEAR(r["bytes_per_s"].get<double>(), r["bytes"].get<double>() / t, 1e-6 * r["bytes_per_s"].get<double>());
    EXPECT_NEAR(r["copy_bandwidth_fraction"].get<double>(), r["bytes_per_s"].get<double>() / copy_bw,
                1e-9 * r["copy_bandwidth_fraction"].get<double>() + 1e-15);
    EXPECT_NEAR(r["tflops"].get<double>(), r["flops"].get<double>() / t / 1e12, 1e-9 * r["tflops"].get<double>());
    EXPECT_TRUE(r["check_passed"].get<bool>()) << r.dump();
    EXPECT_EQ(r["check_scope"], "o");
    EXPECT_EQ(r["check_sampled_heads"], 12);  // every (sequence, head)
    EXPECT_TRUE(r["io_model_flash_bytes"].is_null());
    EXPECT_NE(r["name"].get<std::string>().find(page ? "/page16" : "/contiguous"), std::string::npos);
  }
  EXPECT_EQ(keys.size(), 4u);  // page size is part of a row's identity (compare, report)
  // A decode row without its fields is not a valid row.
  json bad = doc;
  bad["results"][0].erase("page_size");
  EXPECT_FALSE(validate_document(bad).empty());
  // The other modes carry the decode keys as null (every row has every key).
  const json fwd = tiny_run({"--algo", "cpu"});
  for (const char* k : {"page_size", "bytes", "bytes_per_s", "copy_bandwidth_fraction"}) {
    ASSERT_TRUE(fwd["results"][0].contains(k)) << k;
    EXPECT_TRUE(fwd["results"][0][k].is_null()) << k;
  }
  EXPECT_FALSE(fwd["meta"].contains("copy_bandwidth"));
}

TEST(Schema, DecodeAppendRandomLengthsAndMasks) {
  const json doc = decode_run({"--dtype", "bf16", "--seqlen", "4", "--page-size", "0,7", "--append", "--cache-seqlens",
                               "random", "--num-splits", "3", "--mask", "causal;window:10,0"});
  EXPECT_TRUE(validate_document(doc).empty()) << validate_document(doc)[0];
  ASSERT_EQ(doc["results"].size(), 4u);
  for (const json& r : doc["results"]) {
    ASSERT_TRUE(r["error"].is_null()) << r.dump();
    EXPECT_TRUE(r["check_passed"].get<bool>()) << r.dump();
    EXPECT_EQ(r["check_append_mismatches"], 0);
    EXPECT_EQ(r["num_splits_used"], 3);
    EXPECT_EQ(r["append"], true);
    const int64_t total = r["keys_total"].get<int64_t>();
    EXPECT_GE(total, 3 * 4);
    EXPECT_LE(total, 3 * 100);
    // causal: query row j of 4 (bottom-right) sees L - 3 + j keys, 4 L - 6 a sequence; the window sees fewer
    const bool causal = r["mask"] == "causal";
    if (causal) EXPECT_EQ(r["visible_pairs"].get<int64_t>(), 4 * total - 3 * 6);
    else EXPECT_LE(r["visible_pairs"].get<int64_t>(), 3 * 4 * 11);
    const double e = 2;
    const double qo = e * 2.0 * 3 * 4 * 4 * 32, append = e * 4.0 * 3 * 4 * 2 * 32;
    if (causal) EXPECT_DOUBLE_EQ(r["bytes"].get<double>(), qo + e * 2.0 * 2 * 32 * double(total) + append);
    else EXPECT_LE(r["bytes"].get<double>(), qo + e * 2.0 * 2 * 32 * double(total) + append);
  }
}

TEST(Schema, DecodeRefusedAlgorithmIsAnErrorRow) {
  // A CUDA-only algorithm on CPU tensors: the library's refusal, as a row (the same path reports, on a GPU, the
  // refusal of a library without the decode kernels).
  const json doc = decode_run({"--algo", "sm90"});
  ASSERT_EQ(doc["results"].size(), 1u);
  EXPECT_TRUE(validate_document(doc).empty());
  const json& r = doc["results"][0];
  EXPECT_EQ(r["error"]["status"], "FLASH_ERROR_ALGORITHM_UNAVAILABLE");
  EXPECT_NE(r["error"]["message"].get<std::string>().find("flash_fwd_kvcache_workspace_size"), std::string::npos);
  EXPECT_TRUE(r["time_ms_median"].is_null());
  EXPECT_TRUE(r["bytes"].is_number());  // the case's model is known even when it did not run
}

// A --varlen run: valid rows with the varlen object, FLOPs summed per sequence and per mask, checked against the
// reference sequence by sequence (forward and backward), keys that tell it from the dense case of the same shape.
TEST(Schema, VarlenRowsCarryTheirFields) {
  std::vector<const char*> args = {"fa-bench", "run", "--device", "cpu", "--varlen-lengths", "100,0,37,1", "--head-dim",
                                   "32", "--heads", "2", "--warmup", "0", "--reps", "1", "--check", "--no-progress",
                                   "--no-flush", "--algo", "cpu,naive", "--mode", "fwd,fwd_bwd", "--mask", "none;causal-tl"};
  RunConfig cfg = parse_run_args(static_cast<int>(args.size()), args.data());
  resolve_defaults(&cfg);
  const json doc = run_benchmark(cfg);
  EXPECT_TRUE(validate_document(doc).empty()) << validate_document(doc)[0];
  ASSERT_EQ(doc["results"].size(), 8u);
  std::set<std::string> keys;
  for (const json& r : doc["results"]) {
    EXPECT_TRUE(r["error"].is_null()) << r.dump();
    ASSERT_TRUE(r["varlen"].is_object()) << r.dump();
    EXPECT_EQ(r["varlen"]["source"], "lengths");
    EXPECT_EQ(r["varlen"]["sequences"], 4);
    EXPECT_EQ(r["varlen"]["total_tokens"], 138);
    EXPECT_EQ(r["varlen"]["max_seqlen"], 100);
    EXPECT_EQ(r["varlen"]["empty_sequences"], 1);
    EXPECT_EQ(r["varlen"]["lengths"], json({100, 0, 37, 1}));
    EXPECT_EQ(r["batch"], 4);
    EXPECT_EQ(r["seqlen_q"], 100);
    const bool tl = r["mask"] == "causal-tl";
    const int64_t pairs = tl ? 100 * 101 / 2 + 37 * 38 / 2 + 1 : 100 * 100 + 37 * 37 + 1;
    EXPECT_EQ(r["visible_pairs"], pairs);
    EXPECT_DOUBLE_EQ(r["flops"].get<double>(), 4.0 * 32 * pairs * 2 * (r["mode"] == "fwd" ? 1.0 : 3.5));
    EXPECT_TRUE(r["check_passed"].get<bool>()) << r.dump();
    EXPECT_NE(r["name"].get<std::string>().find("/varlen:lengths:138"), std::string::npos) << r["name"];
    keys.insert(row_key(r));
  }
  EXPECT_EQ(keys.size(), 8u);
  // A dense row of the same batch and length has another key (compare never pairs the two).
  std::vector<const char*> dense_args = {"fa-bench", "run", "--device", "cpu", "--batch", "4", "--seqlen", "100",
                                         "--head-dim", "32", "--heads", "2", "--warmup", "0", "--reps", "1",
                                         "--no-progress", "--no-flush", "--algo", "cpu"};
  RunConfig dense_cfg = parse_run_args(static_cast<int>(dense_args.size()), dense_args.data());
  resolve_defaults(&dense_cfg);
  const json dense = run_benchmark(dense_cfg);
  for (const json& r : dense["results"]) {
    EXPECT_TRUE(r["varlen"].is_null());
    EXPECT_EQ(keys.count(row_key(r)), 0u);
  }
}

}  // namespace
}  // namespace fabench
