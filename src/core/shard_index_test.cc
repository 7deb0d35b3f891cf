#include "core/shard_index.h"

#include <gtest/gtest.h>

namespace motley {
namespace {

// A 4x6 matrix stored as two tensor-parallel slices of 12 elements, split over three rank files,
// and a 6-element vector in one.
ShardIndex TwoSlices() {
  ShardIndex index;
  index.parameters["w"] = {{4, 6}, 2};
  index.parameters["norm.weight"] = {{6}, 1};
  index.pieces = {{"rank-00000.safetensors", "w", 0, 0, 5},
                  {"rank-00001.safetensors", "w", 0, 5, 7},
                  {"rank-00002.safetensors", "w", 1, 0, 12},
                  {"rank-00000.safetensors", "norm.weight", 0, 0, 6}};
  return index;
}

TEST(ShardIndex, RoundTripsThroughItsJson) {
  const ShardIndex index = TwoSlices();
  Result<ShardIndex> back = ParseShardIndex(ShardIndexJson(index), "shards.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->pieces.size(), 4u);
  EXPECT_EQ(back->pieces[1].file, "rank-00001.safetensors");
  EXPECT_EQ(back->pieces[1].begin, 5);
  EXPECT_EQ(back->pieces[1].count, 7);
  EXPECT_EQ(back->pieces[2].tp_index, 1);
  EXPECT_EQ(back->parameters.at("w").shape, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(back->parameters.at("w").tp_degree, 2);
  EXPECT_EQ(SliceElements(back->parameters.at("w")), 12);
}

TEST(ShardIndex, EveryElementInExactlyOnePiece) {
  ShardIndex gap = TwoSlices();
  gap.pieces[1].begin = 6;
  gap.pieces[1].count = 6;
  Status s = ValidateShardIndex(gap, "ck/shards.json");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("ck/shards.json: w (slice 0 of 2): elements 5..5 are in no rank file"),
            std::string::npos)
      << s.message();

  ShardIndex overlap = TwoSlices();
  overlap.pieces[1].begin = 4;
  overlap.pieces[1].count = 8;
  s = ValidateShardIndex(overlap, "shards.json");
  EXPECT_NE(s.message().find("in two rank files"), std::string::npos) << s.message();

  ShardIndex short_slice = TwoSlices();
  short_slice.pieces[2].count = 11;
  s = ValidateShardIndex(short_slice, "shards.json");
  EXPECT_NE(s.message().find("cover 11 of its 12 elements"), std::string::npos) << s.message();

  ShardIndex missing = TwoSlices();
  missing.pieces.pop_back();
  s = ValidateShardIndex(missing, "shards.json");
  EXPECT_NE(s.message().find("no rank file holds norm.weight"), std::string::npos) << s.message();

  ShardIndex stranger = TwoSlices();
  stranger.pieces.push_back({"rank-00003.safetensors", "bias", 0, 0, 1});
  s = ValidateShardIndex(stranger, "shards.json");
  EXPECT_NE(s.message().find("names \"bias\""), std::string::npos) << s.message();
}

TEST(ShardIndex, RefusesWhatIsNotAnIndex) {
  for (const char* text :
       {"[]", R"({"format": "motley-shards-1"})", R"({"format": "x", "parameters": {}, "pieces": []})",
        R"({"format": "motley-shards-1", "parameters": {"w": {"shape": [-1]}}, "pieces": []})",
        R"({"format": "motley-shards-1", "parameters": {"w": {"shape": [2]}},
                               "pieces": [{"file": "../x", "param": "w", "begin": 0, "count": 2}]})",
        R"({"format": "motley-shards-1", "parameters": {"w": {"shape": [2]}},
                               "pieces": [{"file": "a", "param": "w", "begin": 0, "count": 0}]})"}) {
    Result<ShardIndex> r = ParseShardIndex(text, "dir/shards.json");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().message().rfind("dir/shards.json", 0), 0u) << r.status().message();
    EXPECT_NE(r.status().message().find("resume from another one"), std::string::npos)
        << r.status().message();
  }
}

TEST(ShardIndex, TensorNamesRoundTrip) {
  const std::string name =
      ShardTensorName("layers.3.self_attn.q_proj.weight", 2, 1234, ShardTensor::kExpAvgSq);
  EXPECT_EQ(name, "layers.3.self_attn.q_proj.weight#2#1234#exp_avg_sq");
  std::string param;
  int tp = -1;
  int64_t begin = -1;
  ShardTensor what = ShardTensor::kValues;
  ASSERT_TRUE(ParseShardTensorName(name, &param, &tp, &begin, &what));
  EXPECT_EQ(param, "layers.3.self_attn.q_proj.weight");
  EXPECT_EQ(tp, 2);
  EXPECT_EQ(begin, 1234);
  EXPECT_EQ(what, ShardTensor::kExpAvgSq);
  for (const char* not_ours :
       {"model.embed_tokens.weight", "w#0#0#grad", "w#x#0#values", "#0#0#values", "w#0#-1#values"})
    EXPECT_FALSE(ParseShardTensorName(not_ours, &param, &tp, &begin, &what)) << not_ours;
  EXPECT_EQ(RankShardFileName(3), "rank-00003.safetensors");
}

}  // namespace
}  // namespace motley
