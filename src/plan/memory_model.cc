#include "plan/memory_model.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/check.h"
#include "cost/state_bytes.h"

namespace motley {

DataParallelMemoryInput PerLayerDataParallel(const ModelSpec& model, Precision precision, int zero_stage,
                                             int dp_degree, int64_t seq_len, bool activation_checkpointing,
                                             bool gloo_reduce_scatter) {
  DataParallelMemoryInput in{
      &model, precision,           zero_stage, dp_degree, seq_len, activation_checkpointing,
      0,      gloo_reduce_scatter, -1};
  if (zero_stage >= 2)  // a ministage a layer: the last holds the head (and a tied model's copy)
    in.max_ministage_params = static_cast<double>(
        ParamsPerLayer(model) + std::max(EmbeddingParams(model), HeadParams(model) + TiedCopyParams(model)));
  return in;
}

namespace {

// The replicas the state is divided by: the degree, or one over the device's share (infinite for
// none: nothing sharded held).
double ShardDivisor(const DataParallelMemoryInput& in) {
  if (in.state_share < 0) return in.dp_degree;
  return in.state_share > 0 ? 1 / in.state_share : std::numeric_limits<double>::infinity();
}

// The parameters a device holds state for: a tied model in a ministage a layer keeps a copy of the
// embedding matrix with the head (runtime: LlamaModelImpl::UntieHead).
double HeldParams(const DataParallelMemoryInput& in) {
  const double copy = in.max_ministage_params > 0 ? static_cast<double>(TiedCopyParams(*in.model)) : 0;
  return static_cast<double>(TotalParams(*in.model)) + copy;
}

}  // namespace

double DataParallelStaticBytes(const DataParallelMemoryInput& in) {
  MOTLEY_CHECK(in.model != nullptr);
  const double p = HeldParams(in);
  return ZeroStateBytes(p, ShardDivisor(in), in.zero_stage, in.precision).device;
}

double DataParallelPeakBytes(const DataParallelMemoryInput& in, int64_t microbatch) {
  const ModelSpec& m = *in.model;
  const double p = HeldParams(in);
  const StateBytesPerParam s = StateBytes(in.precision);
  const double tokens = static_cast<double>(microbatch) * in.seq_len;
  const double act = tokens * m.hidden_size * BytesPerElement(in.precision);
  const double layer = LayerActivationBytesPerToken(m, in.seq_len, in.precision, false) * tokens;
  const double logits = tokens * LogitsBytesPerToken(m, in.precision);
  // Checkpointing keeps each layer's input and the head's; without it every layer keeps its
  // activations, and each ministage its input too.
  const double saved = in.activation_checkpointing ? (m.num_layers + 1) * act : m.num_layers * (act + layer);
  const double unit = in.max_ministage_params > 0 ? in.max_ministage_params : p;
  const double gathered = in.zero_stage == 3 ? 2 * unit * s.params : 0;
  double grads = in.zero_stage >= 2 ? 2 * unit * s.grads : 0;
  // Gloo's all-to-all receives every member's piece of this device's shard: the unit's gradients
  // with even shares.
  const double received =
      in.state_share < 0 ? unit * s.grads : in.dp_degree * in.state_share * unit * s.grads;
  if (in.zero_stage >= 1) grads += GlooReduceScatterBytes(received, in.dp_degree, in.gloo_reduce_scatter);
  // A reduction after the step's first writes beside the gradient shard (the runtime adds it in).
  if (in.zero_stage >= 1 && in.dp_degree >= 2) grads += unit * s.grads / ShardDivisor(in);
  const double forward = saved +
                         (in.activation_checkpointing
                              ? LayerForwardPeakBytesPerToken(m, in.seq_len, in.precision, false) * tokens
                              : 0) +
                         logits + gathered + grads;
  // Checkpointed, the backward recomputes one piece at a time (a layer, or the head) and the larger
  // counts; without, autograd runs through the ministage at once and returns all its weights'
  // gradients together (counted with the head's working set as well).
  const double working =
      in.activation_checkpointing
          ? CheckpointedBackwardBytes(m, in.seq_len, in.precision, tokens, /*head=*/true)
          : LayerBackwardBytesPerToken(m, in.seq_len, in.precision, false) * tokens +
                (LossSavedBytesPerToken(m, in.precision) + HeadBackwardExtraBytesPerToken(m, in.precision)) *
                    tokens +
                unit * s.grads;
  // A layer's backward holds the gradient of its output and makes its input's (working, model.h);
  // between ministages the boundary's gradient made is kept until sent.
  const double backward = saved + working + act + gathered + grads;
  return DataParallelStaticBytes(in) + std::max(forward, backward);
}

int64_t DataParallelMaxMicrobatch(const DataParallelMemoryInput& in, double capacity_bytes, int64_t limit) {
  if (DataParallelPeakBytes(in, 1) > capacity_bytes) return 0;
  int64_t lo = 1, hi = limit;  // peak grows with the microbatch
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (DataParallelPeakBytes(in, mid) <= capacity_bytes)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

double MinistageParams(const ModelSpec& m, const LayerRange& r) {
  double p = static_cast<double>(r.size()) * ParamsPerLayer(m);
  if (r.begin == 0) p += EmbeddingParams(m);
  if (r.end == m.num_layers) p += HeadParams(m);
  if (r.end == m.num_layers && r.begin > 0) p += TiedCopyParams(m);  // the model is split: the head's copy
  return p;
}

double PipelineDevicePeakBytes(const PipelineMemoryInput& in, int64_t microbatch, int64_t microbatches) {
  const ModelSpec& model = *in.model;
  const StateBytesPerParam state = StateBytes(in.precision);
  const double d = in.dp_degree;
  const int s = static_cast<int>(in.ministages.size());
  double ms_params = 0;
  int layers = 0;
  for (const auto& r : in.ministages) {
    ms_params = std::max(ms_params, MinistageParams(model, r) / in.tp_degree);
    layers += static_cast<int>(r.size());
  }
  const int ms_layers = (layers + s - 1) / s;
  double bytes = 0;
  if (in.offload && in.gradient_clipping) {
    // Two ministages gathered; every ministage's gradient shard held from its backward visit until
    // the updates after the global norm, which bring back the shard and moments of two ministages
    // at a time (plan/lower_state.cc).
    bytes += 2 * ms_params * state.params + 2 * ms_params / d * (state.params + state.optimizer);
    for (const auto& r : in.ministages) bytes += MinistageParams(model, r) / in.tp_degree / d * state.grads;
  } else if (in.offload) {
    bytes += 2 * ms_params * state.params + 2 * ms_params / d * (state.params + state.optimizer);
  } else {  // ZeRO-2: full parameters stay, gradients and optimizer state sharded
    for (const auto& r : in.ministages)
      bytes += ZeroStateBytes(MinistageParams(model, r) / in.tp_degree, d, 2, in.precision).device;
  }
  // One ministage's full gradients, and the larger checkpointed piece's backward.
  bytes += ms_params * state.grads;
  const double act =
      static_cast<double>(in.seq_len) * model.hidden_size * BytesPerElement(in.precision) * microbatch;
  const double in_flight = in.one_f_one_b
                               ? static_cast<double>(std::min<int64_t>(microbatches, in.stages_from_here))
                               : static_cast<double>(microbatches);
  const double saved = in.offload ? 2.0 * ms_layers * act : in_flight * layers * act;
  return bytes + saved + 4 * act +
         CheckpointedBackwardBytes(model, in.seq_len, in.precision,
                                   static_cast<double>(microbatch) * in.seq_len, in.holds_head, in.tp_degree);
}

}  // namespace motley
