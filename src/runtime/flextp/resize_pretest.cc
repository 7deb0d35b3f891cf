#include "runtime/flextp/resize_pretest.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "runtime/device/cuda_device.h"
#include "runtime/flextp/layer_work.h"

namespace motley {

std::vector<std::pair<double, double>> TimeResizeOverhead(int64_t units, int64_t hidden, int64_t tokens,
                                                          torch::Device device, torch::Dtype dtype,
                                                          const std::vector<double>& ratios) {
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  auto now = [&] {
    SynchronizeDevice(device);
    return std::chrono::steady_clock::now();
  };
  // Values do not matter to the timing; the random generator (the training's) is left alone.
  const torch::Tensor gate = torch::full({units, hidden}, 0.01, opts), up = torch::full({units, hidden}, 0.02, opts),
                      down = torch::full({hidden, units}, 0.01, opts);
  const torch::Tensor input = torch::full({1, std::max<int64_t>(1, tokens), hidden}, 0.1, opts);
  auto time_mlp = [&](double ratio) {
    LayerWork work;
    const auto keep = static_cast<int64_t>(std::llround((1 - ratio) * static_cast<double>(units)));
    if (ratio > 0) work.keep = torch::arange(keep, torch::TensorOptions().dtype(torch::kInt64).device(device));
    double best = 1e300;
    for (int rep = 0; rep < 3; ++rep) {
      const torch::Tensor m = input.detach().requires_grad_(true);
      const torch::Tensor g = gate.detach().requires_grad_(true), u = up.detach().requires_grad_(true),
                          d = down.detach().requires_grad_(true);
      const auto start = now();
      MlpWithWork(m, g, u, d, ratio > 0 ? &work : nullptr).sum().backward();
      best = std::min(best, std::chrono::duration<double>(now() - start).count());
    }
    return best;
  };
  time_mlp(0);  // warm-up
  const double whole = time_mlp(0);
  std::vector<std::pair<double, double>> out;
  for (double ratio : ratios) out.push_back({ratio, std::max(0.0, (time_mlp(ratio) - (1 - ratio) * whole) / whole)});
  return out;
}

}  // namespace motley
