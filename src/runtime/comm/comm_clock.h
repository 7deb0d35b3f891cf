// CommClock: the time a rank's compute ops spend in communication they run inside themselves —
// tensor-parallel all-reduces, FlexTP's moves of units and their gradients — so that it counts as
// communication, not compute. On CPU the host waits: host seconds. On a GPU the host only queues
// the waits on the compute stream: the device's seconds, between timing events recorded on the
// compute stream around each wait, read once the device has finished the step.
#pragma once

#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include <c10/core/Event.h>
#include <torch/torch.h>

namespace motley {

class CommClock {
 public:
  struct Mark {
    std::chrono::steady_clock::time_point host;
    std::shared_ptr<c10::Event> device;  // on a GPU
  };
  /// Before a communication on `device` starts and is waited for.
  Mark Start(const torch::Device& device) const;
  /// After its wait is queued (GPU) or done (CPU).
  void Stop(const Mark& mark, const torch::Device& device);

  double host_s() const { return host_s_; }
  /// The device's seconds in the waits since the last Reset(): only once the device has run them.
  double DeviceSeconds() const;
  void Reset();

 private:
  double host_s_ = 0;
  std::vector<std::pair<std::shared_ptr<c10::Event>, std::shared_ptr<c10::Event>>> device_;
};

}  // namespace motley
