// Simulator: executes a Schedule against a CostModel as discrete events, issuing each rank's ops as
// the runtime does — through ProgramWalker (plan/program_walker.h), in program order. The host is
// inside a compute op (and the gradient norm, and a tensor-parallel team's all-reduces) until it
// ends; collectives stay in flight until an op depends or conflicts on them, one at a time; copies,
// sends and receives run in the background. An issued op starts once the ops it depends on have
// finished (a copy also behind the one before it on its lane: LaneOf); the copies of one direction
// share the host link equally; ranks meet at recvs (data from the matching send) and collectives
// (all members present).
//
// Cost: O(E log E) in the number of ops E (one completion event per op, plus one for a copy each
// time the other lane of its direction starts or ends one; a rank is re-examined only when one of
// its ops finishes or a peer's send or collective releases it).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/job.h"
#include "core/status.h"
#include "plan/schedule.h"
#include "sim/cost_model.h"
#include "sim/flextp_prediction.h"

namespace motley {

struct SimConfig {
  bool record_trace = false;  // keep every op's start and end for WriteChromeTrace
  bool check_buffers = true;  // the walker checks what each rank holds (ProgramWalker::set_check_buffers)
  // Stop once the clock passes this (a planner that already has a plan this fast): the result is
  // then `stopped`, its step_time_s only a lower bound and its memory what was seen so far.
  double stop_after_s = std::numeric_limits<double>::infinity();
  TensorParallelConfig tensor_parallel =
      {};  // FlexTP's thresholds (its mode is the schedule's): flextp_prediction.h
};

struct DeviceSimReport {
  int rank = 0;
  int device = 0;
  std::string device_type;
  std::string compute_source;  // "profile" or "roofline"
  double compute_busy_s = 0;   // time the compute stream was busy
  double comm_busy_s = 0;      // time the comm stream was busy (waiting in recvs and collectives included)
  double busy_fraction = 0;    // compute busy / step time
  double idle_fraction = 0;    // 1 - busy_fraction
  double peak_memory_bytes = 0;
  double capacity_bytes = 0;
  bool out_of_memory = false;
  double peak_host_bytes = 0;
  double end_memory_bytes = 0;  // held at the end of the step: the static state if nothing leaked
  double end_host_bytes = 0;
};

struct TraceEvent {
  int rank = 0;
  int op = 0;
  double start_s = 0;
  double end_s = 0;
  // The runtime on a GPU, where spans are device times: when the host issued the op (-1: not kept).
  double host_start_s = -1;
  double host_end_s = -1;
};

struct SimResult {
  double step_time_s = 0;  // at least region_link_bound_s
  /// The step's bytes between the busiest pair of regions over the one link between them
  /// (sim/region_traffic.h): the step cannot take less. 0 in one region.
  double region_link_bound_s = 0;
  double tokens_per_s = 0;
  double tflops = 0;  // hardware FLOPs executed per second (recomputation included), in TFLOP/s
  double hfu = 0;     // tflops over the plan's devices' dense peak
  double mfu = 0;     // model FLOPs (no recomputation) over the same peak
  bool fits_memory = true;
  bool stopped = false;                  // at SimConfig::stop_after_s, before the step ended
  std::string oom_message;               // names every device over its capacity
  std::vector<DeviceSimReport> devices;  // by rank
  int64_t num_events = 0;                // ops finished (each op once)
  std::vector<TraceEvent> trace;
  std::vector<FlexTpTeamPrediction>
      flextp_teams;  // FlexTP's balance of each team the schedule's mode acts in
};

/// Runs one training step. A schedule that cannot finish (a recv with no send, a collective a
/// member never reaches) is an error naming where each stuck rank waits.
Result<SimResult> Simulate(const Schedule& schedule, const Cluster& cluster, const CostModel& costs,
                           const SimConfig& config = {});

/// Chrome trace (chrome://tracing, Perfetto): one process per rank, one thread per stream.
std::string ChromeTraceJson(const Schedule& schedule, const Cluster& cluster, const SimResult& result);

}  // namespace motley
