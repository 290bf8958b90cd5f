// cli/src/peers.hpp -- the peer-comparison script's JSON (`scripts/interleaved_peers.py --json FILE`): libflash
// through the Python binding and PyTorch SDPA's backends (cuDNN, FlashAttention-2) timed interleaved in one process
// on the same tensors. `fa-bench report` draws these next to fa-bench's own rows of the same device and run.
//
// The file (one object):
//   { "device": "NVIDIA H200", "torch": "2.11.0+cu130",
//     "rows": [ { "d": 128, "n": 4096, "b": 4, "h": 16, "causal": false, "reps": 30, "icache": "warm",
//                 "max_rel_err": 0.0023, "ms": {"libflash": 0.80, "cudnn": 0.82, "flash": 1.20},
//                 "tflops": {...} }, ... ] }
// Read too when present (the script may add them; older files lack them): top level `date`, `git_revision`,
// `algorithm` (the libflash algorithm the script ran, default sm90), `mode`, `dtype`; per row `mode` (fwd, bwd,
// fwd_bwd; default fwd), `dtype` (default bf16), `mask` (a fa-bench mask label; default from `causal`),
// `h_kv` / `heads_kv` (default h), `n_k` / `seqlen_k` (default n).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace fabench {

struct Run;

struct PeerRow {
  std::string mode = "fwd", dtype = "bf16", mask = "none";
  int64_t batch = 0, heads_q = 0, heads_kv = 0, seqlen_q = 0, seqlen_k = 0, head_dim = 0;
  std::map<std::string, double> ms;  // backend ("libflash", "cudnn", "flash", ...) -> median time, ms
  double max_rel_err = -1;           // < 0: not recorded
  int64_t reps = 0;
  std::string icache;
  // The axes as a result-row-like object (mode, dtype, batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, mask),
  // so case_key() and the report's grouping treat it as a fa-bench row.
  nlohmann::json as_case() const;
};

struct PeerFile {
  std::string path, device, torch, date, git_revision;
  std::string algorithm = "sm90";  // the libflash algorithm the script timed
  std::vector<PeerRow> rows;
};

// A JSON document of the peer script's shape ({"device": string, "rows": array}, no schema_version).
bool looks_like_peers(const nlohmann::json& doc);
// Throws std::runtime_error naming `path` and the problem.
PeerFile parse_peers(const nlohmann::json& doc, const std::string& path);
PeerFile load_peers(const std::string& path);

// The axes of a case, algorithm aside: mode|dtype|batch|heads_q|heads_kv|seqlen_q|seqlen_k|head_dim|mask. Equal for a
// fa-bench row and a peer row of the same problem.
std::string case_key(const nlohmann::json& row);
// "cudnn" -> "cuDNN", "flash" -> "FA2", "libflash" -> "libflash-py"; others "SDPA:<name>".
std::string peer_display_name(const std::string& backend);
// FLOPs of the case by fa-bench's model (bench_results/README.md: 4·d per visible pair, ×2.5 bwd, ×3.5 fwd_bwd) for the
// masks the script runs (none; causal, bottom-right); < 0 for other masks.
double peer_case_flops(const PeerRow& r);

// Which fa-bench run a peers file belongs to, or why it belongs to none (then it is not drawn).
struct PeerAttachment {
  int device = -1, run = -1;  // indices into group_runs()'s result
  std::string how;            // "git revision 1a2b3c", "next to fa-bench-d128.json", "given with --peers ..."
  std::string why_not;        // non-empty when not attached
};
// Rules, in order: only a device of the same name (meta.device.name); a file carrying `git_revision` belongs to that
// run of the device, or to none; else to the device's run with a result file in the same directory (the latest such
// run); else, only when the file was named explicitly (`--peers`, or as a file argument), to the device's latest run.
PeerAttachment attach_peers(const PeerFile& p, bool named_explicitly,
                            const std::vector<std::pair<std::string, std::vector<Run>>>& devices);

}  // namespace fabench
