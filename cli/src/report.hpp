// cli/src/report.hpp -- `fa-bench report`: result files as one self-contained HTML page (inline SVG,
// nothing fetched at view time) and as a markdown summary for CI job pages.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "peers.hpp"

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

// A peers file (peers.hpp) and whether it was named on the command line (a file argument or --peers) rather than
// found in a directory: only a named one may be assigned to a device's latest run when it sits beside no run.
struct PeerInput {
  PeerFile file;
  bool named = false;
};

// Every file named, directories searched recursively for *.json. Files that are not fa-bench results go
// to *skipped with the reason, except peer-script files (peers.hpp), which go to *peers when it is given.
// Ordered by meta.date, then path.
std::vector<ReportInput> collect_inputs(const std::vector<std::string>& paths, std::vector<std::string>* skipped,
                                        std::vector<PeerInput>* peers = nullptr);
// Runs grouped by device, each device's runs oldest first.
std::vector<std::pair<std::string, std::vector<Run>>> group_runs(const std::vector<ReportInput>& inputs);
// With peers: each case's cuDNN / FA2 / libflash-py times of the same device and run (attach_peers) drawn next to
// fa-bench's algorithms, a chart of libflash's speed over each peer's and a table of the ratios.
std::string render_html(const std::vector<ReportInput>& inputs, double max_regression_pct, const std::string& title,
                        const std::vector<PeerInput>& peers = {});
// Changes of each device's latest run against `baseline` (when given and of that device) or against the
// run before it; regressions first; then, with peers, libflash against them. Returns the number of regressions.
int render_markdown(const std::vector<ReportInput>& inputs, const nlohmann::json* baseline, double max_regression_pct,
                    std::string* out, const std::vector<PeerInput>& peers = {});

// One case of a device's page that has peers: fa-bench's rows of the case (latest run), the peer row of the same run.
struct PeerCase {
  std::string key;                   // case_key
  const nlohmann::json* lib = nullptr;    // fa-bench row of the libflash algorithm the peers script ran (or nullptr)
  const nlohmann::json* naive = nullptr;  // fa-bench naive row of the case (or nullptr)
  const PeerRow* peer = nullptr;
  const PeerInput* file = nullptr;
  std::string revision;              // the run both come from
  std::string charts_revision;       // when the charts show `lib`'s axes from a later run: that run (else "")
  double flops = -1;                 // of the case (fa-bench's row, else peer_case_flops)
};
struct DevicePeers {
  std::vector<PeerCase> cases;                                  // drawn, ordered as the groups
  std::vector<std::pair<const PeerInput*, PeerAttachment>> files;  // this device's peers files, attached or not
  std::vector<std::string> not_drawn;                           // peer rows left out, with the reason
};
// The peers of device `device` (an index into `devices`) matched to its fa-bench rows: a peer row is drawn only
// when its case (case_key) has a fa-bench row of the algorithm the script ran in the run the peers file belongs to
// (attach_peers); rows of other runs are never paired with it.
DevicePeers match_peers(const std::vector<std::pair<std::string, std::vector<Run>>>& devices, size_t device,
                        const std::vector<PeerInput>& peers);
int cmd_report(int argc, const char* const* argv);

}  // namespace fabench
