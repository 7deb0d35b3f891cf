// `motley data prepare`: text files → tokenized shards for training. Each input is read in chunks
// (cut at line ends), tokenized, and split: its last `validation_fraction` of tokens go to the
// validation stream, the rest to training — so validation covers every input. Output directory:
//
//   train.bin (or train_000.bin, train_001.bin, ... past shard_tokens), val.bin, data.json
//
// data.json records the tokenizer, its vocabulary size and the token counts; training reads it to
// check the model's vocabulary against the data's.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "data/tokenizer.h"

namespace motley {

struct PrepareOptions {
  // Text files (each one document), JSON Lines files (.jsonl, .ndjson: a document per line) and
  // folders of them (every file under the folder, hidden ones aside, in path order).
  std::vector<std::string> inputs;
  std::string text_field = "text";  // a JSON line's text
  bool skip_bad_lines = false;      // a malformed JSON line is skipped and counted, not an error
  std::string output_dir;
  double validation_fraction = 0.05;   // of each input's tokens, taken from its end
  int64_t shard_tokens = 500'000'000;  // tokens per training shard (the format allows 2^31 - 1)
  size_t chunk_bytes = 4 << 20;        // read and tokenize this much at a time
};

struct PrepareProgress {
  std::string input;
  int64_t bytes_done = 0, bytes_total = 0;  // over all inputs
  int64_t tokens = 0;
};

struct PrepareSummary {
  int64_t bytes = 0;
  int64_t documents = 0;  // each ends with the tokenizer's EOS (and starts with its BOS) where it has them
  int64_t skipped_lines = 0;  // malformed JSON lines skipped (--skip-bad-lines)
  int64_t train_tokens = 0, validation_tokens = 0;
  std::vector<std::string> train_files;
  std::string validation_file, manifest_file;
};

Result<PrepareSummary> PrepareData(const PrepareOptions& options, const Tokenizer& tokenizer,
                                   const std::function<void(const PrepareProgress&)>& progress = {});

/// Input paths as files: a folder becomes every regular file under it (hidden ones aside), in path
/// order; a path that is neither file nor folder is an error naming it.
Result<std::vector<std::string>> ExpandInputFiles(const std::vector<std::string>& inputs);

/// The data.json of a prepared directory.
struct DataManifest {
  std::string tokenizer;
  std::string tokenizer_hash;  // a tokenizer.json's (HfTokenizer::hash), "" for the others
  int64_t vocab_size = 0;
  std::vector<std::string> train_files;  // paths relative to the directory
  std::string validation_file;           // "" when there is none
};
Result<DataManifest> ReadDataManifest(const std::string& dir);
/// The same from the text of a data.json (`path` for messages).
Result<DataManifest> ParseDataManifest(std::string_view text, const std::string& path);

}  // namespace motley
