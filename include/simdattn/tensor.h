// Non-owning strided views over caller memory. Every kernel and module takes
// its operands as views, so a head inside a (batch, T, heads, head_dim) buffer
// is used where it lies, without a copy.
#ifndef SIMDATTN_TENSOR_H_
#define SIMDATTN_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace simdattn {

// A row-major matrix: element (r, c) is data[r * stride + c]. A valid view
// has stride >= cols (rows may overlap only in views the caller only reads).
template <typename T>
struct MatrixView {
  T* data = nullptr;
  size_t rows = 0;
  size_t cols = 0;
  size_t stride = 0;  // Elements between the starts of consecutive rows.

  constexpr MatrixView() = default;
  constexpr MatrixView(T* data, size_t rows, size_t cols)
      : data(data), rows(rows), cols(cols), stride(cols) {}
  constexpr MatrixView(T* data, size_t rows, size_t cols, size_t stride)
      : data(data), rows(rows), cols(cols), stride(stride) {}

  // A view of T is also a view of const T (and of nothing else).
  template <typename U = T,
            typename = std::enable_if_t<!std::is_const<U>::value &&
                                        std::is_same<U, T>::value>>
  constexpr operator MatrixView<const U>() const {
    return {data, rows, cols, stride};
  }

  constexpr bool empty() const { return rows == 0 || cols == 0; }
  constexpr T* Row(size_t r) const { return data + r * stride; }
  constexpr T& operator()(size_t r, size_t c) const {
    return data[r * stride + c];
  }
};

using Matrix = MatrixView<float>;
using ConstMatrix = MatrixView<const float>;

// 16-bit floating-point storage, as raw bits: bfloat16 (a float32's upper
// half) and IEEE binary16. Kernels widen them to float32 exactly, in
// registers; engines keep weights in them to halve their memory.
struct BFloat16 {
  uint16_t bits;
};
struct Float16 {
  uint16_t bits;
};

// A batch of sequences, (batch, tokens, features) with contiguous features:
// the input and output of the attention modules, PyTorch's (b, T, d).
template <typename T>
struct Tensor3View {
  T* data = nullptr;
  size_t batch = 0;
  size_t tokens = 0;
  size_t features = 0;
  size_t batch_stride = 0;  // Elements between consecutive batch items.
  size_t token_stride = 0;  // Elements between consecutive tokens.

  constexpr Tensor3View() = default;
  // Densely packed.
  constexpr Tensor3View(T* data, size_t batch, size_t tokens, size_t features)
      : Tensor3View(data, batch, tokens, features, tokens * features,
                    features) {}
  constexpr Tensor3View(T* data, size_t batch, size_t tokens, size_t features,
                        size_t batch_stride, size_t token_stride)
      : data(data),
        batch(batch),
        tokens(tokens),
        features(features),
        batch_stride(batch_stride),
        token_stride(token_stride) {}
  // One sequence (tokens x features) as a batch of one.
  constexpr explicit Tensor3View(MatrixView<T> m)
      : Tensor3View(m.data, 1, m.rows, m.cols, m.rows * m.stride, m.stride) {}

  template <typename U = T,
            typename = std::enable_if_t<!std::is_const<U>::value>>
  constexpr operator Tensor3View<const U>() const {
    return Tensor3View<const U>(data, batch, tokens, features, batch_stride,
                                token_stride);
  }

  constexpr bool empty() const {
    return batch == 0 || tokens == 0 || features == 0;
  }
  // Sequence b as a (tokens x features) matrix.
  constexpr MatrixView<T> Sequence(size_t b) const {
    return MatrixView<T>(data + b * batch_stride, tokens, features,
                         token_stride);
  }
};

using Tensor3 = Tensor3View<float>;
using ConstTensor3 = Tensor3View<const float>;

// A 4-D tensor (dims[0], dims[1], dims[2], dims[3]) whose last dimension is
// contiguous. In attention, the dimensions are (batch, heads, rows, cols):
// queries (b, h, T, D) and scores (b, h, Tq, Tk). strides[k] is the distance
// in elements between consecutive indices of dimension k (k < 3). A stride of
// 0 broadcasts (used for masks shared by every head or batch item).
template <typename T>
struct Tensor4View {
  T* data = nullptr;
  size_t dims[4] = {0, 0, 0, 0};
  size_t strides[3] = {0, 0, 0};

  constexpr Tensor4View() = default;
  constexpr Tensor4View(T* data, size_t d0, size_t d1, size_t d2, size_t d3,
                        size_t s0, size_t s1, size_t s2)
      : data(data), dims{d0, d1, d2, d3}, strides{s0, s1, s2} {}

  // A densely packed (d0, d1, d2, d3) tensor.
  static constexpr Tensor4View Dense(T* data, size_t d0, size_t d1, size_t d2,
                                     size_t d3) {
    return Tensor4View(data, d0, d1, d2, d3, d1 * d2 * d3, d2 * d3, d3);
  }
  // The (batch, heads, tokens, head_dim) view of a (batch, tokens, heads *
  // head_dim) buffer, the layout a projection writes: no transpose needed.
  // token_stride (elements from one token to the next, at least heads *
  // head_dim; 0 means heads * head_dim) views one block of a wider row, e.g.
  // Q, K or V of a fused (batch, tokens, 3 * heads * head_dim) projection:
  // FromTokenMajor(qkv + heads * head_dim, ..., 3 * heads * head_dim) is K.
  static constexpr Tensor4View FromTokenMajor(T* data, size_t batch,
                                              size_t tokens, size_t heads,
                                              size_t head_dim,
                                              size_t token_stride = 0) {
    const size_t row = token_stride != 0 ? token_stride : heads * head_dim;
    return Tensor4View(data, batch, heads, tokens, head_dim, tokens * row,
                       head_dim, row);
  }
  // A single matrix as a (1, 1, rows, cols) tensor.
  constexpr explicit Tensor4View(MatrixView<T> m)
      : data(m.data), dims{1, 1, m.rows, m.cols}, strides{0, 0, m.stride} {}

  template <typename U = T,
            typename = std::enable_if_t<!std::is_const<U>::value>>
  constexpr operator Tensor4View<const U>() const {
    return Tensor4View<const U>(data, dims[0], dims[1], dims[2], dims[3],
                                strides[0], strides[1], strides[2]);
  }

  constexpr size_t NumMatrices() const { return dims[0] * dims[1]; }
  constexpr bool empty() const {
    return dims[0] == 0 || dims[1] == 0 || dims[2] == 0 || dims[3] == 0;
  }
  // The (dims[2], dims[3]) matrix at (i0, i1).
  // An empty tensor's data may be null: its slices are then null too
  // (offsetting a null pointer is undefined even when nothing is read).
  constexpr MatrixView<T> Slice(size_t i0, size_t i1) const {
    return MatrixView<T>(
        data == nullptr ? nullptr : data + i0 * strides[0] + i1 * strides[1],
        dims[2], dims[3], strides[2]);
  }
};

using Tensor4 = Tensor4View<float>;
using ConstTensor4 = Tensor4View<const float>;

}  // namespace simdattn

#endif  // SIMDATTN_TENSOR_H_
