// Files built into the motley binary from examples/ (clusters, models, jobs), so the default job
// and the examples work without the source tree. Generated at configure time by
// cmake/embed_files.cmake into builtin_files_data.cc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace motley {

struct BuiltinFile {
  std::string_view kind;  // "clusters", "models", "jobs", "plans": the examples/ subfolder
  std::string_view name;  // file name without extension: "zorse-a"
  std::string_view path;  // shown in messages: "builtin:examples/clusters/zorse-a.toml"
  std::string_view text;
};

const std::vector<BuiltinFile>& BuiltinFiles();
const BuiltinFile* FindBuiltinFile(std::string_view kind, std::string_view name);
std::vector<std::string> BuiltinFileNames(std::string_view kind);

}  // namespace motley
