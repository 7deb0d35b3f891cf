// Derived figures of a model and of a cluster, as JSON and as text, and a job's settings. Shared by
// `motley describe`, `motley demo` and the Python module.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/cluster.h"
#include "core/job.h"
#include "core/model.h"

namespace motley {

nlohmann::json DescribeModelJson(const ModelSpec& m, int64_t seq_len, Precision precision);
std::string DescribeModelText(const ModelSpec& m, int64_t seq_len, Precision precision);

nlohmann::json DescribeClusterJson(const Cluster& c);

/// A job's settings as read (defaults filled), its model and cluster by reference and described.
nlohmann::json DescribeJobJson(const JobSpec& job);
std::string DescribeClusterText(const Cluster& c);

}  // namespace motley
