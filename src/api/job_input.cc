#include "api/job_input.h"

#include <filesystem>

#include "core/builtin_files.h"
#include "core/job_parse.h"

namespace motley {

Result<JobSpec> LoadJobArgument(const std::string& path_or_name) {
  std::error_code ec;
  if (!std::filesystem::exists(path_or_name, ec)) {
    if (const BuiltinFile* file = FindBuiltinFile("jobs", path_or_name))
      return ParseJobToml(file->text, std::string(file->path));
  }
  return LoadJobFile(path_or_name);
}

}  // namespace motley
