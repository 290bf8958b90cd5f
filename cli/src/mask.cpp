// cli/src/mask.cpp -- mask specs, block patterns and exact visible-pair counts (see mask.hpp).
#include "mask.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace fabench {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  const auto b = s.find_last_not_of(" \t");
  return s.substr(a, b - a + 1);
}

int32_t parse_int(const std::string& s, const std::string& term) {
  try {
    size_t used = 0;
    const long v = std::stol(s, &used);
    if (used != s.size() || v < -1 || v > INT32_MAX) throw std::invalid_argument("");
    return static_cast<int32_t>(v);
  } catch (const std::exception&) {
    throw std::invalid_argument("mask term '" + term + "': '" + s + "' is not an integer >= -1");
  }
}

std::string format_density(double d) {
  std::ostringstream os;
  os << d;
  return os.str();
}

}  // namespace

std::string MaskSpec::label() const {
  std::vector<std::string> terms;
  if (causal) terms.push_back(alignment == FLASH_ALIGN_TOP_LEFT ? "causal-tl" : "causal");
  if (window_left >= 0 || window_right >= 0) {
    const bool tl = alignment == FLASH_ALIGN_TOP_LEFT;
    terms.push_back(std::string(tl ? "window-tl:" : "window:") + std::to_string(window_left) + "," +
                    std::to_string(window_right));
  }
  if (block == Block::kRandom)
    terms.push_back("block-sparse:" + format_density(density) + ":" + std::to_string(block_size));
  if (block == Block::kFile) {
    const auto slash = file.find_last_of('/');
    terms.push_back("block-sparse-file:" + (slash == std::string::npos ? file : file.substr(slash + 1)));
  }
  if (terms.empty()) return "none";
  std::string s = terms[0];
  for (size_t i = 1; i < terms.size(); ++i) s += "+" + terms[i];
  return s;
}

MaskSpec parse_mask_spec(const std::string& text) {
  MaskSpec m;
  bool alignment_set = false;
  auto set_alignment = [&](int32_t a, const std::string& term) {
    if (alignment_set && m.alignment != a)
      throw std::invalid_argument("mask '" + text + "': '" + term + "' asks for a different diagonal alignment than an earlier term");
    m.alignment = a;
    alignment_set = true;
  };
  const std::string body = trim(text);
  if (body.empty()) throw std::invalid_argument("empty mask spec");
  for (std::string term : split(body, '+')) {
    term = trim(term);
    if (term == "none" || term == "dense") continue;
    if (term == "causal" || term == "causal-br") {
      m.causal = true;
      set_alignment(FLASH_ALIGN_BOTTOM_RIGHT, term);
    } else if (term == "causal-tl") {
      m.causal = true;
      set_alignment(FLASH_ALIGN_TOP_LEFT, term);
    } else if (term.rfind("window:", 0) == 0 || term.rfind("window-br:", 0) == 0 || term.rfind("window-tl:", 0) == 0) {
      const bool tl = term.rfind("window-tl:", 0) == 0;
      const std::string args = term.substr(term.find(':') + 1);
      const auto lr = split(args, ',');
      if (lr.size() != 2) throw std::invalid_argument("mask term '" + term + "': expected window:LEFT,RIGHT (-1 = unbounded)");
      m.window_left = parse_int(trim(lr[0]), term);
      m.window_right = parse_int(trim(lr[1]), term);
      set_alignment(tl ? FLASH_ALIGN_TOP_LEFT : FLASH_ALIGN_BOTTOM_RIGHT, term);
    } else if (term.rfind("block-sparse-file:", 0) == 0) {
      if (m.block != MaskSpec::Block::kNone) throw std::invalid_argument("mask '" + text + "': more than one block-sparse term");
      m.block = MaskSpec::Block::kFile;
      m.file = term.substr(std::string("block-sparse-file:").size());
      if (m.file.empty()) throw std::invalid_argument("mask term '" + term + "': no file name");
    } else if (term.rfind("block-sparse:", 0) == 0) {
      if (m.block != MaskSpec::Block::kNone) throw std::invalid_argument("mask '" + text + "': more than one block-sparse term");
      const auto parts = split(term.substr(std::string("block-sparse:").size()), ':');
      if (parts.empty() || parts.size() > 2) throw std::invalid_argument("mask term '" + term + "': expected block-sparse:DENSITY[:BLOCK]");
      try {
        size_t used = 0;
        m.density = std::stod(parts[0], &used);
        if (used != parts[0].size()) throw std::invalid_argument("");
      } catch (const std::exception&) {
        throw std::invalid_argument("mask term '" + term + "': density '" + parts[0] + "' is not a number");
      }
      if (!(m.density >= 0.0 && m.density <= 1.0))
        throw std::invalid_argument("mask term '" + term + "': density must be in [0, 1]");
      if (parts.size() == 2) m.block_size = parse_int(parts[1], term);
      if (m.block_size != 64 && m.block_size != 128)
        throw std::invalid_argument("mask term '" + term + "': block size must be 64 or 128 (flash.h)");
      m.block = MaskSpec::Block::kRandom;
    } else {
      throw std::invalid_argument("unknown mask term '" + term +
                                  "' (expected none, causal, causal-br, causal-tl, window:L,R, window-tl:L,R, "
                                  "block-sparse:DENSITY[:BLOCK], block-sparse-file:PATH, joined by '+')");
    }
  }
  return m;
}

std::vector<MaskSpec> parse_mask_list(const std::string& text) {
  std::vector<MaskSpec> out;
  for (const std::string& alt : split(text, ';'))
    if (!trim(alt).empty()) out.push_back(parse_mask_spec(alt));
  if (out.empty()) throw std::invalid_argument("empty --mask");
  return out;
}

int64_t BlockPattern::listed_blocks() const {
  int64_t n = 0;
  for (int32_t c : kv_num_blocks) n += c;
  return n;
}

double BlockPattern::block_density(int64_t seqlen_k) const {
  const int64_t kv_blocks = (seqlen_k + block_n - 1) / block_n;
  const double all = double(num_q_blocks) * double(kv_blocks);
  return all > 0 ? double(listed_blocks()) / all : 0.0;
}

BlockPattern make_random_block_pattern(int64_t seqlen_q, int64_t seqlen_k, int32_t block, double density, uint64_t seed) {
  if (block != 64 && block != 128) throw std::invalid_argument("block size must be 64 or 128");
  if (!(density >= 0.0 && density <= 1.0)) throw std::invalid_argument("density must be in [0, 1]");
  BlockPattern p;
  p.block_m = p.block_n = block;
  p.num_q_blocks = static_cast<int32_t>((seqlen_q + block - 1) / block);
  const int32_t kv_blocks = static_cast<int32_t>((seqlen_k + block - 1) / block);
  // The pattern's density is the one asked for, to the nearest block of the whole map: round(density * cells) blocks,
  // base = total / num_q_blocks to every query block and one more to `extra` of them. (Rounding each row on its own, as
  // fa-bench did before session 66, made "block-sparse:0.1" at 4k a map of 3 / 32 = .094.) Every query block keeps at
  // least one key block when density > 0.
  const int64_t cells = int64_t{p.num_q_blocks} * kv_blocks;
  int64_t total = std::llround(density * double(cells));
  if (density > 0.0) total = std::max<int64_t>(total, p.num_q_blocks);
  total = std::min(total, cells);
  const int32_t base = p.num_q_blocks > 0 ? static_cast<int32_t>(total / p.num_q_blocks) : 0;
  const int32_t extra = p.num_q_blocks > 0 ? static_cast<int32_t>(total % p.num_q_blocks) : 0;
  p.max_kv_blocks = base + (extra > 0 ? 1 : 0);
  p.kv_num_blocks.assign(p.num_q_blocks, base);
  p.kv_indices.assign(size_t(p.num_q_blocks) * size_t(p.max_kv_blocks), 0);
  // The seed is mixed with the shape so two shapes of one sweep do not share a prefix of choices.
  // mt19937_64's output is fixed by the standard; the reduction below (modulo) is ours, so the pattern is
  // the same with every standard library.
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull ^ (uint64_t(seqlen_q) << 32) ^ uint64_t(seqlen_k) ^ uint64_t(block) << 56);
  // Which query blocks get the extra block: a random subset, drawn only where there is one, so maps with a whole
  // number of blocks a row are the ones earlier fa-bench versions drew.
  if (extra > 0) {
    std::vector<int32_t> rows(p.num_q_blocks);
    for (int32_t qb = 0; qb < p.num_q_blocks; ++qb) rows[qb] = qb;
    for (int32_t t = 0; t < extra; ++t) {  // partial Fisher-Yates
      const int32_t r = t + static_cast<int32_t>(rng() % uint64_t(p.num_q_blocks - t));
      std::swap(rows[t], rows[r]);
      ++p.kv_num_blocks[rows[t]];
    }
  }
  std::vector<int32_t> all(kv_blocks);
  for (int32_t qb = 0; qb < p.num_q_blocks; ++qb) {
    const int32_t n = p.kv_num_blocks[qb];
    for (int32_t j = 0; j < kv_blocks; ++j) all[j] = j;
    for (int32_t t = 0; t < n; ++t) {  // partial Fisher-Yates
      const int32_t r = t + static_cast<int32_t>(rng() % uint64_t(kv_blocks - t));
      std::swap(all[t], all[r]);
    }
    std::sort(all.begin(), all.begin() + n);
    std::copy(all.begin(), all.begin() + n, p.kv_indices.begin() + size_t(qb) * p.max_kv_blocks);
  }
  return p;
}

BlockPattern load_block_pattern_file(const std::string& path, int64_t seqlen_q, int64_t seqlen_k) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open block mask file '" + path + "'");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    throw std::runtime_error("block mask file '" + path + "' is not valid JSON: " + e.what());
  }
  BlockPattern p;
  try {
    p.block_m = j.value("block_m", 128);
    p.block_n = j.value("block_n", p.block_m);
    const auto& rows = j.at("kv_blocks");
    p.num_q_blocks = static_cast<int32_t>(rows.size());
    for (const auto& r : rows) p.max_kv_blocks = std::max<int32_t>(p.max_kv_blocks, static_cast<int32_t>(r.size()));
    p.kv_num_blocks.resize(p.num_q_blocks);
    p.kv_indices.assign(size_t(p.num_q_blocks) * size_t(p.max_kv_blocks), 0);
    for (int32_t qb = 0; qb < p.num_q_blocks; ++qb) {
      const auto& r = rows[qb];
      p.kv_num_blocks[qb] = static_cast<int32_t>(r.size());
      for (size_t t = 0; t < r.size(); ++t) p.kv_indices[size_t(qb) * p.max_kv_blocks + t] = r[t].get<int32_t>();
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error("block mask file '" + path + "': " + e.what() +
                             " (expected {\"block_m\": 128, \"block_n\": 128, \"kv_blocks\": [[...], ...]})");
  }
  const auto bad = [&](const std::string& why) { return std::runtime_error("block mask file '" + path + "': " + why); };
  if ((p.block_m != 64 && p.block_m != 128) || (p.block_n != 64 && p.block_n != 128)) throw bad("block_m and block_n must be 64 or 128");
  const int64_t want_q = (seqlen_q + p.block_m - 1) / p.block_m, kv_blocks = (seqlen_k + p.block_n - 1) / p.block_n;
  if (p.num_q_blocks != want_q)
    throw bad("has " + std::to_string(p.num_q_blocks) + " query blocks but seqlen_q " + std::to_string(seqlen_q) + " needs " +
              std::to_string(want_q));
  for (int32_t qb = 0; qb < p.num_q_blocks; ++qb) {
    std::vector<char> seen(kv_blocks);
    for (int32_t t = 0; t < p.kv_num_blocks[qb]; ++t) {
      const int32_t kb = p.kv_indices[size_t(qb) * p.max_kv_blocks + t];
      if (kb < 0 || kb >= kv_blocks)
        throw bad("query block " + std::to_string(qb) + " lists key block " + std::to_string(kb) + ", outside [0, " +
                  std::to_string(kv_blocks) + ")");
      if (seen[kb]++) throw bad("query block " + std::to_string(qb) + " lists key block " + std::to_string(kb) + " twice");
    }
  }
  return p;
}

bool make_block_pattern(const MaskSpec& spec, int64_t seqlen_q, int64_t seqlen_k, uint64_t seed, BlockPattern* out) {
  switch (spec.block) {
    case MaskSpec::Block::kNone: return false;
    case MaskSpec::Block::kRandom:
      *out = make_random_block_pattern(seqlen_q, seqlen_k, spec.block_size, spec.density, seed);
      return true;
    case MaskSpec::Block::kFile: *out = load_block_pattern_file(spec.file, seqlen_q, seqlen_k); return true;
  }
  return false;
}

MaskModel::MaskModel(const MaskSpec& spec, int64_t seqlen_q, int64_t seqlen_k, const BlockPattern* blocks)
    : sq_(seqlen_q),
      sk_(seqlen_k),
      window_left_(spec.window_left),
      window_right_(spec.effective_window_right()),
      diag_offset_(spec.alignment == FLASH_ALIGN_BOTTOM_RIGHT ? seqlen_k - seqlen_q : 0),
      blocks_(blocks) {
  if (blocks_ != nullptr) {
    sorted_indices_ = blocks_->kv_indices;
    for (int32_t qb = 0; qb < blocks_->num_q_blocks; ++qb) {
      auto first = sorted_indices_.begin() + size_t(qb) * blocks_->max_kv_blocks;
      std::sort(first, first + blocks_->kv_num_blocks[qb]);
    }
  }
}

void MaskModel::window(int64_t i, int64_t* lo, int64_t* hi) const {
  const int64_t diag = i + diag_offset_;
  *lo = window_left_ >= 0 ? std::max<int64_t>(0, diag - window_left_) : 0;
  *hi = window_right_ >= 0 ? std::min<int64_t>(sk_, diag + window_right_ + 1) : sk_;
}

bool MaskModel::visible(int64_t i, int64_t j) const {
  if (i < 0 || i >= sq_ || j < 0 || j >= sk_) return false;
  int64_t lo, hi;
  window(i, &lo, &hi);
  if (j < lo || j >= hi) return false;
  if (blocks_ == nullptr) return true;
  const int64_t qb = i / blocks_->block_m, kb = j / blocks_->block_n;
  for (int32_t t = 0; t < blocks_->kv_num_blocks[qb]; ++t)
    if (blocks_->kv_indices[size_t(qb) * blocks_->max_kv_blocks + t] == kb) return true;
  return false;
}

int64_t MaskModel::row_count(int64_t i) const {
  int64_t n = 0;
  for_each_run(i, [&](int64_t a, int64_t z) { n += z - a; });
  return n;
}

int64_t MaskModel::total_pairs() const {
  int64_t n = 0;
  for (int64_t i = 0; i < sq_; ++i) n += row_count(i);
  return n;
}

double forward_flops(int64_t visible_pairs_per_head, int64_t batch, int64_t heads_q, int64_t head_dim) {
  return 4.0 * double(head_dim) * double(visible_pairs_per_head) * double(batch) * double(heads_q);
}

}  // namespace fabench
