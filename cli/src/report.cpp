// cli/src/report.cpp -- see report.hpp.
//
// Page layout, per device: the runs it read; for each configuration group (mode, dtype, head dim, mask,
// heads) three charts against sequence length: TFLOP/s per algorithm, speedup over naive, peak memory
// (log scale: flash linear, naive quadratic); then, with two runs or more, every configuration's history
// by commit with regressions marked; then the latest numbers as a table and the error rows.
#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <cxxopts.hpp>

#include "bench.hpp"
#include "compare.hpp"
#include "results.hpp"
#include "svg.hpp"

namespace fabench {

using nlohmann::json;
namespace fs = std::filesystem;

json Run::as_document() const {
  return {{"schema_version", kSchemaVersion}, {"meta", meta}, {"results", results}};
}

std::vector<ReportInput> collect_inputs(const std::vector<std::string>& paths, std::vector<std::string>* skipped,
                                        std::vector<PeerInput>* peers) {
  std::vector<std::pair<std::string, bool>> files;  // path, named on the command line
  for (const std::string& p : paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto& e : fs::recursive_directory_iterator(p, ec))
        if (e.is_regular_file() && e.path().extension() == ".json") files.emplace_back(e.path().string(), false);
    } else {
      files.emplace_back(p, true);
    }
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.first == b.first; }),
              files.end());
  std::vector<ReportInput> out;
  for (const auto& [f, named] : files) {
    if (peers) {
      // A peer-script file is not a result document; recognise it before load_document rejects it.
      std::ifstream in(f);
      const json doc = json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (looks_like_peers(doc)) {
        try {
          peers->push_back({parse_peers(doc, f), named});
        } catch (const std::exception& e) {
          if (skipped) skipped->push_back(e.what());
        }
        continue;
      }
    }
    try {
      out.push_back({f, load_document(f)});
    } catch (const std::exception& e) {
      if (skipped) skipped->push_back(e.what());
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const ReportInput& a, const ReportInput& b) {
    return a.doc["meta"].value("date", "") < b.doc["meta"].value("date", "");
  });
  return out;
}

namespace {

std::string device_of(const json& doc) {
  const json& d = doc["meta"]["device"];
  return d.value("name", "unknown device");
}

std::string short_rev(const std::string& r) { return r.empty() ? "(no revision)" : r.substr(0, 12); }
std::string day_of(const std::string& date) { return date.substr(0, 10); }

bool ok_row(const json& r) { return r["error"].is_null() && r["time_ms_median"].is_number(); }
// --mode decode rows (flash_fwd_kvcache): not drawn against sequence length, listed in a table of their own.
bool is_decode(const json& r) { return r.value("mode", "") == "decode"; }

// The axes shared by the points of one chart: everything but algo, batch and seqlen_q.
std::string group_key(const json& r) {
  std::ostringstream os;
  os << r.value("mode", "") << '|' << r.value("dtype", "") << '|' << r.value("mask", "") << '|' << std::setw(4)
     << r.value("head_dim", int64_t{0}) << '|' << r.value("heads_q", int64_t{0}) << '|' << r.value("heads_kv", int64_t{0})
     << '|' << (r.value("seqlen_k", int64_t{0}) == r.value("seqlen_q", int64_t{0}) ? int64_t{0} : r.value("seqlen_k", int64_t{0}));
  return os.str();
}

std::string group_title(const json& r) {
  std::ostringstream os;
  os << r.value("mode", "") << " · " << r.value("dtype", "") << " · d=" << r.value("head_dim", int64_t{0}) << " · "
     << r.value("mask", "") << " · " << r.value("heads_q", int64_t{0}) << " heads";
  if (r.value("heads_kv", int64_t{0}) != r.value("heads_q", int64_t{0})) os << " (" << r.value("heads_kv", int64_t{0}) << " kv)";
  if (r.value("seqlen_k", int64_t{0}) != r.value("seqlen_q", int64_t{0})) os << " · seqlen_k=" << r.value("seqlen_k", int64_t{0});
  return os.str();
}

std::string slug(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? char(std::tolower(c)) : '-';
  return out;
}

std::string error_tip(const json& r) {
  return r.value("algo", "") + " at seqlen " + std::to_string(r.value("seqlen_q", int64_t{0})) + ": " +
         r["error"].value("status", "") + " — " + r["error"].value("message", "");
}

const char* kStyle = R"CSS(
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:24px;color:#222;background:#f7f7f8}
h1{font-size:22px;margin:0 0 4px} h2{font-size:19px;margin:28px 0 8px;border-bottom:2px solid #ddd;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px} .sub{color:#666;font-size:13px}
table{border-collapse:collapse;font-size:12px;background:#fff;margin:6px 0}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:right} th{background:#f0f0f3} td.l,th.l{text-align:left}
.group{background:#fff;border:1px solid #e2e2e6;border-radius:6px;padding:8px 10px;margin:10px 0}
.group h3{margin:2px 0 6px} .charts{display:flex;flex-wrap:wrap;gap:10px}
svg.chart text{font-size:11px;fill:#333} svg.chart .ctitle{font-size:12px;font-weight:600}
svg.chart .grid{stroke:#eee} svg.chart .axis,svg.chart .xtick{stroke:#888} svg.chart .ref{stroke:#999;stroke-dasharray:4 3}
svg.chart .legend{font-size:11px} .reg{color:#c00;font-weight:600} .imp{color:#080} .err{color:#c00}
tr.regression td{background:#fff0f0} details{margin:8px 0} summary{cursor:pointer;font-weight:600}
ul.peer-files{font-size:13px;margin:4px 0;padding-left:20px} .peers h3{margin-top:14px}
)CSS";

struct DeviceView {
  std::string name;
  std::vector<Run> runs;
  std::map<std::string, json> current;  // row_key -> row (latest run wins)
  std::map<std::string, std::string> current_rev;
  const DevicePeers* peers = nullptr;
};

// The peer backends of some cases, in the order drawn: cuDNN, FA2, any other, libflash-py last.
std::vector<std::string> peer_backends(const std::vector<const PeerCase*>& cases) {
  std::set<std::string> all;
  for (const PeerCase* c : cases)
    for (const auto& [b, ms] : c->peer->ms) all.insert(b);
  std::vector<std::string> out;
  for (const char* b : {"cudnn", "flash"})
    if (all.erase(b)) out.push_back(b);
  const bool lib = all.erase("libflash");
  out.insert(out.end(), all.begin(), all.end());
  if (lib) out.push_back("libflash");
  return out;
}

std::string peer_source(const PeerCase& c) {
  std::string s = fs::path(c.file->file.path).filename().string() + ", interleaved; run " + short_rev(c.revision);
  if (!c.charts_revision.empty())
    s += "; the " + c.lib->value("algo", "") + " point at this length is run " + short_rev(c.charts_revision) + "'s";
  return s;
}

// A speed ratio, three decimals (0.962, 1.538).
std::string fmt_ratio(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", r);
  return buf;
}

// libflash-py's speed over `backend`'s in the interleaved timing (peer time / libflash-py time), or < 0.
double interleaved_ratio(const PeerCase& c, const std::string& backend) {
  const auto lib = c.peer->ms.find("libflash"), other = c.peer->ms.find(backend);
  if (lib == c.peer->ms.end() || other == c.peer->ms.end()) return -1;
  return other->second / lib->second;
}

void html_groups(std::ostringstream& h, const DeviceView& dv) {
  std::map<std::string, std::vector<const json*>> groups;
  for (const auto& [k, r] : dv.current)
    if (!is_decode(r)) groups[group_key(r)].push_back(&r);  // decode rows: their own table (html_decode)
  std::map<std::string, std::vector<const PeerCase*>> peer_groups;
  if (dv.peers)
    for (const PeerCase& c : dv.peers->cases) peer_groups[group_key(*c.lib)].push_back(&c);
  // Groups with peers first (what a user compares), each part in group_key order.
  std::vector<std::pair<std::string, std::vector<const json*>>> ordered(groups.begin(), groups.end());
  std::stable_partition(ordered.begin(), ordered.end(), [&](const auto& g) { return peer_groups.count(g.first) > 0; });
  for (const auto& [gk, rows] : ordered) {
    const std::string title = group_title(*rows[0]);
    // Series per algorithm, points sorted by seqlen. Where an algorithm has two rows at one length (runs of different
    // grids: the standard grid's batch 4 at 4k beside the masks grid's batch 2), one series per run, else per batch,
    // so that no line joins points of different batches.
    std::map<std::string, std::vector<const json*>> by_algo;
    for (const json* r : rows) by_algo[(*r)["algo"].get<std::string>()].push_back(r);
    auto has_dup = [](const std::vector<const json*>& rs) {
      std::set<int64_t> seen;
      for (const json* r : rs)
        if (!seen.insert((*r)["seqlen_q"].get<int64_t>()).second) return true;
      return false;
    };
    std::vector<std::tuple<std::string, std::string, std::vector<const json*>>> split;  // algo, series name, rows
    for (const auto& [algo, rs] : by_algo) {
      if (!has_dup(rs)) {
        split.emplace_back(algo, algo, rs);
        continue;
      }
      std::map<std::string, std::vector<const json*>> by_rev;
      for (const json* r : rs) by_rev[dv.current_rev.at(row_key(*r))].push_back(r);
      bool dup = by_rev.size() < 2;
      for (const auto& [rev, part] : by_rev) dup |= has_dup(part);
      if (!dup) {
        for (const auto& [rev, part] : by_rev) split.emplace_back(algo, algo + " · " + short_rev(rev).substr(0, 7), part);
      } else {
        std::map<int64_t, std::vector<const json*>> by_batch;
        for (const json* r : rs) by_batch[(*r)["batch"].get<int64_t>()].push_back(r);
        for (const auto& [b, part] : by_batch) split.emplace_back(algo, algo + " · b" + std::to_string(b), part);
      }
    }
    std::vector<ChartSeries> tflops, speedup, memory;
    size_t idx = 0;
    std::map<std::string, std::pair<size_t, std::string>> main_series;  // algo -> its longest series: the algo's colour
    for (const auto& [algo, name, rs] : split)
      if (rs.size() > main_series[algo].first) main_series[algo] = {rs.size(), name};
    for (auto& [algo, name, rs] : split) {
      std::sort(rs.begin(), rs.end(), [](const json* a, const json* b) {
        return (*a)["seqlen_q"].get<int64_t>() < (*b)["seqlen_q"].get<int64_t>();
      });
      const std::string color = series_color(main_series[algo].second == name ? algo : "", idx++);
      ChartSeries t{name, color, {}}, s{name, color, {}}, m{name, color, {}};
      for (const json* rp : rs) {
        const json& r = *rp;
        const double x = double(r["seqlen_q"].get<int64_t>());
        const std::string where = algo + " · seqlen " + std::to_string(r["seqlen_q"].get<int64_t>()) + " · batch " +
                                  std::to_string(r["batch"].get<int64_t>());
        const std::string rev = " (" + short_rev(dv.current_rev.at(row_key(r))) + ")";
        if (!ok_row(r)) {
          ChartPoint p;
          p.x = x, p.error = true, p.tip = error_tip(r);
          t.points.push_back(p);
          m.points.push_back(p);
          continue;
        }
        ChartPoint p;
        p.x = x;
        p.y = r["tflops"].get<double>();
        p.tip = where + ": " + format_number(p.y) + " TFLOP/s, " + format_number(r["time_ms_median"].get<double>()) + " ms" + rev;
        t.points.push_back(p);
        if (r["speedup_over_naive"].is_number()) {
          ChartPoint q = p;
          q.y = r["speedup_over_naive"].get<double>();
          q.tip = where + ": " + format_number(q.y, 3) + "x over naive" + rev;
          s.points.push_back(q);
        }
        if (r["peak_mem_bytes"].is_number()) {
          ChartPoint q = p;
          q.y = r["peak_mem_bytes"].get<double>();
          q.tip = where + ": peak " + format_bytes(q.y) + rev;
          m.points.push_back(q);
        }
      }
      tflops.push_back(t);
      if (!s.points.empty()) speedup.push_back(s);
      memory.push_back(m);
    }
    // The peers of the same run (match_peers): each backend's TFLOP/s by fa-bench's FLOP count of the case, and
    // libflash-py's speed over each peer's (interleaved: one process, the same tensors, alternating calls).
    std::vector<ChartSeries> ratio;
    if (const auto pg = peer_groups.find(gk); pg != peer_groups.end()) {
      for (const std::string& b : peer_backends(pg->second)) {
        const std::string name = peer_display_name(b);
        ChartSeries t{name, series_color(name, idx++), {}}, q{name, "", {}};
        t.dashed = b == "libflash";
        q.color = t.color;
        for (const PeerCase* c : pg->second) {
          const auto ms = c->peer->ms.find(b);
          if (ms == c->peer->ms.end()) continue;
          const std::string where = name + " · seqlen " + std::to_string(c->peer->seqlen_q) + " · batch " +
                                    std::to_string(c->peer->batch);
          ChartPoint p;
          p.x = double(c->peer->seqlen_q);
          p.y = c->flops / ms->second / 1e9;
          p.tip = where + ": " + format_number(p.y) + " TFLOP/s, " + format_number(ms->second) + " ms (" + peer_source(*c) + ")";
          t.points.push_back(p);
          const double rt = interleaved_ratio(*c, b);
          if (b != "libflash" && rt > 0) {
            ChartPoint r = p;
            r.y = rt;
            r.tip = "libflash-py ÷ " + name + " · seqlen " + std::to_string(c->peer->seqlen_q) + ": " + fmt_ratio(rt) +
                    "x (" + format_number(c->peer->ms.at("libflash")) + " vs " + format_number(ms->second) + " ms; " +
                    peer_source(*c) + ")";
            q.points.push_back(r);
          }
        }
        if (!t.points.empty()) tflops.push_back(t);
        if (!q.points.empty()) ratio.push_back(q);
      }
    }
    h << "<div class=\"group\" data-group=\"" << html_escape(gk) << "\"><h3>" << html_escape(title) << "</h3><div class=\"charts\">";
    ChartSpec spec;
    if (!ratio.empty()) spec.width = 316;  // four charts a row in 1400 px
    spec.kind = "tflops";
    spec.title = "TFLOP/s (exact mask FLOPs)";
    spec.x_label = "sequence length";
    spec.y_label = "TFLOP/s";
    h << svg_line_chart(spec, tflops);
    if (!speedup.empty()) {
      spec.kind = "speedup";
      spec.title = "speedup over naive";
      spec.y_label = "× naive";
      spec.reference_y = 1.0;
      h << svg_line_chart(spec, speedup);
      spec.reference_y = -1;
    }
    if (!ratio.empty()) {
      spec.kind = "peers";
      spec.title = "libflash ÷ peer, interleaved";
      spec.y_label = "× peer (> 1: libflash faster)";
      spec.reference_y = 1.0;
      h << svg_line_chart(spec, ratio);
      spec.reference_y = -1;
    }
    spec.kind = "memory";
    spec.title = "peak memory of the call (log)";
    spec.y_label = "bytes";
    spec.log_y = true;
    h << svg_line_chart(spec, memory);
    h << "</div></div>\n";
  }
}

void html_history(std::ostringstream& h, const DeviceView& dv, double thr) {
  if (dv.runs.size() < 2) {
    h << "<p class=\"sub\">History: one run of this device so far; history and regression marks appear from the second run.</p>";
    return;
  }
  struct Line {
    std::string key, label;
    std::vector<ChartPoint> pts;
    std::vector<const json*> rows;  // each point's result row (block_map_change between neighbours)
    double last_change = 0;
    bool has_change = false;  // the last two points are both measured
    bool regressed = false;
    int flagged = 0;
  };
  std::map<std::string, Line> lines;
  for (size_t i = 0; i < dv.runs.size(); ++i) {
    const Run& run = dv.runs[i];
    for (const json& r : run.results) {
      Line& l = lines[row_key(r)];
      l.key = row_key(r);
      l.label = row_label(r);
      ChartPoint p;
      p.x = double(i);
      const std::string at = short_rev(run.revision) + " " + day_of(run.date);
      if (ok_row(r)) {
        p.y = r["tflops"].get<double>();
        p.tip = at + ": " + format_number(p.y) + " TFLOP/s, " + format_number(r["time_ms_median"].get<double>()) + " ms";
      } else {
        p.error = true;
        p.tip = at + ": " + r["error"].value("status", "") + " — " + r["error"].value("message", "");
      }
      p.x_label = short_rev(run.revision);
      l.pts.push_back(p);
      l.rows.push_back(&r);
    }
  }
  // Mark regressions: a point more than thr% slower (in time, i.e. in TFLOP/s for the same FLOPs) than the
  // point before it, or failing after a success. A point whose block map differs from the one before (results.hpp,
  // block_map_change) is noted, not judged: its work changed.
  std::vector<Line*> order;
  for (auto& [k, l] : lines) {
    for (size_t i = 1; i < l.pts.size(); ++i) {
      const ChartPoint &a = l.pts[i - 1], &b = l.pts[i];
      bool reg = false;
      const std::string changed = block_map_change(*l.rows[i - 1], *l.rows[i]);
      if (!changed.empty()) l.pts[i].tip += " — " + changed;
      if (!a.error && !b.error && b.y > 0) {
        if (changed.empty()) {
          const double change = (a.y / b.y - 1.0) * 100.0;  // time change
          reg = change > thr;
          if (i + 1 == l.pts.size()) l.last_change = change, l.has_change = true;
        }
      } else if (!a.error && b.error) {
        reg = true;
      }
      if (reg) {
        l.pts[i].flagged = true;
        l.pts[i].tip += " — REGRESSION";
        ++l.flagged;
        if (i + 1 == l.pts.size()) l.regressed = true;
      }
    }
    order.push_back(&l);
  }
  std::stable_sort(order.begin(), order.end(), [](const Line* a, const Line* b) {
    if (a->regressed != b->regressed) return a->regressed;
    if ((a->flagged > 0) != (b->flagged > 0)) return a->flagged > 0;
    return std::fabs(a->last_change) > std::fabs(b->last_change);
  });
  int now = 0;
  for (const Line* l : order) now += l->regressed;
  h << "<h3>History by commit (" << dv.runs.size() << " runs, regression = more than " << format_number(thr, 3)
    << "% slower than the run before)</h3>";
  h << "<p class=\"sub\">Runs, oldest first: ";
  for (size_t i = 0; i < dv.runs.size(); ++i)
    h << (i ? " → " : "") << "<code>" << html_escape(short_rev(dv.runs[i].revision)) << "</code> " << html_escape(day_of(dv.runs[i].date));
  h << ". <span class=\"" << (now ? "reg" : "imp") << "\" data-regressions=\"" << now << "\">" << now
    << " configuration(s) regressed in the latest run.</span></p>";
  h << "<table class=\"history\"><tr><th class=\"l\">configuration</th><th>TFLOP/s by run</th><th>first</th><th>latest</th>"
       "<th>time change (last step)</th><th class=\"l\">verdict</th></tr>";
  for (const Line* l : order) {
    auto val = [](const ChartPoint& p) { return p.error ? std::string("error") : format_number(p.y); };
    h << "<tr class=\"" << (l->regressed ? "regression" : "") << "\" data-key=\"" << html_escape(l->key) << "\"><td class=\"l\">"
      << html_escape(l->label) << "</td><td>" << svg_sparkline(l->pts, l->key) << "</td><td>" << val(l->pts.front())
      << "</td><td>" << val(l->pts.back()) << "</td><td>"
      << (l->has_change ? (l->last_change >= 0 ? "+" : "") + format_number(l->last_change, 3) + "%" : "-")
      << "</td><td class=\"l " << (l->regressed ? "reg" : l->has_change && l->last_change < -thr ? "imp" : "") << "\">"
      << (l->regressed                               ? "REGRESSION"
          : l->has_change && l->last_change < -thr ? "improved"
          : l->flagged                             ? "regressed earlier"
          : l->pts.size() > 1                      ? "ok"
                                                   : "new")
      << "</td></tr>";
  }
  h << "</table>";
}

void html_table(std::ostringstream& h, const DeviceView& dv) {
  size_t shown = 0;
  for (const auto& [k, r] : dv.current) shown += !is_decode(r);
  if (shown == 0) return;
  h << "<details class=\"data\"><summary>Latest numbers (" << shown << " rows)</summary><table class=\"data\">"
       "<tr><th class=\"l\">algo</th><th class=\"l\">mode</th><th class=\"l\">dtype</th><th>batch</th><th>heads</th>"
       "<th>seqlen_q</th><th>seqlen_k</th><th>d</th><th class=\"l\">mask</th><th>median ms</th><th>TFLOP/s</th>"
       "<th>× naive</th><th>peak memory</th><th>max rel err</th><th class=\"l\">revision</th><th class=\"l\">error</th></tr>";
  std::vector<const json*> rows;
  for (const auto& [k, r] : dv.current)
    if (!is_decode(r)) rows.push_back(&r);
  std::sort(rows.begin(), rows.end(), [](const json* a, const json* b) {
    const std::string ga = group_key(*a), gb = group_key(*b);
    if (ga != gb) return ga < gb;
    if ((*a)["seqlen_q"] != (*b)["seqlen_q"]) return (*a)["seqlen_q"].get<int64_t>() < (*b)["seqlen_q"].get<int64_t>();
    return (*a)["algo"].get<std::string>() < (*b)["algo"].get<std::string>();
  });
  auto num = [](const json& v, int sig) { return v.is_number() ? format_number(v.get<double>(), sig) : std::string("-"); };
  for (const json* rp : rows) {
    const json& r = *rp;
    h << "<tr data-key=\"" << html_escape(row_key(r)) << "\"><td class=\"l\">" << html_escape(r.value("algo", ""))
      << "</td><td class=\"l\">" << html_escape(r.value("mode", "")) << "</td><td class=\"l\">" << html_escape(r.value("dtype", ""))
      << "</td><td>" << r["batch"] << "</td><td>" << r["heads_q"];
    if (r["heads_kv"] != r["heads_q"]) h << "/" << r["heads_kv"];
    h << "</td><td>" << r["seqlen_q"] << "</td><td>" << r["seqlen_k"] << "</td><td>" << r["head_dim"] << "</td><td class=\"l\">"
      << html_escape(r.value("mask", "")) << "</td><td class=\"ms\">" << num(r["time_ms_median"], 4) << "</td><td class=\"tflops\">"
      << num(r["tflops"], 4) << "</td><td>" << num(r["speedup_over_naive"], 3) << "</td><td>"
      << (r["peak_mem_bytes"].is_number() ? format_bytes(r["peak_mem_bytes"].get<double>()) : "-") << "</td><td>"
      << num(r["max_rel_error"], 2) << "</td><td class=\"l\"><code>" << html_escape(short_rev(dv.current_rev.at(row_key(r))))
      << "</code></td><td class=\"l err\">"
      << (r["error"].is_object() ? html_escape(r["error"].value("status", "") + ": " + r["error"].value("message", "")) : "")
      << "</td></tr>";
  }
  h << "</table></details>";
}


// --mode decode rows: one line per case (latest run), with the bandwidth the call reached.
void html_decode(std::ostringstream& h, const DeviceView& dv) {
  std::vector<const json*> rows;
  for (const auto& [k, r] : dv.current)
    if (is_decode(r)) rows.push_back(&r);
  if (rows.empty()) return;
  auto axis = [](const json& r, const char* k) { return r.contains(k) && r[k].is_number() ? r[k].get<int64_t>() : int64_t{0}; };
  std::sort(rows.begin(), rows.end(), [&](const json* a, const json* b) {
    return std::make_tuple((*a).value("dtype", ""), axis(*a, "head_dim"), axis(*a, "batch"), axis(*a, "seqlen_k"),
                           axis(*a, "seqlen_q"), axis(*a, "page_size"), row_key(*a)) <
           std::make_tuple((*b).value("dtype", ""), axis(*b, "head_dim"), axis(*b, "batch"), axis(*b, "seqlen_k"),
                           axis(*b, "seqlen_q"), axis(*b, "page_size"), row_key(*b));
  });
  auto num = [](const json& r, const char* k, int sig, double scale = 1.0) {
    return r.contains(k) && r[k].is_number() ? format_number(r[k].get<double>() * scale, sig) : std::string("-");
  };
  h << "<h3>Decode (flash_fwd_kvcache)</h3><p class=\"sub\">new = new tokens a sequence, keys = keys each attends to "
       "(≤: random cache lengths), page = cache page size (contiguous: one block); GB/s = the call's minimum bytes over "
       "its median time, % copy = that over the device's measured copy bandwidth.</p>";
  h << "<table class=\"decode\"><tr><th class=\"l\">algo</th><th class=\"l\">dtype</th><th>batch</th><th>heads</th>"
       "<th>new</th><th>keys</th><th>d</th><th class=\"l\">mask</th><th>page</th><th>splits</th><th>append</th>"
       "<th>median ms</th><th>GB/s</th><th>% copy</th><th>TFLOP/s</th><th>max rel err</th><th class=\"l\">revision</th>"
       "<th class=\"l\">error</th></tr>";
  for (const json* rp : rows) {
    const json& r = *rp;
    const int64_t page = axis(r, "page_size");
    h << "<tr data-key=\"" << html_escape(row_key(r)) << "\"><td class=\"l\">" << html_escape(r.value("algo", ""))
      << "</td><td class=\"l\">" << html_escape(r.value("dtype", "")) << "</td><td>" << r["batch"] << "</td><td>"
      << r["heads_q"];
    if (r["heads_kv"] != r["heads_q"]) h << "/" << r["heads_kv"];
    h << "</td><td>" << r["seqlen_q"] << "</td><td>" << (r.value("cache_seqlens", json("full")) == "random" ? "≤" : "")
      << r["seqlen_k"] << "</td><td>" << r["head_dim"] << "</td><td class=\"l\">" << html_escape(r.value("mask", ""))
      << "</td><td>" << (page > 0 ? std::to_string(page) : std::string("contiguous")) << "</td><td>"
      << (axis(r, "num_splits") > 0 ? std::to_string(axis(r, "num_splits")) : std::string("auto"))
      << (r.contains("num_splits_used") && r["num_splits_used"].is_number() ? " → " + r["num_splits_used"].dump() : "")
      << "</td><td>" << (r.value("append", json(false)) == true ? "yes" : "no") << "</td><td class=\"ms\">"
      << num(r, "time_ms_median", 4) << "</td><td>" << num(r, "bytes_per_s", 4, 1e-9) << "</td><td>"
      << num(r, "copy_bandwidth_fraction", 3, 100.0) << "</td><td class=\"tflops\">" << num(r, "tflops", 4) << "</td><td>"
      << num(r, "max_rel_error", 2) << "</td><td class=\"l\"><code>" << html_escape(short_rev(dv.current_rev.at(row_key(r))))
      << "</code></td><td class=\"l err\">"
      << (r["error"].is_object() ? html_escape(r["error"].value("status", "") + ": " + r["error"].value("message", "")) : "")
      << "</td></tr>";
  }
  h << "</table>";
}

std::string case_title(const json& r) {
  std::ostringstream os;
  os << r.value("mode", "") << " " << r.value("dtype", "") << " d" << r.value("head_dim", int64_t{0}) << " "
     << r.value("mask", "") << " b" << r.value("batch", int64_t{0}) << " h" << r.value("heads_q", int64_t{0});
  if (r.value("heads_kv", int64_t{0}) != r.value("heads_q", int64_t{0})) os << "/" << r.value("heads_kv", int64_t{0});
  os << " n" << format_seqlen(double(r.value("seqlen_q", int64_t{0})));
  if (r.value("seqlen_k", int64_t{0}) != r.value("seqlen_q", int64_t{0}))
    os << "×" << format_seqlen(double(r.value("seqlen_k", int64_t{0})));
  return os.str();
}

std::string attachment_text(const PeerInput& p) {
  std::string s = "<code>" + html_escape(fs::path(p.file.path).filename().string()) + "</code> (" +
                  html_escape(p.file.path) + "; " + std::to_string(p.file.rows.size()) + " rows";
  if (!p.file.torch.empty()) s += ", torch " + html_escape(p.file.torch);
  if (!p.file.date.empty()) s += ", " + html_escape(p.file.date);
  s += ", libflash algorithm " + html_escape(p.file.algorithm) + ")";
  return s;
}

// The ratios at a glance: a row per configuration group (mode, dtype, d, mask, heads), a column per sequence length,
// each cell libflash-py's speed over cuDNN's and FA2's (interleaved).
void html_peer_summary(std::ostringstream& h, const DevicePeers& dp) {
  std::vector<const PeerCase*> all;
  for (const PeerCase& c : dp.cases) all.push_back(&c);
  std::vector<std::string> others;
  for (const std::string& b : peer_backends(all))
    if (b != "libflash") others.push_back(b);
  std::map<std::string, std::map<int64_t, const PeerCase*>> grid;  // group_key -> seqlen -> case
  std::set<int64_t> lens;
  for (const PeerCase& c : dp.cases) {
    grid[group_key(*c.lib)][c.peer->seqlen_q] = &c;
    lens.insert(c.peer->seqlen_q);
  }
  std::string names;
  for (const std::string& b : others) names += (names.empty() ? "" : " / ") + peer_display_name(b);
  h << "<table class=\"peer-summary\"><tr><th class=\"l\">libflash ÷ " << html_escape(names) << " (interleaved)</th>";
  for (int64_t n : lens) h << "<th>" << format_seqlen(double(n)) << "</th>";
  h << "</tr>";
  for (const auto& [gk, by_len] : grid) {
    const json& first = *by_len.begin()->second->lib;
    h << "<tr data-group=\"" << html_escape(gk) << "\"><td class=\"l\">" << html_escape(group_title(first)) << "</td>";
    for (int64_t n : lens) {
      const auto c = by_len.find(n);
      if (c == by_len.end()) {
        h << "<td>-</td>";
        continue;
      }
      std::string cell, tip = case_title(*c->second->lib) + ", run " + short_rev(c->second->revision) + ":";
      for (size_t i = 0; i < others.size(); ++i) {
        const double rt = interleaved_ratio(*c->second, others[i]);
        cell += std::string(i ? " / " : "") + "<span class=\"" + (rt <= 0 ? "" : rt < 1 ? "reg" : "imp") + "\">" +
                (rt > 0 ? fmt_ratio(rt) : "-") + "</span>";
        tip += " ÷ " + peer_display_name(others[i]) + " " + (rt > 0 ? fmt_ratio(rt) : "-");
      }
      h << "<td title=\"" << html_escape(tip) << "\">" << cell << "</td>";
    }
    h << "</tr>";
  }
  h << "</table>";
}

// libflash against the peers of the same run: the files read and the run each belongs to, then per case fa-bench's
// libflash and naive, each peer, and the interleaved ratios.
void html_peers(std::ostringstream& h, const DeviceView& dv) {
  if (!dv.peers) return;
  if (dv.peers->files.empty()) {
    h << "<p class=\"sub no-peers\">No peers file of this device was read: run <code>scripts/interleaved_peers.py "
         "--json peers.json</code> with the build of a fa-bench run and put it beside that run's JSON (or pass it with "
         "<code>--peers</code>) to draw libflash against cuDNN and FlashAttention-2 here.</p>";
    return;
  }
  const DevicePeers& dp = *dv.peers;
  h << "<div class=\"peers\"><h3>libflash against its peers (cuDNN and FlashAttention-2 through PyTorch SDPA)</h3>"
       "<p class=\"sub\">From <code>scripts/interleaved_peers.py --json</code>: libflash through the Python binding "
       "(libflash-py) and each SDPA backend timed interleaved in one process on the same tensors, so clock and power "
       "drift fall on all alike; the ratios below are of those times (&gt; 1: libflash faster). TFLOP/s of the peers "
       "use fa-bench's FLOP count of the case. A peers file is drawn only on its own device and beside the fa-bench "
       "rows of its own run.</p><ul class=\"peer-files\">";
  for (const auto& [p, a] : dp.files) {
    h << "<li data-peers-file=\"" << html_escape(fs::path(p->file.path).filename().string()) << "\" data-drawn=\""
      << (a.run >= 0 ? "1" : "0") << "\">" << attachment_text(*p);
    if (a.run >= 0)
      h << ": run <code>" << html_escape(short_rev(dv.runs[size_t(a.run)].revision)) << "</code> ("
        << html_escape(dv.runs[size_t(a.run)].date) << "), " << html_escape(a.how);
    else
      h << ": <span class=\"err\">not drawn</span>, " << html_escape(a.why_not);
    h << "</li>";
  }
  h << "</ul>";
  if (!dp.cases.empty()) html_peer_summary(h, dp);
  if (!dp.cases.empty()) {
    h << "<details class=\"peer-rows\"><summary>Every case (" << dp.cases.size() << "): TFLOP/s and ratios</summary>";
    std::vector<const PeerCase*> all;
    for (const PeerCase& c : dp.cases) all.push_back(&c);
    std::vector<std::string> backends = peer_backends(all), others;
    for (const std::string& b : backends)
      if (b != "libflash") others.push_back(b);
    const std::string lib_algo = dp.cases.front().lib->value("algo", "");
    h << "<table class=\"peers\"><tr><th class=\"l\">case</th><th>libflash " << html_escape(lib_algo)
      << "<br>(fa-bench)</th><th>naive<br>(fa-bench)</th>";
    for (const std::string& b : others) h << "<th>" << html_escape(peer_display_name(b)) << "</th>";
    h << "<th>libflash-py</th>";
    for (const std::string& b : others) h << "<th>libflash ÷<br>" << html_escape(peer_display_name(b)) << "</th>";
    h << "<th>max rel diff<br>vs " << html_escape(peer_display_name(others.empty() ? "libflash" : others.front()))
      << "</th><th class=\"l\">run · peers file</th></tr>";
    auto tf = [](const json* r) {
      return r && r->at("tflops").is_number() ? format_number(r->at("tflops").get<double>())
             : r && r->at("error").is_object() ? std::string("<span class=\"err\">") + html_escape(r->at("error").value("status", "error")) + "</span>"
                                                : std::string("-");
    };
    for (const PeerCase& c : dp.cases) {
      h << "<tr data-case=\"" << html_escape(c.key) << "\"><td class=\"l\">" << html_escape(case_title(*c.lib)) << "</td><td>"
        << tf(c.lib) << "</td><td>" << tf(c.naive) << "</td>";
      auto peer_tf = [&](const std::string& b) {
        const auto ms = c.peer->ms.find(b);
        return ms == c.peer->ms.end() ? std::string("-") : format_number(c.flops / ms->second / 1e9);
      };
      for (const std::string& b : others) h << "<td data-peer=\"" << html_escape(b) << "\">" << peer_tf(b) << "</td>";
      h << "<td data-peer=\"libflash\">" << peer_tf("libflash") << "</td>";
      for (const std::string& b : others) {
        const double rt = interleaved_ratio(c, b);
        h << "<td class=\"ratio " << (rt > 0 && rt < 1 ? "reg" : "") << "\" data-ratio-over=\"" << html_escape(b) << "\">"
          << (rt > 0 ? fmt_ratio(rt) + "×" : "-") << "</td>";
      }
      char err[32] = "-";
      if (c.peer->max_rel_err >= 0) std::snprintf(err, sizeof err, "%.1e", c.peer->max_rel_err);
      h << "<td>" << err << "</td><td class=\"l\"><code>"
        << html_escape(short_rev(c.revision)) << "</code> · " << html_escape(fs::path(c.file->file.path).filename().string());
      if (!c.charts_revision.empty())
        h << " <span class=\"sub\">(the charts' " << html_escape(c.lib->value("algo", "")) << " point: run <code>"
          << html_escape(short_rev(c.charts_revision)) << "</code>)</span>";
      h << "</td></tr>";
    }
    h << "</table></details>";
  }
  if (!dp.not_drawn.empty()) {
    h << "<details class=\"not-drawn\"><summary>" << dp.not_drawn.size() << " peer row(s) not drawn</summary><ul>";
    for (const std::string& s : dp.not_drawn) h << "<li>" << html_escape(s) << "</li>";
    h << "</ul></details>";
  }
  h << "</div>";
}
}  // namespace

std::vector<std::pair<std::string, std::vector<Run>>> group_runs(const std::vector<ReportInput>& inputs) {
  std::vector<std::pair<std::string, std::vector<Run>>> out;
  for (const ReportInput& in : inputs) {
    const std::string dev = device_of(in.doc);
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == dev; });
    if (it == out.end()) {
      out.emplace_back(dev, std::vector<Run>{});
      it = out.end() - 1;
    }
    const std::string rev = in.doc["meta"].value("git_revision", "");
    auto run = std::find_if(it->second.begin(), it->second.end(), [&](const Run& r) { return r.revision == rev; });
    if (run == it->second.end()) {
      it->second.push_back(Run{dev, rev, "", "", {}, json::object(), json::array()});
      run = it->second.end() - 1;
    }
    run->files.push_back(in.path);
    const std::string date = in.doc["meta"].value("date", "");
    if (date >= run->date) {
      run->date = date;
      run->meta = in.doc["meta"];
      run->library_version = in.doc["meta"].value("library_version", "");
    }
    // Merge rows: a later file replaces a row with equal axes.
    std::map<std::string, size_t> index;
    for (size_t i = 0; i < run->results.size(); ++i) index[row_key(run->results[i])] = i;
    for (const json& r : in.doc["results"]) {
      const auto f = index.find(row_key(r));
      if (f != index.end()) run->results[f->second] = r;
      else {
        index[row_key(r)] = run->results.size();
        run->results.push_back(r);
      }
    }
  }
  for (auto& [dev, runs] : out)
    std::stable_sort(runs.begin(), runs.end(), [](const Run& a, const Run& b) { return a.date < b.date; });
  return out;
}

DevicePeers match_peers(const std::vector<std::pair<std::string, std::vector<Run>>>& devices, size_t device,
                        const std::vector<PeerInput>& peers) {
  DevicePeers out;
  const std::vector<Run>& runs = devices[device].second;
  // fa-bench's rows by run, case and algorithm; and the run of each row the charts show (the latest run wins).
  std::vector<std::map<std::string, std::map<std::string, const json*>>> by_run(runs.size());
  std::map<std::string, size_t> shown_run;  // row_key -> run
  for (size_t i = 0; i < runs.size(); ++i)
    for (const json& r : runs[i].results) {
      by_run[i][case_key(r)][r.value("algo", "")] = &r;
      shown_run[row_key(r)] = i;
    }
  // The peers files of this device, each with its run; within a run a later file (date, then path) wins a case.
  std::vector<std::pair<const PeerInput*, PeerAttachment>> mine;
  for (const PeerInput& p : peers) {
    PeerAttachment a = attach_peers(p.file, p.named, devices);
    if (a.device == int(device)) mine.emplace_back(&p, a);
  }
  std::stable_sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first->file.date, a.first->file.path) < std::tie(b.first->file.date, b.first->file.path);
  });
  out.files = mine;
  std::map<std::string, std::map<size_t, std::pair<const PeerRow*, const PeerInput*>>> cand;  // case -> run -> row
  for (const auto& [p, a] : mine) {
    if (a.run < 0) continue;
    for (const PeerRow& r : p->file.rows) cand[case_key(r.as_case())][size_t(a.run)] = {&r, p};
  }
  for (const auto& [key, runs_of_case] : cand) {
    const auto& [run, pr] = *runs_of_case.rbegin();  // the newest run with peers for this case
    const auto& [row, file] = pr;
    const std::string& algo = file->file.algorithm;
    const std::string where = fs::path(file->file.path).filename().string() + ": " + case_title(row->as_case()) + ": ";
    // fa-bench's rows of the case in the peers' own run only: the algorithm the script ran (or a row that resolved to
    // it, e.g. fa-bench's auto), and naive.
    const json* lib = nullptr;
    const json* naive = nullptr;
    if (const auto c = by_run[run].find(key); c != by_run[run].end()) {
      if (const auto f = c->second.find(algo); f != c->second.end()) lib = f->second;
      for (const auto& [a, r] : c->second)
        if (!lib && r->value("algo_used", json()).is_string() && (*r)["algo_used"] == algo) lib = r;
      if (const auto f = c->second.find("naive"); f != c->second.end()) naive = f->second;
    }
    if (!lib) {
      out.not_drawn.push_back(where + "no fa-bench " + algo + " row of this case in its run " + short_rev(runs[run].revision));
      continue;
    }
    PeerCase pc;
    pc.key = key;
    pc.lib = lib;
    pc.naive = naive;
    if (const size_t shown = shown_run.at(row_key(*lib)); shown != run) pc.charts_revision = runs[shown].revision;
    pc.peer = row;
    pc.file = file;
    pc.revision = runs[run].revision;
    pc.flops = lib->at("flops").is_number() ? lib->at("flops").get<double>() : peer_case_flops(*row);
    if (pc.flops <= 0) {
      out.not_drawn.push_back(where + "no FLOP count for this case");
      continue;
    }
    out.cases.push_back(pc);
  }
  std::stable_sort(out.cases.begin(), out.cases.end(), [](const PeerCase& a, const PeerCase& b) {
    const std::string ga = group_key(*a.lib), gb = group_key(*b.lib);
    if (ga != gb) return ga < gb;
    return a.lib->at("seqlen_q").get<int64_t>() < b.lib->at("seqlen_q").get<int64_t>();
  });
  return out;
}

std::string render_html(const std::vector<ReportInput>& inputs, double thr, const std::string& title,
                        const std::vector<PeerInput>& peers) {
  const auto devices = group_runs(inputs);
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << html_escape(title)
    << "</title><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><style>" << kStyle
    << "</style></head><body>\n";
  h << "<h1>" << html_escape(title) << "</h1><p class=\"sub\">Drawn by <code>fa-bench report</code> from " << inputs.size()
    << " result file(s); every chart is inline SVG (no script, nothing fetched). TFLOP/s counts the FLOPs of the mask "
       "actually applied (4·d per visible query-key pair); peak memory is q+k+v+o+workspace. Hover a point for its "
       "numbers.</p>\n";
  if (devices.empty()) h << "<p>No fa-bench result files.</p>";
  // Peers files of no device on the page: named, never drawn.
  std::string orphans;
  for (const PeerInput& p : peers) {
    const PeerAttachment a = attach_peers(p.file, p.named, devices);
    if (a.device < 0) orphans += "<li data-peers-file=\"" + html_escape(fs::path(p.file.path).filename().string()) +
                                 "\" data-drawn=\"0\">" + attachment_text(p) + ": not drawn, " + html_escape(a.why_not) + "</li>";
  }
  if (!orphans.empty()) h << "<p class=\"sub\">Peers files not drawn:</p><ul class=\"peer-files\">" << orphans << "</ul>";
  h << "<ul class=\"toc\">";
  for (const auto& [dev, runs] : devices)
    h << "<li><a href=\"#dev-" << slug(dev) << "\">" << html_escape(dev) << "</a> (" << runs.size() << " run(s))</li>";
  h << "</ul>\n";
  for (size_t di = 0; di < devices.size(); ++di) {
    const auto& [dev, runs] = devices[di];
    const DevicePeers dp = match_peers(devices, di, peers);
    DeviceView dv;
    dv.peers = &dp;
    dv.name = dev;
    dv.runs = runs;
    for (const Run& run : runs)
      for (const json& r : run.results) {
        dv.current[row_key(r)] = r;
        dv.current_rev[row_key(r)] = run.revision;
      }
    const json& meta = runs.back().meta;
    const json& d = meta["device"];
    h << "<section class=\"device\" id=\"dev-" << slug(dev) << "\" data-device=\"" << html_escape(dev) << "\"><h2>"
      << html_escape(dev) << "</h2>";
    h << "<p class=\"sub\">" << html_escape(d.value("string", "")) << " · " << d.value("multiprocessors", 0)
      << (d.value("type", "") == "cuda" ? " SMs" : " threads");
    if (d.value("clock_khz", 0) > 0) h << " · " << d.value("clock_khz", 0) / 1000 << " MHz";
    if (d.contains("shared_mem_per_sm_bytes")) h << " · shared memory/SM " << format_bytes(d.value("shared_mem_per_sm_bytes", 0.0));
    if (d.contains("l2_cache_bytes")) h << " · L2 " << format_bytes(d.value("l2_cache_bytes", 0.0));
    if (d.contains("total_memory_bytes")) h << " · memory " << format_bytes(d.value("total_memory_bytes", 0.0));
    h << ". Latest run: <code>" << html_escape(short_rev(runs.back().revision)) << "</code>, "
      << html_escape(runs.back().date) << ", libflash " << html_escape(runs.back().library_version) << " ("
      << html_escape(meta.value("build_info", "")) << ").</p>";
    h << "<table class=\"runs\"><tr><th class=\"l\">revision</th><th class=\"l\">date</th><th class=\"l\">library</th>"
         "<th>rows</th><th>errors</th><th class=\"l\">files</th></tr>";
    for (const Run& run : runs) {
      int errors = 0;
      for (const json& r : run.results) errors += !ok_row(r);
      std::string files;
      for (const std::string& f : run.files) files += (files.empty() ? "" : ", ") + fs::path(f).filename().string();
      h << "<tr><td class=\"l\"><code>" << html_escape(short_rev(run.revision)) << "</code></td><td class=\"l\">"
        << html_escape(run.date) << "</td><td class=\"l\">" << html_escape(run.library_version) << "</td><td>"
        << run.results.size() << "</td><td>" << errors << "</td><td class=\"l\">" << html_escape(files) << "</td></tr>";
    }
    h << "</table>";
    html_peers(h, dv);
    html_groups(h, dv);
    html_history(h, dv, thr);
    html_decode(h, dv);
    html_table(h, dv);
    h << "</section>\n";
  }
  h << "</body></html>\n";
  return h.str();
}

// libflash against the peers of the same run, one line a case (markdown).
static void markdown_peers(std::ostringstream& md, const DevicePeers& dp) {
  for (const auto& [p, a] : dp.files)
    if (a.run < 0) md << "Peers file `" << fs::path(p->file.path).filename().string() << "` not drawn: " << a.why_not << ".\n\n";
  if (dp.cases.empty()) return;
  std::vector<const PeerCase*> all;
  for (const PeerCase& c : dp.cases) all.push_back(&c);
  std::vector<std::string> others;
  for (const std::string& b : peer_backends(all))
    if (b != "libflash") others.push_back(b);
  md << "#### libflash against its peers (interleaved in one process; > 1: libflash faster)\n\n| case | libflash "
     << dp.cases.front().lib->value("algo", "") << " TFLOP/s (fa-bench) |";
  for (const std::string& b : others) md << " " << peer_display_name(b) << " TFLOP/s |";
  md << " libflash-py TFLOP/s |";
  for (const std::string& b : others) md << " libflash ÷ " << peer_display_name(b) << " |";
  md << " run · file |\n|---|---:|";
  for (size_t i = 0; i < 2 * others.size() + 1; ++i) md << "---:|";
  md << "---|\n";
  for (const PeerCase& c : dp.cases) {
    md << "| " << case_title(*c.lib) << " | "
       << (c.lib->at("tflops").is_number() ? format_number(c.lib->at("tflops").get<double>()) : "-") << " |";
    for (const std::string& b : others) {
      const auto ms = c.peer->ms.find(b);
      md << " " << (ms == c.peer->ms.end() ? "-" : format_number(c.flops / ms->second / 1e9)) << " |";
    }
    const auto lib_ms = c.peer->ms.find("libflash");
    md << " " << (lib_ms == c.peer->ms.end() ? "-" : format_number(c.flops / lib_ms->second / 1e9)) << " |";
    for (const std::string& b : others) {
      const double rt = interleaved_ratio(c, b);
      md << " " << (rt > 0 ? fmt_ratio(rt) : "-") << " |";
    }
    md << " `" << short_rev(c.revision) << "` " << fs::path(c.file->file.path).filename().string() << " |\n";
  }
  if (!dp.not_drawn.empty()) md << "\n" << dp.not_drawn.size() << " peer row(s) not matched to a fa-bench case of the same run.\n";
  md << "\n";
}

int render_markdown(const std::vector<ReportInput>& inputs, const json* baseline, double thr, std::string* out,
                    const std::vector<PeerInput>& peers) {
  std::ostringstream md;
  int regressions = 0;
  const auto devices = group_runs(inputs);
  if (devices.empty()) md << "No fa-bench result files.\n";
  for (size_t di = 0; di < devices.size(); ++di) {
    const auto& [dev, runs] = devices[di];
    const DevicePeers dp = match_peers(devices, di, peers);
    const Run& latest = runs.back();
    json base;
    if (baseline && device_of(*baseline) == dev) base = *baseline;
    else if (runs.size() >= 2) base = runs[runs.size() - 2].as_document();
    if (base.is_null()) {
      md << "### fa-bench: " << dev << " `" << short_rev(latest.revision) << "`\n\nNo baseline for this device yet.\n\n"
         << "| config | median ms | TFLOP/s | × naive |\n|---|---:|---:|---:|\n";
      for (const json& r : latest.results) {
        md << "| " << row_label(r) << " | "
           << (ok_row(r) ? format_number(r["time_ms_median"].get<double>()) : r["error"].value("status", "error")) << " | "
           << (r["tflops"].is_number() ? format_number(r["tflops"].get<double>()) : "-") << " | "
           << (r["speedup_over_naive"].is_number() ? format_number(r["speedup_over_naive"].get<double>(), 3) : "-") << " |\n";
      }
      md << "\n";
      markdown_peers(md, dp);
      continue;
    }
    const CompareResult c = compare_documents(base, latest.as_document(), thr);
    regressions += c.regressions;
    print_compare_markdown(c, md);
    md << "\n";
    markdown_peers(md, dp);
  }
  for (const PeerInput& p : peers) {
    const PeerAttachment a = attach_peers(p.file, p.named, devices);
    if (a.device < 0) md << "Peers file `" << fs::path(p.file.path).filename().string() << "` not drawn: " << a.why_not << ".\n";
  }
  *out = md.str();
  return regressions;
}

int cmd_report(int argc, const char* const* argv) {
  cxxopts::Options o("fa-bench report", "Result files (or directories of them) as an HTML dashboard or a markdown summary.");
  o.add_options()("html", "write the self-contained HTML page here", cxxopts::value<std::string>())
      ("markdown", "write the markdown summary (changes against the baseline, regressions first) (--markdown=FILE); no value or '-': stdout",
       cxxopts::value<std::string>()->implicit_value("-"))
      ("baseline", "compare against this result file (default: each device's previous run)", cxxopts::value<std::string>())
      ("max-regression", "percent slowdown marked as a regression", cxxopts::value<double>()->default_value("5"))
      ("title", "page title", cxxopts::value<std::string>()->default_value("libflash performance"))
      ("fail-on-regression", "exit 1 when the markdown summary finds a regression")
      ("peers", "a peers file (scripts/interleaved_peers.py --json) to draw with its device's latest run, unless it sits "
                "beside a run of that device or carries git_revision (repeatable; peers JSON found in the input "
                "directories is read too)", cxxopts::value<std::vector<std::string>>())
      ("inputs", "", cxxopts::value<std::vector<std::string>>())("h,help", "this help");
  o.parse_positional({"inputs"});
  o.positional_help("FILES_OR_DIRS...");
  const auto r = o.parse(argc, argv);
  if (r.count("help")) {
    std::cout << o.help();
    return 0;
  }
  if (!r.count("inputs")) throw std::invalid_argument("report needs result files or directories");
  if (!r.count("html") && !r.count("markdown")) throw std::invalid_argument("report needs --html FILE and/or --markdown");
  std::vector<std::string> skipped;
  std::vector<PeerInput> peers;
  const auto inputs = collect_inputs(r["inputs"].as<std::vector<std::string>>(), &skipped, &peers);
  for (const std::string& s : skipped) std::cerr << "fa-bench report: skipped " << s << "\n";
  if (r.count("peers"))
    for (const std::string& f : r["peers"].as<std::vector<std::string>>()) {
      const auto same = std::find_if(peers.begin(), peers.end(), [&](const PeerInput& p) {
        return fs::weakly_canonical(p.file.path) == fs::weakly_canonical(f);
      });
      if (same != peers.end()) same->named = true;  // also found in a directory
      else peers.push_back({load_peers(f), true});
    }
  const double thr = r["max-regression"].as<double>();
  int regressions = 0;
  if (r.count("html")) {
    const std::string path = r["html"].as<std::string>();
    std::ofstream out(path);
    if (!out) throw std::runtime_error("cannot write " + path);
    out << render_html(inputs, thr, r["title"].as<std::string>(), peers);
    std::cerr << "wrote " << path << " (" << inputs.size() << " result file(s), " << peers.size() << " peers file(s))\n";
  }
  if (r.count("markdown")) {
    json base;
    if (r.count("baseline")) base = load_document(r["baseline"].as<std::string>());
    std::string md;
    regressions = render_markdown(inputs, r.count("baseline") ? &base : nullptr, thr, &md, peers);
    const std::string path = r["markdown"].as<std::string>();
    if (path == "-") {
      std::cout << md;
    } else {
      std::ofstream out(path);
      if (!out) throw std::runtime_error("cannot write " + path);
      out << md;
    }
  }
  return r.count("fail-on-regression") && regressions > 0 ? 1 : 0;
}

}  // namespace fabench
