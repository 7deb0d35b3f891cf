#include "runtime/model/tensor_parallel.h"

#include <chrono>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/model/cross_entropy.h"

namespace motley {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The group a region's all-reduces run over (kept in the autograd context by address).
struct RegionGroup {
  Communicator* comm;
  CommGroup* group;
  CommClock* clock;
};

torch::Tensor SumOverGroup(const RegionGroup& g, const torch::Tensor& x) {
  // Gloo (libtorch 1.13) cannot reduce bf16: reduce in fp32 and cast back.
  torch::Tensor t = x.scalar_type() == torch::kBFloat16 ? x.to(torch::kFloat32) : x.contiguous().clone();
  const CommClock::Mark start = g.clock != nullptr ? g.clock->Start(t.device()) : CommClock::Mark{};
  Status s = g.comm->AllReduceSum(*g.group, t);
  if (g.clock != nullptr) g.clock->Stop(start, t.device());
  if (!s.ok()) throw std::runtime_error(fmt::format("tensor-parallel all-reduce: {}", s.message()));
  return t.to(x.scalar_type());
}

RegionGroup FromContext(AutogradContext* ctx) {
  return *reinterpret_cast<const RegionGroup*>(ctx->saved_data["group"].toInt());
}

// f: identity forward, sum of the gradient backward.
struct EnterRegion : public torch::autograd::Function<EnterRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return x.clone();  // a new tensor: autograd keeps f apart from what produced x
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {SumOverGroup(FromContext(ctx), grads[0]), torch::Tensor()};
  }
};

// g: sum forward, identity backward.
struct ReduceRegion : public torch::autograd::Function<ReduceRegion> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t group) {
    ctx->saved_data["group"] = group;
    return SumOverGroup(*reinterpret_cast<const RegionGroup*>(group), x);
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], torch::Tensor()}; }
};

// Layer weights by index (DecoderLayerImpl::weights()): which dimension each splits along, and
// the unit it splits in (a head's rows or columns, or single ffn rows/columns); -1: replicated.
struct Split {
  int dim;
  int64_t units;  // how many units the full dimension has
};
Split SplitOf(const ModelSpec& spec, size_t k) {
  switch (k) {
    case 1:
      return {0, spec.num_heads};  // q_proj: [heads*d, hidden]
    case 2:
    case 3:
      return {0, spec.num_kv_heads};  // k_proj, v_proj
    case 4:
      return {1, spec.num_heads};  // o_proj: [hidden, heads*d]
    case 6:
    case 7:
      return {0, spec.ffn_size};  // gate_proj, up_proj: [ffn, hidden]
    case 8:
      return {1, spec.ffn_size};  // down_proj: [hidden, ffn]
    default:
      return {-1, 0};  // the two norms
  }
}

}  // namespace

int LayerWeightIndex(const std::string& name) {
  if (name.rfind("model.layers.", 0) != 0) return -1;
  static const char* kSuffixes[] = {
      ".input_layernorm.weight",  ".self_attn.q_proj.weight", ".self_attn.k_proj.weight",
      ".self_attn.v_proj.weight", ".self_attn.o_proj.weight", ".post_attention_layernorm.weight",
      ".mlp.gate_proj.weight",    ".mlp.up_proj.weight",      ".mlp.down_proj.weight"};
  for (int k = 0; k < 9; ++k)
    if (name.ends_with(kSuffixes[k])) return k;
  return -1;
}

bool IsSplitWeight(size_t k) { return k != 0 && k != 5; }

namespace {

bool IsVocabParameter(const std::string& name) { return IsVocabParameterName(name); }

}  // namespace

bool IsVocabParameterName(const std::string& name) {
  return name == "model.embed_tokens.weight" || name == "lm_head.weight";
}

bool IsSplitParameter(const std::string& name) {
  if (IsVocabParameter(name)) return true;
  const int k = LayerWeightIndex(name);
  return k >= 0 && IsSplitWeight(k);
}

torch::Tensor SliceParameter(const ModelSpec& spec, const std::string& name, const torch::Tensor& full,
                             int index, int tp) {
  if (IsVocabParameter(name)) {
    // Rows [index * per, (index + 1) * per) of the padded vocabulary: a view, or — where the slice
    // runs past the real rows — its real rows followed by zero rows.
    const int64_t per = PaddedVocabSize(spec, tp) / tp, begin = index * per;
    const int64_t real = std::clamp<int64_t>(full.size(0) - begin, 0, per);
    if (real == per) return full.narrow(0, begin, per);
    torch::Tensor out = torch::zeros({per, full.size(1)}, full.options());
    if (real > 0) out.narrow(0, 0, real).copy_(full.narrow(0, begin, real));
    return out;
  }
  const int k = LayerWeightIndex(name);
  return k >= 0 ? SliceLayerWeight(spec, k, full, index, tp) : full;
}

std::vector<int64_t> SliceParameterShape(const ModelSpec& spec, const std::string& name,
                                         std::vector<int64_t> full, int tp) {
  if (IsVocabParameter(name)) {
    full[0] = PaddedVocabSize(spec, tp) / tp;
    return full;
  }
  const int k = LayerWeightIndex(name);
  return k >= 0 ? SliceShape(spec, k, full, tp) : full;
}

torch::Tensor JoinParameter(const ModelSpec& spec, const std::string& name,
                            const std::vector<torch::Tensor>& slices) {
  if (IsVocabParameter(name))
    return torch::cat(slices, 0).narrow(0, 0, spec.vocab_size);  // the padding dropped
  const int k = LayerWeightIndex(name);
  return k >= 0 ? JoinLayerWeight(spec, k, slices) : slices.front();
}

int64_t VocabBegin(const ModelSpec& spec, int index, int tp) {
  return index * (PaddedVocabSize(spec, tp) / tp);
}

torch::Tensor SliceLayerWeight(const ModelSpec& spec, size_t k, const torch::Tensor& full, int index,
                               int tp) {
  const Split s = SplitOf(spec, k);
  if (s.dim < 0) return full;
  const int64_t per = full.size(s.dim) / tp;  // whole heads (or ffn units) per rank
  return full.narrow(s.dim, index * per, per);
}

std::vector<int64_t> SliceShape(const ModelSpec& spec, size_t k, std::vector<int64_t> full, int tp) {
  const Split s = SplitOf(spec, k);
  if (s.dim >= 0) full[s.dim] /= tp;
  return full;
}

Status CheckTensorParallelDegree(const ModelSpec& spec, int tp) {
  if (tp < 1) return Status::InvalidArgument(fmt::format("tp_degree = {}: must be at least 1", tp));
  if (spec.num_heads % tp != 0 || spec.num_kv_heads % tp != 0 || spec.ffn_size % tp != 0)
    return Status::InvalidArgument(
        fmt::format("tp_degree = {} does not divide model {}'s heads ({}), key/value heads ({}) and ffn_size "
                    "({}); use a divisor "
                    "of all three",
                    tp, spec.name, spec.num_heads, spec.num_kv_heads, spec.ffn_size));
  return Status::Ok();
}

std::vector<torch::Tensor> SliceLayerWeights(const ModelSpec& spec, const std::vector<torch::Tensor>& full,
                                             int index, int tp) {
  std::vector<torch::Tensor> out;
  for (size_t k = 0; k < full.size(); ++k) out.push_back(SliceLayerWeight(spec, k, full[k], index, tp));
  return out;
}

torch::Tensor JoinLayerWeight(const ModelSpec& spec, size_t k, const std::vector<torch::Tensor>& slices) {
  const Split s = SplitOf(spec, k);
  if (s.dim < 0) return slices.front();
  return torch::cat(slices, s.dim);
}

TensorParallelRegion MakeTensorParallelRegion(Communicator* comm, CommGroup* group, CommClock* clock,
                                              int64_t vocab_begin, int64_t vocab_size) {
  auto g = std::make_shared<RegionGroup>(RegionGroup{comm, group, clock});
  const auto address = static_cast<int64_t>(reinterpret_cast<intptr_t>(g.get()));
  TensorParallelRegion r;
  r.enter = [g, address](const torch::Tensor& x) { return EnterRegion::apply(x, address); };
  r.reduce = [g, address](const torch::Tensor& x) { return ReduceRegion::apply(x, address); };
  r.vocab_begin = vocab_begin;
  if (vocab_begin >= 0)
    r.loss = [g, vocab_begin, vocab_size](const torch::Tensor& logits, const torch::Tensor& targets) {
      return VocabParallelLoss(g->comm, g->group, logits, targets, vocab_begin, g->clock, vocab_size);
    };
  return r;
}

torch::Tensor VocabParallelLoss(Communicator* comm, CommGroup* group, const torch::Tensor& logits,
                                const torch::Tensor& targets, int64_t vocab_begin, CommClock* clock,
                                int64_t vocab_size) {
  // Each rank's three figures a token (cross_entropy.h), all-gathered in one call.
  const TeamGather gather = [&](const torch::Tensor& parts) {
    const int members = group->size();
    torch::Tensor all = torch::empty({members * parts.numel()}, parts.options());
    const CommClock::Mark start = clock != nullptr ? clock->Start(parts.device()) : CommClock::Mark{};
    Status s = comm->AllGather(*group, parts.contiguous().reshape({-1}), all);
    if (clock != nullptr) clock->Stop(start, parts.device());
    if (!s.ok()) throw std::runtime_error(fmt::format("tensor-parallel loss all-gather: {}", s.message()));
    return all.view({members, parts.size(0), parts.size(1)});
  };
  const int64_t real = vocab_size < 0 ? -1 : std::max<int64_t>(vocab_size - vocab_begin, 0);
  return CrossEntropyLoss(logits, targets, vocab_begin, real, &gather);
}

}  // namespace motley
