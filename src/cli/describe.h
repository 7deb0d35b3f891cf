// Derived figures of a model and of a cluster, as JSON and as text. Shared by `motley describe`
// and `motley demo`.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/cluster.h"
#include "core/model.h"

namespace motley::cli {

nlohmann::json DescribeModelJson(const ModelSpec& m, int64_t seq_len, Precision precision);
std::string DescribeModelText(const ModelSpec& m, int64_t seq_len, Precision precision);

nlohmann::json DescribeClusterJson(const Cluster& c);
std::string DescribeClusterText(const Cluster& c);

}  // namespace motley::cli
