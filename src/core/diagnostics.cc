#include "core/diagnostics.h"

#include <fmt/format.h>

namespace motley {

std::string SourcePos::ToString() const {
  if (line <= 0) return file;
  if (column <= 0) return fmt::format("{}:{}", file, line);
  return fmt::format("{}:{}:{}", file, line, column);
}

void Diagnostics::Error(const SourcePos& pos, std::string message) {
  // Cap the list: a badly broken file should not bury the first, most useful errors.
  constexpr size_t kMaxErrors = 50;
  if (errors_.size() == kMaxErrors) {
    errors_.push_back(fmt::format("{}: error: too many errors; fix the ones above first", pos.file));
  }
  if (errors_.size() > kMaxErrors) return;
  errors_.push_back(fmt::format("{}: error: {}", pos.ToString(), message));
}

Status Diagnostics::ToStatus() const {
  if (errors_.empty()) return Status::Ok();
  std::string joined;
  for (const auto& e : errors_) {
    if (!joined.empty()) joined += '\n';
    joined += e;
  }
  return Status::InvalidArgument(joined);
}

}  // namespace motley
