// CompactVector: a vector of a few trivially copyable values that keeps up to N of them inline.
// The same idea as boost's small_vector, in less room: the inline values share their bytes with the
// heap pointer and the size and capacity are 32 bits, so three buffers of 8 bytes take 32 bytes
// (small_vector: 48) and four 32-bit indices 24 (40). A schedule holds its ops by the hundred
// thousand (plan/schedule.h: Op), each with three such lists and one of dependencies.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <new>
#include <stdexcept>
#include <type_traits>

namespace motley {

template <typename T, uint32_t N>
class CompactVector {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);
  static_assert(N > 0 && N * sizeof(T) >= sizeof(T*));

 public:
  using value_type = T;
  using iterator = T*;
  using const_iterator = const T*;
  using size_type = size_t;

  CompactVector() = default;
  CompactVector(std::initializer_list<T> values) { Assign(values.begin(), values.size()); }
  template <typename It>
  requires(!std::is_integral_v<It>) CompactVector(It first, It last) {
    for (; first != last; ++first) push_back(*first);
  }
  CompactVector(const CompactVector& other) { Assign(other.data(), other.size()); }
  CompactVector(CompactVector&& other) noexcept { Take(other); }
  CompactVector& operator=(const CompactVector& other) {
    if (this != &other) {
      clear();
      Assign(other.data(), other.size());
    }
    return *this;
  }
  CompactVector& operator=(CompactVector&& other) noexcept {
    if (this != &other) {
      Release();
      Take(other);
    }
    return *this;
  }
  CompactVector& operator=(std::initializer_list<T> values) {
    clear();
    Assign(values.begin(), values.size());
    return *this;
  }
  ~CompactVector() { Release(); }

  T* data() { return OnHeap() ? storage_.heap : reinterpret_cast<T*>(storage_.bytes); }
  const T* data() const { return OnHeap() ? storage_.heap : reinterpret_cast<const T*>(storage_.bytes); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  const T& at(size_t i) const {
    if (i >= size_) throw std::out_of_range("CompactVector::at");
    return data()[i];
  }
  const T& front() const { return data()[0]; }
  T& back() { return data()[size_ - 1]; }
  const T& back() const { return data()[size_ - 1]; }

  void push_back(const T& v) {
    if (size_ == capacity_) Grow(capacity_ * 2);
    ::new (static_cast<void*>(data() + size_)) T(v);
    ++size_;
  }
  /// Appends [first, last) at `at`, which must be end().
  template <typename It>
  void insert(T* at, It first, It last) {
    if (at != end()) throw std::logic_error("CompactVector::insert: only at the end");
    for (; first != last; ++first) push_back(*first);
  }
  template <typename It>
  void assign(It first, It last) {
    clear();
    insert(end(), first, last);
  }
  void clear() { size_ = 0; }
  /// Removes [first, last), as std::vector does.
  T* erase(T* first, T* last) {
    std::memmove(static_cast<void*>(first), last, static_cast<size_t>(end() - last) * sizeof(T));
    size_ -= static_cast<uint32_t>(last - first);
    return first;
  }

  friend bool operator==(const CompactVector& a, const CompactVector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  bool OnHeap() const { return capacity_ > N; }
  void Assign(const T* values, size_t n) {
    if (n > capacity_) Grow(static_cast<uint32_t>(n));
    if (n > 0) std::memcpy(static_cast<void*>(data()), values, n * sizeof(T));
    size_ = static_cast<uint32_t>(n);
  }
  void Grow(uint32_t capacity) {
    T* heap = static_cast<T*>(std::malloc(capacity * sizeof(T)));
    if (heap == nullptr) throw std::bad_alloc();
    if (size_ > 0) std::memcpy(static_cast<void*>(heap), data(), size_ * sizeof(T));
    Release();
    storage_.heap = heap;
    capacity_ = capacity;
  }
  void Release() {
    if (OnHeap()) std::free(storage_.heap);
    capacity_ = N;
  }
  void Take(CompactVector& other) {
    std::memcpy(static_cast<void*>(&storage_), &other.storage_, sizeof(storage_));
    size_ = other.size_;
    capacity_ = other.capacity_;
    other.size_ = 0;
    other.capacity_ = N;
  }

  union Storage {
    alignas(T) unsigned char bytes[N * sizeof(T)];
    T* heap;
  } storage_{};
  uint32_t size_ = 0;
  uint32_t capacity_ = N;  // more than N: the values are on the heap
};

}  // namespace motley
