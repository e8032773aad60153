// Reusable, aligned scratch memory for kernels. Buffers return to a shared
// pool when released, so in steady state (same shapes, same concurrency) no
// call allocates. A pool rather than thread_local storage: a TBB thread that
// waits inside parallel_for may steal another task of the same kernel, which
// would then reuse a thread-local buffer that is still in use.
#ifndef SIMDATTN_SRC_COMMON_SCRATCH_H_
#define SIMDATTN_SRC_COMMON_SCRATCH_H_

#include <cstddef>

namespace simdattn {
namespace internal {

// Memory for `floats` floats, 64-byte aligned (a cache line, the widest x86
// vector), contents unspecified. Not copyable; returns its memory on scope exit.
class ScratchBuffer {
 public:
  explicit ScratchBuffer(size_t floats);
  ~ScratchBuffer();
  ScratchBuffer(const ScratchBuffer&) = delete;
  ScratchBuffer& operator=(const ScratchBuffer&) = delete;

  float* data() const { return data_; }

 private:
  float* data_;
  size_t capacity_;  // In floats, >= the requested size.
};

// Bytes the pool has obtained from the system since the process started:
// tests use it to bound a kernel's extra memory.
size_t ScratchBytesAllocated();

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_COMMON_SCRATCH_H_
