// Float64 references for simdattn's kernels, with the error bounds the
// kernels promise: written once for the GoogleTest suite (tests/) and for
// `simdattn bench --check` (tools/), so that both hold the kernels to the
// same arithmetic and the same tolerances.
#ifndef SIMDATTN_TOOLS_REFERENCE_REFERENCE_H_
#define SIMDATTN_TOOLS_REFERENCE_REFERENCE_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "simdattn/kernels.h"
#include "simdattn/random.h"
#include "simdattn/tensor.h"

namespace simdattn {
namespace reference {

// An exact value and the largest |error| a float32 result may have.
struct Bounded {
  double value;
  double bound;
};

// Element (r, j) of MatMul(a, b, c, options) in float64, `c_before` being
// C's element before the call (unread when beta is 0). The bound is
// componentwise: 2 (K + 2) eps (|alpha| sum_k |a_rk op(b)_kj| + |beta c| +
// |bias_j|) + 1e-30, twice the classical gamma_K ~ K eps of any summation
// order (it implies the norm-wise ||E|| <= c K eps ||A|| ||B||).
Bounded MatMulElement(ConstMatrix a, ConstMatrix b,
                      const MatMulOptions& options, float c_before, size_t r,
                      size_t j);

// Softmax's per-element bound relative to the exact value (kernels.h).
inline constexpr double kSoftmaxRelativeError = 2e-6;
// Outputs below FLT_MIN are denormal: the relative bound continued down to
// there, in absolute terms.
inline constexpr double kSoftmaxAbsoluteFloor =
    2e-6 * std::numeric_limits<float>::min();

struct SoftmaxValue {
  double value;
  // The bound on |error| / value: kSoftmaxRelativeError, or (16 + |v - max|
  // (+ |v| with an additive mask)) 2^-24 where the rounding of exp's float
  // argument exceeds it (outputs below ~e^-18 of the row's largest;
  // softmax-inl.h). |error| <= relative_error * value +
  // kSoftmaxAbsoluteFloor.
  double relative_error;
  bool masked;  // Masked columns are exactly 0.
};

// Whether key j is masked for row i of (b, h) (kernels.h's AttentionMask).
bool Masked(const AttentionMask& mask, size_t b, size_t h, size_t i, size_t j);

// The score of a visible key from its scaled product (scale * x, or
// scale * q . k): softcap, additive mask and ALiBi applied.
double Score(const AttentionMask& mask, double scaled, size_t b, size_t h,
             size_t i, size_t j);

// softmax(scale * x + mask) of row (b, h, i) of x in float64, with the
// kernel's conventions: no unmasked column or max = -inf gives zeros; a NaN
// score or max = +inf gives NaN everywhere.
std::vector<SoftmaxValue> SoftmaxRow(ConstTensor4 x, float scale,
                                     const AttentionMask& mask, size_t b,
                                     size_t h, size_t i);

// softmax(scale q k^T + mask) v in float64 for (b, Hq, Tq, D) queries and
// (b, Hkv, Tk, D) keys, (b, Hkv, Tk, Dv) values, Hkv dividing Hq (query
// head h reads key/value head h / (Hq / Hkv)). Returns the dense
// (b, Hq, Tq, Dv) output; rows with nothing to attend are 0, masked keys
// contribute nothing whatever V holds. T is float (the kernels' operands)
// or double (projections computed in float64). With log_sum_exp, also each
// row's log-sum-exp (b, Hq, Tq), as AttentionOptions defines it.
template <typename T>
std::vector<double> Attention(Tensor4View<const T> q, Tensor4View<const T> k,
                              Tensor4View<const T> v, double scale,
                              const AttentionMask& mask,
                              std::vector<double>* log_sum_exp = nullptr);

// Dense rows as AttentionOptions::compute kInt8 quantizes queries, in
// place: each group of `group` elements (32 for q8_0 and q4_0 keys, a row
// for int8 keys; rows.size() a multiple of it) to d round(x / d),
// d = max |x| / 127 in float32, codes nearest even from x (127 / max)
// (in double where 127 / max overflows float; a block whose d underflows,
// which kInt8 leaves to float32, to zeros);
// d times a code rounded to float (2^-24 relative).
void QuantizeQueries(std::vector<float>& rows, size_t group);

// Dropout(x, p, key) element by element: dropped iff p >= 1 or
// DropoutBits < DropoutThreshold(p); dropped elements are +0, kept ones
// x * (1.0f / (1.0f - p)) in float, so results compare bit for bit.
class Dropout {
 public:
  Dropout(float p, DropoutKey key);
  float operator()(float x, size_t b, size_t h, size_t i, size_t j) const;

 private:
  float p_;
  PhiloxKey stream_;
  uint32_t threshold_;
  float scale_;
};

}  // namespace reference
}  // namespace simdattn

#endif  // SIMDATTN_TOOLS_REFERENCE_REFERENCE_H_
