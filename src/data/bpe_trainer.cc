#include "data/bpe_trainer.h"

#include <algorithm>
#include <filesystem>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "data/byte_level.h"
#include "data/regex.h"
#include "data/utf8.h"

namespace motley {

namespace {

// Each word (a pre-tokenizer match) as its symbols and how often it occurs, in the order first met
// (ties between pairs break by it).
using Words = std::vector<std::pair<std::vector<int32_t>, int64_t>>;

Words CountWords(const std::vector<std::string_view>& texts, Regex& pattern) {
  std::unordered_map<std::string, size_t> index;
  Words words;
  std::vector<std::pair<size_t, size_t>> matches;
  for (std::string_view raw : texts) {
    const std::string text = ReplaceInvalidUtf8(raw);
    matches.clear();
    pattern.Matches(text, &matches);
    for (const auto& [b, e] : matches) {
      auto [it, fresh] = index.emplace(text.substr(b, e - b), words.size());
      if (fresh) {
        std::vector<int32_t> symbols;
        for (unsigned char c : it->first) symbols.push_back(c);
        words.emplace_back(std::move(symbols), 0);
      }
      ++words[it->second].second;
    }
  }
  return words;
}

// The merges learned: each token's raw bytes (256 bytes first), and the pairs merged, in order.
struct LearnedMerges {
  std::vector<std::string> pieces;
  std::vector<std::pair<int32_t, int32_t>> merges;
};

// The most frequent adjacent pair merged, again and again, until the vocabulary is full or no pair
// occurs `min_pair_count` times.
LearnedMerges LearnMerges(Words& words, const BpeTrainingOptions& options) {
  LearnedMerges out;
  std::vector<std::string>& pieces = out.pieces;
  pieces.resize(256);  // raw bytes of each token
  for (int b = 0; b < 256; ++b) pieces[static_cast<size_t>(b)] = std::string(1, static_cast<char>(b));
  std::vector<std::pair<int32_t, int32_t>>& merges = out.merges;
  const int64_t wanted = options.vocab_size - 2 - 256;
  std::unordered_map<uint64_t, std::pair<int64_t, int64_t>> pairs;  // pair -> (count, first seen)
  while (static_cast<int64_t>(merges.size()) < wanted) {
    // Every adjacent pair's count, and where it was first met.
    pairs.clear();
    int64_t order = 0;
    for (const auto& [symbols, count] : words)
      for (size_t i = 0; i + 1 < symbols.size(); ++i) {
        const uint64_t key =
            uint64_t{static_cast<uint32_t>(symbols[i])} << 32 | static_cast<uint32_t>(symbols[i + 1]);
        auto [it, fresh] = pairs.try_emplace(key, 0, order++);
        it->second.first += count;
      }
    const auto best = std::max_element(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) {
      return a.second.first != b.second.first ? a.second.first < b.second.first
                                              : a.second.second > b.second.second;
    });
    if (best == pairs.end() || best->second.first < options.min_pair_count) break;
    const auto left = static_cast<int32_t>(best->first >> 32),
               right = static_cast<int32_t>(best->first & 0xffffffffu);
    const auto merged = static_cast<int32_t>(pieces.size());
    pieces.push_back(pieces[static_cast<size_t>(left)] + pieces[static_cast<size_t>(right)]);
    merges.emplace_back(left, right);
    for (auto& [symbols, count] : words) {
      size_t out = 0;
      for (size_t i = 0; i < symbols.size(); ++i, ++out) {
        if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
          symbols[out] = merged;
          ++i;
        } else {
          symbols[out] = symbols[i];
        }
      }
      symbols.resize(out);
    }
  }

  return out;
}

// tokenizer.json in Llama 3's layout.
nlohmann::ordered_json TokenizerJson(const LearnedMerges& learned) {
  const std::vector<std::string>& pieces = learned.pieces;
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (size_t id = 0; id < pieces.size(); ++id) vocab[ByteLevelEncode(pieces[id])] = id;
  nlohmann::json merge_list = nlohmann::json::array();
  for (const auto& [l, r] : learned.merges)
    merge_list.push_back(
        {ByteLevelEncode(pieces[static_cast<size_t>(l)]), ByteLevelEncode(pieces[static_cast<size_t>(r)])});
  const auto bos = static_cast<int64_t>(pieces.size()), eos = bos + 1;
  auto special = [](int64_t id, const char* content) {
    return nlohmann::ordered_json{{"id", id},        {"content", content}, {"single_word", false},
                                  {"lstrip", false}, {"rstrip", false},    {"normalized", false},
                                  {"special", true}};
  };
  nlohmann::ordered_json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", {special(bos, "<|begin_of_text|>"), special(eos, "<|end_of_text|>")}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", kLlama3PreTokenizerPattern}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"},
           {"add_prefix_space", false},
           {"trim_offsets", true},
           {"use_regex", false}}}}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair",
         {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
          {{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 1}}}},
          {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens",
         {{"<|begin_of_text|>",
           {{"id", "<|begin_of_text|>"}, {"ids", {bos}}, {"tokens", {"<|begin_of_text|>"}}}}}}}},
      {"decoder",
       {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", true},
        {"vocab", vocab},
        {"merges", merge_list}}}};
  return j;
}

}  // namespace

Result<BpeTrainingSummary> TrainByteLevelBpe(const std::vector<std::string_view>& texts,
                                             const std::string& dir, const BpeTrainingOptions& options) {
  if (options.vocab_size < 258 || options.vocab_size > (int64_t{1} << 20))
    return Status::InvalidArgument(
        fmt::format("--vocab-size {}: a byte-level BPE needs at least 258 (256 bytes and BOS, "
                    "EOS) and at most 1,048,576",
                    options.vocab_size));
  MOTLEY_ASSIGN_OR_RETURN(std::shared_ptr<Regex> pattern,
                          Regex::Compile(kLlama3PreTokenizerPattern, "pre-tokenizer"));
  Words words = CountWords(texts, *pattern);
  if (words.empty()) return Status::InvalidArgument("no text to learn a tokenizer from");
  const LearnedMerges learned = LearnMerges(words, options);
  const nlohmann::ordered_json j = TokenizerJson(learned);
  nlohmann::ordered_json config = {{"add_bos_token", true},
                                   {"add_eos_token", false},
                                   {"bos_token", "<|begin_of_text|>"},
                                   {"eos_token", "<|end_of_text|>"},
                                   {"tokenizer_class", "PreTrainedTokenizerFast"},
                                   {"model_max_length", 131072}};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::IoError(fmt::format("{}: cannot create the folder: {}", dir, ec.message()));
  MOTLEY_RETURN_IF_ERROR(
      AtomicWriteFile((std::filesystem::path(dir) / "tokenizer.json").string(), j.dump() + "\n"));
  MOTLEY_RETURN_IF_ERROR(AtomicWriteFile((std::filesystem::path(dir) / "tokenizer_config.json").string(),
                                         config.dump(2) + "\n"));
  BpeTrainingSummary summary;
  summary.merges = static_cast<int64_t>(learned.merges.size());
  summary.vocab_size = static_cast<int64_t>(learned.pieces.size()) + 2;  // and BOS, EOS
  summary.words = static_cast<int64_t>(words.size());
  return summary;
}

}  // namespace motley
