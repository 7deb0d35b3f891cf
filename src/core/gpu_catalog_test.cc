#include "core/gpu_catalog.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

TEST(GpuCatalog, HasEveryTypeTheIssueNamesWithSourcedPositiveFigures) {
  const char* required[] = {"h100-sxm", "h100-pcie", "h100-nvl", "h200",    "a100-40gb", "a100-80gb",
                            "a10g",     "a6000",     "l4",       "l40s",    "v100-16gb", "v100-32gb",
                            "t4",       "p100",      "p40",      "rtx3090", "rtx4090"};
  for (const char* name : required) {
    const GpuSpec* s = GpuCatalog::Builtin().Find(name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_GT(s->memory_bytes, 0) << name;
    EXPECT_GT(s->memory_bandwidth_bytes_per_s, 0) << name;
    EXPECT_GT(s->peak_fp16_flops, 0) << name;
    EXPECT_GT(s->peak_fp32_flops, 0) << name;
    EXPECT_GT(s->host_link_bytes_per_s, 0) << name;
    EXPECT_FALSE(s->source.empty()) << name;
  }
}

TEST(GpuCatalog, FiguresMatchTheZorsePaperTable3) {
  // Zorse Table 3: A100 312 TFLOPS FP16; V100 and A10G 125; T4 65; memory 40/80, 16, 24, 16 GB.
  const auto& c = GpuCatalog::Builtin();
  EXPECT_DOUBLE_EQ(c.Find("a100-80gb")->peak_fp16_flops, 312e12);
  EXPECT_DOUBLE_EQ(c.Find("v100-16gb")->peak_fp16_flops, 125e12);
  EXPECT_DOUBLE_EQ(c.Find("a10g")->peak_fp16_flops, 125e12);
  EXPECT_DOUBLE_EQ(c.Find("t4")->peak_fp16_flops, 65e12);
  EXPECT_DOUBLE_EQ(c.Find("a10g")->memory_bytes, 24.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(c.Find("h100-nvl")->memory_bytes, 94.0 * (1 << 30));
}

TEST(GpuCatalog, FindsAliasesCaseInsensitively) {
  const auto& c = GpuCatalog::Builtin();
  EXPECT_EQ(c.Find("A100X80")->name, "a100-80gb");  // the Zorse measurement's name
  EXPECT_EQ(c.Find("v100x16")->name, "v100-16gb");
  EXPECT_EQ(c.Find("no-such-gpu"), nullptr);
}

TEST(GpuCatalog, UpsertAddsOrReplaces) {
  GpuCatalog c = GpuCatalog::Builtin();
  size_t n = c.specs().size();
  GpuSpec t4 = *c.Find("t4");
  t4.peak_fp16_flops = 1;
  c.Upsert(t4);
  EXPECT_EQ(c.specs().size(), n);
  EXPECT_DOUBLE_EQ(c.Find("t4")->peak_fp16_flops, 1);
  GpuSpec fresh;
  fresh.name = "new-gpu";
  c.Upsert(fresh);
  EXPECT_EQ(c.specs().size(), n + 1);
  EXPECT_NE(c.Find("new-gpu"), nullptr);
}

}  // namespace
}  // namespace motley
