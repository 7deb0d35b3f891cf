// CommClock: the time a rank's compute ops spend in communication they run inside themselves —
// tensor-parallel all-reduces, FlexTP's moves of units and their gradients — so that it counts as
// communication, not compute. On CPU the host waits: host seconds. On a GPU the host only queues
// the waits on the compute stream: the device's seconds, between timing events recorded on the
// compute stream around each wait, read once the device has finished the step.
#pragma once

#include <chrono>
#include <functional>
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
  /// Before a communication on `device` starts and is waited for (runs the before-wait hook first).
  Mark Start(const torch::Device& device);
  /// After its wait is queued (GPU) or done (CPU) (then runs the after-wait hook).
  void Stop(const Mark& mark, const torch::Device& device);

  /// Called around every wait this clock times: an emulated device stretches the compute before a
  /// wait to its own speed (so that a team meets at each all-reduce when the devices it emulates
  /// would) and starts timing the next stretch of compute after it. Unset: nothing.
  void set_hooks(std::function<void()> before_wait, std::function<void()> after_wait) {
    before_wait_ = std::move(before_wait);
    after_wait_ = std::move(after_wait);
  }

  double host_s() const { return host_s_; }
  /// The device's seconds in the waits since the last Reset(): only once the device has run them.
  double DeviceSeconds() const;
  void Reset();

 private:
  double host_s_ = 0;
  std::function<void()> before_wait_, after_wait_;
  std::vector<std::pair<std::shared_ptr<c10::Event>, std::shared_ptr<c10::Event>>> device_;
};

}  // namespace motley
