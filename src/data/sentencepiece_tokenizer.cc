#include "data/sentencepiece_tokenizer.h"

#include <cstdint>
#include <filesystem>

#include <fmt/format.h>
#include <sentencepiece_processor.h>

namespace motley {
namespace {

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::string path) : path_(std::move(path)) {}
  sentencepiece::SentencePieceProcessor& processor() { return processor_; }

  std::string name() const override { return path_; }
  int64_t vocab_size() const override { return processor_.GetPieceSize(); }
  Status Encode(std::string_view text, std::vector<uint32_t>* out) const override {
    std::vector<int> ids;
    const auto status = processor_.Encode(text, &ids);
    if (!status.ok())
      return Status::InvalidArgument(fmt::format("{}: encoding failed: {}", path_, status.ToString()));
    out->insert(out->end(), ids.begin(), ids.end());
    return Status::Ok();
  }
  std::string Decode(const std::vector<uint32_t>& ids) const override {
    std::vector<int> v(ids.begin(), ids.end());
    std::string text;
    (void)processor_.Decode(v, &text);
    return text;
  }
  int64_t document_separator() const override { return processor_.eos_id() >= 0 ? processor_.eos_id() : -1; }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& model_path) {
  if (!std::filesystem::is_regular_file(model_path))
    return Status::NotFound(
        fmt::format("{}: no such sentencepiece model; give --tokenizer byte or the path of a "
                    "tokenizer.model file",
                    model_path));
  auto t = std::make_unique<SentencePieceTokenizer>(model_path);
  const auto status = t->processor().Load(model_path);
  if (!status.ok())
    return Status::InvalidArgument(
        fmt::format("{}: not a sentencepiece model ({}); give --tokenizer byte or a tokenizer.model file",
                    model_path, status.ToString()));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace motley
