/* The C API from C: every function, its results against small references
 * computed here, and its errors (status code plus a message naming the
 * argument and the values). Compiled as C99, so the header is proven to be
 * C. Exits non-zero after printing every failed check. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "simdattn/simdattn_c.h"

static int g_failures = 0;

#define CHECK(condition)                                               \
  do {                                                                 \
    if (!(condition)) {                                                \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, \
              #condition);                                             \
      ++g_failures;                                                    \
    }                                                                  \
  } while (0)

#define CHECK_NEAR(actual, expected, tolerance)                                \
  do {                                                                         \
    const double a_ = (actual), e_ = (expected);                               \
    if (!(fabs(a_ - e_) <= (tolerance))) {                                     \
      fprintf(stderr, "%s:%d: %s = %.9g, expected %.9g\n", __FILE__, __LINE__, \
              #actual, a_, e_);                                                \
      ++g_failures;                                                            \
    }                                                                          \
  } while (0)

/* The call succeeds and leaves simdattn_last_error() empty. */
#define CHECK_OK(call)                                                   \
  do {                                                                   \
    const simdattn_status s_ = (call);                                   \
    if (s_ != SIMDATTN_STATUS_OK) {                                      \
      fprintf(stderr, "%s:%d: %s returned %d: %s\n", __FILE__, __LINE__, \
              #call, (int)s_, simdattn_last_error());                    \
      ++g_failures;                                                      \
    } else if (simdattn_last_error()[0] != '\0') {                       \
      fprintf(stderr, "%s:%d: %s succeeded but left the error \"%s\"\n", \
              __FILE__, __LINE__, #call, simdattn_last_error());         \
      ++g_failures;                                                      \
    }                                                                    \
  } while (0)

/* The call fails with `status` and a message containing `fragment`. */
#define CHECK_ERROR(call, status, fragment)                                    \
  do {                                                                         \
    const simdattn_status s_ = (call);                                         \
    if (s_ != (status)) {                                                      \
      fprintf(stderr, "%s:%d: %s returned %d, expected %d (%s)\n", __FILE__,   \
              __LINE__, #call, (int)s_, (int)(status), simdattn_last_error()); \
      ++g_failures;                                                            \
    } else if (strstr(simdattn_last_error(), (fragment)) == NULL) {            \
      fprintf(stderr, "%s:%d: %s: message \"%s\" lacks \"%s\"\n", __FILE__,    \
              __LINE__, #call, simdattn_last_error(), fragment);               \
      ++g_failures;                                                            \
    }                                                                          \
  } while (0)

/* After a CHECK_ERROR: its message also contains `fragment`. */
#define CHECK_MESSAGE(fragment)                                         \
  do {                                                                  \
    if (strstr(simdattn_last_error(), (fragment)) == NULL) {            \
      fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\"\n", __FILE__, \
              __LINE__, simdattn_last_error(), fragment);               \
      ++g_failures;                                                     \
    }                                                                   \
  } while (0)

#define INVALID SIMDATTN_STATUS_INVALID_ARGUMENT

static simdattn_const_matrix ConstMatrix(const float* data, size_t rows,
                                         size_t cols, size_t stride) {
  simdattn_const_matrix m;
  m.data = data;
  m.rows = rows;
  m.cols = cols;
  m.stride = stride;
  return m;
}

static simdattn_matrix Matrix(float* data, size_t rows, size_t cols,
                              size_t stride) {
  simdattn_matrix m;
  m.data = data;
  m.rows = rows;
  m.cols = cols;
  m.stride = stride;
  return m;
}

/* Densely packed 4-D views. */
static simdattn_tensor4 Dense4(float* data, size_t d0, size_t d1, size_t d2,
                               size_t d3) {
  simdattn_tensor4 t;
  t.data = data;
  t.dims[0] = d0;
  t.dims[1] = d1;
  t.dims[2] = d2;
  t.dims[3] = d3;
  t.strides[0] = d1 * d2 * d3;
  t.strides[1] = d2 * d3;
  t.strides[2] = d3;
  return t;
}

static simdattn_const_tensor4 Const4(simdattn_tensor4 t) {
  simdattn_const_tensor4 c;
  memcpy(&c.dims, &t.dims, sizeof(c.dims));
  memcpy(&c.strides, &t.strides, sizeof(c.strides));
  c.data = t.data;
  return c;
}

static simdattn_tensor3 Dense3(float* data, size_t batch, size_t tokens,
                               size_t features) {
  simdattn_tensor3 t;
  t.data = data;
  t.batch = batch;
  t.tokens = tokens;
  t.features = features;
  t.batch_stride = tokens * features;
  t.token_stride = features;
  return t;
}

static simdattn_const_tensor3 Const3(simdattn_tensor3 t) {
  simdattn_const_tensor3 c;
  c.data = t.data;
  c.batch = t.batch;
  c.tokens = t.tokens;
  c.features = t.features;
  c.batch_stride = t.batch_stride;
  c.token_stride = t.token_stride;
  return c;
}

/* Deterministic values in [-1, 1). */
static void Fill(float* data, size_t n, uint32_t seed) {
  size_t i;
  uint32_t state = seed * 2654435761u + 1u;
  for (i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    data[i] = (float)(state >> 8) / 8388608.0f - 1.0f;
  }
}

static void TestRuntime(void) {
  size_t original = 0, now = 0;
  char target[64];
  CHECK(strcmp(simdattn_version(), SIMDATTN_EXPECTED_VERSION) == 0);
  CHECK(simdattn_last_error() != NULL);

  snprintf(target, sizeof(target), "%s", simdattn_active_target());
  CHECK(target[0] != '\0');
  CHECK_OK(simdattn_use_target(target));
  CHECK(strcmp(simdattn_active_target(), target) == 0);
  CHECK_ERROR(simdattn_use_target("NOT_A_TARGET"), INVALID,
              "UseTarget: target \"NOT_A_TARGET\" is not supported here");
  CHECK_OK(simdattn_use_target(NULL));
  CHECK(strcmp(simdattn_active_target(), target) == 0);

  CHECK_ERROR(simdattn_load_plans("/nonexistent/plans.txt"), INVALID,
              "LoadPlans: cannot read plan file \"/nonexistent/plans.txt\"");
  CHECK_OK(simdattn_load_plans(NULL));

  CHECK_OK(simdattn_get_max_threads(&original));
  CHECK(original >= 1);
  CHECK_OK(simdattn_set_max_threads(1));
  CHECK_OK(simdattn_get_max_threads(&now));
  CHECK(now == 1);
  /* Raising it again works: the old bound is released, not stacked. */
  CHECK_OK(simdattn_set_max_threads(original));
  CHECK_OK(simdattn_get_max_threads(&now));
  CHECK(now == original);
  CHECK_OK(simdattn_set_max_threads(0));
  CHECK_OK(simdattn_get_max_threads(&now));
  CHECK(now == original);
  CHECK_ERROR(simdattn_get_max_threads(NULL), INVALID,
              "simdattn_get_max_threads: max_threads is null");
}

/* C = alpha * A * op(B) + beta * C + bias against a double reference; A is
 * 3 x 4 in rows of stride 5, B is 4 x 2 (or 2 x 4 transposed). */
static void TestMatMul(void) {
  float a[3 * 5], b[4 * 2], bt[2 * 4], c[3 * 2], c_old[3 * 2], bias[2];
  simdattn_matmul_options options = SIMDATTN_MATMUL_OPTIONS_INIT;
  const simdattn_matmul_options defaults = SIMDATTN_MATMUL_OPTIONS_INIT;
  size_t r, col, k;
  int transpose;
  Fill(a, 15, 1);
  Fill(b, 8, 2);
  Fill(bias, 2, 3);
  for (r = 0; r < 4; ++r) {
    for (col = 0; col < 2; ++col) bt[col * 4 + r] = b[r * 2 + col];
  }
  CHECK(options.struct_size == sizeof(simdattn_matmul_options));
  CHECK(options.transpose_b == 0 && options.use_alpha == 0 &&
        options.alpha == 0.0f && options.beta == 0.0f && options.bias == NULL &&
        options.compute == SIMDATTN_COMPUTE_FP32);

  for (transpose = 0; transpose < 2; ++transpose) {
    Fill(c_old, 6, 4);
    memcpy(c, c_old, sizeof(c));
    options.transpose_b = transpose;
    options.use_alpha = 1;
    options.alpha = 0.5f;
    options.beta = 2.0f;
    options.bias = bias;
    CHECK_OK(simdattn_matmul(
        ConstMatrix(a, 3, 4, 5),
        transpose ? ConstMatrix(bt, 2, 4, 4) : ConstMatrix(b, 4, 2, 2),
        Matrix(c, 3, 2, 2), &options));
    for (r = 0; r < 3; ++r) {
      for (col = 0; col < 2; ++col) {
        double sum = 0.0;
        for (k = 0; k < 4; ++k) sum += (double)a[r * 5 + k] * b[k * 2 + col];
        CHECK_NEAR(c[r * 2 + col],
                   0.5 * sum + 2.0 * c_old[r * 2 + col] + bias[col], 1e-5);
      }
    }
  }
  /* NULL options: C = A * B, C's old contents ignored (even NaN). */
  for (k = 0; k < 6; ++k) c[k] = NAN;
  CHECK_OK(simdattn_matmul(ConstMatrix(a, 3, 4, 5), ConstMatrix(b, 4, 2, 2),
                           Matrix(c, 3, 2, 2), NULL));
  for (r = 0; r < 3; ++r) {
    double sum = 0.0;
    for (k = 0; k < 4; ++k) sum += (double)a[r * 5 + k] * b[k * 2 + 1];
    CHECK_NEAR(c[r * 2 + 1], sum, 1e-5);
  }
  /* SIMDATTN_MATMUL_OPTIONS_INIT (every other field zero) means the defaults
   * too; use_alpha = 1 makes alpha 0 real (C = bias). A zeroed struct is an
   * error now: TestStructSizeZero. */
  options = defaults;
  for (k = 0; k < 6; ++k) c[k] = NAN;
  CHECK_OK(simdattn_matmul(ConstMatrix(a, 3, 4, 5), ConstMatrix(b, 4, 2, 2),
                           Matrix(c, 3, 2, 2), &options));
  for (r = 0; r < 3; ++r) {
    double sum = 0.0;
    for (k = 0; k < 4; ++k) sum += (double)a[r * 5 + k] * b[k * 2];
    CHECK_NEAR(c[r * 2], sum, 1e-5);
  }
  options.use_alpha = 1;
  options.bias = bias;
  CHECK_OK(simdattn_matmul(ConstMatrix(a, 3, 4, 5), ConstMatrix(b, 4, 2, 2),
                           Matrix(c, 3, 2, 2), &options));
  for (k = 0; k < 6; ++k) CHECK(c[k] == bias[k % 2]);
  options.use_alpha = 0;
  options.alpha = 0.5f;
  CHECK_ERROR(simdattn_matmul(ConstMatrix(a, 3, 4, 5), ConstMatrix(b, 4, 2, 2),
                              Matrix(c, 3, 2, 2), &options),
              INVALID,
              "options->alpha (0.5) is used only with options->use_alpha = 1");
  /* Empty shapes are valid and touch nothing, even with null data. */
  CHECK_OK(simdattn_matmul(ConstMatrix(NULL, 0, 4, 4), ConstMatrix(b, 4, 2, 2),
                           Matrix(NULL, 0, 2, 2), NULL));

  /* Errors; C is left as it was. */
  memcpy(c_old, c, sizeof(c));
  CHECK_ERROR(simdattn_matmul(ConstMatrix(a, 3, 4, 5), ConstMatrix(b, 2, 4, 4),
                              Matrix(c, 3, 2, 2), NULL),
              INVALID, "MatMul: inner dimensions differ: A is 3 x 4");
  CHECK_ERROR(simdattn_matmul(ConstMatrix(a, 3, 4, 3), ConstMatrix(b, 4, 2, 2),
                              Matrix(c, 3, 2, 2), NULL),
              INVALID, "MatMul: A.stride (3) is less than A.cols (4)");
  CHECK_ERROR(
      simdattn_matmul(ConstMatrix(NULL, 3, 4, 4), ConstMatrix(b, 4, 2, 2),
                      Matrix(c, 3, 2, 2), NULL),
      INVALID, "MatMul: A is null but has shape 3 x 4");
  CHECK_ERROR(simdattn_matmul(ConstMatrix(a, 3, 4, 5), ConstMatrix(b, 4, 2, 2),
                              Matrix(c, 3, 3, 3), NULL),
              INVALID, "MatMul: C is 3 x 3 but A * op(B) is 3 x 2");
  CHECK_ERROR(simdattn_matmul(ConstMatrix(a, 3, 4, 5), ConstMatrix(b, 4, 2, 2),
                              Matrix(a + 8, 3, 2, 2), NULL),
              INVALID, "MatMul: C overlaps A");
  options = defaults;
  options.bias = c + 1;
  CHECK_ERROR(simdattn_matmul(ConstMatrix(a, 3, 4, 5), ConstMatrix(b, 4, 2, 2),
                              Matrix(c, 3, 2, 2), &options),
              INVALID, "MatMul: C overlaps bias");
  options.bias = NULL;
  options.transpose_b = 2;
  CHECK_ERROR(simdattn_matmul(ConstMatrix(a, 3, 4, 5), ConstMatrix(b, 4, 2, 2),
                              Matrix(c, 3, 2, 2), &options),
              INVALID, "options->transpose_b (2) is neither 0 nor 1");
  CHECK(memcmp(c, c_old, sizeof(c)) == 0);
}

/* x rounded to bf16, nearest even (finite x). */
static float RoundBF16(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof(bits));
  bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
  memcpy(&x, &bits, sizeof(bits));
  return x;
}

/* x[0, n) rounded to bf16 in place, their bits in out. */
static void ToBF16Bits(float* x, uint16_t* out, size_t n) {
  size_t i;
  for (i = 0; i < n; ++i) {
    uint32_t bits;
    x[i] = RoundBF16(x[i]);
    memcpy(&bits, &x[i], sizeof(bits));
    out[i] = (uint16_t)(bits >> 16);
  }
}

/* bf16 arithmetic: the float32 sum of the rounded operands' products. */
static void TestBFloat16Compute(void) {
  float a[3 * 4], b[4 * 2], c[3 * 2];
  simdattn_matmul_options options = SIMDATTN_MATMUL_OPTIONS_INIT;
  size_t r, col, k;
  const char* kernel = simdattn_bf16_dot_kernel();
  CHECK(kernel != NULL && kernel[0] != '\0');
  Fill(a, 12, 11);
  Fill(b, 8, 12);
  options.compute = SIMDATTN_COMPUTE_BF16;
  CHECK_OK(simdattn_matmul(ConstMatrix(a, 3, 4, 4), ConstMatrix(b, 4, 2, 2),
                           Matrix(c, 3, 2, 2), &options));
  for (r = 0; r < 3; ++r) {
    for (col = 0; col < 2; ++col) {
      double sum = 0.0;
      for (k = 0; k < 4; ++k) {
        sum += (double)RoundBF16(a[r * 4 + k]) * RoundBF16(b[k * 2 + col]);
      }
      CHECK_NEAR(c[r * 2 + col], sum, 1e-6);
    }
  }
  options.compute = 3;
  CHECK_ERROR(simdattn_matmul(ConstMatrix(a, 3, 4, 4), ConstMatrix(b, 4, 2, 2),
                              Matrix(c, 3, 2, 2), &options),
              INVALID, "compute (3) is not SIMDATTN_COMPUTE_FP32 (0)");
  options.compute = SIMDATTN_COMPUTE_INT8;
  CHECK_ERROR(simdattn_matmul(ConstMatrix(a, 3, 4, 4), ConstMatrix(b, 4, 2, 2),
                              Matrix(c, 3, 2, 2), &options),
              INVALID, "kInt8 is attention's");
}

/* A weight packed once (bf16, B^T) and multiplied twice, in float32 and bf16
 * arithmetic: the products of its values; errors leave *packed alone. */
static void TestPackedMatMul(void) {
  float a[3 * 4], b[2 * 4], c[3 * 2];
  uint16_t b16[2 * 4];
  simdattn_matmul_options options = SIMDATTN_MATMUL_OPTIONS_INIT;
  simdattn_const_typed_matrix typed = {NULL, 2, 4, 4, SIMDATTN_BF16, 0};
  simdattn_packed_matrix* packed = NULL;
  uint16_t a16[3 * 4], c16[3 * 2];
  simdattn_const_typed_matrix a_typed = {NULL, 3, 4, 4, SIMDATTN_F32, 0};
  simdattn_typed_matrix c_typed = {NULL, 3, 2, 2, SIMDATTN_F32, 0};
  size_t r, col, k;
  int compute;
  Fill(a, 12, 21);
  Fill(b, 8, 22);
  ToBF16Bits(b, b16, 8);
  typed.data = b16;
  a_typed.data = a;
  c_typed.data = c;
  options.transpose_b = 1;
  for (compute = 0; compute < 2; ++compute) {
    options.compute = compute ? SIMDATTN_COMPUTE_BF16 : SIMDATTN_COMPUTE_FP32;
    CHECK_OK(simdattn_matmul_pack(typed, &options, &packed));
    CHECK_OK(simdattn_matmul_packed(a_typed, packed, c_typed, &options));
    for (r = 0; r < 3; ++r) {
      for (col = 0; col < 2; ++col) {
        double sum = 0.0;
        for (k = 0; k < 4; ++k) {
          const float x = compute ? RoundBF16(a[r * 4 + k]) : a[r * 4 + k];
          sum += (double)x * b[col * 4 + k];
        }
        CHECK_NEAR(c[r * 2 + col], sum, 1e-5);
      }
    }
    options.compute = compute ? SIMDATTN_COMPUTE_FP32 : SIMDATTN_COMPUTE_BF16;
    CHECK_ERROR(simdattn_matmul_packed(a_typed, packed, c_typed, &options),
                INVALID, "differ from the packing's");
    simdattn_packed_matrix_destroy(packed);
  }
  simdattn_packed_matrix_destroy(NULL);
  packed = NULL;
  typed.type = SIMDATTN_INT8;
  CHECK_ERROR(simdattn_matmul_pack(typed, &options, &packed), INVALID,
              "b.type (3) is not SIMDATTN_F32, SIMDATTN_BF16 or SIMDATTN_F16");
  CHECK(packed == NULL);
  CHECK_ERROR(simdattn_matmul_packed(a_typed, NULL, c_typed, &options), INVALID,
              "b");
  /* bf16 A and C: A's bf16 values, C rounded once. */
  ToBF16Bits(a, a16, 12);
  a_typed.data = a16;
  a_typed.type = SIMDATTN_BF16;
  c_typed.data = c16;
  c_typed.type = SIMDATTN_BF16;
  typed.type = SIMDATTN_BF16;
  options.compute = SIMDATTN_COMPUTE_FP32;
  CHECK_OK(simdattn_matmul_pack(typed, &options, &packed));
  CHECK_OK(simdattn_matmul_packed(a_typed, packed, c_typed, &options));
  for (r = 0; r < 3; ++r) {
    for (col = 0; col < 2; ++col) {
      double sum = 0.0;
      float got;
      uint32_t bits = (uint32_t)c16[r * 2 + col] << 16;
      memcpy(&got, &bits, sizeof(got));
      for (k = 0; k < 4; ++k) sum += (double)a[r * 4 + k] * b[col * 4 + k];
      CHECK_NEAR(got, sum, fabs(sum) / 256 + 1e-6);
    }
  }
  c_typed.type = SIMDATTN_F16;
  CHECK_ERROR(simdattn_matmul_packed(a_typed, packed, c_typed, &options),
              INVALID, "c.type (2) is neither SIMDATTN_F32 nor SIMDATTN_BF16");
  simdattn_packed_matrix_destroy(packed);
}

/* Two batch items, two query heads sharing one key head (grouped query). */
static void TestBatchedMatMul(void) {
  float a[2 * 2 * 3 * 4], b[2 * 1 * 5 * 4], c[2 * 2 * 3 * 5];
  simdattn_matmul_options options = SIMDATTN_MATMUL_OPTIONS_INIT;
  size_t i0, i1, r, col, k;
  Fill(a, sizeof(a) / sizeof(float), 5);
  Fill(b, sizeof(b) / sizeof(float), 6);
  options.transpose_b = 1;
  CHECK_OK(simdattn_batched_matmul(Const4(Dense4(a, 2, 2, 3, 4)),
                                   Const4(Dense4(b, 2, 1, 5, 4)),
                                   Dense4(c, 2, 2, 3, 5), &options));
  for (i0 = 0; i0 < 2; ++i0) {
    for (i1 = 0; i1 < 2; ++i1) {
      for (r = 0; r < 3; ++r) {
        for (col = 0; col < 5; ++col) {
          double sum = 0.0;
          for (k = 0; k < 4; ++k) {
            sum += (double)a[((i0 * 2 + i1) * 3 + r) * 4 + k] *
                   b[(i0 * 5 + col) * 4 + k];
          }
          CHECK_NEAR(c[((i0 * 2 + i1) * 3 + r) * 5 + col], sum, 1e-5);
        }
      }
    }
  }
  CHECK_ERROR(simdattn_batched_matmul(Const4(Dense4(a, 2, 2, 3, 4)),
                                      Const4(Dense4(b, 1, 3, 5, 4)),
                                      Dense4(c, 2, 2, 3, 5), &options),
              INVALID,
              "BatchedMatMul: A's heads (2) are not a multiple of B's heads "
              "(3)");
  {
    /* Both batch items written to one matrix: a race, so an error. */
    simdattn_tensor4 shared = Dense4(c, 2, 2, 3, 5);
    shared.strides[0] = 0;
    CHECK_ERROR(simdattn_batched_matmul(Const4(Dense4(a, 2, 2, 3, 4)),
                                        Const4(Dense4(b, 2, 1, 5, 4)), shared,
                                        &options),
                INVALID, "BatchedMatMul: C.strides[0] (0) makes elements of C");
  }
}

/* Softmax of rows of 6 with every kind of mask against a reference. */
static void TestSoftmax(void) {
  enum { kBatch = 2, kRows = 3, kCols = 6, kSize = kBatch * kRows * kCols };
  float x[kSize], y[kSize], additive[kRows * kCols];
  uint8_t boolean[kCols];
  size_t key_lengths[kBatch] = {4, 0};
  simdattn_mask mask = SIMDATTN_MASK_INIT;
  size_t b, i, j;
  Fill(x, kSize, 7);
  Fill(additive, kRows * kCols, 8);
  additive[1 * kCols + 0] = -INFINITY;
  for (j = 0; j < kCols; ++j) boolean[j] = (uint8_t)(j == 2);

  mask.causal = 1;
  mask.causal_offset = 1;
  /* One row of the boolean mask shared by every row, head and item. */
  mask.boolean_mask.data = boolean;
  mask.boolean_mask.dims[0] = kBatch;
  mask.boolean_mask.dims[1] = 1;
  mask.boolean_mask.dims[2] = kRows;
  mask.boolean_mask.dims[3] = kCols;
  /* The additive mask is shared by the batch items. */
  mask.additive_mask = Const4(Dense4(additive, kBatch, 1, kRows, kCols));
  mask.additive_mask.strides[0] = 0;
  mask.key_lengths = key_lengths;
  CHECK_OK(simdattn_softmax(Const4(Dense4(x, kBatch, 1, kRows, kCols)),
                            Dense4(y, kBatch, 1, kRows, kCols), 0.5f, &mask));
  for (b = 0; b < kBatch; ++b) {
    for (i = 0; i < kRows; ++i) {
      double e[kCols], sum = 0.0;
      for (j = 0; j < kCols; ++j) {
        const int kept = j <= i + 1 && j != 2 && j < key_lengths[b];
        e[j] = kept ? exp(0.5 * x[(b * kRows + i) * kCols + j] +
                          additive[i * kCols + j])
                    : 0.0;
        sum += e[j];
      }
      for (j = 0; j < kCols; ++j) {
        /* Item 1 keeps no key: its rows are zeros, not NaN. */
        CHECK_NEAR(y[(b * kRows + i) * kCols + j], sum > 0 ? e[j] / sum : 0.0,
                   1e-6);
      }
    }
  }
  /* In place, no mask: rows sum to one. */
  CHECK_OK(simdattn_softmax(Const4(Dense4(x, kBatch, 1, kRows, kCols)),
                            Dense4(x, kBatch, 1, kRows, kCols), 1.0f, NULL));
  for (i = 0; i < kBatch * kRows; ++i) {
    double sum = 0.0;
    for (j = 0; j < kCols; ++j) sum += x[i * kCols + j];
    CHECK_NEAR(sum, 1.0, 1e-6);
  }

  key_lengths[1] = 7;
  CHECK_ERROR(simdattn_softmax(Const4(Dense4(x, kBatch, 1, kRows, kCols)),
                               Dense4(y, kBatch, 1, kRows, kCols), 1.0f, &mask),
              INVALID, "Softmax: mask.key_lengths[1] (7) exceeds");
  key_lengths[1] = 0;
  mask.causal = 3;
  CHECK_ERROR(simdattn_softmax(Const4(Dense4(x, kBatch, 1, kRows, kCols)),
                               Dense4(y, kBatch, 1, kRows, kCols), 1.0f, &mask),
              INVALID, "mask->causal (3) is neither 0 nor 1");
  CHECK_ERROR(
      simdattn_softmax(Const4(Dense4(x, kBatch, 1, kRows, kCols)),
                       Dense4(y, kBatch, 1, kRows, kCols - 1), 1.0f, NULL),
      INVALID,
      "Softmax: y has shape (2, 1, 3, 5) but x has shape "
      "(2, 1, 3, 6)");
  CHECK_ERROR(
      simdattn_softmax(Const4(Dense4(x, kBatch, 1, kRows, kCols)),
                       Dense4(y, kBatch, 1, kRows, kCols), INFINITY, NULL),
      INVALID, "Softmax: scale (inf) is not finite");
}

static void TestDropout(void) {
  enum { kSize = 4 * 64 };
  float x[kSize], first[kSize], again[kSize], other[kSize];
  size_t i, kept = 0;
  for (i = 0; i < kSize; ++i) x[i] = 1.0f + (float)i;
  memcpy(first, x, sizeof(x));
  CHECK_OK(simdattn_dropout(Dense4(first, 1, 1, 4, 64), 0.0f, 1, 0));
  CHECK(memcmp(first, x, sizeof(x)) == 0);

  CHECK_OK(simdattn_dropout(Dense4(first, 1, 1, 4, 64), 0.5f, 11, 3));
  memcpy(again, x, sizeof(x));
  CHECK_OK(simdattn_dropout(Dense4(again, 1, 1, 4, 64), 0.5f, 11, 3));
  memcpy(other, x, sizeof(x));
  CHECK_OK(simdattn_dropout(Dense4(other, 1, 1, 4, 64), 0.5f, 11, 4));
  CHECK(memcmp(first, again, sizeof(x)) == 0);
  CHECK(memcmp(first, other, sizeof(x)) != 0);
  for (i = 0; i < kSize; ++i) {
    CHECK(first[i] == 0.0f || first[i] == 2.0f * x[i]);
    kept += first[i] != 0.0f;
  }
  /* 256 draws of p = 0.5: 128 +- 4 sigma (sigma = 8). */
  CHECK(kept >= 96 && kept <= 160);

  CHECK_OK(simdattn_dropout(Dense4(first, 1, 1, 4, 64), 1.0f, 11, 3));
  for (i = 0; i < kSize; ++i) CHECK(first[i] == 0.0f);
  CHECK_ERROR(simdattn_dropout(Dense4(x, 1, 1, 4, 64), 1.5f, 0, 0), INVALID,
              "Dropout: p (1.5) is not a probability in [0, 1]");
  CHECK_ERROR(simdattn_dropout(Dense4(x, 1, 1, 4, 64), NAN, 0, 0), INVALID,
              "Dropout: p (nan)");
  CHECK_ERROR(simdattn_dropout(Dense4(NULL, 1, 1, 4, 64), 0.5f, 0, 0), INVALID,
              "Dropout: x is null but has shape (1, 1, 4, 64)");
  CHECK(x[0] == 1.0f);
}

static simdattn_module_config Config(int32_t kind, size_t d_in, size_t d_out,
                                     size_t context_length, size_t num_heads) {
  simdattn_module_config c = SIMDATTN_MODULE_CONFIG_INIT;
  c.kind = kind;
  c.d_in = d_in;
  c.d_out = d_out;
  c.context_length = context_length;
  c.num_heads = num_heads;
  c.seed = 1;
  return c;
}

/* Fills every weight the module lists with values from Fill (the buffers
 * left out) and loads them. Returns the number loaded. */
enum { kMaxTensors = 32, kMaxValues = 4096 };
static float g_values[kMaxTensors][kMaxValues];
static size_t LoadRandomWeights(simdattn_module* module,
                                simdattn_named_tensor* tensors) {
  size_t count = 0, loaded = 0, i, r, n;
  CHECK_OK(simdattn_module_weight_count(module, &count));
  CHECK(count <= kMaxTensors);
  for (i = 0; i < count && i < kMaxTensors; ++i) {
    simdattn_named_tensor* t = &tensors[loaded];
    int32_t is_buffer = -1;
    CHECK_OK(simdattn_module_weight_info(module, i, &t->name, &t->shape,
                                         &t->rank, &is_buffer));
    /* Exactly the causal masks are buffers, and they may be left out. */
    CHECK(is_buffer == (strstr(t->name, "mask") != NULL));
    if (is_buffer) continue;
    for (n = 1, r = 0; r < t->rank; ++r) n *= t->shape[r];
    CHECK(n <= kMaxValues);
    if (n > kMaxValues) continue;
    Fill(g_values[loaded], n, (uint32_t)(100 + i));
    t->data = g_values[loaded];
    t->dtype = SIMDATTN_F32;
    ++loaded;
  }
  CHECK_OK(simdattn_module_load_weights(module, tensors, loaded, NULL));
  return loaded;
}

/* CausalAttention (d_in 3, d_out 2) against a reference written here:
 * q = x Wq^T + bq (likewise k, v), causal softmax(q k^T / sqrt(2)), times v.
 * Tensor order is the state_dict's sorted names. */
static void TestCausalAgainstReference(void) {
  enum { kB = 2, kT = 4, kIn = 3, kOut = 2 };
  simdattn_module_config config =
      Config(SIMDATTN_CAUSAL_ATTENTION, kIn, kOut, kT, 1);
  simdattn_module* module = NULL;
  simdattn_named_tensor tensors[kMaxTensors];
  const float* w[3] = {NULL, NULL, NULL}; /* query, key, value weights */
  const float* bias[3] = {NULL, NULL, NULL};
  float x[kB * kT * kIn], y[kB * kT * kOut], weights[kB * kT * kT];
  simdattn_forward_options options = SIMDATTN_FORWARD_OPTIONS_INIT;
  size_t loaded, i, p, b, t, s, o;
  config.qkv_bias = 1;
  CHECK_OK(simdattn_module_create(&config, &module));
  if (module == NULL) return;
  loaded = LoadRandomWeights(module, tensors);
  CHECK(loaded == 6);
  for (i = 0; i < loaded; ++i) {
    const char* names[3] = {"W_query.", "W_key.", "W_value."};
    for (p = 0; p < 3; ++p) {
      if (strncmp(tensors[i].name, names[p], strlen(names[p])) != 0) continue;
      if (strstr(tensors[i].name, "bias") != NULL) {
        bias[p] = tensors[i].data;
      } else {
        w[p] = tensors[i].data;
      }
    }
  }
  for (p = 0; p < 3; ++p) CHECK(w[p] != NULL && bias[p] != NULL);
  if (w[0] == NULL || w[1] == NULL || w[2] == NULL || bias[0] == NULL ||
      bias[1] == NULL || bias[2] == NULL) {
    simdattn_module_destroy(module);
    return;
  }

  Fill(x, sizeof(x) / sizeof(float), 9);
  options.attention_weights = Dense4(weights, kB, 1, kT, kT);
  CHECK_OK(simdattn_module_forward(module, Const3(Dense3(x, kB, kT, kIn)),
                                   Dense3(y, kB, kT, kOut), &options));
  for (b = 0; b < kB; ++b) {
    double qkv[3][kT][kOut];
    for (p = 0; p < 3; ++p) {
      for (t = 0; t < kT; ++t) {
        for (o = 0; o < kOut; ++o) {
          double sum = bias[p][o];
          for (i = 0; i < kIn; ++i) {
            sum += (double)x[(b * kT + t) * kIn + i] * w[p][o * kIn + i];
          }
          qkv[p][t][o] = sum;
        }
      }
    }
    for (t = 0; t < kT; ++t) {
      double e[kT], total = 0.0, out[kOut] = {0.0, 0.0};
      for (s = 0; s <= t; ++s) {
        double dot = 0.0;
        for (o = 0; o < kOut; ++o) dot += qkv[0][t][o] * qkv[1][s][o];
        e[s] = exp(dot / sqrt((double)kOut));
        total += e[s];
      }
      for (s = 0; s < kT; ++s) {
        const double expected = s <= t ? e[s] / total : 0.0;
        CHECK_NEAR(weights[(b * kT + t) * kT + s], expected, 1e-6);
        for (o = 0; o < kOut && s <= t; ++o) out[o] += expected * qkv[2][s][o];
      }
      for (o = 0; o < kOut; ++o) {
        CHECK_NEAR(y[(b * kT + t) * kOut + o], out[o], 1e-5);
      }
    }
  }

  /* Errors: the output is left as it was. */
  memcpy(weights, y, sizeof(y));
  CHECK_ERROR(simdattn_module_forward(module, Const3(Dense3(x, 1, kT + 1, kIn)),
                                      Dense3(y, 1, kT + 1, kOut), NULL),
              INVALID,
              "CausalAttention: num_tokens (5) exceeds context_length (4)");
  CHECK_ERROR(simdattn_module_forward(module, Const3(Dense3(x, kB, kT, kIn)),
                                      Dense3(y, kB, kT, kOut + 1), NULL),
              INVALID, "y is (2, 4, 3), expected (2, 4, 2)");
  CHECK_ERROR(simdattn_module_forward(module, Const3(Dense3(x, kB, kT, kIn)),
                                      Dense3(x, kB, kT, kOut), NULL),
              INVALID, "y overlaps x");
  CHECK(memcmp(weights, y, sizeof(y)) == 0);
  simdattn_module_destroy(module);
}

/* Every kind: create, shape, state_dict, load, forward (eval and training). */
static void TestEveryModule(void) {
  enum { kB = 2, kT = 5, kIn = 4 };
  float x[kB * kT * kIn], y[kB * kT * 32], w1[kB * 4 * kT * kT];
  float w2[kB * 4 * kT * kT], w3[kB * 4 * kT * kT];
  int32_t kind;
  Fill(x, sizeof(x) / sizeof(float), 10);
  for (kind = SIMDATTN_SIMPLIFIED_SELF_ATTENTION;
       kind <= SIMDATTN_MULTI_HEAD_ATTENTION; ++kind) {
    /* The wrapper's d_out is per head: 4 heads of 3 -> 12 features. */
    const size_t d_out = kind == SIMDATTN_MULTI_HEAD_ATTENTION ? 8 : 3;
    const size_t heads = kind >= SIMDATTN_MULTI_HEAD_ATTENTION_WRAPPER ? 4 : 1;
    const size_t expected_out = kind == SIMDATTN_SIMPLIFIED_SELF_ATTENTION ? kIn
                                : kind == SIMDATTN_MULTI_HEAD_ATTENTION_WRAPPER
                                    ? 12
                                    : d_out;
    simdattn_module_config config = Config(kind, kIn, d_out, 8, heads);
    simdattn_module* module = NULL;
    simdattn_named_tensor tensors[kMaxTensors];
    simdattn_forward_options options = SIMDATTN_FORWARD_OPTIONS_INIT;
    size_t d_in = 0, out = 0, num_heads = 0, count = 0, i;
    config.dropout = 0.5f;
    CHECK_OK(simdattn_module_create(&config, &module));
    if (module == NULL) continue;
    CHECK_OK(simdattn_module_shape(module, &d_in, &out, &num_heads));
    CHECK(d_in == kIn && out == expected_out && num_heads == heads);
    CHECK_OK(simdattn_module_shape(module, NULL, NULL, NULL));
    CHECK_OK(simdattn_module_weight_count(module, &count));
    CHECK(count == 0 || kind != SIMDATTN_SIMPLIFIED_SELF_ATTENTION);
    CHECK_ERROR(
        simdattn_module_weight_info(module, count, NULL, NULL, NULL, NULL),
        INVALID, "index (");
    LoadRandomWeights(module, tensors);

    options.attention_weights = Dense4(w1, kB, heads, kT, kT);
    CHECK_OK(simdattn_module_forward(module, Const3(Dense3(x, kB, kT, kIn)),
                                     Dense3(y, kB, kT, out), &options));
    for (i = 0; i < kB * heads * kT; ++i) {
      size_t j;
      double sum = 0.0;
      for (j = 0; j < kT; ++j) sum += w1[i * kT + j];
      CHECK_NEAR(sum, 1.0, 1e-5);
      /* Causal modules attend to no later token. */
      if (kind >= SIMDATTN_CAUSAL_ATTENTION && i % kT + 1 < kT) {
        CHECK(w1[i * kT + i % kT + 1] == 0.0f);
      }
    }
    if (kind >= SIMDATTN_CAUSAL_ATTENTION) {
      /* Training: dropout with an explicit key; the same key repeats. */
      options.training = 1;
      options.dropout_seed = 5;
      options.dropout_offset = 1;
      options.attention_weights.data = w2;
      CHECK_OK(simdattn_module_forward(module, Const3(Dense3(x, kB, kT, kIn)),
                                       Dense3(y, kB, kT, out), &options));
      options.attention_weights.data = w3;
      CHECK_OK(simdattn_module_forward(module, Const3(Dense3(x, kB, kT, kIn)),
                                       Dense3(y, kB, kT, out), &options));
      CHECK(memcmp(w2, w3, kB * heads * kT * kT * sizeof(float)) == 0);
      for (i = 0; i < kB * heads * kT * kT; ++i) {
        CHECK(w2[i] == 0.0f || fabs(w2[i] - 2.0f * w1[i]) <= 1e-6f);
      }
      options.training = 2;
      CHECK_ERROR(
          simdattn_module_forward(module, Const3(Dense3(x, kB, kT, kIn)),
                                  Dense3(y, kB, kT, out), &options),
          INVALID, "options->training (2) is neither 0 nor 1");
    } else {
      /* The attention weights must have the module's shape. */
      options.attention_weights = Dense4(w1, kB, heads + 1, kT, kT);
      CHECK_ERROR(
          simdattn_module_forward(module, Const3(Dense3(x, kB, kT, kIn)),
                                  Dense3(y, kB, kT, out), &options),
          INVALID, "attention_weights has shape (2, 2, 5, 5)");
    }
    simdattn_module_destroy(module);
  }
}

static void TestModuleErrors(void) {
  simdattn_module_config config =
      Config(SIMDATTN_MULTI_HEAD_ATTENTION, 4, 10, 8, 3);
  simdattn_module* module = NULL;
  simdattn_named_tensor tensors[2];
  const size_t shape[2] = {2, 3};
  const float w[6] = {0, 0, 0, 0, 0, 0};
  float x[8], y[8];
  CHECK_ERROR(simdattn_module_create(&config, &module), INVALID,
              "MultiHeadAttention: d_out (10) is not divisible by num_heads "
              "(3)");
  CHECK(module == NULL);
  CHECK_ERROR(simdattn_module_create(NULL, &module), INVALID,
              "simdattn_module_create: config is null");
  config = Config(9, 4, 4, 8, 1);
  CHECK_ERROR(simdattn_module_create(&config, &module), INVALID,
              "config->kind (9) is not a simdattn_module_kind");
  /* Found by c_api_shape_fuzzer: weights no vector can hold were
   * std::length_error, i.e. SIMDATTN_STATUS_INTERNAL. */
  config = Config(SIMDATTN_SELF_ATTENTION_V2, (size_t)1 << 60, 3, 0, 1);
  if (sizeof(size_t) == 8) {
    CHECK_ERROR(simdattn_module_create(&config, &module), INVALID,
                "SelfAttentionV2: the QKV weights (9 x 1152921504606846976 "
                "floats) exceed the largest possible allocation");
  }
  config = Config(SIMDATTN_CAUSAL_ATTENTION, 3, 2, 4, 1);
  config.dropout = NAN;
  CHECK_ERROR(simdattn_module_create(&config, &module), INVALID,
              "CausalAttention: dropout (nan) is outside [0, 1]");
  config.dropout = 0.0f;
  config.qkv_bias = -1;
  CHECK_ERROR(simdattn_module_create(&config, &module), INVALID,
              "config->qkv_bias (-1) is neither 0 nor 1");
  config.qkv_bias = 0;
  CHECK_ERROR(simdattn_module_create(&config, NULL), INVALID,
              "simdattn_module_create: module is null");
  CHECK_OK(simdattn_module_create(&config, &module));
  if (module == NULL) return;

  tensors[0].name = "W_query.weight";
  tensors[0].data = w;
  tensors[0].shape = shape;
  tensors[0].rank = 2;
  tensors[0].dtype = SIMDATTN_F32;
  tensors[1] = tensors[0];
  CHECK_ERROR(simdattn_module_load_weights(module, tensors, 1, NULL), INVALID,
              "CausalAttention: missing tensor 'W_key.weight' of shape [2, 3]");
  CHECK_ERROR(simdattn_module_load_weights(module, tensors, 2, NULL), INVALID,
              "tensors[1] ('W_query.weight') repeats the name");
  tensors[1].name = NULL;
  CHECK_ERROR(simdattn_module_load_weights(module, tensors, 2, NULL), INVALID,
              "tensors[1].name is null");
  tensors[1].name = "W_key.weight";
  tensors[1].shape = NULL;
  CHECK_ERROR(simdattn_module_load_weights(module, tensors, 2, NULL), INVALID,
              "tensors[1] ('W_key.weight') has rank 2 but a null shape");
  tensors[1].shape = shape;
  tensors[1].rank = 1;
  CHECK_ERROR(simdattn_module_load_weights(module, tensors, 2, NULL), INVALID,
              "tensor 'W_key.weight' has shape [2], expected [2, 3]");
  CHECK_ERROR(simdattn_module_load_weights(module, NULL, 2, NULL), INVALID,
              "tensors is null but count is 2");
  CHECK_ERROR(simdattn_module_load_weights(NULL, tensors, 2, NULL), INVALID,
              "simdattn_module_load_weights: module is null");
  CHECK_ERROR(simdattn_module_forward(NULL, Const3(Dense3(x, 1, 2, 3)),
                                      Dense3(y, 1, 2, 2), NULL),
              INVALID, "simdattn_module_forward: module is null");
  CHECK_ERROR(simdattn_module_forward(module, Const3(Dense3(NULL, 1, 2, 3)),
                                      Dense3(y, 1, 2, 2), NULL),
              INVALID, "CausalAttention: x is null but has shape (1, 1, 2, 3)");
  CHECK_ERROR(simdattn_module_shape(NULL, NULL, NULL, NULL), INVALID,
              "simdattn_module_shape: module is null");
  CHECK_ERROR(simdattn_module_weight_count(NULL, NULL), INVALID,
              "module is null");
  CHECK_ERROR(simdattn_module_weight_count(module, NULL), INVALID,
              "count is null");
  CHECK_ERROR(simdattn_module_weight_info(NULL, 0, NULL, NULL, NULL, NULL),
              INVALID, "module is null");
  /* An empty batch is valid and does nothing. */
  CHECK_OK(simdattn_module_forward(module, Const3(Dense3(NULL, 0, 2, 3)),
                                   Dense3(NULL, 0, 2, 2), NULL));
  simdattn_module_destroy(module);
  simdattn_module_destroy(NULL);
}

/* Attention weights of batch * heads * tokens * tokens elements overflow
 * size_t: an error before anything is read or written, although x and y
 * themselves are representable. x is read-only and broadcast over the batch
 * (stride 0); y lies after x, so their spans do not overlap. (The views claim
 * more memory than `buffer` has; validation must reject them untouched.) */
static void TestOverflowingWeights(void) {
  enum { kTokens = 1 << 17 };
  static float buffer[2 * kTokens + 1];
  simdattn_module_config config =
      Config(SIMDATTN_SIMPLIFIED_SELF_ATTENTION, 1, 1, 0, 1);
  simdattn_module* module = NULL;
  simdattn_const_tensor3 x;
  simdattn_tensor3 y;
  simdattn_forward_options options = SIMDATTN_FORWARD_OPTIONS_INIT;
  const size_t batch = (size_t)1 << 30;
  CHECK_OK(simdattn_module_create(&config, &module));
  if (module == NULL) return;
  x = Const3(Dense3(buffer, batch, kTokens, 1));
  x.batch_stride = 0;
  y = Dense3(buffer + kTokens, batch, kTokens, 1);
  options.attention_weights =
      Dense4(buffer + 2 * kTokens, batch, 1, kTokens, kTokens);
  if (sizeof(size_t) == 8) {
    CHECK_ERROR(
        simdattn_module_forward(module, x, y, &options), INVALID,
        "SimplifiedSelfAttention: attention_weights extent overflows size_t");
  }
  simdattn_module_destroy(module);
}

/* Fused attention with grouped-query heads (2 query heads share 1 key/value
 * head), a causal offset and an explicit scale, against a reference written
 * here; then the errors. */
enum { kQHeads = 2, kQ = 3, kK = 5, kD = 4, kDv = 3 };

/* q (1, kQHeads, kQ, kD) and k (1, 1, kK, k_dim), v (1, 1, kK, kDv) into out
 * (1, kQHeads, kQ, kDv). */
static simdattn_status Attend(float* q, float* k, size_t k_dim, float* v,
                              float* out,
                              const simdattn_attention_options* options) {
  return simdattn_scaled_dot_product_attention(
      Const4(Dense4(q, 1, kQHeads, kQ, kD)), Const4(Dense4(k, 1, 1, kK, k_dim)),
      Const4(Dense4(v, 1, 1, kK, kDv)), Dense4(out, 1, kQHeads, kQ, kDv),
      options);
}

static void TestAttention(void) {
  float q[kQHeads * kQ * kD], k[kK * kD], v[kK * kDv];
  float out[kQHeads * kQ * kDv], before[kQHeads * kQ * kDv];
  const float scale = 0.7f;
  simdattn_attention_options options = SIMDATTN_ATTENTION_OPTIONS_INIT;
  simdattn_mask mask = SIMDATTN_MASK_INIT;
  size_t h, i, j, d;
  CHECK(options.struct_size == sizeof(simdattn_attention_options) &&
        mask.struct_size == sizeof(simdattn_mask));
  CHECK(options.has_scale == 0 && options.dropout == 0.0f &&
        options.mask == NULL && options.log_sum_exp == NULL &&
        options.compute == SIMDATTN_COMPUTE_FP32);
  CHECK(mask.causal == 0 && mask.key_lengths == NULL);
  Fill(q, sizeof(q) / sizeof(float), 21);
  Fill(k, sizeof(k) / sizeof(float), 22);
  Fill(v, sizeof(v) / sizeof(float), 23);
  options.has_scale = 1;
  options.scale = scale;
  options.mask = &mask;
  mask.causal = 1;
  mask.causal_offset = kK - kQ; /* The queries are the last 3 keys. */
  CHECK_OK(Attend(q, k, kD, v, out, &options));
  for (h = 0; h < kQHeads; ++h) {
    for (i = 0; i < kQ; ++i) {
      const size_t last = i + kK - kQ;
      double e[kK], total = 0.0;
      for (j = 0; j <= last; ++j) {
        double dot = 0.0;
        for (d = 0; d < kD; ++d) {
          dot += (double)q[(h * kQ + i) * kD + d] * k[j * kD + d];
        }
        e[j] = exp(scale * dot);
        total += e[j];
      }
      for (d = 0; d < kDv; ++d) {
        double expected = 0.0;
        for (j = 0; j <= last; ++j) expected += e[j] / total * v[j * kDv + d];
        CHECK_NEAR(out[(h * kQ + i) * kDv + d], expected, 1e-5);
      }
    }
  }
  /* The default scale is 1 / sqrt(head_dim) = 0.5 here. */
  options.has_scale = 0;
  CHECK_OK(Attend(q, k, kD, v, before, &options));
  options.has_scale = 1;
  options.scale = 0.5f;
  CHECK_OK(Attend(q, k, kD, v, out, &options));
  CHECK(memcmp(out, before, sizeof(out)) == 0);

  /* Errors: the output is left as it was. */
  memcpy(before, out, sizeof(out));
  options.has_scale = 2;
  CHECK_ERROR(Attend(q, k, kD, v, out, &options), INVALID,
              "options->has_scale (2) is neither 0 nor 1");
  options.has_scale = 0;
  options.dropout = 1.5f;
  CHECK_ERROR(Attend(q, k, kD, v, out, &options), INVALID,
              "ScaledDotProductAttention: dropout (1.5) is not a probability");
  options.dropout = 0.0f;
  CHECK_ERROR(Attend(q, k, kD, v, q, &options), INVALID, "out overlaps q");
  CHECK_ERROR(Attend(q, k, kD - 1, v, out, NULL), INVALID,
              "k's head_dim (3) differs from q's (4)");
  CHECK(memcmp(out, before, sizeof(out)) == 0);
}

/* Attention of issue 23's variants: grouped-query heads (4 query heads, 2
 * key/value heads), per-item causal offsets and key lengths, a sliding
 * window, softcapping, ALiBi and sinks, with the log-sum-exp output. */
enum { kVB = 2, kVH = 4, kVG = 2, kVQ = 5, kVK = 9, kVD = 4, kVDv = 3 };

/* Row (b, h, i) in double from simdattn_mask's definitions (softcap and
 * ALiBi on, sinks optional): writes its kVDv outputs, returns its
 * log-sum-exp. */
static double VariantRow(const float* q, const float* k, const float* v,
                         const simdattn_attention_options* o, size_t b,
                         size_t h, size_t i, double* out) {
  const simdattn_mask* m = o->mask;
  const long p = (long)(i + m->causal_offsets[b]);
  const size_t g = h / (kVH / kVG);
  double s[kVK], max = m->sinks != NULL ? m->sinks[h] : -INFINITY, sum;
  int visible[kVK];
  size_t j, d;
  for (j = 0; j < kVK; ++j) {
    double dot = 0.0;
    visible[j] =
        (long)j <= p && (long)j > p - (long)m->window && j < m->key_lengths[b];
    if (!visible[j]) continue;
    for (d = 0; d < kVD; ++d) {
      dot += (double)q[((b * kVH + h) * kVQ + i) * kVD + d] *
             k[((b * kVG + g) * kVK + j) * kVD + d];
    }
    s[j] = m->softcap * tanh(o->scale * dot / m->softcap) -
           m->alibi_slopes[h] * fabs((double)(p - (long)j));
    if (s[j] > max) max = s[j];
  }
  sum = m->sinks != NULL ? exp(m->sinks[h] - max) : 0.0;
  for (d = 0; d < kVDv; ++d) out[d] = 0.0;
  for (j = 0; j < kVK; ++j) {
    if (!visible[j]) continue;
    sum += exp(s[j] - max);
    for (d = 0; d < kVDv; ++d) {
      out[d] += exp(s[j] - max) * v[((b * kVG + g) * kVK + j) * kVDv + d];
    }
  }
  if (sum == 0.0) return -INFINITY; /* Sees nothing, no sink: zeros. */
  for (d = 0; d < kVDv; ++d) out[d] /= sum;
  return max + log(sum);
}

static simdattn_status AttendVariant(const float* q, const float* k,
                                     const float* v, float* out,
                                     const simdattn_attention_options* o) {
  return simdattn_scaled_dot_product_attention(
      Const4(Dense4((float*)q, kVB, kVH, kVQ, kVD)),
      Const4(Dense4((float*)k, kVB, kVG, kVK, kVD)),
      Const4(Dense4((float*)v, kVB, kVG, kVK, kVDv)),
      Dense4(out, kVB, kVH, kVQ, kVDv), o);
}

static void TestAttentionVariants(void) {
  float q[kVB * kVH * kVQ * kVD], k[kVB * kVG * kVK * kVD];
  float v[kVB * kVG * kVK * kVDv], out[kVB * kVH * kVQ * kVDv];
  float lse[kVB * kVH * kVQ], before[kVB * kVH * kVQ * kVDv];
  float lse_before[kVB * kVH * kVQ];
  /* Item 0's queries are the last 5 of 9 keys; item 1's sit at 2..6 but
   * only its first 2 keys exist: from position 4 on its rows see no key. */
  const size_t offsets[kVB] = {4, 2}, key_lengths[kVB] = {9, 2};
  float slopes[kVH] = {0.5f, 0.25f, 0.125f, 0.0625f};
  float sinks[kVH] = {0.3f, -1.0f, 2.0f, 0.0f};
  simdattn_attention_options options = SIMDATTN_ATTENTION_OPTIONS_INIT;
  simdattn_mask mask = SIMDATTN_MASK_INIT;
  size_t b, h, i, d, pass;
  CHECK(mask.causal_offsets == NULL && mask.window == 0 &&
        mask.softcap == 0.0f && mask.alibi_slopes == NULL &&
        mask.sinks == NULL && options.log_sum_exp == NULL);
  Fill(q, sizeof(q) / sizeof(float), 51);
  Fill(k, sizeof(k) / sizeof(float), 52);
  Fill(v, sizeof(v) / sizeof(float), 53);
  options.has_scale = 1;
  options.scale = 2.0f;
  options.mask = &mask;
  mask.causal_offsets = offsets;
  mask.key_lengths = key_lengths;
  mask.window = 3;
  mask.softcap = 1.5f;
  mask.alibi_slopes = slopes;
  mask.sinks = sinks;
  options.log_sum_exp = lse;
  /* With sinks, then without: rows that see nothing get zeros, and a
   * log-sum-exp of their sink or -inf. */
  for (pass = 0; pass < 2; ++pass) {
    if (pass == 1) mask.sinks = NULL;
    memset(out, 0xff, sizeof(out)); /* NaN: every output must be written. */
    memset(lse, 0xff, sizeof(lse));
    CHECK_OK(AttendVariant(q, k, v, out, &options));
    for (b = 0; b < kVB; ++b) {
      for (h = 0; h < kVH; ++h) {
        for (i = 0; i < kVQ; ++i) {
          const size_t row = (b * kVH + h) * kVQ + i;
          double expected[kVDv];
          const double expected_lse =
              VariantRow(q, k, v, &options, b, h, i, expected);
          for (d = 0; d < kVDv; ++d) {
            CHECK_NEAR(out[row * kVDv + d], expected[d], 1e-5);
          }
          if (isinf(expected_lse)) {
            CHECK(lse[row] == -INFINITY);
          } else {
            CHECK_NEAR(lse[row], expected_lse, 1e-5);
          }
        }
      }
    }
  }
  CHECK(lse[(1 * kVH + 0) * kVQ + kVQ - 1] == -INFINITY);

  /* Errors name the field; out and log_sum_exp are left as they were. */
  memcpy(before, out, sizeof(out));
  memcpy(lse_before, lse, sizeof(lse));
  mask.softcap = -1.0f;
  CHECK_ERROR(AttendVariant(q, k, v, out, &options), INVALID,
              "ScaledDotProductAttention: mask.softcap (-1) is not finite");
  mask.softcap = 1.5f;
  slopes[1] = NAN;
  CHECK_ERROR(AttendVariant(q, k, v, out, &options), INVALID,
              "mask.alibi_slopes[1] (nan) is not finite");
  slopes[1] = 0.25f;
  /* Offsets place rows for causality, windows and ALiBi: with none, an
   * error. */
  mask.window = 0;
  mask.alibi_slopes = NULL;
  CHECK_ERROR(AttendVariant(q, k, v, out, &options), INVALID,
              "mask.causal_offsets is given but none of mask.causal, "
              "mask.window, mask.alibi_slopes and mask.tree_offsets is set");
  mask.alibi_slopes = slopes;
  mask.window = 3;
  options.log_sum_exp = out;
  CHECK_ERROR(AttendVariant(q, k, v, out, &options), INVALID,
              "log_sum_exp overlaps q, k, v or out");
  CHECK(memcmp(out, before, sizeof(out)) == 0);
  CHECK(memcmp(lse, lse_before, sizeof(lse)) == 0);
}

/* A cache owning its memory and one in caller memory: append, size, views,
 * clear, and the errors. */
/* bf16 weights kept in 16 bits give the results of the same weights
 * widened to float; a bad dtype is refused. */
static void TestTypedWeights(void) {
  enum { kIn = 3, kOut = 2, kT = 4 };
  static const char* const kNames[3] = {"W_query.weight", "W_key.weight",
                                        "W_value.weight"};
  const size_t shape[2] = {kOut, kIn};
  uint16_t bits[3][kOut * kIn];
  float widened[3][kOut * kIn], x[kT * kIn], y_kept[kT * kOut],
      y_wide[kT * kOut];
  simdattn_named_tensor typed[3];
  simdattn_named_tensor wide[3];
  simdattn_load_options keep = SIMDATTN_LOAD_OPTIONS_INIT;
  simdattn_module_config config =
      Config(SIMDATTN_SELF_ATTENTION_V2, kIn, kOut, 0, 1);
  simdattn_module* kept = NULL;
  simdattn_module* plain = NULL;
  size_t p, i;
  Fill(x, kT * kIn, 51);
  for (p = 0; p < 3; ++p) {
    Fill(widened[p], kOut * kIn, 52 + (unsigned)p);
    for (i = 0; i < kOut * kIn; ++i) {
      uint32_t word;
      memcpy(&word, &widened[p][i], sizeof(word));
      bits[p][i] = (uint16_t)(word >> 16); /* Truncated: any bf16 will do. */
      word = (uint32_t)bits[p][i] << 16;
      memcpy(&widened[p][i], &word, sizeof(word));
    }
    typed[p].name = kNames[p];
    typed[p].data = bits[p];
    typed[p].shape = shape;
    typed[p].rank = 2;
    typed[p].dtype = SIMDATTN_BF16;
    wide[p].name = kNames[p];
    wide[p].data = widened[p];
    wide[p].shape = shape;
    wide[p].rank = 2;
    wide[p].dtype = SIMDATTN_F32;
  }
  CHECK(keep.struct_size == sizeof(simdattn_load_options) &&
        keep.keep_dtype == 0);
  keep.keep_dtype = 1;
  CHECK_OK(simdattn_module_create(&config, &kept));
  CHECK_OK(simdattn_module_create(&config, &plain));
  if (kept == NULL || plain == NULL) {
    simdattn_module_destroy(kept);
    simdattn_module_destroy(plain);
    return;
  }
  CHECK_OK(simdattn_module_load_weights(kept, typed, 3, &keep));
  CHECK_OK(simdattn_module_load_weights(plain, wide, 3, NULL));
  CHECK_OK(simdattn_module_forward(kept, Const3(Dense3(x, 1, kT, kIn)),
                                   Dense3(y_kept, 1, kT, kOut), NULL));
  CHECK_OK(simdattn_module_forward(plain, Const3(Dense3(x, 1, kT, kIn)),
                                   Dense3(y_wide, 1, kT, kOut), NULL));
  for (i = 0; i < kT * kOut; ++i) CHECK(y_kept[i] == y_wide[i]);
  typed[1].dtype = 5;
  CHECK_ERROR(
      simdattn_module_load_weights(kept, typed, 3, &keep), INVALID,
      "tensors[1] ('W_key.weight') has dtype 5, not a simdattn_element_type");
  typed[1].dtype = SIMDATTN_F16;
  CHECK_ERROR(simdattn_module_load_weights(kept, typed, 3, &keep), INVALID,
              "keep_dtype: tensor 'W_key.weight' is of another 16-bit type");
  keep.keep_dtype = 2;
  CHECK_ERROR(simdattn_module_load_weights(kept, typed, 3, &keep), INVALID,
              "keep_dtype (2) is neither 0 nor 1");
  simdattn_module_destroy(kept);
  simdattn_module_destroy(plain);
}

/* A bf16 paged cache through the C API: ragged appends, attention over it
 * next to the same tokens in a float cache (within bf16's rounding), the
 * sequence operations and their errors. */
static void TestKVCacheTypes(void) {
  enum { kB = 2, kHeads = 2, kCap = 40, kD = 8, kN = 20 };
  float k[kB * kHeads * kN * kD], v[kB * kHeads * kN * kD];
  float q[kB * kHeads * kD], out[kB * kHeads * kD], ref[kB * kHeads * kD];
  simdattn_kv_cache_config config = SIMDATTN_KV_CACHE_CONFIG_INIT;
  simdattn_kv_cache* narrow = NULL;
  simdattn_kv_cache* wide = NULL;
  simdattn_attention_options options = SIMDATTN_ATTENTION_OPTIONS_INIT;
  simdattn_mask mask = SIMDATTN_MASK_INIT;
  const size_t both[2] = {0, 1}, second[1] = {1}, order[2] = {1, 1};
  size_t length = 0, i;
  Fill(k, sizeof(k) / sizeof(float), 41);
  Fill(v, sizeof(v) / sizeof(float), 42);
  Fill(q, sizeof(q) / sizeof(float), 43);
  CHECK(config.struct_size == sizeof(simdattn_kv_cache_config) &&
        config.type == SIMDATTN_F32 && config.block_size == 0 &&
        config.num_blocks == 0 && config.rope == NULL);
  config.type = SIMDATTN_BF16;
  config.block_size = 16;
  CHECK_OK(simdattn_kv_cache_create(kB, kHeads, kCap, kD, &config, &narrow));
  CHECK_OK(simdattn_kv_cache_create(kB, kHeads, kCap, kD, NULL, &wide));
  if (narrow == NULL || wide == NULL) {
    simdattn_kv_cache_destroy(narrow);
    simdattn_kv_cache_destroy(wide);
    return;
  }
  CHECK_OK(
      simdattn_kv_cache_append(narrow, Const4(Dense4(k, 2, kHeads, kN, kD)),
                               Const4(Dense4(v, 2, kHeads, kN, kD)), both));
  CHECK_OK(simdattn_kv_cache_append(wide, Const4(Dense4(k, 2, kHeads, kN, kD)),
                                    Const4(Dense4(v, 2, kHeads, kN, kD)),
                                    both));
  CHECK_OK(simdattn_kv_cache_append(narrow, Const4(Dense4(k, 1, kHeads, 3, kD)),
                                    Const4(Dense4(v, 1, kHeads, 3, kD)),
                                    second));
  CHECK_OK(simdattn_kv_cache_length(narrow, 1, &length));
  CHECK(length == kN + 3);
  CHECK_OK(simdattn_kv_cache_truncate(narrow, 1, kN));
  options.mask = &mask;
  mask.causal = 1;
  CHECK_OK(simdattn_kv_cache_attention(Const4(Dense4(q, kB, kHeads, 1, kD)),
                                       narrow, Dense4(out, kB, kHeads, 1, kD),
                                       &options));
  CHECK_OK(simdattn_kv_cache_attention(Const4(Dense4(q, kB, kHeads, 1, kD)),
                                       wide, Dense4(ref, kB, kHeads, 1, kD),
                                       &options));
  for (i = 0; i < kB * kHeads * kD; ++i) CHECK_NEAR(out[i], ref[i], 2e-2);
  CHECK_OK(simdattn_kv_cache_copy(narrow, 0, 1));
  CHECK_OK(simdattn_kv_cache_reorder(narrow, order));
  CHECK_OK(simdattn_kv_cache_length(narrow, 0, &length));
  CHECK(length == kN);
  config.type = SIMDATTN_IQ4_NL + 1;
  CHECK_ERROR(simdattn_kv_cache_create(kB, kHeads, kCap, kD, &config, &wide),
              INVALID, "config->type (10) is not a simdattn_element_type");
  mask.causal_offset = 1;
  CHECK_ERROR(
      simdattn_kv_cache_attention(Const4(Dense4(q, kB, kHeads, 1, kD)), narrow,
                                  Dense4(out, kB, kHeads, 1, kD), &options),
      INVALID, "the cache's lengths give them");
  CHECK_ERROR(simdattn_kv_cache_truncate(narrow, 0, kN + 1), INVALID,
              "length (21) exceeds");
  CHECK_ERROR(simdattn_kv_cache_reorder(narrow, NULL), INVALID,
              "order is null");
  simdattn_kv_cache_destroy(narrow);
  simdattn_kv_cache_destroy(wide);
}

static void TestKVCache(void) {
  enum { kHeads = 2, kCap = 4, kD = 3 };
  float keys[kHeads * kCap * kD], values[kHeads * kCap * kD];
  float new_k[kHeads * 3 * kD], new_v[kHeads * 3 * kD];
  simdattn_kv_cache* owned = NULL;
  simdattn_kv_cache* borrowed = NULL;
  simdattn_const_tensor4 kv, vv;
  size_t size = 99, capacity = 0, h, t, d;
  Fill(new_k, sizeof(new_k) / sizeof(float), 31);
  Fill(new_v, sizeof(new_v) / sizeof(float), 32);
  CHECK_OK(simdattn_kv_cache_create(1, kHeads, kCap, kD, NULL, &owned));
  CHECK_OK(simdattn_kv_cache_create_in(Dense4(keys, 1, kHeads, kCap, kD),
                                       Dense4(values, 1, kHeads, kCap, kD),
                                       &borrowed));
  if (owned == NULL || borrowed == NULL) {
    simdattn_kv_cache_destroy(owned);
    simdattn_kv_cache_destroy(borrowed);
    return;
  }
  CHECK_OK(simdattn_kv_cache_size(owned, &size, &capacity));
  CHECK(size == 0 && capacity == kCap);
  CHECK_OK(
      simdattn_kv_cache_append(owned, Const4(Dense4(new_k, 1, kHeads, 3, kD)),
                               Const4(Dense4(new_v, 1, kHeads, 3, kD)), NULL));
  CHECK_OK(simdattn_kv_cache_append(
      borrowed, Const4(Dense4(new_k, 1, kHeads, 3, kD)),
      Const4(Dense4(new_v, 1, kHeads, 3, kD)), NULL));
  CHECK_OK(simdattn_kv_cache_size(owned, &size, NULL));
  CHECK(size == 3);
  CHECK_OK(simdattn_kv_cache_view(owned, &kv, &vv));
  CHECK(kv.dims[0] == 1 && kv.dims[1] == kHeads && kv.dims[2] == 3 &&
        kv.dims[3] == kD && vv.dims[2] == 3);
  for (h = 0; h < kHeads; ++h) {
    for (t = 0; t < 3; ++t) {
      for (d = 0; d < kD; ++d) {
        const float expected_k = new_k[(h * 3 + t) * kD + d];
        const float expected_v = new_v[(h * 3 + t) * kD + d];
        CHECK(kv.data[h * kv.strides[1] + t * kv.strides[2] + d] == expected_k);
        CHECK(vv.data[h * vv.strides[1] + t * vv.strides[2] + d] == expected_v);
        /* The borrowed cache wrote into the caller's buffers. */
        CHECK(keys[(h * kCap + t) * kD + d] == expected_k);
        CHECK(values[(h * kCap + t) * kD + d] == expected_v);
      }
    }
  }
  CHECK_ERROR(
      simdattn_kv_cache_append(owned, Const4(Dense4(new_k, 1, kHeads, 2, kD)),
                               Const4(Dense4(new_v, 1, kHeads, 2, kD)), NULL),
      INVALID, "appending 2 tokens to sequence 0's 3 exceeds the capacity (4)");
  CHECK_ERROR(simdattn_kv_cache_append(
                  owned, Const4(Dense4(new_k, 1, kHeads, 1, kD)),
                  Const4(Dense4(new_v, 1, kHeads, 1, kD - 1)), NULL),
              INVALID, "values have shape (1, 2, 1, 2), expected (1, 2, 1, 3)");
  CHECK_OK(simdattn_kv_cache_clear(owned));
  CHECK_OK(simdattn_kv_cache_size(owned, &size, &capacity));
  CHECK(size == 0 && capacity == kCap);
  CHECK_ERROR(
      simdattn_kv_cache_create_in(Dense4(keys, 1, kHeads, kCap, kD),
                                  Dense4(keys, 1, kHeads, kCap, kD), &owned),
      INVALID, "keys overlap values");
  CHECK_ERROR(simdattn_kv_cache_size(NULL, &size, &capacity), INVALID,
              "simdattn_kv_cache_size: cache is null");
  CHECK_ERROR(simdattn_kv_cache_create(1, 1, 1, 1, NULL, NULL), INVALID,
              "simdattn_kv_cache_create: cache is null");
  simdattn_kv_cache_destroy(owned);
  simdattn_kv_cache_destroy(borrowed);
  simdattn_kv_cache_destroy(NULL);
}

/* Generation: multi-head attention with grouped-query heads fed 4 tokens,
 * then 1, then 1, through a KV cache gives the rows of one forward over all
 * 6 tokens. */
static void TestForwardStep(void) {
  enum { kB = 2, kT = 6, kIn = 5, kOut = 8, kHeads = 4, kKvHeads = 2 };
  simdattn_module_config config =
      Config(SIMDATTN_MULTI_HEAD_ATTENTION, kIn, kOut, kT, kHeads);
  simdattn_module* module = NULL;
  simdattn_kv_cache* cache = NULL;
  float x[kB * kT * kIn], full[kB * kT * kOut], steps[kB * kT * kOut];
  const size_t chunks[3][2] = {{0, 4}, {4, 1}, {5, 1}}; /* first, count */
  simdattn_forward_options training = SIMDATTN_FORWARD_OPTIONS_INIT;
  size_t c, size = 0;
  config.num_kv_heads = kKvHeads;
  config.qkv_bias = 1;
  config.dropout = 0.1f;
  CHECK_OK(simdattn_module_create(&config, &module));
  CHECK_OK(
      simdattn_kv_cache_create(kB, kKvHeads, kT, kOut / kHeads, NULL, &cache));
  if (module == NULL || cache == NULL) {
    simdattn_module_destroy(module);
    simdattn_kv_cache_destroy(cache);
    return;
  }
  Fill(x, sizeof(x) / sizeof(float), 41);
  CHECK_OK(simdattn_module_forward(module, Const3(Dense3(x, kB, kT, kIn)),
                                   Dense3(full, kB, kT, kOut), NULL));
  memset(steps, 0, sizeof(steps));
  for (c = 0; c < 3; ++c) {
    /* Tokens [first, first + count) of both sequences, strided in place. */
    simdattn_tensor3 xs = Dense3(x + chunks[c][0] * kIn, kB, chunks[c][1], kIn);
    simdattn_tensor3 ys =
        Dense3(steps + chunks[c][0] * kOut, kB, chunks[c][1], kOut);
    xs.batch_stride = kT * kIn;
    ys.batch_stride = kT * kOut;
    CHECK_OK(simdattn_module_forward_step(module, Const3(xs), cache, ys, NULL));
  }
  CHECK_OK(simdattn_kv_cache_size(cache, &size, NULL));
  CHECK(size == kT);
  for (c = 0; c < kB * kT * kOut; ++c) CHECK_NEAR(steps[c], full[c], 1e-5);

  /* Errors. */
  CHECK_ERROR(
      simdattn_module_forward_step(module, Const3(Dense3(x, kB, 1, kIn)), cache,
                                   Dense3(steps, kB, 1, kOut), NULL),
      INVALID, "the cache holds 6 of 6 tokens: no room for 1 more");
  CHECK_OK(simdattn_kv_cache_clear(cache));
  training.training = 1;
  CHECK_ERROR(
      simdattn_module_forward_step(module, Const3(Dense3(x, kB, 1, kIn)), cache,
                                   Dense3(steps, kB, 1, kOut), &training),
      INVALID, "ForwardStep is for generation: use eval mode");
  CHECK_ERROR(
      simdattn_module_forward_step(module, Const3(Dense3(x, 1, 1, kIn)), cache,
                                   Dense3(steps, 1, 1, kOut), NULL),
      INVALID, "the cache holds (batch 2, kv_heads 2, head_dim 2)");
  CHECK_ERROR(
      simdattn_module_forward_step(module, Const3(Dense3(x, kB, 1, kIn)), NULL,
                                   Dense3(steps, kB, 1, kOut), NULL),
      INVALID, "simdattn_module_forward_step: cache is null");
  CHECK_OK(simdattn_kv_cache_size(cache, &size, NULL));
  CHECK(size == 0);
  simdattn_kv_cache_destroy(cache);
  simdattn_module_destroy(module);
}

/* MultiHeadAttention's variants through the config: a "sinks" tensor of
 * (num_heads) in its state_dict; weights exactly 0 outside the window; the
 * variants refused on other kinds. */
static void TestModuleVariants(void) {
  enum { kB = 1, kT = 6, kIn = 4, kOut = 8, kHeads = 2, kWindow = 2 };
  simdattn_module_config config =
      Config(SIMDATTN_MULTI_HEAD_ATTENTION, kIn, kOut, kT, kHeads);
  simdattn_module* module = NULL;
  simdattn_forward_options options = SIMDATTN_FORWARD_OPTIONS_INIT;
  float x[kB * kT * kIn], y[kB * kT * kOut], w[kB * kHeads * kT * kT];
  size_t count = 0, i, found = 0, h, r, j;
  config.window = kWindow;
  config.softcap = 3.0f;
  config.alibi = 1;
  config.sinks = 1;
  CHECK_OK(simdattn_module_create(&config, &module));
  if (module == NULL) return;
  CHECK_OK(simdattn_module_weight_count(module, &count));
  for (i = 0; i < count; ++i) {
    const char* name = NULL;
    const size_t* shape = NULL;
    size_t rank = 0;
    CHECK_OK(
        simdattn_module_weight_info(module, i, &name, &shape, &rank, NULL));
    if (name != NULL && strcmp(name, "sinks") == 0) {
      found = 1;
      CHECK(rank == 1 && shape[0] == kHeads);
    }
  }
  CHECK(found);
  Fill(x, kB * kT * kIn, 5);
  options.attention_weights = Dense4(w, kB, kHeads, kT, kT);
  CHECK_OK(simdattn_module_forward(module, Const3(Dense3(x, kB, kT, kIn)),
                                   Dense3(y, kB, kT, kOut), &options));
  for (h = 0; h < kHeads; ++h) {
    for (r = 0; r < kT; ++r) {
      for (j = 0; j < kT; ++j) {
        const float weight = w[(h * kT + r) * kT + j];
        if (j > r || j + kWindow <= r) CHECK(weight == 0.0f);
        if (j <= r && j + kWindow > r) CHECK(weight > 0.0f);
      }
    }
  }
  simdattn_module_destroy(module);
  config = Config(SIMDATTN_CAUSAL_ATTENTION, kIn, kOut, kT, 1);
  config.sinks = 1;
  CHECK_ERROR(simdattn_module_create(&config, &module), INVALID,
              "config->window, softcap, alibi, sinks, rope, weight_names and "
              "out_bias apply to SIMDATTN_MULTI_HEAD_ATTENTION only");
  config.sinks = 0;
  config.weight_names = SIMDATTN_WEIGHTS_LLAMA;
  CHECK_ERROR(simdattn_module_create(&config, &module), INVALID,
              "weight_names and out_bias apply to");
}

/* A llama-style module (config.rope): generation steps over a cache without
 * RoPE and over one rotating keys with the same options give the forward's
 * rows; the rotation changes the result; a cache rotating keys for a module
 * without rope is refused. */
/* A float pool of one key/value head: (num_blocks, block_size, head_dim)
 * per side. */
static simdattn_kv_pages OneHeadPages(float* keys, float* values,
                                      size_t head_dim, size_t block_size,
                                      size_t num_blocks) {
  simdattn_kv_pages pages = SIMDATTN_KV_PAGES_INIT;
  pages.type = SIMDATTN_F32;
  pages.kv_heads = 1;
  pages.head_dim = head_dim;
  pages.keys = keys;
  pages.values = values;
  pages.block_stride = block_size * head_dim;
  pages.head_stride = block_size * head_dim;
  pages.row_stride = head_dim;
  pages.block_size = block_size;
  pages.num_blocks = num_blocks;
  return pages;
}

/* A llama-named module serving two varlen steps over caller pages: two
 * prefills (5 and 3 tokens), then a decode and a 2-token verification; each
 * row equals simdattn_module_forward over its whole sequence. */
static void TestModuleVarlen(void) {
  enum { kIn = 6, kOut = 8, kHeads = 2, kD = 4, kBlock = 4, kBlocks = 6 };
  static const size_t kLens[2][2] = {{5, 3}, {6, 5}};
  static const size_t kStarts[2][3] = {{0, 5, 8}, {0, 1, 3}};
  /* Sequence 0 in blocks 4, 1; sequence 1 in blocks 2, 3. */
  static const int32_t kTable[2 * 2] = {4, 1, 2, 3};
  static const int64_t kSlots[2][8] = {{16, 17, 18, 19, 4, 8, 9, 10},
                                       {5, 11, 12, 0, 0, 0, 0, 0}};
  /* Each sequence's tokens in order, and where the steps put them. */
  static const size_t kRows[2][6] = {{0, 1, 2, 3, 4, 8}, {5, 6, 7, 9, 10, 0}};
  simdattn_module_config config =
      Config(SIMDATTN_MULTI_HEAD_ATTENTION, kIn, kOut, 0, kHeads);
  simdattn_rope_options rope = SIMDATTN_ROPE_OPTIONS_INIT;
  simdattn_kv_pages pages = SIMDATTN_KV_PAGES_INIT;
  simdattn_varlen_step step = SIMDATTN_VARLEN_STEP_INIT;
  simdattn_module* module = NULL;
  float pool_k[kBlocks * kBlock * kD], pool_v[kBlocks * kBlock * kD];
  float x[11 * kIn], y[11 * kIn], seq_x[6 * kIn], seq_y[6 * kIn];
  size_t d_out = 0, s, i, c;
  config.num_kv_heads = 1;
  config.qkv_bias = 1;
  config.weight_names = SIMDATTN_WEIGHTS_LLAMA;
  config.out_bias = 1;
  config.rope = &rope;
  CHECK_OK(simdattn_module_create(&config, &module));
  if (module == NULL) return;
  CHECK_OK(simdattn_module_shape(module, NULL, &d_out, NULL));
  CHECK(d_out == kIn);
  Fill(x, 11 * kIn, 61);
  memset(pool_k, 0, sizeof(pool_k));
  memset(pool_v, 0, sizeof(pool_v));
  pages = OneHeadPages(pool_k, pool_v, kD, kBlock, kBlocks);
  step.num_seqs = 2;
  step.block_table = kTable;
  step.blocks_per_sequence = 2;
  for (s = 0; s < 2; ++s) {
    const size_t first = s == 0 ? 0 : 8, n = kStarts[s][2];
    step.query_starts = kStarts[s];
    step.seq_lens = kLens[s];
    step.slot_mapping = kSlots[s];
    CHECK_OK(simdattn_module_forward_varlen(
        module, Const3(Dense3(x + first * kIn, 1, n, kIn)), &step, &pages,
        Dense3(y + first * kIn, 1, n, kIn), NULL));
  }
  CHECK_ERROR(
      simdattn_module_forward_varlen(module, Const3(Dense3(x, 2, 1, kIn)),
                                     &step, &pages, Dense3(y, 2, 1, kIn), NULL),
      INVALID, "x and y have batch 2 and 2: expected 1");
  for (s = 0; s < 2; ++s) {
    const size_t length = kLens[1][s];
    for (i = 0; i < length; ++i) {
      memcpy(seq_x + i * kIn, x + kRows[s][i] * kIn, kIn * sizeof(float));
    }
    CHECK_OK(simdattn_module_forward(module,
                                     Const3(Dense3(seq_x, 1, length, kIn)),
                                     Dense3(seq_y, 1, length, kIn), NULL));
    for (i = 0; i < length; ++i) {
      for (c = 0; c < kIn; ++c) {
        CHECK_NEAR(y[kRows[s][i] * kIn + c], seq_y[i * kIn + c], 1e-5);
      }
    }
  }
  simdattn_module_destroy(module);
}

/* Issue 76's reproducer: a latent pool's values are read with the keys'
 * scales. One head, head_dim 4, value_dim 2; key [1, 2, 3, 4] at slot 0
 * and a zero query give its value [1, 2]: E4M3 with key_scale 0.5 and
 * value_scale 0 (1), and int8 with value_scales (never read) holding 7. */
static void TestLatentPagesReadValuesWithKeyScales(void) {
  static const int64_t kSlot[1] = {0};
  static const size_t kStarts[2] = {0, 1}, kLens[1] = {1};
  static const int32_t kTable[1] = {0};
  int t;
  for (t = 0; t < 2; ++t) {
    uint8_t pool[4];
    float key[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    float key_scales[1] = {0.0f}, value_scales[1] = {7.0f};
    float q[4] = {0.0f, 0.0f, 0.0f, 0.0f}, out[2] = {-1.0f, -1.0f};
    simdattn_kv_pages pages = SIMDATTN_KV_PAGES_INIT;
    simdattn_varlen_step step = SIMDATTN_VARLEN_STEP_INIT;
    pages.type = t == 0 ? SIMDATTN_FP8_E4M3 : SIMDATTN_INT8;
    pages.kv_heads = 1;
    pages.head_dim = 4;
    pages.value_dim = 2;
    pages.keys = pool;
    pages.values = pool;
    pages.block_stride = pages.head_stride = 4;
    pages.row_stride = 4;
    pages.block_size = 1;
    pages.num_blocks = 1;
    if (t == 0) {
      pages.key_scale = 0.5f;
    } else {
      pages.key_scales = key_scales;
      pages.value_scales = value_scales;
      pages.scale_block_stride = pages.scale_head_stride = 1;
    }
    CHECK_OK(simdattn_write_kv_slots(Const4(Dense4(key, 1, 1, 1, 4)),
                                     Const4(Dense4(NULL, 0, 0, 0, 0)), kSlot,
                                     &pages));
    if (t == 0) {
      CHECK(pool[0] == 0x40 && pool[1] == 0x48 && pool[2] == 0x4C &&
            pool[3] == 0x50);
    }
    step.num_seqs = 1;
    step.query_starts = kStarts;
    step.seq_lens = kLens;
    step.block_table = kTable;
    step.blocks_per_sequence = 1;
    CHECK_OK(simdattn_varlen_attention(Const4(Dense4(q, 1, 1, 1, 4)), &step,
                                       &pages, Dense4(out, 1, 1, 1, 2), NULL));
    /* int8 stores round(x * 127 / 4) times 4 / 127: 32 and 64. */
    CHECK_NEAR(out[0], t == 0 ? 1.0f : 32 * (4.0f / 127), 1e-6);
    CHECK_NEAR(out[1], t == 0 ? 2.0f : 64 * (4.0f / 127), 1e-6);
    CHECK(value_scales[0] == 7.0f);
  }
}

/* Pool sizes and operations (0.7): a dense q8_0 pool from
 * simdattn_kv_pages_dense, slots written, read, copied and moved out and
 * back in; each entry point's bad input fails and changes nothing. */
static void TestPoolOperations(void) {
  enum { kHeads = 2, kD = 32, kBlock = 4, kBlocks = 3, kN = 5 };
  static const int64_t kSlots[kN] = {0, 1, 2, 5, 9};
  simdattn_kv_pages pages = SIMDATTN_KV_PAGES_INIT, f32_pages;
  size_t block_bytes = 0, block_values = 0, key_bytes = 0, value_bytes = 0;
  size_t scales = 7, first = 0, bytes = 0, i;
  uint8_t keys[kBlocks * kHeads * kBlock * 34], values[sizeof(keys)];
  uint8_t before[2 * sizeof(keys)], buffer[1024];
  float k[kN * kHeads * kD], v[kN * kHeads * kD];
  float read_k[kN * kHeads * kD], read_v[kN * kHeads * kD];
  float f32_keys[kBlocks * kHeads * kBlock * kD];
  const int64_t from[2] = {0, 1}, to[2] = {6, 6}, outside[1] = {12};
  const int32_t blocks_from[1] = {0}, blocks_to[1] = {2}, bad_block[1] = {3};

  CHECK_OK(simdattn_element_size(SIMDATTN_Q8_0, &block_bytes, &block_values));
  CHECK(block_bytes == 34 && block_values == 32);
  CHECK_OK(simdattn_element_size(SIMDATTN_Q4_1, &block_bytes, &block_values));
  CHECK(block_bytes == 20 && block_values == 32);
  CHECK_OK(simdattn_element_size(SIMDATTN_IQ4_NL, &block_bytes, &block_values));
  CHECK(block_bytes == 18 && block_values == 32);
  CHECK_ERROR(simdattn_element_size(10, &block_bytes, NULL), INVALID,
              "type (10) is not a simdattn_element_type");
  CHECK_ERROR(simdattn_element_size(99, &block_bytes, NULL), INVALID,
              "type (99) is not a simdattn_element_type");

  CHECK_OK(simdattn_kv_pages_dense(SIMDATTN_Q8_0, kHeads, kD, 0, kBlock,
                                   kBlocks, &pages, &key_bytes, &value_bytes,
                                   &scales));
  CHECK(key_bytes == sizeof(keys) && value_bytes == sizeof(keys) &&
        scales == 0 && pages.row_stride == kD &&
        pages.head_stride == kBlock * kD &&
        pages.block_stride == kHeads * kBlock * kD);
  CHECK_ERROR(simdattn_kv_pages_dense(SIMDATTN_Q8_0, kHeads, kD, 0, 3, kBlocks,
                                      &pages, NULL, NULL, NULL),
              INVALID, "block_size (3) is not a power of two");
  CHECK(pages.block_size == kBlock);
  CHECK_ERROR(simdattn_kv_pages_dense(SIMDATTN_Q8_0, kHeads, 16, 0, kBlock,
                                      kBlocks, &pages, NULL, NULL, NULL),
              INVALID, "head_dim (16)");
  CHECK_ERROR(simdattn_kv_pages_dense(SIMDATTN_F32, kHeads, kD, 0, kBlock,
                                      kBlocks, NULL, NULL, NULL, NULL),
              INVALID, "pages is null");
  pages.keys = keys;
  pages.values = values;

  CHECK_OK(simdattn_first_key_read(100, 1, 30, 0, &first));
  CHECK(first == 64);
  CHECK_ERROR(simdattn_first_key_read(100, 1, 30, 2, &first), INVALID,
              "dropout (2) is neither 0 nor 1");
  CHECK_ERROR(simdattn_first_key_read(100, 1, 30, 0, NULL), INVALID,
              "first is null");

  Fill(k, kN * kHeads * kD, 71);
  Fill(v, kN * kHeads * kD, 72);
  memset(keys, 0, sizeof(keys));
  memset(values, 0, sizeof(values));
  CHECK_OK(simdattn_write_kv_slots(Const4(Dense4(k, 1, kHeads, kN, kD)),
                                   Const4(Dense4(v, 1, kHeads, kN, kD)), kSlots,
                                   &pages));
  CHECK_OK(simdattn_read_kv_slots(&pages, kSlots,
                                  Dense4(read_k, 1, kHeads, kN, kD),
                                  Dense4(read_v, 1, kHeads, kN, kD)));
  /* q8_0 rounds each value to within half a step of its block's max. */
  for (i = 0; i < kN * kHeads * kD; ++i) CHECK_NEAR(read_k[i], k[i], 0.01);
  read_v[0] = -7.0f;
  CHECK_ERROR(
      simdattn_read_kv_slots(&pages, outside, Dense4(read_v, 1, kHeads, 1, kD),
                             Dense4(read_v + kHeads * kD, 1, kHeads, 1, kD)),
      INVALID, "slot_mapping[0] (12) is not a slot of the 3 x 4 pool");
  CHECK(read_v[0] == -7.0f);
  CHECK_ERROR(
      simdattn_read_kv_slots(NULL, kSlots, Dense4(read_k, 1, kHeads, 1, kD),
                             Dense4(read_v, 1, kHeads, 1, kD)),
      INVALID, "pages is null");

  memcpy(before, keys, sizeof(keys));
  memcpy(before + sizeof(keys), values, sizeof(values));
  CHECK_ERROR(simdattn_copy_kv_slots(&pages, from, to, 2), INVALID,
              "slot 6 appears twice in to");
  CHECK_ERROR(simdattn_copy_kv_slots(&pages, outside, to, 1), INVALID,
              "from[0] (12) is not a slot");
  CHECK_ERROR(simdattn_copy_kv_blocks(&pages, bad_block, blocks_to, 1), INVALID,
              "from[0] (3) is not a block of the 3 in the pool");
  CHECK(memcmp(before, keys, sizeof(keys)) == 0 &&
        memcmp(before + sizeof(keys), values, sizeof(values)) == 0);
  CHECK_OK(simdattn_copy_kv_blocks(&pages, blocks_from, blocks_to, 1));
  CHECK(memcmp(keys + 2 * kHeads * kBlock * 34, keys, kHeads * kBlock * 34) ==
        0);
  CHECK_OK(simdattn_copy_kv_slots(&pages, from, to, 1));

  CHECK_OK(simdattn_kv_transfer_bytes(&pages, kN, &bytes));
  CHECK(bytes == 64 + 2 * kN * kHeads * 34 && bytes <= sizeof(buffer));
  CHECK_ERROR(simdattn_kv_transfer_bytes(&pages, kN, NULL), INVALID,
              "bytes is null");
  CHECK_ERROR(simdattn_export_kv_slots(&pages, kSlots, kN, buffer, bytes - 1),
              INVALID,
              "buffer_bytes (743) is less than the 744 bytes of 5 tokens");
  CHECK_OK(simdattn_export_kv_slots(&pages, kSlots, kN, buffer, bytes));
  CHECK_OK(simdattn_read_kv_slots(&pages, kSlots,
                                  Dense4(read_k, 1, kHeads, kN, kD),
                                  Dense4(v, 1, kHeads, kN, kD)));
  /* Into an f32 pool: refused, naming both. */
  CHECK_OK(simdattn_kv_pages_dense(SIMDATTN_F32, kHeads, kD, 0, kBlock, kBlocks,
                                   &f32_pages, NULL, NULL, NULL));
  f32_pages.keys = f32_keys;
  f32_pages.values = f32_keys;
  CHECK_ERROR(simdattn_import_kv_slots(&f32_pages, kSlots, kN, buffer, bytes),
              INVALID,
              "the buffer holds q8_0 kv_heads 2 head_dim 32 value_dim 32 "
              "tokens, the target is f32 kv_heads 2 head_dim 32");
  /* Back into other slots of the q8_0 pool, byte for byte. */
  memset(keys, 0, sizeof(keys));
  CHECK_OK(simdattn_import_kv_slots(&pages, kSlots, kN, buffer, bytes));
  CHECK_OK(simdattn_read_kv_slots(&pages, kSlots,
                                  Dense4(read_v, 1, kHeads, kN, kD),
                                  Dense4(v, 1, kHeads, kN, kD)));
  for (i = 0; i < kN * kHeads * kD; ++i) CHECK(read_v[i] == read_k[i]);
  buffer[100] ^= 1;
  CHECK_ERROR(simdattn_import_kv_slots(&pages, kSlots, kN, buffer, bytes),
              INVALID, "checksum does not match");
}

/* simdattn_write_kv_slots_rope stores apply_rope's then write_kv_slots'
 * bits; without rope or positions it fails, writing nothing. */
static void TestFusedRopeWrite(void) {
  enum { kD = 8, kN = 3 };
  static const int64_t kSlots[kN] = {5, 2, 7};
  static const size_t kPositions[kN] = {9, 0, 300};
  float k[kN * kD], v[kN * kD], fused_k[8 * kD], fused_v[8 * kD];
  float plain_k[8 * kD], plain_v[8 * kD];
  simdattn_kv_pages fused = OneHeadPages(fused_k, fused_v, kD, 4, 2);
  simdattn_kv_pages plain = OneHeadPages(plain_k, plain_v, kD, 4, 2);
  simdattn_rope_options rope = SIMDATTN_ROPE_OPTIONS_INIT;
  Fill(k, kN * kD, 81);
  Fill(v, kN * kD, 82);
  memset(fused_k, 0, sizeof(fused_k));
  memset(fused_v, 0, sizeof(fused_v));
  memset(plain_k, 0, sizeof(plain_k));
  memset(plain_v, 0, sizeof(plain_v));
  CHECK_OK(simdattn_write_kv_slots_rope(Const4(Dense4(k, 1, 1, kN, kD)),
                                        Const4(Dense4(v, 1, 1, kN, kD)), kSlots,
                                        &fused, &rope, kPositions));
  rope.positions = kPositions;
  CHECK_ERROR(simdattn_write_kv_slots_rope(Const4(Dense4(k, 1, 1, kN, kD)),
                                           Const4(Dense4(v, 1, 1, kN, kD)),
                                           kSlots, &plain, &rope, kPositions),
              INVALID, "rope.positions must be null");
  CHECK_OK(simdattn_apply_rope(Dense4(k, kN, 1, 1, kD), &rope));
  CHECK_OK(simdattn_write_kv_slots(Const4(Dense4(k, 1, 1, kN, kD)),
                                   Const4(Dense4(v, 1, 1, kN, kD)), kSlots,
                                   &plain));
  CHECK(memcmp(fused_k, plain_k, sizeof(fused_k)) == 0 &&
        memcmp(fused_v, plain_v, sizeof(fused_v)) == 0);
  rope.positions = NULL;
  CHECK_ERROR(simdattn_write_kv_slots_rope(Const4(Dense4(k, 1, 1, kN, kD)),
                                           Const4(Dense4(v, 1, 1, kN, kD)),
                                           kSlots, &plain, NULL, kPositions),
              INVALID, "rope is null");
  CHECK_ERROR(simdattn_write_kv_slots_rope(Const4(Dense4(k, 1, 1, kN, kD)),
                                           Const4(Dense4(v, 1, 1, kN, kD)),
                                           kSlots, &plain, &rope, NULL),
              INVALID, "positions is null");
  CHECK(memcmp(fused_k, plain_k, sizeof(fused_k)) == 0);
}

static void TestModuleRope(void) {
  enum { kB = 2, kT = 7, kIn = 5, kOut = 8, kHeads = 2, kKvHeads = 1 };
  simdattn_module_config config =
      Config(SIMDATTN_MULTI_HEAD_ATTENTION, kIn, kOut, 0, kHeads);
  simdattn_rope_options rope = SIMDATTN_ROPE_OPTIONS_INIT;
  simdattn_kv_cache_config cache_config = SIMDATTN_KV_CACHE_CONFIG_INIT;
  simdattn_module *module = NULL, *plain = NULL;
  float x[kB * kT * kIn], full[kB * kT * kOut], steps[kB * kT * kOut];
  float unrotated[kB * kT * kOut];
  double difference = 0.0;
  size_t i, t;
  int rotating;
  config.num_kv_heads = kKvHeads;
  CHECK_OK(simdattn_module_create(&config, &plain));
  rope.theta = 100.0f;
  config.rope = &rope;
  CHECK_OK(simdattn_module_create(&config, &module));
  if (module == NULL || plain == NULL) {
    simdattn_module_destroy(module);
    simdattn_module_destroy(plain);
    return;
  }
  Fill(x, sizeof(x) / sizeof(float), 43);
  CHECK_OK(simdattn_module_forward(module, Const3(Dense3(x, kB, kT, kIn)),
                                   Dense3(full, kB, kT, kOut), NULL));
  CHECK_OK(simdattn_module_forward(plain, Const3(Dense3(x, kB, kT, kIn)),
                                   Dense3(unrotated, kB, kT, kOut), NULL));
  for (i = 0; i < kB * kT * kOut; ++i) {
    const double d = fabs((double)full[i] - unrotated[i]);
    if (d > difference) difference = d;
  }
  CHECK(difference > 1e-4);
  cache_config.rope = &rope;
  for (rotating = 0; rotating < 2; ++rotating) {
    simdattn_kv_cache* cache = NULL;
    CHECK_OK(simdattn_kv_cache_create(kB, kKvHeads, kT, kOut / kHeads,
                                      rotating ? &cache_config : NULL, &cache));
    if (cache == NULL) continue;
    memset(steps, 0, sizeof(steps));
    for (t = 0; t < kT; ++t) {
      simdattn_tensor3 xs = Dense3(x + t * kIn, kB, 1, kIn);
      simdattn_tensor3 ys = Dense3(steps + t * kOut, kB, 1, kOut);
      xs.batch_stride = kT * kIn;
      ys.batch_stride = kT * kOut;
      CHECK_OK(
          simdattn_module_forward_step(module, Const3(xs), cache, ys, NULL));
    }
    for (i = 0; i < kB * kT * kOut; ++i) CHECK_NEAR(steps[i], full[i], 1e-5);
    if (rotating) {
      CHECK_ERROR(
          simdattn_module_forward_step(plain, Const3(Dense3(x, kB, 0, kIn)),
                                       cache, Dense3(steps, kB, 0, kOut), NULL),
          INVALID, "no rotary embedding for its queries");
    }
    simdattn_kv_cache_destroy(cache);
  }
  simdattn_module_destroy(module);
  simdattn_module_destroy(plain);
}

/* Rotary embeddings against a double computation, both pairings; the
 * defaults (theta 0 and NULL options); errors. */
static void TestRope(void) {
  enum { kB = 2, kH = 2, kT = 3, kD = 6 };
  float x[kB * kH * kT * kD], before[kB * kH * kT * kD];
  float again[kB * kH * kT * kD];
  const size_t positions[kB] = {4, 100};
  simdattn_rope_options options = SIMDATTN_ROPE_OPTIONS_INIT;
  int32_t interleaved;
  size_t b, h, t, i;
  CHECK(options.struct_size == sizeof(simdattn_rope_options) &&
        options.interleaved == 0 && options.theta == 0.0f &&
        options.rotary_dim == 0 && options.positions == NULL);
  for (interleaved = 0; interleaved <= 1; ++interleaved) {
    Fill(x, kB * kH * kT * kD, 11);
    memcpy(before, x, sizeof(x));
    options.interleaved = interleaved;
    options.theta = 1000.0f;
    options.rotary_dim = 4;
    options.positions = positions;
    CHECK_OK(simdattn_apply_rope(Dense4(x, kB, kH, kT, kD), &options));
    for (b = 0; b < kB; ++b) {
      for (h = 0; h < kH; ++h) {
        for (t = 0; t < kT; ++t) {
          const float* in = before + ((b * kH + h) * kT + t) * kD;
          const float* out = x + ((b * kH + h) * kT + t) * kD;
          for (i = 0; i < 2; ++i) {
            const double angle = (double)(positions[b] + t) *
                                 pow(1000.0, -2.0 * (double)i / 4.0);
            const size_t p1 = interleaved ? 2 * i : i;
            const size_t p2 = interleaved ? 2 * i + 1 : i + 2;
            CHECK_NEAR(out[p1], in[p1] * cos(angle) - in[p2] * sin(angle),
                       1e-6);
            CHECK_NEAR(out[p2], in[p2] * cos(angle) + in[p1] * sin(angle),
                       1e-6);
          }
          CHECK(out[4] == in[4] && out[5] == in[5]); /* Past rotary_dim. */
        }
      }
    }
  }
  /* theta 0 is 10000; NULL options are the defaults: half-split pairs,
   * theta 10000, every dim, positions from 0. */
  Fill(x, kB * kH * kT * kD, 12);
  memcpy(again, x, sizeof(x));
  options.interleaved = 1;
  options.theta = 0.0f;
  options.rotary_dim = 4;
  options.positions = positions;
  CHECK_OK(simdattn_apply_rope(Dense4(x, kB, kH, kT, kD), &options));
  options.theta = 10000.0f;
  CHECK_OK(simdattn_apply_rope(Dense4(again, kB, kH, kT, kD), &options));
  CHECK(memcmp(x, again, sizeof(x)) == 0);
  Fill(x, kB * kH * kT * kD, 13);
  memcpy(again, x, sizeof(x));
  CHECK_OK(simdattn_apply_rope(Dense4(x, kB, kH, kT, kD), NULL));
  options.interleaved = 0;
  options.theta = 10000.0f;
  options.rotary_dim = kD;
  options.positions = NULL;
  CHECK_OK(simdattn_apply_rope(Dense4(again, kB, kH, kT, kD), &options));
  CHECK(memcmp(x, again, sizeof(x)) == 0);

  /* Errors. */
  options.interleaved = 0;
  options.theta = 1000.0f;
  options.rotary_dim = 3;
  options.positions = NULL;
  CHECK_ERROR(simdattn_apply_rope(Dense4(x, kB, kH, kT, kD), &options), INVALID,
              "options.rotary_dim (3) is not even");
  options.interleaved = 2;
  options.rotary_dim = 0;
  CHECK_ERROR(simdattn_apply_rope(Dense4(x, kB, kH, kT, kD), &options), INVALID,
              "interleaved (2) is neither 0 nor 1");
}

/* Strided 3-D views: rows `token_stride` floats apart, items
 * `batch_stride`. */
static simdattn_tensor3 Strided3(float* data, size_t batch, size_t tokens,
                                 size_t features, size_t batch_stride,
                                 size_t token_stride) {
  simdattn_tensor3 t = Dense3(data, batch, tokens, features);
  t.batch_stride = batch_stride;
  t.token_stride = token_stride;
  return t;
}

/* Deterministic multiples of 1/8 of magnitude at most max_eighths / 8:
 * exact in bf16 and f16 (max_eighths <= 127), and their products and short
 * sums exact in float32. */
static void FillEighths(float* data, size_t n, uint32_t seed, int max_eighths) {
  size_t i;
  uint32_t state = seed * 2654435761u + 1u;
  for (i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    data[i] =
        (float)((int)(state >> 8) % (2 * max_eighths + 1) - max_eighths) / 8.0f;
  }
}

/* rows x cols values every cache type holds exactly: FillEighths' up to
 * 127/8, each row (a token's head) reaching 127/8 in magnitude, so that
 * int8's scale, max |x| / 127, is exactly 1/8. */
static void FillCacheExact(float* data, size_t rows, size_t cols,
                           uint32_t seed) {
  size_t r;
  FillEighths(data, rows * cols, seed, 127);
  for (r = 0; r < rows; ++r) {
    data[r * cols + r % cols] = (r % 2 != 0 ? -127.0f : 127.0f) / 8.0f;
  }
}

/* A one-sequence cache of `type` (paged in blocks of 16, or contiguous)
 * for `capacity` tokens, holding the n tokens of k and v (kv_heads x n x d
 * each); NULL, counted as a failure, if it cannot be made. */
static simdattn_kv_cache* FilledCache(int32_t type, size_t paged,
                                      size_t kv_heads, size_t capacity,
                                      size_t d, float* k, float* v, size_t n) {
  simdattn_kv_cache_config config = SIMDATTN_KV_CACHE_CONFIG_INIT;
  simdattn_kv_cache* cache = NULL;
  config.type = type;
  config.block_size = paged ? 16 : 0;
  CHECK_OK(simdattn_kv_cache_create(1, kv_heads, capacity, d, &config, &cache));
  if (cache == NULL) return NULL;
  CHECK_OK(simdattn_kv_cache_append(cache, Const4(Dense4(k, 1, kv_heads, n, d)),
                                    Const4(Dense4(v, 1, kv_heads, n, d)),
                                    NULL));
  return cache;
}

/* SIMDATTN_COMPUTE_INT8 over a q8_0 cache, contiguous and paged: queries
 * that quantize exactly (eighths, each block of 32 reaching 127/8, so d is
 * 1/8) give float32 attention's outputs over the same cache. */
static void TestKVCacheInt8Attention(void) {
  enum { kQHeads = 4, kKvHeads = 2, kN = 40, kD = 32 };
  float k[kKvHeads * kN * kD], v[kKvHeads * kN * kD];
  float q[kQHeads * kD], out[kQHeads * kD], ref[kQHeads * kD];
  simdattn_attention_options options = SIMDATTN_ATTENTION_OPTIONS_INIT;
  size_t paged, i;
  FillCacheExact(k, kKvHeads * kN, kD, 201);
  FillEighths(v, sizeof(v) / sizeof(float), 202, 16);
  FillCacheExact(q, kQHeads, kD, 203);
  options.has_scale = 1;
  options.scale = 1.0f / 256;
  for (paged = 0; paged < 2; ++paged) {
    simdattn_kv_cache* cache =
        FilledCache(SIMDATTN_Q8_0, paged, kKvHeads, kN, kD, k, v, kN);
    size_t wrong = 0;
    if (cache == NULL) continue;
    options.compute = SIMDATTN_COMPUTE_FP32;
    CHECK_OK(simdattn_kv_cache_attention(Const4(Dense4(q, 1, kQHeads, 1, kD)),
                                         cache, Dense4(ref, 1, kQHeads, 1, kD),
                                         &options));
    options.compute = SIMDATTN_COMPUTE_INT8;
    CHECK_OK(simdattn_kv_cache_attention(Const4(Dense4(q, 1, kQHeads, 1, kD)),
                                         cache, Dense4(out, 1, kQHeads, 1, kD),
                                         &options));
    for (i = 0; i < kQHeads * kD; ++i) {
      wrong += !(fabs(out[i] - ref[i]) <= 1e-5 * (1 + fabs(ref[i])));
    }
    if (wrong != 0) {
      fprintf(stderr,
              "%s:%d: int8 scores over q8_0 (block_size %lu): %lu outputs "
              "differ from float32's\n",
              __FILE__, __LINE__, (unsigned long)(paged ? 16 : 0),
              (unsigned long)wrong);
      ++g_failures;
    }
    simdattn_kv_cache_destroy(cache);
  }
}

/* struct_size 0, what a zeroed struct (no SIMDATTN_*_INIT) has, is refused
 * for every options and config struct, with a message naming the field and
 * the macro, and nothing is written; so is a size below 0.2.0's. */
static void TestStructSizeZero(void) {
  enum { kHeads = 2, kT = 3, kIn = 4, kOut = 4 };
  float a[2 * 2], b[2 * 2], c[2 * 2], c_before[2 * 2];
  float x[kHeads * kT * kIn], y[kHeads * kT * kIn], before[kHeads * kT * kIn];
  simdattn_matmul_options matmul;
  simdattn_attention_options attention;
  simdattn_mask mask;
  simdattn_rope_options rope;
  simdattn_kv_cache_config kv_config;
  simdattn_module_config module_config;
  simdattn_forward_options forward;
  simdattn_load_options load;
  simdattn_attention_options valid_attention = SIMDATTN_ATTENTION_OPTIONS_INIT;
  simdattn_kv_cache_config valid_kv_config = SIMDATTN_KV_CACHE_CONFIG_INIT;
  simdattn_module_config valid_config =
      Config(SIMDATTN_MULTI_HEAD_ATTENTION, kIn, kOut, 8, kHeads);
  simdattn_named_tensor tensors[kMaxTensors];
  simdattn_kv_cache* cache = NULL;
  simdattn_module* module = NULL;
  char expected[64];
  size_t loaded;
  memset(&matmul, 0, sizeof(matmul));
  memset(&attention, 0, sizeof(attention));
  memset(&mask, 0, sizeof(mask));
  memset(&rope, 0, sizeof(rope));
  memset(&kv_config, 0, sizeof(kv_config));
  memset(&module_config, 0, sizeof(module_config));
  memset(&forward, 0, sizeof(forward));
  memset(&load, 0, sizeof(load));
  Fill(a, 4, 71);
  Fill(b, 4, 72);
  Fill(c, 4, 73);
  Fill(x, sizeof(x) / sizeof(float), 74);
  Fill(y, sizeof(y) / sizeof(float), 75);
  memcpy(c_before, c, sizeof(c));
  memcpy(before, y, sizeof(y));

  /* Primitives. */
  CHECK_ERROR(simdattn_matmul(ConstMatrix(a, 2, 2, 2), ConstMatrix(b, 2, 2, 2),
                              Matrix(c, 2, 2, 2), &matmul),
              INVALID, "options->struct_size (0)");
  CHECK_MESSAGE("SIMDATTN_MATMUL_OPTIONS_INIT");
  CHECK(strncmp(simdattn_last_error(), "simdattn_matmul",
                strlen("simdattn_matmul")) == 0);
  CHECK_ERROR(simdattn_batched_matmul(Const4(Dense4(a, 1, 1, 2, 2)),
                                      Const4(Dense4(b, 1, 1, 2, 2)),
                                      Dense4(c, 1, 1, 2, 2), &matmul),
              INVALID, "options->struct_size (0)");
  CHECK_MESSAGE("SIMDATTN_MATMUL_OPTIONS_INIT");
  /* Below the first version's size, though not 0: struct_size alone. */
  matmul.struct_size = sizeof(size_t);
  snprintf(expected, sizeof(expected), "options->struct_size (%lu)",
           (unsigned long)sizeof(size_t));
  CHECK_ERROR(simdattn_matmul(ConstMatrix(a, 2, 2, 2), ConstMatrix(b, 2, 2, 2),
                              Matrix(c, 2, 2, 2), &matmul),
              INVALID, expected);
  CHECK_MESSAGE("SIMDATTN_MATMUL_OPTIONS_INIT");
  CHECK(memcmp(c, c_before, sizeof(c)) == 0);

  CHECK_ERROR(simdattn_softmax(Const4(Dense4(x, 1, kHeads, kT, kIn)),
                               Dense4(y, 1, kHeads, kT, kIn), 1.0f, &mask),
              INVALID, "mask->struct_size (0)");
  CHECK_MESSAGE("SIMDATTN_MASK_INIT");
  CHECK_ERROR(simdattn_scaled_dot_product_attention(
                  Const4(Dense4(x, 1, kHeads, kT, kIn)),
                  Const4(Dense4(x, 1, kHeads, kT, kIn)),
                  Const4(Dense4(x, 1, kHeads, kT, kIn)),
                  Dense4(y, 1, kHeads, kT, kIn), &attention),
              INVALID, "options->struct_size (0)");
  CHECK_MESSAGE("SIMDATTN_ATTENTION_OPTIONS_INIT");
  valid_attention.mask = &mask;
  CHECK_ERROR(simdattn_scaled_dot_product_attention(
                  Const4(Dense4(x, 1, kHeads, kT, kIn)),
                  Const4(Dense4(x, 1, kHeads, kT, kIn)),
                  Const4(Dense4(x, 1, kHeads, kT, kIn)),
                  Dense4(y, 1, kHeads, kT, kIn), &valid_attention),
              INVALID, "mask->struct_size (0)");
  CHECK_MESSAGE("SIMDATTN_MASK_INIT");
  CHECK_ERROR(simdattn_apply_rope(Dense4(y, 1, kHeads, kT, kIn), &rope),
              INVALID, "options->struct_size (0)");
  CHECK_MESSAGE("SIMDATTN_ROPE_OPTIONS_INIT");
  CHECK(memcmp(y, before, sizeof(y)) == 0);

  /* KV caches: the config, the RoPE options it points to, attention. */
  CHECK_ERROR(simdattn_kv_cache_create(1, kHeads, 4, kIn, &kv_config, &cache),
              INVALID, "config->struct_size (0)");
  CHECK_MESSAGE("SIMDATTN_KV_CACHE_CONFIG_INIT");
  CHECK(cache == NULL);
  valid_kv_config.rope = &rope;
  CHECK_ERROR(
      simdattn_kv_cache_create(1, kHeads, 4, kIn, &valid_kv_config, &cache),
      INVALID, "rope->struct_size (0)");
  CHECK_MESSAGE("SIMDATTN_ROPE_OPTIONS_INIT");
  CHECK(cache == NULL);
  CHECK_OK(simdattn_kv_cache_create(1, kHeads, 4, kIn, NULL, &cache));
  if (cache != NULL) {
    CHECK_OK(
        simdattn_kv_cache_append(cache, Const4(Dense4(x, 1, kHeads, kT, kIn)),
                                 Const4(Dense4(x, 1, kHeads, kT, kIn)), NULL));
    CHECK_ERROR(
        simdattn_kv_cache_attention(Const4(Dense4(x, 1, kHeads, 1, kIn)), cache,
                                    Dense4(y, 1, kHeads, 1, kIn), &attention),
        INVALID, "options->struct_size (0)");
    CHECK_MESSAGE("SIMDATTN_ATTENTION_OPTIONS_INIT");
    CHECK(memcmp(y, before, sizeof(y)) == 0);
  }

  /* Modules: the config, forward (and step) options, load options. */
  CHECK_ERROR(simdattn_module_create(&module_config, &module), INVALID,
              "config->struct_size (0)");
  CHECK_MESSAGE("SIMDATTN_MODULE_CONFIG_INIT");
  CHECK(module == NULL);
  CHECK_OK(simdattn_module_create(&valid_config, &module));
  if (module != NULL) {
    CHECK_ERROR(simdattn_module_forward(module, Const3(Dense3(x, 1, kT, kIn)),
                                        Dense3(y, 1, kT, kOut), &forward),
                INVALID, "options->struct_size (0)");
    CHECK_MESSAGE("SIMDATTN_FORWARD_OPTIONS_INIT");
    {
      size_t size = 99;
      simdattn_kv_cache* step_cache = NULL;
      CHECK_OK(simdattn_kv_cache_create(1, kHeads, 8, kOut / kHeads, NULL,
                                        &step_cache));
      if (step_cache != NULL) {
        CHECK_ERROR(simdattn_module_forward_step(
                        module, Const3(Dense3(x, 1, 1, kIn)), step_cache,
                        Dense3(y, 1, 1, kOut), &forward),
                    INVALID, "options->struct_size (0)");
        CHECK_MESSAGE("SIMDATTN_FORWARD_OPTIONS_INIT");
        CHECK_OK(simdattn_kv_cache_size(step_cache, &size, NULL));
        CHECK(size == 0);
      }
      simdattn_kv_cache_destroy(step_cache);
    }
    CHECK(memcmp(y, before, sizeof(y)) == 0);
    loaded = LoadRandomWeights(module, tensors);
    CHECK_ERROR(simdattn_module_load_weights(module, tensors, loaded, &load),
                INVALID, "options->struct_size (0)");
    CHECK_MESSAGE("SIMDATTN_LOAD_OPTIONS_INIT");
  }
  simdattn_module_destroy(module);
  simdattn_kv_cache_destroy(cache);
}

/* A caller compiled against a newer header passes a larger struct: its
 * struct_size covers fields this version does not know. Accepted, with the
 * results of the plain struct, while those bytes are zero; refused ("this
 * version") when one is not; bytes past struct_size are never read; a
 * struct_size over 4096 is refused. */
enum { kGrownExtra = 4104, kNewerFields = 16 };
#define GROWN(type)                   \
  struct {                            \
    type base;                        \
    unsigned char extra[kGrownExtra]; \
  }

static void TestStructSizeGrown(void) {
  enum { kHeads = 2, kT = 5, kD = 8, kIn = 4, kOut = 4, kCap = 24 };
  float a[3 * 4], b[4 * 2], bias[2], c_plain[3 * 2], c_grown[3 * 2];
  float q[kHeads * kT * kD], k[kHeads * kT * kD], v[kHeads * kT * kD];
  float out_plain[kHeads * kT * kD], out_grown[kHeads * kT * kD];
  float read_keys[2][kHeads * kT * kD], read_values[2][kHeads * kT * kD];
  float x[kT * kIn], y_plain[kT * kOut], y_grown[kT * kOut];
  float w_plain[kHeads * kT * kT], w_grown[kHeads * kT * kT];
  const simdattn_load_options load_defaults = SIMDATTN_LOAD_OPTIONS_INIT;
  simdattn_matmul_options matmul = SIMDATTN_MATMUL_OPTIONS_INIT;
  simdattn_attention_options attention = SIMDATTN_ATTENTION_OPTIONS_INIT;
  simdattn_mask mask = SIMDATTN_MASK_INIT;
  simdattn_rope_options rope = SIMDATTN_ROPE_OPTIONS_INIT;
  simdattn_kv_cache_config kv_config = SIMDATTN_KV_CACHE_CONFIG_INIT;
  simdattn_module_config config =
      Config(SIMDATTN_MULTI_HEAD_ATTENTION, kIn, kOut, 8, kHeads);
  simdattn_forward_options forward = SIMDATTN_FORWARD_OPTIONS_INIT;
  GROWN(simdattn_matmul_options) grown_matmul;
  GROWN(simdattn_attention_options) grown_attention;
  GROWN(simdattn_mask) grown_mask;
  GROWN(simdattn_rope_options) grown_rope;
  GROWN(simdattn_kv_cache_config) grown_kv_config;
  GROWN(simdattn_module_config) grown_config;
  GROWN(simdattn_forward_options) grown_forward;
  GROWN(simdattn_load_options) grown_load;
  simdattn_kv_cache* caches[2] = {NULL, NULL};
  simdattn_kv_cache* refused = NULL;
  simdattn_module* modules[2] = {NULL, NULL};
  simdattn_named_tensor tensors[kMaxTensors];
  size_t i, loaded;
  Fill(a, 12, 81);
  Fill(b, 8, 82);
  Fill(bias, 2, 83);
  Fill(q, sizeof(q) / sizeof(float), 84);
  Fill(k, sizeof(k) / sizeof(float), 85);
  Fill(v, sizeof(v) / sizeof(float), 86);
  Fill(x, sizeof(x) / sizeof(float), 87);

  /* Matmul options: the checks of struct_size itself. */
  matmul.transpose_b = 0;
  matmul.use_alpha = 1;
  matmul.alpha = 0.5f;
  matmul.bias = bias;
  memset(&grown_matmul, 0, sizeof(grown_matmul));
  grown_matmul.base = matmul;
  grown_matmul.base.struct_size = sizeof(matmul) + kNewerFields;
  CHECK_OK(simdattn_matmul(ConstMatrix(a, 3, 4, 4), ConstMatrix(b, 4, 2, 2),
                           Matrix(c_plain, 3, 2, 2), &matmul));
  CHECK_OK(simdattn_matmul(ConstMatrix(a, 3, 4, 4), ConstMatrix(b, 4, 2, 2),
                           Matrix(c_grown, 3, 2, 2), &grown_matmul.base));
  CHECK(memcmp(c_plain, c_grown, sizeof(c_plain)) == 0);
  grown_matmul.extra[kNewerFields - 1] = 1;
  memcpy(c_grown, c_plain, sizeof(c_plain));
  CHECK_ERROR(simdattn_matmul(ConstMatrix(a, 3, 4, 4), ConstMatrix(b, 4, 2, 2),
                              Matrix(c_grown, 3, 2, 2), &grown_matmul.base),
              INVALID, "this version");
  CHECK_MESSAGE("struct_size");
  CHECK_ERROR(simdattn_batched_matmul(
                  Const4(Dense4(a, 1, 1, 3, 4)), Const4(Dense4(b, 1, 1, 4, 2)),
                  Dense4(c_grown, 1, 1, 3, 2), &grown_matmul.base),
              INVALID, "this version");
  CHECK(memcmp(c_plain, c_grown, sizeof(c_plain)) == 0);
  /* A nonzero byte past struct_size is not the struct's. */
  grown_matmul.extra[kNewerFields - 1] = 0;
  grown_matmul.extra[kNewerFields] = 1;
  CHECK_OK(simdattn_matmul(ConstMatrix(a, 3, 4, 4), ConstMatrix(b, 4, 2, 2),
                           Matrix(c_grown, 3, 2, 2), &grown_matmul.base));
  CHECK(memcmp(c_plain, c_grown, sizeof(c_plain)) == 0);
  grown_matmul.extra[kNewerFields] = 0;
  /* Up to 4096 bytes, however many; more is refused. */
  grown_matmul.base.struct_size = 4096;
  CHECK_OK(simdattn_matmul(ConstMatrix(a, 3, 4, 4), ConstMatrix(b, 4, 2, 2),
                           Matrix(c_grown, 3, 2, 2), &grown_matmul.base));
  CHECK(memcmp(c_plain, c_grown, sizeof(c_plain)) == 0);
  grown_matmul.base.struct_size = 4097;
  CHECK_ERROR(simdattn_matmul(ConstMatrix(a, 3, 4, 4), ConstMatrix(b, 4, 2, 2),
                              Matrix(c_grown, 3, 2, 2), &grown_matmul.base),
              INVALID, "struct_size (4097)");
  grown_matmul.base.struct_size = (size_t)-1;
  CHECK_ERROR(simdattn_matmul(ConstMatrix(a, 3, 4, 4), ConstMatrix(b, 4, 2, 2),
                              Matrix(c_grown, 3, 2, 2), &grown_matmul.base),
              INVALID, "struct_size");
  CHECK(memcmp(c_plain, c_grown, sizeof(c_plain)) == 0);

  /* Attention options and the mask they point to; softmax's mask. */
  mask.causal = 1;
  mask.causal_offset = 1;
  mask.softcap = 2.0f;
  attention.has_scale = 1;
  attention.scale = 0.5f;
  attention.mask = &mask;
  memset(&grown_mask, 0, sizeof(grown_mask));
  grown_mask.base = mask;
  grown_mask.base.struct_size = sizeof(mask) + kNewerFields;
  memset(&grown_attention, 0, sizeof(grown_attention));
  grown_attention.base = attention;
  grown_attention.base.struct_size = sizeof(attention) + kNewerFields;
  grown_attention.base.mask = &grown_mask.base;
  CHECK_OK(simdattn_scaled_dot_product_attention(
      Const4(Dense4(q, 1, kHeads, kT, kD)), Const4(Dense4(k, 1, 1, kT, kD)),
      Const4(Dense4(v, 1, 1, kT, kD)), Dense4(out_plain, 1, kHeads, kT, kD),
      &attention));
  CHECK_OK(simdattn_scaled_dot_product_attention(
      Const4(Dense4(q, 1, kHeads, kT, kD)), Const4(Dense4(k, 1, 1, kT, kD)),
      Const4(Dense4(v, 1, 1, kT, kD)), Dense4(out_grown, 1, kHeads, kT, kD),
      &grown_attention.base));
  CHECK(memcmp(out_plain, out_grown, sizeof(out_plain)) == 0);
  grown_attention.extra[3] = 0x80;
  CHECK_ERROR(
      simdattn_scaled_dot_product_attention(
          Const4(Dense4(q, 1, kHeads, kT, kD)), Const4(Dense4(k, 1, 1, kT, kD)),
          Const4(Dense4(v, 1, 1, kT, kD)), Dense4(out_grown, 1, kHeads, kT, kD),
          &grown_attention.base),
      INVALID, "this version");
  grown_attention.extra[3] = 0;
  grown_mask.extra[0] = 1;
  CHECK_ERROR(
      simdattn_scaled_dot_product_attention(
          Const4(Dense4(q, 1, kHeads, kT, kD)), Const4(Dense4(k, 1, 1, kT, kD)),
          Const4(Dense4(v, 1, 1, kT, kD)), Dense4(out_grown, 1, kHeads, kT, kD),
          &grown_attention.base),
      INVALID, "this version");
  CHECK(memcmp(out_plain, out_grown, sizeof(out_plain)) == 0);
  grown_mask.extra[0] = 0;
  CHECK_OK(simdattn_softmax(Const4(Dense4(q, 1, kHeads, kT, kD)),
                            Dense4(out_plain, 1, kHeads, kT, kD), 0.5f, &mask));
  CHECK_OK(simdattn_softmax(Const4(Dense4(q, 1, kHeads, kT, kD)),
                            Dense4(out_grown, 1, kHeads, kT, kD), 0.5f,
                            &grown_mask.base));
  CHECK(memcmp(out_plain, out_grown, sizeof(out_plain)) == 0);
  grown_mask.extra[kNewerFields - 1] = 1;
  CHECK_ERROR(simdattn_softmax(Const4(Dense4(q, 1, kHeads, kT, kD)),
                               Dense4(out_grown, 1, kHeads, kT, kD), 0.5f,
                               &grown_mask.base),
              INVALID, "this version");
  grown_mask.extra[kNewerFields - 1] = 0;

  /* RoPE options, alone and in a KV cache config; attention over the
   * cache. */
  rope.interleaved = 1;
  rope.theta = 500.0f;
  rope.rotary_dim = 4;
  memset(&grown_rope, 0, sizeof(grown_rope));
  grown_rope.base = rope;
  grown_rope.base.struct_size = sizeof(rope) + kNewerFields;
  memcpy(out_plain, q, sizeof(q));
  memcpy(out_grown, q, sizeof(q));
  CHECK_OK(simdattn_apply_rope(Dense4(out_plain, 1, kHeads, kT, kD), &rope));
  CHECK_OK(simdattn_apply_rope(Dense4(out_grown, 1, kHeads, kT, kD),
                               &grown_rope.base));
  CHECK(memcmp(out_plain, out_grown, sizeof(out_plain)) == 0);
  grown_rope.extra[1] = 1;
  CHECK_ERROR(simdattn_apply_rope(Dense4(out_grown, 1, kHeads, kT, kD),
                                  &grown_rope.base),
              INVALID, "this version");
  CHECK(memcmp(out_plain, out_grown, sizeof(out_plain)) == 0);
  grown_rope.extra[1] = 0;

  kv_config.type = SIMDATTN_F16;
  kv_config.block_size = 16;
  kv_config.rope = &rope;
  memset(&grown_kv_config, 0, sizeof(grown_kv_config));
  grown_kv_config.base = kv_config;
  grown_kv_config.base.struct_size = sizeof(kv_config) + kNewerFields;
  grown_kv_config.base.rope = &grown_rope.base;
  CHECK_OK(
      simdattn_kv_cache_create(1, kHeads, kCap, kD, &kv_config, &caches[0]));
  CHECK_OK(simdattn_kv_cache_create(1, kHeads, kCap, kD, &grown_kv_config.base,
                                    &caches[1]));
  for (i = 0; i < 2; ++i) {
    if (caches[i] == NULL) continue;
    CHECK_OK(simdattn_kv_cache_append(
        caches[i], Const4(Dense4(k, 1, kHeads, kT, kD)),
        Const4(Dense4(v, 1, kHeads, kT, kD)), NULL));
    CHECK_OK(simdattn_kv_cache_read(caches[i], 0,
                                    Dense3(read_keys[i], kHeads, kT, kD),
                                    Dense3(read_values[i], kHeads, kT, kD)));
  }
  if (caches[0] != NULL && caches[1] != NULL) {
    CHECK(memcmp(read_keys[0], read_keys[1], sizeof(read_keys[0])) == 0);
    CHECK(memcmp(read_values[0], read_values[1], sizeof(read_values[0])) == 0);
  }
  grown_kv_config.extra[kNewerFields - 1] = 1;
  CHECK_ERROR(simdattn_kv_cache_create(1, kHeads, kCap, kD,
                                       &grown_kv_config.base, &refused),
              INVALID, "this version");
  grown_kv_config.extra[kNewerFields - 1] = 0;
  grown_rope.extra[kNewerFields - 1] = 1;
  CHECK_ERROR(simdattn_kv_cache_create(1, kHeads, kCap, kD,
                                       &grown_kv_config.base, &refused),
              INVALID, "this version");
  grown_rope.extra[kNewerFields - 1] = 0;
  CHECK(refused == NULL);
  if (caches[0] != NULL && caches[1] != NULL) {
    grown_attention.base.mask = NULL;
    attention.mask = NULL;
    CHECK_OK(simdattn_kv_cache_attention(
        Const4(Dense4(q, 1, kHeads, 2, kD)), caches[0],
        Dense4(out_plain, 1, kHeads, 2, kD), &attention));
    CHECK_OK(simdattn_kv_cache_attention(
        Const4(Dense4(q, 1, kHeads, 2, kD)), caches[1],
        Dense4(out_grown, 1, kHeads, 2, kD), &grown_attention.base));
    CHECK(memcmp(out_plain, out_grown, kHeads * 2 * kD * sizeof(float)) == 0);
    grown_attention.extra[kNewerFields - 1] = 1;
    CHECK_ERROR(simdattn_kv_cache_attention(
                    Const4(Dense4(q, 1, kHeads, 2, kD)), caches[1],
                    Dense4(out_grown, 1, kHeads, 2, kD), &grown_attention.base),
                INVALID, "this version");
    grown_attention.extra[kNewerFields - 1] = 0;
  }
  simdattn_kv_cache_destroy(caches[0]);
  simdattn_kv_cache_destroy(caches[1]);

  /* Module config (the initial weights come from the seed alone). */
  config.sinks = 1;
  memset(&grown_config, 0, sizeof(grown_config));
  grown_config.base = config;
  grown_config.base.struct_size = sizeof(config) + kNewerFields;
  CHECK_OK(simdattn_module_create(&config, &modules[0]));
  CHECK_OK(simdattn_module_create(&grown_config.base, &modules[1]));
  if (modules[0] != NULL && modules[1] != NULL) {
    CHECK_OK(simdattn_module_forward(modules[0], Const3(Dense3(x, 1, kT, kIn)),
                                     Dense3(y_plain, 1, kT, kOut), NULL));
    CHECK_OK(simdattn_module_forward(modules[1], Const3(Dense3(x, 1, kT, kIn)),
                                     Dense3(y_grown, 1, kT, kOut), NULL));
    CHECK(memcmp(y_plain, y_grown, sizeof(y_plain)) == 0);
  }
  simdattn_module_destroy(modules[1]);
  modules[1] = NULL;
  grown_config.extra[2] = 1;
  CHECK_ERROR(simdattn_module_create(&grown_config.base, &modules[1]), INVALID,
              "this version");
  CHECK(modules[1] == NULL);
  grown_config.extra[2] = 0;
  grown_config.base.struct_size = 4097;
  CHECK_ERROR(simdattn_module_create(&grown_config.base, &modules[1]), INVALID,
              "struct_size (4097)");
  CHECK(modules[1] == NULL);

  /* Forward options, and load options (into a module of another seed: the
   * same outputs then prove the load). */
  if (modules[0] != NULL) {
    forward.attention_weights = Dense4(w_plain, 1, kHeads, kT, kT);
    memset(&grown_forward, 0, sizeof(grown_forward));
    grown_forward.base = forward;
    grown_forward.base.struct_size = sizeof(forward) + kNewerFields;
    grown_forward.base.attention_weights = Dense4(w_grown, 1, kHeads, kT, kT);
    CHECK_OK(simdattn_module_forward(modules[0], Const3(Dense3(x, 1, kT, kIn)),
                                     Dense3(y_plain, 1, kT, kOut), &forward));
    CHECK_OK(simdattn_module_forward(modules[0], Const3(Dense3(x, 1, kT, kIn)),
                                     Dense3(y_grown, 1, kT, kOut),
                                     &grown_forward.base));
    CHECK(memcmp(y_plain, y_grown, sizeof(y_plain)) == 0);
    CHECK(memcmp(w_plain, w_grown, sizeof(w_plain)) == 0);
    grown_forward.extra[kNewerFields - 1] = 1;
    CHECK_ERROR(simdattn_module_forward(
                    modules[0], Const3(Dense3(x, 1, kT, kIn)),
                    Dense3(y_grown, 1, kT, kOut), &grown_forward.base),
                INVALID, "this version");
    CHECK(memcmp(y_plain, y_grown, sizeof(y_plain)) == 0);
    grown_forward.extra[kNewerFields - 1] = 0;

    config.seed = 2;
    CHECK_OK(simdattn_module_create(&config, &modules[1]));
    memset(&grown_load, 0, sizeof(grown_load));
    grown_load.base = load_defaults;
    grown_load.base.struct_size = sizeof(load_defaults) + kNewerFields;
    if (modules[1] != NULL) {
      loaded = LoadRandomWeights(modules[0], tensors);
      grown_load.extra[kNewerFields - 1] = 1;
      CHECK_ERROR(simdattn_module_load_weights(modules[1], tensors, loaded,
                                               &grown_load.base),
                  INVALID, "this version");
      grown_load.extra[kNewerFields - 1] = 0;
      CHECK_OK(simdattn_module_load_weights(modules[1], tensors, loaded,
                                            &grown_load.base));
      CHECK_OK(simdattn_module_forward(modules[0],
                                       Const3(Dense3(x, 1, kT, kIn)),
                                       Dense3(y_plain, 1, kT, kOut), NULL));
      CHECK_OK(simdattn_module_forward(modules[1],
                                       Const3(Dense3(x, 1, kT, kIn)),
                                       Dense3(y_grown, 1, kT, kOut), NULL));
      CHECK(memcmp(y_plain, y_grown, sizeof(y_plain)) == 0);
    }
  }
  simdattn_module_destroy(modules[0]);
  simdattn_module_destroy(modules[1]);
}
#undef GROWN

/* ALiBi's slopes: 2^-1 .. 2^-8 for 8 heads, exactly; the interleaved
 * sequence for 6; errors. */
static void TestAlibiSlopes(void) {
  float slopes[8], six[6], one[1];
  const float expected_six[6] = {0.25f,       0.0625f, 0.015625f,
                                 0.00390625f, 0.5f,    0.125f};
  float expected = 1.0f;
  size_t i;
  for (i = 0; i < 8; ++i) slopes[i] = -1.0f;
  CHECK_OK(simdattn_alibi_slopes(8, slopes));
  for (i = 0; i < 8; ++i) {
    expected *= 0.5f;
    CHECK(slopes[i] == expected);
  }
  CHECK_OK(simdattn_alibi_slopes(6, six));
  for (i = 0; i < 6; ++i) CHECK(six[i] == expected_six[i]);
  CHECK_OK(simdattn_alibi_slopes(1, one));
  CHECK(one[0] == 0.00390625f);
  /* No heads: nothing to write, so no buffer needed. */
  CHECK_OK(simdattn_alibi_slopes(0, NULL));
  CHECK_ERROR(simdattn_alibi_slopes(8, NULL), INVALID, "slopes is null");
}

/* simdattn_kv_cache_read gives back exactly what was appended, whatever the
 * type and layout, for values each type holds exactly: two sequences of
 * different lengths (appended through the sequences array), one empty;
 * strided outputs, their padding untouched; errors. */
static void TestKVCacheRead(void) {
  enum {
    kB = 3,
    kHeads = 2,
    kCap = 40,
    kD = 8,
    kN = 20,
    kMore = 5,
    kStride = kD + 3,
    kOutTokens = kN + kMore
  };
  static const int32_t kTypes[4] = {SIMDATTN_F32, SIMDATTN_BF16, SIMDATTN_F16,
                                    SIMDATTN_INT8};
  static float k[2 * kHeads * kN * kD], v[2 * kHeads * kN * kD];
  static float k2[kHeads * kMore * kD], v2[kHeads * kMore * kD];
  static float keys[kHeads * kOutTokens * kStride];
  static float values[kHeads * kOutTokens * kStride];
  /* k[0] and v[0] go to sequence 2, k[1] and v[1] to sequence 0; then k2
   * and v2 to sequence 2 alone. */
  const size_t two[2] = {2, 0}, last[1] = {2};
  const float sentinel = 1000.0f;
  size_t type, paged, i;
  FillCacheExact(k, 2 * kHeads * kN, kD, 61);
  FillCacheExact(v, 2 * kHeads * kN, kD, 62);
  FillCacheExact(k2, kHeads * kMore, kD, 63);
  FillCacheExact(v2, kHeads * kMore, kD, 64);
  for (type = 0; type < 4; ++type) {
    for (paged = 0; paged < 2; ++paged) {
      simdattn_kv_cache_config config = SIMDATTN_KV_CACHE_CONFIG_INIT;
      simdattn_kv_cache* cache = NULL;
      size_t length = 0, s;
      config.type = kTypes[type];
      config.block_size = paged ? 16 : 0;
      CHECK_OK(simdattn_kv_cache_create(kB, kHeads, kCap, kD, &config, &cache));
      if (cache == NULL) continue;
      CHECK_OK(
          simdattn_kv_cache_append(cache, Const4(Dense4(k, 2, kHeads, kN, kD)),
                                   Const4(Dense4(v, 2, kHeads, kN, kD)), two));
      CHECK_OK(simdattn_kv_cache_append(
          cache, Const4(Dense4(k2, 1, kHeads, kMore, kD)),
          Const4(Dense4(v2, 1, kHeads, kMore, kD)), last));
      CHECK_OK(simdattn_kv_cache_length(cache, 0, &length));
      CHECK(length == kN);
      CHECK_OK(simdattn_kv_cache_length(cache, 1, &length));
      CHECK(length == 0);
      CHECK_OK(simdattn_kv_cache_length(cache, 2, &length));
      CHECK(length == kN + kMore);
      for (s = 0; s < kB; s += 2) {
        const size_t n = s == 0 ? kN : kN + kMore;
        size_t h, t, c, wrong = 0;
        for (i = 0; i < kHeads * kOutTokens * kStride; ++i) {
          keys[i] = values[i] = sentinel;
        }
        CHECK_OK(simdattn_kv_cache_read(
            cache, s,
            Strided3(keys, kHeads, n, kD, kOutTokens * kStride, kStride),
            Strided3(values, kHeads, n, kD, kOutTokens * kStride, kStride)));
        for (h = 0; h < kHeads; ++h) {
          for (t = 0; t < kOutTokens; ++t) {
            for (c = 0; c < kStride; ++c) {
              const size_t at = (h * kOutTokens + t) * kStride + c;
              float expected_k = sentinel, expected_v = sentinel;
              if (t < n && c < kD) {
                const size_t item = s == 2 ? 0 : 1;
                const size_t from = ((item * kHeads + h) * kN + t) * kD + c;
                const size_t more = (h * kMore + t - kN) * kD + c;
                expected_k = t < kN ? k[from] : k2[more];
                expected_v = t < kN ? v[from] : v2[more];
              }
              wrong += keys[at] != expected_k;
              wrong += values[at] != expected_v;
            }
          }
        }
        if (wrong != 0) {
          fprintf(stderr,
                  "%s:%d: simdattn_kv_cache_read (type %d, block_size %lu, "
                  "sequence %lu): %lu elements differ\n",
                  __FILE__, __LINE__, (int)kTypes[type],
                  (unsigned long)config.block_size, (unsigned long)s,
                  (unsigned long)wrong);
          ++g_failures;
        }
      }
      /* The empty sequence: views of 0 tokens. */
      CHECK_OK(simdattn_kv_cache_read(cache, 1, Dense3(keys, kHeads, 0, kD),
                                      Dense3(values, kHeads, 0, kD)));
      /* Errors; the outputs are left as they were. */
      for (i = 0; i < kHeads * kOutTokens * kStride; ++i) {
        keys[i] = values[i] = sentinel;
      }
      CHECK_ERROR(simdattn_kv_cache_read(cache, kB, Dense3(keys, kHeads, 0, kD),
                                         Dense3(values, kHeads, 0, kD)),
                  INVALID, "sequence (3)");
      CHECK_ERROR(
          simdattn_kv_cache_read(cache, 0, Dense3(keys, kHeads, kN - 1, kD),
                                 Dense3(values, kHeads, kN, kD)),
          INVALID, "expected (2, 20, 8)");
      CHECK_ERROR(simdattn_kv_cache_read(cache, 0, Dense3(keys, kHeads, kN, kD),
                                         Dense3(values, kHeads + 1, kN, kD)),
                  INVALID, "expected (2, 20, 8)");
      for (i = 0; i < kHeads * kOutTokens * kStride; ++i) {
        CHECK(keys[i] == sentinel && values[i] == sentinel);
      }
      simdattn_kv_cache_destroy(cache);
    }
  }
  CHECK_ERROR(simdattn_kv_cache_read(NULL, 0, Dense3(keys, kHeads, 0, kD),
                                     Dense3(values, kHeads, 0, kD)),
              INVALID, "simdattn_kv_cache_read: cache is null");
}

/* RoPE in a cache config: keys are rotated as appended, each at its
 * position in its sequence (across appends), as simdattn_apply_rope
 * rotates them; values are not. */
static void TestKVCacheRope(void) {
  enum { kHeads = 2, kT = 7, kFirst = 4, kD = 8 };
  float k[kHeads * kT * kD], v[kHeads * kT * kD], rotated[kHeads * kT * kD];
  float keys[kHeads * kT * kD], values[kHeads * kT * kD];
  const size_t positions[1] = {3};
  simdattn_rope_options rope = SIMDATTN_ROPE_OPTIONS_INIT;
  simdattn_kv_cache_config config = SIMDATTN_KV_CACHE_CONFIG_INIT;
  simdattn_kv_cache* cache = NULL;
  simdattn_tensor4 first_k = Dense4(k, 1, kHeads, kFirst, kD);
  simdattn_tensor4 first_v = Dense4(v, 1, kHeads, kFirst, kD);
  simdattn_tensor4 rest_k = Dense4(k + kFirst * kD, 1, kHeads, kT - kFirst, kD);
  simdattn_tensor4 rest_v = Dense4(v + kFirst * kD, 1, kHeads, kT - kFirst, kD);
  size_t i;
  first_k.strides[1] = first_v.strides[1] = kT * kD;
  rest_k.strides[1] = rest_v.strides[1] = kT * kD;
  Fill(k, sizeof(k) / sizeof(float), 91);
  Fill(v, sizeof(v) / sizeof(float), 92);
  memcpy(rotated, k, sizeof(k));
  rope.interleaved = 1;
  rope.theta = 500.0f;
  rope.rotary_dim = 6;
  CHECK_OK(simdattn_apply_rope(Dense4(rotated, 1, kHeads, kT, kD), &rope));
  config.rope = &rope;
  CHECK_OK(simdattn_kv_cache_create(1, kHeads, kT, kD, &config, &cache));
  if (cache == NULL) return;
  CHECK_OK(
      simdattn_kv_cache_append(cache, Const4(first_k), Const4(first_v), NULL));
  CHECK_OK(
      simdattn_kv_cache_append(cache, Const4(rest_k), Const4(rest_v), NULL));
  CHECK_OK(simdattn_kv_cache_read(cache, 0, Dense3(keys, kHeads, kT, kD),
                                  Dense3(values, kHeads, kT, kD)));
  for (i = 0; i < kHeads * kT * kD; ++i) {
    CHECK_NEAR(keys[i], rotated[i], 1e-6);
    CHECK(values[i] == v[i]);
  }
  simdattn_kv_cache_destroy(cache);
  cache = NULL;
  /* A cache knows its positions. */
  rope.positions = positions;
  CHECK_ERROR(simdattn_kv_cache_create(1, kHeads, kT, kD, &config, &cache),
              INVALID, "positions");
  CHECK(cache == NULL);
}

/* bf16 arithmetic over a bf16 cache: the results of simdattn_scaled_dot_
 * product_attention in bf16 arithmetic over the same (bf16-exact) q, k, v,
 * for decode and a chunk of queries, with and without a causal mask,
 * contiguous and paged; a float cache is refused. Values are multiples of
 * 1/8 and the scale a power of two, so that every score is exact whatever
 * the order of its sums. */
static void TestKVCacheBFloat16Attention(void) {
  enum { kQHeads = 4, kKvHeads = 2, kN = 20, kChunk = 3, kD = 8, kCap = 32 };
  float k[kKvHeads * kN * kD], v[kKvHeads * kN * kD];
  float q[kQHeads * kChunk * kD], out[kQHeads * kChunk * kD];
  float ref[kQHeads * kChunk * kD], before[kQHeads * kChunk * kD];
  simdattn_attention_options options = SIMDATTN_ATTENTION_OPTIONS_INIT;
  simdattn_mask cache_mask = SIMDATTN_MASK_INIT;
  simdattn_mask dense_mask = SIMDATTN_MASK_INIT;
  simdattn_kv_cache* wide = NULL;
  size_t paged, q_tokens, causal, i;
  FillEighths(k, sizeof(k) / sizeof(float), 101, 16);
  FillEighths(v, sizeof(v) / sizeof(float), 102, 16);
  FillEighths(q, sizeof(q) / sizeof(float), 103, 16);
  options.has_scale = 1;
  options.scale = 0.25f;
  options.compute = SIMDATTN_COMPUTE_BF16;
  cache_mask.causal = 1;
  dense_mask.causal = 1;
  for (paged = 0; paged < 2; ++paged) {
    simdattn_kv_cache* cache =
        FilledCache(SIMDATTN_BF16, paged, kKvHeads, kCap, kD, k, v, kN);
    if (cache == NULL) continue;
    for (q_tokens = 1; q_tokens <= kChunk; q_tokens += kChunk - 1) {
      for (causal = 0; causal < 2; ++causal) {
        size_t wrong = 0;
        const size_t n = kQHeads * q_tokens * kD;
        dense_mask.causal_offset = kN - q_tokens;
        options.mask = causal ? &cache_mask : NULL;
        CHECK_OK(simdattn_kv_cache_attention(
            Const4(Dense4(q, 1, kQHeads, q_tokens, kD)), cache,
            Dense4(out, 1, kQHeads, q_tokens, kD), &options));
        options.mask = causal ? &dense_mask : NULL;
        CHECK_OK(simdattn_scaled_dot_product_attention(
            Const4(Dense4(q, 1, kQHeads, q_tokens, kD)),
            Const4(Dense4(k, 1, kKvHeads, kN, kD)),
            Const4(Dense4(v, 1, kKvHeads, kN, kD)),
            Dense4(ref, 1, kQHeads, q_tokens, kD), &options));
        for (i = 0; i < n; ++i) wrong += !(fabs(out[i] - ref[i]) <= 1e-5);
        if (wrong != 0) {
          fprintf(stderr,
                  "%s:%d: bf16 cache attention (block_size %lu, %lu queries, "
                  "causal %lu): %lu outputs off by more than 1e-5\n",
                  __FILE__, __LINE__, (unsigned long)(paged ? 16 : 0),
                  (unsigned long)q_tokens, (unsigned long)causal,
                  (unsigned long)wrong);
          ++g_failures;
        }
      }
    }
    options.mask = NULL;
    options.compute = 3;
    memcpy(before, out, sizeof(out));
    CHECK_ERROR(
        simdattn_kv_cache_attention(Const4(Dense4(q, 1, kQHeads, 1, kD)), cache,
                                    Dense4(out, 1, kQHeads, 1, kD), &options),
        INVALID, "compute (3)");
    CHECK(memcmp(out, before, sizeof(out)) == 0);
    options.compute = SIMDATTN_COMPUTE_INT8;
    CHECK_ERROR(
        simdattn_kv_cache_attention(Const4(Dense4(q, 1, kQHeads, 1, kD)), cache,
                                    Dense4(out, 1, kQHeads, 1, kD), &options),
        INVALID, "kInt8 but the keys are bf16");
    CHECK(memcmp(out, before, sizeof(out)) == 0);
    options.compute = SIMDATTN_COMPUTE_BF16;
    simdattn_kv_cache_destroy(cache);
  }
  /* bf16 arithmetic reads a bf16 cache: a float one is refused. */
  CHECK_OK(simdattn_kv_cache_create(1, kKvHeads, kCap, kD, NULL, &wide));
  if (wide == NULL) return;
  CHECK_OK(
      simdattn_kv_cache_append(wide, Const4(Dense4(k, 1, kKvHeads, kN, kD)),
                               Const4(Dense4(v, 1, kKvHeads, kN, kD)), NULL));
  memcpy(before, out, sizeof(out));
  CHECK_ERROR(
      simdattn_kv_cache_attention(Const4(Dense4(q, 1, kQHeads, 1, kD)), wide,
                                  Dense4(out, 1, kQHeads, 1, kD), &options),
      INVALID, "compute");
  CHECK(memcmp(out, before, sizeof(out)) == 0);
  /* float32 arithmetic over it is fine. */
  options.compute = SIMDATTN_COMPUTE_FP32;
  CHECK_OK(simdattn_kv_cache_attention(Const4(Dense4(q, 1, kQHeads, 1, kD)),
                                       wide, Dense4(out, 1, kQHeads, 1, kD),
                                       &options));
  simdattn_kv_cache_destroy(wide);
}

/* context_length 0: causal modules without a bound, and without the
 * "mask" buffer in their state_dict. With the weights of one bounded by 8
 * they give its rows, and they take more than 8 tokens. */
static void TestUnboundedContext(void) {
  enum { kT = 6, kLong = 20, kIn = 4, kMaxOut = 8 };
  static const int32_t kKinds[3] = {SIMDATTN_MULTI_HEAD_ATTENTION,
                                    SIMDATTN_CAUSAL_ATTENTION,
                                    SIMDATTN_MULTI_HEAD_ATTENTION_WRAPPER};
  float x[kLong * kIn], y[kLong * kMaxOut], y_bounded[kT * kMaxOut];
  size_t kind;
  Fill(x, sizeof(x) / sizeof(float), 111);
  for (kind = 0; kind < 3; ++kind) {
    const size_t heads = kKinds[kind] == SIMDATTN_CAUSAL_ATTENTION ? 1 : 2;
    simdattn_module_config config = Config(kKinds[kind], kIn, 4, 0, heads);
    simdattn_module* unbounded = NULL;
    simdattn_module* bounded = NULL;
    simdattn_named_tensor tensors[kMaxTensors];
    size_t count = 0, bounded_count = 0, d_out = 0, loaded, i, t, o;
    int has_mask = 0;
    CHECK(config.context_length == 0);
    CHECK_OK(simdattn_module_create(&config, &unbounded));
    config.context_length = 8;
    CHECK_OK(simdattn_module_create(&config, &bounded));
    if (unbounded == NULL || bounded == NULL) {
      simdattn_module_destroy(unbounded);
      simdattn_module_destroy(bounded);
      continue;
    }
    CHECK_OK(simdattn_module_weight_count(unbounded, &count));
    CHECK(count > 0);
    for (i = 0; i < count; ++i) {
      const char* name = NULL;
      int32_t is_buffer = -1;
      CHECK_OK(simdattn_module_weight_info(unbounded, i, &name, NULL, NULL,
                                           &is_buffer));
      CHECK(name != NULL && strstr(name, "mask") == NULL);
      CHECK(is_buffer == 0);
    }
    /* The bounded one lists its mask buffer(s), which are left out here. */
    CHECK_OK(simdattn_module_weight_count(bounded, &bounded_count));
    for (i = 0; i < bounded_count; ++i) {
      const char* name = NULL;
      CHECK_OK(
          simdattn_module_weight_info(bounded, i, &name, NULL, NULL, NULL));
      has_mask |= name != NULL && strstr(name, "mask") != NULL;
    }
    CHECK(has_mask);
    loaded = LoadRandomWeights(bounded, tensors);
    CHECK(loaded == count);
    CHECK_OK(simdattn_module_load_weights(unbounded, tensors, loaded, NULL));
    CHECK_OK(simdattn_module_shape(unbounded, NULL, &d_out, NULL));
    CHECK(d_out > 0 && d_out <= kMaxOut);
    if (d_out == 0 || d_out > kMaxOut) d_out = 1;
    CHECK_OK(simdattn_module_forward(bounded, Const3(Dense3(x, 1, kT, kIn)),
                                     Dense3(y_bounded, 1, kT, d_out), NULL));
    CHECK_OK(simdattn_module_forward(unbounded, Const3(Dense3(x, 1, kT, kIn)),
                                     Dense3(y, 1, kT, d_out), NULL));
    for (i = 0; i < kT * d_out; ++i) CHECK_NEAR(y[i], y_bounded[i], 1e-6);
    /* Past 8 tokens: the bounded one refuses, the unbounded one is still
     * causal (its first rows are those of the shorter input). */
    CHECK_ERROR(
        simdattn_module_forward(bounded, Const3(Dense3(x, 1, kLong, kIn)),
                                Dense3(y, 1, kLong, d_out), NULL),
        INVALID, "exceeds context_length (8)");
    CHECK_OK(simdattn_module_forward(unbounded,
                                     Const3(Dense3(x, 1, kLong, kIn)),
                                     Dense3(y, 1, kLong, d_out), NULL));
    for (t = 0; t < kT; ++t) {
      for (o = 0; o < d_out; ++o) {
        CHECK_NEAR(y[t * d_out + o], y_bounded[t * d_out + o], 1e-5);
      }
    }
    simdattn_module_destroy(unbounded);
    simdattn_module_destroy(bounded);
  }
}

/* A latent (MLA) cache: rows [latent (4) | rope (2)], the rope dims
 * rotated on append (rotary_offset), values the first 4 dims of each row;
 * appends pass an empty values tensor; attention over it equals attention
 * over what it holds; the new fields' errors. */
/* fp8 and ggml block caches: created by type and scales, read back, and
 * attention over them equal to attention over what they hold. */
static void TestQuantizedKVCaches(void) {
  enum { kHeads = 2, kN = 5, kD = 32 };
  static const int32_t kTypes[] = {SIMDATTN_FP8_E4M3, SIMDATTN_FP8_E5M2,
                                   SIMDATTN_Q8_0, SIMDATTN_Q4_0};
  float k[kN * kD], v[kN * kD], q[kHeads * kD], out[kHeads * kD];
  float ref[kHeads * kD], keys[kN * kD], values[kN * kD];
  simdattn_kv_cache_config config = SIMDATTN_KV_CACHE_CONFIG_INIT;
  simdattn_kv_cache* cache = NULL;
  size_t t, i;
  Fill(k, kN * kD, 81);
  Fill(v, kN * kD, 82);
  Fill(q, kHeads * kD, 83);
  CHECK(config.key_scale == 0.0f && config.value_scale == 0.0f);
  for (t = 0; t < sizeof(kTypes) / sizeof(kTypes[0]); ++t) {
    config.type = kTypes[t];
    /* fp8: keys stored as k / 0.25, values as v / 4 (0: scale 1). */
    config.key_scale = t < 2 ? 0.25f : 0.0f;
    config.value_scale = t < 2 ? 4.0f : 0.0f;
    CHECK_OK(simdattn_kv_cache_create(1, 1, 8, kD, &config, &cache));
    if (cache == NULL) return;
    CHECK_OK(simdattn_kv_cache_append(cache, Const4(Dense4(k, 1, 1, kN, kD)),
                                      Const4(Dense4(v, 1, 1, kN, kD)), NULL));
    CHECK_OK(simdattn_kv_cache_read(cache, 0, Dense3(keys, 1, kN, kD),
                                    Dense3(values, 1, kN, kD)));
    for (i = 0; i < kN * kD; ++i) { /* Within 2^-2 relative, or 2^-2 of 1. */
      CHECK_NEAR(keys[i], k[i], 0.25 * (fabs(k[i]) + 1));
      CHECK_NEAR(values[i], v[i], 0.25 * (fabs(v[i]) + 1));
    }
    CHECK_OK(simdattn_kv_cache_attention(Const4(Dense4(q, 1, kHeads, 1, kD)),
                                         cache, Dense4(out, 1, kHeads, 1, kD),
                                         NULL));
    CHECK_OK(simdattn_scaled_dot_product_attention(
        Const4(Dense4(q, 1, kHeads, 1, kD)), Const4(Dense4(keys, 1, 1, kN, kD)),
        Const4(Dense4(values, 1, 1, kN, kD)), Dense4(ref, 1, kHeads, 1, kD),
        NULL));
    for (i = 0; i < kHeads * kD; ++i) CHECK_NEAR(out[i], ref[i], 1e-6);
    simdattn_kv_cache_destroy(cache);
    cache = NULL;
  }
  config.type = SIMDATTN_FP8_E4M3;
  config.key_scale = -1.0f;
  CHECK_ERROR(simdattn_kv_cache_create(1, 1, 8, kD, &config, &cache), INVALID,
              "config.key_scale (-1)");
  config.key_scale = 0.0f;
  config.type = SIMDATTN_Q8_0;
  CHECK_ERROR(simdattn_kv_cache_create(1, 1, 8, 20, &config, &cache), INVALID,
              "blocks of 32");
  config.type = SIMDATTN_IQ4_NL + 1;
  CHECK_ERROR(simdattn_kv_cache_create(1, 1, 8, kD, &config, &cache), INVALID,
              "is not a simdattn_element_type");
  CHECK(cache == NULL);
}

/* A serving step over the caller's pages: two sequences written by slot
 * (one through a negative slot that is skipped), then one varlen call of a
 * 3-token prefill and a decode, each sequence's rows against dense
 * attention over the tokens it holds. */
static void TestVarlenStep(void) {
  enum { kHeads = 2, kD = 4, kBlock = 16, kBlocks = 4, kN = 20 };
  /* Sequence 0: tokens 0..2 (slots 32..34, block 2); sequence 1: tokens
   * 3..19 (17, slots 0..15 of block 0 then 48 of block 3). */
  static const int32_t kTable[2 * 2] = {2, 0, 0, 3};
  static const size_t kLens[2] = {3, 17};
  static const size_t kStarts[3] = {0, 3, 4};
  float pool_k[kBlocks * kBlock * kD], pool_v[kBlocks * kBlock * kD];
  float k[kN * kD], v[kN * kD], q[4 * kHeads * kD], out[4 * kHeads * kD];
  float ref[kHeads * 3 * kD], q1[kHeads * 3 * kD], o1[kHeads * 3 * kD];
  float lse[kHeads * 4];
  int64_t slots[kN + 1];
  simdattn_kv_pages pages = SIMDATTN_KV_PAGES_INIT;
  simdattn_varlen_step step = SIMDATTN_VARLEN_STEP_INIT;
  simdattn_attention_options options = SIMDATTN_ATTENTION_OPTIONS_INIT;
  simdattn_mask mask = SIMDATTN_MASK_INIT;
  size_t t, h, i, c;
  Fill(k, kN * kD, 91);
  Fill(v, kN * kD, 92);
  Fill(q, 4 * kHeads * kD, 93);
  memset(pool_k, 0, sizeof(pool_k));
  memset(pool_v, 0, sizeof(pool_v));
  for (t = 0; t < kN; ++t) {
    slots[t] = t < 3 ? 32 + (int64_t)t : (t < 19 ? (int64_t)t - 3 : 48);
  }
  pages = OneHeadPages(pool_k, pool_v, kD, kBlock, kBlocks);
  CHECK_OK(simdattn_write_kv_slots(Const4(Dense4(k, 1, 1, kN, kD)),
                                   Const4(Dense4(v, 1, 1, kN, kD)), slots,
                                   &pages));
  CHECK(pool_k[32 * kD] == k[0] && pool_v[48 * kD + 3] == v[19 * kD + 3]);
  slots[1] = 32; /* Twice: an error, nothing written. */
  pool_k[33 * kD] = 7.0f;
  CHECK_ERROR(
      simdattn_write_kv_slots(Const4(Dense4(k, 1, 1, kN, kD)),
                              Const4(Dense4(v, 1, 1, kN, kD)), slots, &pages),
      INVALID, "slot 32 appears twice in slot_mapping");
  CHECK(pool_k[33 * kD] == 7.0f);
  pool_k[33 * kD] = k[kD];

  step.num_seqs = 2;
  step.query_starts = kStarts;
  step.seq_lens = kLens;
  step.block_table = kTable;
  step.blocks_per_sequence = 2;
  mask.causal = 1;
  options.mask = &mask;
  options.log_sum_exp = lse;
  /* q and out packed (4 tokens, kHeads, kD): token-major views. */
  {
    simdattn_const_tensor4 qv = {q, {1, kHeads, 4, kD}, {0, kD, kHeads * kD}};
    simdattn_tensor4 ov = {out, {1, kHeads, 4, kD}, {0, kD, kHeads * kD}};
    CHECK_OK(simdattn_varlen_attention(qv, &step, &pages, ov, &options));
  }
  /* Sequence 0: its 3 tokens, causal; sequence 1: the last of 17. */
  for (h = 0; h < kHeads; ++h) {
    for (i = 0; i < 3; ++i) {
      for (c = 0; c < kD; ++c)
        q1[(h * 3 + i) * kD + c] = q[(i * kHeads + h) * kD + c];
    }
  }
  options.log_sum_exp = NULL;
  CHECK_OK(simdattn_scaled_dot_product_attention(
      Const4(Dense4(q1, 1, kHeads, 3, kD)), Const4(Dense4(k, 1, 1, 3, kD)),
      Const4(Dense4(v, 1, 1, 3, kD)), Dense4(ref, 1, kHeads, 3, kD), &options));
  for (h = 0; h < kHeads; ++h) {
    for (i = 0; i < 3; ++i) {
      for (c = 0; c < kD; ++c) {
        CHECK_NEAR(out[(i * kHeads + h) * kD + c], ref[(h * 3 + i) * kD + c],
                   1e-6);
      }
    }
  }
  for (h = 0; h < kHeads; ++h) {
    for (c = 0; c < kD; ++c) q1[h * kD + c] = q[(3 * kHeads + h) * kD + c];
  }
  mask.causal = 0;
  CHECK_OK(simdattn_scaled_dot_product_attention(
      Const4(Dense4(q1, 1, kHeads, 1, kD)),
      Const4(Dense4(k + 3 * kD, 1, 1, 17, kD)),
      Const4(Dense4(v + 3 * kD, 1, 1, 17, kD)), Dense4(o1, 1, kHeads, 1, kD),
      &options));
  for (h = 0; h < kHeads; ++h) {
    for (c = 0; c < kD; ++c) {
      CHECK_NEAR(out[(3 * kHeads + h) * kD + c], o1[h * kD + c], 1e-6);
    }
    CHECK(lse[h * 4 + 3] == lse[h * 4 + 3]); /* Written: not NaN. */
  }
  step.query_starts = NULL;
  CHECK_ERROR(
      simdattn_varlen_attention(Const4(Dense4(q, 1, kHeads, 4, kD)), &step,
                                &pages, Dense4(out, 1, kHeads, 4, kD), NULL),
      INVALID, "VarlenAttention: query_starts is null");
  CHECK_ERROR(
      simdattn_varlen_attention(Const4(Dense4(q, 1, kHeads, 4, kD)), NULL,
                                &pages, Dense4(out, 1, kHeads, 4, kD), NULL),
      INVALID, "simdattn_varlen_attention: step is null");

  /* The step planned once: the plan's calls give the unplanned bits, and
   * refuse a pool of another shape. */
  {
    simdattn_const_tensor4 qv = {q, {1, kHeads, 4, kD}, {0, kD, kHeads * kD}};
    simdattn_tensor4 ov = {out, {1, kHeads, 4, kD}, {0, kD, kHeads * kD}};
    float planned[4 * kHeads * kD];
    simdattn_tensor4 pv = {planned, {1, kHeads, 4, kD}, {0, kD, kHeads * kD}};
    simdattn_varlen_plan* plan = NULL;
    simdattn_kv_pages other = pages;
    step.query_starts = kStarts;
    mask.causal = 1;
    options.log_sum_exp = NULL;
    CHECK_OK(simdattn_varlen_plan_create(&step, &pages, 0, &plan));
    CHECK_OK(simdattn_varlen_attention(qv, &step, &pages, ov, &options));
    CHECK_OK(simdattn_varlen_plan_attention(plan, qv, &pages, pv, &options));
    CHECK(memcmp(out, planned, sizeof(planned)) == 0);
    other.num_blocks = 3;
    CHECK_ERROR(simdattn_varlen_plan_attention(plan, qv, &other, pv, &options),
                INVALID, "differ from the planned shape");
    simdattn_varlen_plan_destroy(plan);
    plan = NULL;
    CHECK_ERROR(simdattn_varlen_plan_create(&step, &other, 0, &plan), INVALID,
                "(3) is not a block of the 3 in the pool");
    CHECK(plan == NULL);
  }
}

/* A sequence exported from a paged int8 cache and imported into a
 * contiguous one attends as before, bit for bit. */
static void TestMoveSequence(void) {
  enum { kHeads = 2, kN = 21, kD = 8 };
  float k[kN * kD], v[kN * kD], q[kHeads * kD], a[kHeads * kD], b[kHeads * kD];
  unsigned char buffer[64 + kN * (2 * kD + 8)];
  simdattn_kv_cache_config paged = SIMDATTN_KV_CACHE_CONFIG_INIT;
  simdattn_kv_cache_config contiguous = SIMDATTN_KV_CACHE_CONFIG_INIT;
  simdattn_kv_cache *from = NULL, *to = NULL;
  size_t bytes = 0, length = 0;
  Fill(k, kN * kD, 95);
  Fill(v, kN * kD, 96);
  Fill(q, kHeads * kD, 97);
  paged.type = contiguous.type = SIMDATTN_INT8;
  paged.block_size = 16;
  CHECK_OK(simdattn_kv_cache_create(1, 1, 32, kD, &paged, &from));
  CHECK_OK(simdattn_kv_cache_create(2, 1, 24, kD, &contiguous, &to));
  if (from == NULL || to == NULL) return;
  CHECK_OK(simdattn_kv_cache_append(from, Const4(Dense4(k, 1, 1, kN, kD)),
                                    Const4(Dense4(v, 1, 1, kN, kD)), NULL));
  CHECK_OK(simdattn_kv_cache_export_bytes(from, kN, &bytes));
  CHECK(bytes == 64 + kN * (2 * kD + 8)); /* 0.7: the transfer header */
  CHECK_OK(simdattn_kv_cache_export(from, 0, 0, kN, buffer, sizeof(buffer)));
  CHECK_ERROR(simdattn_kv_cache_import(to, 0, buffer, bytes - 1, kN), INVALID,
              "is less than the 568 bytes of 21 tokens");
  CHECK_OK(simdattn_kv_cache_import(to, 0, buffer, sizeof(buffer), kN));
  CHECK_OK(simdattn_kv_cache_length(to, 0, &length));
  CHECK(length == kN);
  CHECK_OK(simdattn_kv_cache_attention(Const4(Dense4(q, 1, kHeads, 1, kD)),
                                       from, Dense4(a, 1, kHeads, 1, kD),
                                       NULL));
  {
    /* Sequence 0 of `to`: its batch is 2, the other sequence empty. */
    float q2[2 * kHeads * kD], out2[2 * kHeads * kD];
    memcpy(q2, q, sizeof(q));
    memcpy(q2 + kHeads * kD, q, sizeof(q));
    /* Sequence 1 needs a token for its query: the first one, re-exported. */
    CHECK_OK(simdattn_kv_cache_export(from, 0, 0, 1, buffer, sizeof(buffer)));
    CHECK_OK(simdattn_kv_cache_import(to, 1, buffer, sizeof(buffer), 1));
    CHECK_OK(simdattn_kv_cache_attention(Const4(Dense4(q2, 2, kHeads, 1, kD)),
                                         to, Dense4(out2, 2, kHeads, 1, kD),
                                         NULL));
    memcpy(b, out2, sizeof(b));
  }
  CHECK(memcmp(a, b, sizeof(a)) == 0);
  simdattn_kv_cache_destroy(from);
  simdattn_kv_cache_destroy(to);
  to = NULL;
  contiguous.window = 8; /* 0.5: rolling windows are paged. */
  CHECK_ERROR(simdattn_kv_cache_create(1, 1, 24, kD, &contiguous, &to), INVALID,
              "config.window (8) needs a paged cache");
  CHECK(to == NULL);
}

static void TestLatentKVCache(void) {
  enum { kHeads = 3, kN = 5, kD = 6, kV = 4 };
  float rows[kN * kD], q[kHeads * kD], out[kHeads * kV], ref[kHeads * kV];
  float keys[kN * kD], values[kN * kV];
  simdattn_kv_cache_config config = SIMDATTN_KV_CACHE_CONFIG_INIT;
  simdattn_rope_options rope = SIMDATTN_ROPE_OPTIONS_INIT;
  simdattn_attention_options options = SIMDATTN_ATTENTION_OPTIONS_INIT;
  simdattn_mask mask = SIMDATTN_MASK_INIT;
  simdattn_const_tensor4 none;
  simdattn_kv_cache* cache = NULL;
  size_t i;
  memset(&none, 0, sizeof(none));
  Fill(rows, kN * kD, 71);
  Fill(q, kHeads * kD, 72);
  CHECK(config.value_dim == 0 && config.latent == 0 && config.reserved == 0 &&
        rope.rotary_offset == 0);
  rope.rotary_offset = kV;
  config.rope = &rope;
  config.value_dim = kV;
  config.latent = 1;
  CHECK_OK(simdattn_kv_cache_create(1, 1, 8, kD, &config, &cache));
  if (cache == NULL) return;
  CHECK_OK(simdattn_kv_cache_append(cache, Const4(Dense4(rows, 1, 1, kN, kD)),
                                    none, NULL));
  CHECK_ERROR(simdattn_kv_cache_append(cache, Const4(Dense4(rows, 1, 1, 1, kD)),
                                       Const4(Dense4(rows, 1, 1, 1, kV)), NULL),
              INVALID, "the cache is latent");
  CHECK_OK(simdattn_kv_cache_read(cache, 0, Dense3(keys, 1, kN, kD),
                                  Dense3(values, 1, kN, kV)));
  for (i = 0; i < kN * kV; ++i) {
    CHECK(values[i] == rows[i / kV * kD + i % kV]);
    CHECK(keys[i / kV * kD + i % kV] == rows[i / kV * kD + i % kV]);
  }
  CHECK(keys[(kN - 1) * kD + kV] != rows[(kN - 1) * kD + kV]); /* Rotated. */
  options.mask = &mask;
  mask.causal = 1;
  CHECK_OK(simdattn_kv_cache_attention(Const4(Dense4(q, 1, kHeads, 1, kD)),
                                       cache, Dense4(out, 1, kHeads, 1, kV),
                                       &options));
  mask.causal = 0;
  CHECK_OK(simdattn_scaled_dot_product_attention(
      Const4(Dense4(q, 1, kHeads, 1, kD)), Const4(Dense4(keys, 1, 1, kN, kD)),
      Const4(Dense4(values, 1, 1, kN, kV)), Dense4(ref, 1, kHeads, 1, kV),
      &options));
  for (i = 0; i < kHeads * kV; ++i) CHECK_NEAR(out[i], ref[i], 1e-6);
  simdattn_kv_cache_destroy(cache);
  cache = NULL;
  config.latent = 2;
  CHECK_ERROR(simdattn_kv_cache_create(1, 1, 8, kD, &config, &cache), INVALID,
              "config->latent (2) is neither 0 nor 1");
  config.latent = 1;
  config.reserved = 1;
  CHECK_ERROR(simdattn_kv_cache_create(1, 1, 8, kD, &config, &cache), INVALID,
              "config->reserved (1) is not 0");
  config.reserved = 0;
  config.value_dim = kD;
  CHECK_ERROR(simdattn_kv_cache_create(1, 1, 8, kD, &config, &cache), INVALID,
              "must be below the head_dim (6)");
  rope.rotary_offset = kD;
  rope.rotary_dim = 2;
  config.latent = 0;
  CHECK_ERROR(simdattn_kv_cache_create(1, 1, 8, kD, &config, &cache), INVALID,
              "config.rope.rotary_offset (6)");
}

int main(void) {
  TestRuntime();
  TestMatMul();
  TestBFloat16Compute();
  TestBatchedMatMul();
  TestPackedMatMul();
  TestSoftmax();
  TestDropout();
  TestAttention();
  TestAttentionVariants();
  TestKVCache();
  TestKVCacheTypes();
  TestTypedWeights();
  TestCausalAgainstReference();
  TestEveryModule();
  TestModuleErrors();
  TestOverflowingWeights();
  TestForwardStep();
  TestModuleVariants();
  TestRope();
  TestStructSizeZero();
  TestStructSizeGrown();
  TestAlibiSlopes();
  TestKVCacheRead();
  TestKVCacheRope();
  TestKVCacheBFloat16Attention();
  TestKVCacheInt8Attention();
  TestUnboundedContext();
  TestLatentKVCache();
  TestQuantizedKVCaches();
  TestVarlenStep();
  TestMoveSequence();
  TestModuleRope();
  TestModuleVarlen();
  TestLatentPagesReadValuesWithKeyScales();
  TestPoolOperations();
  TestFusedRopeWrite();
  if (g_failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  printf("c_api_test: all checks passed (target %s, simdattn %s)\n",
         simdattn_active_target(), simdattn_version());
  return 0;
}
