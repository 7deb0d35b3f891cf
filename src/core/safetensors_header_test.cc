#include "core/safetensors_header.h"

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "core/file_io.h"

namespace motley {
namespace {

std::string File(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\0');
}

TEST(SafetensorsHeader, TheFuzzSeedIsAccepted) {
  const std::string path = std::string(MOTLEY_SOURCE_DIR) + "/fuzz/seeds/model.safetensors";
  Result<SafetensorsHeader> h = ReadSafetensorsHeader(path);
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->entries.at("lm_head.weight").shape, (std::vector<int64_t>{2, 4}));
  EXPECT_TRUE(ParseSafetensorsBytes(ReadFileToString(path).value(), path).ok());
}

TEST(SafetensorsHeader, ReadsEntriesAndMetadata) {
  Result<SafetensorsHeader> h = ParseSafetensorsBytes(
      File(
          R"({"__metadata__": {"format": "pt"}, "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}})",
          24),
      "m.safetensors");
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->metadata.at("format"), "pt");
  EXPECT_EQ(h->entries.at("w").element_bytes, 4);
  EXPECT_EQ(h->entries.at("w").shape, (std::vector<int64_t>{2, 3}));
}

// Every size is checked against the file before anything is allocated (#28: a [2^62, 4] shape
// reached torch's storage-size overflow), without overflowing itself.
TEST(SafetensorsHeader, ShapesOffsetsAndLengthsAreCheckedAgainstTheFile) {
  struct Case {
    std::string header;
    size_t data;
    const char* message;
  };
  for (const Case& c :
       {Case{R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 16]}})", 16,
             "holds more elements than the file's 16 data bytes"},
        Case{R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}})", 20, "(truncated?)"},
        Case{R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [18446744073709551615, 8]}})", 20,
             "data_offsets must be [begin, end]"},
        Case{R"({"w": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 8]}})", 8, "unsupported dtype Q4"},
        Case{R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8, "non-negative integers"},
        Case{R"([1, 2])", 0, "the header is not a JSON object"},
        // Two tensors sharing bytes (#48): each would read the other's.
        Case{R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
                 "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
             16, "tensors a (bytes 0-16) and b (bytes 8-16) overlap"}}) {
    Result<SafetensorsHeader> h = ParseSafetensorsBytes(File(c.header, c.data), "m.safetensors");
    ASSERT_FALSE(h.ok()) << c.header;
    EXPECT_NE(h.status().message().find(c.message), std::string::npos) << h.status().message();
  }
  std::string lying = File("{}", 0);
  lying[0] = 100;  // a header longer than the file
  EXPECT_NE(ParseSafetensorsBytes(lying, "m.safetensors")
                .status()
                .message()
                .find("header length 100 in a file of 10"),
            std::string::npos);
  EXPECT_FALSE(ParseSafetensorsBytes("abc", "m.safetensors").ok());
}

}  // namespace
}  // namespace motley
