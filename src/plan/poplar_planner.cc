#include "plan/poplar_planner.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "core/units.h"
#include "plan/memory_model.h"

namespace motley {
double DataParallelSyncS(const PlannerCosts& costs, const std::vector<int>& devices, const ModelSpec& model,
                         Precision p, int zero_stage) {
  const double params = static_cast<double>(TotalParams(model));
  const StateBytesPerParam s = StateBytes(p);
  switch (zero_stage) {
    case 0:
      return costs.CollectiveS(OpKind::kAllReduce, devices, params * s.grads);
    case 1:
      return costs.CollectiveS(OpKind::kReduceScatter, devices, params * s.grads) +
             costs.CollectiveS(OpKind::kAllGather, devices, params * s.params);
    case 2:
      return costs.CollectiveS(OpKind::kReduceScatter, devices, params * s.grads);
    default:  // gather for forward and backward, reduce the gradients
      return 2 * costs.CollectiveS(OpKind::kAllGather, devices, params * s.params) +
             costs.CollectiveS(OpKind::kReduceScatter, devices, params * s.grads);
  }
}

PoplarDeviceCurve SpeedCurve(const PlannerCosts& costs, const ModelSpec& model, int device,
                             int64_t max_microbatch) {
  PoplarDeviceCurve c;
  c.device = device;
  c.max_microbatch = max_microbatch;
  for (int64_t b = 1;; b = std::min(b * 2, c.max_microbatch)) {
    c.sizes.push_back(static_cast<double>(b));
    c.times_s.push_back(model.num_layers * costs.Slowdown(c.device) *
                        (costs.LayerForwardS(c.device, b) + costs.LayerBackwardS(c.device, b)));
    if (b == c.max_microbatch) break;
  }
  return c;
}

Result<PoplarPlan> PlanPoplar(const Cluster& cluster, const ModelSpec& model, const PlannerCosts& costs,
                              const PoplarRequest& request) {
  std::vector<int> devices = request.devices;
  if (devices.empty())
    for (int d = 0; d < cluster.num_devices(); ++d) devices.push_back(d);
  PoplarPlan out;
  // ZeRO-2/3 reduce (and ZeRO-3 gathers) one layer at a time: one ministage per layer.
  DataParallelMemoryInput mem =
      PerLayerDataParallel(model, request.precision, request.zero_stage, static_cast<int>(devices.size()),
                           request.seq_len, request.activation_checkpointing, cluster.emulated());
  // The lowest stage at which every device fits a microbatch of one sequence.
  std::string raised;
  std::map<std::string, std::string> limits_note;  // by device type, where the profile measured them
  for (;; ++mem.zero_stage) {
    mem = PerLayerDataParallel(model, mem.precision, mem.zero_stage, mem.dp_degree, mem.seq_len,
                               mem.activation_checkpointing, mem.gloo_reduce_scatter);
    if (mem.zero_stage > 3) {
      return Status::OutOfMemory(
          fmt::format("no ZeRO stage fits a microbatch of 1 sequence of {} tokens of {} on every device "
                      "({}); add devices, "
                      "shorten the sequences or use a pipeline (strategy zorse)",
                      request.seq_len, model.name, raised));
    }
    out.max_microbatch.clear();
    limits_note.clear();
    std::string short_of;
    for (int d : devices) {
      // Measured by the profiler where it measured this model, degree and memory (Poplar's
      // Algorithm 1 against the device's allocator); the memory model otherwise, and as a cross-check.
      const int64_t modelled =
          DataParallelMaxMicrobatch(mem, cluster.usable_memory_bytes(d), request.max_microbatch);
      const std::optional<int64_t> measured = costs.MeasuredMaxMicrobatch(d, mem.zero_stage, mem.dp_degree);
      out.max_microbatch.push_back(measured ? std::min(*measured, request.max_microbatch) : modelled);
      if (measured && !limits_note.count(cluster.spec(d).name))
        limits_note[cluster.spec(d).name] =
            fmt::format("{}: at most {} sequences a microbatch (measured; the memory model says {})",
                        cluster.spec(d).name, out.max_microbatch.back(), modelled);
      if (out.max_microbatch.back() == 0 && short_of.empty())
        short_of = measured
                       ? fmt::format("device {} ({}, {}) fits no sequence at ZeRO-{} (measured)", d,
                                     cluster.spec(d).name,
                                     FormatBytes(cluster.usable_memory_bytes(d)) + " usable", mem.zero_stage)
                       : fmt::format("device {} ({}, {}) needs {} at ZeRO-{}", d, cluster.spec(d).name,
                                     FormatBytes(cluster.usable_memory_bytes(d)) + " usable",
                                     FormatBytes(DataParallelPeakBytes(mem, 1)), mem.zero_stage);
    }
    if (short_of.empty()) break;
    raised += (raised.empty() ? "" : "; ") + short_of;
  }

  std::vector<PoplarDeviceCurve> curves;
  for (size_t i = 0; i < devices.size(); ++i)
    curves.push_back(SpeedCurve(costs, model, devices[i], out.max_microbatch[i]));
  const double sync_s = DataParallelSyncS(costs, devices, model, request.precision, mem.zero_stage);
  MOTLEY_ASSIGN_OR_RETURN(out.allocation,
                          PoplarAllocate(curves, mem.zero_stage, request.global_batch_sequences, sync_s));

  Plan& p = out.plan;
  p.strategy = "poplar";
  p.seq_len = request.seq_len;
  p.precision = request.precision;
  p.schedule = PipelineSchedule::kGPipe;
  p.zero_stage = mem.zero_stage;
  p.activation_checkpointing = request.activation_checkpointing;
  GroupPlan g;
  const int layers = static_cast<int>(model.num_layers);
  g.ministages = mem.zero_stage >= 2 ? SplitLayers(0, layers, layers) : std::vector<LayerRange>{{0, layers}};
  g.devices = out.allocation.devices;
  p.groups = {g};
  std::string limits;
  for (const auto& [type, note] : limits_note) limits += "; " + note;
  out.explain =
      fmt::format("ZeRO-{}{}{}; {}", mem.zero_stage,
                  raised.empty() ? "" : fmt::format(" (raised from ZeRO-{}: {})", request.zero_stage, raised),
                  limits, out.allocation.explain);
  return out;
}

}  // namespace motley
