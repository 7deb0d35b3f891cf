#include "data/training_data.h"

#include <cstdint>
#include <filesystem>

#include <fmt/format.h>

#include "data/builtin_corpus.h"
#include "data/data_prepare.h"
#include "data/hf_tokenizer.h"
#include "data/tokenizer.h"

namespace motley {
namespace fs = std::filesystem;
namespace {

constexpr double kBuiltinValidationFraction = 0.05;

std::string Resolve(const std::string& path, const std::string& base_dir) {
  return fs::path(path).is_absolute() || base_dir.empty() ? path : (fs::path(base_dir) / path).string();
}

Status CheckLength(const TokenDataset& d, int64_t seq_len) {
  if (d.num_tokens() <= seq_len + 1)
    return Status::InvalidArgument(
        fmt::format("{}: {} tokens, too few for one window of seq_len {} + 1; use more "
                    "data or a shorter [training] seq_len",
                    d.name(), d.num_tokens(), seq_len));
  return Status::Ok();
}

}  // namespace

Result<TokenDataset> OpenTokenData(const std::string& path, const std::string& split, int64_t vocab_size,
                                   const ExpectedTokenizer& expected) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return TokenDataset::OpenFiles({path}, vocab_size);
  MOTLEY_ASSIGN_OR_RETURN(DataManifest m, ReadDataManifest(path));
  if (!expected.hash.empty() && m.tokenizer_hash != expected.hash)
    return Status::InvalidArgument(
        fmt::format("{}: the data was prepared with the tokenizer {} ({}) but the run tokenizes with {} "
                    "(hash {}); prepare it "
                    "again: motley data prepare --tokenizer {} --input ... -o {}",
                    (fs::path(path) / "data.json").string(), m.tokenizer,
                    m.tokenizer_hash.empty() ? "no tokenizer.json hash" : "hash " + m.tokenizer_hash,
                    expected.name, expected.hash, expected.name, path));
  if (vocab_size > 0 && m.vocab_size > vocab_size)
    return Status::InvalidArgument(fmt::format(
        "{}: the data was tokenized with a vocabulary of {} ({}) but the model's vocab_size is {}; prepare "
        "the data "
        "with the model's tokenizer or use a model with vocab_size >= {}",
        (fs::path(path) / "data.json").string(), m.vocab_size, m.tokenizer, vocab_size, m.vocab_size));
  std::vector<std::string> files;
  if (split == "val") {
    if (m.validation_file.empty())
      return Status::NotFound(fmt::format("{}: the prepared data has no validation file", path));
    files.push_back((fs::path(path) / m.validation_file).string());
  } else {
    for (const auto& f : m.train_files) files.push_back((fs::path(path) / f).string());
  }
  return TokenDataset::OpenFiles(files, vocab_size);
}

Result<TrainingData> OpenTrainingData(const DataConfig& config, const std::string& base_dir,
                                      int64_t vocab_size, int64_t seq_len) {
  TrainingData data;
  // A tokenizer.json (or a model folder holding one) names the tokenizer the data must come from.
  ExpectedTokenizer expected;
  if (config.tokenizer != "byte" && fs::path(config.tokenizer).extension() != ".model") {
    const std::string where = Resolve(config.tokenizer, base_dir);
    MOTLEY_ASSIGN_OR_RETURN(std::unique_ptr<HfTokenizer> t, HfTokenizer::Load(where));
    expected = {where, t->hash()};
  }
  if (config.train == "builtin") {
    if (!expected.hash.empty())
      return Status::InvalidArgument(fmt::format(
          "[data] train = \"builtin\" is the built-in corpus in bytes, but the run tokenizes with {}; "
          "prepare text "
          "with it (motley data prepare --tokenizer {} --input TEXT -o DIR) and set [data] train = \"DIR\"",
          expected.name, expected.name));
    ByteTokenizer bytes;
    if (vocab_size < bytes.vocab_size())
      return Status::InvalidArgument(
          fmt::format("the built-in corpus is byte-tokenized (vocabulary 256) but the model's vocab_size is "
                      "{}; use a model with "
                      "vocab_size >= 256 or set [data] train to data prepared for it",
                      vocab_size));
    std::vector<uint32_t> tokens;
    MOTLEY_RETURN_IF_ERROR(bytes.Encode(BuiltinCorpus(), &tokens));
    const auto n_val = static_cast<size_t>(kBuiltinValidationFraction * static_cast<double>(tokens.size()));
    std::vector<uint32_t> val(tokens.end() - static_cast<ptrdiff_t>(n_val), tokens.end());
    tokens.resize(tokens.size() - n_val);
    data.train = TokenDataset::FromTokens(std::move(tokens), "built-in corpus (train)");
    if (config.validation.empty())
      data.validation = TokenDataset::FromTokens(std::move(val), "built-in corpus (validation)");
  } else {
    const std::string path = Resolve(config.train, base_dir);
    MOTLEY_ASSIGN_OR_RETURN(data.train, OpenTokenData(path, "train", vocab_size, expected));
    std::error_code ec;
    if (config.validation.empty() && fs::is_directory(path, ec)) {
      MOTLEY_ASSIGN_OR_RETURN(data.validation, OpenTokenData(path, "val", vocab_size, expected));
    }
  }
  if (!config.validation.empty()) {
    MOTLEY_ASSIGN_OR_RETURN(data.validation,
                            OpenTokenData(Resolve(config.validation, base_dir), "val", vocab_size, expected));
  }
  MOTLEY_RETURN_IF_ERROR(CheckLength(data.train, seq_len));
  if (data.validation) MOTLEY_RETURN_IF_ERROR(CheckLength(*data.validation, seq_len));
  return data;
}

}  // namespace motley
