#include "config_parsers_fuzz.h"

#include <cstdint>
#include <string>
#include <string_view>

#include "core/checkpoint_format.h"
#include "core/cluster_parse.h"
#include "core/job_parse.h"
#include "core/json_read.h"
#include "core/model_parse.h"
#include "core/safetensors_header.h"
#include "core/shard_index.h"
#include "data/data_prepare.h"
#include "data/token_file.h"
#include "plan/plan_io.h"
#include "sim/profile.h"

namespace motley {

const char* FuzzReaderName(int reader) {
  static constexpr const char* kNames[kNumFuzzReaders] = {
      "cluster",      "model",           "job",           "hf-config",  "plan-toml",
      "plan-json",    "profile-json",    "zorse-latencies", "data-json", "safetensors",
      "trainer-state", "latest",         "token-file",    "shard-index"};
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
  }
}

void FuzzConfigParsers(const uint8_t* data, size_t size) {
  if (size < 1) return;
  FuzzReader(data[0] % kNumFuzzReaders, std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
}

}  // namespace motley
