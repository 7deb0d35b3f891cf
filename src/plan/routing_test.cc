#include "plan/routing.h"

#include <map>

#include <gtest/gtest.h>

#include "core/cluster_parse.h"

namespace motley {
namespace {

TEST(ZorseRouting, FirstGroupByEarliestFinishLaterGroupsByMostRemainingWork) {
  Plan p;
  p.schedule = PipelineSchedule::kGPipe;
  // Group 0: device 0 takes 1 s per microbatch (3 of them), device 1 takes 3 s (1 of them).
  // Group 1: device 2 is slow (2 s, 2 microbatches), device 3 fast (1 s, 2 microbatches).
  p.groups = {GroupPlan{{{0, 1}}, 1, {{0, 1, 3, 0}, {1, 1, 1, 0}}, {}, {}},
              GroupPlan{{{1, 2}}, 1, {{2, 1, 2, 0}, {3, 1, 2, 0}}, {}, {}}};
  std::map<int, double> seconds = {{0, 1}, {1, 3}, {2, 2}, {3, 1}};
  auto routing = ZorseRouting(p, [&](int, int device) { return seconds[device]; });
  // Group 0: mb0 -> dev0 (finishes at 1 vs 3), mb1 -> dev0 (2 vs 3), mb2 -> dev0 (3 vs 3, first wins),
  // mb3 -> dev1 (dev0 is full): finish times 1, 2, 3, 3.
  EXPECT_EQ(routing[0], (std::vector<int>{0, 0, 0, 1}));
  // Group 1 in finish order mb0, mb1, mb2, mb3: the most remaining work first.
  // mb0: dev2 has 2x2 = 4, dev3 2x1 = 2 -> dev2. mb1: dev2 2, dev3 2 -> dev2 (ties keep the first).
  // mb2, mb3 -> dev3.
  EXPECT_EQ(routing[1], (std::vector<int>{2, 2, 3, 3}));
  // The routing respects every device's count and validates.
  p.groups[0].routing = routing[0];
  p.groups[1].routing = routing[1];
  ModelSpec m;
  m.name = "two";
  m.hidden_size = 8;
  m.num_layers = 2;
  m.num_heads = 2;
  m.num_kv_heads = 2;
  m.ffn_size = 8;
  m.vocab_size = 8;
  m.max_seq_len = 8;
  p.seq_len = 8;
  Cluster c = ParseClusterToml("[[nodes]]\nname = \"n\"\ndevice = \"t4\"\ncount = 4\n", "c.toml").value();
  Status s = ValidatePlan(p, c, m);
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST(ZorseRouting, SlowDeviceGetsTheEarlyMicrobatches) {
  // One slow device among fast ones in the second group: it is handed work first so that it does
  // not finish last.
  Plan p;
  p.groups = {GroupPlan{{{0, 1}}, 1, {{0, 1, 6, 0}}, {}, {}},
              GroupPlan{{{1, 2}}, 1, {{1, 1, 2, 0}, {2, 1, 2, 0}, {3, 1, 2, 0}}, {}, {}}};
  auto routing = ZorseRouting(p, [](int, int device) { return device == 3 ? 4.0 : 1.0; });
  EXPECT_EQ(routing[1][0], 3);
  EXPECT_EQ(routing[1][1], 3);
}

}  // namespace
}  // namespace motley
