// cli/src/peers.cpp -- see peers.hpp.
#include "peers.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "report.hpp"

namespace fabench {

using nlohmann::json;
namespace fs = std::filesystem;

json PeerRow::as_case() const {
  return {{"mode", mode},         {"dtype", dtype},       {"batch", batch},       {"heads_q", heads_q},
          {"heads_kv", heads_kv}, {"seqlen_q", seqlen_q}, {"seqlen_k", seqlen_k}, {"head_dim", head_dim},
          {"mask", mask}};
}

bool looks_like_peers(const json& doc) {
  return doc.is_object() && !doc.contains("schema_version") && doc.contains("device") && doc["device"].is_string() &&
         doc.contains("rows") && doc["rows"].is_array();
}

namespace {

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw std::runtime_error(path + ": not a peers file (scripts/interleaved_peers.py --json): " + what);
}

int64_t get_int(const json& r, std::initializer_list<const char*> keys, int64_t dflt, const std::string& path, size_t i) {
  for (const char* k : keys) {
    if (!r.contains(k)) continue;
    const json& v = r[k];
    if (!v.is_number_integer() || v.get<int64_t>() <= 0)
      bad(path, "rows[" + std::to_string(i) + "]." + k + " is not a positive integer");
    return v.get<int64_t>();
  }
  if (dflt > 0) return dflt;
  bad(path, "rows[" + std::to_string(i) + "] has no " + *keys.begin());
}

std::string get_str(const json& o, const char* key, const std::string& dflt) {
  return o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : dflt;
}

}  // namespace

PeerFile parse_peers(const json& doc, const std::string& path) {
  if (!looks_like_peers(doc)) bad(path, "expected an object with \"device\" (string) and \"rows\" (array)");
  PeerFile p;
  p.path = path;
  p.device = doc["device"].get<std::string>();
  p.torch = get_str(doc, "torch", "");
  p.date = get_str(doc, "date", "");
  p.git_revision = get_str(doc, "git_revision", "");
  p.algorithm = get_str(doc, "algorithm", "sm90");
  const std::string file_mode = get_str(doc, "mode", "fwd"), file_dtype = get_str(doc, "dtype", "bf16");
  const json& rows = doc["rows"];
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& r = rows[i];
    if (!r.is_object()) bad(path, "rows[" + std::to_string(i) + "] is not an object");
    PeerRow row;
    row.head_dim = get_int(r, {"d", "head_dim"}, 0, path, i);
    row.seqlen_q = get_int(r, {"n", "seqlen_q"}, 0, path, i);
    row.batch = get_int(r, {"b", "batch"}, 0, path, i);
    row.heads_q = get_int(r, {"h", "heads_q"}, 0, path, i);
    row.heads_kv = get_int(r, {"h_kv", "heads_kv"}, row.heads_q, path, i);
    row.seqlen_k = get_int(r, {"n_k", "seqlen_k"}, row.seqlen_q, path, i);
    row.mode = get_str(r, "mode", file_mode);
    row.dtype = get_str(r, "dtype", file_dtype);
    if (r.contains("mask") && r["mask"].is_string()) {
      row.mask = r["mask"].get<std::string>();
    } else if (r.contains("causal") && r["causal"].is_boolean()) {
      row.mask = r["causal"].get<bool>() ? "causal" : "none";
    } else {
      bad(path, "rows[" + std::to_string(i) + "] has neither \"mask\" nor \"causal\"");
    }
    if (row.mode != "fwd" && row.mode != "bwd" && row.mode != "fwd_bwd")
      bad(path, "rows[" + std::to_string(i) + "].mode is \"" + row.mode + "\" (fwd, bwd or fwd_bwd)");
    if (!r.contains("ms") || !r["ms"].is_object() || r["ms"].empty())
      bad(path, "rows[" + std::to_string(i) + "] has no \"ms\" object of median times");
    for (const auto& [name, v] : r["ms"].items()) {
      if (v.is_null()) continue;  // a backend that could not run this case
      if (!v.is_number() || v.get<double>() <= 0)
        bad(path, "rows[" + std::to_string(i) + "].ms." + name + " is not a positive number");
      row.ms[name] = v.get<double>();
    }
    if (r.contains("max_rel_err") && r["max_rel_err"].is_number()) row.max_rel_err = r["max_rel_err"].get<double>();
    if (r.contains("reps") && r["reps"].is_number_integer()) row.reps = r["reps"].get<int64_t>();
    row.icache = get_str(r, "icache", "");
    p.rows.push_back(std::move(row));
  }
  return p;
}

PeerFile load_peers(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  json doc;
  try {
    doc = json::parse(in);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not JSON: " + e.what());
  }
  return parse_peers(doc, path);
}

std::string case_key(const json& r) {
  std::ostringstream os;
  os << r.value("mode", "fwd") << '|' << r.value("dtype", "") << '|' << r.value("batch", int64_t{0}) << '|'
     << r.value("heads_q", int64_t{0}) << '|' << r.value("heads_kv", int64_t{0}) << '|' << r.value("seqlen_q", int64_t{0})
     << '|' << r.value("seqlen_k", int64_t{0}) << '|' << r.value("head_dim", int64_t{0}) << '|' << r.value("mask", "none");
  return os.str();
}

std::string peer_display_name(const std::string& backend) {
  if (backend == "cudnn") return "cuDNN";
  if (backend == "flash") return "FA2";
  if (backend == "libflash") return "libflash-py";
  return "SDPA:" + backend;
}

double peer_case_flops(const PeerRow& r) {
  double pairs;
  const double sq = double(r.seqlen_q), sk = double(r.seqlen_k);
  if (r.mask == "none") {
    pairs = sq * sk;
  } else if (r.mask == "causal") {  // bottom-right: query i sees keys j <= i + sk - sq
    pairs = 0;
    for (int64_t i = 0; i < r.seqlen_q; ++i)
      pairs += double(std::clamp<int64_t>(i + r.seqlen_k - r.seqlen_q + 1, 0, r.seqlen_k));
  } else {
    return -1;
  }
  const double mult = r.mode == "bwd" ? 2.5 : r.mode == "fwd_bwd" ? 3.5 : 1.0;
  return 4.0 * double(r.head_dim) * pairs * double(r.batch) * double(r.heads_q) * mult;
}

PeerAttachment attach_peers(const PeerFile& p, bool named_explicitly,
                            const std::vector<std::pair<std::string, std::vector<Run>>>& devices) {
  PeerAttachment a;
  for (size_t d = 0; d < devices.size(); ++d)
    if (devices[d].first == p.device) a.device = int(d);
  if (a.device < 0) {
    a.why_not = "measured on " + p.device + ", and no fa-bench result file of that device was read";
    return a;
  }
  const std::vector<Run>& runs = devices[size_t(a.device)].second;
  if (!p.git_revision.empty()) {
    for (size_t i = 0; i < runs.size(); ++i)
      if (!runs[i].revision.empty() &&
          (runs[i].revision.rfind(p.git_revision, 0) == 0 || p.git_revision.rfind(runs[i].revision, 0) == 0))
        a.run = int(i), a.how = "git revision " + p.git_revision.substr(0, 12);
    if (a.run < 0) a.why_not = "measured at revision " + p.git_revision + ", and no fa-bench run of " + p.device + " has it";
    return a;
  }
  const fs::path dir = fs::weakly_canonical(fs::path(p.path)).parent_path();
  for (size_t i = 0; i < runs.size(); ++i)  // runs are oldest first: the latest run in the directory wins
    for (const std::string& f : runs[i].files)
      if (fs::weakly_canonical(fs::path(f)).parent_path() == dir) {
        a.run = int(i);
        a.how = "in the directory of " + fs::path(f).filename().string();
        break;
      }
  if (a.run >= 0) return a;
  if (named_explicitly) {
    a.run = int(runs.size()) - 1;
    a.how = "named on the command line; assigned to the device's latest run";
    return a;
  }
  a.why_not = "not in the directory of any fa-bench run of " + p.device +
              " (name it with --peers to compare it with that device's latest run)";
  return a;
}

}  // namespace fabench
