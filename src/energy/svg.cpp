#include "energy/svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <stdexcept>

namespace meganeura::energy {
namespace {

constexpr const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string header(int w, int h, const std::string& title) {
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{3}</text>\n",
      w, h, w / 2, escape(title));
}

std::string tick_label(double v) { return fmt::format("{:g}", v); }

}  // namespace

namespace {

constexpr int kScatterW = 640, kScatterH = 520, kLeft = 80, kRight = 170, kTop = 50, kBottom = 60;

// Whole decades on both axes, the same range on each so the identity line is the diagonal.
struct LogAxes {
  double dlo = 0, dhi = 1;
  double pw = kScatterW - kLeft - kRight, ph = kScatterH - kTop - kBottom;
  double x(double v) const { return kLeft + (std::log10(v) - dlo) / (dhi - dlo) * pw; }
  double y(double v) const { return kTop + ph - (std::log10(v) - dlo) / (dhi - dlo) * ph; }
};

LogAxes axes_for(const std::vector<ScatterPoint>& pts) {
  double lo = 1, hi = 10;
  if (!pts.empty()) {
    lo = INFINITY, hi = 0;
    for (const ScatterPoint& p : pts) lo = std::min({lo, p.x, p.y}), hi = std::max({hi, p.x, p.y});
  }
  LogAxes a;
  a.dlo = std::floor(std::log10(lo));
  a.dhi = std::max(std::ceil(std::log10(hi)), a.dlo + 1);
  return a;
}

// The frame, a grid line and label per decade, and the identity line.
std::string grid(const LogAxes& a) {
  std::string svg = fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n",
                                kLeft, kTop, a.pw, a.ph);
  for (double d = a.dlo; d <= a.dhi + 1e-9; d += 1) {
    const double v = std::pow(10.0, d);
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ddd\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        a.x(v), kTop, kTop + a.ph, kTop + a.ph + 16, tick_label(v));
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        kLeft, a.y(v), kLeft + a.pw, kLeft - 6, a.y(v) + 4, tick_label(v));
  }
  const double lo = std::pow(10.0, a.dlo), hi = std::pow(10.0, a.dhi);
  return svg + fmt::format(
                   "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#444\" "
                   "stroke-dasharray=\"5,4\"><title>identity</title></line>\n",
                   a.x(lo), a.y(lo), a.x(hi), a.y(hi));
}

// One colour per series: the points, then the legend.
std::string points_and_legend(const std::vector<ScatterPoint>& pts, const LogAxes& a) {
  std::map<std::string, std::string> colour;
  for (const ScatterPoint& p : pts) {
    if (!colour.count(p.series)) colour[p.series] = kPalette[colour.size() % std::size(kPalette)];
  }
  std::string svg;
  for (const ScatterPoint& p : pts) {
    svg += fmt::format(
        "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"4\" fill=\"{}\" fill-opacity=\"0.8\">"
        "<title>{}: measured {:g}, predicted {:g}</title></circle>\n",
        a.x(p.x), a.y(p.y), colour[p.series], escape(p.series), p.x, p.y);
  }
  int row = 0;
  for (const auto& [series, c] : colour) {
    const int y = kTop + 10 + 18 * row++;
    svg += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"5\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
                       kScatterW - kRight + 20, y, c, kScatterW - kRight + 30, y + 4, escape(series));
  }
  return svg;
}

}  // namespace

std::string loglog_scatter_svg(const std::vector<ScatterPoint>& points, const std::string& title,
                               const std::string& x_label, const std::string& y_label) {
  std::vector<ScatterPoint> pts;
  for (const ScatterPoint& p : points) {
    if (p.x > 0 && p.y > 0 && std::isfinite(p.x) && std::isfinite(p.y)) pts.push_back(p);
  }
  const size_t dropped = points.size() - pts.size();
  const LogAxes a = axes_for(pts);
  std::string svg = header(kScatterW, kScatterH, title);
  if (dropped) {
    svg += fmt::format(
        "<text x=\"{}\" y=\"40\" text-anchor=\"middle\" fill=\"#666\">{} point(s) "
        "without a positive value not shown</text>\n",
        kScatterW / 2, dropped);
  }
  svg += grid(a) + points_and_legend(pts, a);
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", kLeft + a.pw / 2, kScatterH - 15,
                     escape(x_label));
  svg += fmt::format("<text x=\"20\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 20 {0})\">{1}</text>\n",
                     kTop + a.ph / 2, escape(y_label));
  return svg + "</svg>\n";
}

std::string bar_chart_svg(const std::vector<Bar>& bars, const std::string& title, const std::string& unit) {
  constexpr int kW = 720, kBarLeft = 140, kBarRight = 90, kBarTop = 45, kRow = 20;
  const int h = kBarTop + kRow * int(std::max<size_t>(bars.size(), 1)) + 40;
  double top = 0;
  for (const Bar& b : bars) top = std::max(top, b.value);
  if (!(top > 0)) top = 1;
  const double pw = kW - kBarLeft - kBarRight;
  std::string svg = header(kW, h, title);
  int i = 0;
  for (const Bar& b : bars) {
    const int y = kBarTop + kRow * i++;
    const double w = std::max(0.0, b.value) / top * pw;
    svg += fmt::format(
        "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>"
        "<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"{}\" fill=\"#1f77b4\"/>"
        "<text x=\"{:.1f}\" y=\"{}\">{:.4g} {}</text>\n",
        kBarLeft - 6, y + 13, escape(b.label), kBarLeft, y + 2, w, kRow - 4, kBarLeft + w + 4, y + 13, b.value,
        escape(unit));
  }
  return svg + "</svg>\n";
}

namespace {

constexpr int kLineW = 760, kLineH = 480, kLineRight = 210;

struct LinearAxes {
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  double pw = kLineW - kLeft - kLineRight, ph = kLineH - kTop - kBottom;
  double x(double v) const { return kLeft + (v - x0) / (x1 - x0) * pw; }
  double y(double v) const { return kTop + ph - (v - y0) / (y1 - y0) * ph; }
};

// A round step giving about five ticks over `span`.
double tick_step(double span) {
  const double raw = span / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10 * mag;
}

std::string linear_grid(const LinearAxes& a) {
  std::string svg = fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n",
                                kLeft, kTop, a.pw, a.ph);
  const double sx = tick_step(a.x1 - a.x0), sy = tick_step(a.y1 - a.y0);
  for (double v = std::ceil(a.x0 / sx) * sx; v <= a.x1 + 1e-9 * sx; v += sx) {
    svg += fmt::format(
        "<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ddd\"/>"
        "<text x=\"{0:.1f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        a.x(v), kTop, kTop + a.ph, kTop + a.ph + 16, tick_label(std::round(v / sx) * sx));
  }
  for (double v = std::ceil(a.y0 / sy) * sy; v <= a.y1 + 1e-9 * sy; v += sy) {
    svg += fmt::format(
        "<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{2}\" y2=\"{1:.1f}\" stroke=\"#ddd\"/>"
        "<text x=\"{3}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
        kLeft, a.y(v), kLeft + a.pw, kLeft - 6, a.y(v) + 4, tick_label(std::round(v / sy) * sy));
  }
  return svg;
}

}  // namespace

std::string line_chart_svg(const std::vector<Series>& series, const std::string& title, const std::string& x_label,
                           const std::string& y_label) {
  LinearAxes a;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Series& s : series) {
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  }
  if (x0 < x1) a.x0 = x0, a.x1 = x1;
  if (y0 < y1) {
    const double pad = 0.05 * (y1 - y0);
    a.y0 = y0 - pad, a.y1 = y1 + pad;
  } else if (std::isfinite(y0)) {
    a.y0 = y0 - 0.5, a.y1 = y0 + 0.5;
  }
  std::map<std::string, std::string> colour;
  std::string svg = header(kLineW, kLineH, title) + linear_grid(a);
  int row = 0;
  for (const Series& s : series) {
    const std::string group = s.name.substr(0, s.name.find(' '));
    if (!colour.count(group)) colour[group] = kPalette[colour.size() % std::size(kPalette)];
    const std::string& c = colour[group];
    std::string path;
    for (const auto& [x, y] : s.points) {
      if (std::isfinite(x) && std::isfinite(y)) path += fmt::format("{:.1f},{:.1f} ", a.x(x), a.y(y));
    }
    svg += fmt::format(
        "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{}><title>{}</title></polyline>\n", path,
        c, s.dashed ? " stroke-dasharray=\"6,4\"" : "", escape(s.name));
    for (const auto& [x, y] : s.marks) {
      svg +=
          fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"5\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"/>\n",
                      a.x(x), a.y(y), c);
    }
    const int y = kTop + 8 + 15 * row++;  // 15 px a legend row: 24 series fit beside the plot
    svg += fmt::format(
        "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"{}/><text x=\"{}\" "
        "y=\"{}\" font-size=\"11\">{}</text>\n",
        kLineW - kLineRight + 12, y, kLineW - kLineRight + 36, y, c, s.dashed ? " stroke-dasharray=\"6,4\"" : "",
        kLineW - kLineRight + 42, y + 4, escape(s.name));
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", kLeft + a.pw / 2, kLineH - 15,
                     escape(x_label));
  svg += fmt::format("<text x=\"20\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 20 {0})\">{1}</text>\n",
                     kTop + a.ph / 2, escape(y_label));
  return svg + "</svg>\n";
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw std::runtime_error("[energy] cannot write " + path);
}

}  // namespace meganeura::energy
