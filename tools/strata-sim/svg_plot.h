// A line chart as a standalone SVG file: busbw against message size, one line per algorithm, log2 x axis. Written
// here so strata-sim plots without Python or gnuplot on the machine.
#pragma once

#include <string>
#include <vector>

namespace strata::sim {

struct Series {
  std::string name;
  std::vector<double> x;  // bytes
  std::vector<double> y;  // GB/s (NaN: no point)
};

/// The SVG text of a chart titled `title`.
std::string svgChart(const std::string& title, const std::string& yLabel, const std::vector<Series>& series);

}  // namespace strata::sim
