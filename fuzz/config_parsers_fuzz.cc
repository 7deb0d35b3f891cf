#include "config_parsers_fuzz.h"

#include <cstdint>
#include <string>
#include <string_view>

#include "core/cluster_parse.h"
#include "core/job_parse.h"
#include "core/json_read.h"
#include "core/model_parse.h"
#include "data/data_prepare.h"
#include "plan/plan_io.h"
#include "sim/profile.h"

namespace motley {

void FuzzConfigParsers(const uint8_t* data, size_t size) {
  if (size < 1) return;
  std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 9) {
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
  }
}

}  // namespace motley
