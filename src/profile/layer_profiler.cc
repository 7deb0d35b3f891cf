#include "profile/layer_profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include <time.h>

#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include "core/units.h"
#include "profile/memory_probe.h"
#include "runtime/device/cuda_device.h"
#include "runtime/emulation/memory_ledger.h"
#include "runtime/flextp/resize_pretest.h"
#include "runtime/model/llama_model.h"
#include "runtime/model/precision_dtypes.h"
#include "runtime/model/tensor_parallel.h"
#include "runtime/optim/adamw.h"

// OpenBLAS's thread count, when torch's BLAS is OpenBLAS (a weak reference: absent otherwise).
extern "C" void openblas_set_num_threads(int) __attribute__((weak));

namespace motley {
namespace {

// Measures as a rank under `motley launch` runs: on CPU one torch thread and one BLAS thread.
class RankLikeThreads {
 public:
  explicit RankLikeThreads(const torch::Device& d) : cpu_(d.is_cpu()), saved_(at::get_num_threads()) {
    if (!cpu_) return;
    at::set_num_threads(1);
    if (openblas_set_num_threads != nullptr) openblas_set_num_threads(1);
  }
  ~RankLikeThreads() {
    if (cpu_) at::set_num_threads(saved_);
  }

 private:
  bool cpu_;
  int saved_;
};

using Clock = std::chrono::steady_clock;

void Sync(const torch::Device& d) {
  if (d.is_cuda()) torch::cuda::synchronize();
}

double MedianMs(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2] * 1e3;
}

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Times `f` (warm-up, then the median of repeats), in ms: this thread's CPU time on the CPU (an
// emulated device is paced by its CPU time), the device's on a GPU.
// On the CPU each timed run starts with cold caches, as in training, where other layers, other
// ministages and other ranks run between two uses of a layer (warm back-to-back repeats measured
// backward passes a third faster than the runtime saw).
// On a GPU the runs go back to back, as in a step, where the host queues kernels ahead of the
// device: the mean of `repeats` runs between two waits for the device, the median of three such
// rounds. A wait around each run would add every kernel's launch latency to a layer's time (on an
// H100, a profile timed that way predicted steps 30% longer than the runtime's).
double TimeMs(const std::function<void()>& f, const torch::Device& d, const LayerProfilerConfig& c) {
  for (int i = 0; i < c.warmup; ++i) f();
  Sync(d);
  std::vector<double> s;
  if (d.is_cuda()) {
    const int runs = std::max(1, c.repeats);
    for (int round = 0; round < 3; ++round) {
      const auto t = Clock::now();
      for (int i = 0; i < runs; ++i) f();
      Sync(d);
      s.push_back(std::chrono::duration<double>(Clock::now() - t).count() / runs);
    }
    return MedianMs(s);
  }
  const torch::Tensor evict = torch::zeros({int64_t{16} << 20}, torch::kFloat32);  // 64 MiB, beyond any cache
  for (int i = 0; i < std::max(1, c.repeats); ++i) {
    evict.add_(1);
    const double cpu = ThreadCpuSeconds();
    f();
    s.push_back(ThreadCpuSeconds() - cpu);
  }
  return MedianMs(s);
}

// Worker threads that load the CPU as the other emulated ranks will: `work`, then a sleep of
// (speed_factor - 1) times its duration, until destroyed.
class BackgroundLoad {
 public:
  BackgroundLoad(const std::vector<double>& speed_factors, std::function<void()> work) {
    for (double f : speed_factors)
      threads_.emplace_back([this, f, work] {
        at::set_num_threads(1);
        while (!stop_) {
          const auto t = Clock::now();
          work();
          const double s = std::chrono::duration<double>(Clock::now() - t).count();
          std::this_thread::sleep_for(std::chrono::duration<double>((f - 1) * s));
        }
      });
  }
  ~BackgroundLoad() {
    stop_ = true;
    for (auto& t : threads_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

// The measured limits (memory_probe.h): the largest microbatch the pieces alone take (the least any
// plan needs), then the whole model's data-parallel step at each ZeRO stage over the cluster's
// devices.
Status ProbeMemoryLimits(const std::string& device_type, const ModelSpec& model, int64_t seq_len,
                         Precision precision, int64_t memory_bytes, const LayerProfilerConfig& config,
                         const ProfileMemoryContext& memory,
                         const std::function<void(const std::string&)>& say, ProfileEntry& e) {
  say(fmt::format("{}: largest microbatch of one layer that fits in {} MiB", device_type,
                  memory_bytes >> 20));
  MemoryProbe probe{&model, seq_len, precision, 0, memory.dp_degree, memory.gloo_reduce_scatter, true};
  e.max_microbatch = ProbeMaxMicrobatch(probe, memory_bytes, config.max_microbatch_cap);
  if (e.max_microbatch == 0)
    return Status::OutOfMemory(fmt::format(
        "{}: not even one sequence of {} tokens through one layer of {} (with the embedding, the head and "
        "their training state) fits in its {} of memory; shorten the sequences or use a device with more "
        "memory",
        device_type, seq_len, model.name, FormatBytes(static_cast<double>(memory_bytes))));
  if (memory.dp_degree > 0) {
    MeasuredLimits limits;
    limits.dp_degree = memory.dp_degree;
    limits.num_layers = model.num_layers;
    limits.total_params = static_cast<double>(TotalParams(model));
    limits.capacity_bytes = memory_bytes;
    probe.pieces_only = false;
    for (int z = 0; z < 4; ++z) {
      say(fmt::format("{}: largest microbatch of the whole model at ZeRO-{} over {} devices", device_type, z,
                      memory.dp_degree));
      probe.zero_stage = z;
      limits.max_microbatch_by_zero[z] = ProbeMaxMicrobatch(probe, memory_bytes, config.max_microbatch_cap);
    }
    e.limits = limits;
  }
  return Status::Ok();
}

struct TpLayer {
  int tp = 0;
  LlamaModel model{nullptr};
  std::vector<torch::Tensor> params, grads;
};

// One tensor-parallel rank's layer per degree the heads allow: its slices of the weights, with
// `no_reduce` as its region (the schedule has the all-reduces as ops of their own).
std::vector<TpLayer> TensorParallelLayers(const ModelSpec& model, const ModelSpec& pieces,
                                          Precision precision, const LayerProfilerConfig& config,
                                          const torch::Device& d, const TensorParallelRegion& no_reduce) {
  std::vector<TpLayer> tp_layers;
  for (int tp : config.tp_degrees) {
    if (tp < 2 || !CheckTensorParallelDegree(model, tp).ok()) continue;
    TpLayer t;
    t.tp = tp;
    t.model = LlamaModel(pieces, 1);
    t.model->set_precision(precision);
    torch::NoGradGuard no_grad;
    for (auto& p : t.model->named_parameters()) {
      if (p.key().rfind("model.layers.0.", 0) != 0) continue;
      const int k = LayerWeightIndex(p.key());
      if (k >= 0 && IsSplitWeight(k))
        p.value().set_data(SliceLayerWeight(model, k, p.value(), 0, tp).contiguous().clone());
      t.params.push_back(p.value());
    }
    t.model->to(d);
    t.params.clear();
    for (auto& p : t.model->named_parameters())
      if (p.key().rfind("model.layers.0.", 0) == 0) t.params.push_back(p.value());
    for (const auto& p : t.params) t.grads.push_back(torch::zeros_like(p));
    t.model->set_tensor_parallel(&no_reduce);
    tp_layers.push_back(std::move(t));
  }
  return tp_layers;
}

// AdamW over a million-parameter shard, as the executor's optimizer step runs it: ms per million
// parameters.
double TimeOptimizerMsPerMparam(Precision precision, const torch::Device& d,
                                const LayerProfilerConfig& config) {
  const int64_t n = 1 << 20;
  ParamShard shard;
  shard.name = "profile";
  const auto master = torch::TensorOptions().dtype(MasterDtype(precision)).device(d);
  shard.param = torch::randn({n}, master);
  shard.grad = torch::randn({n}, master);
  shard.exp_avg = torch::zeros({n}, master);
  shard.exp_avg_sq = torch::zeros({n}, master);
  std::vector<ParamShard> shards = {shard};
  const AdamW adamw(OptimizerConfig{});
  int64_t step = 0;
  return TimeMs(
             [&] {  // the executor's step: the gradient norm, the update, clearing the gradients
               GradNormSquared(shards);
               adamw.Step(shards, 1e-4, ++step);
               shards[0].grad.zero_();
             },
             d, config) *
         1e6 / static_cast<double>(n);
}

}  // namespace

Result<ProfileEntry> ProfileDeviceType(const std::string& device_type, const ModelSpec& model,
                                       int64_t seq_len, Precision precision, int64_t memory_bytes,
                                       const LayerProfilerConfig& config, const ProfileMemoryContext& memory,
                                       const std::function<void(const std::string&)>& progress) {
  auto say = [&](const std::string& s) {
    if (progress) progress(s);
  };
  ProfileEntry e;
  e.device_type = device_type;
  e.model = model.name;
  e.hidden_size = model.hidden_size;
  e.seq_len = seq_len;
  e.precision = precision;
  e.backward_includes_recompute = true;
  MOTLEY_RETURN_IF_ERROR(
      ProbeMemoryLimits(device_type, model, seq_len, precision, memory_bytes, config, memory, say, e));

  const torch::Device d = ProfilingDevice();
  RankLikeThreads threads(d);
  // The pieces only (the embedding, one layer, the head): a model larger than the device is
  // profiled as well as a small one.
  ModelSpec pieces = model;
  pieces.num_layers = 1;
  LlamaModel m(pieces, 1);
  m->set_precision(precision);
  m->to(d);
  const torch::Dtype act = ActivationDtype(precision);
  const ModelSlice layer{false, 0, 1, false}, head{false, 1, 1, true};
  const PieceParams piece_params = PieceParamsOf(m);
  const std::vector<torch::Tensor>& layer_params = piece_params.layer;
  const std::vector<torch::Tensor>& head_params = piece_params.head;
  // One tensor-parallel rank's layer, per degree the heads allow: its slices of the weights, the
  // region's all-reduces left out (the schedule has them as ops of their own).
  const TensorParallelRegion no_reduce{[](const torch::Tensor& t) { return t; },
                                       [](const torch::Tensor& t) { return t; }, nullptr, -1, nullptr};
  std::vector<TpLayer> tp_layers = TensorParallelLayers(model, pieces, precision, config, d, no_reduce);
  std::vector<torch::Tensor> accumulated[2];  // gradient buffers: the layer's, the head's
  for (const auto& p : layer_params) accumulated[0].push_back(torch::zeros_like(p));
  for (const auto& p : head_params) accumulated[1].push_back(torch::zeros_like(p));
  say(fmt::format("{}: optimizer step", device_type));
  e.optimizer_ms_per_mparam = TimeOptimizerMsPerMparam(precision, d, config);
  for (int64_t mb : config.microbatches) {
    if (mb > e.max_microbatch) break;
    say(fmt::format("{}: layer and head at microbatch {}", device_type, mb));
    torch::Tensor x =
        torch::randn({mb, seq_len, model.hidden_size}, torch::TensorOptions().dtype(act).device(d));
    torch::Tensor targets = torch::randint(model.vocab_size, {mb, seq_len}, torch::kInt64).to(d);
    // As the executor: forward without a graph; backward = forward with a graph + back-propagation.
    auto forward = [&](const ModelSlice& s, bool with_loss) {
      torch::NoGradGuard no_grad;
      torch::Tensor y = m->Run(s, x, false);
      if (with_loss) y = NextTokenLoss(y, targets);
    };
    // ... and adds the parameter gradients into the flat gradient buffer.
    auto backward = [&](const ModelSlice& s, const std::vector<torch::Tensor>& params, bool with_loss) {
      torch::Tensor leaf = x.detach().requires_grad_(true);
      torch::Tensor y = m->Run(s, leaf, false);
      std::vector<torch::Tensor> inputs = params;
      inputs.push_back(leaf);
      const std::vector<torch::Tensor> grads =
          with_loss ? torch::autograd::grad({NextTokenLoss(y, targets)}, inputs)
                    : torch::autograd::grad({y}, inputs, {torch::ones_like(y)});
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) accumulated[s.head ? 1 : 0][i].add_(grads[i]);
    };
    // The other ranks' load: each runs its own copy of the layer's forward and backward.
    std::optional<BackgroundLoad> load;
    if (d.is_cpu() && !config.background_speed_factors.empty()) {
      auto other = std::make_shared<LlamaModel>(pieces, 2);
      const torch::Tensor ox =
          torch::randn({mb, seq_len, model.hidden_size}, torch::TensorOptions().dtype(act));
      load.emplace(config.background_speed_factors, [other, ox, layer] {
        torch::Tensor leaf = ox.detach().requires_grad_(true);
        torch::Tensor y = (*other)->Run(layer, leaf, false);
        torch::autograd::grad({y}, {leaf}, {torch::ones_like(y)});
      });
    }
    ProfilePoint lp{static_cast<double>(mb), TimeMs([&] { forward(layer, false); }, d, config),
                    TimeMs([&] { backward(layer, layer_params, false); }, d, config)};
    ProfilePoint hp{static_cast<double>(mb), TimeMs([&] { forward(head, true); }, d, config),
                    TimeMs([&] { backward(head, head_params, true); }, d, config)};
    e.points.push_back(lp);
    e.head_points.push_back(hp);
    for (TpLayer& t : tp_layers) {
      say(fmt::format("{}: a layer split over {} tensor-parallel ranks at microbatch {}", device_type, t.tp,
                      mb));
      const double f = TimeMs(
          [&] {
            torch::NoGradGuard no_grad;
            t.model->Run(layer, x, false);
          },
          d, config);
      const double b = TimeMs(
          [&] {
            torch::Tensor leaf = x.detach().requires_grad_(true);
            torch::Tensor y = t.model->Run(layer, leaf, false);
            std::vector<torch::Tensor> inputs = t.params;
            inputs.push_back(leaf);
            const std::vector<torch::Tensor> grads =
                torch::autograd::grad({y}, inputs, {torch::ones_like(y)});
            torch::NoGradGuard no_grad;
            for (size_t i = 0; i < t.params.size(); ++i) t.grads[i].add_(grads[i]);
          },
          d, config);
      e.tp_points[t.tp].push_back({static_cast<double>(mb), f, b});
    }
  }
  // ZERO-resizing's own cost and migration's borrowed compute (FlexTP's pre-test) on the MLP slice
  // of a rank at the widest degree profiled, over the largest microbatch measured.
  if (!tp_layers.empty() && !e.points.empty()) {
    const int tp = tp_layers.back().tp;
    say(fmt::format("{}: ZERO-resizing's overhead and a borrowed unit's cost on a {}-way MLP slice",
                    device_type, tp));
    const int64_t tokens = static_cast<int64_t>(e.points.back().microbatch) * seq_len;
    e.resize_overhead = TimeResizeOverhead(model.ffn_size / tp, model.hidden_size, tokens, d, act);
    e.borrowed_cost = TimeBorrowedCost(model.ffn_size / tp, model.hidden_size, tokens, d, act);
  }
  return e;
}

}  // namespace motley
