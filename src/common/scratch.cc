#include "src/common/scratch.h"

#include <atomic>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace simdattn {
namespace internal {
namespace {

constexpr size_t kAlignment = 64;

std::atomic<size_t> bytes_allocated{0};

struct FreeBlock {
  float* data;
  size_t capacity;
};

// Free buffers; a mutex is enough since it is taken once per task, not per
// tile. Leaked at exit on purpose: kernels may still run in detached threads.
class ScratchPool {
 public:
  static ScratchPool& Get() {
    static ScratchPool* pool = new ScratchPool;
    return *pool;
  }

  // Hands out the smallest free buffer that fits, else a new one.
  std::pair<float*, size_t> Acquire(size_t floats) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      size_t best = free_.size();
      for (size_t i = 0; i < free_.size(); ++i) {
        if (free_[i].capacity >= floats &&
            (best == free_.size() || free_[i].capacity < free_[best].capacity)) {
          best = i;
        }
      }
      if (best != free_.size()) {
        const FreeBlock block = free_[best];
        free_[best] = free_.back();
        free_.pop_back();
        return {block.data, block.capacity};
      }
    }
    // A request this large cannot be met, and rounding it up (or the byte
    // count) would wrap around to a small allocation.
    if (floats > std::numeric_limits<size_t>::max() / sizeof(float) - 1023) {
      throw std::bad_alloc();
    }
    // Round up so that slightly different shapes share buffers.
    const size_t capacity = (floats + 1023) / 1024 * 1024;
    void* memory = std::aligned_alloc(kAlignment, capacity * sizeof(float));
    if (memory == nullptr) throw std::bad_alloc();
    bytes_allocated.fetch_add(capacity * sizeof(float),
                              std::memory_order_relaxed);
    return {static_cast<float*>(memory), capacity};
  }

  void Release(float* data, size_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back({data, capacity});
  }

 private:
  ScratchPool() { free_.reserve(64); }

  std::mutex mutex_;
  std::vector<FreeBlock> free_;
};

}  // namespace

ScratchBuffer::ScratchBuffer(size_t floats) {
  const auto block = ScratchPool::Get().Acquire(floats);
  data_ = block.first;
  capacity_ = block.second;
}

size_t ScratchBytesAllocated() {
  return bytes_allocated.load(std::memory_order_relaxed);
}

ScratchBuffer::~ScratchBuffer() { ScratchPool::Get().Release(data_, capacity_); }

}  // namespace internal
}  // namespace simdattn
