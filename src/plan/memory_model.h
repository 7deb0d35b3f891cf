// The memory model planners use to decide what fits (Zorse Eq. 2: parameters + gradients +
// optimizer state + activations), by the same accounting the lowering gives its ops, so that a plan
// the planner thinks fits also fits in the simulator and in the runtime's ledger.
#pragma once

#include <cstdint>
#include <vector>

#include "core/model.h"
#include "plan/plan.h"

namespace motley {

struct DataParallelMemoryInput {
  const ModelSpec* model = nullptr;
  Precision precision = Precision::kBf16;
  int zero_stage = 0;
  int dp_degree = 1;  // devices sharing the ZeRO shards
  int64_t seq_len = 1024;
  bool activation_checkpointing = true;
  /// Parameters of the largest ministage (the unit gathered in ZeRO-3 and reduced in ZeRO-2/3);
  /// 0 = one ministage holding the whole model.
  double max_ministage_params = 0;
  /// Emulated (CPU) devices: Gloo has no reduce-scatter, and its all-to-all stand-in holds a buffer
  /// as large as the unit's gradients while it runs.
  bool gloo_reduce_scatter = false;
  /// This device's share of the sharded state (Cephalo's state shares, plan/state_shares.h);
  /// negative: an even one, 1 / dp_degree. 0: none (what the device holds apart from its state).
  double state_share = -1;
};

/// A data-parallel plan as Poplar lays it out: one ministage per layer from ZeRO-2 (the largest
/// holds a layer and the embedding or the head), the whole model in one below.
DataParallelMemoryInput PerLayerDataParallel(const ModelSpec& model, Precision precision, int zero_stage,
                                             int dp_degree, int64_t seq_len, bool activation_checkpointing,
                                             bool gloo_reduce_scatter);

/// Bytes held for the whole step: parameters, gradients and optimizer state after ZeRO sharding.
double DataParallelStaticBytes(const DataParallelMemoryInput& in);

/// An upper bound of one device's peak in data parallelism with microbatches of `microbatch`
/// sequences: the static state, the saved layer boundaries, one layer's working memory and the
/// logits, and — the lowering keeps at most two of each in flight — two gathered ministages
/// (ZeRO-3) and two ministage gradient buffers (ZeRO-2/3).
double DataParallelPeakBytes(const DataParallelMemoryInput& in, int64_t microbatch);

/// The largest microbatch (up to `limit`) whose peak fits `capacity_bytes`; 0 if none does.
int64_t DataParallelMaxMicrobatch(const DataParallelMemoryInput& in, double capacity_bytes, int64_t limit);

/// The parameters of a pipeline stage's layers `r`, with the embedding where it begins the model
/// and the head (and a tied model's copy of the embedding, where the model is split) where it ends it.
double MinistageParams(const ModelSpec& model, const LayerRange& r);

/// One device of a Zorse pipeline group (zorse.txt §4.3.4, Eq. 2): ZeRO-2 inside the group, its
/// layers in ministages; with offload two ministages resident and the rest on the host.
struct PipelineMemoryInput {
  const ModelSpec* model = nullptr;
  Precision precision = Precision::kBf16;
  int64_t seq_len = 1024;
  std::vector<LayerRange> ministages;  // the group's, in order
  int tp_degree = 1;                   // a tensor-parallel run's width (each rank holds 1/tp)
  int dp_degree = 1;                   // the group's replicas (its devices over tp): ZeRO's divisor
  bool holds_head = false;             // a ministage of the group ends the model
  bool offload = true;                 // parameters and activations offloaded (Zorse's default)
  // With offload and clipping, every ministage's gradient shard is held from its backward until
  // the updates after the global norm (plan/lower_state.cc).
  bool gradient_clipping = true;
  // Microbatches in flight at once without offload: all of a device's under GPipe and interleaving;
  // under 1F1B its warm-up, at most the stages from its group on (pipeline_order.cc).
  bool one_f_one_b = false;
  int stages_from_here = 1;
};

/// An upper bound of the device's peak with `microbatches` microbatches of `microbatch` sequences:
/// its parameter, gradient and optimizer state (two ministages gathered with offload, ZeRO-2's
/// shards without), one ministage's full gradients, the saved layer boundaries, four boundary
/// buffers and the larger checkpointed piece's backward (a layer's, or the head's).
double PipelineDevicePeakBytes(const PipelineMemoryInput& in, int64_t microbatch, int64_t microbatches);

}  // namespace motley
