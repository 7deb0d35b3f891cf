#include "data/bpe_merges.h"

#include <queue>
#include <tuple>

namespace motley {

void BpeMerges::Add(uint32_t left, uint32_t right, uint32_t merged) {
  merges_.emplace(Key(left, right), Merge{static_cast<uint32_t>(merges_.size()), merged});
}

void BpeMerges::Apply(std::vector<uint32_t>* symbols) const {
  std::vector<uint32_t>& s = *symbols;
  const int n = static_cast<int>(s.size());
  if (n < 2) return;
  if (n == 2) {  // the common short case without a heap
    if (const Merge* m = Find(s[0], s[1])) s = {m->merged};
    return;
  }
  std::vector<int> next(static_cast<size_t>(n)), prev(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1, prev[static_cast<size_t>(i)] = i - 1;
  std::vector<bool> alive(static_cast<size_t>(n), true);
  // (rank, left position, left id, right id): the lowest rank first, then the leftmost.
  using Candidate = std::tuple<uint32_t, int, uint32_t, uint32_t>;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int left) {
    if (left < 0) return;
    const int right = next[static_cast<size_t>(left)];
    if (right < 0) return;
    const uint32_t a = s[static_cast<size_t>(left)], b = s[static_cast<size_t>(right)];
    if (const Merge* m = Find(a, b)) heap.emplace(m->rank, left, a, b);
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const auto [rank, left, a, b] = heap.top();
    heap.pop();
    const auto l = static_cast<size_t>(left);
    const int right = next[l];
    // Stale: a symbol of the pair was merged into something else since it was pushed.
    if (!alive[l] || right < 0 || s[l] != a || s[static_cast<size_t>(right)] != b) continue;
    const auto r = static_cast<size_t>(right);
    s[l] = Find(a, b)->merged;
    alive[r] = false;
    next[l] = next[r];
    if (next[r] >= 0) prev[static_cast<size_t>(next[r])] = left;
    push(prev[l]);
    push(left);
  }
  size_t out = 0;
  for (int i = 0; i >= 0; i = next[static_cast<size_t>(i)]) s[out++] = s[static_cast<size_t>(i)];
  s.resize(out);
}

}  // namespace motley
