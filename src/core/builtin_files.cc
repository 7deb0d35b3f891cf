#include "core/builtin_files.h"

namespace motley {

const BuiltinFile* FindBuiltinFile(std::string_view kind, std::string_view name) {
  for (const auto& f : BuiltinFiles())
    if (f.kind == kind && f.name == name) return &f;
  return nullptr;
}

std::vector<std::string> BuiltinFileNames(std::string_view kind) {
  std::vector<std::string> names;
  for (const auto& f : BuiltinFiles())
    if (f.kind == kind) names.emplace_back(f.name);
  return names;
}

}  // namespace motley
