#include "runtime/model/llama_model.h"

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace motley {
namespace {

ModelSpec TinyGqa() {
  ModelSpec m = *FindModelPreset("llama-tiny");  // hidden 32, 2 layers, 4 heads, 2 kv heads
  m.vocab_size = 17;
  return m;
}

TEST(LlamaModel, ParameterNamesAndShapesFollowHuggingFace) {
  LlamaModel model(*FindModelPreset("llama-tiny"), 1);
  std::map<std::string, std::vector<int64_t>> shapes;
  int64_t count = 0;
  for (const auto& p : model->named_parameters()) {
    shapes[p.key()] = p.value().sizes().vec();
    count += p.value().numel();
  }
  EXPECT_EQ(count, TotalParams(*FindModelPreset("llama-tiny")));
  EXPECT_EQ(shapes.at("model.embed_tokens.weight"), (std::vector<int64_t>{256, 32}));
  EXPECT_EQ(shapes.at("model.layers.1.self_attn.q_proj.weight"), (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(shapes.at("model.layers.0.self_attn.k_proj.weight"),
            (std::vector<int64_t>{16, 32}));  // 2 kv heads of 8
  EXPECT_EQ(shapes.at("model.layers.0.mlp.down_proj.weight"), (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(shapes.at("model.layers.0.input_layernorm.weight"), (std::vector<int64_t>{32}));
  EXPECT_EQ(shapes.at("model.norm.weight"), (std::vector<int64_t>{32}));
  EXPECT_EQ(shapes.at("lm_head.weight"), (std::vector<int64_t>{256, 32}));
}

TEST(LlamaModel, SlicesComposeToTheWholeModel) {
  ModelSpec spec = TinyGqa();
  spec.num_layers = 3;
  LlamaModel model(spec, 7);
  torch::Tensor tokens = torch::randint(0, spec.vocab_size, {2, 5});
  torch::NoGradGuard no_grad;
  torch::Tensor whole = model->forward(tokens);
  torch::Tensor a = model->Run({true, 0, 1, false}, tokens, false);
  torch::Tensor b = model->Run({false, 1, 3, false}, a, false);
  torch::Tensor c = model->Run({false, 3, 3, true}, b, false);
  EXPECT_TRUE(torch::allclose(whole, c, 0, 0));
  // Causal: the logits at position 2 do not depend on later tokens.
  torch::Tensor changed = tokens.clone();
  changed.index_put_({0, 4}, (tokens.index({0, 4}).item<int64_t>() + 1) % spec.vocab_size);
  torch::Tensor again = model->forward(changed);
  EXPECT_TRUE(torch::allclose(whole.index({0, 2}), again.index({0, 2})));
}

// Every parameter's gradient against central finite differences, in fp64.
void CheckGradients(bool checkpoint) {
  ModelSpec spec = TinyGqa();
  LlamaModel model(spec, 3);
  model->to(torch::kFloat64);
  torch::Tensor tokens = torch::randint(0, spec.vocab_size, {2, 6});
  torch::Tensor targets = torch::randint(0, spec.vocab_size, {2, 6});
  auto loss_of = [&] { return NextTokenLoss(model->forward(tokens, checkpoint), targets); };
  model->zero_grad();
  loss_of().backward();
  torch::NoGradGuard no_grad;
  int checked = 0;
  for (auto& p : model->named_parameters()) {
    torch::Tensor flat = p.value().view(-1);
    torch::Tensor grad = p.value().grad().view(-1);
    // A few entries of every parameter tensor, spread over it.
    for (int64_t i : {int64_t{0}, flat.numel() / 3, flat.numel() - 1}) {
      const double h = 1e-6, saved = flat[i].item<double>();
      flat[i] = saved + h;
      const double up = loss_of().item<double>();
      flat[i] = saved - h;
      const double down = loss_of().item<double>();
      flat[i] = saved;
      const double numeric = (up - down) / (2 * h), analytic = grad[i].item<double>();
      EXPECT_LT(std::abs(numeric - analytic), 1e-6 * std::max(1e-3, std::abs(numeric)) + 1e-9)
          << p.key() << "[" << i << "] numeric " << numeric << " analytic " << analytic;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3 * static_cast<int>(model->named_parameters().size()));
}

TEST(LlamaModel, GradientsMatchFiniteDifferences) { CheckGradients(false); }
TEST(LlamaModel, GradientsWithRecomputedLayersMatchFiniteDifferences) { CheckGradients(true); }

TEST(LlamaModel, RecomputationGivesTheSameGradients) {
  ModelSpec spec = TinyGqa();
  LlamaModel model(spec, 5);
  model->set_precision(Precision::kFp64);  // the two orders of work differ by reassociation only
  torch::Tensor tokens = torch::randint(0, spec.vocab_size, {3, 8});
  std::vector<torch::Tensor> plain, recomputed;
  for (bool checkpoint : {false, true}) {
    model->zero_grad();
    NextTokenLoss(model->forward(tokens, checkpoint), tokens).backward();
    for (const auto& p : model->parameters()) (checkpoint ? recomputed : plain).push_back(p.grad().clone());
  }
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_TRUE(torch::allclose(plain[i], recomputed[i], 1e-12, 1e-14)) << i;
}

TEST(LlamaModel, AnUntiedHeadsGradientAndTheEmbeddingsSumToTheTiedMatrixs) {
  ModelSpec spec = TinyGqa();
  spec.tie_embeddings = true;
  LlamaModel tied(spec, 9);
  tied->set_precision(Precision::kFp64);
  LlamaModel copied(spec, 9);
  copied->set_precision(Precision::kFp64);
  copied->UntieHead();
  ASSERT_TRUE(copied->head_is_tied_copy());
  EXPECT_FALSE(tied->head_is_tied_copy());
  const auto params = copied->named_parameters();
  ASSERT_TRUE(params.contains("lm_head.weight"));
  EXPECT_EQ(params.size(), tied->named_parameters().size() + 1);
  EXPECT_TRUE(torch::equal(params["lm_head.weight"], tied->embed_tokens->weight));
  // Nothing shared: the copy is a tensor of its own.
  EXPECT_NE(params["lm_head.weight"].data_ptr(), copied->embed_tokens->weight.data_ptr());

  torch::Tensor tokens = torch::randint(0, spec.vocab_size, {3, 8});
  torch::Tensor tied_loss = NextTokenLoss(tied->forward(tokens), tokens);
  torch::Tensor copied_loss = NextTokenLoss(copied->forward(tokens), tokens);
  EXPECT_NEAR(tied_loss.item<double>(), copied_loss.item<double>(), 1e-14);
  tied_loss.backward();
  copied_loss.backward();
  const torch::Tensor embedding = copied->embed_tokens->weight.grad();
  const torch::Tensor head = params["lm_head.weight"].grad();
  ASSERT_TRUE(embedding.defined() && head.defined());
  EXPECT_GT(head.abs().max().item<double>(), 0);  // each copy takes a gradient of its own
  EXPECT_TRUE(torch::allclose(embedding + head, tied->embed_tokens->weight.grad(), 1e-12, 1e-14));
  for (const auto& p : tied->named_parameters()) {
    if (p.key() == "model.embed_tokens.weight") continue;
    EXPECT_TRUE(torch::allclose(p.value().grad(), params[p.key()].grad(), 1e-12, 1e-14)) << p.key();
  }
}

// One model run by several threads at once (the profiler's background load does this): the
// rotary tables, built on first use, are built once and shared, never raced for.
TEST(LlamaModel, SeveralThreadsRunOneModelAtOnce) {
  ModelSpec spec = TinyGqa();
  spec.num_layers = 1;
  const ModelSlice layer{false, 0, 1, false};
  constexpr int kThreads = 4;
  for (int round = 0; round < 100; ++round) {
    LlamaModel model(spec, round);  // constructed here: construction draws from the global generator
    std::vector<torch::Tensor> inputs, alone(kThreads), together(kThreads);
    for (int t = 0; t < kThreads; ++t) inputs.push_back(torch::randn({1, 3 + t, spec.hidden_size}));
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        ++ready;
        while (ready.load() < kThreads) {
        }
        torch::NoGradGuard no_grad;
        together[t] = model->Run(layer, inputs[t], false);  // each a sequence length of its own
      });
    for (auto& th : threads) th.join();
    LlamaModel fresh(spec, round);
    torch::NoGradGuard no_grad;
    for (int t = 0; t < kThreads; ++t) {
      alone[t] = fresh->Run(layer, inputs[t], false);
      EXPECT_TRUE(torch::equal(alone[t], together[t])) << "round " << round << ", thread " << t;
    }
  }
}

}  // namespace
}  // namespace motley
