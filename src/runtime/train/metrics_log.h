// MetricsLog: the JSON-lines metrics file of a run, appended to and flushed line by line so a
// crash loses nothing already reported.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/status.h"

namespace motley {

class MetricsLog {
 public:
  Status Open(const std::string& path) {
    std::error_code ec;
    const std::filesystem::path p(path);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
    out_.open(path, std::ios::app);
    if (!out_) return Status::IoError(fmt::format("{}: cannot open the metrics file for appending", path));
    return Status::Ok();
  }
  void Write(const nlohmann::json& j) { out_ << j.dump() << "\n" << std::flush; }

 private:
  std::ofstream out_;
};

}  // namespace motley
