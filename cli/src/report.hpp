// cli/src/report.hpp -- `fa-bench report`: result files as one self-contained HTML page (inline SVG,
// nothing fetched at view time) and as a markdown summary for CI.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fabench {

struct ReportInput {
  std::string path;
  nlohmann::json doc;
};

// Every result file named, directories searched recursively for *.json (files that are not fa-bench
// results are skipped with a note on stderr), ordered by meta.date.
std::vector<ReportInput> collect_inputs(const std::vector<std::string>& paths, std::vector<std::string>* skipped);
std::string render_html(const std::vector<ReportInput>& inputs, double max_regression_pct);
int cmd_report(int argc, const char* const* argv);

}  // namespace fabench
