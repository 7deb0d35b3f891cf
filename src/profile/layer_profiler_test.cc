#include "profile/layer_profiler.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "core/cluster_parse.h"
#include "plan/memory_model.h"
#include "profile/cluster_profiler.h"
#include "profile/memory_probe.h"

namespace motley {
namespace {

const ModelSpec& Tiny() { return *FindModelPreset("llama-tiny"); }

TEST(MemoryProbe, TheLargestMicrobatchIsExactlyTheLedgersLimit) {
  for (int zero : {0, 2, 3}) {
    const MemoryProbe probe{&Tiny(), 32, Precision::kFp32, zero, 2, true, false};
    for (int64_t capacity : {int64_t{3} << 20, int64_t{5} << 20, int64_t{9} << 20}) {
      SCOPED_TRACE(::testing::Message() << "ZeRO-" << zero << ", " << capacity << " bytes");
      const int64_t m = ProbeMaxMicrobatch(probe, capacity, 1000);
      ASSERT_GT(m, 1);
      ASSERT_LT(m, 1000);
      EXPECT_TRUE(ProbeFits(probe, m, capacity));
      EXPECT_FALSE(ProbeFits(probe, m + 1, capacity));
    }
    // Nothing fits in a few bytes; the cap bounds an unlimited device.
    EXPECT_EQ(ProbeMaxMicrobatch(probe, 1024, 1000), 0);
    EXPECT_EQ(ProbeMaxMicrobatch(probe, 0, 64), 64);
  }
}

TEST(LayerProfiler, MeasuresLayerAndHeadTimesAtEveryMicrobatch) {
  // What was measured, not how fast: no assertion here compares times, which load from the tests
  // beside this one can reorder (seen: a 5x slower forward at 1 sequence under ctest -j2).
  LayerProfilerConfig c;
  c.microbatches = {1, 4, 64};
  c.repeats = 3;
  Result<ProfileEntry> e = ProfileDeviceType("emu-cpu", Tiny(), 32, Precision::kFp32, 64 << 20, c);
  ASSERT_TRUE(e.ok()) << e.status().message();
  ASSERT_EQ(e->points.size(), 3u);
  ASSERT_EQ(e->head_points.size(), 3u);
  EXPECT_TRUE(e->backward_includes_recompute);
  EXPECT_GT(e->max_microbatch, 64);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(e->points[i].microbatch, c.microbatches[i]);
    EXPECT_EQ(e->head_points[i].microbatch, c.microbatches[i]);
    for (double ms : {e->points[i].forward_ms, e->points[i].backward_ms, e->head_points[i].forward_ms,
                      e->head_points[i].backward_ms}) {
      EXPECT_GT(ms, 0);
      EXPECT_TRUE(std::isfinite(ms));
    }
  }
  EXPECT_GT(e->optimizer_ms_per_mparam, 0);
  // A layer's share on a tensor-parallel rank, at every degree the heads allow and no other.
  for (int tp : c.tp_degrees) {
    const bool allowed =
        Tiny().num_kv_heads % tp == 0 && Tiny().num_heads % tp == 0 && Tiny().ffn_size % tp == 0;
    ASSERT_EQ(e->tp_points.count(tp), allowed ? 1u : 0u) << "tp " << tp;
    if (allowed) {
      ASSERT_EQ(e->tp_points.at(tp).size(), 3u);
    }
  }
  EXPECT_FALSE(e->tp_points.empty());
  // ZERO-resizing's overhead (FlexTP's pre-test) at its three ratios, each a fraction >= 0.
  ASSERT_EQ(e->resize_overhead.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(e->resize_overhead[i].first, std::vector<double>({0.125, 0.25, 0.5})[i]);
    EXPECT_GE(e->resize_overhead[i].second, 0);
    EXPECT_TRUE(std::isfinite(e->resize_overhead[i].second));
  }
  // It round-trips through the profile file and is found for its type and shape.
  Profile p;
  p.entries.push_back(*e);
  Result<Profile> back = ParseProfileJson(ProfileToJson(p).dump(), "p.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_NE(back->Find("emu-cpu", Tiny(), 32, Precision::kFp32), nullptr);
  EXPECT_NEAR(*back->entries[0].HeadForwardS(4), e->head_points[1].forward_ms * 1e-3, 1e-12);
}

TEST(LayerProfiler, ProfilesAModelLargerThanTheDevice) {
  // ~26M parameters: 16 bytes of fp32 training state each (420 MB) on a 128 MiB device.
  ModelSpec big = Tiny();
  big.name = "llama-26m";
  big.hidden_size = 512;
  big.num_heads = 8;
  big.num_kv_heads = 4;
  big.ffn_size = 1536;
  big.num_layers = 8;
  big.vocab_size = 256;
  const int64_t capacity = int64_t{128} << 20;
  ASSERT_GT(16.0 * static_cast<double>(TotalParams(big)), 3.0 * static_cast<double>(capacity));
  LayerProfilerConfig c;
  c.microbatches = {1, 2};
  c.repeats = 1;
  c.tp_degrees = {};
  c.max_microbatch_cap = 64;
  Result<ProfileEntry> e = ProfileDeviceType("emu-cpu", big, 32, Precision::kFp32, capacity, c, {8, true});
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->points.size(), 2u);
  EXPECT_GT(e->max_microbatch, 2);  // one layer with the embedding and the head
  ASSERT_TRUE(e->limits.has_value());
  EXPECT_EQ(e->limits->dp_degree, 8);
  EXPECT_EQ(e->limits->max_microbatch_by_zero[0], 0);  // the whole state does not fit
  EXPECT_GT(e->limits->max_microbatch_by_zero[3], 0);  // an eighth of it does
  // What the probe measures agrees with the memory model (the step's peak, at every stage).
  for (int z = 0; z < 4; ++z) {
    for (int64_t mb : {1, 2}) {
      const MemoryProbe probe{&big, 32, Precision::kFp32, z, 8, true, false};
      const double measured = static_cast<double>(RunMemoryProbe(probe, mb, 0).peak_bytes);
      const double modelled =
          DataParallelPeakBytes(PerLayerDataParallel(big, Precision::kFp32, z, 8, 32, true, true), mb);
      EXPECT_NEAR(modelled / measured, 1.0, 0.15)
          << "ZeRO-" << z << ", " << mb << " sequences: measured " << measured / 1048576 << " MiB, model "
          << modelled / 1048576;
    }
  }
  // A device that cannot hold one layer is a clear error naming the fix.
  Result<ProfileEntry> none = ProfileDeviceType("emu-cpu", big, 32, Precision::kFp32, 4 << 20, c, {8, true});
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("through one layer"), std::string::npos) << none.status().message();
}

TEST(ClusterProfiler, MeasuresEachTypeOnceAndReusesTheCache) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("motley_profile_cache_" + std::to_string(::getpid()));
  ::setenv("MOTLEY_CACHE_DIR", dir.c_str(), 1);
  Result<Cluster> cluster = LoadCluster("local-emulated");  // one type, emulated at two memory sizes
  ASSERT_TRUE(cluster.ok());
  ClusterProfileOptions o;
  o.layers.microbatches = {1, 2};
  o.layers.repeats = 1;
  o.layers.max_microbatch_cap = 8;
  std::vector<std::string> said;
  o.progress = [&](const std::string& s) { said.push_back(s); };
  Result<Profile> first = ProfileCluster(*cluster, Tiny(), 16, Precision::kFp32, o);
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_EQ(first->entries.size(), 1u);
  said.clear();
  Result<Profile> second = ProfileCluster(*cluster, Tiny(), 16, Precision::kFp32, o);
  ASSERT_TRUE(second.ok());
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find("measured before"), std::string::npos) << said[0];
  EXPECT_EQ(second->entries[0].points[0].forward_ms, first->entries[0].points[0].forward_ms);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace motley
