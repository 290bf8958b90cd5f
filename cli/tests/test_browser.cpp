// The dashboard in a real browser: `fa-bench report` renders the fixture results, headless Chromium
// loads the page (--dump-dom gives the DOM it built), and the charts it holds must carry exactly the
// fixture numbers. Exits 77 (ctest: skipped) when no Chromium is installed.
//
// Chromium is found as $FA_BENCH_CHROMIUM, else chromium / chromium-browser / google-chrome on PATH.
// Flags: those this environment needs for a root, offline, GPU-less headless run.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string g_chromium;
const std::string kFaBench = FA_BENCH_EXE;
const std::string kFixtures = FA_BENCH_FIXTURES;

std::string find_chromium() {
  if (const char* env = std::getenv("FA_BENCH_CHROMIUM"); env && *env) return fs::exists(env) ? env : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':'))
    for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
      const fs::path p = fs::path(dir) / name;
      if (fs::exists(p)) return p.string();
    }
  return "";
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string chromium_cmd(const fs::path& profile) {
  return "'" + g_chromium +
         "' --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking "
         "--disable-component-update --disable-sync --disable-dev-shm-usage --hide-scrollbars --user-data-dir='" +
         profile.string() + "'";
}

struct Page {
  fs::path dir, html;
  std::string dom;
};

// Renders the fixtures once for all tests.
const Page& page() {
  static Page p = [] {
    Page pg;
    pg.dir = fs::path(::testing::TempDir()) / "fa_bench_browser";
    fs::create_directories(pg.dir);
    pg.html = pg.dir / "dashboard.html";
    const std::string report = "'" + kFaBench + "' report '" + kFixtures + "' --html '" + pg.html.string() + "' 2>/dev/null";
    EXPECT_EQ(std::system(report.c_str()), 0) << report;
    const fs::path dom = pg.dir / "dom.html";
    const std::string cmd = chromium_cmd(pg.dir / "profile") + " --dump-dom 'file://" + pg.html.string() + "' > '" +
                            dom.string() + "' 2>/dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    pg.dom = slurp(dom);
    return pg;
  }();
  return p;
}

// (chart kind, series, x) -> y for every plotted point of the DOM, and the error crosses.
struct Plotted {
  std::map<std::string, double> points;
  std::set<std::string> errors;
  int charts = 0;
};

Plotted parse_charts(const std::string& dom) {
  Plotted out;
  const std::regex chart_re("<svg class=\"chart\"[^>]*data-chart=\"([a-z]+)\"");
  const std::regex pt_re("<circle class=\"pt[^\"]*\" data-series=\"([^\"]+)\" data-x=\"([^\"]+)\" data-y=\"([^\"]+)\"");
  const std::regex err_re("<g class=\"err\" data-series=\"([^\"]+)\" data-x=\"([^\"]+)\"");
  size_t pos = 0;
  while ((pos = dom.find("<svg class=\"chart\"", pos)) != std::string::npos) {
    const size_t end = dom.find("</svg>", pos);
    const std::string svg = dom.substr(pos, end - pos);
    std::smatch m;
    if (std::regex_search(svg, m, chart_re)) {
      ++out.charts;
      const std::string kind = m[1];
      for (auto it = std::sregex_iterator(svg.begin(), svg.end(), pt_re); it != std::sregex_iterator(); ++it)
        out.points[kind + "|" + (*it)[1].str() + "|" + (*it)[2].str()] = std::stod((*it)[3].str());
      for (auto it = std::sregex_iterator(svg.begin(), svg.end(), err_re); it != std::sregex_iterator(); ++it)
        out.errors.insert(kind + "|" + (*it)[1].str() + "|" + (*it)[2].str());
    }
    pos = end;
  }
  return out;
}

json fixture(const char* name) {
  std::ifstream in(fs::path(kFixtures) / name);
  return json::parse(in);
}

TEST(Browser, PageLoadsAndHasCharts) {
  const Page& p = page();
  ASSERT_FALSE(p.dom.empty()) << "chromium produced no DOM";
  EXPECT_NE(p.dom.find("NVIDIA H100 80GB HBM3 (fixture)"), std::string::npos);
  const Plotted plotted = parse_charts(p.dom);
  // Group "none": TFLOP/s, speedup, peers, memory. Group "causal": TFLOP/s, peers, memory (no naive twin, no speedup).
  EXPECT_EQ(plotted.charts, 7);
}

TEST(Browser, PlottedNumbersMatchTheFixtures) {
  const Plotted plotted = parse_charts(page().dom);
  // The latest run (run2) is what the charts show.
  const json latest = fixture("h100-run2.json");
  int checked = 0;
  for (const json& r : latest["results"]) {
    const std::string algo = r["algo"], x = std::to_string(r["seqlen_q"].get<int64_t>());
    if (!r["error"].is_null()) {
      EXPECT_TRUE(plotted.errors.count("tflops|" + algo + "|" + x)) << "no error mark for " << r["name"];
      continue;
    }
    if (r["mask"] != "none") continue;  // the causal group has its own chart; checked below
    const auto t = plotted.points.find("tflops|" + algo + "|" + x);
    ASSERT_NE(t, plotted.points.end()) << "no TFLOP/s point for " << r["name"];
    EXPECT_NEAR(t->second, r["tflops"].get<double>(), 1e-6 * r["tflops"].get<double>()) << r["name"];
    const auto m = plotted.points.find("memory|" + algo + "|" + x);
    ASSERT_NE(m, plotted.points.end()) << "no memory point for " << r["name"];
    EXPECT_NEAR(m->second, r["peak_mem_bytes"].get<double>(), 1e-5 * r["peak_mem_bytes"].get<double>());
    if (r["speedup_over_naive"].is_number()) {
      const auto s = plotted.points.find("speedup|" + algo + "|" + x);
      ASSERT_NE(s, plotted.points.end()) << "no speedup point for " << r["name"];
      EXPECT_NEAR(s->second, r["speedup_over_naive"].get<double>(), 1e-5);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

// fixtures/peers.json lies beside both fixture runs, so it is of the latest (run2): its cuDNN, FA2 and libflash-py
// times are drawn as TFLOP/s by fa-bench's FLOP count of the case, and libflash-py's speed over each peer's.
// peers-a100.json (another device) and peers-other-run.json (a revision no run has) must not be drawn; nor must
// peers.json's 4k row at batch 8, which no fa-bench row matches (it would overwrite the batch-4 point at x = 4096).
TEST(Browser, PeersOfTheSameRunAreDrawn) {
  const Plotted plotted = parse_charts(page().dom);
  const json latest = fixture("h100-run2.json"), peers = fixture("peers.json");
  int checked = 0;
  for (const json& p : peers["rows"]) {
    if (p["causal"].get<bool>() || p["b"] == 8) continue;  // the causal group's points share x with the dense group's
    const std::string x = std::to_string(p["n"].get<int64_t>());
    double flops = 0;
    for (const json& r : latest["results"])
      if (r["algo"] == "sm90" && r["mask"] == "none" && r["seqlen_q"] == p["n"] && r["batch"] == p["b"]) flops = r["flops"];
    ASSERT_GT(flops, 0) << x;
    for (const auto& [backend, series] : std::map<std::string, std::string>{{"cudnn", "cuDNN"}, {"flash", "FA2"},
                                                                              {"libflash", "libflash-py"}}) {
      const double ms = p["ms"][backend];
      const auto t = plotted.points.find("tflops|" + series + "|" + x);
      ASSERT_NE(t, plotted.points.end()) << "no TFLOP/s point for " << series << " at " << x;
      EXPECT_NEAR(t->second, flops / ms / 1e9, 1e-5 * t->second) << series << " at " << x;
      if (backend == "libflash") continue;
      const auto r = plotted.points.find("peers|" + series + "|" + x);
      ASSERT_NE(r, plotted.points.end()) << "no ratio point for " << series << " at " << x;
      EXPECT_NEAR(r->second, ms / p["ms"]["libflash"].get<double>(), 1e-5) << series << " at " << x;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 3);
  const std::string& dom = page().dom;
  EXPECT_NE(dom.find("data-peers-file=\"peers.json\" data-drawn=\"1\""), std::string::npos);
  EXPECT_NE(dom.find("data-peers-file=\"peers-a100.json\" data-drawn=\"0\""), std::string::npos);
  EXPECT_NE(dom.find("data-peers-file=\"peers-other-run.json\" data-drawn=\"0\""), std::string::npos);
}

TEST(Browser, HistoryMarksTheRegression) {
  const std::string& dom = page().dom;
  // sm90 at 1024 went from 0.50 ms to 0.55 ms between the fixture runs: +10% > 5%.
  EXPECT_NE(dom.find("<tr class=\"regression\" data-key=\"fwd|bf16|sm90|16|16|16|1024|1024|128|none\""), std::string::npos);
  EXPECT_NE(dom.find("data-regressions=\"1\""), std::string::npos);
  EXPECT_NE(dom.find("class=\"pt flagged\""), std::string::npos);
  EXPECT_NE(dom.find("<svg class=\"spark\""), std::string::npos);
}

TEST(Browser, NothingIsFetched) {
  const std::string html = slurp(page().html);
  for (const char* bad : {"<script src", "<link ", "src=\"http", "href=\"http", "@import", "url("})
    EXPECT_EQ(html.find(bad), std::string::npos) << bad;
}

TEST(Browser, Screenshot) {
  const Page& p = page();
  const fs::path png = p.dir / "dashboard.png";
  fs::remove(png);
  const std::string cmd = chromium_cmd(p.dir / "profile-shot") + " --window-size=1400,1600 --screenshot='" + png.string() +
                          "' 'file://" + p.html.string() + "' >/dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  ASSERT_TRUE(fs::exists(png));
  EXPECT_GT(fs::file_size(png), 20000u);  // a blank page is a few kB
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  g_chromium = find_chromium();
  if (g_chromium.empty()) {
    std::printf("no chromium found (apt-get install chromium, or set FA_BENCH_CHROMIUM): skipped\n");
    return 77;
  }
  return RUN_ALL_TESTS();
}
