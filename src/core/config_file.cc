#include "core/config_file.h"

#include <set>

#include <fmt/format.h>

#include "core/cluster_parse.h"
#include "core/model_parse.h"
#include "core/offers.h"
#include "core/toml_reader.h"
#include "core/units.h"

namespace motley {

std::string_view ConfigKindName(ConfigKind kind) {
  switch (kind) {
    case ConfigKind::kCluster:
      return "cluster";
    case ConfigKind::kModel:
      return "model";
    case ConfigKind::kJob:
      return "job";
    case ConfigKind::kOffers:
      return "offers";
  }
  return "?";
}

Result<ConfigKind> DetectConfigKind(std::string_view text, const std::string& file) {
  if (file.ends_with(".json")) return ConfigKind::kModel;
  Diagnostics diag;
  auto table = ParseTomlText(text, file, &diag);
  if (!table) return diag.ToStatus();
  if (table->contains("nodes")) return ConfigKind::kCluster;
  if (table->contains("offers")) return ConfigKind::kOffers;
  if (table->contains("training") || table->contains("cluster")) return ConfigKind::kJob;
  if (table->contains("hidden_size") || table->contains("base")) return ConfigKind::kModel;
  return Status::InvalidArgument(fmt::format(
      "{}: error: cannot tell what kind of file this is: a cluster file has [[nodes]], an offers file "
      "[[offers]], a job file [training], a model file hidden_size (or base = \"<preset>\"); pass --kind "
      "cluster|offers|model|job",
      file));
}

Result<std::string> ValidateConfigText(std::string_view text, const std::string& file, ConfigKind kind,
                                       const JobParseOptions& job_options) {
  switch (kind) {
    case ConfigKind::kCluster: {
      MOTLEY_ASSIGN_OR_RETURN(Cluster c, ParseClusterToml(text, file));
      return fmt::format("cluster: {} devices on {} nodes in {} region(s), {} fp16 peak", c.num_devices(),
                         c.nodes.size(), c.regions.size(), FormatFlops(c.total_peak_fp16_flops()));
    }
    case ConfigKind::kModel: {
      MOTLEY_ASSIGN_OR_RETURN(
          ModelSpec m, file.ends_with(".json") ? ParseHfConfigJson(text, file) : ParseModelToml(text, file));
      return fmt::format("model: {}, {} parameters, {} layers", m.name, FormatCount(TotalParams(m)),
                         m.num_layers);
    }
    case ConfigKind::kJob: {
      MOTLEY_ASSIGN_OR_RETURN(JobSpec j, ParseJobToml(text, file, job_options));
      return fmt::format("job: model {}, cluster {}, {} steps of {} tokens", j.model_ref, j.cluster_ref,
                         j.training.steps, j.training.global_batch_tokens());
    }
    case ConfigKind::kOffers: {
      MOTLEY_ASSIGN_OR_RETURN(OfferList o, ParseOffersToml(text, file));
      std::set<std::string> regions, types;
      size_t rows = 0, spot = 0;
      for (const Offer& offer : o.offers) {
        regions.insert(offer.node.region);
        types.insert(offer.node.device_type);
        ++(offer.spot_of < 0 ? rows : spot);
      }
      return fmt::format("offers: {} rows of {} device types in {} region(s), up to {} devices{}", rows,
                         types.size(), regions.size(), o.max_devices(),
                         spot ? fmt::format(", {} of the rows as spot too", spot) : "");
    }
  }
  return Status::Internal("unknown config kind");
}

}  // namespace motley
