// SentencePieceTokenizer: a sentencepiece .model file through Debian's libsentencepiece.
//
// Only the `motley-data` helper links it: Debian's libsentencepiece carries its own copy of
// protobuf, and a process that loads it beside libtorch (which uses the system libprotobuf)
// crashes while loading. `motley data prepare --tokenizer X.model` therefore runs the helper.
#pragma once

#include <memory>

#include "data/tokenizer.h"

namespace motley {

/// Loads `model_path`; a clear error when it is missing or not a sentencepiece model.
Result<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(const std::string& model_path);

}  // namespace motley
