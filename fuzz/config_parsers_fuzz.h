// One fuzz input through motley's readers: every file a user or another program hands motley.
// Shared by the libFuzzer target and the regression test that replays fuzz/regressions/ in every
// build. FuzzConfigParsers takes the reader from the first byte (mod kNumFuzzReaders) and the file
// from the rest; FuzzReader runs one reader on a whole input (fuzz/run.sh pins each in turn).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace motley {

inline constexpr int kNumFuzzReaders = 20;

/// 0 cluster, 1 model, 2 job, 3 hf-config, 4 plan-toml, 5 plan-json, 6 profile-json,
/// 7 zorse-latencies, 8 data-json, 9 safetensors, 10 trainer-state, 11 latest, 12 token-file,
/// 13 shard-index, 14 tokenizer-json (a tokenizer.json, then a text through it), 15 tokenizer-text
/// (any bytes through a byte-level and a sentencepiece-style tokenizer, and decoded back),
/// 16 metrics (a run's metrics.jsonl), 17 trace (a trace.json), 18 python-plan (the Python module's
/// simulate(dict): the dict's JSON read as a plan, then checked, lowered and simulated on the
/// built-in cluster local-emulated and model llama-1m, as the module does), 19 offers (an offers
/// file, and the priced cluster of everything it offers).
const char* FuzzReaderName(int reader);

void FuzzReader(int reader, std::string_view file);

void FuzzConfigParsers(const uint8_t* data, size_t size);

}  // namespace motley
