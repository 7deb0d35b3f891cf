#include "plan/min_k_cut.h"

#include <functional>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "core/cluster_parse.h"

namespace motley {
namespace {

// Number of distinct parts, and whether parts are labelled 0..k-1.
int NumParts(const std::vector<int>& part) {
  return static_cast<int>(std::set<int>(part.begin(), part.end()).size());
}

TEST(MinKCut, SeparatesCliquesJoinedByWeakEdges) {
  // Three triangles of weight 10 joined in a chain by edges of weight 1 and 2.
  WeightedGraph g;
  g.num_vertices = 9;
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 3; ++i)
      for (int j = i + 1; j < 3; ++j) g.edges.push_back({3 * c + i, 3 * c + j, 10});
  g.edges.push_back({2, 3, 1});
  g.edges.push_back({5, 6, 2});
  auto parts = SplitMinKCuts(g);
  ASSERT_EQ(parts.size(), 9u);
  // k = 2 cuts the weight-1 edge; k = 3 also the weight-2 edge: the triangles.
  EXPECT_DOUBLE_EQ(CutWeight(g, parts[1]), 1);
  EXPECT_EQ(parts[1][0], parts[1][2]);
  EXPECT_NE(parts[1][2], parts[1][3]);
  EXPECT_DOUBLE_EQ(CutWeight(g, parts[2]), 3);
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(parts[2][3 * c], parts[2][3 * c + 1]);
    EXPECT_EQ(parts[2][3 * c], parts[2][3 * c + 2]);
  }
  for (int k = 1; k <= 9; ++k) EXPECT_EQ(NumParts(parts[k - 1]), k);
}

TEST(MinKCut, DisconnectedGraphSplitsForFree) {
  WeightedGraph g;
  g.num_vertices = 4;
  g.edges = {{0, 1, 5}, {2, 3, 5}};
  auto parts = SplitMinKCuts(g);
  EXPECT_DOUBLE_EQ(CutWeight(g, parts[1]), 0);
}

// The optimal k-cut by enumerating every partition (n <= 10).
double BruteForceMinKCut(const WeightedGraph& g, int k) {
  const int n = g.num_vertices;
  std::vector<int> part(n, 0);
  double best = std::numeric_limits<double>::infinity();
  std::function<void(int, int)> assign = [&](int v, int used) {
    if (n - v < k - used) return;  // not enough vertices left to fill the parts
    if (v == n) {
      if (used == k) best = std::min(best, CutWeight(g, part));
      return;
    }
    for (int p = 0; p < std::min(used + 1, k); ++p) {
      part[v] = p;
      assign(v + 1, std::max(used, p + 1));
    }
  };
  assign(0, 0);
  return best;
}

TEST(MinKCut, WithinTwoMinusTwoOverKOfBruteForceOnRandomGraphs) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 60; ++trial) {
    WeightedGraph g;
    g.num_vertices = std::uniform_int_distribution<int>(3, 10)(rng);
    std::uniform_real_distribution<double> w(0.1, 10);
    for (int a = 0; a < g.num_vertices; ++a)
      for (int b = a + 1; b < g.num_vertices; ++b)
        if (std::bernoulli_distribution(0.6)(rng)) g.edges.push_back({a, b, w(rng)});
    auto parts = SplitMinKCuts(g);
    for (int k = 2; k <= g.num_vertices; ++k) {
      const double opt = BruteForceMinKCut(g, k);
      const double split = CutWeight(g, parts[k - 1]);
      EXPECT_EQ(NumParts(parts[k - 1]), k);
      EXPECT_LE(split, (2.0 - 2.0 / k) * opt + 1e-9)
          << "trial " << trial << " n " << g.num_vertices << " k " << k;
      EXPECT_GE(split, opt - 1e-9);
    }
  }
}

TEST(MinKCut, ClusterSplitsAlongTheSlowInterRegionLinkFirst) {
  std::string text = "[network]\ninter_region_bandwidth = \"1Gbps\"\n";
  for (int n = 0; n < 6; ++n)
    text += "[[nodes]]\nname = \"n" + std::to_string(n) +
            "\"\ndevice = \"a10g\"\ncount = 4\nnic_bandwidth = \"100Gbps\"\n"
            "region = \"" +
            (n < 3 ? "east" : "west") + "\"\n";
  Cluster c = ParseClusterToml(text, "c.toml").value();
  WeightedGraph g = NodeBandwidthGraph(c);
  ASSERT_EQ(g.num_vertices, 6);  // 24 devices contracted into their 6 nodes
  auto parts = SplitMinKCuts(g);
  for (size_t n = 0; n < c.nodes.size(); ++n)
    for (size_t m = 0; m < c.nodes.size(); ++m)
      EXPECT_EQ(parts[1][n] == parts[1][m], c.nodes[n].region == c.nodes[m].region) << n << " " << m;
}

TEST(MinKCut, ZorseClusterCTwoCutIsNoHeavierThanTheRegionCut) {
  // On cluster C a V100 node's 25 Gbps NIC makes isolating it cheaper than cutting the two
  // regions apart; SPLIT must find a 2-cut at least as light as the region cut.
  Cluster c = LoadCluster("zorse-c").value();
  WeightedGraph g = NodeBandwidthGraph(c);
  ASSERT_EQ(g.num_vertices, 16);
  std::vector<int> by_region;
  for (const auto& n : c.nodes) by_region.push_back(n.region == c.nodes[0].region ? 0 : 1);
  EXPECT_LE(CutWeight(g, SplitMinKCuts(g)[1]), CutWeight(g, by_region));
}

}  // namespace
}  // namespace motley
