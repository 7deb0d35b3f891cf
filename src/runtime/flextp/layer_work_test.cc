#include "runtime/flextp/layer_work.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

struct Weights {
  torch::Tensor gate, up, down;  // [8, 6], [8, 6], [6, 8]: eight units
};

Weights Make() {
  torch::manual_seed(3);
  return {torch::randn({8, 6}, torch::kFloat64).requires_grad_(true),
          torch::randn({8, 6}, torch::kFloat64).requires_grad_(true),
          torch::randn({6, 8}, torch::kFloat64).requires_grad_(true)};
}

TEST(LayerWork, BorrowedUnitsComputeWhatTheOwnerWouldHave) {
  Weights w = Make();
  // (In a layer the input always needs a gradient: it comes through the norm's weight.)
  torch::Tensor m = torch::randn({2, 3, 6}, torch::kFloat64).requires_grad_(true);
  torch::Tensor full = MlpWithWork(m, w.gate, w.up, w.down, nullptr);
  std::vector<torch::Tensor> full_grads = torch::autograd::grad({full.pow(2).sum()}, {w.gate, w.up, w.down});

  // This rank keeps units 0-5 and computes units 6-7 for their owner.
  Weights mine = Make();
  LayerWork work;
  work.keep = torch::arange(6, torch::kInt64);
  work.gate = mine.gate.detach().narrow(0, 6, 2);
  work.up = mine.up.detach().narrow(0, 6, 2);
  work.down = mine.down.detach().narrow(1, 6, 2);
  work.grad_gate = torch::zeros({2, 6}, torch::kFloat64);  // the master dtype
  work.grad_up = torch::zeros({2, 6}, torch::kFloat64);
  work.grad_down = torch::zeros({6, 2}, torch::kFloat64);
  torch::Tensor split = MlpWithWork(m, mine.gate, mine.up, mine.down, &work);
  EXPECT_TRUE(torch::allclose(split, full, 1e-12, 1e-12));
  // (Autograd runs the borrowed units' backward on the way to the input's gradient.)
  std::vector<torch::Tensor> g =
      torch::autograd::grad({split.pow(2).sum()}, {mine.gate, mine.up, mine.down, m});
  // Own units: the same gradients; the moved units: none here, the accumulators hold them.
  EXPECT_TRUE(torch::allclose(g[0].narrow(0, 0, 6), full_grads[0].narrow(0, 0, 6), 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(g[2].narrow(1, 0, 6), full_grads[2].narrow(1, 0, 6), 1e-12, 1e-12));
  EXPECT_EQ(g[0].narrow(0, 6, 2).abs().max().item<double>(), 0);
  EXPECT_TRUE(torch::allclose(work.grad_gate, full_grads[0].narrow(0, 6, 2), 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(work.grad_up, full_grads[1].narrow(0, 6, 2), 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(work.grad_down, full_grads[2].narrow(1, 6, 2), 1e-12, 1e-12));
}

TEST(LayerWork, PrunedUnitsGetZeroGradientsAndTheRestTheSubnetworks) {
  Weights w = Make();
  torch::Tensor m = torch::randn({2, 3, 6}, torch::kFloat64);
  LayerWork work;
  work.keep = torch::tensor(std::vector<int64_t>{0, 2, 5}, torch::kInt64);
  torch::Tensor pruned = MlpWithWork(m, w.gate, w.up, w.down, &work);
  std::vector<torch::Tensor> g = torch::autograd::grad({pruned.pow(2).sum()}, {w.gate, w.up, w.down});
  // The same as a network of only those units, with their gradients in their own rows.
  Weights sub{w.gate.detach().index_select(0, work.keep).requires_grad_(true),
              w.up.detach().index_select(0, work.keep).requires_grad_(true),
              w.down.detach().index_select(1, work.keep).requires_grad_(true)};
  torch::Tensor expect = MlpWithWork(m, sub.gate, sub.up, sub.down, nullptr);
  EXPECT_TRUE(torch::allclose(pruned, expect, 1e-12, 1e-12));
  std::vector<torch::Tensor> sg = torch::autograd::grad({expect.pow(2).sum()}, {sub.gate, sub.up, sub.down});
  EXPECT_TRUE(torch::allclose(g[0].index_select(0, work.keep), sg[0], 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(g[2].index_select(1, work.keep), sg[2], 1e-12, 1e-12));
  for (int64_t u : {1, 3, 4, 6, 7}) {
    EXPECT_EQ(g[0][u].abs().max().item<double>(), 0) << u;
    EXPECT_EQ(g[1][u].abs().max().item<double>(), 0) << u;
    EXPECT_EQ(g[2].select(1, u).abs().max().item<double>(), 0) << u;
  }
  // And it differs from the whole network.
  EXPECT_FALSE(torch::allclose(pruned, MlpWithWork(m, w.gate, w.up, w.down, nullptr), 1e-3, 1e-3));
}

// One rank's attention of hidden size 8 (fp64, weights and input needing gradients): `heads` query
// heads in groups of heads / kv_heads, a [2, 3, 8] input and rotary tables for 3 positions.
struct Attention {
  ModelSpec spec;
  torch::Tensor q, k, v, o, hidden, cos, sin;
};
Attention MakeAttention(int64_t heads, int64_t kv_heads, uint64_t seed) {
  Attention a;
  a.spec.hidden_size = 8;
  a.spec.num_heads = heads;
  a.spec.num_kv_heads = kv_heads;
  const int64_t d = 8 / heads;
  torch::manual_seed(seed);
  auto param = [](std::vector<int64_t> shape) {
    return torch::randn(shape, torch::kFloat64).requires_grad_(true);
  };
  a.q = param({8, 8}), a.k = param({kv_heads * d, 8}), a.v = param({kv_heads * d, 8}), a.o = param({8, 8});
  a.hidden = torch::randn({2, 3, 8}, torch::kFloat64).requires_grad_(true);
  a.cos = torch::cos(torch::randn({3, d}, torch::kFloat64));
  a.sin = torch::sin(torch::randn({3, d}, torch::kFloat64));
  return a;
}

TEST(LayerWork, PrunedAttentionFeaturesMissOnlyTheirPartialProducts) {
  Attention a = MakeAttention(2, 1, 5);  // head_dim 4, one group of two query heads
  auto& [spec, q, k, v, o, hidden, cos, sin] = a;
  const torch::Tensor full = AttentionPartial(spec, hidden, q, k, v, o, cos, sin);
  // Every feature kept: the whole attention.
  LayerWork all;
  all.attention_features = torch::arange(8, torch::kInt64);
  EXPECT_TRUE(
      torch::allclose(AttentionWithWork(spec, hidden, q, k, v, o, cos, sin, &all), full, 1e-12, 1e-12));
  // Features 1, 4 and 6 pruned: the same as their columns of q, k, v and rows of o set to zero.
  LayerWork work;
  work.attention_features = torch::tensor(std::vector<int64_t>{0, 2, 3, 5, 7}, torch::kInt64);
  const torch::Tensor pruned = AttentionWithWork(spec, hidden, q, k, v, o, cos, sin, &work);
  torch::Tensor column = torch::ones({8}, torch::kFloat64);
  for (int64_t f : {1, 4, 6}) column[f] = 0;
  const torch::Tensor expect =
      AttentionPartial(spec, hidden, q * column, k * column, v * column, o * column.unsqueeze(1), cos, sin);
  EXPECT_TRUE(torch::allclose(pruned, expect, 1e-12, 1e-12));
  EXPECT_FALSE(torch::allclose(pruned, full, 1e-3, 1e-3));
  // Their weights' gradients are zeros (the imputation); the kept ones' are the subnetwork's.
  const auto g = torch::autograd::grad({pruned.pow(2).sum()}, {q, k, v, o, hidden});
  const auto ge = torch::autograd::grad({expect.pow(2).sum()}, {q, k, v, o});
  for (int64_t f : {1, 4, 6}) {
    EXPECT_EQ(g[0].select(1, f).abs().max().item<double>(), 0) << f;
    EXPECT_EQ(g[1].select(1, f).abs().max().item<double>(), 0) << f;
    EXPECT_EQ(g[2].select(1, f).abs().max().item<double>(), 0) << f;
    EXPECT_EQ(g[3][f].abs().max().item<double>(), 0) << f;
    EXPECT_EQ(g[4].select(2, f).abs().max().item<double>(), 0) << f;  // this rank adds nothing to them
  }
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(torch::allclose(g[i], ge[i] * (i == 3 ? column.unsqueeze(1) : column), 1e-12, 1e-12)) << i;
}

// A straggler's last query heads computed by this rank: the output and every gradient are the
// owner's, the heads' weight gradients land in the work's accumulator, and the forward's graph is
// kept only while a backward is to come (released by it; none without gradients).
TEST(LayerWork, BorrowedAttentionHeadsComputeWhatTheOwnerWouldHave) {
  Attention a = MakeAttention(4, 2, 7);  // head_dim 2, two groups of two query heads
  auto& [spec, q, k, v, o, hidden, cos, sin] = a;
  const torch::Tensor full = AttentionPartial(spec, hidden, q, k, v, o, cos, sin);
  const auto want = torch::autograd::grad({full.pow(2).sum()}, {q, k, v, o, hidden});

  // This rank computes its first group's two heads and, for the owner, the second group's.
  LayerWork work;
  work.attention_keep = 2;
  work.attention = AttentionHeadRows(spec, {torch::Tensor(), q, k, v, o}).detach().narrow(0, 2, 2).clone();
  work.grad_attention = torch::zeros_like(work.attention);
  const torch::Tensor split = AttentionWithWork(spec, hidden, q, k, v, o, cos, sin, &work);
  EXPECT_TRUE(torch::allclose(split, full, 1e-12, 1e-12));
  ASSERT_EQ(work.attention_graphs.size(), 1u);
  const auto got = torch::autograd::grad({split.pow(2).sum()}, {q, k, v, o, hidden});
  EXPECT_TRUE(torch::allclose(got[4], want[4], 1e-12, 1e-12));  // the input's gradient, both groups'
  // Own heads: their rows of q, k, v and columns of o; the borrowed heads' arrive in the accumulator.
  EXPECT_TRUE(torch::allclose(got[0].narrow(0, 0, 4), want[0].narrow(0, 0, 4), 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(got[3].narrow(1, 0, 4), want[3].narrow(1, 0, 4), 1e-12, 1e-12));
  EXPECT_EQ(got[0].narrow(0, 4, 4).abs().max().item<double>(), 0);
  const HeadParts home = SumHeadRows(spec, 2, work.grad_attention);
  EXPECT_EQ(home.q_row, 4);
  EXPECT_EQ(home.kv_row, 2);
  EXPECT_TRUE(torch::allclose(home.q, want[0].narrow(0, 4, 4), 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(home.k, want[1].narrow(0, 2, 2), 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(home.v, want[2].narrow(0, 2, 2), 1e-12, 1e-12));
  EXPECT_TRUE(torch::allclose(home.o, want[3].narrow(1, 4, 4), 1e-12, 1e-12));
  EXPECT_FALSE(work.attention_graphs[0].out.defined()) << "the backward releases the forward's graph";

  {  // Without gradients (evaluation, a checkpointed layer's first forward): the same output, no graph.
    torch::NoGradGuard no_grad;
    LayerWork eval = work;
    eval.attention_graphs.clear();
    EXPECT_TRUE(
        torch::allclose(AttentionWithWork(spec, hidden, q, k, v, o, cos, sin, &eval), full, 1e-12, 1e-12));
    EXPECT_TRUE(eval.attention_graphs.empty());
  }
}

// Grouped-query attention where a rank's heads split within a key/value group (a rank holding a
// single group, as Llama 3 8B's do at width 8): the owner keeps head 0, one borrower computes heads
// 1-2 (a run from the middle of group 0 into group 1), another head 3. Each computes the key and
// value of the groups its heads touch; the outputs add up to the owner's, and the gradients — each
// copy of a group's key and value summed at home — to its gradients, exactly.
TEST(LayerWork, QueryHeadsOfOneKeyValueGroupSplitAcrossRanksExactly) {
  Attention a = MakeAttention(4, 2, 11);  // head_dim 2, two groups of two query heads
  auto& [spec, q, k, v, o, hidden, cos, sin] = a;
  const torch::Tensor full = AttentionPartial(spec, hidden, q, k, v, o, cos, sin);
  const auto want = torch::autograd::grad({full.pow(2).sum()}, {q, k, v, o, hidden});
  const torch::Tensor rows = AttentionHeadRows(spec, {torch::Tensor(), q, k, v, o}).detach();

  LayerWork owner;
  owner.attention_keep = 1;
  LayerWork x, y;  // the borrowers: none of their own heads here, only the owner's
  x.attention_keep = y.attention_keep = 0;
  x.attention = rows.narrow(0, 1, 2).clone();
  x.attention_runs = {{0, 2, 1}};  // heads 1-2: the first of them one head into its group
  y.attention = rows.narrow(0, 3, 1).clone();
  y.attention_runs = {{0, 1, 1}};
  for (LayerWork* w : {&x, &y}) w->grad_attention = torch::zeros_like(w->attention);
  const torch::Tensor split = AttentionWithWork(spec, hidden, q, k, v, o, cos, sin, &owner) +
                              AttentionWithWork(spec, hidden, q, k, v, o, cos, sin, &x) +
                              AttentionWithWork(spec, hidden, q, k, v, o, cos, sin, &y);
  EXPECT_TRUE(torch::allclose(split, full, 1e-12, 1e-12));
  auto got = torch::autograd::grad({split.pow(2).sum()}, {q, k, v, o, hidden});
  EXPECT_TRUE(torch::allclose(got[4], want[4], 1e-12, 1e-12));
  // The owner's own gradients cover head 0 and group 0's key and value as head 0 uses them.
  EXPECT_EQ(got[0].narrow(0, 2, 6).abs().max().item<double>(), 0);
  EXPECT_EQ(got[1].narrow(0, 2, 2).abs().max().item<double>(), 0);
  EXPECT_FALSE(torch::allclose(got[1].narrow(0, 0, 2), want[1].narrow(0, 0, 2), 1e-6, 1e-6))
      << "group 0 is shared";
  // Each borrower's runs come home and are added where they belong.
  for (auto [w, begin] : {std::pair<LayerWork*, int64_t>{&x, 1}, {&y, 3}}) {
    const HeadParts p = SumHeadRows(spec, begin, w->grad_attention);
    got[0].narrow(0, p.q_row, p.q.size(0)).add_(p.q);
    got[1].narrow(0, p.kv_row, p.k.size(0)).add_(p.k);
    got[2].narrow(0, p.kv_row, p.v.size(0)).add_(p.v);
    got[3].narrow(1, p.q_row, p.o.size(1)).add_(p.o);
  }
  for (int i = 0; i < 4; ++i)
    EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-12, 1e-12)) << "weight " << i + 1;
  // A run computes a group's key and value once: the copies beside the run's first head in a group
  // get no gradient (x's head 2 is group 1's first in its run, so both of x's heads carry one).
  EXPECT_GT(x.grad_attention[1].narrow(0, 2, 4).abs().max().item<double>(), 0);
}

}  // namespace
}  // namespace motley
