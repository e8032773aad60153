#include "tools/measure/shapes.h"

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/join.h"

namespace simdattn {
namespace measure {
namespace {

// Extents as a shape's name starts: "1x12x1024x64".
std::string Dims(const std::vector<size_t>& dims) {
  return tools::Join(dims, "x");
}

// A decimal count of at most 12 digits: stoul alone would accept "+3",
// " 3" and "3abc".
bool IsCount(const std::string& item) {
  return !item.empty() && item.size() <= 12 &&
         std::all_of(item.begin(), item.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

// A positive decimal such as "50" or "30.5", of at most 12 characters.
bool IsDecimal(const std::string& item) {
  const size_t point = item.find('.');
  if (point == std::string::npos) return IsCount(item);
  return point > 0 && item.size() <= 12 && IsCount(item.substr(0, point)) &&
         IsCount(item.substr(point + 1));
}

// The rest of `flag` after `prefix`, or "" if it does not start with it.
std::string After(const std::string& flag, const std::string& prefix) {
  return flag.compare(0, prefix.size(), prefix) == 0
             ? flag.substr(prefix.size())
             : std::string();
}

// "64x64x64_Bt" -> dims {64, 64, 64}, flags {"Bt"}.
struct Parsed {
  std::vector<size_t> dims;
  std::vector<std::string> flags;
};

[[noreturn]] void Fail(const std::string& text, const char* expected) {
  throw std::invalid_argument("shape \"" + text + "\" is not of the form " +
                              expected);
}

// Whether `flag` ends in the name of an element type with a '_' in it.
bool EndsInTypeName(const std::string& flag) {
  for (unsigned t = 0; t <= static_cast<unsigned>(kLastElementType); ++t) {
    const std::string name = ElementTraitsOf(static_cast<ElementType>(t)).name;
    if (name.find('_') != std::string::npos && flag.size() >= name.size() &&
        flag.compare(flag.size() - name.size(), name.size(), name) == 0) {
      return true;
    }
  }
  return false;
}

Parsed Parse(const std::string& text, const char* expected) {
  Parsed p;
  size_t pos = text.find('_');
  const std::string dims = text.substr(0, pos);
  while (pos != std::string::npos) {
    const size_t next = text.find('_', pos + 1);
    const std::string flag = text.substr(pos + 1, next - pos - 1);
    // Digits alone, or the rest of a type's name, continue the flag before:
    // type names such as q8_0 and iq4_nl.
    if (!p.flags.empty() &&
        (IsCount(flag) || EndsInTypeName(p.flags.back() + "_" + flag))) {
      p.flags.back() += "_" + flag;
    } else {
      p.flags.push_back(flag);
    }
    pos = next;
  }
  size_t start = 0;
  while (true) {
    const size_t end = dims.find('x', start);
    const std::string item = dims.substr(start, end - start);
    if (!IsCount(item)) Fail(text, expected);
    const size_t value = std::stoul(item);
    if (value == 0) Fail(text, expected);
    p.dims.push_back(value);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return p;
}

}  // namespace

std::string MaskVariants::Name() const {
  std::string name;
  if (window != 0) name += "_window" + std::to_string(window);
  if (softcap != 0.0f) {
    std::ostringstream c;
    c << softcap;
    name += "_softcap" + c.str();
  }
  if (sinks) name += "_sinks";
  if (alibi) name += "_alibi";
  return name;
}

bool MaskVariants::Parse(const std::string& flag) {
  const std::string w = After(flag, "window"), c = After(flag, "softcap");
  if (window == 0 && IsCount(w) && std::stoul(w) > 0) {
    window = std::stoul(w);
  } else if (softcap == 0.0f && IsDecimal(c) && std::stof(c) > 0.0f) {
    softcap = std::stof(c);
  } else if (flag == "sinks" && !sinks) {
    sinks = true;
  } else if (flag == "alibi" && !alibi) {
    alibi = true;
  } else {
    return false;
  }
  return true;
}

std::vector<float> SinkLogits(size_t heads) {
  std::vector<float> sinks(heads);
  for (size_t h = 0; h < heads; ++h) sinks[h] = 1.0f - 0.5f * float(h % 5);
  return sinks;
}

double VisiblePairs(size_t queries, size_t keys, size_t offset, bool causal,
                    size_t window) {
  if (!causal && window == 0) return double(queries) * double(keys);
  double pairs = 0;
  for (size_t i = 0; i < queries; ++i) {
    // Keys [first, last) with last = min(p + 1, keys).
    const size_t p = i + offset;
    const size_t last = std::min(p + 1, keys);
    const size_t first = window != 0 && p + 1 > window ? p + 1 - window : 0;
    if (last > first) pairs += double(last - first);
  }
  return pairs;
}

namespace {

// A shape name's flag for a stored type: "" for float, else prefix + the
// type's name ("_bf16", "_kvint8").
std::string TypeSuffix(const char* prefix, ElementType type) {
  return type == ElementType::kF32
             ? std::string()
             : std::string(prefix) + ElementTraitsOf(type).name;
}

// Whether flag is prefix + the name of one of `types`, then set *type to it.
bool ParseType(const std::string& flag, const char* prefix,
               std::initializer_list<ElementType> types, ElementType* type) {
  for (const ElementType t : types) {
    if (flag == std::string(prefix) + ElementTraitsOf(t).name) {
      *type = t;
      return true;
    }
  }
  return false;
}

// Every element type but f32, by its name with `prefix`.
bool ParseStoredType(const std::string& flag, const char* prefix,
                     ElementType* type) {
  for (unsigned t = 1; t <= static_cast<unsigned>(kLastElementType); ++t) {
    if (ParseType(flag, prefix, {static_cast<ElementType>(t)}, type)) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::string MatMulShape::Name() const {
  return Dims({m, k, n}) + (transpose_b ? "_Bt" : "") +
         TypeSuffix("_", b_storage) + (cold ? "_cold" : "") +
         (bf16dot ? "_bf16dot" : "") + (packed ? "_packed" : "") +
         (a_bf16 ? "_abf16" : "");
}

double MatMulShape::Flops() const {
  return 2.0 * double(m) * double(n) * double(k);
}

std::string ScoresShape::Name() const {
  return Dims({batch, heads, rows, cols}) + (causal ? "_causal" : "") +
         variants.Name();
}

size_t ScoresShape::Elements() const { return batch * heads * rows * cols; }

double ScoresShape::SoftmaxBytes() const {
  const double read = double(batch) * double(heads) *
                      VisiblePairs(rows, cols, 0, causal, variants.window);
  return (read + double(Elements())) * sizeof(float);
}

double ScoresShape::DropoutBytes() const {
  return 2.0 * double(Elements()) * sizeof(float);
}

std::string MhaShape::Name() const {
  return (d_in == d_out ? Dims({batch, tokens, d_in, heads})
                        : Dims({batch, tokens, d_in, d_out, heads})) +
         (step ? "_step" : "") + (bf16 ? "_bf16" : "") +
         (bf16dot ? "_bf16dot" : "");
}

double AttentionFlops(size_t batch, size_t heads, size_t queries, size_t keys,
                      size_t head_dim, bool causal, size_t window) {
  // The queries are the last positions, offset keys - queries; with more
  // queries than keys, the first queries - keys see no key when masked.
  const bool masked = causal || window != 0;
  const size_t seen = masked ? std::min(queries, keys) : queries;
  const double pairs =
      VisiblePairs(seen, keys, keys - std::min(seen, keys), causal, window);
  return 4.0 * double(batch) * double(heads) * pairs * double(head_dim);
}

double MhaShape::Flops() const {
  const size_t queries = step ? 1 : tokens;
  const double bt = double(batch) * double(queries);
  // Q, K, V: (bt x d_in) (d_in x d_out) each; out_proj: d_out x d_out.
  const double projections = 3.0 * bt * d_in * d_out + bt * d_out * d_out;
  return 2.0 * projections +
         AttentionFlops(batch, heads, queries, tokens, d_out / heads, true);
}

std::string AttentionShape::Name() const {
  std::string name = Dims({batch, heads, tokens, head_dim});
  if (kv_heads != heads) name += "_kv" + std::to_string(kv_heads);
  if (queries != 1) name += "_q" + std::to_string(queries);
  if (causal) name += "_causal";
  if (dropout) name += "_dropout";
  name += variants.Name();
  if (mla != 0) name += "_mla" + std::to_string(mla);
  name += TypeSuffix("_kv", cache);
  if (page != 0) name += "_paged" + std::to_string(page);
  if (rope) name += "_rope";
  if (cold) name += "_cold";
  if (bf16dot) name += "_bf16dot";
  if (int8dot) name += "_int8dot";
  return name;
}

double AttentionShape::Flops() const {
  // Q K^T over head_dim, P V over the value dims.
  return AttentionFlops(batch, heads, QueryTokens(), tokens, head_dim, causal,
                        variants.window) *
         double(head_dim + ValueDim()) / double(2 * head_dim);
}

double AttentionShape::Bytes() const {
  const size_t read =
      variants.window != 0 ? std::min(variants.window, tokens) : tokens;
  const double row_bytes = double(ElementBytes(cache, head_dim)) +
                           (ElementTraitsOf(cache).scaled ? sizeof(float) : 0);
  const double kv =
      (mla != 0 ? 1.0 : 2.0) * double(batch) * kv_heads * read * row_bytes;
  const double q_and_out = double(batch) * heads * QueryTokens() *
                           (head_dim + ValueDim()) * sizeof(float);
  return kv + q_and_out;
}

double AttentionShape::AppendBytes() const {
  const double rows = 2.0 * double(batch) * kv_heads * tokens;
  return rows * (head_dim * sizeof(float) + ElementBytes(cache, head_dim) +
                 (ElementTraitsOf(cache).scaled ? sizeof(float) : 0));
}

const std::vector<MatMulShape>& StandardMatMulShapes() {
  static const std::vector<MatMulShape> shapes = {
      // Square.
      {64, 64, 64},
      {256, 256, 256},
      {512, 512, 512},
      {1024, 1024, 1024},
      {2048, 2048, 2048},
      // Projections of 1024 or 2048 tokens at d_model 768: out (or Q, K, V
      // alone) and the fused QKV.
      {1024, 768, 768},
      {1024, 768, 2304},
      {2048, 768, 768},
      // One head of attention at T = 1024, head_dim 64: scores = Q K^T and
      // weights V.
      {1024, 64, 1024, true},
      {1024, 1024, 64},
      // The seeds' toy example: 6 tokens, d_in 3, d_out 2.
      {6, 3, 2},
  };
  return shapes;
}

const std::vector<ScoresShape>& StandardSoftmaxShapes() {
  static const std::vector<ScoresShape> shapes = {
      {1, 12, 1024, 1024, false},
      {8, 12, 256, 256, false},
      {1, 12, 1024, 1024, true},
      {8, 12, 256, 256, true},
  };
  return shapes;
}

const std::vector<ScoresShape>& StandardDropoutShapes() {
  static const std::vector<ScoresShape> shapes = {{1, 12, 1024, 1024, false},
                                                  {8, 12, 256, 256, false}};
  return shapes;
}

const std::vector<MhaShape>& StandardMhaShapes() {
  static const std::vector<MhaShape> shapes = {
      {1, 1024, 768, 768, 12},
      {8, 256, 768, 768, 12},
      {4, 1024, 1024, 1024, 16},
      {2, 6, 3, 2, 2},
  };
  return shapes;
}

const std::vector<AttentionShape>& StandardAttentionShapes() {
  static const std::vector<AttentionShape> shapes = [] {
    std::vector<AttentionShape> list;
    const size_t prefill[][4] = {{1, 12, 1024, 64},
                                 {8, 12, 256, 64},
                                 {1, 12, 4096, 64},
                                 {1, 25, 1024, 64}};
    for (const auto& p : prefill) {
      AttentionShape s{p[0], p[1], p[1], p[2], p[3], true};
      list.push_back(s);
      if (list.size() == 1) {
        s.dropout = true;
        list.push_back(s);
        s.dropout = false;
      }
      s.causal = false;
      list.push_back(s);
    }
    list.push_back({1, 32, 8, 2048, 128, true});
    return list;
  }();
  return shapes;
}

const std::vector<AttentionShape>& StandardDecodeShapes() {
  static const std::vector<AttentionShape> shapes = {
      {1, 12, 12, 1024, 64, false, false, true},
      {1, 12, 12, 4096, 64, false, false, true},
      {8, 12, 12, 1024, 64, false, false, true},
      {8, 12, 12, 4096, 64, false, false, true},
      {1, 32, 8, 4096, 128, false, false, true},
  };
  return shapes;
}

MatMulShape ParseMatMulShape(const std::string& text) {
  constexpr const char* kForm =
      "MxKxN with optional _Bt, _bf16 or _f16, _cold, _bf16dot, _packed, "
      "_abf16 (with _packed) (e.g. 1024x64x1024_Bt)";
  const Parsed p = Parse(text, kForm);
  if (p.dims.size() != 3) Fail(text, kForm);
  MatMulShape s{p.dims[0], p.dims[1], p.dims[2]};
  for (const std::string& flag : p.flags) {
    if (flag == "Bt" && !s.transpose_b) {
      s.transpose_b = true;
    } else if (s.b_storage == ElementType::kF32 &&
               ParseType(flag, "", {ElementType::kBF16, ElementType::kF16},
                         &s.b_storage)) {
    } else if (flag == "cold" && !s.cold) {
      s.cold = true;
    } else if (flag == "bf16dot" && !s.bf16dot) {
      s.bf16dot = true;
    } else if (flag == "packed" && !s.packed) {
      s.packed = true;
    } else if (flag == "abf16" && !s.a_bf16) {
      s.a_bf16 = true;
    } else {
      Fail(text, kForm);
    }
  }
  if (s.a_bf16 && !s.packed) Fail(text, kForm);
  return s;
}

ScoresShape ParseScoresShape(const std::string& text, bool allow_mask) {
  const char* const form =
      allow_mask ? "BxHxRxC with optional _causal, _windowW, _softcapC, "
                   "_sinks, _alibi (e.g. 1x12x1024x1024_causal)"
                 : "BxHxRxC (e.g. 1x12x1024x1024)";
  const Parsed p = Parse(text, form);
  if (p.dims.size() != 4 || (!allow_mask && !p.flags.empty())) {
    Fail(text, form);
  }
  ScoresShape s{p.dims[0], p.dims[1], p.dims[2], p.dims[3]};
  for (const std::string& flag : p.flags) {
    if (flag == "causal" && !s.causal) {
      s.causal = true;
    } else if (!s.variants.Parse(flag)) {
      Fail(text, form);
    }
  }
  return s;
}

MhaShape ParseMhaShape(const std::string& text) {
  constexpr const char* kForm =
      "BxTxDxH or BxTxDINxDOUTxH with H dividing DOUT, optional _step, "
      "_bf16, _bf16dot (e.g. 1x1024x768x12_step_bf16)";
  const Parsed p = Parse(text, kForm);
  if (p.dims.size() != 4 && p.dims.size() != 5) Fail(text, kForm);
  const bool same = p.dims.size() == 4;
  MhaShape s{p.dims[0], p.dims[1], p.dims[2], same ? p.dims[2] : p.dims[3],
             same ? p.dims[3] : p.dims[4]};
  if (s.d_out % s.heads != 0) Fail(text, kForm);
  for (const std::string& flag : p.flags) {
    if (flag == "step" && !s.step) {
      s.step = true;
    } else if (flag == "bf16" && !s.bf16) {
      s.bf16 = true;
    } else if (flag == "bf16dot" && !s.bf16dot) {
      s.bf16dot = true;
    } else {
      Fail(text, kForm);
    }
  }
  return s;
}

// _kv<type> (any ElementType's name but f32's) and _pagedN (N a power of
// two, 16 to 256), each once: whether `flag` is one.
bool ParseCacheFlag(const std::string& flag, AttentionShape* s) {
  if (s->cache == KVType::kF32 && ParseStoredType(flag, "kv", &s->cache)) {
    return true;
  }
  if (s->page != 0 || flag.compare(0, 5, "paged") != 0 ||
      !IsCount(flag.substr(5)) || flag.size() > 8) {
    return false;
  }
  const size_t page = std::stoul(flag.substr(5));
  if (page < 16 || page > 256 || (page & (page - 1)) != 0) return false;
  s->page = page;
  return true;
}

AttentionShape ParseAppendShape(const std::string& text) {
  constexpr const char* kForm =
      "BxHxNxD with optional _kv<type> (bf16, f16, int8, fp8, fp8e5m2, q8_0, "
      "q4_0, q4_1, iq4_nl), _pagedN (N a power "
      "of two, 16 to 256), _rope (e.g. 8x12x512x64_kvbf16_paged16_rope)";
  const Parsed p = Parse(text, kForm);
  if (p.dims.size() != 4) Fail(text, kForm);
  AttentionShape s{p.dims[0], p.dims[1], p.dims[1], p.dims[2], p.dims[3]};
  s.decode = true;
  for (const std::string& flag : p.flags) {
    if (flag == "rope" && !s.rope) {
      s.rope = true;
    } else if (!ParseCacheFlag(flag, &s)) {
      Fail(text, kForm);
    }
  }
  return s;
}

size_t ServeShape::Sequences() const {
  size_t n = 0;
  for (const Group& g : groups) n += g.sequences;
  return n;
}

size_t ServeShape::QueryTokens() const {
  size_t n = 0;
  for (const Group& g : groups) n += g.sequences * g.tokens;
  return n;
}

size_t ServeShape::Capacity() const {
  size_t most = 0;
  for (const Group& g : groups) most = std::max(most, g.tokens);
  return context + most;
}

std::string ServeShape::Name() const {
  std::string name =
      Dims({heads, kv_heads, head_dim}) + "_ctx" + std::to_string(context);
  for (const Group& g : groups) {
    name += std::string("_") + g.kind + std::to_string(g.sequences);
    if (g.kind != 'd') name += "x" + std::to_string(g.tokens);
  }
  name += variants.Name() + TypeSuffix("_kv", cache);
  if (page != 16) name += "_paged" + std::to_string(page);
  if (tree) name += "_tree";
  if (separate) name += "_separate";
  if (planned) name += "_planned";
  return name;
}

double ServeShape::Flops() const {
  double flops = 0;
  for (const Group& g : groups) {
    flops += AttentionFlops(g.sequences, heads, g.tokens, context + g.tokens,
                            head_dim, true, variants.window);
  }
  return flops;
}

ServeShape ParseServeShape(const std::string& text) {
  constexpr const char* kForm =
      "HxGxD_ctxN (H query heads over G key/value heads of D dims, N cached "
      "tokens per sequence) with groups _dS (S sequences decoding a token), "
      "_pSxT (S prefilling T tokens), _vSxT (S verifying T draft tokens), "
      "and optional _windowW, _softcapC, _sinks, _alibi, _tree (drafts "
      "verified as a binary tree), _kv<type>, _pagedN, _separate (a call per "
      "group) or _planned (a VarlenPlan's call) (e.g. "
      "32x8x128_ctx4096_d28_p2x512_v2x5)";
  const Parsed p = Parse(text, kForm);
  if (p.dims.size() != 3 || p.dims[0] % p.dims[1] != 0) Fail(text, kForm);
  ServeShape s;
  s.heads = p.dims[0];
  s.kv_heads = p.dims[1];
  s.head_dim = p.dims[2];
  AttentionShape cache;  // The cache flags' parser fills it.
  bool has_context = false;
  for (const std::string& flag : p.flags) {
    const std::string rest = flag.empty() ? "" : flag.substr(1);
    const size_t x = rest.find('x');
    if (!has_context && IsCount(After(flag, "ctx"))) {
      s.context = std::stoul(After(flag, "ctx"));
      has_context = true;
    } else if (flag[0] == 'd' && IsCount(rest) && std::stoul(rest) > 0) {
      s.groups.push_back({'d', std::stoul(rest), 1});
    } else if ((flag[0] == 'p' || flag[0] == 'v') && x != std::string::npos &&
               IsCount(rest.substr(0, x)) && IsCount(rest.substr(x + 1)) &&
               std::stoul(rest.substr(0, x)) > 0 &&
               std::stoul(rest.substr(x + 1)) > 0) {
      s.groups.push_back({flag[0], std::stoul(rest.substr(0, x)),
                          std::stoul(rest.substr(x + 1))});
    } else if (flag == "separate" && !s.separate && !s.planned) {
      s.separate = true;
    } else if (flag == "planned" && !s.planned && !s.separate) {
      s.planned = true;
    } else if (flag == "tree" && !s.tree) {
      s.tree = true;
    } else if (!s.variants.Parse(flag) && !ParseCacheFlag(flag, &cache)) {
      Fail(text, kForm);
    }
  }
  if (!has_context || s.groups.empty()) Fail(text, kForm);
  s.cache = cache.cache;
  if (cache.page != 0) s.page = cache.page;
  return s;
}

AttentionShape ParseAttentionShape(const std::string& text, bool decode) {
  const char* const form =
      decode ? "BxHxNxD with optional _kvG (G dividing H), _windowW, "
               "_softcapC, _sinks, _alibi, _kv<type> (bf16, f16, int8, fp8, "
               "fp8e5m2, q8_0, q4_0, q4_1, iq4_nl), "
               "_qN (N queries per sequence), _pagedN (N a power of two, 16 to "
               "256), _cold, _mlaN (values "
               "the first N < D dims of each key row), _bf16dot (kv bf16, "
               "fp8 or fp8e5m2), _int8dot (kv int8, q8_0, "
               "q4_0 or iq4_nl, H / G times N at most 4) (e.g. "
               "1x12x4096x64_kvbf16_paged16)"
             : "BxHxTxD with optional _kvG (G dividing H), _causal, "
               "_dropout, _windowW, _softcapC, _sinks, _alibi, _bf16dot "
               "(e.g. 1x32x2048x128_kv8_causal)";
  const Parsed p = Parse(text, form);
  if (p.dims.size() != 4) Fail(text, form);
  AttentionShape s{p.dims[0], p.dims[1], p.dims[1], p.dims[2], p.dims[3]};
  s.decode = decode;
  for (const std::string& flag : p.flags) {
    if (flag.compare(0, 2, "kv") == 0 && IsCount(flag.substr(2))) {
      s.kv_heads = std::stoul(flag.substr(2));
      if (s.kv_heads == 0 || s.heads % s.kv_heads != 0) Fail(text, form);
    } else if (decode && ParseCacheFlag(flag, &s)) {
    } else if (decode && s.queries == 1 && flag.size() > 1 && flag[0] == 'q' &&
               IsCount(flag.substr(1))) {
      s.queries = std::stoul(flag.substr(1));
      if (s.queries == 0 || s.queries > s.tokens) Fail(text, form);
    } else if (flag == "cold" && decode && !s.cold) {
      s.cold = true;
    } else if (decode && s.mla == 0 && flag.compare(0, 3, "mla") == 0 &&
               IsCount(flag.substr(3))) {
      s.mla = std::stoul(flag.substr(3));
      if (s.mla == 0 || s.mla >= s.head_dim) Fail(text, form);
    } else if (flag == "causal" && !decode && !s.causal) {
      s.causal = true;
    } else if (flag == "dropout" && !decode && !s.dropout) {
      s.dropout = true;
    } else if (flag == "bf16dot" && !s.bf16dot) {
      s.bf16dot = true;
    } else if (flag == "int8dot" && decode && !s.int8dot) {
      s.int8dot = true;
    } else if (!s.variants.Parse(flag)) {
      Fail(text, form);
    }
  }
  // kInt8 reads caches of integer codes; with more rows per task its
  // scores would be float32's, which --check's quantized reference does not
  // model. Over a cache, kBFloat16 reads bf16 and fp8 ones.
  const ElementTraits cache = ElementTraitsOf(s.cache);
  if (s.bf16dot && s.InCache() && !cache.bf16_exact) Fail(text, form);
  if (s.int8dot &&
      (!cache.int8_scores || s.heads / s.kv_heads * s.queries > 4)) {
    Fail(text, form);
  }
  return s;
}

}  // namespace measure
}  // namespace simdattn
