#include "profile/reserve_probe.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/net.h"
#include "runtime/comm/communicator.h"
#include "runtime/device/cuda_device.h"

namespace motley {

Result<ReserveProbe> ReserveProbe::Start(const torch::Device& device) {
  if (!device.is_cuda() || !BuiltWithCuda())
    return Status::InvalidArgument(
        fmt::format("the reserve is measured on a CUDA device, not on {}", device.str()));
  ReserveProbe probe;
  probe.device_ = device;
  SynchronizeDevice(device);
  // The context: in use beyond the allocator's segments (which include one small block, made to
  // start the allocator).
  const int64_t before = DeviceMemoryInUseBytes(device) - ReservedDeviceMemoryBytes(device);
  probe.measured_.context_bytes = static_cast<double>(std::max<int64_t>(before, 0));
  // A communicator's buffers: a one-rank group over NCCL (as every GPU rank makes) and its first
  // all-reduce, which creates NCCL's communicator.
  Rendezvous rv;
  rv.master_port = FreeTcpPort();
  CommConfig config;
  config.gpu = true;
  config.heartbeat_timeout_s = 0;
  Result<std::unique_ptr<Communicator>> comm = Communicator::Connect(rv, config);
  if (comm.ok()) {
    torch::Tensor one = torch::ones({1}, torch::TensorOptions().device(device));
    if ((*comm)->AllReduceOnBackend((*comm)->world(), one).ok()) {
      SynchronizeDevice(device);
      const int64_t after = DeviceMemoryInUseBytes(device) - ReservedDeviceMemoryBytes(device);
      probe.measured_.communication_bytes = static_cast<double>(std::max<int64_t>(after - before, 0));
    }
  }
  ResetPeakDeviceMemory(device);
  return probe;
}

MeasuredReserve ReserveProbe::Finish() const {
  MeasuredReserve m = measured_;
  SynchronizeDevice(device_);
  m.fragmentation_bytes = static_cast<double>(
      std::max<int64_t>(PeakReservedDeviceMemoryBytes(device_) - PeakDeviceMemoryBytes(device_), 0));
  return m;
}

}  // namespace motley
