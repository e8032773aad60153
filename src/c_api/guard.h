// The exception barrier of the C API: every C function runs its body through
// CallGuarded, which turns whatever the C++ code throws into a status code
// and a thread-local message. Separate from c_api.cc so that a test can throw
// every kind of exception through it.
#ifndef SIMDATTN_SRC_C_API_GUARD_H_
#define SIMDATTN_SRC_C_API_GUARD_H_

#include <new>
#include <stdexcept>

#include "simdattn/simdattn_c.h"

namespace simdattn {
namespace internal {

// The message simdattn_last_error() returns on this thread. Storing never
// allocates or throws (long messages are cut), so reporting an out-of-memory
// error cannot itself fail.
void SetLastError(const char* prefix, const char* message) noexcept;
void ClearLastError() noexcept;

// Runs body(); OK if it returns, else the status for what it threw:
// std::invalid_argument -> INVALID_ARGUMENT, std::bad_alloc -> OUT_OF_MEMORY,
// anything else -> INTERNAL. `function` (the C function's name) prefixes
// the messages that do not already name the call.
template <typename Body>
simdattn_status CallGuarded(const char* function, Body&& body) noexcept {
  try {
    body();
    ClearLastError();
    return SIMDATTN_STATUS_OK;
  } catch (const std::invalid_argument& e) {
    // These name the C++ function, the argument and the values already.
    SetLastError(nullptr, e.what());
    return SIMDATTN_STATUS_INVALID_ARGUMENT;
  } catch (const std::bad_alloc& e) {
    SetLastError(function, "out of memory (std::bad_alloc)");
    return SIMDATTN_STATUS_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    SetLastError(function, e.what());
    return SIMDATTN_STATUS_INTERNAL;
  } catch (...) {
    SetLastError(function, "unknown exception");
    return SIMDATTN_STATUS_INTERNAL;
  }
}

}  // namespace internal
}  // namespace simdattn

#endif  // SIMDATTN_SRC_C_API_GUARD_H_
