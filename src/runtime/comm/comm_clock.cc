#include "runtime/comm/comm_clock.h"

#include "runtime/device/cuda_device.h"

namespace motley {

CommClock::Mark CommClock::Start(const torch::Device& device) {
  if (before_wait_) before_wait_();
  Mark m;
  m.host = std::chrono::steady_clock::now();
  if (device.is_cuda()) m.device = RecordTimingEvent(device);
  return m;
}

void CommClock::Stop(const Mark& mark, const torch::Device& device) {
  host_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - mark.host).count();
  if (mark.device != nullptr) device_.emplace_back(mark.device, RecordTimingEvent(device));
  if (after_wait_) after_wait_();
}

double CommClock::DeviceSeconds() const {
  double s = 0;
  for (const auto& [start, end] : device_) s += EventSeconds(*start, *end);
  return s;
}

void CommClock::Reset() {
  host_s_ = 0;
  device_.clear();
}

}  // namespace motley
