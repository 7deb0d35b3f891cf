#include "runtime/model/tensor_parallel.h"
#include "runtime/model/llama_model.h"

#include <map>
#include <mutex>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "runtime/comm/run_ranks_for_test.h"
#include "runtime/emulation/memory_ledger.h"

namespace motley {
namespace {

ModelSpec Spec() {
  ModelSpec s;
  s.name = "tp-test";
  s.hidden_size = 32;
  s.num_layers = 1;
  s.num_heads = 4;
  s.num_kv_heads = 2;
  s.ffn_size = 48;
  s.vocab_size = 64;
  s.max_seq_len = 16;
  return s;
}

double RelativeError(const torch::Tensor& got, const torch::Tensor& want) {
  return (got - want).norm().item<double>() / want.norm().item<double>();
}

TEST(TensorParallel, SlicesJoinBackToTheWholeWeights) {
  const ModelSpec spec = Spec();
  torch::manual_seed(1);
  DecoderLayer layer(spec);
  const std::vector<torch::Tensor> full = layer->weights();
  for (int tp : {1, 2}) {
    std::vector<std::vector<torch::Tensor>> slices;
    for (int r = 0; r < tp; ++r) slices.push_back(SliceLayerWeights(spec, full, r, tp));
    for (size_t k = 0; k < full.size(); ++k) {
      std::vector<torch::Tensor> parts;
      for (auto& s : slices) parts.push_back(s[k]);
      EXPECT_TRUE(torch::equal(JoinLayerWeight(spec, k, parts), full[k])) << "weight " << k << " tp " << tp;
    }
  }
  EXPECT_TRUE(CheckTensorParallelDegree(spec, 2).ok());
  Status bad = CheckTensorParallelDegree(spec, 4);  // 2 key/value heads
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("does not divide model tp-test's heads (4), key/value heads (2)"),
            std::string::npos);
}

TEST(TensorParallel, TwoRanksComputeTheLayerAndItsGradientsAsOneDevice) {
  // In fp64: the split sums differ from the whole ones by reassociation only (~1e-16).
  const ModelSpec spec = Spec();
  torch::manual_seed(2);
  DecoderLayer layer(spec);
  layer->to(torch::kFloat64);
  const std::vector<torch::Tensor> full = layer->weights();
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor x = torch::randn({3, 8, spec.hidden_size}, f64);
  const torch::Tensor grad_out = torch::randn({3, 8, spec.hidden_size}, f64);
  LlamaModel rotary(spec, 0);
  auto [cos, sin] = rotary->Rotary(8, torch::kFloat64, torch::kCPU);

  // One device.
  torch::Tensor x1 = x.clone().requires_grad_(true);
  torch::Tensor y1 = DecoderLayerFunction(spec, full, x1, cos, sin);
  std::vector<torch::Tensor> inputs = full;
  inputs.push_back(x1);
  const std::vector<torch::Tensor> g1 = torch::autograd::grad({y1}, inputs, {grad_out});

  // Two ranks, each with its slice; outputs and input gradients are whole on both, weight
  // gradients are each rank's slice.
  std::mutex mu;
  std::vector<std::vector<torch::Tensor>> weight_grads(2);
  std::vector<torch::Tensor> outputs(2), input_grads(2);
  RunRanks(2, [&](Communicator& c) {
    const int r = c.rank();
    std::vector<torch::Tensor> mine;
    for (auto& w : SliceLayerWeights(spec, full, r, 2))
      mine.push_back(w.detach().clone().requires_grad_(true));
    TensorParallelRegion region = MakeTensorParallelRegion(&c, &c.world());
    torch::Tensor xr = x.clone().requires_grad_(true);
    torch::Tensor y = DecoderLayerFunction(spec, mine, xr, cos, sin, &region);
    std::vector<torch::Tensor> in = mine;
    in.push_back(xr);
    std::vector<torch::Tensor> g = torch::autograd::grad({y}, in, {grad_out});
    std::lock_guard<std::mutex> lock(mu);
    outputs[r] = y.detach();
    input_grads[r] = g.back();
    g.pop_back();
    weight_grads[r] = g;
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_LT(RelativeError(outputs[r], y1), 1e-12) << "rank " << r;
    EXPECT_LT(RelativeError(input_grads[r], g1.back()), 1e-12) << "rank " << r;
  }
  for (size_t k = 0; k < full.size(); ++k) {
    // Replicated norms: each rank's gradient is already the whole one.
    const torch::Tensor joined = JoinLayerWeight(spec, k, {weight_grads[0][k], weight_grads[1][k]});
    EXPECT_LT(RelativeError(joined, g1[k]), 1e-12) << "weight " << k;
  }
}

// The vocabulary split (issue #26): two ranks, each with its half of the embedding and the head
// (one matrix when tied) and its slices of the layers, compute the whole model's loss and, joined,
// its gradients — in fp64 within reassociation, tied and untied, with a target in each half.
TEST(TensorParallel, TwoRanksSplitTheVocabularyAsOneDevice) {
  for (bool tied : {false, true}) {
    SCOPED_TRACE(tied ? "tied" : "untied");
    ModelSpec spec = Spec();
    spec.num_layers = 2;
    spec.tie_embeddings = tied;
    LlamaModel whole(spec, 4);
    whole->set_precision(Precision::kFp64);
    torch::manual_seed(6);
    const torch::Tensor tokens = torch::randint(spec.vocab_size, {3, 9}, torch::kInt64);
    const torch::Tensor input = tokens.narrow(1, 0, 8), targets = tokens.narrow(1, 1, 8);
    ASSERT_TRUE(targets.lt(spec.vocab_size / 2).any().item<bool>() &&
                targets.ge(spec.vocab_size / 2).any().item<bool>());
    const torch::Tensor loss1 = whole->Loss(whole->forward(input), targets);
    loss1.backward();
    std::map<std::string, torch::Tensor> grads1;
    for (const auto& p : whole->named_parameters()) grads1[p.key()] = p.value().grad().clone();
    EXPECT_EQ(grads1.count("lm_head.weight"), tied ? 0u : 1u);

    std::mutex mu;
    std::vector<double> losses(2);
    std::vector<std::map<std::string, torch::Tensor>> grads(2);
    std::vector<int64_t> logit_columns(2);
    // Made here: a model draws its weights from the global generator, which the ranks' threads share.
    std::vector<LlamaModel> models = {LlamaModel(spec, 4), LlamaModel(spec, 4)};
    RunRanks(2, [&](Communicator& c) {
      const int r = c.rank();
      LlamaModel mine = models[r];
      mine->set_precision(Precision::kFp64);
      {
        torch::NoGradGuard no_grad;
        for (auto& p : mine->named_parameters())
          if (IsSplitParameter(p.key()))
            p.value().set_data(SliceParameter(spec, p.key(), p.value(), r, 2).clone());
      }
      TensorParallelRegion region = MakeTensorParallelRegion(&c, &c.world(), nullptr, VocabBegin(spec, r, 2));
      mine->set_tensor_parallel(&region);
      const torch::Tensor logits = mine->forward(input);
      const torch::Tensor loss = mine->Loss(logits, targets);
      loss.backward();
      std::lock_guard<std::mutex> lock(mu);
      logit_columns[r] = logits.size(-1);
      losses[r] = loss.item<double>();
      for (const auto& p : mine->named_parameters()) grads[r][p.key()] = p.value().grad().clone();
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(logit_columns[r], spec.vocab_size / 2)
          << "rank " << r << " holds only its columns of the logits";
      EXPECT_NEAR(losses[r], loss1.item<double>(), 1e-13) << "rank " << r;
    }
    for (const auto& [name, g1] : grads1) {
      const torch::Tensor joined = IsSplitParameter(name)
                                       ? JoinParameter(spec, name, {grads[0][name], grads[1][name]})
                                       : grads[0][name];
      EXPECT_LT(RelativeError(joined, g1), 1e-12) << name;
      if (!IsSplitParameter(name)) {
        EXPECT_LT(RelativeError(grads[1][name], g1), 1e-12) << name << " on rank 1";
      }
    }
  }
  // A vocabulary the width does not divide is padded, as Megatron pads it (exactness: the
  // distributed tests' AWidthThatDoesNotDivideTheVocabularyPadsItExactly).
  const ModelSpec odd = [] {
    ModelSpec s = Spec();
    s.vocab_size = 65;
    return s;
  }();
  EXPECT_TRUE(CheckTensorParallelDegree(odd, 2).ok());
  EXPECT_EQ(PaddedVocabSize(odd, 2), 80);  // a multiple of 2 x 8
  EXPECT_EQ(PaddedVocabSize(odd, 1), 65);
  const torch::Tensor rows = torch::arange(65 * 3, torch::kFloat64).view({65, 3});
  const torch::Tensor last = SliceParameter(odd, "lm_head.weight", rows, 1, 2);
  EXPECT_EQ(last.sizes(), (std::vector<int64_t>{40, 3}));
  EXPECT_TRUE(torch::equal(last.narrow(0, 0, 25), rows.narrow(0, 40, 25)));
  EXPECT_EQ(last.narrow(0, 25, 15).abs().sum().item<double>(), 0);  // the padding
  EXPECT_TRUE(torch::equal(
      JoinParameter(odd, "lm_head.weight", {SliceParameter(odd, "lm_head.weight", rows, 0, 2), last}), rows));
}

// What one rank's share of a decoder layer keeps for backward and holds at the peak of its backward,
// counted by the memory ledger, against what the memory model counts (core/model.h:
// LayerActivationBytesPerToken, LayerBackwardBytesPerToken) — for the whole layer and a
// tensor-parallel rank's share (Megatron's layout: inside attention and the MLP split, the rest
// replicated), in fp32 and fp64, at two sequence lengths.
TEST(TensorParallel, ARanksActivationsAreWhatTheMemoryModelCounts) {
  MemoryLedger& ledger = MemoryLedger::Install();
  const ModelSpec spec = *FindModelPreset("llama-1m");  // 4 heads, 2 key/value heads
  DecoderLayer layer(spec);
  LlamaModel model(spec, 1);
  const TensorParallelRegion region{[](const torch::Tensor& t) { return t; },
                                    [](const torch::Tensor& t) { return t; }, nullptr, -1, nullptr};
  const int64_t batch = 8;
  for (Precision p : {Precision::kFp32, Precision::kFp64}) {
    const torch::Dtype dtype = p == Precision::kFp64 ? torch::kFloat64 : torch::kFloat32;
    for (int64_t seq : {64, 128, 256}) {
      auto [cos, sin] = model->Rotary(seq, dtype, torch::kCPU);
      for (int tp : {1, 2}) {
        std::vector<torch::Tensor> w = SliceLayerWeights(spec, layer->weights(), 0, tp);
        for (torch::Tensor& t : w) t = t.detach().to(dtype).clone().requires_grad_(true);
        torch::Tensor x = torch::randn({batch, seq, spec.hidden_size}, dtype).requires_grad_(true);
        torch::Tensor dy = torch::randn({batch, seq, spec.hidden_size}, dtype);
        const std::string where = fmt::format("{} seq {} tp {}", PrecisionName(p), seq, tp);
        const int64_t before = ledger.used_bytes();
        ledger.ResetPeak();
        // A forward that keeps nothing (checkpointed): its peak above its input, its output included.
        {
          torch::NoGradGuard no_grad;
          const int64_t start = ledger.used_bytes();
          ledger.ResetPeak();
          torch::Tensor out = DecoderLayerFunction(spec, w, x, cos, sin, tp > 1 ? &region : nullptr, 0);
          const double peak = static_cast<double>(ledger.peak_bytes() - start);
          const double predicted = LayerForwardPeakBytesPerToken(spec, seq, p, false, tp) * batch * seq;
          EXPECT_NEAR(peak, predicted, 0.02 * predicted)
              << where << " (no grad): measured " << peak / predicted << "x";
        }
        torch::Tensor y = DecoderLayerFunction(spec, w, x, cos, sin, tp > 1 ? &region : nullptr, 0);
        const double saved = static_cast<double>(ledger.used_bytes() - before - y.nbytes() + x.nbytes());
        const double tokens = static_cast<double>(batch * seq);
        const double predicted = LayerActivationBytesPerToken(spec, seq, p, false, tp) * tokens;
        EXPECT_NEAR(saved, predicted, 0.03 * predicted) << where << ": measured " << saved / predicted << "x";
        // The backward's peak, the weights' gradients aside (a schedule counts them as gradients).
        std::vector<torch::Tensor> inputs = w;
        inputs.push_back(x);
        int64_t weight_grads = 0;
        for (const torch::Tensor& t : w) weight_grads += t.nbytes();
        torch::autograd::grad({y}, inputs, {dy});
        // With the gradient of its output, which the layer above made (dy, held before `before`).
        const double peak =
            static_cast<double>(ledger.peak_bytes() - before - weight_grads + x.nbytes() + dy.nbytes());
        const double predicted_peak = LayerBackwardBytesPerToken(spec, seq, p, false, tp) * tokens;
        // Measured 0.97-1.00x. Memory the model misses makes a plan it judged to fit run out (a
        // fp64 layer at 128 tokens held 1.04x before the output's gradient was counted): at most 1%.
        EXPECT_LE(peak, 1.01 * predicted_peak) << where << ": measured " << peak / predicted_peak << "x";
        EXPECT_GE(peak, 0.95 * predicted_peak) << where << ": measured " << peak / predicted_peak << "x";
      }
    }
  }
}

}  // namespace
}  // namespace motley
