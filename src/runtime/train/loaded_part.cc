#include "runtime/train/loaded_part.h"

#include <cstdio>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/units.h"

namespace motley {

LoadedPart MeasureLoadedPart(LlamaModelImpl& model, const ModelSpec& spec) {
  LoadedPart l;
  for (const auto& p : model.named_parameters()) {
    const std::vector<int64_t> shape = LlamaParameterShape(spec, p.key());
    const int64_t whole = std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
    l.whole_bytes += whole * p.value().element_size();
    ++l.all;
    if (IsPlaceholder(p.value())) continue;
    l.part_bytes += p.value().numel() * p.value().element_size();
    ++(p.value().numel() < whole ? l.slices : l.tensors);
  }
  return l;
}

// One line a rank: what it read of the model and the host memory loading took (the memory
// ledger's peak from before the model was made to before its device buffers), against the whole.
void PrintLoadedPart(int rank, const ModelSpec& spec, const LoadedPart& l, int64_t peak_bytes) {
  std::string what = fmt::format("{} of {} tensors", l.tensors + l.slices, l.all);
  if (l.slices > 0) what += fmt::format(" ({} of them slices)", l.slices);
  if (*l.shard_bytes > 0) what = l.tensors + l.slices > 0 ? what + " and ZeRO-3 shards" : "ZeRO-3 shards";
  fmt::print("rank {}: loaded its part of {}: {}, {} of {}; host memory while loading peaked at {}\n", rank,
             spec.name, what, FormatBytes(static_cast<double>(l.part_bytes + *l.shard_bytes)),
             FormatBytes(static_cast<double>(l.whole_bytes)), FormatBytes(static_cast<double>(peak_bytes)));
  std::fflush(stdout);
}

}  // namespace motley
