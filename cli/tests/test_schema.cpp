// The result document: what run_benchmark produces validates, survives a write/read round trip
// unchanged, carries the documented keys, and broken documents are rejected with a reason.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
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

}  // namespace
}  // namespace fabench
