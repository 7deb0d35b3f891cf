#include "profile/memory_probe.h"

#include <algorithm>
#include <map>
#include <vector>

#include <torch/torch.h>

#include "core/check.h"
#include "cost/state_bytes.h"
#include "plan/memory_model.h"
#include "profile/profiling_model.h"
#include "runtime/device/cuda_device.h"
#include "runtime/emulation/memory_ledger.h"
#include "runtime/model/llama_model.h"
#include "runtime/model/precision_dtypes.h"

namespace motley {
namespace {

// The probe's step on `d`; throws c10::OutOfMemoryError when it does not fit.
void ProbeStep(const MemoryProbe& probe, int64_t microbatch, const torch::Device& d) {
  const ModelSpec& model = *probe.model;
  ModelSpec pieces = model;
  pieces.num_layers = 1;
  LlamaModel m(pieces, 1);
  m->set_precision(probe.precision);
  m->to(d);
  const PieceParams pieces_params = PieceParamsOf(m);
  const StateBytesPerParam s = StateBytes(probe.precision);
  // The pieces' gradient buffers, real: the weights' gradients are added into them.
  std::map<const void*, torch::Tensor> grad_of;  // by the parameter's storage
  double real_params = 0, real_grads = 0;
  for (const torch::Tensor& p : m->parameters()) {
    grad_of[p.data_ptr()] = torch::zeros_like(p);
    real_params += static_cast<double>(p.nbytes());
    real_grads += static_cast<double>(p.nbytes());
  }
  const int dp = std::max(1, probe.dp_degree);
  const int z = probe.zero_stage;
  double ballast = 0;
  if (probe.pieces_only) {
    // The pieces' AdamW state, whole (ZeRO-0 on one device).
    ballast = real_params / BytesPerElement(MasterPrecision(probe.precision)) * s.optimizer;
  } else {
    // The ministage whose gradients are gathered and reduced at once, as Poplar lays it out.
    const DataParallelMemoryInput layout =
        PerLayerDataParallel(model, probe.precision, z, dp, probe.seq_len, true, probe.gloo_reduce_scatter);
    const double unit = layout.max_ministage_params > 0 ? layout.max_ministage_params
                                                        : static_cast<double>(TotalParams(model));
    ballast = ZeroStateBytes(static_cast<double>(TotalParams(model)), dp, z, probe.precision).device;
    // Below ZeRO-3 the full parameters are state, the pieces' among them; at ZeRO-3 the state holds
    // shards only, and two ministages' parameters are gathered at a time (the pieces stand for one).
    ballast += z < 3 ? -real_params : std::max(0.0, 2 * unit * s.params - real_params);
    // Below ZeRO-2 the full gradients are state, the pieces' among them; from ZeRO-2 a ministage's
    // full gradients are held while it runs (the pieces') and while the previous one is reduced.
    ballast += z < 2 ? -real_grads : unit * s.grads;
    // A reduction in flight: Gloo's staging buffer and a later reduction's output beside the shard
    // (plan/lower_state.cc counts the same).
    if (z >= 1) ballast += GlooReduceScatterBytes(unit * s.grads, dp, probe.gloo_reduce_scatter);
    if (z >= 1 && dp >= 2) ballast += unit * s.grads / dp;
  }
  const torch::Tensor ballast_bytes = torch::empty({static_cast<int64_t>(std::max(0.0, ballast))},
                                                   torch::TensorOptions().dtype(torch::kUInt8).device(d));

  const torch::Dtype act = ActivationDtype(probe.precision);
  const auto act_options = torch::TensorOptions().dtype(act).device(d);
  // Every layer's input kept for the backward (checkpointing), and the head's.
  const int64_t layers = probe.pieces_only ? 1 : model.num_layers;
  std::vector<torch::Tensor> boundaries;
  for (int64_t l = 0; l <= layers; ++l)
    boundaries.push_back(torch::randn({microbatch, probe.seq_len, model.hidden_size}, act_options));
  torch::Tensor tokens =
      torch::randint(model.vocab_size, {microbatch, probe.seq_len + 1}, torch::kInt64).to(d);
  const ModelSlice layer{false, 0, 1, false}, head{false, 1, 1, true}, embedding{true, 0, 0, false};
  {
    torch::NoGradGuard no_grad;  // the forward keeps nothing but the boundaries
    m->Run(embedding, tokens.narrow(1, 0, probe.seq_len), false);
    m->Run(layer, boundaries[0], false);
  }
  auto add_grads = [&](const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& g) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) grad_of.at(params[i].data_ptr()).add_(g[i]);
  };
  // The head: recomputed with a graph, the loss, back-propagated to its weights and its input.
  torch::Tensor dy;
  {
    torch::Tensor leaf = boundaries[layers].detach().requires_grad_(true);
    torch::Tensor logits = m->Run(head, leaf, false);
    std::vector<torch::Tensor> inputs = pieces_params.head;
    inputs.push_back(leaf);
    std::vector<torch::Tensor> g =
        torch::autograd::grad({NextTokenLoss(logits, tokens.narrow(1, 1, probe.seq_len))}, inputs);
    dy = g.back();
    g.pop_back();
    add_grads(pieces_params.head, g);
  }
  boundaries.pop_back();  // the head's input goes once its backward is done
  // A layer: recomputed from its input, back-propagated with the gradient from above.
  {
    torch::Tensor leaf = boundaries.back().detach().requires_grad_(true);
    torch::Tensor y = m->Run(layer, leaf, false);
    std::vector<torch::Tensor> inputs = pieces_params.layer;
    inputs.push_back(leaf);
    std::vector<torch::Tensor> g = torch::autograd::grad({y}, inputs, {dy});
    g.pop_back();  // the input's gradient: the next layer down's to use
    add_grads(pieces_params.layer, g);
  }
}

}  // namespace

ProbeMemory RunMemoryProbe(const MemoryProbe& probe, int64_t microbatch, int64_t capacity_bytes) {
  MOTLEY_CHECK(probe.model != nullptr);
  const torch::Device d = ProfilingDevice();
  MemoryLedger& ledger = MemoryLedger::Install();
  const int64_t saved = ledger.capacity_bytes();
  ledger.set_capacity_bytes(capacity_bytes > 0 ? ledger.used_bytes() + capacity_bytes : 0);
  ledger.ResetPeak();
  const int64_t ledger_base = ledger.used_bytes();
  // On a GPU, the caching allocator's peak; should its statistics be unavailable, the step is
  // judged by running out of memory alone.
  int64_t device_base = -1;
  if (d.is_cuda()) {
    try {
      ResetPeakDeviceMemory(d);
      device_base = PeakDeviceMemoryBytes(d);  // what is allocated now
    } catch (const c10::Error&) {
      device_base = -1;
    }
  }
  ProbeMemory out;
  try {
    ProbeStep(probe, microbatch, d);
  } catch (const c10::OutOfMemoryError&) {
    out.ran = false;
  }
  out.peak_bytes =
      device_base >= 0 ? PeakDeviceMemoryBytes(d) - device_base : ledger.peak_bytes() - ledger_base;
  ledger.set_capacity_bytes(saved);
  return out;
}

bool ProbeFits(const MemoryProbe& probe, int64_t microbatch, int64_t capacity_bytes) {
  const ProbeMemory step = RunMemoryProbe(probe, microbatch, capacity_bytes);
  return step.ran && (capacity_bytes <= 0 || step.peak_bytes <= capacity_bytes);
}

int64_t ProbeMaxMicrobatch(const MemoryProbe& probe, int64_t capacity_bytes, int64_t cap) {
  auto fits = [&](int64_t mb) { return ProbeFits(probe, mb, capacity_bytes); };
  if (!fits(1)) return 0;
  if (capacity_bytes <= 0) return cap;
  // Estimate from one microbatch's memory: the static part plus a per-sequence growth.
  auto peak_of = [&](int64_t mb) { return RunMemoryProbe(probe, mb, 0).peak_bytes; };
  const int64_t one = peak_of(1), two = peak_of(2);
  const int64_t per_sequence = std::max<int64_t>(1, two - one);
  const int64_t fixed = std::max<int64_t>(0, one - per_sequence);
  const int64_t guess = std::clamp<int64_t>((capacity_bytes - fixed) / per_sequence, 1, cap);
  // Bracket [fits, fails) around the guess by doubling, then binary-search.
  int64_t lo = 1, hi = cap + 1;
  if (fits(guess)) {
    lo = guess;
    for (int64_t step = 1; lo < cap;) {
      const int64_t next = std::min(cap, lo + step);
      if (!fits(next)) {
        hi = next;
        break;
      }
      lo = next;
      step *= 2;
    }
    if (lo == cap) return cap;
  } else {
    hi = guess;
    for (int64_t step = 1; hi > 1;) {
      const int64_t next = std::max<int64_t>(1, hi - step);
      if (fits(next)) {
        lo = next;
        break;
      }
      hi = next;
      step *= 2;
    }
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace motley
