// motley's own small training text, generated (deterministically) from a tiny grammar of people,
// places, errands and sums, so the default job trains without a download and its loss can fall
// well below that of random text. About 400 KB.
#pragma once

#include <string>

namespace motley {

const std::string& BuiltinCorpus();

}  // namespace motley
