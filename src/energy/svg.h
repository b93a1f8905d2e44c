// Small, dependency-free SVG charts for the energy reports: predicted against measured energy
// on log-log axes (one colour per GPU, the identity line), and a bar chart for per-layer
// breakdowns. Output is a complete standalone SVG document.
#pragma once

#include <string>
#include <vector>

namespace meganeura::energy {

struct ScatterPoint {
  double x = 0;        // measured
  double y = 0;        // predicted
  std::string series;  // legend entry and colour: the GPU
};

// Points with a non-positive coordinate cannot sit on log axes and are left out (counted in
// the subtitle so the omission is visible).
std::string loglog_scatter_svg(const std::vector<ScatterPoint>& points, const std::string& title,
                               const std::string& x_label, const std::string& y_label);

struct Bar {
  std::string label;
  double value = 0;
};

std::string bar_chart_svg(const std::vector<Bar>& bars, const std::string& title, const std::string& unit);

struct Series {
  std::string name;                               // legend entry
  std::vector<std::pair<double, double>> points;  // (x, y), drawn in order
  bool dashed = false;
  std::vector<std::pair<double, double>> marks;  // points to circle (recommendations)
};

// Lines on linear axes (one colour per series name before its first space, so a GPU's energy and
// time share a colour); non-finite points are left out.
std::string line_chart_svg(const std::vector<Series>& series, const std::string& title, const std::string& x_label,
                           const std::string& y_label);

// Writes `text` to `path`, throwing "[energy] cannot write PATH" on failure.
void write_text_file(const std::string& path, const std::string& text);

}  // namespace meganeura::energy
