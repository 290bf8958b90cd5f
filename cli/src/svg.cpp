// cli/src/svg.cpp -- see svg.hpp.
#include "svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <sstream>

namespace fabench {

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string format_number(double v, int significant) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  const double a = std::fabs(v);
  if (a != 0 && (a >= 1e7 || a < 1e-3)) {
    std::snprintf(buf, sizeof buf, "%.*e", significant - 1, v);
  } else {
    // Fixed notation with `significant` digits, trailing zeros dropped.
    const int int_digits = a >= 1 ? int(std::floor(std::log10(a))) + 1 : 1;
    const int decimals = std::max(0, significant - int_digits);
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    std::string s = buf;
    if (s.find('.') != std::string::npos) {
      while (!s.empty() && s.back() == '0') s.pop_back();
      if (!s.empty() && s.back() == '.') s.pop_back();
    }
    return s;
  }
  return buf;
}

std::string format_seqlen(double n) {
  if (n >= 1024 && std::fmod(n, 1024) == 0) return format_number(n / 1024, 4) + "k";
  if (n >= 1024 && std::fmod(n, 512) == 0) return format_number(n / 1024, 3) + "k";
  return format_number(n, 6);
}

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.3g %s", b, units[u]);
  return buf;
}

std::string series_color(const std::string& name, size_t index) {
  static const std::map<std::string, std::string> fixed = {
      {"sm90", "#1f77b4"}, {"sm80", "#ff7f0e"}, {"naive", "#6b6b6b"}, {"cpu", "#2ca02c"}, {"auto", "#9467bd"},
      // the peers (scripts/interleaved_peers.py): SDPA's cuDNN and FlashAttention-2, libflash through Python
      {"cuDNN", "#76b900"}, {"FA2", "#e377c2"}, {"libflash-py", "#17becf"}};
  static const char* palette[] = {"#17becf", "#bcbd22", "#e377c2", "#8c564b", "#d62728", "#1f77b4", "#ff7f0e", "#2ca02c"};
  const auto it = fixed.find(name);
  if (it != fixed.end()) return it->second;
  return palette[index % (sizeof(palette) / sizeof(palette[0]))];
}

namespace {

// 1, 2, 5 x 10^k steps so that about `n` ticks cover [0, hi].
double nice_step(double hi, int n) {
  if (hi <= 0) return 1;
  const double raw = hi / n, mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double r = raw / mag;
  return (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * mag;
}

std::string fmt_coord(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string tick_label(double v, bool bytes) {
  if (bytes) return format_bytes(v);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

}  // namespace

std::string svg_line_chart(const ChartSpec& spec, const std::vector<ChartSeries>& series) {
  const double W = spec.width, H = spec.height, left = 68, right = 12, bottom = 44;
  // Legend entries left to right, wrapped onto more rows (each 13 px, above the plot) when they do not fit.
  auto legend_width = [](const std::string& name) { return 24 + 6.5 * double(name.size()); };
  int legend_rows = 1;
  {
    double x = left + 6;
    for (const ChartSeries& s : series) {
      if (x > left + 6 && x + legend_width(s.name) - 6 > W - right) ++legend_rows, x = left + 6;
      x += legend_width(s.name);
    }
  }
  const double top = 30 + 13 * (legend_rows - 1);
  const double pw = W - left - right, ph = H - top - bottom;
  // Ranges.
  std::set<double> xs;
  std::map<double, std::string> x_labels;
  double y_lo = std::numeric_limits<double>::infinity(), y_hi = 0;
  for (const ChartSeries& s : series)
    for (const ChartPoint& p : s.points) {
      xs.insert(p.x);
      if (!p.x_label.empty()) x_labels[p.x] = p.x_label;
      if (p.error || !std::isfinite(p.y)) continue;
      if (!spec.log_y || p.y > 0) y_lo = std::min(y_lo, p.y), y_hi = std::max(y_hi, p.y);
    }
  if (spec.reference_y >= 0) y_hi = std::max(y_hi, spec.reference_y);
  const bool bytes = spec.kind == "memory";
  double x0 = xs.empty() ? 0 : *xs.begin(), x1 = xs.empty() ? 1 : *xs.rbegin();
  auto xt = [&](double x) { return spec.log_x && !spec.categorical_x ? std::log2(std::max(x, 1e-12)) : x; };
  double tx0 = xt(x0), tx1 = xt(x1);
  if (tx1 - tx0 < 1e-12) tx0 -= 1, tx1 += 1;
  const double pad = (tx1 - tx0) * 0.04;
  tx0 -= pad, tx1 += pad;
  double ty0, ty1;
  std::vector<double> yticks;
  // Log axes: decades, or powers of two for bytes (1 MiB, 4 MiB, 16 MiB, ...).
  const double base = bytes ? 2.0 : 10.0;
  auto logb = [&](double v) { return std::log(std::max(v, 1e-300)) / std::log(base); };
  if (spec.log_y) {
    if (!std::isfinite(y_lo)) y_lo = 1, y_hi = 10;
    double d0 = std::floor(logb(y_lo)), d1 = std::ceil(logb(y_hi));
    if (d1 <= d0) d1 = d0 + 1;
    const int step = std::max(1, int(std::ceil((d1 - d0) / 6)));
    if (bytes) d0 = std::floor(d0 / step) * step;  // ticks on 2^(k*step)
    ty0 = d0, ty1 = d1;
    for (double d = d0; d <= d1 + 1e-9; d += step) yticks.push_back(std::pow(base, d));
    ty1 = std::max(ty1, logb(yticks.back()));
  } else {
    const double step = nice_step(y_hi > 0 ? y_hi : 1, 5);
    ty0 = 0, ty1 = std::ceil((y_hi > 0 ? y_hi : 1) * 1.05 / step) * step;
    for (double v = 0; v <= ty1 + step * 1e-9; v += step) yticks.push_back(v);
  }
  auto X = [&](double x) { return left + (xt(x) - tx0) / (tx1 - tx0) * pw; };
  auto Y = [&](double y) {
    const double t = spec.log_y ? logb(y) : y;
    return top + ph - (t - ty0) / (ty1 - ty0) * ph;
  };

  std::ostringstream o;
  o << "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" data-chart=\"" << html_escape(spec.kind)
    << "\" data-title=\"" << html_escape(spec.title) << "\" width=\"" << W << "\" height=\"" << H << "\" viewBox=\"0 0 "
    << W << " " << H << "\" role=\"img\" aria-label=\"" << html_escape(spec.title) << "\">";
  o << "<title>" << html_escape(spec.title) << "</title>";
  o << "<rect x=\"0\" y=\"0\" width=\"" << W << "\" height=\"" << H << "\" fill=\"#fff\"/>";
  o << "<text class=\"ctitle\" x=\"" << left << "\" y=\"16\">" << html_escape(spec.title) << "</text>";
  // Grid and y ticks.
  for (double v : yticks) {
    const double y = Y(v);
    o << "<line class=\"grid\" x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << fmt_coord(y) << "\" y2=\""
      << fmt_coord(y) << "\"/>";
    o << "<text class=\"tick\" x=\"" << left - 5 << "\" y=\"" << fmt_coord(y + 3) << "\" text-anchor=\"end\">"
      << html_escape(tick_label(v, bytes)) << "</text>";
  }
  // x ticks: every distinct x, thinned to at most 10 labels.
  {
    std::vector<double> v(xs.begin(), xs.end());
    const size_t every = v.size() > 10 ? (v.size() + 9) / 10 : 1;
    for (size_t i = 0; i < v.size(); i += every) {
      const double x = X(v[i]);
      const std::string label = x_labels.count(v[i]) ? x_labels[v[i]] : format_seqlen(v[i]);
      o << "<line class=\"xtick\" x1=\"" << fmt_coord(x) << "\" x2=\"" << fmt_coord(x) << "\" y1=\"" << top + ph << "\" y2=\""
        << top + ph + 4 << "\"/>";
      o << "<text class=\"tick\" x=\"" << fmt_coord(x) << "\" y=\"" << top + ph + 15 << "\" text-anchor=\"middle\">"
        << html_escape(label) << "</text>";
    }
  }
  o << "<line class=\"axis\" x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << top + ph << "\" y2=\"" << top + ph << "\"/>";
  o << "<line class=\"axis\" x1=\"" << left << "\" x2=\"" << left << "\" y1=\"" << top << "\" y2=\"" << top + ph << "\"/>";
  o << "<text class=\"alabel\" x=\"" << left + pw / 2 << "\" y=\"" << H - 6 << "\" text-anchor=\"middle\">"
    << html_escape(spec.x_label) << "</text>";
  o << "<text class=\"alabel\" transform=\"translate(11," << top + ph / 2 << ") rotate(-90)\" text-anchor=\"middle\">"
    << html_escape(spec.y_label) << "</text>";
  if (spec.reference_y >= 0) {
    const double y = Y(spec.reference_y);
    o << "<line class=\"ref\" x1=\"" << left << "\" x2=\"" << left + pw << "\" y1=\"" << fmt_coord(y) << "\" y2=\""
      << fmt_coord(y) << "\"/>";
  }
  // Series.
  double legend_x = left + 6, legend_y = 30;
  for (const ChartSeries& s : series) {
    o << "<g class=\"series\" data-series=\"" << html_escape(s.name) << "\">";
    std::string path;
    for (const ChartPoint& p : s.points) {
      if (p.error || !std::isfinite(p.y) || (spec.log_y && p.y <= 0)) continue;
      path += (path.empty() ? "" : " ") + fmt_coord(X(p.x)) + "," + fmt_coord(Y(p.y));
    }
    if (!path.empty())
      o << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"2\""
        << (s.dashed ? " stroke-dasharray=\"6 3\"" : "") << " points=\"" << path << "\"/>";
    for (const ChartPoint& p : s.points) {
      if (p.error) {
        const double x = X(p.x), y = top + ph - 6;
        o << "<g class=\"err\" data-series=\"" << html_escape(s.name) << "\" data-x=\"" << format_number(p.x, 8)
          << "\"><title>" << html_escape(p.tip) << "</title><path d=\"M" << fmt_coord(x - 4) << "," << fmt_coord(y - 4)
          << " l8,8 m0,-8 l-8,8\" stroke=\"#d62728\" stroke-width=\"2\"/></g>";
        continue;
      }
      if (!std::isfinite(p.y) || (spec.log_y && p.y <= 0)) continue;
      o << "<circle class=\"pt" << (p.flagged ? " flagged" : "") << "\" data-series=\"" << html_escape(s.name)
        << "\" data-x=\"" << format_number(p.x, 8) << "\" data-y=\"" << format_number(p.y, 6) << "\" cx=\""
        << fmt_coord(X(p.x)) << "\" cy=\"" << fmt_coord(Y(p.y)) << "\" r=\"" << (p.flagged ? 5 : 3) << "\" fill=\""
        << (p.flagged ? "#d62728" : s.color) << "\"><title>" << html_escape(p.tip) << "</title></circle>";
    }
    o << "</g>";
    // Legend entry.
    if (legend_x > left + 6 && legend_x + legend_width(s.name) - 6 > W - right) legend_x = left + 6, legend_y += 13;
    o << "<rect x=\"" << fmt_coord(legend_x) << "\" y=\"" << legend_y - 2 << "\" width=\"10\" height=\"3\" fill=\"" << s.color
      << "\"/><text class=\"legend\" x=\"" << fmt_coord(legend_x + 13) << "\" y=\"" << legend_y + 3 << "\">"
      << html_escape(s.name) << "</text>";
    legend_x += legend_width(s.name);
  }
  o << "</svg>";
  return o.str();
}

std::string svg_sparkline(const std::vector<ChartPoint>& pts, const std::string& name) {
  const double W = 170, H = 34, pad = 5;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const ChartPoint& p : pts)
    if (!p.error && std::isfinite(p.y)) lo = std::min(lo, p.y), hi = std::max(hi, p.y);
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (hi - lo < 1e-12 * std::max(1.0, std::fabs(hi))) lo -= 0.5 * std::max(1e-9, std::fabs(lo)), hi += 0.5 * std::max(1e-9, std::fabs(hi));
  const size_t n = pts.size();
  auto X = [&](size_t i) { return n <= 1 ? W / 2 : pad + double(i) * (W - 2 * pad) / double(n - 1); };
  auto Y = [&](double y) { return H - pad - (y - lo) / (hi - lo) * (H - 2 * pad); };
  std::ostringstream o;
  o << "<svg class=\"spark\" xmlns=\"http://www.w3.org/2000/svg\" data-series=\"" << html_escape(name) << "\" width=\"" << W
    << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H << "\">";
  std::string path;
  for (size_t i = 0; i < n; ++i)
    if (!pts[i].error && std::isfinite(pts[i].y)) path += (path.empty() ? "" : " ") + fmt_coord(X(i)) + "," + fmt_coord(Y(pts[i].y));
  if (!path.empty()) o << "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"" << path << "\"/>";
  for (size_t i = 0; i < n; ++i) {
    const ChartPoint& p = pts[i];
    if (p.error) {
      o << "<g class=\"err\"><title>" << html_escape(p.tip) << "</title><path d=\"M" << fmt_coord(X(i) - 3) << ","
        << fmt_coord(H / 2 - 3) << " l6,6 m0,-6 l-6,6\" stroke=\"#d62728\" stroke-width=\"1.5\"/></g>";
      continue;
    }
    o << "<circle class=\"pt" << (p.flagged ? " flagged" : "") << "\" data-x=\"" << i << "\" data-y=\""
      << format_number(p.y, 6) << "\" cx=\"" << fmt_coord(X(i)) << "\" cy=\"" << fmt_coord(Y(p.y)) << "\" r=\""
      << (p.flagged ? 4 : 2.5) << "\" fill=\"" << (p.flagged ? "#d62728" : "#1f77b4") << "\"><title>" << html_escape(p.tip)
      << "</title></circle>";
  }
  o << "</svg>";
  return o.str();
}

}  // namespace fabench
