#include "data/data_prepare.h"

#include <algorithm>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/file_io.h"
#include "core/json_read.h"
#include "data/token_file.h"

namespace motley {
namespace fs = std::filesystem;
namespace {

// Training shards, rolled over every `shard_tokens`.
class ShardedWriter {
 public:
  ShardedWriter(std::string dir, int64_t vocab_size, int64_t shard_tokens)
      : dir_(std::move(dir)), vocab_size_(vocab_size), shard_tokens_(shard_tokens) {}

  Status Append(const uint32_t* tokens, size_t count) {
    while (count > 0) {
      if (!current_ || current_->num_tokens() == shard_tokens_) MOTLEY_RETURN_IF_ERROR(Roll());
      const size_t n = std::min(count, static_cast<size_t>(shard_tokens_ - current_->num_tokens()));
      MOTLEY_RETURN_IF_ERROR(current_->Append(tokens, n));
      tokens += n;
      count -= n;
      total_ += static_cast<int64_t>(n);
    }
    return Status::Ok();
  }
  // Names the shards train.bin when one is enough, else train_000.bin, ...
  Result<std::vector<std::string>> Finish() {
    if (!current_) MOTLEY_RETURN_IF_ERROR(Roll());
    MOTLEY_RETURN_IF_ERROR(current_->Finish());
    current_.reset();
    if (names_.size() == 1) {
      fs::rename(fs::path(dir_) / names_[0], fs::path(dir_) / "train.bin");
      names_[0] = "train.bin";
    }
    return names_;
  }
  int64_t total() const { return total_; }

 private:
  Status Roll() {
    if (current_) MOTLEY_RETURN_IF_ERROR(current_->Finish());
    names_.push_back(fmt::format("train_{:03d}.bin", names_.size()));
    MOTLEY_ASSIGN_OR_RETURN(TokenFileWriter w,
                            TokenFileWriter::Create((fs::path(dir_) / names_.back()).string(), vocab_size_));
    current_ = std::make_unique<TokenFileWriter>(std::move(w));
    return Status::Ok();
  }
  std::string dir_;
  int64_t vocab_size_, shard_tokens_, total_ = 0;
  std::unique_ptr<TokenFileWriter> current_;
  std::vector<std::string> names_;
};

}  // namespace

Result<std::vector<std::string>> ExpandInputFiles(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      // A folder: every regular file under it (hidden ones aside), in path order.
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(in, ec);
           !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (!name.empty() && name[0] == '.') {
          if (it->is_directory(ec)) it.disable_recursion_pending();
          continue;
        }
        if (it->is_regular_file(ec)) found.push_back(it->path().string());
      }
      if (ec) return Status::IoError(fmt::format("{}: cannot list the folder: {}", in, ec.message()));
      if (found.empty())
        return Status::NotFound(fmt::format("{}: the folder holds no files to tokenize", in));
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(in, ec)) {
      files.push_back(in);
    } else {
      return Status::NotFound(
          fmt::format("{}: no such input file or folder (give text or .jsonl files, or folders of "
                      "them, to --input)",
                      in));
    }
  }
  return files;
}

namespace {

bool IsJsonl(const std::string& path) {
  const std::string ext = fs::path(path).extension().string();
  return ext == ".jsonl" || ext == ".ndjson";
}

// The largest document read whole (a tokenizer.json tokenizer encodes each document at once).
constexpr int64_t kMaxDocumentBytes = int64_t{1} << 31;

// Why a JSON line holds no document under `field` ("" when it does).
std::string JsonlLineProblem(const nlohmann::json& j, const std::string& field) {
  if (j.is_discarded()) return "not valid JSON";
  if (!j.is_object()) return fmt::format("expected a JSON object with a \"{}\" field", field);
  if (!j.contains(field))
    return fmt::format("no \"{}\" field (give the field that holds the text with --text-field)", field);
  if (!j[field].is_string()) return fmt::format("\"{}\" is not a string", field);
  return "";
}

// data.json: what the shards hold and how they were made.
Status WriteManifest(const PrepareSummary& summary, const std::vector<std::string>& names,
                     const Tokenizer& tokenizer, const std::vector<std::string>& inputs) {
  nlohmann::json manifest = {{"format", "motley-data-1"},
                             {"tokenizer", tokenizer.name()},
                             {"vocab_size", tokenizer.vocab_size()},
                             {"train_files", names},
                             {"train_tokens", summary.train_tokens},
                             {"validation_file", "val.bin"},
                             {"validation_tokens", summary.validation_tokens},
                             {"documents", summary.documents},
                             {"inputs", inputs}};
  if (!tokenizer.hash().empty()) manifest["tokenizer_hash"] = tokenizer.hash();
  if (summary.skipped_lines > 0) manifest["skipped_lines"] = summary.skipped_lines;
  return AtomicWriteFile(summary.manifest_file, manifest.dump(2) + "\n");
}

// The options checked, the input files found (folders expanded) with their total size, and the
// output folder made.
Result<std::vector<std::string>> CheckInputsAndOutput(const PrepareOptions& options, int64_t* bytes_total) {
  if (options.inputs.empty()) return Status::InvalidArgument("no input files: give --input TEXT_FILE...");
  if (!(options.validation_fraction >= 0 && options.validation_fraction < 1))
    return Status::InvalidArgument(
        fmt::format("--validation-fraction {} must be in [0, 1)", options.validation_fraction));
  if (options.shard_tokens < 1)
    return Status::InvalidArgument(
        fmt::format("shard_tokens must be at least 1, got {}", options.shard_tokens));
  MOTLEY_ASSIGN_OR_RETURN(const std::vector<std::string> inputs, ExpandInputFiles(options.inputs));
  for (const std::string& in : inputs) {
    std::error_code ec;
    *bytes_total += static_cast<int64_t>(fs::file_size(in, ec));
  }
  if (*bytes_total == 0)
    return Status::InvalidArgument(
        fmt::format("{}: empty: there is no text to train on; give text files to --input",
                    fmt::join(options.inputs, ", ")));
  std::error_code ec;
  fs::create_directories(options.output_dir, ec);
  if (ec)
    return Status::IoError(
        fmt::format("{}: cannot create the output directory: {}", options.output_dir, ec.message()));
  return inputs;
}

}  // namespace

Result<PrepareSummary> PrepareData(const PrepareOptions& options, const Tokenizer& tokenizer,
                                   const std::function<void(const PrepareProgress&)>& progress) {
  PrepareProgress p;
  MOTLEY_ASSIGN_OR_RETURN(const std::vector<std::string> inputs,
                          CheckInputsAndOutput(options, &p.bytes_total));
  std::error_code ec;
  const int64_t vocab = tokenizer.vocab_size();
  ShardedWriter train(options.output_dir, vocab, options.shard_tokens);
  PrepareSummary summary;
  summary.validation_file = (fs::path(options.output_dir) / "val.bin").string();
  MOTLEY_ASSIGN_OR_RETURN(TokenFileWriter val, TokenFileWriter::Create(summary.validation_file, vocab));
  // A tokenizer that marks documents (BOS, EOS) encodes each whole: its pieces may span any cut.
  const bool whole_documents = tokenizer.document_start() >= 0 || !tokenizer.hash().empty();

  std::vector<char> buffer(options.chunk_bytes);
  for (const std::string& in : inputs) {
    std::ifstream file(in, std::ios::binary);
    if (!file) return Status::IoError(fmt::format("{}: cannot read", in));
    p.input = in;
    std::vector<uint32_t> tokens;
    auto report = [&](int64_t bytes) {
      p.bytes_done += bytes;
      p.tokens = train.total() + val.num_tokens() + static_cast<int64_t>(tokens.size());
      if (progress) progress(p);
    };
    // One document: BOS, its ids, EOS (as the tokenizer has them).
    auto document = [&](std::string_view text) -> Status {
      if (tokenizer.document_start() >= 0)
        tokens.push_back(static_cast<uint32_t>(tokenizer.document_start()));
      MOTLEY_RETURN_IF_ERROR(tokenizer.Encode(text, &tokens));
      if (tokenizer.document_separator() >= 0)
        tokens.push_back(static_cast<uint32_t>(tokenizer.document_separator()));
      ++summary.documents;
      return Status::Ok();
    };
    if (IsJsonl(in)) {
      // JSON Lines: one document per line, its text under options.text_field.
      std::string line;
      int64_t line_no = 0;
      while (std::getline(file, line)) {
        ++line_no;
        const int64_t bytes = static_cast<int64_t>(line.size()) + 1;
        if (line.find_first_not_of(" \t\r") == std::string::npos) {
          report(bytes);
          continue;
        }
        const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        const std::string problem = JsonlLineProblem(j, options.text_field);
        if (!problem.empty()) {
          if (!options.skip_bad_lines)
            return Status::InvalidArgument(fmt::format(
                "{}:{}: {}; fix the line, or pass --skip-bad-lines to skip such lines and count them", in,
                line_no, problem));
          ++summary.skipped_lines;
          report(bytes);
          continue;
        }
        MOTLEY_RETURN_IF_ERROR(document(j[options.text_field].get_ref<const std::string&>()));
        report(bytes);
      }
    } else if (whole_documents) {
      const auto size = static_cast<int64_t>(fs::file_size(in, ec));
      if (size > kMaxDocumentBytes)
        return Status::InvalidArgument(
            fmt::format("{}: {:.1f} GB in one document; split it into several files or a "
                        ".jsonl (one document per line)",
                        in, static_cast<double>(size) / 1e9));
      std::string text(static_cast<size_t>(size), '\0');
      file.read(text.data(), size);
      MOTLEY_RETURN_IF_ERROR(document(text));
      report(size);
    } else {
      // Tokenize the whole input, chunk by chunk, cutting chunks at a line end so that no word is split.
      std::string carry;
      while (file) {
        file.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
        const auto got = static_cast<size_t>(file.gcount());
        if (got == 0) break;
        std::string text = carry + std::string(buffer.data(), got);
        size_t cut = text.size();
        if (file && text.rfind('\n') != std::string::npos) cut = text.rfind('\n') + 1;
        carry = text.substr(cut);
        text.resize(cut);
        MOTLEY_RETURN_IF_ERROR(tokenizer.Encode(text, &tokens));
        report(static_cast<int64_t>(got));
      }
      if (!carry.empty()) MOTLEY_RETURN_IF_ERROR(tokenizer.Encode(carry, &tokens));
      if (tokenizer.document_separator() >= 0)
        tokens.push_back(static_cast<uint32_t>(tokenizer.document_separator()));
      ++summary.documents;
    }
    const auto n_val =
        static_cast<size_t>(std::floor(options.validation_fraction * static_cast<double>(tokens.size())));
    const size_t n_train = tokens.size() - n_val;
    MOTLEY_RETURN_IF_ERROR(train.Append(tokens.data(), n_train));
    MOTLEY_RETURN_IF_ERROR(val.Append(tokens.data() + n_train, n_val));
  }
  if (train.total() == 0)
    return Status::InvalidArgument(
        fmt::format("{}: no training tokens came out of the text (with --validation-fraction {} "
                    "of it held out); give more text or a smaller fraction",
                    fmt::join(options.inputs, ", "), options.validation_fraction));
  summary.bytes = p.bytes_total;
  summary.train_tokens = train.total();
  summary.validation_tokens = val.num_tokens();
  MOTLEY_ASSIGN_OR_RETURN(std::vector<std::string> names, train.Finish());
  MOTLEY_RETURN_IF_ERROR(val.Finish());
  for (const auto& n : names) summary.train_files.push_back((fs::path(options.output_dir) / n).string());

  summary.manifest_file = (fs::path(options.output_dir) / "data.json").string();
  MOTLEY_RETURN_IF_ERROR(WriteManifest(summary, names, tokenizer, options.inputs));
  return summary;
}

Result<DataManifest> ReadDataManifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / "data.json").string();
  std::ifstream in(path);
  if (!in)
    return Status::NotFound(
        fmt::format("{}: missing; a data directory is made by `motley data prepare` (or give "
                    "a .bin file)",
                    path));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return ParseDataManifest(text, path);
}

Result<DataManifest> ParseDataManifest(std::string_view text, const std::string& path) {
  MOTLEY_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, path));
  DataManifest m;
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument(
        fmt::format("{}: {}; this is not the data.json `motley data prepare` writes: prepare the data again",
                    path, what));
  };
  if (!j.is_object()) return bad("expected a JSON object");
  if (!j.contains("vocab_size") || !j["vocab_size"].is_number_integer() ||
      j["vocab_size"].get<int64_t>() < 1 || j["vocab_size"].get<int64_t>() > (int64_t{1} << 24))
    return bad("\"vocab_size\" must be a whole number from 1 to 16,777,216");
  m.vocab_size = j["vocab_size"].get<int64_t>();
  if (j.contains("tokenizer")) {
    if (!j["tokenizer"].is_string()) return bad("\"tokenizer\" must be a string (\"byte\" or a .model file)");
    m.tokenizer = j["tokenizer"].get<std::string>();
  }
  if (j.contains("tokenizer_hash")) {
    if (!j["tokenizer_hash"].is_string()) return bad("\"tokenizer_hash\" must be a string");
    m.tokenizer_hash = j["tokenizer_hash"].get<std::string>();
  }
  if (!j.contains("train_files") || !j["train_files"].is_array() || j["train_files"].empty())
    return bad("\"train_files\" must list at least one .bin file");
  // A file name inside the directory: no absolute paths or parent folders (a manifest names its own shards).
  auto file_name = [&](const nlohmann::json& f, const std::string& key) -> Result<std::string> {
    if (!f.is_string() || f.get<std::string>().empty())
      return bad(fmt::format("\"{}\" must hold file names", key));
    const fs::path p(f.get<std::string>());
    if (p.is_absolute() || std::any_of(p.begin(), p.end(), [](const fs::path& part) { return part == ".."; }))
      return bad(fmt::format("\"{}\" names {}, outside the data directory", key, p.string()));
    return p.string();
  };
  for (const auto& f : j["train_files"]) {
    MOTLEY_ASSIGN_OR_RETURN(std::string name, file_name(f, "train_files"));
    m.train_files.push_back(name);
  }
  if (j.contains("validation_file") && !j["validation_file"].is_null()) {
    MOTLEY_ASSIGN_OR_RETURN(m.validation_file, file_name(j["validation_file"], "validation_file"));
  }
  return m;
}

}  // namespace motley
