// CompactVector: a vector of a few trivially copyable values that keeps up to N of them inline.
// The same idea as boost's small_vector, in less room: the inline values share their bytes with the
// heap pointer, the size and capacity are 16 bits (at most 65,535 values) and the whole is aligned
// as its values are, not as a pointer, so three buffers of 8 bytes take 28 bytes (small_vector: 48)
// and five 32-bit indices 24 (a small_vector of four: 40). A schedule holds its ops by the hundred
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
  static_assert(N > 0 && N * sizeof(T) >= sizeof(T*) && N < 65535);

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

  T* data() { return OnHeap() ? Heap() : reinterpret_cast<T*>(bytes_); }
  const T* data() const { return OnHeap() ? Heap() : reinterpret_cast<const T*>(bytes_); }
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
    if (size_ == capacity_) Grow(size_ + 1u);
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
  /// Removes [first, last), as std::vector does; values that fit inline again move back there
  /// (a list of dependencies sorted and made unique keeps no heap block).
  T* erase(T* first, T* last) {
    const auto at = static_cast<size_t>(first - data());
    const auto count = static_cast<size_t>(last - first);
    T* values = data();
    std::memmove(static_cast<void*>(values + at), values + at + count, (size_ - at - count) * sizeof(T));
    size_ = static_cast<uint16_t>(size_ - count);
    if (OnHeap() && size_ <= N) {
      T* heap = Heap();
      std::memcpy(static_cast<void*>(bytes_), heap, size_ * sizeof(T));
      std::free(heap);
      capacity_ = N;
    }
    return data() + at;
  }

  friend bool operator==(const CompactVector& a, const CompactVector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  bool OnHeap() const { return capacity_ > N; }
  void Assign(const T* values, size_t n) {
    if (n > capacity_) Grow(n);
    if (n > 0) std::memcpy(static_cast<void*>(data()), values, n * sizeof(T));
    size_ = static_cast<uint16_t>(n);
  }
  // The heap pointer lives in the inline bytes, which are aligned only as T is.
  T* Heap() const {
    T* heap;
    std::memcpy(&heap, bytes_, sizeof(heap));
    return heap;
  }
  // Room for `needed` values: twice the capacity, or more if needed, at most kMaxSize.
  void Grow(size_t needed) {
    if (needed > kMaxSize) throw std::length_error("CompactVector: more than 65,535 values");
    const size_t capacity = std::max(needed, std::min<size_t>(2 * size_t{capacity_}, kMaxSize));
    T* heap = static_cast<T*>(std::malloc(capacity * sizeof(T)));
    if (heap == nullptr) throw std::bad_alloc();
    if (size_ > 0) std::memcpy(static_cast<void*>(heap), data(), size_ * sizeof(T));
    Release();
    std::memcpy(bytes_, &heap, sizeof(heap));
    capacity_ = static_cast<uint16_t>(capacity);
  }
  void Release() {
    if (OnHeap()) std::free(Heap());
    capacity_ = N;
  }
  void Take(CompactVector& other) {
    std::memcpy(bytes_, other.bytes_, sizeof(bytes_));
    size_ = other.size_;
    capacity_ = other.capacity_;
    other.size_ = 0;
    other.capacity_ = N;
  }

  static constexpr size_t kMaxSize = 65535;
  alignas(T) unsigned char bytes_[N * sizeof(T)]{};  // N values, or the heap pointer
  uint16_t size_ = 0;
  uint16_t capacity_ = N;  // more than N: the values are on the heap
};

}  // namespace motley
