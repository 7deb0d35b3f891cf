#include "core/suggest.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

namespace motley {

size_t EditDistance(std::string_view a, std::string_view b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      size_t cost = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                            std::tolower(static_cast<unsigned char>(b[j - 1]))
                        ? 0
                        : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

std::optional<std::string> NearestName(std::string_view typo, std::span<const std::string> candidates) {
  if (typo.empty() || typo.size() > 200) return std::nullopt;  // nothing sensible to compare
  std::optional<std::string> best;
  size_t best_distance = SIZE_MAX;
  for (const auto& c : candidates) {
    size_t d = EditDistance(typo, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  if (!best) return std::nullopt;
  const size_t limit = std::max<size_t>(2, typo.size() / 3);
  if (best_distance <= limit) return best;
  // A missing or extra prefix or suffix ("ministages" for "num_ministages") is a plausible slip too.
  if (typo.size() >= 4) {
    for (const auto& c : candidates) {
      if (c.starts_with(typo) || c.ends_with(typo) || typo.starts_with(c) || typo.ends_with(c)) return c;
    }
  }
  return std::nullopt;
}

std::string DidYouMean(std::string_view typo, std::span<const std::string> candidates) {
  auto best = NearestName(typo, candidates);
  return best ? "; did you mean '" + *best + "'?" : "";
}

std::string DidYouMeanOrPeriod(std::string_view typo, std::span<const std::string> candidates) {
  std::string hint = DidYouMean(typo, candidates);
  return hint.empty() ? "." : hint;
}

std::string JoinNames(std::span<const std::string> names, std::string_view sep) {
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += sep;
    out += n;
  }
  return out;
}

}  // namespace motley
