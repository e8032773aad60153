// std::vector with 64-byte aligned storage, for arrays that kernels read in
// place, row by row (module weights). Large std::vector blocks come from mmap
// 16 bytes past a page boundary, which splits a cache line at every vector
// load of every row.
#ifndef SIMDATTN_SRC_COMMON_ALIGNED_VECTOR_H_
#define SIMDATTN_SRC_COMMON_ALIGNED_VECTOR_H_

#include <cstddef>
#include <new>
#include <vector>

namespace simdattn {
namespace internal {

template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlignment{64};

  CacheLineAllocator() = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) {}  // NOLINT: rebinding.

  T* allocate(size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), kAlignment));
  }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlignment); }

  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const CacheLineAllocator<U>&) const {
    return false;
  }
};

template <typename T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_COMMON_ALIGNED_VECTOR_H_
