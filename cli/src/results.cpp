// cli/src/results.cpp -- see results.hpp.
#include "results.hpp"

#include <cstdio>
#include <fstream>
#include <iomanip>
#include <sstream>
#include <stdexcept>

#include "bench.hpp"
#include "svg.hpp"

namespace fabench {
namespace {

using nlohmann::json;

// Key, JSON type the key must have in every row ("n" number, "s" string, "b" bool, "i" integer),
// and whether null is allowed.
struct Field {
  const char* key;
  char type;
  bool nullable;
};
constexpr Field kRowFields[] = {
    {"name", 's', false},          {"device", 's', false},         {"algo", 's', false},
    {"algo_used", 's', true},      {"mode", 's', false},           {"dtype", 's', false},
    {"batch", 'i', false},         {"heads_q", 'i', false},        {"heads_kv", 'i', false},
    {"seqlen_q", 'i', false},      {"seqlen_k", 'i', false},       {"head_dim", 'i', false},
    {"mask", 's', false},          {"causal", 'b', false},         {"time_ms_median", 'n', true},
    {"time_ms_min", 'n', true},    {"time_ms_max", 'n', true},     {"flops", 'n', true},
    {"tflops", 'n', true},         {"peak_mem_bytes", 'n', true},  {"io_model_naive_bytes", 'n', true},
    {"io_model_flash_bytes", 'n', true}, {"max_abs_error", 'n', true}, {"max_rel_error", 'n', true},
    {"speedup_over_naive", 'n', true},
};
// The keys of --mode decode rows, checked on those rows only (files written before decode existed lack them).
constexpr Field kDecodeFields[] = {
    {"page_size", 'i', false}, {"num_splits", 'i', false}, {"num_splits_used", 'i', true},
    {"append", 'b', false},    {"cache_seqlens", 's', false}, {"keys_total", 'i', false},
    {"bytes", 'n', false},     {"bytes_per_s", 'n', true},  {"copy_bandwidth_fraction", 'n', true},
};

// The decode axes beyond the shared ones: page size, splits, append, cache lengths ("" for other rows).
std::string decode_suffix(const json& r, char sep) {
  if (r.value("mode", "") != "decode") return "";
  std::ostringstream os;
  const json& p = r.contains("page_size") ? r["page_size"] : json();
  const int64_t page = p.is_number_integer() ? p.get<int64_t>() : 0;
  os << sep << (page > 0 ? "page" + std::to_string(page) : std::string("contiguous"));
  const json& ns = r.contains("num_splits") ? r["num_splits"] : json();
  if (ns.is_number_integer() && ns.get<int64_t>() > 0) os << sep << "splits" << ns.get<int64_t>();
  if (r.contains("append") && r["append"].is_boolean() && r["append"].get<bool>()) os << sep << "append";
  if (r.value("cache_seqlens", json("full")) == "random") os << sep << "random";
  return os.str();
}

// A --varlen row's batch beyond the shared axes: how its lengths were made and their total ("" for dense rows).
std::string varlen_suffix(const json& r, char sep) {
  if (!r.contains("varlen") || !r["varlen"].is_object()) return "";
  const json& v = r["varlen"];
  std::ostringstream os;
  os << sep << "varlen:" << v.value("source", "") << ":" << v.value("total_tokens", int64_t{0});
  return os.str();
}

bool has_type(const json& v, char t) {
  switch (t) {
    case 's': return v.is_string();
    case 'b': return v.is_boolean();
    case 'i': return v.is_number_integer();
    default: return v.is_number();
  }
}

std::string fmt(const json& v, int precision) {
  if (!v.is_number()) return "-";
  std::ostringstream os;
  os << std::fixed << std::setprecision(precision) << v.get<double>();
  return os.str();
}

std::string fmt_sci(const json& v) {
  if (!v.is_number()) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", v.get<double>());
  return buf;
}

std::string csv_cell(const json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) {
    std::string s = v.get<std::string>(), out = "\"";
    for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
    return out + "\"";
  }
  if (v.is_object()) return csv_cell(json(v.dump()));
  return v.dump();
}

}  // namespace

std::string row_key(const json& r) {
  std::ostringstream os;
  os << r.value("mode", "fwd") << '|' << r.value("dtype", "") << '|' << r.value("algo", "") << '|'
     << r.value("batch", int64_t{0}) << '|' << r.value("heads_q", int64_t{0}) << '|' << r.value("heads_kv", int64_t{0})
     << '|' << r.value("seqlen_q", int64_t{0}) << '|' << r.value("seqlen_k", int64_t{0}) << '|'
     << r.value("head_dim", int64_t{0}) << '|' << r.value("mask", "none") << decode_suffix(r, '|') << varlen_suffix(r, '|');
  return os.str();
}

std::string block_map_change(const json& b, const json& r) {
  const json* mb = b.contains("block_sparse") && b["block_sparse"].is_object() ? &b["block_sparse"] : nullptr;
  const json* mr = r.contains("block_sparse") && r["block_sparse"].is_object() ? &r["block_sparse"] : nullptr;
  if (mb == nullptr && mr == nullptr) return "";
  if (mb == nullptr || mr == nullptr) return std::string("block map only in ") + (mb ? "base" : "new");
  std::string why;
  for (const char* k : {"block_density", "seed", "max_kv_blocks", "block_m", "block_n", "num_q_blocks"})
    if (mb->contains(k) && mr->contains(k) && (*mb)[k] != (*mr)[k])
      why += std::string(why.empty() ? "" : ", ") + k + " " + (*mb)[k].dump() + " -> " + (*mr)[k].dump();
  return why.empty() ? "" : "block map differs: " + why;
}

std::string row_label(const json& r) {
  std::ostringstream os;
  os << r.value("mode", "fwd") << ' ' << r.value("dtype", "") << ' ' << r.value("algo", "") << " b"
     << r.value("batch", int64_t{0}) << " h" << r.value("heads_q", int64_t{0});
  if (r.value("heads_kv", int64_t{0}) != r.value("heads_q", int64_t{0})) os << "/" << r.value("heads_kv", int64_t{0});
  os << " s" << r.value("seqlen_q", int64_t{0});
  if (r.value("seqlen_k", int64_t{0}) != r.value("seqlen_q", int64_t{0})) os << "x" << r.value("seqlen_k", int64_t{0});
  os << " d" << r.value("head_dim", int64_t{0}) << ' ' << r.value("mask", "none") << decode_suffix(r, ' ')
     << varlen_suffix(r, ' ');
  return os.str();
}

std::vector<std::string> validate_document(const json& doc) {
  std::vector<std::string> bad;
  if (!doc.is_object()) return {"the document is not a JSON object"};
  if (!doc.contains("schema_version") || !doc["schema_version"].is_number_integer()) {
    bad.push_back("no integer schema_version");
  } else if (doc["schema_version"].get<int>() > kSchemaVersion || doc["schema_version"].get<int>() < 1) {
    bad.push_back("schema_version " + doc["schema_version"].dump() + " is not one this fa-bench reads (1.." +
                  std::to_string(kSchemaVersion) + ")");
  }
  if (!doc.contains("meta") || !doc["meta"].is_object()) {
    bad.push_back("no meta object");
  } else {
    const json& m = doc["meta"];
    for (const char* k : {"library_version", "git_revision", "date"})
      if (!m.contains(k) || !m[k].is_string()) bad.push_back(std::string("meta.") + k + " is missing or not a string");
    if (!m.contains("device") || !m["device"].is_object() || !m["device"].contains("name"))
      bad.push_back("meta.device.name is missing");
  }
  if (!doc.contains("results") || !doc["results"].is_array()) {
    bad.push_back("no results array");
    return bad;
  }
  size_t i = 0;
  for (const json& r : doc["results"]) {
    const std::string where = "results[" + std::to_string(i++) + "]";
    if (!r.is_object()) {
      bad.push_back(where + " is not an object");
      continue;
    }
    for (const Field& f : kRowFields) {
      if (!r.contains(f.key)) {
        bad.push_back(where + "." + f.key + " is missing");
      } else if (r[f.key].is_null() ? !f.nullable : !has_type(r[f.key], f.type)) {
        bad.push_back(where + "." + f.key + " has the wrong type (" + r[f.key].dump() + ")");
      }
    }
    if (r.value("mode", "") == "decode")
      for (const Field& f : kDecodeFields) {
        if (!r.contains(f.key)) {
          bad.push_back(where + "." + f.key + " is missing (a decode row)");
        } else if (r[f.key].is_null() ? !f.nullable : !has_type(r[f.key], f.type)) {
          bad.push_back(where + "." + f.key + " has the wrong type (" + r[f.key].dump() + ")");
        }
      }
    if (r.contains("varlen") && !r["varlen"].is_null()) {  // (files written before --varlen lack the key)
      const json& v = r["varlen"];
      if (!v.is_object() || !v.contains("source") || !v["source"].is_string() || !v.contains("sequences") ||
          !v["sequences"].is_number_integer() || !v.contains("total_tokens") || !v["total_tokens"].is_number_integer() ||
          !v.contains("max_seqlen") || !v["max_seqlen"].is_number_integer())
        bad.push_back(where + ".varlen must be null or {source, sequences, total_tokens, max_seqlen, ...}");
    }
    if (!r.contains("error")) {
      bad.push_back(where + ".error is missing (null when the row succeeded)");
    } else if (!r["error"].is_null()) {
      const json& e = r["error"];
      if (!e.is_object() || !e.contains("status") || !e.contains("message"))
        bad.push_back(where + ".error must be {status, code, message}");
    } else if (!r["time_ms_median"].is_number()) {
      bad.push_back(where + " has neither an error nor time_ms_median");
    }
  }
  return bad;
}

json load_document(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  json doc;
  try {
    in >> doc;
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not JSON: " + e.what());
  }
  const auto bad = validate_document(doc);
  if (!bad.empty()) {
    std::string msg = path + ": not an fa-bench result file:";
    for (size_t i = 0; i < bad.size() && i < 5; ++i) msg += "\n  " + bad[i];
    if (bad.size() > 5) msg += "\n  (" + std::to_string(bad.size() - 5) + " more)";
    throw std::runtime_error(msg);
  }
  return doc;
}

void write_json(const json& doc, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << doc.dump(2) << '\n';
  if (!out) throw std::runtime_error("error writing " + path);
}

void write_csv(const json& doc, std::ostream& out) {
  const json& rows = doc["results"];
  if (rows.empty()) return;
  std::vector<std::string> cols;
  for (auto it = rows[0].begin(); it != rows[0].end(); ++it) cols.push_back(it.key());
  cols.push_back("error_status");
  cols.push_back("error_message");
  for (size_t i = 0; i < cols.size(); ++i) out << (i ? "," : "") << cols[i];
  out << '\n';
  for (const json& r : rows) {
    for (size_t i = 0; i < cols.size(); ++i) {
      const std::string& c = cols[i];
      json v;
      if (c == "error_status") v = r["error"].is_object() ? r["error"]["status"] : json();
      else if (c == "error_message") v = r["error"].is_object() ? r["error"]["message"] : json();
      else if (c == "error") v = json();
      else v = r.contains(c) ? r[c] : json();
      out << (i ? "," : "") << csv_cell(v);
    }
    out << '\n';
  }
}

namespace {

void print_aligned(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& left, std::ostream& out) {
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size() && i < width.size(); ++i) width[i] = std::max(width[i], r[i].size());
  for (size_t k = 0; k < rows.size(); ++k) {
    for (size_t i = 0; i < rows[k].size() && i < width.size(); ++i)
      out << (i ? "  " : "") << (left[i] ? std::left : std::right) << std::setw(int(width[i])) << rows[k][i];
    out << std::right << '\n';
    if (k == 0) {
      size_t total = 0;
      for (size_t w : width) total += w + 2;
      out << std::string(total - 2, '-') << '\n';
    }
  }
}

std::string heads_of(const json& r) {
  std::string heads = std::to_string(r.value("heads_q", int64_t{0}));
  if (r.value("heads_kv", int64_t{0}) != r.value("heads_q", int64_t{0})) heads += "/" + std::to_string(r.value("heads_kv", int64_t{0}));
  return heads;
}

std::string algo_of(const json& r) {
  std::string algo = r.value("algo", "");
  if (r["algo_used"].is_string() && r["algo_used"] != r["algo"]) algo += "->" + r["algo_used"].get<std::string>();
  return algo;
}

std::string error_cell(const json& r) {
  std::string err = fmt_sci(r["max_rel_error"]);
  if (r["check_passed"].is_boolean() && !r["check_passed"].get<bool>()) err += " FAIL";
  return err;
}

}  // namespace

void print_table(const json& doc, std::ostream& out) {
  const json& m = doc["meta"];
  out << "fa-bench: libflash " << m.value("library_version", "?") << " (" << m.value("git_revision", "") << ") on "
      << m["device"].value("string", "?") << " \"" << m["device"].value("name", "?") << "\"\n";
  std::vector<std::string> errors;
  // fwd / bwd / fwd_bwd
  const char* head[] = {"mode", "dtype", "algo", "batch", "heads", "sq", "sk", "d", "mask",
                        "median ms", "min ms", "TFLOP/s", "peak MB", "vs naive", "max err"};
  std::vector<std::vector<std::string>> rows;
  rows.emplace_back(std::begin(head), std::end(head));
  // decode
  const char* dhead[] = {"dtype", "algo", "batch", "heads", "new", "keys", "d", "mask", "page", "splits",
                         "median ms", "GB/s", "of copy", "TFLOP/s", "max err"};
  std::vector<std::vector<std::string>> drows;
  drows.emplace_back(std::begin(dhead), std::end(dhead));
  for (const json& r : doc["results"]) {
    const bool decode = r.value("mode", "") == "decode";
    std::vector<std::string> row;
    if (decode) {
      const json& p = r.contains("page_size") ? r["page_size"] : json();
      std::string splits = r.contains("num_splits") && r["num_splits"].is_number_integer() && r["num_splits"].get<int64_t>() > 0
                               ? std::to_string(r["num_splits"].get<int64_t>())
                               : "auto";
      if (r.contains("num_splits_used") && r["num_splits_used"].is_number_integer())
        splits += "->" + std::to_string(r["num_splits_used"].get<int64_t>());
      std::string keys = std::to_string(r.value("seqlen_k", int64_t{0}));
      if (r.value("cache_seqlens", json("full")) == "random") keys = "<=" + keys;
      row = {r.value("dtype", ""), algo_of(r), std::to_string(r.value("batch", int64_t{0})), heads_of(r),
             std::to_string(r.value("seqlen_q", int64_t{0})) + (r.value("append", json(false)) == true ? "+app" : ""),
             keys, std::to_string(r.value("head_dim", int64_t{0})), r.value("mask", ""),
             p.is_number_integer() && p.get<int64_t>() > 0 ? std::to_string(p.get<int64_t>()) : "contig", splits};
    } else {
      row = {r.value("mode", ""), r.value("dtype", ""), algo_of(r),
             std::to_string(r.value("batch", int64_t{0})), heads_of(r),
             std::to_string(r.value("seqlen_q", int64_t{0})),
             std::to_string(r.value("seqlen_k", int64_t{0})),
             std::to_string(r.value("head_dim", int64_t{0})), r.value("mask", "") + varlen_suffix(r, ' ')};
    }
    if (!r["error"].is_null()) {
      row.push_back("ERROR " + r["error"].value("status", ""));
      errors.push_back(row_label(r) + ": " + r["error"].value("message", ""));
      for (int i = 0; i < (decode ? 4 : 5); ++i) row.push_back("");
    } else if (decode) {
      row.push_back(fmt(r["time_ms_median"], 4));
      row.push_back(r.contains("bytes_per_s") && r["bytes_per_s"].is_number() ? fmt(json(r["bytes_per_s"].get<double>() / 1e9), 1) : "-");
      row.push_back(r.contains("copy_bandwidth_fraction") && r["copy_bandwidth_fraction"].is_number()
                        ? fmt(json(100.0 * r["copy_bandwidth_fraction"].get<double>()), 1) + "%"
                        : "-");
      row.push_back(r["tflops"].is_number() ? format_number(r["tflops"].get<double>(), 4) : "-");
      row.push_back(error_cell(r));
    } else {
      row.push_back(fmt(r["time_ms_median"], 3));
      row.push_back(fmt(r["time_ms_min"], 3));
      row.push_back(r["tflops"].is_number() ? format_number(r["tflops"].get<double>(), 4) : "-");
      row.push_back(r["peak_mem_bytes"].is_number() ? fmt(json(r["peak_mem_bytes"].get<double>() / 1e6), 1) : "-");
      row.push_back(r["speedup_over_naive"].is_number() ? fmt(r["speedup_over_naive"], 2) + "x" : "-");
      row.push_back(error_cell(r));
    }
    (decode ? drows : rows).push_back(row);
  }
  if (rows.size() > 1) {
    std::vector<bool> left(rows[0].size(), false);
    left[0] = left[1] = left[2] = left[8] = true;
    print_aligned(rows, left, out);
  }
  if (drows.size() > 1) {
    if (rows.size() > 1) out << '\n';
    out << "decode (flash_fwd_kvcache): new = new tokens a sequence, keys = keys it attends to, page = cache page size\n";
    std::vector<bool> left(drows[0].size(), false);
    left[0] = left[1] = left[7] = true;
    print_aligned(drows, left, out);
  }
  for (const std::string& e : errors) out << "  error: " << e << '\n';
  out << "max err: max|o - ref| / max|ref| against fp64 (--check). TFLOP/s counts the FLOPs of the mask applied.\n";
  if (drows.size() > 1) {
    const json cb = m.contains("copy_bandwidth") ? m["copy_bandwidth"] : json();
    out << "GB/s: the decode call's minimum bytes (K and V of the keys seen, q, o, the append) / median time; of copy: "
           "that over the device's copy bandwidth";
    if (cb.is_object() && cb["bytes_per_s"].is_number())
      out << " (" << fmt(json(cb["bytes_per_s"].get<double>() / 1e9), 1) << " GB/s measured, "
          << (m["device"].value("type", "") == "cuda" ? "device-to-device cudaMemcpy" : "threaded host memcpy") << ")";
    out << ".\n";
  }
}

}  // namespace fabench
