// Replays every input in fuzz/regressions/ (inputs that once crashed or hung a parser, plus seeds)
// through the parsers in the normal build, so CI keeps them fixed.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include <gtest/gtest.h>

#include "config_parsers_fuzz.h"

namespace {

TEST(FuzzRegressions, EveryStoredInputParsesWithoutCrashing) {
  int count = 0;
  for (const auto& e : std::filesystem::directory_iterator(MOTLEY_FUZZ_REGRESSIONS)) {
    std::ifstream in(e.path(), std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    motley::FuzzConfigParsers(bytes.data(), bytes.size());
    ++count;
  }
  EXPECT_GT(count, 0);
}

}  // namespace
