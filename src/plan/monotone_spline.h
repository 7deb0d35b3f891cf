// A shape-preserving cubic spline (Fritsch-Carlson monotone Hermite interpolation): smooth like the
// cubic spline Poplar fits to its speed measurements, but it never overshoots the data, so a
// monotone set of points gives a monotone curve. Outside the points it stays at the end values.
#pragma once

#include <vector>

namespace motley {

class MonotoneSpline {
 public:
  /// REQUIRES: x strictly increasing, x.size() == y.size() >= 1.
  MonotoneSpline(std::vector<double> x, std::vector<double> y);
  double operator()(double x) const;

 private:
  std::vector<double> x_, y_, slope_;  // slope_: the Hermite tangent at each point
};

}  // namespace motley
