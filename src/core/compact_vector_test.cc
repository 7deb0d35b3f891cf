#include "core/compact_vector.h"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

namespace motley {
namespace {

struct Pair {
  uint8_t kind = 0;
  int16_t a = -1;
  int32_t b = -1;
  bool operator==(const Pair&) const = default;
};

TEST(CompactVector, HoldsAFewInlineAndMoreOnTheHeapAsAVectorWould) {
  static_assert(sizeof(CompactVector<Pair, 3>) == 28);
  static_assert(sizeof(CompactVector<int32_t, 5>) == 24);
  static_assert(alignof(CompactVector<int32_t, 5>) == 4);
  CompactVector<int32_t, 4> v;
  std::vector<int32_t> want;
  EXPECT_TRUE(v.empty());
  for (int32_t i = 0; i < 40; ++i) {  // inline up to 4, then the heap, growing
    v.push_back(40 - i);
    want.push_back(40 - i);
    ASSERT_EQ(std::vector<int32_t>(v.begin(), v.end()), want);
  }
  std::sort(v.begin(), v.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(std::vector<int32_t>(v.begin(), v.end()), want);
  v.erase(v.begin() + 2, v.begin() + 5);
  want.erase(want.begin() + 2, want.begin() + 5);
  EXPECT_EQ(std::vector<int32_t>(v.begin(), v.end()), want);
  EXPECT_EQ(v.back(), 40);
  const std::vector<int32_t> more = {7, 8, 9};
  v.insert(v.end(), more.begin(), more.end());
  want.insert(want.end(), more.begin(), more.end());
  EXPECT_EQ(std::vector<int32_t>(v.begin(), v.end()), want);
  EXPECT_THROW(v.insert(v.begin(), more.begin(), more.end()), std::logic_error);
  CompactVector<int32_t, 4> w;
  w.assign(more.begin(), more.end());
  EXPECT_EQ(std::vector<int32_t>(w.begin(), w.end()), more);
  EXPECT_EQ(v.at(0), 1);
  EXPECT_THROW(v.at(v.size()), std::out_of_range);
}

TEST(CompactVector, CopiesMovesAndAssignsInlineOrOnTheHeap) {
  using Buffers = CompactVector<Pair, 3>;
  for (size_t n : {0u, 2u, 3u, 7u}) {
    Buffers a;
    for (size_t i = 0; i < n; ++i) a.push_back({1, static_cast<int16_t>(i), static_cast<int32_t>(10 * i)});
    Buffers copy = a;
    EXPECT_EQ(copy, a);
    Buffers moved = std::move(copy);
    EXPECT_EQ(moved, a);
    EXPECT_TRUE(copy.empty());  // NOLINT(bugprone-use-after-move): a moved-from list is empty
    Buffers assigned = {{2, 0, 0}};
    assigned = a;
    EXPECT_EQ(assigned, a);
    assigned = {{3, 1, 1}, {3, 2, 2}};
    EXPECT_EQ(assigned.size(), 2u);
    EXPECT_EQ(assigned[1], (Pair{3, 2, 2}));
    Buffers tail(a.begin() + (n > 0 ? 1 : 0), a.end());  // a range
    EXPECT_EQ(tail.size(), n > 0 ? n - 1 : 0);
    moved = std::move(assigned);
    EXPECT_EQ(moved.size(), 2u);
    moved.clear();
    EXPECT_TRUE(moved.empty());
    moved.push_back({4, 4, 4});
    EXPECT_EQ(moved.size(), 1u);
  }
}

TEST(CompactVector, ErasingDownToTheInlineValuesMovesThemBack) {
  CompactVector<int32_t, 5> v = {1, 1, 2, 2, 3, 3, 4};  // on the heap
  auto* at = v.erase(std::unique(v.begin(), v.end()), v.end());
  EXPECT_EQ(at, v.end());
  EXPECT_EQ(std::vector<int32_t>(v.begin(), v.end()), (std::vector<int32_t>{1, 2, 3, 4}));
  // Inline now: its values lie inside the object itself.
  const auto* self = reinterpret_cast<const unsigned char*>(&v);
  const auto* first = reinterpret_cast<const unsigned char*>(v.data());
  EXPECT_TRUE(first >= self && first < self + sizeof(v));
  v.push_back(5);
  v.push_back(6);  // and back to the heap
  EXPECT_EQ(std::vector<int32_t>(v.begin(), v.end()), (std::vector<int32_t>{1, 2, 3, 4, 5, 6}));
  at = v.erase(v.begin() + 1, v.begin() + 3);
  EXPECT_EQ(*at, 4);
  EXPECT_EQ(std::vector<int32_t>(v.begin(), v.end()), (std::vector<int32_t>{1, 4, 5, 6}));
}

TEST(CompactVector, HoldsUpTo65535ValuesAndSaysSoBeyond) {
  CompactVector<int32_t, 2> v;
  for (int32_t i = 0; i < 65535; ++i) v.push_back(i);
  EXPECT_EQ(v.size(), 65535u);
  EXPECT_EQ(v.back(), 65534);
  EXPECT_EQ(v[40000], 40000);
  EXPECT_THROW(v.push_back(0), std::length_error);
  EXPECT_EQ(v.size(), 65535u);  // unchanged
  const std::vector<int32_t> many(70000, 1);
  CompactVector<int32_t, 2> w;
  EXPECT_THROW(w.assign(many.begin(), many.end()), std::length_error);
}

}  // namespace
}  // namespace motley
