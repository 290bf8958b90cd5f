// cli/src/compare.cpp -- see compare.hpp.
#include "compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <map>

#include "results.hpp"

namespace fabench {

using nlohmann::json;

const char* kind_name(CompareEntry::Kind k) {
  switch (k) {
    case CompareEntry::Kind::kRegression: return "REGRESSION";
    case CompareEntry::Kind::kImproved: return "improved";
    case CompareEntry::Kind::kUnchanged: return "ok";
    case CompareEntry::Kind::kAdded: return "added";
    case CompareEntry::Kind::kRemoved: return "removed";
    case CompareEntry::Kind::kBothFailed: return "failed in both";
    case CompareEntry::Kind::kFixed: return "fixed";
    case CompareEntry::Kind::kMapChanged: return "map changed";
  }
  return "?";
}

namespace {
bool ok_row(const json& r) { return r.contains("error") && r["error"].is_null() && r["time_ms_median"].is_number(); }
std::string error_text(const json& r) {
  if (!r.contains("error") || !r["error"].is_object()) return "";
  return r["error"].value("status", "") + ": " + r["error"].value("message", "");
}
std::string device_of(const json& doc) {
  return doc["meta"]["device"].value("name", "?");
}
int rank(CompareEntry::Kind k) {
  switch (k) {
    case CompareEntry::Kind::kRegression: return 0;
    case CompareEntry::Kind::kImproved: return 1;
    case CompareEntry::Kind::kFixed: return 2;
    case CompareEntry::Kind::kUnchanged: return 3;
    case CompareEntry::Kind::kAdded: return 4;
    case CompareEntry::Kind::kRemoved: return 5;
    case CompareEntry::Kind::kMapChanged: return 6;
    case CompareEntry::Kind::kBothFailed: return 7;
  }
  return 8;
}
std::string fixed(double v, int p) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", p, v);
  return buf;
}
}  // namespace

CompareResult compare_documents(const json& base, const json& fresh, double threshold) {
  CompareResult out;
  out.base_device = device_of(base);
  out.new_device = device_of(fresh);
  out.base_revision = base["meta"].value("git_revision", "");
  out.new_revision = fresh["meta"].value("git_revision", "");
  std::map<std::string, const json*> base_rows;
  for (const json& r : base["results"]) base_rows[row_key(r)] = &r;
  std::map<std::string, bool> seen;
  for (const json& r : fresh["results"]) {
    CompareEntry e{};
    e.key = row_key(r);
    e.label = row_label(r);
    seen[e.key] = true;
    const auto it = base_rows.find(e.key);
    if (it == base_rows.end()) {
      e.kind = CompareEntry::Kind::kAdded;
      if (ok_row(r)) e.new_ms = r["time_ms_median"].get<double>();
      else e.note = error_text(r);
      out.entries.push_back(e);
      continue;
    }
    const json& b = *it->second;
    if (ok_row(b)) e.base_ms = b["time_ms_median"].get<double>();
    if (ok_row(r)) e.new_ms = r["time_ms_median"].get<double>();
    const std::string changed = block_map_change(b, r);
    if (ok_row(b) && ok_row(r)) {
      e.ratio = e.base_ms > 0 ? e.new_ms / e.base_ms : 1.0;
      e.change_pct = (e.ratio - 1.0) * 100.0;
      e.kind = e.change_pct > threshold    ? CompareEntry::Kind::kRegression
               : e.change_pct < -threshold ? CompareEntry::Kind::kImproved
                                           : CompareEntry::Kind::kUnchanged;
      if (!changed.empty()) e.kind = CompareEntry::Kind::kMapChanged, e.note = changed;
    } else if (ok_row(b)) {
      e.kind = CompareEntry::Kind::kRegression;
      e.note = "now fails: " + error_text(r);
    } else if (ok_row(r)) {
      e.kind = CompareEntry::Kind::kFixed;
      e.note = "failed before: " + error_text(b);
    } else {
      e.kind = CompareEntry::Kind::kBothFailed;
      e.note = error_text(r);
    }
    out.entries.push_back(e);
  }
  for (const auto& [key, r] : base_rows) {
    if (seen.count(key)) continue;
    CompareEntry e{};
    e.kind = CompareEntry::Kind::kRemoved;
    e.key = key;
    e.label = row_label(*r);
    if (ok_row(*r)) e.base_ms = (*r)["time_ms_median"].get<double>();
    out.entries.push_back(e);
  }
  std::stable_sort(out.entries.begin(), out.entries.end(), [](const CompareEntry& a, const CompareEntry& b) {
    if (rank(a.kind) != rank(b.kind)) return rank(a.kind) < rank(b.kind);
    return std::fabs(a.change_pct) > std::fabs(b.change_pct);
  });
  for (const CompareEntry& e : out.entries) {
    if (e.kind != CompareEntry::Kind::kRegression) continue;
    ++out.regressions;
    out.max_regression_pct = std::max(out.max_regression_pct, e.change_pct);
  }
  return out;
}

void print_compare(const CompareResult& r, std::ostream& out) {
  out << "base: " << r.base_device << " @ " << r.base_revision << "\nnew:  " << r.new_device << " @ " << r.new_revision << "\n";
  if (r.base_device != r.new_device) out << "warning: the two files come from different devices\n";
  size_t w = 10;
  for (const CompareEntry& e : r.entries) w = std::max(w, e.label.size());
  out << std::left << std::setw(int(w)) << "config" << std::right << std::setw(12) << "base ms" << std::setw(12) << "new ms"
      << std::setw(9) << "ratio" << std::setw(10) << "change" << "  verdict\n";
  out << std::string(w + 43 + 12, '-') << '\n';
  for (const CompareEntry& e : r.entries) {
    out << std::left << std::setw(int(w)) << e.label << std::right << std::setw(12)
        << (e.base_ms > 0 ? fixed(e.base_ms, 4) : "-") << std::setw(12) << (e.new_ms > 0 ? fixed(e.new_ms, 4) : "-")
        << std::setw(9) << (e.ratio > 0 ? fixed(e.ratio, 3) : "-") << std::setw(10)
        << (e.ratio > 0 ? (e.change_pct >= 0 ? "+" : "") + fixed(e.change_pct, 1) + "%" : "-") << "  " << kind_name(e.kind);
    if (!e.note.empty()) out << " (" << e.note << ")";
    out << '\n';
  }
  out << r.regressions << " regression(s)";
  if (r.regressions) out << ", worst +" << fixed(r.max_regression_pct, 1) << "%";
  out << '\n';
}

void print_compare_markdown(const CompareResult& r, std::ostream& out) {
  out << "### fa-bench: " << r.new_device << " `" << r.new_revision << "` vs `" << r.base_revision << "`\n\n";
  if (r.regressions) out << "**" << r.regressions << " regression(s)**, worst +" << fixed(r.max_regression_pct, 1) << "%\n\n";
  else out << "No regressions.\n\n";
  out << "| verdict | config | base ms | new ms | change |\n|---|---|---:|---:|---:|\n";
  for (const CompareEntry& e : r.entries) {
    std::string verdict = kind_name(e.kind);
    if (e.kind == CompareEntry::Kind::kRegression) verdict = ":red_circle: **regression**";
    if (e.kind == CompareEntry::Kind::kImproved) verdict = ":green_circle: improved";
    std::string note = e.note;
    for (char& c : note)
      if (c == '|' || c == '\n') c = ' ';
    out << "| " << verdict << " | " << e.label << (note.empty() ? "" : " — " + note) << " | "
        << (e.base_ms > 0 ? fixed(e.base_ms, 4) : "-") << " | " << (e.new_ms > 0 ? fixed(e.new_ms, 4) : "-") << " | "
        << (e.ratio > 0 ? (e.change_pct >= 0 ? "+" : "") + fixed(e.change_pct, 1) + "%" : "-") << " |\n";
  }
}

}  // namespace fabench
