#include "svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace strata::sim {
namespace {

std::string fmt(const char* f, double a, double b = 0) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), f, a, b);
  return buf;
}

// "1K", "4M", "1G": a power-of-two size for the x axis.
std::string sizeLabel(double bytes) {
  const char* units[] = {"", "K", "M", "G", "T"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  return fmt("%g", bytes) + units[u];
}

// XML text: the characters that would end it escaped.
std::string xml(const std::string& s) {
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

}  // namespace

std::string svgChart(const std::string& title, const std::string& yLabel, const std::vector<Series>& series) {
  const double W = 760, H = 460, left = 70, right = 170, top = 40, bottom = 50;
  double xmin = INFINITY, xmax = -INFINITY, ymax = 0;
  for (const Series& s : series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!(s.x[i] > 0) || !std::isfinite(s.y[i])) continue;
      xmin = std::min(xmin, std::log2(s.x[i]));
      xmax = std::max(xmax, std::log2(s.x[i]));
      ymax = std::max(ymax, s.y[i]);
    }
  if (!std::isfinite(xmin)) xmin = 0, xmax = 1;
  if (xmax == xmin) xmax = xmin + 1;
  // A round top for the y axis: 1, 2 or 5 times a power of ten.
  double step = 1;
  if (ymax > 0) {
    const double raw = ymax / 5, mag = std::pow(10, std::floor(std::log10(raw)));
    step = raw <= mag ? mag : raw <= 2 * mag ? 2 * mag : raw <= 5 * mag ? 5 * mag : 10 * mag;
  }
  const double ytop = std::max(step, std::ceil(ymax / step) * step);
  const double pw = W - left - right, ph = H - top - bottom;
  auto px = [&](double bytes) { return left + (std::log2(bytes) - xmin) / (xmax - xmin) * pw; };
  auto py = [&](double v) { return top + ph - v / ytop * ph; };

  std::string svg = fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\"", W, H) +
                    " font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += fmt("<rect width=\"%g\" height=\"%g\" fill=\"white\"/>\n", W, H);
  svg += fmt("<text x=\"%g\" y=\"24\" font-size=\"15\">", left) + xml(title) + "</text>\n";
  // Grid and axes.
  for (double v = 0; v <= ytop + step / 2; v += step) {
    svg += fmt("<line x1=\"%g\" x2=\"%g\"", left, left + pw) +
           fmt(" y1=\"%g\" y2=\"%g\" stroke=\"#ddd\"/>\n", py(v), py(v));
    svg += fmt("<text x=\"%g\" y=\"%g\" text-anchor=\"end\">", left - 6, py(v) + 4) + fmt("%g", v) + "</text>\n";
  }
  const int x0 = static_cast<int>(std::floor(xmin)), x1 = static_cast<int>(std::ceil(xmax));
  const int xstep = std::max(1, (x1 - x0) / 10);
  for (int e = x0; e <= x1; e += xstep) {
    const double b = std::ldexp(1.0, e);
    if (std::log2(b) < xmin - 1e-9 || std::log2(b) > xmax + 1e-9) continue;
    svg +=
        fmt("<line x1=\"%g\" x2=\"%g\"", px(b), px(b)) + fmt(" y1=\"%g\" y2=\"%g\" stroke=\"#eee\"/>\n", top, top + ph);
    svg += fmt("<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">", px(b), top + ph + 18) + sizeLabel(b) + "</text>\n";
  }
  svg += fmt("<rect x=\"%g\" y=\"%g\"", left, top) +
         fmt(" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#444\"/>\n", pw, ph);
  svg += fmt("<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">message size (bytes)</text>\n", left + pw / 2, H - 10);
  svg += fmt("<text transform=\"translate(18,%g) rotate(-90)\" text-anchor=\"middle\">", top + ph / 2) + xml(yLabel) +
         "</text>\n";
  // One polyline per series, with its legend entry.
  static const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
                                  "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"};
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    const char* color = kColors[k % (sizeof(kColors) / sizeof(kColors[0]))];
    std::string points;
    for (size_t i = 0; i < s.x.size(); ++i)
      if (s.x[i] > 0 && std::isfinite(s.y[i])) points += fmt("%.1f,%.1f ", px(s.x[i]), py(s.y[i]));
    svg += "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"" + std::string(color) + "\" points=\"" + points +
           "\"/>\n";
    const double ly = top + 10 + 20 * static_cast<double>(k);
    svg += fmt("<line x1=\"%g\" x2=\"%g\"", left + pw + 14, left + pw + 40) +
           fmt(" y1=\"%g\" y2=\"%g\" stroke-width=\"2\" stroke=\"", ly, ly) + color + "\"/>\n";
    svg += fmt("<text x=\"%g\" y=\"%g\">", left + pw + 46, ly + 4) + xml(s.name) + "</text>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace strata::sim
