// cli/src/svg.hpp -- the line charts of `fa-bench report`, drawn as inline SVG (no script, no fetch).
//
// Every point is a <circle class="pt"> carrying its numbers as data-series / data-x / data-y attributes
// and a <title> tooltip, so a browser test can read back exactly what was plotted.
#pragma once
#include <string>
#include <vector>

namespace fabench {

struct ChartPoint {
  double x = 0, y = 0;
  std::string tip;         // tooltip text
  bool error = false;      // drawn as a red cross on the x axis (y ignored), e.g. naive out of memory
  bool flagged = false;    // drawn in red, larger (a regression)
  std::string x_label;     // for categorical x (history): the tick label
};

struct ChartSeries {
  std::string name, color;
  std::vector<ChartPoint> points;
  bool dashed = false;     // a dashed line (libflash-py, libflash timed by the peers script)
};

struct ChartSpec {
  std::string kind;        // data-chart attribute: tflops, speedup, memory, history
  std::string title;
  std::string x_label, y_label;
  bool log_x = true;       // log2 axis of sequence lengths
  bool categorical_x = false;  // x = 0, 1, 2, ... with the points' x_label as ticks
  bool log_y = false;
  double reference_y = -1; // a dashed horizontal line (speedup 1x); < 0: none
  int width = 420, height = 270;
};

std::string svg_line_chart(const ChartSpec& spec, const std::vector<ChartSeries>& series);
// A small sparkline (history column of a table); points flagged are drawn red.
std::string svg_sparkline(const std::vector<ChartPoint>& points, const std::string& series_name);

std::string html_escape(const std::string& s);
std::string format_number(double v, int significant = 4);  // "312.5", "0.0123", "1.23e+09"
std::string format_seqlen(double n);                       // 512, 1k, 16k, 1.5k
std::string format_bytes(double b);                        // 12.0 MiB, 1.50 GiB
std::string series_color(const std::string& name, size_t index);

}  // namespace fabench
