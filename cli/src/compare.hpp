// cli/src/compare.hpp -- `fa-bench compare BASE NEW`: rows matched by their axes (results.hpp row_key),
// the ratio of median times, and a verdict a CI job can act on.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fabench {

struct CompareEntry {
  enum class Kind {
    kRegression,  // slower than base by more than the threshold, or newly failing
    kImproved,    // faster by more than the threshold
    kUnchanged,   // within the threshold
    kAdded,       // only in NEW
    kRemoved,     // only in BASE
    kBothFailed,  // an error row in both
    kFixed,       // an error in BASE, a time in NEW
    kMapChanged,  // block-sparse rows whose maps differ (density, seed, list length): times shown, not judged
  } kind;
  std::string key, label;
  double base_ms = 0, new_ms = 0;
  double ratio = 0;       // new / base (time: > 1 is slower)
  double change_pct = 0;  // (ratio - 1) * 100
  std::string note;       // error text for failing rows
};

struct CompareResult {
  std::vector<CompareEntry> entries;  // regressions first, then by |change| descending
  int regressions = 0;
  double max_regression_pct = 0;
  std::string base_device, new_device;
  std::string base_revision, new_revision;
};

// Compares the median times; a row regresses when it is more than max_regression_pct slower, or when it
// succeeded in BASE and has an error in NEW. Two block-sparse rows with the same mask label but different maps (their
// block_sparse objects differ in block_density, seed, max_kv_blocks or block size -- e.g. a random map drawn by
// fa-bench before and after session 66's exact-density maps) are kMapChanged: not a regression, not an improvement.
CompareResult compare_documents(const nlohmann::json& base, const nlohmann::json& fresh, double max_regression_pct);
const char* kind_name(CompareEntry::Kind k);
void print_compare(const CompareResult& r, std::ostream& out);
// A GitHub-flavoured markdown table, regressions first (for CI job summaries).
void print_compare_markdown(const CompareResult& r, std::ostream& out);

}  // namespace fabench
