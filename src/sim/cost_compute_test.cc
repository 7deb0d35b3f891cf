#include "sim/cost_compute.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

TEST(RooflineCompute, LargeBatchIsComputeBound) {
  const GpuSpec& a100 = *GpuCatalog::Builtin().Find("a100-80gb");
  const ModelSpec& m = *FindModelPreset("llama-7b");
  double t = RooflineLayerForwardS(a100, m, 1024, 8, Precision::kBf16);
  double expected = LayerForwardFlopsPerToken(m, 1024) * 1024 * 8 / (312e12 * 0.5);
  EXPECT_NEAR(t, expected, expected * 1e-12);
}

TEST(RooflineCompute, TinyBatchIsBoundByReadingWeights) {
  const GpuSpec& t4 = *GpuCatalog::Builtin().Find("t4");
  const ModelSpec& m = *FindModelPreset("llama-7b");
  double t = RooflineLayerForwardS(t4, m, 1, 1, Precision::kFp16);
  EXPECT_DOUBLE_EQ(t, ParamsPerLayer(m) * 2.0 / 320e9);
}

TEST(RooflineCompute, CloseToPublishedA100Measurement) {
  // Zorse's published measurement (shared/data/zorse-measured): Llama-7B, seq 1024, fp16,
  // A100-80GB forward of one layer at microbatch 1 takes 2.54 ms.
  const GpuSpec& a100 = *GpuCatalog::Builtin().Find("a100x80");
  double t = RooflineLayerForwardS(a100, *FindModelPreset("llama-7b"), 1024, 1, Precision::kFp16);
  EXPECT_NEAR(t * 1e3, 2.54, 2.54 * 0.15);
}

TEST(RooflineCompute, BackwardIsTwiceForwardPlusRecompute) {
  const GpuSpec& h100 = *GpuCatalog::Builtin().Find("h100-sxm");
  const ModelSpec& m = *FindModelPreset("llama-13b");
  double f = RooflineLayerForwardS(h100, m, 2048, 2, Precision::kBf16);
  EXPECT_DOUBLE_EQ(RooflineLayerBackwardS(h100, m, 2048, 2, Precision::kBf16, false), 2 * f);
  EXPECT_DOUBLE_EQ(RooflineLayerBackwardS(h100, m, 2048, 2, Precision::kBf16, true), 3 * f);
}

}  // namespace
}  // namespace motley
