// cli/src/report.hpp -- `fa-bench report`: result files as one self-contained HTML page (inline SVG,
// nothing fetched at view time) and as a markdown summary for CI job pages.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fabench {

struct ReportInput {
  std::string path;
  nlohmann::json doc;
};

// One benchmark run: every input file of one device and one git revision, merged (a CI job may write
// the grid in several files). Ordered by the latest meta.date among its files.
struct Run {
  std::string device, revision, date, library_version;
  std::vector<std::string> files;
  nlohmann::json meta;     // of the newest file
  nlohmann::json results;  // merged rows (a later file wins on equal axes)
  nlohmann::json as_document() const;
};

// Every file named, directories searched recursively for *.json. Files that are not fa-bench results go
// to *skipped with the reason. Ordered by meta.date, then path.
std::vector<ReportInput> collect_inputs(const std::vector<std::string>& paths, std::vector<std::string>* skipped);
// Runs grouped by device, each device's runs oldest first.
std::vector<std::pair<std::string, std::vector<Run>>> group_runs(const std::vector<ReportInput>& inputs);
std::string render_html(const std::vector<ReportInput>& inputs, double max_regression_pct, const std::string& title);
// Changes of each device's latest run against `baseline` (when given and of that device) or against the
// run before it; regressions first. Returns the number of regressions.
int render_markdown(const std::vector<ReportInput>& inputs, const nlohmann::json* baseline, double max_regression_pct,
                    std::string* out);
int cmd_report(int argc, const char* const* argv);

}  // namespace fabench
