#include "core/message_tags.h"

#include <fmt/format.h>

#include "core/check.h"

namespace motley {

int64_t MessageTag(TagRange range, int64_t index) {
  MOTLEY_CHECK_GE(index, 0);
  MOTLEY_CHECK_LT(index, kTagsPerRange);
  return static_cast<int64_t>(range) * kTagsPerRange + index;
}

std::string DescribeTag(int64_t tag) {
  static constexpr const char* kNames[] = {
      "schedule message", "state gather message", "FlexTP migration message", "link probe message",
      "trace message",    "rebalancing message",  "FlexTP key/value message"};
  const int64_t range = tag / kTagsPerRange;
  if (tag < 0 || range >= static_cast<int64_t>(std::size(kNames))) return fmt::format("tag {}", tag);
  return fmt::format("{} {}", kNames[range], tag % kTagsPerRange);
}

}  // namespace motley
