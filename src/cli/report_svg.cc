#include "cli/report_svg.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "core/units.h"

namespace motley::cli::svg {
namespace {

constexpr double kWidth = 1000;                                       // the chart area's width
constexpr double kLabelW = 230;                                       // the labels' column
constexpr const char* kColors[] = {"#4e79a7", "#f28e2b", "#59a14f"};  // compute, communication, copies
constexpr const char* kKindNames[] = {"compute", "communication", "copies"};

// A "nice" axis step for a range: 1, 2 or 5 times a power of ten, about `ticks` of them.
double NiceStep(double range, int ticks) {
  if (range <= 0) return 1;
  const double raw = range / ticks, mag = std::pow(10, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

std::string AxisNumber(double v) {
  if (v != 0 && (std::abs(v) >= 1e5 || std::abs(v) < 1e-2)) return fmt::format("{:.1e}", v);
  return fmt::format("{:g}", std::round(v * 1000) / 1000);
}

}  // namespace

std::string Escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Timeline(const std::string& id, const std::vector<TimelineRow>& rows, double axis_s) {
  const double row_h = 22, top = 8, axis_h = 26;
  const double height = top + row_h * static_cast<double>(rows.size()) + axis_h;
  const double scale = axis_s > 0 ? kWidth / axis_s : 0;
  std::string out = fmt::format(
      "<svg id=\"{}\" class=\"chart timeline\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "xmlns=\"http://www.w3.org/2000/svg\">\n",
      Escape(id), kLabelW + kWidth + 10, height, kLabelW + kWidth + 10, height);
  // Band offsets and heights within a row: compute on top (the widest), then communication, copies.
  const double band_y[] = {2, 12, 17}, band_h[] = {9, 4, 4};
  for (size_t r = 0; r < rows.size(); ++r) {
    const double y = top + row_h * static_cast<double>(r);
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"label\" text-anchor=\"end\">{}</text>\n",
                       kLabelW - 6, y + 13, Escape(rows[r].label));
    out += fmt::format(
        "<rect class=\"idle\" x=\"{}\" y=\"{:.1f}\" width=\"{}\" height=\"{}\"><title>{}: idle where "
        "no band is drawn</title></rect>\n",
        kLabelW, y + 1, kWidth, row_h - 3, Escape(rows[r].label));
    // Per kind, spans merged when less than a pixel apart: a step of thousands of ops stays light.
    for (int k = 0; k < 3; ++k) {
      std::vector<const Span*> spans;
      for (const Span& s : rows[r].spans)
        if (static_cast<int>(s.kind) == k) spans.push_back(&s);
      std::sort(spans.begin(), spans.end(),
                [](const Span* a, const Span* b) { return a->start_s < b->start_s; });
      for (size_t i = 0; i < spans.size();) {
        double begin = spans[i]->start_s, end = spans[i]->end_s, busy = 0;
        std::map<std::string, int> ops;
        size_t j = i;
        for (; j < spans.size() && (spans[j]->start_s - end) * scale < 1.0; ++j) {
          end = std::max(end, spans[j]->end_s);
          busy += spans[j]->end_s - spans[j]->start_s;
          ++ops[spans[j]->what.substr(0, spans[j]->what.find(' '))];
        }
        std::string what;
        for (const auto& [name, n] : ops) what += fmt::format("{}{} x{}", what.empty() ? "" : ", ", name, n);
        out += fmt::format(
            "<rect class=\"{}\" x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" "
            "fill=\"{}\"><title>{}: {} "
            "{}–{} ({} busy): {}</title></rect>\n",
            kKindNames[k], kLabelW + begin * scale, y + band_y[k], std::max(0.5, (end - begin) * scale),
            band_h[k], kColors[k], Escape(rows[r].label), kKindNames[k], FormatDuration(begin),
            FormatDuration(end), FormatDuration(busy), Escape(what));
        i = j;
      }
    }
  }
  // The time axis.
  const double y_axis = top + row_h * static_cast<double>(rows.size()) + 4;
  out += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" class=\"axis\"/>\n", kLabelW,
                     y_axis, kLabelW + kWidth, y_axis);
  const double step = NiceStep(axis_s, 8);
  for (double t = 0; axis_s > 0 && t <= axis_s * 1.0001; t += step)
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"middle\">{}</text>\n",
                       kLabelW + t * scale, y_axis + 16, t == 0 ? "0" : FormatDuration(t));
  out += "</svg>\n";
  return out;
}

std::string TimelineLegend() {
  std::string out = "<div class=\"legend\">";
  for (int k = 0; k < 3; ++k)
    out += fmt::format("<span><i style=\"background:{}\"></i>{}</span>", kColors[k], kKindNames[k]);
  out += "<span><i class=\"idle-key\"></i>idle</span></div>\n";
  return out;
}

std::string Bars(const std::string& id, const std::vector<Bar>& bars, const std::string& axis_label) {
  const double row_h = 24, top = 6;
  double most = 0;
  for (const Bar& b : bars) most = std::max(most, b.value);
  const double width = kWidth - 260, height = top + row_h * static_cast<double>(bars.size()) + 24;
  std::string out = fmt::format(
      "<svg id=\"{}\" class=\"chart bars\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "xmlns=\"http://www.w3.org/2000/svg\">\n",
      Escape(id), kLabelW + kWidth, height, kLabelW + kWidth, height);
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const double y = top + row_h * static_cast<double>(i);
    const double w = most > 0 && b.value > 0 ? width * b.value / most : 0;
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"label{}\" text-anchor=\"end\">{}</text>\n",
                       kLabelW - 6, y + 15, b.highlight ? " strong" : "", Escape(b.label));
    if (w > 0)
      out += fmt::format(
          "<rect class=\"bar{}\" x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"16\"><title>{}: "
          "{}</title></rect>\n",
          b.highlight ? " chosen" : "", kLabelW, y + 3, w, Escape(b.label), Escape(b.text));
    out += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"value\">{}</text>\n", kLabelW + w + 6, y + 15,
                       Escape(b.text));
  }
  out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"tick\">{}</text>\n", kLabelW,
                     top + row_h * static_cast<double>(bars.size()) + 14, Escape(axis_label));
  out += "</svg>\n";
  return out;
}

std::string Memory(const std::string& id, const std::vector<MemoryRow>& rows) {
  const double row_h = 22, top = 6;
  double most = 0;
  for (const MemoryRow& r : rows)
    most = std::max({most, r.capacity_bytes, r.predicted_bytes, r.measured_bytes});
  const double width = kWidth - 400, height = top + row_h * static_cast<double>(rows.size()) + 10;
  std::string out = fmt::format(
      "<svg id=\"{}\" class=\"chart memory\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "xmlns=\"http://www.w3.org/2000/svg\">\n",
      Escape(id), kLabelW + kWidth, height, kLabelW + kWidth, height);
  auto x = [&](double bytes) { return most > 0 ? width * bytes / most : 0; };
  for (size_t i = 0; i < rows.size(); ++i) {
    const MemoryRow& r = rows[i];
    const double y = top + row_h * static_cast<double>(i);
    const bool over = r.predicted_bytes > r.capacity_bytes || r.measured_bytes > r.capacity_bytes;
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" class=\"label\" text-anchor=\"end\">{}</text>\n",
                       kLabelW - 6, y + 14, Escape(r.label));
    out += fmt::format(
        "<rect class=\"capacity\" x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"16\"><title>{}: "
        "capacity {}</title></rect>\n",
        kLabelW, y + 2, x(r.capacity_bytes), Escape(r.label), FormatBytes(r.capacity_bytes));
    out += fmt::format(
        "<rect class=\"predicted{}\" x=\"{}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"10\"><title>{}: "
        "predicted peak {}</title></rect>\n",
        over ? " over" : "", kLabelW, y + 5, x(r.predicted_bytes), Escape(r.label),
        FormatBytes(r.predicted_bytes));
    std::string text =
        fmt::format("predicted {} of {}", FormatBytes(r.predicted_bytes), FormatBytes(r.capacity_bytes));
    if (r.measured_bytes >= 0) {
      out += fmt::format(
          "<rect class=\"measured\" x=\"{:.0f}\" y=\"{:.0f}\" width=\"4\" height=\"20\"><title>{}: "
          "measured peak {}</title></rect>\n",
          std::round(kLabelW + x(r.measured_bytes) - 2), y, Escape(r.label), FormatBytes(r.measured_bytes));
      text += fmt::format(", measured {}", FormatBytes(r.measured_bytes));
    }
    out +=
        fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"value\">{}</text>\n",
                    kLabelW + std::max(x(r.capacity_bytes), x(r.measured_bytes)) + 8, y + 14, Escape(text));
  }
  out += "</svg>\n";
  return out;
}

namespace {

// An x-y chart's box: where it is drawn and what it spans.
struct Frame {
  double left, top, w, h;
  double x0, x1, y0, y1;
  double px(double x) const { return left + w * (x - x0) / (x1 - x0); }
  double py(double y) const { return top + h * (1 - (y - y0) / (y1 - y0)); }
};

// Its grid and y ticks every ystep from y0, its x ticks at the multiples of xstep, and the axes'
// labels.
std::string Axes(const Frame& f, double xstep, double ystep, const std::string& x_label,
                 const std::string& y_label) {
  std::string out;
  for (double y = f.y0; y <= f.y1 + ystep / 2; y += ystep)
    out += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" class=\"grid\"/><text x=\"{}\" "
        "y=\"{:.1f}\" class=\"tick\" text-anchor=\"end\">{}</text>\n",
        f.left, f.py(y), f.left + f.w, f.py(y), f.left - 6, f.py(y) + 4, AxisNumber(y));
  for (double x = std::ceil(f.x0 / xstep) * xstep; x <= f.x1 + xstep / 100; x += xstep)
    out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" class=\"tick\" text-anchor=\"middle\">{}</text>\n",
                       f.px(x), f.top + f.h + 16, AxisNumber(x));
  out += fmt::format("<text x=\"{}\" y=\"{}\" class=\"tick\" text-anchor=\"middle\">{}</text>\n",
                     f.left + f.w / 2, f.top + f.h + 34, Escape(x_label));
  out += fmt::format(
      "<text x=\"14\" y=\"{}\" class=\"tick\" transform=\"rotate(-90 14 {})\" "
      "text-anchor=\"middle\">{}</text>\n",
      f.top + f.h / 2, f.top + f.h / 2, Escape(y_label));
  return out;
}

}  // namespace

std::string Lines(const std::string& id, const std::vector<Series>& series, const std::string& x_label,
                  const std::string& y_label) {
  const double w = kWidth - 100, h = 240, left = 70, top = 10, bottom = 40;
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const Series& s : series)
    for (const auto& [x, y] : s.points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  if (x0 > x1) x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  if (x1 == x0) x1 = x0 + 1;
  y0 = std::min(y0, 0.0);
  if (y1 == y0) y1 = y0 + 1;
  const double ystep = NiceStep(y1 - y0, 5);
  y1 = std::ceil(y1 / ystep) * ystep;
  auto px = [&](double x) { return left + w * (x - x0) / (x1 - x0); };
  auto py = [&](double y) { return top + h * (1 - (y - y0) / (y1 - y0)); };
  std::string out = fmt::format(
      "<svg id=\"{}\" class=\"chart lines\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "xmlns=\"http://www.w3.org/2000/svg\">\n",
      Escape(id), left + w + 20, top + h + bottom, left + w + 20, top + h + bottom);
  out += Axes({left, top, w, h, x0, x1, y0, y1}, NiceStep(x1 - x0, 8), ystep, x_label, y_label);
  for (const Series& s : series) {
    std::string points;
    for (const auto& [x, y] : s.points)
      if (std::isfinite(x) && std::isfinite(y)) points += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    if (s.dots) {
      for (const auto& [x, y] : s.points)
        if (std::isfinite(x) && std::isfinite(y))
          out += fmt::format(
              "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3.5\" fill=\"{}\"><title>{} at {}: {}</title>"
              "</circle>\n",
              px(x), py(y), s.color, Escape(s.name), AxisNumber(x), AxisNumber(y));
    }
    out += fmt::format(
        "<polyline class=\"series\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" points=\"{}\">"
        "<title>{}</title></polyline>\n",
        s.color, s.dots ? 1 : 1.6, points, Escape(s.name));
  }
  // The key.
  double kx = left + 10;
  for (const Series& s : series) {
    out += fmt::format(
        "<rect x=\"{:.1f}\" y=\"{}\" width=\"12\" height=\"4\" fill=\"{}\"/><text x=\"{:.1f}\" "
        "y=\"{}\" class=\"tick\">{}</text>\n",
        kx, top + 6, s.color, kx + 16, top + 11, Escape(s.name));
    kx += 30 + 7.0 * static_cast<double>(s.name.size());
  }
  out += "</svg>\n";
  return out;
}

std::string Scatter(const std::string& id, const std::vector<Dot>& dots, const std::string& x_label,
                    const std::string& y_label) {
  const double w = kWidth - 100, h = 300, left = 80, top = 24, bottom = 40;
  double x1 = 0, y1 = 0;
  for (const Dot& d : dots)
    if (std::isfinite(d.x) && std::isfinite(d.y)) x1 = std::max(x1, d.x), y1 = std::max(y1, d.y);
  const double xstep = NiceStep(x1 > 0 ? x1 : 1, 8), ystep = NiceStep(y1 > 0 ? y1 : 1, 5);
  x1 = std::max(xstep, std::ceil(x1 / xstep) * xstep);
  y1 = std::max(ystep, std::ceil(y1 / ystep) * ystep);
  auto px = [&](double x) { return left + w * x / x1; };
  auto py = [&](double y) { return top + h * (1 - y / y1); };
  std::string out = fmt::format(
      "<svg id=\"{}\" class=\"chart scatter\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "xmlns=\"http://www.w3.org/2000/svg\">\n",
      Escape(id), left + w + 20, top + h + bottom, left + w + 20, top + h + bottom);
  out += Axes({left, top, w, h, 0, x1, 0, y1}, xstep, ystep, x_label, y_label);
  // The front, by ascending price, joined.
  std::vector<std::pair<double, double>> front;
  for (const Dot& d : dots)
    if (d.kind == Dot::kFront || d.kind == Dot::kChosen) front.push_back({d.x, d.y});
  std::sort(front.begin(), front.end());
  std::string points;
  for (const auto& [x, y] : front) points += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
  out += fmt::format(
      "<polyline class=\"front\" fill=\"none\" stroke=\"#2f4b7c\" stroke-width=\"1.4\" points=\"{}\">"
      "<title>the front of price and speed: no allocation on it both cheaper and faster than another</title>"
      "</polyline>\n",
      points);
  // Candidates under the front, the front over them, the chosen and this plan on top.
  for (Dot::Kind kind : {Dot::kCandidate, Dot::kFront, Dot::kChosen, Dot::kThisPlan})
    for (const Dot& d : dots) {
      if (d.kind != kind || !std::isfinite(d.x) || !std::isfinite(d.y)) continue;
      static constexpr const char* kClass[] = {"candidate", "front", "chosen", "this-plan"};
      static constexpr const char* kStyle[] = {"r=\"3\" fill=\"#bbbbbb\"", "r=\"4.5\" fill=\"#7a9cc6\"",
                                               "r=\"7\" fill=\"#2f4b7c\"",
                                               "r=\"9\" fill=\"none\" stroke=\"#e15759\" stroke-width=\"2\""};
      out += fmt::format("<circle class=\"{}\" cx=\"{:.1f}\" cy=\"{:.1f}\" {}><title>{}</title></circle>\n",
                         kClass[kind], px(d.x), py(d.y), kStyle[kind], Escape(d.text));
    }
  out += "</svg>\n";
  return out;
}

}  // namespace motley::cli::svg
