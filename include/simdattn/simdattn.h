// The whole public C++ API of simdattn.
#ifndef SIMDATTN_SIMDATTN_H_
#define SIMDATTN_SIMDATTN_H_

#include "simdattn/attention.h"  // IWYU pragma: export
#include "simdattn/element.h"    // IWYU pragma: export
#include "simdattn/kernels.h"    // IWYU pragma: export
#include "simdattn/random.h"     // IWYU pragma: export
#include "simdattn/targets.h"    // IWYU pragma: export
#include "simdattn/tensor.h"     // IWYU pragma: export

#endif  // SIMDATTN_SIMDATTN_H_
