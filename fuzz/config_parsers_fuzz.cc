#include "config_parsers_fuzz.h"

#include <cstdint>
#include <string>
#include <string_view>

#include "core/cluster_parse.h"
#include "core/job_parse.h"
#include "core/model_parse.h"

namespace motley {

void FuzzConfigParsers(const uint8_t* data, size_t size) {
  if (size < 1) return;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 4) {
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
  }
}

}  // namespace motley
