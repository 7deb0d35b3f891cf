#include "core/rope.h"

#include <cmath>
#include <numbers>

namespace motley {

const char* RopeScalingTypeName(RopeScaling::Type type) {
  switch (type) {
    case RopeScaling::Type::kNone:
      return "none";
    case RopeScaling::Type::kLinear:
      return "linear";
    case RopeScaling::Type::kDynamic:
      return "dynamic";
    case RopeScaling::Type::kLlama3:
      return "llama3";
  }
  return "none";
}

std::vector<double> RopeInverseFrequencies(const ModelSpec& m, int64_t seq_len) {
  const RopeScaling& s = m.rope_scaling;
  const int64_t d = m.head_dim();
  double theta = m.rope_theta;
  if (s.type == RopeScaling::Type::kDynamic && seq_len > m.max_seq_len) {
    const double grown =
        s.factor * static_cast<double>(seq_len) / static_cast<double>(m.max_seq_len) - (s.factor - 1);
    theta *= std::pow(grown, static_cast<double>(d) / static_cast<double>(d - 2));
  }
  std::vector<double> inv(static_cast<size_t>(d / 2));
  for (int64_t i = 0; i < d / 2; ++i)
    inv[static_cast<size_t>(i)] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(d));
  if (s.type == RopeScaling::Type::kLinear) {
    for (double& f : inv) f /= s.factor;
  } else if (s.type == RopeScaling::Type::kLlama3) {
    const double context = static_cast<double>(s.original_max_position_embeddings);
    const double low_wavelen = context / s.low_freq_factor, high_wavelen = context / s.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f /= s.factor;
      } else if (wavelen >= high_wavelen) {  // the medium band: interpolated between the two
        const double smooth =
            (context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
  }
  return inv;
}

}  // namespace motley
