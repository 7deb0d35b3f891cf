#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>

#include "runtime/builtin_corpus.h"
#include "runtime/data_sampler.h"
#include "runtime/token_file.h"

namespace motley {
namespace {

namespace fs = std::filesystem;

fs::path TempDir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  fs::create_directories(p);
  return p;
}

TEST(TokenFile, RoundTripsNarrowAndWideTokens) {
  fs::path dir = TempDir("motley_tokens");
  for (int64_t vocab : {256, 70000}) {
    std::vector<uint32_t> tokens;
    for (uint32_t i = 0; i < 1000; ++i) tokens.push_back((i * 7919) % vocab);
    const std::string path = (dir / ("t" + std::to_string(vocab) + ".bin")).string();
    ASSERT_TRUE(WriteTokenFile(path, tokens, vocab).ok());
    TokenFile f = TokenFile::Open(path, vocab).value();
    EXPECT_EQ(f.num_tokens(), 1000);
    EXPECT_EQ(f.bytes_per_token(), vocab > 65536 ? 4 : 2);
    for (size_t i = 0; i < tokens.size(); ++i) ASSERT_EQ(f[i], tokens[i]);
    std::vector<int64_t> window;
    f.Copy(10, 5, &window);
    EXPECT_EQ(window[4], tokens[14]);
  }
  fs::remove_all(dir);
}

TEST(TokenFile, BadFilesGetClearErrors) {
  fs::path dir = TempDir("motley_bad_tokens");
  const std::string good = (dir / "good.bin").string();
  ASSERT_TRUE(WriteTokenFile(good, std::vector<uint32_t>(100, 200), 256).ok());
  // Truncated: cut the last tokens off.
  const std::string cut = (dir / "cut.bin").string();
  fs::copy_file(good, cut);
  fs::resize_file(cut, fs::file_size(cut) - 10);
  Result<TokenFile> truncated = TokenFile::Open(cut);
  ASSERT_FALSE(truncated.ok());
  EXPECT_NE(truncated.status().message().find("truncated or padded: the header says 100 tokens"), std::string::npos)
      << truncated.status().message();
  // Wrong magic.
  const std::string text = (dir / "text.bin").string();
  std::ofstream(text) << std::string(2000, 'x');
  Result<TokenFile> magic = TokenFile::Open(text);
  ASSERT_FALSE(magic.ok());
  EXPECT_NE(magic.status().message().find("wrong magic"), std::string::npos);
  // Tokens beyond the model's vocabulary.
  Result<TokenFile> vocab = TokenFile::Open(good, 128);
  ASSERT_FALSE(vocab.ok());
  EXPECT_NE(vocab.status().message().find("token 200 at position 0 is outside the model's vocabulary of 128"),
            std::string::npos)
      << vocab.status().message();
  EXPECT_EQ(TokenFile::Open((dir / "missing.bin").string()).status().code(), StatusCode::kNotFound);
  fs::remove_all(dir);
}

TEST(DataSampler, DeterministicUniformAndInRange) {
  std::set<int64_t> starts;
  for (int64_t i = 0; i < 2000; ++i) {
    const int64_t s = SampleWindowStart(1234, 7, i, 10000, 128);
    EXPECT_EQ(s, SampleWindowStart(1234, 7, i, 10000, 128));
    EXPECT_GE(s, 0);
    EXPECT_LE(s + 128 + 1, 10000);
    starts.insert(s);
  }
  EXPECT_GT(starts.size(), 1700u);  // well spread
  EXPECT_NE(SampleWindowStart(1234, 7, 0, 10000, 128), SampleWindowStart(1234, 8, 0, 10000, 128));
  EXPECT_NE(SampleWindowStart(1234, 7, 0, 10000, 128), SampleWindowStart(99, 7, 0, 10000, 128));
}

TEST(BuiltinCorpus, IsDeterministicTextWithStructure) {
  const std::string& c = BuiltinCorpus();
  EXPECT_GE(c.size(), 400000u);
  EXPECT_EQ(c.substr(0, 5), "When ");
  EXPECT_NE(c.find(" make "), std::string::npos);
  // Byte-level: a small alphabet, far from random bytes.
  std::set<char> alphabet(c.begin(), c.end());
  EXPECT_LT(alphabet.size(), 60u);
}

}  // namespace
}  // namespace motley
