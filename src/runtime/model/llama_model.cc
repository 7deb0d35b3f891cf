#include <cstdint>

#include "runtime/model/llama_model.h"

#include "runtime/flextp/layer_work.h"
#include "runtime/model/cross_entropy.h"
#include "runtime/model/precision_dtypes.h"
#include "runtime/model/tensor_parallel.h"

#include "core/check.h"
#include "core/rope.h"

namespace motley {
namespace {

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  // On a GPU in bf16 / fp16: ATen's rms_norm (one kernel in recent libtorch, accumulating in fp32 as
  // below; the weight applied before the one rounding to the compute dtype, not after it).
  if (x.is_cuda() && (x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kHalf))
    return at::rms_norm(x, {x.size(-1)}, weight.to(x.scalar_type()), eps);
#endif
  // In fp32 whatever the compute precision, as Hugging Face's LlamaRMSNorm does.
  torch::Tensor xf = x.scalar_type() == torch::kFloat64 ? x : x.to(torch::kFloat32);
  torch::Tensor normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight.to(x.scalar_type()) * normed.to(x.scalar_type());
}

// Records only its input and the weights; recomputes the layer in backward.
class RecomputedLayer : public torch::autograd::Function<RecomputedLayer> {
 public:
  // The weights come as a TensorList so that autograd sees each of them as an input.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const ModelSpec* spec, torch::Tensor x,
                               torch::Tensor cos, torch::Tensor sin, torch::TensorList w) {
    ctx->saved_data["spec"] = reinterpret_cast<int64_t>(spec);
    std::vector<torch::Tensor> saved = {x, cos, sin};
    saved.insert(saved.end(), w.begin(), w.end());
    ctx->save_for_backward(saved);
    torch::NoGradGuard no_grad;
    return DecoderLayerFunction(*spec, std::vector<torch::Tensor>(w.begin(), w.end()), x, cos, sin);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto* spec = reinterpret_cast<const ModelSpec*>(ctx->saved_data["spec"].toInt());
    auto saved = ctx->get_saved_variables();
    torch::Tensor x = saved[0].detach().requires_grad_(true);
    std::vector<torch::Tensor> w;
    for (size_t i = 3; i < saved.size(); ++i) w.push_back(saved[i].detach().requires_grad_(true));
    torch::Tensor out;
    {
      torch::AutoGradMode enable(true);
      out = DecoderLayerFunction(*spec, w, x, saved[1], saved[2]);
    }
    std::vector<torch::Tensor> inputs = {x};
    inputs.insert(inputs.end(), w.begin(), w.end());
    auto grads = torch::autograd::grad({out}, inputs, {grad_out[0]});
    // Gradients in forward's argument order: spec, x, cos, sin, then the weights (as one list).
    torch::autograd::variable_list result = {torch::Tensor(), grads[0], torch::Tensor(), torch::Tensor()};
    result.insert(result.end(), grads.begin() + 1, grads.end());
    return result;
  }
};

}  // namespace

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return RmsNorm(x, weight, eps); }

DecoderLayerImpl::DecoderLayerImpl(const ModelSpec& s, bool allocate) : spec(s) {
  const int64_t h = s.hidden_size, kv = s.kv_dim(), f = s.ffn_size;
  auto linear = [allocate](int64_t in, int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(allocate ? in : 1, allocate ? out : 1).bias(false));
  };
  self_attn = register_module("self_attn", std::make_shared<torch::nn::Module>());
  mlp = register_module("mlp", std::make_shared<torch::nn::Module>());
  q_proj = self_attn->register_module("q_proj", linear(h, h));
  k_proj = self_attn->register_module("k_proj", linear(h, kv));
  v_proj = self_attn->register_module("v_proj", linear(h, kv));
  o_proj = self_attn->register_module("o_proj", linear(h, h));
  gate_proj = mlp->register_module("gate_proj", linear(h, f));
  up_proj = mlp->register_module("up_proj", linear(h, f));
  down_proj = mlp->register_module("down_proj", linear(f, h));
  input_layernorm = register_module("input_layernorm", RMSNorm(h, s.norm_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(h, s.norm_eps));
}

std::vector<torch::Tensor> DecoderLayerImpl::weights() const {
  return {input_layernorm->weight, q_proj->weight,  k_proj->weight,
          v_proj->weight,          o_proj->weight,  post_attention_layernorm->weight,
          gate_proj->weight,       up_proj->weight, down_proj->weight};
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                        const torch::Tensor& sin) {
  return DecoderLayerFunction(spec, weights(), x, cos, sin);
}

torch::Tensor DecoderLayerFunction(const ModelSpec& spec, const std::vector<torch::Tensor>& w,
                                   const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                   const TensorParallelRegion* tp, int layer) {
  MOTLEY_CHECK_EQ(w.size(), 9u);
  // Mixed precision: the weights are fp32 masters, cast to the compute dtype of `x` here (the cast
  // is part of the autograd graph, so gradients reach the masters in fp32).
  auto weight = [&](size_t i) {
    return w[i].scalar_type() == x.scalar_type() ? w[i] : w[i].to(x.scalar_type());
  };
  auto enter = [&](const torch::Tensor& t) { return tp ? tp->enter(t) : t; };
  auto reduce = [&](const torch::Tensor& t) { return tp ? tp->reduce(t) : t; };
  // Attention.
  LayerWork* work = tp != nullptr && tp->layer_work && layer >= 0 ? tp->layer_work(layer, w) : nullptr;
  torch::Tensor hidden = enter(RmsNorm(x, weight(0), spec.norm_eps));
  torch::Tensor h =
      x + reduce(AttentionWithWork(spec, hidden, weight(1), weight(2), weight(3), weight(4), cos, sin, work));
  // SwiGLU MLP.
  torch::Tensor m = enter(RmsNorm(h, weight(5), spec.norm_eps));
  if (work != nullptr) return h + reduce(MlpWithWork(m, w[6], w[7], w[8], work));
  torch::Tensor gated =
      torch::silu(torch::nn::functional::linear(m, weight(6))) * torch::nn::functional::linear(m, weight(7));
  return h + reduce(torch::nn::functional::linear(gated, weight(8)));
}

LlamaModelImpl::LlamaModelImpl(const ModelSpec& spec, uint64_t seed) : spec_(spec) {
  torch::manual_seed(seed);
  model = register_module("model", std::make_shared<torch::nn::Module>());
  embed_tokens =
      model->register_module("embed_tokens", torch::nn::Embedding(spec.vocab_size, spec.hidden_size));
  for (int64_t i = 0; i < spec.num_layers; ++i) layers->push_back(DecoderLayer(spec));
  model->register_module("layers", layers);
  norm = model->register_module("norm", RMSNorm(spec.hidden_size, spec.norm_eps));
  if (!spec.tie_embeddings)
    lm_head = register_module(
        "lm_head",
        torch::nn::Linear(torch::nn::LinearOptions(spec.hidden_size, spec.vocab_size).bias(false)));
  torch::NoGradGuard no_grad;
  for (auto& p : named_parameters()) {
    if (p.key().find("norm") != std::string::npos) {
      p.value().fill_(1.0);
    } else {
      p.value().normal_(0.0, 0.02);
    }
  }
}

namespace {

// One element, expanded to `shape`: every element reads it, and an in-place write is refused.
torch::Tensor Placeholder(at::IntArrayRef shape, torch::Dtype dtype) {
  return torch::zeros({1}, dtype).expand(shape);
}

}  // namespace

LlamaModelImpl::LlamaModelImpl(const ModelSpec& spec, uint64_t seed, const std::set<std::string>& materialize,
                               torch::Dtype dtype, int tp)
    : spec_(spec) {
  torch::manual_seed(seed);
  model = register_module("model", std::make_shared<torch::nn::Module>());
  embed_tokens = model->register_module("embed_tokens", torch::nn::Embedding(1, 1));
  for (int64_t i = 0; i < spec.num_layers; ++i) layers->push_back(DecoderLayer(spec, /*allocate=*/false));
  model->register_module("layers", layers);
  norm = model->register_module("norm", RMSNorm(spec.hidden_size, spec.norm_eps));
  if (!spec.tie_embeddings)
    lm_head = register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(1, 1).bias(false)));
  torch::NoGradGuard no_grad;
  for (auto& p : named_parameters()) {
    const std::vector<int64_t> shape = LlamaParameterShape(spec, p.key());
    if (!materialize.count(p.key())) {
      p.value().set_data(Placeholder(shape, dtype));
      continue;
    }
    torch::Tensor t = torch::empty(
        tp > 1 && IsSplitParameter(p.key()) ? SliceParameterShape(spec, p.key(), shape, tp) : shape, dtype);
    if (p.key().find("norm") != std::string::npos) {
      t.fill_(1.0);
    } else {
      t.normal_(0.0, 0.02);
    }
    p.value().set_data(t);
  }
}

bool IsPlaceholder(const torch::Tensor& t) {
  return t.defined() && t.numel() > 1 &&
         t.storage().nbytes() < static_cast<size_t>(t.numel()) * static_cast<size_t>(t.element_size());
}

std::vector<int64_t> LlamaParameterShape(const ModelSpec& spec, const std::string& name) {
  const int64_t h = spec.hidden_size, kv = spec.kv_dim(), f = spec.ffn_size;
  auto ends = [&](std::string_view suffix) { return name.ends_with(suffix); };
  if (ends("embed_tokens.weight") || ends("lm_head.weight")) return {spec.vocab_size, h};
  if (ends("norm.weight")) return {h};
  if (ends("q_proj.weight") || ends("o_proj.weight")) return {h, h};
  if (ends("k_proj.weight") || ends("v_proj.weight")) return {kv, h};
  if (ends("gate_proj.weight") || ends("up_proj.weight")) return {f, h};
  if (ends("down_proj.weight")) return {h, f};
  MOTLEY_CHECK_MSG(false, "no parameter " + name);
  return {};
}

void LlamaModelImpl::set_precision(Precision p) {
  // As Module::to, but a placeholder stays one (converting it would make the whole matrix).
  const torch::Dtype dtype = MasterDtype(p);
  torch::NoGradGuard no_grad;
  for (auto& param : parameters())
    param.set_data(IsPlaceholder(param) ? Placeholder(param.sizes(), dtype) : param.to(dtype));
  set_compute_dtype(MixedComputeDtype(p));
}

std::pair<torch::Tensor, torch::Tensor> LlamaModelImpl::Rotary(int64_t seq_len, torch::Dtype dtype,
                                                               torch::Device device) const {
  const auto key = std::make_tuple(seq_len, dtype, device.type(), device.index());
  const std::lock_guard<std::mutex> lock(rotary_mutex_);
  if (auto it = rotary_.find(key); it != rotary_.end()) return it->second;
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  // The config's rope_scaling applied (core/rope.h); in fp64, then in the compute dtype.
  const std::vector<double> frequencies = RopeInverseFrequencies(spec_, seq_len);
  torch::Tensor inv_freq = torch::tensor(frequencies, f64);
  torch::Tensor freqs = torch::outer(torch::arange(seq_len, f64), inv_freq);
  torch::Tensor emb = torch::cat({freqs, freqs}, -1);
  torch::NoGradGuard no_grad;
  return rotary_[key] = {emb.cos().to(device, dtype), emb.sin().to(device, dtype)};
}

torch::Tensor LlamaModelImpl::Run(const ModelSlice& slice, const torch::Tensor& input,
                                  bool checkpoint_layers) {
  const bool vocab_split = tp_ != nullptr && tp_->vocab_begin >= 0;
  torch::Tensor x = input;
  if (slice.embedding && vocab_split) {
    // This rank's rows: the tokens outside them look up nothing (zeros), the team sums the lookups
    // — in the compute dtype, as the schedule counts the call's bytes: one rank holds each token's
    // row, so casting before the sum gives the very values casting after it would.
    const torch::Tensor& w = embed_tokens->weight;
    const torch::Tensor local = input - tp_->vocab_begin;
    const torch::Tensor mine = local.ge(0).logical_and(local.lt(w.size(0)));
    torch::Tensor rows = torch::nn::functional::embedding(local.clamp(0, w.size(0) - 1), w) *
                         mine.unsqueeze(-1).to(w.scalar_type());
    if (compute_dtype_ && rows.scalar_type() != *compute_dtype_) rows = rows.to(*compute_dtype_);
    x = tp_->reduce(rows);
  } else if (slice.embedding) {
    x = embed_tokens->forward(input);
  }
  if (compute_dtype_ && x.scalar_type() != *compute_dtype_) x = x.to(*compute_dtype_);
  auto [cos, sin] = Rotary(x.size(1), x.scalar_type(), x.device());
  for (int i = slice.layer_begin; i < slice.layer_end; ++i) {
    auto layer = layers[i]->as<DecoderLayerImpl>();
    if (checkpoint_layers && torch::GradMode::is_enabled() && tp_ == nullptr) {
      const std::vector<torch::Tensor> weights = layer->weights();
      x = RecomputedLayer::apply(&spec_, x, cos, sin, torch::TensorList(weights));
    } else {
      x = DecoderLayerFunction(spec_, layer->weights(), x, cos, sin, tp_, i);
    }
  }
  if (!slice.head) return x;
  x = norm->forward(x);
  if (vocab_split) x = tp_->enter(x);  // this rank's columns of the logits; the team sums x's gradient
  const torch::Tensor& head = lm_head                ? lm_head->weight
                              : head_copy_.defined() ? head_copy_
                                                     : embed_tokens->weight;
  return torch::nn::functional::linear(
      x, head.scalar_type() == x.scalar_type() ? head : head.to(x.scalar_type()));
}

void LlamaModelImpl::UntieHead() {
  MOTLEY_CHECK(spec_.tie_embeddings && !head_copy_.defined());
  torch::NoGradGuard no_grad;
  // A module of its own named "lm_head" holding "weight", as an untied model's Linear does (whose
  // constructor would draw from the global generator).
  auto holder = register_module("lm_head", std::make_shared<torch::nn::Module>());
  const torch::Tensor& w = embed_tokens->weight;
  head_copy_ = holder->register_parameter(
      "weight", IsPlaceholder(w) ? Placeholder(w.sizes(), w.scalar_type()) : w.detach().clone());
}

torch::Tensor LlamaModelImpl::Loss(const torch::Tensor& logits, const torch::Tensor& targets) const {
  if (tp_ != nullptr && tp_->vocab_begin >= 0) return tp_->loss(logits, targets);
  return NextTokenLoss(logits, targets);
}

torch::Tensor LlamaModelImpl::forward(const torch::Tensor& tokens, bool checkpoint_layers) {
  return Run(ModelSlice{true, 0, static_cast<int>(spec_.num_layers), true}, tokens, checkpoint_layers);
}

torch::Tensor NextTokenLoss(const torch::Tensor& logits, const torch::Tensor& targets) {
  // In fp32 (or fp64) whatever the compute precision: the softmax over a large vocabulary needs it.
  return CrossEntropyLoss(logits, targets);
}

}  // namespace motley
