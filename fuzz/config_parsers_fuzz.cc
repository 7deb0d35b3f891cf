#include "config_parsers_fuzz.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "api/simulate_query.h"
#include "core/check.h"
#include "core/checkpoint_format.h"
#include "core/cluster_parse.h"
#include "core/job_parse.h"
#include "core/json_read.h"
#include "core/metrics_file.h"
#include "core/model_parse.h"
#include "core/offers.h"
#include "core/safetensors_header.h"
#include "core/shard_index.h"
#include "core/trace_file.h"
#include "data/byte_level.h"
#include "data/data_prepare.h"
#include "data/hf_tokenizer.h"
#include "data/regex.h"
#include "data/token_file.h"
#include "plan/plan_io.h"
#include "sim/profile.h"

namespace motley {

const char* FuzzReaderName(int reader) {
  static constexpr const char* kNames[kNumFuzzReaders] = {
      "cluster",        "model",           "job",
      "hf-config",      "plan-toml",       "plan-json",
      "profile-json",   "zorse-latencies", "data-json",
      "safetensors",    "trainer-state",   "latest",
      "token-file",     "shard-index",     "tokenizer-json",
      "tokenizer-text", "metrics",         "trace",
      "python-plan",    "offers"};
  return reader >= 0 && reader < kNumFuzzReaders ? kNames[reader] : "?";
}

void FuzzReader(int reader, std::string_view text) {
  switch (reader) {
    case 0: {
      Result<Cluster> c = ParseClusterToml(text, "fuzz.toml");
      if (c.ok() && c->num_devices() > 1) (void)c->LinkBetween(0, c->num_devices() - 1);
      break;
    }
    case 1:
      (void)ParseModelToml(text, "fuzz.toml");
      break;
    case 2: {
      JobParseOptions options;
      options.resolve_files = false;  // presets and built-in clusters only: no file system access
      (void)ParseJobToml(text, "fuzz.toml", options);
      break;
    }
    case 3:
      (void)ParseHfConfigJson(text, "fuzz.json");
      break;
    case 4:
      (void)ParsePlanToml(text, "fuzz.toml");
      break;
    case 5:
      (void)ParsePlanJson(text, "fuzz.json");
      break;
    case 6:
      (void)ParseProfileJson(text, "fuzz.json");
      break;
    case 7:
      (void)ImportZorseMeasured(text, "fuzz.json");
      break;
    case 8:
      (void)ParseDataManifest(text, "data.json");
      break;
    case 9:
      (void)ParseSafetensorsBytes(text, "fuzz.safetensors");
      break;
    case 10:
      (void)ParseTrainerState(text, "trainer_state.json");
      break;
    case 11:
      (void)ParseLatest(text, "latest");
      break;
    case 12:
      // The header as TokenFile::Open reads it: the first bytes, and the file's size.
      (void)ParseTokenFileHeader(text.substr(0, 12), static_cast<int64_t>(text.size()), "fuzz.bin");
      break;
    case 13:
      (void)ParseShardIndex(text, "shards.json");
      break;
    case 14: {
      Result<std::unique_ptr<HfTokenizer>> t = HfTokenizer::FromJson(text, "tokenizer.json");
      if (t.ok()) {
        std::vector<uint32_t> ids;
        if ((*t)->Encode("Hello, world! 12345  \n\t<s> \xF0\x9F\x98\x80 \xFF end", &ids).ok())
          (void)(*t)->Decode(ids);
      }
      break;
    }
    case 15: {
      static const std::vector<std::unique_ptr<HfTokenizer>> tokenizers = [] {
        std::vector<std::unique_ptr<HfTokenizer>> out;
        nlohmann::json byte_vocab = nlohmann::json::object();
        for (int b = 0; b < 256; ++b) byte_vocab[ByteLevelEncode(std::string(1, static_cast<char>(b)))] = b;
        byte_vocab[ByteLevelEncode(" t")] = 256;
        byte_vocab[ByteLevelEncode("he")] = 257;
        const nlohmann::json byte_level = {{"added_tokens", {{{"id", 258}, {"content", "<|end|>"}}}},
                                           {"pre_tokenizer",
                                            {{"type", "Sequence"},
                                             {"pretokenizers",
                                              {{{"type", "Split"},
                                                {"pattern", {{"Regex", kLlama3PreTokenizerPattern}}},
                                                {"behavior", "Isolated"}},
                                               {{"type", "ByteLevel"}, {"use_regex", false}}}}}},
                                           {"model",
                                            {{"type", "BPE"},
                                             {"vocab", byte_vocab},
                                             {"merges", {ByteLevelEncode(" ") + " t", "h e"}},
                                             {"ignore_merges", true}}}};
        nlohmann::json sp_vocab = {{"<unk>", 0}, {"\u2581", 1}, {"a", 2}, {"\u2581a", 3}};
        for (int b = 0; b < 256; ++b) sp_vocab[fmt::format("<0x{:02X}>", b)] = 4 + b;
        const nlohmann::json sp = {
            {"normalizer",
             {{"type", "Sequence"},
              {"normalizers",
               {{{"type", "Prepend"}, {"prepend", "\u2581"}},
                {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}}}},
            {"decoder",
             {{"type", "Sequence"},
              {"decoders",
               {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                {{"type", "ByteFallback"}},
                {{"type", "Fuse"}},
                {{"type", "Strip"}, {"content", " "}, {"start", 1}}}}}},
            {"model",
             {{"type", "BPE"},
              {"vocab", sp_vocab},
              {"merges", {"\u2581 a"}},
              {"unk_token", "<unk>"},
              {"byte_fallback", true},
              {"fuse_unk", true}}}};
        for (const nlohmann::json& j : {byte_level, sp}) {
          Result<std::unique_ptr<HfTokenizer>> r = HfTokenizer::FromJson(j.dump(), "fuzz");
          MOTLEY_CHECK(r.ok());
          out.push_back(std::move(*r));
        }
        return out;
      }();
      for (const auto& t : tokenizers) {
        std::vector<uint32_t> ids;
        if (t->Encode(text, &ids).ok()) (void)t->Decode(ids);
      }
      break;
    }
    case 16:
      (void)ParseMetricsJsonl(text, "metrics.jsonl");
      break;
    case 17:
      (void)ParseTraceJson(text, "trace.json");
      break;
    case 18: {
      Result<Plan> plan = ParsePlanJson(text, "plan");
      if (!plan.ok()) break;
      SimulateQuery q;
      q.plan = std::move(*plan);
      q.cluster = "local-emulated";  // built in: no file is read
      q.model = "llama-1m";
      (void)AnswerSimulateQuery(q);
      break;
    }
    case 19: {
      Result<OfferList> offers = ParseOffersToml(text, "offers.toml");
      if (offers.ok() && offers->max_devices() <= 4096) {  // a valid file's allocation: a valid cluster
        const Cluster c = ClusterOfAllocation(*offers, AllOffered(*offers));
        MOTLEY_CHECK(c.priced());
      }
      break;
    }
  }
}

void FuzzConfigParsers(const uint8_t* data, size_t size) {
  if (size < 1) return;
  FuzzReader(data[0] % kNumFuzzReaders, std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
}

}  // namespace motley
