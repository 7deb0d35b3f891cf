#include "plan/monotone_spline.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace motley {

MonotoneSpline::MonotoneSpline(std::vector<double> x, std::vector<double> y)
    : x_(std::move(x)), y_(std::move(y)) {
  MOTLEY_CHECK_EQ(x_.size(), y_.size());
  MOTLEY_CHECK_GE(x_.size(), 1u);
  const size_t n = x_.size();
  slope_.assign(n, 0.0);
  if (n == 1) return;
  std::vector<double> delta(n - 1);
  for (size_t i = 0; i + 1 < n; ++i) {
    MOTLEY_CHECK_LT(x_[i], x_[i + 1]);
    delta[i] = (y_[i + 1] - y_[i]) / (x_[i + 1] - x_[i]);
  }
  slope_[0] = delta[0];
  slope_[n - 1] = delta[n - 2];
  for (size_t i = 1; i + 1 < n; ++i)
    slope_[i] = delta[i - 1] * delta[i] <= 0 ? 0.0 : (delta[i - 1] + delta[i]) / 2;
  // Fritsch-Carlson: limit the tangents so that each piece stays monotone.
  for (size_t i = 0; i + 1 < n; ++i) {
    if (delta[i] == 0) {
      slope_[i] = slope_[i + 1] = 0;
      continue;
    }
    const double a = slope_[i] / delta[i], b = slope_[i + 1] / delta[i];
    const double h = std::hypot(a, b);
    if (h > 3) {
      slope_[i] = 3 * a / h * delta[i];
      slope_[i + 1] = 3 * b / h * delta[i];
    }
  }
}

double MonotoneSpline::operator()(double x) const {
  if (x <= x_.front()) return y_.front();
  if (x >= x_.back()) return y_.back();
  const size_t i = static_cast<size_t>(std::upper_bound(x_.begin(), x_.end(), x) - x_.begin()) - 1;
  const double h = x_[i + 1] - x_[i], t = (x - x_[i]) / h;
  const double t2 = t * t, t3 = t2 * t;
  return (2 * t3 - 3 * t2 + 1) * y_[i] + (t3 - 2 * t2 + t) * h * slope_[i] + (-2 * t3 + 3 * t2) * y_[i + 1] +
         (t3 - t2) * h * slope_[i + 1];
}

}  // namespace motley
