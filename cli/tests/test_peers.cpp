// peers: the peer-comparison script's JSON (scripts/interleaved_peers.py --json) read, matched to fa-bench's rows by
// their axes, and kept to its own device and run. Fixtures: cli/tests/fixtures/peers*.json beside the two fixture runs
// of an H100 (h100-run1.json at revision aaaa, h100-run2.json at bbbb).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "peers.hpp"
#include "report.hpp"
#include "results.hpp"

namespace fabench {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const std::string kFixtures = FA_BENCH_FIXTURES;
const std::string kDevice = "NVIDIA H100 80GB HBM3 (fixture)";

json read(const std::string& name) {
  std::ifstream in(fs::path(kFixtures) / name);
  return json::parse(in);
}

// The fixture directory as `fa-bench report DIR` reads it: two runs of one device and three peers files.
struct Fixture {
  std::vector<ReportInput> inputs;
  std::vector<PeerInput> peers;
  std::vector<std::string> skipped;
  std::vector<std::pair<std::string, std::vector<Run>>> devices;
  const PeerInput& peer(const std::string& file) const {
    for (const PeerInput& p : peers)
      if (fs::path(p.file.path).filename() == file) return p;
    throw std::runtime_error("no peers file " + file);
  }
};

Fixture fixture() {
  Fixture f;
  f.inputs = collect_inputs({kFixtures}, &f.skipped, &f.peers);
  f.devices = group_runs(f.inputs);
  return f;
}

TEST(Peers, ParsesTheScriptsFormat) {
  const PeerFile p = parse_peers(read("peers.json"), "peers.json");
  EXPECT_EQ(p.device, kDevice);
  EXPECT_EQ(p.algorithm, "sm90");  // the script's default; the file does not say
  ASSERT_EQ(p.rows.size(), 5u);
  const PeerRow& r = p.rows[0];
  EXPECT_EQ(r.head_dim, 128);
  EXPECT_EQ(r.seqlen_q, 1024);
  EXPECT_EQ(r.seqlen_k, 1024);  // square unless the row says otherwise
  EXPECT_EQ(r.batch, 16);
  EXPECT_EQ(r.heads_q, 16);
  EXPECT_EQ(r.heads_kv, 16);
  EXPECT_EQ(r.mode, "fwd");
  EXPECT_EQ(r.dtype, "bf16");
  EXPECT_EQ(r.mask, "none");
  EXPECT_DOUBLE_EQ(r.ms.at("cudnn"), 0.50);
  EXPECT_DOUBLE_EQ(r.ms.at("flash"), 0.80);
  EXPECT_DOUBLE_EQ(r.ms.at("libflash"), 0.52);
  EXPECT_EQ(p.rows[3].mask, "causal");  // "causal": true is fa-bench's bottom-right causal (square: the same)
}

TEST(Peers, OptionalFieldsOverrideTheDefaults) {
  json d = read("peers.json");
  d["algorithm"] = "auto";
  d["git_revision"] = "1234567890ab";
  d["rows"][0]["mode"] = "fwd_bwd";
  d["rows"][0]["dtype"] = "fp16";
  d["rows"][0]["mask"] = "window:256,0";
  d["rows"][0]["h_kv"] = 4;
  d["rows"][0]["ms"]["flash"] = nullptr;  // a backend that could not run the case
  const PeerFile p = parse_peers(d, "x.json");
  EXPECT_EQ(p.algorithm, "auto");
  EXPECT_EQ(p.git_revision, "1234567890ab");
  EXPECT_EQ(p.rows[0].mode, "fwd_bwd");
  EXPECT_EQ(p.rows[0].dtype, "fp16");
  EXPECT_EQ(p.rows[0].mask, "window:256,0");
  EXPECT_EQ(p.rows[0].heads_kv, 4);
  EXPECT_EQ(p.rows[0].ms.count("flash"), 0u);
}

TEST(Peers, RejectsWhatIsNotAPeersFile) {
  EXPECT_FALSE(looks_like_peers(read("h100-run1.json")));  // a fa-bench result document
  EXPECT_FALSE(looks_like_peers(json::parse(R"({"not": "an fa-bench file"})")));
  EXPECT_TRUE(looks_like_peers(read("peers.json")));
  auto broken = [](auto edit) {
    json d = read("peers.json");
    edit(d["rows"][1]);
    return d;
  };
  EXPECT_THROW(parse_peers(broken([](json& r) { r.erase("ms"); }), "x"), std::runtime_error);
  EXPECT_THROW(parse_peers(broken([](json& r) { r["d"] = "128"; }), "x"), std::runtime_error);
  EXPECT_THROW(parse_peers(broken([](json& r) { r["n"] = 0; }), "x"), std::runtime_error);
  EXPECT_THROW(parse_peers(broken([](json& r) { r.erase("causal"); }), "x"), std::runtime_error);
  EXPECT_THROW(parse_peers(broken([](json& r) { r["mode"] = "decode"; }), "x"), std::runtime_error);
  EXPECT_THROW(parse_peers(broken([](json& r) { r["ms"]["cudnn"] = -1.0; }), "x"), std::runtime_error);
  try {
    parse_peers(broken([](json& r) { r.erase("b"); }), "some/peers.json");
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("some/peers.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rows[1]"), std::string::npos) << e.what();
  }
}

TEST(Peers, CaseKeyMatchesFaBenchRowsOnEveryAxis) {
  const PeerFile p = parse_peers(read("peers.json"), "peers.json");
  const json run2 = read("h100-run2.json");
  const json& sm90_1k = run2["results"][0];  // fwd/bf16/sm90/b16/h16/hkv16/sq1024/sk1024/d128/none
  ASSERT_EQ(sm90_1k["name"], "fwd/bf16/sm90/b16/h16/hkv16/sq1024/sk1024/d128/none");
  EXPECT_EQ(case_key(p.rows[0].as_case()), case_key(sm90_1k));
  EXPECT_EQ(case_key(run2["results"][1]), case_key(sm90_1k));  // naive: the algorithm is not an axis of a case
  const json& causal = run2["results"][6];
  EXPECT_EQ(case_key(p.rows[3].as_case()), case_key(causal));
  for (const char* axis : {"mode", "dtype", "batch", "heads_q", "heads_kv", "seqlen_q", "seqlen_k", "head_dim", "mask"}) {
    json c = p.rows[0].as_case();
    c[axis] = c[axis].is_string() ? json("other") : json(c[axis].get<int64_t>() * 2);
    EXPECT_NE(case_key(c), case_key(sm90_1k)) << axis;
  }
}

TEST(Peers, FlopsAreFaBenchs) {
  const PeerFile p = parse_peers(read("peers.json"), "peers.json");
  const json run2 = read("h100-run2.json");
  EXPECT_DOUBLE_EQ(peer_case_flops(p.rows[0]), run2["results"][0]["flops"].get<double>());
  EXPECT_DOUBLE_EQ(peer_case_flops(p.rows[3]), run2["results"][6]["flops"].get<double>());  // causal: exact, not 1/2
  PeerRow r = p.rows[0];
  r.mode = "fwd_bwd";
  EXPECT_DOUBLE_EQ(peer_case_flops(r), 3.5 * run2["results"][0]["flops"].get<double>());
  r.mask = "window:256,0";
  EXPECT_LT(peer_case_flops(r), 0);
}

TEST(Peers, AttachedOnlyToTheirDeviceAndRun) {
  const Fixture f = fixture();
  ASSERT_EQ(f.peers.size(), 3u);
  ASSERT_EQ(f.devices.size(), 1u);
  ASSERT_EQ(f.devices[0].second.size(), 2u);
  // Beside both fixture runs, carrying no revision: the latest run in its directory (bbbb).
  const PeerAttachment same = attach_peers(f.peer("peers.json").file, false, f.devices);
  EXPECT_EQ(same.device, 0);
  EXPECT_EQ(same.run, 1);
  EXPECT_TRUE(same.why_not.empty());
  // Another device: never drawn, even when named.
  const PeerAttachment a100 = attach_peers(f.peer("peers-a100.json").file, true, f.devices);
  EXPECT_EQ(a100.device, -1);
  EXPECT_EQ(a100.run, -1);
  EXPECT_NE(a100.why_not.find("A100"), std::string::npos);
  // The same device at a revision no run has: not drawn, even when named.
  const PeerAttachment other = attach_peers(f.peer("peers-other-run.json").file, true, f.devices);
  EXPECT_EQ(other.device, 0);
  EXPECT_EQ(other.run, -1);
  EXPECT_NE(other.why_not.find("cccccccccccc"), std::string::npos);
  // A revision names its run, wherever the file lies.
  PeerFile at_a = f.peer("peers.json").file;
  at_a.git_revision = "aaaaaaaaaaaa";
  at_a.path = "/elsewhere/peers.json";
  EXPECT_EQ(attach_peers(at_a, false, f.devices).run, 0);
  // Elsewhere without a revision: the latest run only when named on the command line.
  PeerFile away = f.peer("peers.json").file;
  away.path = "/elsewhere/peers.json";
  EXPECT_EQ(attach_peers(away, false, f.devices).run, -1);
  EXPECT_EQ(attach_peers(away, true, f.devices).run, 1);
}

TEST(Peers, MatchedCaseByCase) {
  const Fixture f = fixture();
  const DevicePeers dp = match_peers(f.devices, 0, f.peers);
  EXPECT_EQ(dp.files.size(), 2u);  // peers.json and peers-other-run.json: the A100 file is not this device's
  ASSERT_EQ(dp.cases.size(), 4u);  // 1k, 4k, 16k dense and 4k causal; 4k at batch 8 has no fa-bench row
  ASSERT_EQ(dp.not_drawn.size(), 1u);
  EXPECT_NE(dp.not_drawn[0].find("b8"), std::string::npos) << dp.not_drawn[0];
  for (const PeerCase& c : dp.cases) {
    EXPECT_EQ((*c.lib)["algo"], "sm90");
    EXPECT_EQ(c.revision, "bbbbbbbbbbbb");
    EXPECT_EQ(case_key(*c.lib), case_key(c.peer->as_case()));
    EXPECT_EQ(fs::path(c.file->file.path).filename(), "peers.json");
    EXPECT_DOUBLE_EQ(c.flops, (*c.lib)["flops"].get<double>());
  }
  const PeerCase* dense1k = nullptr;
  for (const PeerCase& c : dp.cases)
    if (c.peer->seqlen_q == 1024) dense1k = &c;
  ASSERT_NE(dense1k, nullptr);
  ASSERT_NE(dense1k->naive, nullptr);
  EXPECT_EQ((*dense1k->naive)["algo"], "naive");
  EXPECT_DOUBLE_EQ(dense1k->peer->ms.at("cudnn"), 0.50);  // the other run's 0.13 is not mixed in
}

TEST(Peers, NeverPairedWithAnotherRunsRows) {
  Fixture f = fixture();
  // The same peers, now said to be of run aaaa (h100-run1.json), whose sm90 1k row is removed: the 1k case is not
  // drawn although run bbbb has that row; the others pair with run aaaa's rows, not with the bbbb rows the charts show.
  for (PeerInput& p : f.peers)
    if (p.file.git_revision.empty()) p.file.git_revision = "aaaaaaaaaaaa";
  for (ReportInput& in : f.inputs)
    if (in.doc["meta"]["git_revision"] == "aaaaaaaaaaaa") in.doc["results"].erase(0);  // sm90 b16 sq1024 none
  f.devices = group_runs(f.inputs);
  const DevicePeers dp = match_peers(f.devices, 0, f.peers);
  ASSERT_EQ(dp.cases.size(), 3u);
  ASSERT_EQ(dp.not_drawn.size(), 2u);  // the 1k case, and the batch-8 case as before
  bool saw_1k = false;
  for (const std::string& s : dp.not_drawn) saw_1k |= s.find("n1k: no fa-bench sm90 row of this case in its run aaaaaaaaaaaa") != std::string::npos;
  EXPECT_TRUE(saw_1k) << dp.not_drawn[0] << " / " << dp.not_drawn[1];
  const json run1 = read("h100-run1.json");
  for (const PeerCase& c : dp.cases) {
    EXPECT_EQ(c.revision, "aaaaaaaaaaaa");
    EXPECT_EQ(c.charts_revision, "bbbbbbbbbbbb");  // the page's sm90 points are run bbbb's: said so
    bool found = false;
    for (const json& r : run1["results"])
      if (case_key(r) == c.key && r["algo"] == "sm90") {
        found = true;
        EXPECT_EQ(*c.lib, r);
      }
    EXPECT_TRUE(found) << c.key;
  }
  const std::string html = render_html(f.inputs, 5.0, "t", f.peers);
  EXPECT_NE(html.find("the sm90 point at this length is run bbbbbbbbbbbb&#39;s"), std::string::npos);
}

TEST(Peers, AnAutoRowStandsForTheAlgorithmItRan) {
  Fixture f = fixture();
  for (ReportInput& in : f.inputs)
    for (json& r : in.doc["results"])
      if (r["algo"] == "sm90") r["algo"] = "auto";  // algo_used stays sm90
  f.devices = group_runs(f.inputs);
  const DevicePeers dp = match_peers(f.devices, 0, f.peers);
  ASSERT_EQ(dp.cases.size(), 4u);
  EXPECT_EQ((*dp.cases[0].lib)["algo"], "auto");
}

TEST(Peers, PageAndMarkdownShowTheRatios) {
  const Fixture f = fixture();
  const std::string html = render_html(f.inputs, 5.0, "t", f.peers);
  // 1k dense: libflash-py 0.52 ms, cuDNN 0.50, FA2 0.80 -> libflash ÷ cuDNN 0.962, ÷ FA2 1.538.
  EXPECT_NE(html.find("data-ratio-over=\"cudnn\">0.962×"), std::string::npos);
  EXPECT_NE(html.find("data-ratio-over=\"flash\">1.538×"), std::string::npos);
  EXPECT_NE(html.find("data-chart=\"peers\""), std::string::npos);
  EXPECT_NE(html.find("peers-a100.json"), std::string::npos);  // listed as not drawn, with the reason
  EXPECT_NE(html.find("no fa-bench result file of that device"), std::string::npos);
  std::string md;
  render_markdown(f.inputs, nullptr, 5.0, &md, f.peers);
  EXPECT_NE(md.find("libflash against its peers"), std::string::npos) << md;
  EXPECT_NE(md.find("| 264.3 | 0.962 | 1.538 |"), std::string::npos) << md;  // libflash-py's TFLOP/s, the ratios
  EXPECT_NE(md.find("`peers-a100.json` not drawn"), std::string::npos) << md;
  // Without peers the page has no peers chart.
  EXPECT_EQ(render_html(f.inputs, 5.0, "t").find("data-chart=\"peers\""), std::string::npos);
}

}  // namespace
}  // namespace fabench
