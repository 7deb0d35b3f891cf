#include "runtime/flextp/resize_pretest.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "runtime/device/cuda_device.h"
#include "runtime/flextp/layer_work.h"

namespace motley {

namespace {

// The fastest of three forward and backward passes of an MLP slice under `work` (null: all its own
// units), its weights and input as fresh leaves each time, in seconds.
double FastestMlpPassS(const torch::Tensor& input, const torch::Tensor& gate, const torch::Tensor& up,
                       const torch::Tensor& down, LayerWork* work, torch::Device device) {
  auto now = [&] {
    SynchronizeDevice(device);
    return std::chrono::steady_clock::now();
  };
  double best = 1e300;
  for (int rep = 0; rep < 3; ++rep) {
    const torch::Tensor m = input.detach().requires_grad_(true);
    const torch::Tensor g = gate.detach().requires_grad_(true), u = up.detach().requires_grad_(true),
                        d = down.detach().requires_grad_(true);
    const auto start = now();
    MlpWithWork(m, g, u, d, work).sum().backward();
    best = std::min(best, std::chrono::duration<double>(now() - start).count());
  }
  return best;
}

}  // namespace

std::vector<std::pair<double, double>> TimeResizeOverhead(int64_t units, int64_t hidden, int64_t tokens,
                                                          torch::Device device, torch::Dtype dtype,
                                                          const std::vector<double>& ratios) {
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  // Values do not matter to the timing; the random generator (the training's) is left alone.
  const torch::Tensor gate = torch::full({units, hidden}, 0.01, opts),
                      up = torch::full({units, hidden}, 0.02, opts),
                      down = torch::full({hidden, units}, 0.01, opts);
  const torch::Tensor input = torch::full({1, std::max<int64_t>(1, tokens), hidden}, 0.1, opts);
  auto time_mlp = [&](double ratio) {
    LayerWork work;
    const auto keep = static_cast<int64_t>(std::llround((1 - ratio) * static_cast<double>(units)));
    if (ratio > 0)
      work.keep = torch::arange(keep, torch::TensorOptions().dtype(torch::kInt64).device(device));
    return FastestMlpPassS(input, gate, up, down, ratio > 0 ? &work : nullptr, device);
  };
  time_mlp(0);  // warm-up
  const double whole = time_mlp(0);
  std::vector<std::pair<double, double>> out;
  for (double ratio : ratios)
    out.push_back({ratio, std::max(0.0, (time_mlp(ratio) - (1 - ratio) * whole) / whole)});
  return out;
}

double TimeBorrowedCost(int64_t units, int64_t hidden, int64_t tokens, torch::Device device,
                        torch::Dtype dtype) {
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  units = std::max<int64_t>(2, units);
  const int64_t half = units / 2;
  const torch::Tensor gate = torch::full({units, hidden}, 0.01, opts),
                      up = torch::full({units, hidden}, 0.02, opts),
                      down = torch::full({hidden, units}, 0.01, opts);
  const torch::Tensor input = torch::full({1, std::max<int64_t>(1, tokens), hidden}, 0.1, opts);
  LayerWork borrowed;  // half a slice more, as received from a straggler
  borrowed.gate = gate.narrow(0, 0, half).clone();
  borrowed.up = up.narrow(0, 0, half).clone();
  borrowed.down = down.narrow(1, 0, half).contiguous();
  borrowed.grad_gate = torch::zeros_like(borrowed.gate);
  borrowed.grad_up = torch::zeros_like(borrowed.up);
  borrowed.grad_down = torch::zeros_like(borrowed.down);
  auto time_mlp = [&](int64_t own, LayerWork* work) {
    return FastestMlpPassS(input, gate.narrow(0, 0, own).contiguous(), up.narrow(0, 0, own).contiguous(),
                           down.narrow(1, 0, own).contiguous(), work, device);
  };
  time_mlp(units, &borrowed);  // warm-up
  // The own half should take about half the whole pass; under an eighth of it the difference is
  // the machine's noise (another process ran), and a ratio of noise can be any number: measured
  // again, up to three times, else the same as an own unit.
  for (int attempt = 0; attempt < 3; ++attempt) {
    const double whole = time_mlp(units, nullptr), less = time_mlp(units - half, nullptr),
                 more = time_mlp(units, &borrowed);
    const double own_s = whole - less, borrowed_s = more - whole;
    if (own_s >= whole / 8) return std::clamp(borrowed_s / own_s, 0.1, 100.0);
  }
  return 1.0;
}

}  // namespace motley
