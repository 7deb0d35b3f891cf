#include "runtime/emulation/device_emulation.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <thread>

#include <time.h>

#include "cost/comm_cost.h"

namespace motley {

DeviceEmulation::DeviceEmulation(const Cluster& cluster, int device) {
  const EmulationConfig* emu = cluster.emulation(device);
  if (emu == nullptr) return;
  cluster_ = &cluster;
  device_ = device;
  speed_factor_ = emu->speed_factor;
  nic_bytes_per_s_ = NodeNics(FirstDeviceOfEachNode(cluster),
                              [&cluster](int a, int b) { return cluster.LinkBetween(a, b); });
}

double DeviceEmulation::memory_bytes() const { return enabled() ? cluster_->memory_bytes(device_) : 0.0; }

void SleepSeconds(double seconds) {
  if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

namespace {

thread_local bool matmul_clock_started = false;
thread_local int matmul_depth = 0;
thread_local double matmul_started_s = 0, matmul_total_s = 0;

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

bool IsMatmul(const at::RecordFunction& fn) {
  const char* name = fn.name();
  return name != nullptr && (std::strcmp(name, "aten::mm") == 0 || std::strcmp(name, "aten::addmm") == 0);
}

std::unique_ptr<at::ObserverContext> MatmulStart(const at::RecordFunction& fn) {
  if (IsMatmul(fn) && matmul_depth++ == 0) matmul_started_s = ThreadCpuSeconds();
  return nullptr;
}

void MatmulEnd(const at::RecordFunction& fn, at::ObserverContext*) {
  if (IsMatmul(fn) && --matmul_depth == 0) matmul_total_s += ThreadCpuSeconds() - matmul_started_s;
}

}  // namespace

void DeviceEmulation::set_matmul_slowdown(double factor) {
  matmul_slowdown_ = factor;
  if (factor > 1 && !matmul_clock_started) {
    at::addThreadLocalCallback(
        at::RecordFunctionCallback(MatmulStart, MatmulEnd).scopes({at::RecordScope::FUNCTION}));
    matmul_clock_started = true;
  }
}

double MatmulCpuSeconds() { return matmul_total_s; }

std::optional<double> DeviceEmulation::EmulatedComputeSeconds(double cpu_s, double matmul_cpu_s) const {
  const double factor = (enabled() ? speed_factor_ : 1.0) * slowdown_;
  if (factor <= 1 && matmul_slowdown_ <= 1) return std::nullopt;
  return factor * (cpu_s + (matmul_slowdown_ - 1) * matmul_cpu_s);
}

double DeviceEmulation::ExtraComputeSeconds(double elapsed_s, double cpu_s, double matmul_cpu_s) const {
  const std::optional<double> emulated_s = EmulatedComputeSeconds(cpu_s, matmul_cpu_s);
  return emulated_s ? std::max(0.0, *emulated_s - elapsed_s) : 0.0;
}

double DeviceEmulation::LateComputeSeconds(double elapsed_s, double cpu_s, double matmul_cpu_s) const {
  const std::optional<double> emulated_s = EmulatedComputeSeconds(cpu_s, matmul_cpu_s);
  return emulated_s ? std::max(0.0, elapsed_s - *emulated_s) : 0.0;
}

double DeviceEmulation::StretchCompute(double elapsed_s, double cpu_s, double matmul_cpu_s, double* late_s,
                                       const std::function<void()>& while_sleeping) const {
  double sleep_s = ExtraComputeSeconds(elapsed_s, cpu_s, matmul_cpu_s);
  const double made_up_s = std::min(sleep_s, *late_s);
  *late_s += LateComputeSeconds(elapsed_s, cpu_s, matmul_cpu_s) - made_up_s;
  sleep_s -= made_up_s;
  if (!while_sleeping || sleep_s <= 0) {
    SleepSeconds(sleep_s);
    return sleep_s;
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point end =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(sleep_s));
  for (Clock::time_point now = Clock::now(); now < end; now = Clock::now()) {
    while_sleeping();
    std::this_thread::sleep_until(std::min(end, Clock::now() + std::chrono::milliseconds(1)));
  }
  return sleep_s;
}

double ComputeCpuSeconds() {
  // The calling thread's: ranks compute on one thread (one torch and one BLAS thread, as `motley
  // launch` sets them up), while Gloo's and the senders' threads work on communication.
  timespec t{};
  clock_gettime(at::get_num_threads() == 1 ? CLOCK_THREAD_CPUTIME_ID : CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// The simulator's formulas (cost/comm_cost.h) over the cluster's links.
double DeviceEmulation::TransferSeconds(double bytes, int peer_device) const {
  if (!enabled() || peer_device == device_) return 0;
  return TransferS(cluster_->LinkBetween(device_, peer_device), bytes);
}

double DeviceEmulation::CollectiveSeconds(double bytes, const std::vector<int>& devices,
                                          CollectiveKind kind) const {
  if (!enabled()) return 0;
  const Cluster& c = *cluster_;
  // Emulated devices are CPU processes: Gloo runs their collectives.
  const Network network{[&c](int a, int b) { return c.LinkBetween(a, b); },
                        [&c](int d) { return c.devices[d].node; }, nic_bytes_per_s_,
                        CollectiveLibrary::kGloo};
  return CollectiveS(kind, devices, bytes, network);
}

}  // namespace motley
