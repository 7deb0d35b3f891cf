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

#include "runtime/train/adamw.h"
#include "runtime/device/cuda_device.h"
#include "runtime/model/llama_model.h"
#include "runtime/emulation/memory_ledger.h"
#include "runtime/model/precision_dtypes.h"
#include "runtime/model/tensor_parallel.h"

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

}  // namespace

namespace {

// One training step of `microbatch` sequences on the profiling device (see TrainingStepFits): whether
// it ran without running out of memory, and its peak memory above what was allocated before — the
// ledger's on the CPU (held to `capacity_bytes`, 0 = no limit), the caching allocator's on a GPU.
struct StepMemory {
  bool ran = true;
  int64_t peak_bytes = 0;
};
StepMemory TryTrainingStep(const ModelSpec& model, int64_t seq_len, Precision precision, int64_t microbatch,
                           int64_t capacity_bytes) {
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
  StepMemory out;
  try {
    LlamaModel m(model, 1);
    m->set_precision(precision);
    m->to(d);
    std::vector<ParamShard> shards = WholeParameterShards(*m);
    for (auto& s : shards) {
      s.grad = torch::zeros_like(s.param);
      s.exp_avg = torch::zeros_like(s.param);
      s.exp_avg_sq = torch::zeros_like(s.param);
    }
    torch::Tensor tokens = torch::randint(model.vocab_size, {microbatch, seq_len + 1}, torch::kInt64).to(d);
    torch::Tensor logits = m->forward(tokens.narrow(1, 0, seq_len), /*checkpoint_layers=*/true);
    NextTokenLoss(logits, tokens.narrow(1, 1, seq_len)).backward();
  } catch (const c10::OutOfMemoryError&) {
    out.ran = false;
  }
  out.peak_bytes = device_base >= 0 ? PeakDeviceMemoryBytes(d) - device_base : ledger.peak_bytes() - ledger_base;
  ledger.set_capacity_bytes(saved);
  return out;
}

}  // namespace

bool TrainingStepFits(const ModelSpec& model, int64_t seq_len, Precision precision, int64_t microbatch,
                      int64_t capacity_bytes) {
  const StepMemory step = TryTrainingStep(model, seq_len, precision, microbatch, capacity_bytes);
  return step.ran && (capacity_bytes <= 0 || step.peak_bytes <= capacity_bytes);
}

int64_t MaxMicrobatch(const ModelSpec& model, int64_t seq_len, Precision precision, int64_t capacity_bytes,
                      int64_t cap) {
  if (!TrainingStepFits(model, seq_len, precision, 1, capacity_bytes)) return 0;
  if (capacity_bytes <= 0) return cap;
  // Estimate from one microbatch's memory: the static part plus a per-sequence growth.
  auto peak_of = [&](int64_t mb) { return TryTrainingStep(model, seq_len, precision, mb, 0).peak_bytes; };
  const int64_t one = peak_of(1), two = peak_of(2);
  const int64_t per_sequence = std::max<int64_t>(1, two - one);
  const int64_t fixed = std::max<int64_t>(0, one - per_sequence);
  int64_t guess = std::clamp<int64_t>((capacity_bytes - fixed) / per_sequence, 1, cap);
  // Bracket [fits, fails) around the guess by doubling, then binary-search.
  int64_t lo = 1, hi = cap + 1;
  if (TrainingStepFits(model, seq_len, precision, guess, capacity_bytes)) {
    lo = guess;
    for (int64_t step = 1; lo < cap;) {
      const int64_t next = std::min(cap, lo + step);
      if (!TrainingStepFits(model, seq_len, precision, next, capacity_bytes)) {
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
      if (TrainingStepFits(model, seq_len, precision, next, capacity_bytes)) {
        lo = next;
        break;
      }
      hi = next;
      step *= 2;
    }
  }
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (TrainingStepFits(model, seq_len, precision, mid, capacity_bytes) ? lo : hi) = mid;
  }
  return lo;
}

c10::Device ProfilingDevice() {
  if (!torch::cuda::is_available()) return torch::Device(torch::kCPU);
  return c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getDevice();  // a launched rank's own
}

Result<ProfileEntry> ProfileDeviceType(const std::string& device_type, const ModelSpec& model, int64_t seq_len,
                                       Precision precision, int64_t memory_bytes, const LayerProfilerConfig& config,
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
  say(fmt::format("{}: largest microbatch that fits in {} MiB", device_type, memory_bytes >> 20));
  e.max_microbatch = MaxMicrobatch(model, seq_len, precision, memory_bytes, config.max_microbatch_cap);
  if (e.max_microbatch == 0)
    return Status::OutOfMemory(fmt::format("{}: not even one sequence of {} tokens of {} fits in its memory",
                                           device_type, seq_len, model.name));

  const torch::Device d = ProfilingDevice();
  RankLikeThreads threads(d);
  LlamaModel m(model, 1);
  m->set_precision(precision);
  m->to(d);
  const torch::Dtype act = ActivationDtype(precision);
  const ModelSlice layer{false, 0, 1, false}, head{false, static_cast<int>(model.num_layers),
                                                   static_cast<int>(model.num_layers), true};
  std::vector<torch::Tensor> layer_params, head_params;
  for (auto& p : m->named_parameters()) {
    if (p.key().rfind("model.layers.0.", 0) == 0) layer_params.push_back(p.value());
    if (p.key() == "model.norm.weight" || p.key() == "lm_head.weight" ||
        (model.tie_embeddings && p.key() == "model.embed_tokens.weight"))
      head_params.push_back(p.value());
  }
  // One tensor-parallel rank's layer, per degree the heads allow: its slices of the weights, the
  // region's all-reduces left out (the schedule has them as ops of their own).
  const TensorParallelRegion no_reduce{[](const torch::Tensor& t) { return t; },
                                       [](const torch::Tensor& t) { return t; }, nullptr};
  struct TpLayer {
    int tp = 0;
    LlamaModel model{nullptr};
    std::vector<torch::Tensor> params, grads;
  };
  std::vector<TpLayer> tp_layers;
  for (int tp : config.tp_degrees) {
    if (tp < 2 || !CheckTensorParallelDegree(model, tp).ok()) continue;
    TpLayer t;
    t.tp = tp;
    t.model = LlamaModel(model, 1);
    t.model->set_precision(precision);
    torch::NoGradGuard no_grad;
    for (auto& p : t.model->named_parameters()) {
      if (p.key().rfind("model.layers.0.", 0) != 0) continue;
      const int k = LayerWeightIndex(p.key());
      if (k >= 0 && IsSplitWeight(k)) p.value().set_data(SliceLayerWeight(model, k, p.value(), 0, tp).contiguous().clone());
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
  std::vector<torch::Tensor> accumulated[2];  // gradient buffers: the layer's, the head's
  for (const auto& p : layer_params) accumulated[0].push_back(torch::zeros_like(p));
  for (const auto& p : head_params) accumulated[1].push_back(torch::zeros_like(p));
  {
    // AdamW over a million-parameter shard, as the executor's optimizer step runs it.
    say(fmt::format("{}: optimizer step", device_type));
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
    e.optimizer_ms_per_mparam =
        TimeMs(
            [&] {  // the executor's step: the gradient norm, the update, clearing the gradients
              GradNormSquared(shards);
              adamw.Step(shards, 1e-4, ++step);
              shards[0].grad.zero_();
            },
            d, config) *
        1e6 / static_cast<double>(n);
  }
  for (int64_t mb : config.microbatches) {
    if (mb > e.max_microbatch) break;
    say(fmt::format("{}: layer and head at microbatch {}", device_type, mb));
    torch::Tensor x = torch::randn({mb, seq_len, model.hidden_size}, torch::TensorOptions().dtype(act).device(d));
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
      auto other = std::make_shared<LlamaModel>(model, 2);
      const torch::Tensor ox = torch::randn({mb, seq_len, model.hidden_size}, torch::TensorOptions().dtype(act));
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
      say(fmt::format("{}: a layer split over {} tensor-parallel ranks at microbatch {}", device_type, t.tp, mb));
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
            const std::vector<torch::Tensor> grads = torch::autograd::grad({y}, inputs, {torch::ones_like(y)});
            torch::NoGradGuard no_grad;
            for (size_t i = 0; i < t.params.size(); ++i) t.grads[i].add_(grads[i]);
          },
          d, config);
      e.tp_points[t.tp].push_back({static_cast<double>(mb), f, b});
    }
  }
  return e;
}

}  // namespace motley
