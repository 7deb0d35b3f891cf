// motley's tokenizer.json tokenizer against implementations it shares no code with, from the npm
// registry (tests/reference/package.json, installed by Reference.InstallNpmPackages):
//   - Llama 3's tokenizer.json, built from the vocabulary and merges llama3-tokenizer-js ships, read
//     by motley and by @huggingface/tokenizers, and encoded by llama3-tokenizer-js's own BPE too;
//   - a Llama 2-style sentencepiece BPE with byte fallback (merges learned by the reference script).
// Token ids must be identical on the whole of tinyshakespeare and on a text written to break
// tokenizers. Skipped, saying why, where node or the registry is missing.
#include <unistd.h>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "data/hf_tokenizer.h"

namespace motley {
namespace {

namespace fs = std::filesystem;

const fs::path kNpm = MOTLEY_REFERENCE_NPM;
const fs::path kShakespeare =
    fs::path(MOTLEY_SOURCE_DIR) / ".." / "shared" / "data" / "tinyshakespeare" / "input.txt";

// Emoji (with modifiers and joiners), CJK, combining marks, right-to-left scripts, runs of spaces,
// tabs and newlines, digits of every length and other scripts' digits, contractions in both cases,
// text that looks like special tokens, the real special tokens, and invalid UTF-8 (a lone byte, a
// truncated sequence, a truncated 4-byte emoji, an encoded surrogate).
std::string TortureText() {
  return "Hello world! I'm you're we've they'll she'd it's DON'T I'M Y'ALL\n"
         "Emoji: 😀👍🏽👨‍👩‍👧‍👦🇫🇷 ✨🔥\n"
         "CJK: 日本語のテキスト、中文文本。한국어 텍스트\n"
         "Combining: e\u0301 a\u0308 n\u0303 Z\u0351\u0352\u0353 ﬁ ｆｕｌｌｗｉｄｔｈ\n"
         "RTL: שלום עולם مرحبا بالعالم\n"
         "Spaces:    four  two\t\ttabs \t mixed   \n\n\n\r\n  \n"
         "Digits: 1 12 123 1234 12345 123456 1234567 3.14159 1,000,000 ٣٤٥ ①②\n"
         "Symbols: <|begin_of_text|> <s> </s> <unk> ```code``` --> => !== ...\n"
         "   leading spaces and trailing   "
         "\nInvalid: \xff \xc3\x28 \xe2\x82 \xf0\x9f\x98 \xed\xa0\x80 end\n";
}

class TokenizerReference : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kNpm / "node_modules" / "@huggingface" / "tokenizers") ||
        !fs::exists(kNpm / "node_modules" / "llama3-tokenizer-js")) {
      std::ifstream why(kNpm / "UNAVAILABLE");
      std::stringstream s;
      s << why.rdbuf();
      GTEST_SKIP() << "the reference npm packages are not installed in " << kNpm << ": "
                   << (s.str().empty() ? "run ctest (Reference.InstallNpmPackages installs them)" : s.str());
    }
    dir_ = fs::temp_directory_path() / fmt::format("motley_tokref_{}", ::getpid());
    fs::create_directories(dir_);
    std::ofstream(dir_ / "torture.txt", std::ios::binary) << TortureText();
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Node(const std::string& args) {
    const std::string cmd = fmt::format("cd {} && node tokenizers.mjs {}", kNpm.string(), args);
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }
  std::vector<uint32_t> ReadIds(const fs::path& file) {
    std::ifstream in(file);
    return nlohmann::json::parse(in).get<std::vector<uint32_t>>();
  }
  static std::string ReadFile(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // The first place two id lists part, with a few ids either side, or "" when they are equal.
  static std::string Difference(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    if (i == a.size() && i == b.size()) return "";
    auto around = [&](const std::vector<uint32_t>& v) {
      std::vector<uint32_t> part(
          v.begin() + static_cast<std::ptrdiff_t>(std::min(v.size(), i > 3 ? i - 3 : 0)),
          v.begin() + static_cast<std::ptrdiff_t>(std::min(v.size(), i + 5)));
      return nlohmann::json(part).dump();
    };
    return fmt::format("lengths {} and {}; first difference at {}: {} vs {}", a.size(), b.size(), i,
                       around(a), around(b));
  }

  fs::path dir_;
};

TEST_F(TokenizerReference, Llama3IdsEqualBothReferencesOnShakespeareAndATortureText) {
  ASSERT_NO_FATAL_FAILURE(Node(fmt::format("llama3-folder {}", (dir_ / "llama3").string())));
  auto t = HfTokenizer::Load((dir_ / "llama3").string());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)->vocab_size(), 128256);
  EXPECT_EQ((*t)->document_start(), 128000);      // <|begin_of_text|>
  EXPECT_EQ((*t)->document_separator(), 128001);  // <|end_of_text|>
  std::vector<fs::path> texts = {dir_ / "torture.txt"};
  if (fs::exists(kShakespeare)) {
    texts.push_back(kShakespeare);
  } else {  // a clone without ../shared beside it: the torture text alone
    std::cout << kShakespeare << " is missing: the check on the whole of tinyshakespeare does not run here\n";
  }
  for (const fs::path& text : texts) {
    SCOPED_TRACE(text.string());
    std::vector<uint32_t> ids;
    ASSERT_TRUE((*t)->Encode(ReadFile(text), &ids).ok());
    ASSERT_NO_FATAL_FAILURE(Node(fmt::format("encode {} {} {}", (dir_ / "llama3").string(), text.string(),
                                             (dir_ / "hf.json").string())));
    ASSERT_NO_FATAL_FAILURE(
        Node(fmt::format("encode-llama3 {} {}", text.string(), (dir_ / "l3.json").string())));
    EXPECT_EQ(Difference(ids, ReadIds(dir_ / "hf.json")), "") << "against @huggingface/tokenizers";
    EXPECT_EQ(Difference(ids, ReadIds(dir_ / "l3.json")), "") << "against llama3-tokenizer-js";
    EXPECT_GT(ids.size(), 100u);
  }
  // Decoding gives the text back (invalid UTF-8 as U+FFFD).
  std::vector<uint32_t> ids;
  ASSERT_TRUE((*t)->Encode(TortureText(), &ids).ok());
  const std::string decoded = (*t)->Decode(ids);
  EXPECT_NE(decoded.find("👨‍👩‍👧‍👦🇫🇷"), std::string::npos);
  EXPECT_NE(decoded.find("Invalid: \xEF\xBF\xBD \xEF\xBF\xBD( \xEF\xBF\xBD \xEF\xBF\xBD "), std::string::npos)
      << decoded;
}

TEST_F(TokenizerReference, SentencePieceStyleIdsEqualTheReferenceOnShakespeareAndATortureText) {
  if (!fs::exists(kShakespeare))
    GTEST_SKIP() << kShakespeare << " is missing: its merges are learned from it";
  ASSERT_NO_FATAL_FAILURE(
      Node(fmt::format("sp-folder {} {} 400", (dir_ / "sp").string(), kShakespeare.string())));
  auto t = HfTokenizer::Load((dir_ / "sp").string());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)->document_start(), 1);      // <s>
  EXPECT_EQ((*t)->document_separator(), 2);  // </s>
  for (const fs::path& text : {dir_ / "torture.txt", kShakespeare}) {
    SCOPED_TRACE(text.string());
    std::vector<uint32_t> ids;
    ASSERT_TRUE((*t)->Encode(ReadFile(text), &ids).ok());
    ASSERT_NO_FATAL_FAILURE(Node(
        fmt::format("encode {} {} {}", (dir_ / "sp").string(), text.string(), (dir_ / "sp.json").string())));
    EXPECT_EQ(Difference(ids, ReadIds(dir_ / "sp.json")), "") << "against @huggingface/tokenizers";
  }
  // Characters outside the vocabulary come back from their bytes.
  std::vector<uint32_t> ids;
  ASSERT_TRUE((*t)->Encode("Emoji 😀 and 日本語", &ids).ok());
  EXPECT_EQ((*t)->Decode(ids), "Emoji 😀 and 日本語");
}

}  // namespace
}  // namespace motley
