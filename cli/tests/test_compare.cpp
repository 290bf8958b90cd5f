// compare: rows matched by their axes; a synthetic 10% slowdown fails at --max-regression 5 and passes
// at 15; newly failing rows are regressions.
#include <gtest/gtest.h>

#include "bench.hpp"
#include "compare.hpp"
#include "report.hpp"
#include "results.hpp"

namespace fabench {
namespace {

using nlohmann::json;

json row(const std::string& algo, int64_t seqlen, double ms) {
  json r = {{"name", "x"}, {"device", "cuda:0"}, {"algo", algo}, {"algo_used", algo}, {"mode", "fwd"},
            {"dtype", "bf16"}, {"batch", 16384 / seqlen}, {"heads_q", 16}, {"heads_kv", 16}, {"seqlen_q", seqlen},
            {"seqlen_k", seqlen}, {"head_dim", 128}, {"mask", "none"}, {"causal", false}};
  for (const char* k : {"time_ms_min", "time_ms_max", "flops", "tflops", "peak_mem_bytes", "io_model_naive_bytes",
                        "io_model_flash_bytes", "max_abs_error", "max_rel_error", "speedup_over_naive", "error"})
    r[k] = nullptr;
  r["time_ms_median"] = ms;
  return r;
}

json doc(std::vector<json> rows, const std::string& rev = "abc") {
  json d = {{"schema_version", kSchemaVersion},
            {"meta", {{"library_version", "1.0.0"}, {"git_revision", rev}, {"date", "2026-01-01T00:00:00Z"},
                      {"device", {{"name", "NVIDIA H100 80GB HBM3"}}}}},
            {"results", rows}};
  EXPECT_TRUE(validate_document(d).empty()) << validate_document(d)[0];
  return d;
}

TEST(Compare, TenPercentSlowdownFailsAtFiveAndPassesAtFifteen) {
  const json base = doc({row("sm90", 1024, 1.0), row("sm90", 2048, 2.0)});
  const json slower = doc({row("sm90", 1024, 1.1), row("sm90", 2048, 2.0)}, "def");
  const CompareResult at5 = compare_documents(base, slower, 5.0);
  EXPECT_EQ(at5.regressions, 1);
  EXPECT_NEAR(at5.max_regression_pct, 10.0, 1e-9);
  EXPECT_EQ(at5.entries[0].kind, CompareEntry::Kind::kRegression);  // regressions first
  EXPECT_NEAR(at5.entries[0].ratio, 1.1, 1e-12);
  const CompareResult at15 = compare_documents(base, slower, 15.0);
  EXPECT_EQ(at15.regressions, 0);
}

TEST(Compare, ImprovementsAddedRemovedAndFailures) {
  const json base = doc({row("sm90", 1024, 1.0), row("naive", 1024, 10.0), row("sm80", 1024, 1.5)});
  json failing = row("naive", 1024, 0);
  failing["time_ms_median"] = nullptr;
  failing["error"] = {{"status", "FLASH_ERROR_OUT_OF_MEMORY"}, {"code", 300}, {"message", "too big"}};
  const json fresh = doc({row("sm90", 1024, 0.5), failing, row("sm90", 4096, 3.0)});
  const CompareResult r = compare_documents(base, fresh, 5.0);
  EXPECT_EQ(r.regressions, 1);  // naive now fails
  int improved = 0, added = 0, removed = 0;
  for (const CompareEntry& e : r.entries) {
    improved += e.kind == CompareEntry::Kind::kImproved;
    added += e.kind == CompareEntry::Kind::kAdded;
    removed += e.kind == CompareEntry::Kind::kRemoved;
  }
  EXPECT_EQ(improved, 1);
  EXPECT_EQ(added, 1);
  EXPECT_EQ(removed, 1);
  EXPECT_EQ(r.entries[0].kind, CompareEntry::Kind::kRegression);
  EXPECT_NE(r.entries[0].note.find("FLASH_ERROR_OUT_OF_MEMORY"), std::string::npos);
}

TEST(Compare, RowsMatchOnEveryAxis) {
  json a = row("sm90", 1024, 1.0), b = row("sm90", 1024, 1.0);
  EXPECT_EQ(row_key(a), row_key(b));
  b["mask"] = "causal";
  EXPECT_NE(row_key(a), row_key(b));
  b = a;
  b["dtype"] = "fp16";
  EXPECT_NE(row_key(a), row_key(b));
  b = a;
  b["seqlen_k"] = 4096;
  EXPECT_NE(row_key(a), row_key(b));
}

// A block-sparse row whose map changed under the same label (fa-bench's random maps before and after session 66) is
// reported, not judged: its time moved because its work did.
TEST(Compare, ChangedBlockMapsAreNotJudged) {
  json b = row("sm90", 4096, 0.060), r = row("sm90", 4096, 0.064);
  b["mask"] = r["mask"] = "block-sparse:0.1:128";
  b["block_sparse"] = {{"block_m", 128}, {"block_n", 128}, {"num_q_blocks", 32}, {"max_kv_blocks", 3},
                       {"block_density", 0.09375}, {"seed", 24301}};
  r["block_sparse"] = b["block_sparse"];
  r["block_sparse"]["max_kv_blocks"] = 4;
  r["block_sparse"]["block_density"] = 0.099609375;
  json same = row("sm90", 8192, 0.2), slower = row("sm90", 8192, 0.3);
  same["mask"] = slower["mask"] = "block-sparse:0.25:128";
  same["block_sparse"] = slower["block_sparse"] = b["block_sparse"];
  const CompareResult c = compare_documents(doc({b, same}), doc({r, slower}), 5.0);
  ASSERT_EQ(c.entries.size(), 2u);
  EXPECT_EQ(c.regressions, 1);  // the 0.25 row: the same map, 50% slower
  const CompareEntry& changed = c.entries[1];
  EXPECT_EQ(changed.kind, CompareEntry::Kind::kMapChanged);
  EXPECT_NE(changed.note.find("block_density 0.09375 -> 0.099609375"), std::string::npos) << changed.note;
  EXPECT_NEAR(changed.ratio, 0.064 / 0.060, 1e-12);
}

// The dashboard's history does the same: a step whose block map changed is noted in its tooltip, not flagged.
TEST(Compare, DashboardHistoryNotesAChangedBlockMap) {
  auto sparse = [](double ms, double density, int max_kv) {
    json r = row("sm90", 4096, ms);
    r["mask"] = "block-sparse:0.1:128";
    r["tflops"] = 100.0 * density / ms;  // the FLOPs follow the map
    r["block_sparse"] = {{"block_m", 128}, {"block_n", 128}, {"num_q_blocks", 32}, {"max_kv_blocks", max_kv},
                         {"block_density", density}, {"seed", 24301}};
    return r;
  };
  json d1 = doc({sparse(0.0600, 0.09375, 3)}, "aaa"), d2 = doc({sparse(0.0640, 0.099609375, 4)}, "bbb");
  json d3 = doc({sparse(0.0700, 0.099609375, 4)}, "ccc");  // the same map, 9% slower: a regression
  d1["meta"]["date"] = "2026-01-01T00:00:00Z", d2["meta"]["date"] = "2026-01-02T00:00:00Z", d3["meta"]["date"] = "2026-01-03T00:00:00Z";
  const std::string two = render_html({{"1.json", d1}, {"2.json", d2}}, 5.0, "t");
  EXPECT_NE(two.find("data-regressions=\"0\""), std::string::npos);
  EXPECT_NE(two.find("block map differs: block_density 0.09375 -&gt; 0.099609375"), std::string::npos);
  const std::string three = render_html({{"1.json", d1}, {"2.json", d2}, {"3.json", d3}}, 5.0, "t");
  EXPECT_NE(three.find("data-regressions=\"1\""), std::string::npos);
}

TEST(Compare, MarkdownListsRegressionsFirst) {
  const json base = doc({row("sm90", 1024, 1.0), row("sm90", 2048, 2.0)});
  const json fresh = doc({row("sm90", 1024, 0.8), row("sm90", 2048, 2.4)});
  std::ostringstream os;
  print_compare_markdown(compare_documents(base, fresh, 5.0), os);
  const std::string s = os.str();
  EXPECT_LT(s.find("regression**"), s.find("improved"));
  EXPECT_NE(s.find("+20.0%"), std::string::npos);
}

}  // namespace
}  // namespace fabench
