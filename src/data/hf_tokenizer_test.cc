// HfTokenizer on tokenizer.json files written here by hand, small enough to check by eye: a
// byte-level BPE with Llama 3's pre-tokenizer pattern and a sentencepiece-style BPE with byte
// fallback. (tests/reference checks both kinds against independent implementations on real text.)
#include "data/hf_tokenizer.h"

#include <unistd.h>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "data/bpe_merges.h"
#include "data/byte_level.h"
#include "data/utf8.h"

namespace motley {
namespace {

namespace fs = std::filesystem;

fs::path Folder(const std::string& name, const nlohmann::json& tokenizer,
                const nlohmann::json& config = nullptr) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("motley_tok_{}_{}", name, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tokenizer.dump();
  if (!config.is_null()) std::ofstream(dir / "tokenizer_config.json") << config.dump();
  return dir;
}

// One byte as byte-level vocabulary files write it.
std::string ByteChar(int b) { return ByteLevelEncode(std::string(1, static_cast<char>(b))); }

constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Bytes 0-255 are ids 0-255; then "he" 256, "Ġt" 257, "Ġthe" 258, "ll" 259, "llo" 260.
nlohmann::json ByteLevelTokenizer() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;
  const std::string G = ByteChar(' ');
  vocab["he"] = 256, vocab[G + "t"] = 257, vocab[G + "the"] = 258, vocab["ll"] = 259, vocab["llo"] = 260;
  return {{"added_tokens", {{{"id", 261}, {"content", "<|end|>"}, {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"},
               {"pattern", {{"Regex", kLlama3Pattern}}},
               {"behavior", "Isolated"},
               {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"},
            {"vocab", vocab},
            {"merges", {"h e", G + " t", G + "t he", "l l", "ll o"}},
            {"ignore_merges", true}}}};
}

std::vector<uint32_t> Encode(const HfTokenizer& t, std::string_view text) {
  std::vector<uint32_t> ids;
  EXPECT_TRUE(t.Encode(text, &ids).ok());
  return ids;
}

TEST(HfTokenizer, ByteLevelBpeMergesWithinThePatternsPieces) {
  const fs::path dir =
      Folder("bytelevel", ByteLevelTokenizer(), {{"bos_token", nullptr}, {"eos_token", "<|end|>"}});
  auto t = HfTokenizer::Load(dir.string());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ((*t)->vocab_size(), 262);
  // "hello the": pieces "hello", " the": h e -> he, l l -> ll, ll o -> llo; Ġ t -> Ġt, Ġt he -> Ġthe.
  EXPECT_EQ(Encode(**t, "hello the"), (std::vector<uint32_t>{256, 260, 258}));
  // The pattern keeps digits in threes and contractions apart; the added token is matched first.
  EXPECT_EQ(Encode(**t, "12345"), (std::vector<uint32_t>{'1', '2', '3', '4', '5'}));
  EXPECT_EQ(Encode(**t, "he<|end|>he"), (std::vector<uint32_t>{256, 261, 256}));
  EXPECT_EQ((*t)->document_separator(), 261);
  EXPECT_EQ((*t)->document_start(), -1);
  // Lossless on any valid UTF-8.
  const std::string text = "Grüße, 世界 👍🏽\n\n\t the hello 'll I'M";
  EXPECT_EQ((*t)->Decode(Encode(**t, text)), text);
  fs::remove_all(dir);
}

TEST(HfTokenizer, InvalidUtf8BecomesOneReplacementPerMaximalSubpart) {
  int64_t replaced = 0;
  // WHATWG: a lone continuation, a truncated 3-byte sequence, a surrogate's encoding (3 subparts).
  EXPECT_EQ(ReplaceInvalidUtf8("a\x80"
                               "b\xE2\x82"
                               "c\xED\xA0\x80",
                               &replaced),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD"
            "c\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(replaced, 5);
  EXPECT_EQ(ReplaceInvalidUtf8("ok ✓", &replaced), "ok ✓");
  EXPECT_EQ(replaced, 0);
  const fs::path dir = Folder("invalid", ByteLevelTokenizer());
  auto t = HfTokenizer::Load(dir.string());
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_EQ(Encode(**t, "x\xFFy"), Encode(**t, "x\xEF\xBF\xBDy"));
  EXPECT_EQ((*t)->replaced_invalid_utf8(), 1);
  fs::remove_all(dir);
}

nlohmann::json SentencePieceStyle() {
  nlohmann::json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) vocab[fmt::format("<0x{:02X}>", b)] = 3 + b;
  int next = 259;
  for (const char* s : {"▁", "h", "i", "t", "▁h", "▁hi", "é"}) vocab[s] = next++;
  return {{"added_tokens",
           {{{"id", 0}, {"content", "<unk>"}, {"special", true}},
            {{"id", 1}, {"content", "<s>"}, {"special", true}},
            {{"id", 2}, {"content", "</s>"}, {"special", true}}}},
          {"normalizer",
           {{"type", "Sequence"},
            {"normalizers",
             {{{"type", "Prepend"}, {"prepend", "▁"}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}}},
          {"pre_tokenizer", nullptr},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}}}},
          {"decoder",
           {{"type", "Sequence"},
            {"decoders",
             {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
              {{"type", "ByteFallback"}},
              {{"type", "Fuse"}},
              {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}}},
          {"model",
           {{"type", "BPE"},
            {"vocab", vocab},
            {"merges", {"▁ h", "▁h i"}},
            {"unk_token", "<unk>"},
            {"byte_fallback", true},
            {"fuse_unk", true}}}};
}

TEST(HfTokenizer, SentencePieceStyleBpeFallsBackToBytes) {
  const fs::path dir = Folder("sp", SentencePieceStyle(), {{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  auto t = HfTokenizer::Load(dir.string());
  ASSERT_TRUE(t.ok()) << t.status().message();
  // "hi thé 世": ▁hi ▁ t h é ▁ <0xE4><0xB8><0x96>
  const std::vector<uint32_t> ids = Encode(**t, "hi thé 世");
  EXPECT_EQ(ids, (std::vector<uint32_t>{264, 259, 262, 260, 265, 259, 3 + 0xE4, 3 + 0xB8, 3 + 0x96}));
  EXPECT_EQ((*t)->Decode(ids), "hi thé 世");
  // BOS from the template (tokenizer_config.json agrees), EOS from tokenizer_config.json.
  EXPECT_EQ((*t)->document_start(), 1);
  EXPECT_EQ((*t)->document_separator(), 2);
  fs::remove_all(dir);
}

TEST(HfTokenizer, ComponentsOutsideWhatMotleyReadsAreRefusedByName) {
  struct Case {
    std::function<void(nlohmann::json&)> change;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {[](nlohmann::json& j) { j["model"]["type"] = "Unigram"; }, "model.type: \"Unigram\" is not supported"},
      {[](nlohmann::json& j) {
         j["normalizer"] = {{"type", "NFKC"}};
       },
       "normalizer: normalizer \"NFKC\" is not supported"},
      {[](nlohmann::json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithPrevious"; },
       "pre_tokenizer.pretokenizers[0].behavior: \"MergedWithPrevious\" is not supported"},
      {[](nlohmann::json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"; },
       "does not compile at offset"},
      {[](nlohmann::json& j) { j["model"]["merges"].push_back("x yz"); },
       "names a token the vocabulary lacks"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = ByteLevelTokenizer();
    c.change(j);
    const fs::path dir = Folder("bad", j);
    auto t = HfTokenizer::Load(dir.string());
    ASSERT_FALSE(t.ok()) << c.expected;
    EXPECT_NE(t.status().message().find(c.expected), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find("tokenizer.json"), std::string::npos) << t.status().message();
    fs::remove_all(dir);
  }
  auto missing = HfTokenizer::Load("/nonexistent/folder");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no tokenizer.json"), std::string::npos);
}

TEST(BpeMerges, LowestRankFirstThenLeftmost) {
  BpeMerges m;
  m.Add(1, 1, 10);  // rank 0: a a -> A
  m.Add(2, 1, 11);  // rank 1: b a -> B
  // b a a a: (a a) ranks first, leftmost -> b A a; then nothing joins b A or A a.
  std::vector<uint32_t> s = {2, 1, 1, 1};
  m.Apply(&s);
  EXPECT_EQ(s, (std::vector<uint32_t>{2, 10, 1}));
  std::vector<uint32_t> two = {2, 1};
  m.Apply(&two);
  EXPECT_EQ(two, (std::vector<uint32_t>{11}));
}

}  // namespace
}  // namespace motley
