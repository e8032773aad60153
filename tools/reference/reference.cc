#include "tools/reference/reference.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

namespace simdattn {
namespace reference {

Bounded MatMulElement(ConstMatrix a, ConstMatrix b,
                      const MatMulOptions& options, float c_before, size_t r,
                      size_t j) {
  const bool transposed = options.transpose_b == Transpose::kYes;
  double exact = 0.0, magnitude = 0.0;
  for (size_t k = 0; k < a.cols; ++k) {
    const double bk = transposed ? b(j, k) : b(k, j);
    exact += double(a(r, k)) * bk;
    magnitude += std::abs(double(a(r, k)) * bk);
  }
  exact *= options.alpha;
  magnitude *= std::abs(options.alpha);
  if (options.beta != 0.0f) {
    exact += double(options.beta) * c_before;
    magnitude += std::abs(double(options.beta) * c_before);
  }
  if (options.bias != nullptr) {
    exact += options.bias[j];
    magnitude += std::abs(options.bias[j]);
  }
  const double eps = std::numeric_limits<float>::epsilon();
  return {exact, 2.0 * double(a.cols + 2) * eps * magnitude + 1e-30};
}

bool Masked(const AttentionMask& m, size_t b, size_t h, size_t i, size_t j) {
  const double position =
      double(i) + double(m.causal_offsets != nullptr ? m.causal_offsets[b]
                                                     : m.causal_offset);
  if ((m.causal || m.window != 0) && double(j) > position) return true;
  if (m.window != 0 && double(j) <= position - double(m.window)) return true;
  if (m.key_lengths && j >= m.key_lengths[b]) return true;
  if (m.boolean.data && m.boolean.Slice(b, h)(i, j) != 0) return true;
  return m.additive.data && m.additive.Slice(b, h)(i, j) == -INFINITY;
}

double Score(const AttentionMask& m, double scaled, size_t b, size_t h,
             size_t i, size_t j) {
  double s = scaled;
  if (m.softcap > 0.0f) s = m.softcap * std::tanh(s / m.softcap);
  if (m.additive.data) s += m.additive.Slice(b, h)(i, j);
  if (m.alibi_slopes) {
    const size_t offset =
        m.causal_offsets != nullptr ? m.causal_offsets[b] : m.causal_offset;
    s -= m.alibi_slopes[h] * std::abs(double(i) + double(offset) - double(j));
  }
  return s;
}

double Sink(const AttentionMask& m, size_t h) {
  return m.sinks != nullptr ? m.sinks[h] : -HUGE_VAL;
}

std::vector<SoftmaxValue> SoftmaxRow(ConstTensor4 x, float scale,
                                     const AttentionMask& m, size_t b, size_t h,
                                     size_t i) {
  const size_t n = x.dims[3];
  const ConstMatrix row = x.Slice(b, h);
  std::vector<double> v(n, -HUGE_VAL);
  std::vector<bool> unmasked(n, false);
  bool nan = false;
  double max = Sink(m, h);
  for (size_t j = 0; j < n; ++j) {
    if (Masked(m, b, h, i, j)) continue;
    unmasked[j] = true;
    v[j] = Score(m, double(scale) * row(i, j), b, h, i, j);
    nan |= std::isnan(v[j]);
    if (v[j] > max) max = v[j];
  }
  std::vector<SoftmaxValue> out(n, {0.0, kSoftmaxRelativeError, false});
  for (size_t j = 0; j < n; ++j) out[j].masked = !unmasked[j];
  if (nan || max == HUGE_VAL) {
    for (SoftmaxValue& o : out) o = {NAN, 0.0, o.masked};
    return out;
  }
  if (max == -HUGE_VAL) return out;
  // Scores with terms are rounded floats, as is the max they join: each
  // term's rounding, and 4 ulp of tanh times the cap.
  const bool terms = m.softcap > 0.0f || m.alibi_slopes || m.sinks;
  double sum = std::exp(Sink(m, h) - max);
  for (size_t j = 0; j < n; ++j) {
    if (!unmasked[j]) continue;
    sum += out[j].value = std::exp(v[j] - max);
    double ulps = 16.0 + std::abs(v[j] - max);
    if (m.additive.data || terms) ulps += std::abs(v[j]);
    if (terms) ulps += 2.0 * std::abs(max) + 12.0 * m.softcap;
    if (m.alibi_slopes)
      ulps += 4.0 * std::abs(v[j] - double(scale) * row(i, j));
    if (std::isfinite(ulps)) {  // Else exp gave exactly 0.
      out[j].relative_error = std::max(kSoftmaxRelativeError, ulps * 0x1p-24);
    }
  }
  for (SoftmaxValue& o : out) o.value /= sum;
  return out;
}

template <typename T>
std::vector<double> Attention(Tensor4View<const T> q, Tensor4View<const T> k,
                              Tensor4View<const T> v, double scale,
                              const AttentionMask& mask,
                              std::vector<double>* log_sum_exp) {
  const size_t batch = q.dims[0], q_heads = q.dims[1], q_tokens = q.dims[2];
  const size_t head_dim = q.dims[3], k_tokens = k.dims[2];
  const size_t value_dim = v.dims[3];
  const size_t group = q_heads / k.dims[1];
  std::vector<double> out(batch * q_heads * q_tokens * value_dim, 0.0);
  std::vector<double> w(k_tokens);
  if (log_sum_exp != nullptr)
    log_sum_exp->assign(batch * q_heads * q_tokens, 0);
  for (size_t b = 0; b < batch; ++b) {
    for (size_t h = 0; h < q_heads; ++h) {
      const MatrixView<const T> qh = q.Slice(b, h);
      const MatrixView<const T> kh = k.Slice(b, h / group);
      const MatrixView<const T> vh = v.Slice(b, h / group);
      for (size_t i = 0; i < q_tokens; ++i) {
        const size_t row = (b * q_heads + h) * q_tokens + i;
        double row_max = Sink(mask, h);
        bool nan = false;
        for (size_t j = 0; j < k_tokens; ++j) {
          w[j] = -INFINITY;
          if (Masked(mask, b, h, i, j)) continue;
          double dot = 0.0;
          for (size_t c = 0; c < head_dim; ++c) {
            dot += double(qh(i, c)) * kh(j, c);
          }
          w[j] = Score(mask, dot * scale, b, h, i, j);
          nan |= std::isnan(w[j]);
          row_max = std::max(row_max, w[j]);
        }
        if (log_sum_exp != nullptr) (*log_sum_exp)[row] = row_max;
        if (row_max == -INFINITY) continue;
        double sum = std::exp(Sink(mask, h) - row_max);
        for (size_t j = 0; j < k_tokens; ++j) {
          w[j] = std::exp(w[j] - row_max);
          sum += w[j];
        }
        if (log_sum_exp != nullptr) {
          (*log_sum_exp)[row] = nan ? NAN : row_max + std::log(sum);
        }
        double* y = &out[row * value_dim];
        for (size_t j = 0; j < k_tokens; ++j) {
          if (w[j] == 0.0) continue;  // Masked keys contribute nothing.
          for (size_t c = 0; c < value_dim; ++c) {
            y[c] += w[j] / sum * vh(j, c);
          }
        }
      }
    }
  }
  return out;
}

template std::vector<double> Attention<float>(ConstTensor4, ConstTensor4,
                                              ConstTensor4, double,
                                              const AttentionMask&,
                                              std::vector<double>*);
template std::vector<double> Attention<double>(Tensor4View<const double>,
                                               Tensor4View<const double>,
                                               Tensor4View<const double>,
                                               double, const AttentionMask&,
                                               std::vector<double>*);

Dropout::Dropout(float p, DropoutKey key)
    : p_(p),
      stream_(DropoutStreamKey(key.seed, key.offset)),
      threshold_(DropoutThreshold(p)),
      scale_(1.0f / (1.0f - p)) {}

float Dropout::operator()(float x, size_t b, size_t h, size_t i,
                          size_t j) const {
  const bool drop = p_ >= 1.0f || DropoutBits(stream_, b, h, i, j) < threshold_;
  return drop ? 0.0f : x * scale_;
}

void QuantizeQueries(std::vector<float>& rows, size_t group) {
  for (size_t b0 = 0; b0 + group <= rows.size(); b0 += group) {
    float max = 0.0f;
    for (size_t i = 0; i < group; ++i) {
      max = std::max(max, std::abs(rows[b0 + i]));
    }
    const float inverse = max == 0.0f ? 0.0f : 127.0f / max;
    const double d = max / 127.0f;
    for (size_t i = 0; i < group; ++i) {
      const double code =
          std::isfinite(inverse)
              ? std::nearbyint(rows[b0 + i] * inverse)
              : std::nearbyint(rows[b0 + i] * (127.0 / double(max)));
      rows[b0 + i] = static_cast<float>(d * code);
    }
  }
}

}  // namespace reference
}  // namespace simdattn
