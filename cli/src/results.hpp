// cli/src/results.hpp -- result documents: writing (JSON, CSV, a table), reading back and checking the
// schema (bench_results/README.md), and the axes that identify a row across runs.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fabench {

// The axes that identify a measurement across runs (device aside): mode, dtype, algo, batch, heads_q,
// heads_kv, seqlen_q, seqlen_k, head_dim, mask.
std::string row_key(const nlohmann::json& row);
// A short human label of the same axes.
std::string row_label(const nlohmann::json& row);
// Why two rows with one key ran different block maps ("block map differs: block_density 0.09375 -> 0.0996..., ..."),
// or "" when they ran the same one or neither has one. Their times then differ because their work does (fa-bench's
// random maps before and after session 66, a new --seed): compare and report show them, but do not judge them.
std::string block_map_change(const nlohmann::json& base, const nlohmann::json& fresh);

// Empty when `doc` is a valid result document of a schema version this fa-bench reads; otherwise the
// problems, one a line.
std::vector<std::string> validate_document(const nlohmann::json& doc);
// Reads and validates a file; throws std::runtime_error naming the file and the problem.
nlohmann::json load_document(const std::string& path);
void write_json(const nlohmann::json& doc, const std::string& path);
void write_csv(const nlohmann::json& doc, std::ostream& out);
void print_table(const nlohmann::json& doc, std::ostream& out);

}  // namespace fabench
