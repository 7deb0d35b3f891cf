// DeviceEmulation: makes one CPU process behave like a slower device on slower links (docs/design.md,
// "Device emulation"). A compute op is stretched by sleeping until it
// has taken speed_factor times the CPU time it used — CPU time, not wall time, so that ranks
// sharing a machine's cores (and slowed by one another) are still speed_factor times slower than
// this machine's process would be alone; transfers are stretched to the bandwidth of the
// link the cluster file gives between the two devices (collectives: a ring over the slowest link
// of the group). Memory capacity is the MemoryLedger's job. With emulation off every call returns
// at once.
#pragma once

#include <functional>

#include <optional>
#include <vector>

#include "core/cluster.h"
#include "cost/comm_cost.h"

namespace motley {

class DeviceEmulation {
 public:
  DeviceEmulation() = default;  // off
  /// For the rank running cluster device `device`; off when the cluster has no [nodes.emulation].
  DeviceEmulation(const Cluster& cluster, int device);

  bool enabled() const { return cluster_ != nullptr; }
  /// A run-time slowdown on top of the device's speed ([[emulation.stragglers]] in the job), with
  /// or without cluster emulation; 1 = none.
  void set_slowdown(double factor) { slowdown_ = factor; }
  /// A run-time slowdown of the matrix multiplications only (`slows = "matmul"`, FlexTP's
  /// stragglers); starts this thread's MatmulCpuSeconds clock when > 1.
  void set_matmul_slowdown(double factor);
  /// Whether compute ops are stretched at all.
  bool stretches() const { return (enabled() && speed_factor_ > 1) || slowdown_ > 1 || matmul_slowdown_ > 1; }
  double speed_factor() const { return speed_factor_; }
  /// The emulated capacity in bytes, or 0 when not emulated.
  double memory_bytes() const;

  /// After a compute op that took `elapsed_s` of wall time and `cpu_s` of this process's CPU
  /// time, `matmul_cpu_s` of it in matrix multiplications: the extra time a slower device would
  /// take (0 when the op already took as long).
  double ExtraComputeSeconds(double elapsed_s, double cpu_s, double matmul_cpu_s = 0) const;
  /// The other side: how far the op ran past the emulated device's time (0 when it did not). On a
  /// host whose cores the ranks and their communication threads share, an op waits for a core;
  /// the device it emulates would not have.
  double LateComputeSeconds(double elapsed_s, double cpu_s, double matmul_cpu_s = 0) const;
  /// Sleeps ExtraComputeSeconds(...) less what earlier ops ran late (`*late_s`, taken from as it
  /// is used and added to when this op runs late), so that over a run of compute ops the rank
  /// keeps its emulated speed when the host makes it wait now and then. Returns the time slept.
  /// `while_sleeping`, when given, is called about every millisecond of the sleep (the host looks
  /// at its communication while the device it emulates computes); the sleep still ends on time.
  double StretchCompute(double elapsed_s, double cpu_s, double matmul_cpu_s, double* late_s,
                        const std::function<void()>& while_sleeping = {}) const;
  /// How long sending `bytes` to cluster device `peer_device` takes on the emulated link (0 when
  /// not emulated).
  double TransferSeconds(double bytes, int peer_device) const;
  /// How long a collective over `devices` moving `bytes` of payload takes on the emulated links (0
  /// when not emulated): Gloo's algorithm (cost/comm_cost.h), the nodes' network cards shared by
  /// their devices' flows.
  double CollectiveSeconds(double bytes, const std::vector<int>& devices, CollectiveKind kind) const;

 private:
  /// How long a compute op of this CPU time takes on the emulated device; none when compute is not
  /// stretched.
  std::optional<double> EmulatedComputeSeconds(double cpu_s, double matmul_cpu_s) const;

  const Cluster* cluster_ = nullptr;
  int device_ = 0;
  std::vector<double> nic_bytes_per_s_;  // each node's network card (cost/comm_cost.h NodeNics)
  double speed_factor_ = 1.0;
  double slowdown_ = 1.0;
  double matmul_slowdown_ = 1.0;
};

/// CPU time spent computing so far, in seconds: the calling thread's when torch runs one thread
/// (communication threads excluded), else the whole process's.
double ComputeCpuSeconds();
/// CPU time this thread has spent in matrix multiplications (aten::mm, aten::addmm — linear
/// projections, forward and backward) since a set_matmul_slowdown(> 1) on it started the clock (a
/// torch RecordFunction callback on this thread); 0 before.
double MatmulCpuSeconds();
/// Sleeps `seconds` (no-op when <= 0).
void SleepSeconds(double seconds);

}  // namespace motley
