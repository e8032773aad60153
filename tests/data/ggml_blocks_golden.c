/* Writes tests/data/ggml_blocks/golden.bin: q8_0, q4_0, q4_1 and iq4_nl
 * blocks produced by ggml's reference quantizers (quantize_row_q8_0_ref,
 * _q4_0_ref, _q4_1_ref, _iq4_nl_ref).
 *
 * Built and run by tests/data/make_ggml_blocks_golden.sh, which compiles this
 * file together with ggml's own src/ggml-quants.c (nothing of ggml is copied
 * here; this file only includes ggml's headers). See the script for usage and
 * for the ggml commit the checked-in golden.bin came from.
 *
 * File format (all little endian):
 *   8 bytes   magic "GGMLBLK2"
 *   uint32    n, the number of floats (a multiple of 32)
 *   n x f32   the inputs
 *   n/32 x 34 bytes  block_q8_0: fp16 d, then 32 x int8 qs
 *   n/32 x 18 bytes  block_q4_0: fp16 d, then 16 bytes qs
 *                    (byte j: low nibble = element j, high nibble = j + 16)
 *   n/32 x 20 bytes  block_q4_1: fp16 d, fp16 m, then 16 bytes qs
 *   n/32 x 18 bytes  block_iq4_nl: fp16 d, then 16 bytes qs; for a block
 *                    below 1e-15 in magnitude ggml leaves qs undefined
 *                    (uninitialised memory): written here as zeros
 *
 * Inputs are made here, deterministically (xorshift32 mapped to exactly
 * representable floats, then one float multiplication for the scaled cases),
 * and stored in the file, so readers need not rebuild them. Every value is
 * finite. The program prints one line per block (its case and both fp16 d's)
 * on stdout; the script stores that as tests/data/ggml_blocks/cases.txt.
 *
 * As a check on our reading of ggml, the program also re-derives every block
 * with its own implementation of the arithmetic (spec_q8_0 / spec_q4_0 below)
 * and decodes every block both with ggml's dequantize_row_* and its own
 * decoder, and fails unless all agree bit for bit.
 */

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-quants.h" /* block_*, quantize_row_*_ref, dequantize_row_* */
#include "ggml.h"

#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "float expressions must be evaluated in float (FLT_EVAL_METHOD == 0)"
#endif

_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0 must be 34 bytes");
_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0 must be 18 bytes");
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1 must be 20 bytes");
_Static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl must be 18 bytes");
_Static_assert(sizeof(float) == 4, "float must be 32 bits");

/* ---- stubs for what ggml-quants.c references but the two _ref paths never
 * call (ggml.c is not linked). Any call is a bug in this harness. ---------- */

void ggml_abort(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "ggml_abort at %s:%d: ", file, line);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  abort();
}

static void unexpected(const char *what) {
  fprintf(stderr, "unexpected call to stub %s\n", what);
  abort();
}

const char *ggml_type_name(enum ggml_type type) {
  (void)type;
  unexpected("ggml_type_name");
  return NULL;
}

size_t ggml_type_size(enum ggml_type type) {
  (void)type;
  unexpected("ggml_type_size");
  return 0;
}

size_t ggml_row_size(enum ggml_type type, int64_t ne) {
  (void)type;
  (void)ne;
  unexpected("ggml_row_size");
  return 0;
}

/* ---- inputs ------------------------------------------------------------- */

enum { QK = 32, NB = 64, N = NB * QK };

static float xs[N];
static const char *labels[NB];
static int nblk;

static uint32_t rng = 0x2545F491u;

static uint32_t next_u32(void) {
  uint32_t x = rng;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  rng = x;
  return x;
}

/* Sum of four 22-bit uniforms, centred: an integer in [-2^23, 2^23) times
 * 2^-21, so exact in float; in [-4, 4), standard deviation about 1.15. */
static float normalish(void) {
  int32_t s = 0;
  for (int i = 0; i < 4; i++) s += (int32_t)(next_u32() >> 10);
  return (float)(s - (1 << 23)) * 0x1p-21f;
}

/* Uniform in [-1, 1), exact in float. */
static float uniform(void) {
  return (float)((int32_t)(next_u32() >> 8) - (1 << 23)) * 0x1p-23f;
}

static float *new_block(const char *label) {
  if (nblk >= NB) {
    fprintf(stderr, "too many blocks\n");
    exit(1);
  }
  labels[nblk] = label;
  return &xs[QK * nblk++];
}

static void fill_normal(float *b, float scale) {
  for (int j = 0; j < QK; j++) b[j] = normalish() * scale;
}

/* Values strictly inside (-bound, bound). */
static void fill_uniform(float *b, float bound) {
  for (int j = 0; j < QK; j++) b[j] = uniform() * bound * 0.99f;
}

static void fill_list(float *b, int from, const float *v, int count) {
  if (from + count != QK) {
    fprintf(stderr, "case list has %d entries, want %d\n", count, QK - from);
    exit(1);
  }
  for (int i = 0; i < count; i++) b[from + i] = v[i];
}

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* A block whose largest |x| is `extreme` at position `pos`, the rest
 * uniform strictly inside (-|extreme|, |extreme|). */
static void extreme_block(const char *label, int pos, float extreme) {
  float *b = new_block(label);
  fill_uniform(b, fabsf(extreme));
  b[pos] = extreme;
}

static int clamp15(int v) { return v < 15 ? v : 15; }

/* whether |x| is among b[1..m-1] (b[0] holds the block's max) */
static int used(const float *b, int m, float x) {
  for (int i = 1; i < m; i++)
    if (fabsf(b[i]) == fabsf(x)) return 1;
  return 0;
}

enum { SCAN = 64 }; /* ulps searched each side of a rounding step */

static void make_inputs(void) {
  /* ordinary values */
  for (int i = 0; i < 16; i++) fill_normal(new_block("normal x1"), 1.0f);

  /* scales; fp16 d is subnormal for q8_0 at 1e-3 to 1e-5 and zero from
   * 1e-6, subnormal for q4_0 at 1e-4 to 1e-6 and zero (-0) at 1e-8, while
   * qs stay nonzero (they are made from the float32 d) */
  static const struct {
    const char *label;
    float scale;
    int count;
  } scaled[] = {
      {"normal x1e-3", 1e-3f, 2}, {"normal x1e3", 1e3f, 2},
      {"normal x1e-4", 1e-4f, 2}, {"normal x1e-5", 1e-5f, 2},
      {"normal x1e-6", 1e-6f, 2}, {"normal x1e-8", 1e-8f, 1},
      {"normal x3e4", 3e4f, 2},
  };
  for (int s = 0; s < COUNT(scaled); s++)
    for (int i = 0; i < scaled[s].count; i++)
      fill_normal(new_block(scaled[s].label), scaled[s].scale);

  /* zeros: q4_0's d is 0.0f / -8 = -0.0, stored as fp16 0x8000 */
  {
    float *b = new_block("all +0.0");
    for (int j = 0; j < QK; j++) b[j] = 0.0f;
    b = new_block("all -0.0");
    for (int j = 0; j < QK; j++) b[j] = -0.0f;
  }

  /* sign of the largest magnitude (q4_0 scales by the signed max) */
  {
    float *b = new_block("largest |x| negative (-9.5 at 11)");
    fill_normal(b, 1.0f);
    b[11] = -9.5f;
    b = new_block("largest |x| positive (9.5 at 22)");
    fill_normal(b, 1.0f);
    b[22] = 9.5f;
  }

  /* q8_0 ties: amax 127 gives d = 1, id = 1, so x * id = x exactly */
  {
    static const float v[] = {
        0.5f,       -0.5f,      1.5f,   -1.5f,   2.5f,        -2.5f,
        3.5f,       -3.5f,      10.5f,  -10.5f,  63.5f,       -63.5f,
        64.5f,      -64.5f,     100.5f, -100.5f, 125.5f,      -125.5f,
        126.5f,     -126.5f,    0.25f,  -0.75f,  0.49999997f, -0.49999997f,
        1.4999999f, 2.5000002f, 0.0f,   -0.0f,   -127.0f,     42.0f,
        126.49999f,
    };
    float *b = new_block("q8_0 ties, d = 1 (127 at 0)");
    b[0] = 127.0f;
    fill_list(b, 1, v, COUNT(v));
  }
  /* q8_0 ties: amax 63.5 gives d = 0.5, id = 2; every x * id is k + 0.5 */
  {
    float *b = new_block("q8_0 ties, d = 0.5 (-63.5 at 5)");
    for (int j = 0; j < QK; j++)
      b[j] = ((float)((j * 37) % 254 - 127) + 0.5f) * 0.5f;
    b[5] = -63.5f;
  }

  /* q4_0 ties and clamps: max -8 gives d = 1, id = 1; q = min(15,
   * trunc(x + 8.5f)) with x + 8.5f rounded to float first */
  {
    static const float v[] = {
        0.5f,  -0.5f, 6.5f,  -7.5f,       7.4f,         7.5f,
        7.6f,  -7.6f, -7.9f, 0.49999997f, -0.50000006f, -0.49999997f,
        1.5f,  -1.5f, 2.5f,  -2.5f,       3.5f,         -3.5f,
        4.5f,  -4.5f, 5.5f,  -5.5f,       -6.5f,        7.0f,
        -7.0f, 8.0f,  0.0f,  -0.0f,       7.4999995f,   -7.4999995f,
        1e-7f,
    };
    float *b = new_block("q4_0 ties, d = 1 (-8 at 0)");
    b[0] = -8.0f;
    fill_list(b, 1, v, COUNT(v));
  }
  /* the same with max +8 (d = -1, id = -1), and an equal -8 after it */
  {
    static const float v[] = {
        -8.0f,      6.5f,        -6.5f,        7.4f,        -7.4f,        7.6f,
        -7.6f,      0.49999997f, -0.49999997f, 0.50000006f, -0.50000006f, 1.5f,
        -1.5f,      2.5f,        -2.5f,        3.5f,        -3.5f,        4.5f,
        -4.5f,      5.5f,        -5.5f,        -7.5f,       7.9f,         -7.9f,
        7.4999995f, -7.4999995f, 0.0f,         -0.0f,
    };
    float *b = new_block("q4_0 ties, d = -1 (8 at 3, -8 at 4)");
    b[0] = 0.5f;
    b[1] = -0.5f;
    b[2] = 7.5f;
    b[3] = 8.0f;
    fill_list(b, 4, v, COUNT(v));
  }

  /* a single nonzero value */
  {
    float *b = new_block("single nonzero (-3.7 at 17)");
    memset(b, 0, QK * sizeof(float));
    b[17] = -3.7f;
    b = new_block("single nonzero (2.25 at 0)");
    memset(b, 0, QK * sizeof(float));
    b[0] = 2.25f;
    b = new_block("single nonzero (1e-3 at 31)");
    memset(b, 0, QK * sizeof(float));
    b[31] = 1e-3f;
  }

  /* equal magnitudes, opposite signs: q4_0 takes the first one */
  {
    float *b = new_block("equal |max|: -5 at 3, +5 at 20");
    fill_normal(b, 0.4f);
    b[3] = -5.0f;
    b[20] = 5.0f;
    b = new_block("equal |max|: +5 at 7, -5 at 23");
    fill_normal(b, 0.4f);
    b[7] = 5.0f;
    b[23] = -5.0f;
    b = new_block("alternating +0.3, -0.3");
    for (int j = 0; j < QK; j++) b[j] = (j & 1) ? -0.3f : 0.3f;
    b = new_block("alternating -0.3, +0.3");
    for (int j = 0; j < QK; j++) b[j] = (j & 1) ? 0.3f : -0.3f;
  }

  /* fp16 rounding of d at exact ties (round to nearest even) */
  extreme_block("q8_0 d = 1 + 2^-11 (fp16 tie, down)", 9,
                127.0f * (1.0f + 0x1p-11f));
  extreme_block("q8_0 d = 1 + 3*2^-11 (fp16 tie, up)", 30,
                -127.0f * (1.0f + 0x3p-11f));
  extreme_block("q4_0 d = 1 + 2^-11 (fp16 tie, down)", 12,
                -8.0f * (1.0f + 0x1p-11f));
  extreme_block("q4_0 d = -(1 + 3*2^-11) (fp16 tie, up)", 1,
                8.0f * (1.0f + 0x3p-11f));
  extreme_block("q8_0 d = 1.5*2^-24 (fp16 subnormal tie)", 4,
                127.0f * 0x3p-25f);
  extreme_block("q8_0 d = 2.5*2^-24 (fp16 subnormal tie)", 4,
                -127.0f * 0x5p-25f);
  extreme_block("q8_0 d = 1023.5*2^-24 (tie to min normal)", 4,
                127.0f * 0x7FFp-25f);
  extreme_block("q4_0 d = 0.5*2^-24 (fp16 tie to zero)", 6, -8.0f * 0x1p-25f);
  extreme_block("q4_0 d = 1.5*2^-24 (fp16 subnormal tie)", 6, -8.0f * 0x3p-25f);
  extreme_block("q4_0 d = 1023.5*2^-24 (tie to min normal)", 6,
                -8.0f * 0x7FFp-25f);

  /* q8_0: values near the k + 0.5 steps of x * id where that product in
   * float (ggml) rounds differently from x / d in float (first pass), or
   * from the product or quotient taken in double (second pass). amax 1
   * gives d = 1/127 and an inexact id. */
  {
    float *b = new_block("q8_0 x*id discriminators (1 at 0)");
    fill_uniform(b, 1.0f);
    b[0] = 1.0f;
    const float d = b[0] / 127.0f;
    const float id = 1.0f / d;
    int m = 1;
    for (int pass = 0; pass < 2; pass++) {
      for (int k = 0; k < 127 && m < QK; k++) {
        float x = ((float)k + 0.5f) * d;
        for (int i = 0; i < SCAN; i++) x = nextafterf(x, -INFINITY);
        for (int s = 0; s <= 2 * SCAN; s++, x = nextafterf(x, INFINITY)) {
          if (!(x < 1.0f) || used(b, m, x)) continue;
          const float ours = roundf(x * id);
          const int hit =
              pass == 0 ? ours != roundf(x / d)
                        : (double)ours != round((double)x * (double)id) ||
                              (double)ours != round((double)x / (double)d);
          if (hit) {
            b[m] = (m & 1) ? x : -x;
            m++;
            break;
          }
        }
      }
    }
    if (m < 16) {
      fprintf(stderr, "q8_0 discriminator search found only %d\n", m - 1);
      exit(1);
    }
  }
  /* q4_0: values near the truncation steps of x * id + 8.5f where that
   * (in float, ggml) differs from x / d + 8.5f (first pass), or from the
   * same in double or from floor(x * id + 0.5f) + 8 (second pass, up to
   * four per step). max -1.3 gives an inexact d and id. */
  {
    float *b = new_block("q4_0 x*id discriminators (-1.3 at 0)");
    fill_uniform(b, 1.3f);
    b[0] = -1.3f;
    const float d = b[0] / -8.0f;
    const float id = 1.0f / d;
    int m = 1;
    for (int pass = 0; pass < 2; pass++) {
      for (int k = 1; k <= 16 && m < QK; k++) {
        float x = ((float)k - 8.5f) * d;
        for (int i = 0; i < SCAN; i++) x = nextafterf(x, -INFINITY);
        int found = 0;
        for (int s = 0; s <= 2 * SCAN && found < (pass ? 4 : 1) && m < QK;
             s++, x = nextafterf(x, INFINITY)) {
          if (!(fabsf(x) < 1.3f) || used(b, m, x)) continue;
          const int ours = clamp15((int8_t)(x * id + 8.5f));
          const int hit =
              pass == 0
                  ? ours != clamp15((int8_t)(x / d + 8.5f))
                  : ours != clamp15((int)floor((double)x * (double)id + 8.5)) ||
                        ours != clamp15((int)floorf(x * id + 0.5f) + 8);
          if (hit) {
            b[m++] = x;
            found++;
          }
        }
      }
    }
    if (m < 16) {
      fprintf(stderr, "q4_0 discriminator search found only %d\n", m - 1);
      exit(1);
    }
  }

  /* q4_1: all equal (d = 0, codes 0, m the value); ties of (x - min) * id
   * + 0.5 with min -7.5 and max 7.5 (d = 1, id = 1) */
  {
    float *b = new_block("q4_1 all equal 1.25");
    for (int j = 0; j < QK; j++) b[j] = 1.25f;
    b = new_block("q4_1 ties, d = 1 (-7.5 at 0, 7.5 at 1)");
    for (int j = 0; j < QK; j++) b[j] = (float)(j % 15) - 7.0f;
    b[0] = -7.5f;
    b[1] = 7.5f;
  }
  /* iq4_nl: max -127 gives 1 / d = 1, so the first pass looks up x itself:
   * midpoints between the table's values (ties go to the upper one) */
  {
    static const float v[] = {
        -115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
        7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f, 113.0f,
        -4.4999995f, -4.5000005f, 7.0000005f, 6.9999995f, 0.0f, -0.0f,
        120.0f,  -126.0f, 1.0f,  -10.0f, 13.0f,  -22.0f,  25.0f,  38.0f,
        112.99999f,
    };
    float *b = new_block("iq4_nl midpoints (-127 at 0)");
    b[0] = -127.0f;
    fill_list(b, 1, v, COUNT(v));
  }

  while (nblk < NB - 4) fill_normal(new_block("normal x1"), 1.0f);

  /* overflow of d to fp16: finite inputs, d stored as +-inf (RNE: 65520
   * and up round to inf, below it to 65504). Kept last so a test that
   * rejects such blocks by design can stop at block NB - 4. */
  extreme_block("overflow: q8_0 d = 65519 -> 65504, q4_0 d -> -inf", 2,
                127.0f * 65519.0f);
  extreme_block("overflow: q8_0 d = 65520 -> inf (tie), q4_0 d -> inf", 2,
                -127.0f * 65520.0f);
  extreme_block("overflow: q4_0 d = 65519 -> 65504", 2, -8.0f * 65519.0f);
  extreme_block("overflow: q4_0 d = -65520 -> -inf (tie)", 2, 8.0f * 65520.0f);

  if (nblk != NB) {
    fprintf(stderr, "made %d blocks, want %d\n", nblk, NB);
    exit(1);
  }
}

/* ---- our own statement of the arithmetic, used only as a check ----------- */

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* float32 -> IEEE binary16, round to nearest even; >= 65520 in magnitude
 * gives inf; NaN gives a quiet NaN (not used here). */
static uint16_t spec_f16(float f) {
  const uint32_t w = f32_bits(f);
  const uint16_t sign = (uint16_t)((w >> 16) & 0x8000u);
  const uint32_t a = w & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u;
  if (a >= 0x477FF000u) return sign | 0x7C00u; /* 65520 and up */
  if (a >= 0x38800000u) {                      /* 2^-14 and up: normal */
    uint32_t h = (a - 0x38000000u) >> 13;
    const uint32_t rem = a & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return sign | (uint16_t)h;
  }
  /* subnormal or zero: round |f| / 2^-24 to an integer, nearest even */
  const uint32_t e = a >> 23;
  const uint32_t m = e ? (a & 0x7FFFFFu) | 0x800000u : a;
  const uint32_t shift = 126u - (e ? e : 1u); /* |f| * 2^24 = m >> shift */
  if (shift >= 32u) return sign;
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) q++;
  return sign | (uint16_t)q;
}

static float spec_f16_to_f32(uint16_t h) {
  const float sign = (h & 0x8000u) ? -1.0f : 1.0f;
  const int e = (h >> 10) & 0x1F;
  const int m = h & 0x3FF;
  if (e == 0x1F) return m ? NAN : sign * INFINITY;
  if (e == 0) return sign * ldexpf((float)m, -24);
  return sign * ldexpf((float)(m | 0x400), e - 25);
}

static void spec_q8_0(const float *x, uint8_t out[34]) {
  float amax = 0.0f;
  for (int j = 0; j < QK; j++)
    if (fabsf(x[j]) > amax) amax = fabsf(x[j]);
  const float d = amax / 127.0f; /* float division */
  const float id = (d != 0.0f) ? 1.0f / d : 0.0f;
  const uint16_t dh = spec_f16(d);
  out[0] = (uint8_t)(dh & 0xFF);
  out[1] = (uint8_t)(dh >> 8);
  for (int j = 0; j < QK; j++) {
    const float scaled = x[j] * id; /* float product */
    const long q = lroundf(scaled); /* half away from zero */
    out[2 + j] = (uint8_t)(int8_t)q;
  }
}

static void spec_q4_0(const float *x, uint8_t out[18]) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < QK; j++) {
    if (fabsf(x[j]) > amax) { /* first strictly larger |x| wins */
      amax = fabsf(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = (d != 0.0f) ? 1.0f / d : 0.0f;
  const uint16_t dh = spec_f16(d);
  out[0] = (uint8_t)(dh & 0xFF);
  out[1] = (uint8_t)(dh >> 8);
  uint8_t nib[QK];
  for (int j = 0; j < QK; j++) {
    const float t = x[j] * id + 8.5f; /* two float roundings */
    const int q = (int)truncf(t);     /* t is in [0, 17) here */
    nib[j] = (uint8_t)clamp15(q);
  }
  for (int j = 0; j < QK / 2; j++)
    out[2 + j] = (uint8_t)(nib[j] | (nib[j + QK / 2] << 4));
}

/* ---- output -------------------------------------------------------------- */

static uint8_t *put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  return p + 2;
}

static uint8_t *put_u32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
  return p + 4;
}

static int same_float(float a, float b) {
  return (isnan(a) && isnan(b)) || f32_bits(a) == f32_bits(b);
}

static block_q8_0 q8[NB];
static block_q4_0 q4[NB];
static block_q4_1 q41[NB];
static block_iq4_nl iq4[NB];
static float deq[N];

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUTPUT.bin\n", argv[0]);
    return 2;
  }

  make_inputs();
  for (int i = 0; i < N; i++) {
    if (!isfinite(xs[i])) {
      fprintf(stderr, "input %d is not finite\n", i);
      return 1;
    }
  }

  quantize_row_q8_0_ref(xs, q8, N);
  quantize_row_q4_0_ref(xs, q4, N);
  quantize_row_q4_1_ref(xs, q41, N);
  quantize_row_iq4_nl_ref(xs, iq4, N);
  for (int b = 0; b < NB; b++) {
    float amax = 0.0f;
    for (int j = 0; j < QK; j++)
      if (fabsf(xs[QK * b + j]) > amax) amax = fabsf(xs[QK * b + j]);
    if (amax < 1e-15f) memset(iq4[b].qs, 0, sizeof(iq4[b].qs));
  }

  static uint8_t file[8 + 4 + 4 * N + 34 * NB + 18 * NB + 20 * NB + 18 * NB];
  uint8_t *p = file;
  memcpy(p, "GGMLBLK2", 8);
  p += 8;
  p = put_u32(p, (uint32_t)N);
  for (int i = 0; i < N; i++) p = put_u32(p, f32_bits(xs[i]));
  for (int b = 0; b < NB; b++) {
    p = put_u16(p, q8[b].d);
    memcpy(p, q8[b].qs, 32);
    p += 32;
  }
  for (int b = 0; b < NB; b++) {
    p = put_u16(p, q4[b].d);
    memcpy(p, q4[b].qs, 16);
    p += 16;
  }
  for (int b = 0; b < NB; b++) {
    p = put_u16(p, q41[b].d);
    p = put_u16(p, q41[b].m);
    memcpy(p, q41[b].qs, 16);
    p += 16;
  }
  for (int b = 0; b < NB; b++) {
    p = put_u16(p, iq4[b].d);
    memcpy(p, iq4[b].qs, 16);
    p += 16;
  }
  if (p != file + sizeof(file)) {
    fprintf(stderr, "size bookkeeping is off\n");
    return 1;
  }

  /* check: our own arithmetic gives the same bytes */
  int bad = 0;
  const uint8_t *q8bytes = file + 12 + 4 * N;
  const uint8_t *q4bytes = q8bytes + 34 * NB;
  for (int b = 0; b < NB; b++) {
    uint8_t s8[34], s4[18];
    spec_q8_0(xs + QK * b, s8);
    spec_q4_0(xs + QK * b, s4);
    if (memcmp(s8, q8bytes + 34 * b, 34)) {
      fprintf(stderr, "block %d: q8_0 differs from our arithmetic\n", b);
      bad = 1;
    }
    if (memcmp(s4, q4bytes + 18 * b, 18)) {
      fprintf(stderr, "block %d: q4_0 differs from our arithmetic\n", b);
      bad = 1;
    }
  }
  /* check: ggml's dequantizers are q * d with d widened from fp16 */
  dequantize_row_q8_0(q8, deq, N);
  for (int i = 0; i < N; i++) {
    const block_q8_0 *blk = &q8[i / QK];
    const float want = (float)blk->qs[i % QK] * spec_f16_to_f32(blk->d);
    if (!same_float(deq[i], want)) {
      fprintf(stderr, "q8_0 dequant differs at %d\n", i);
      bad = 1;
    }
  }
  dequantize_row_q4_0(q4, deq, N);
  for (int i = 0; i < N; i++) {
    const block_q4_0 *blk = &q4[i / QK];
    const int j = i % QK;
    const int nib =
        j < QK / 2 ? (blk->qs[j] & 0x0F) : (blk->qs[j - QK / 2] >> 4);
    const float want = (float)(nib - 8) * spec_f16_to_f32(blk->d);
    if (!same_float(deq[i], want)) {
      fprintf(stderr, "q4_0 dequant differs at %d\n", i);
      bad = 1;
    }
  }
  /* check: q4_1 is nib * d + m (the product exact, one rounding), iq4_nl
   * d * value */
  static const int8_t values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};
  dequantize_row_q4_1(q41, deq, N);
  for (int i = 0; i < N; i++) {
    const block_q4_1 *blk = &q41[i / QK];
    const int j = i % QK;
    const int nib =
        j < QK / 2 ? (blk->qs[j] & 0x0F) : (blk->qs[j - QK / 2] >> 4);
    const float want =
        (float)nib * spec_f16_to_f32(blk->d) + spec_f16_to_f32(blk->m);
    if (!same_float(deq[i], want)) {
      fprintf(stderr, "q4_1 dequant differs at %d\n", i);
      bad = 1;
    }
  }
  dequantize_row_iq4_nl(iq4, deq, N);
  for (int i = 0; i < N; i++) {
    const block_iq4_nl *blk = &iq4[i / QK];
    const int j = i % QK;
    const int nib =
        j < QK / 2 ? (blk->qs[j] & 0x0F) : (blk->qs[j - QK / 2] >> 4);
    const float want = spec_f16_to_f32(blk->d) * (float)values[nib];
    if (!same_float(deq[i], want)) {
      fprintf(stderr, "iq4_nl dequant differs at %d\n", i);
      bad = 1;
    }
  }
  if (bad) return 1;

  FILE *f = fopen(argv[1], "wb");
  if (!f || fwrite(file, 1, sizeof(file), f) != sizeof(file) ||
      fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", argv[1]);
    return 1;
  }

  printf("# golden.bin: n = %d floats, %d blocks, %zu bytes\n", N, NB,
         sizeof(file));
  printf("# block  q8_0.d  q4_0.d  q4_1.d  q4_1.m  iq4_nl.d  case\n");
  for (int b = 0; b < NB; b++)
    printf("%2d  0x%04x  0x%04x  0x%04x  0x%04x  0x%04x  %s\n", b, q8[b].d,
           q4[b].d, q41[b].d, q41[b].m, iq4[b].d, labels[b]);
  return 0;
}
