// KvCache (kv_cache.h, docs/design.md §9): slots of K and V in their formats, appended to and
// read back token by token.
#include "kernels/kv_cache.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/entry/validate.h"
#include "kernels/native/kv_cache_impl.h"
#include "quant/codec.h"
#include "quant/quantizer.h"

namespace lpattn {
namespace {

[[noreturn]] void Fail(const std::string& message) {
  throw std::invalid_argument("lpattn KvCache: " + message);
}

// docs/design.md §9: the rows of padding between a paged pool's blocks, so that a head's run
// of rows in one block and in the next lie on different cache sets. A block of kv_heads x
// block_size rows is a power of two times a row, so without it every block's run of a head
// starts at the same offset modulo 4 KiB (the L1's set stride): at 2 KiB runs (int8, D 128,
// blocks of 16) a decode tile's rows and the next tile's asked-for rows fit half the sets and
// evict each other. About 512 bytes (of the narrower side's rows), at most 1/32 of a block.
int64_t BlockPadRows(const KvCacheConfig& c) {
  const int64_t element = std::min(quant::FormatBytes(c.k_format),
                                   quant::FormatBytes(c.keys_only ? c.k_format : c.v_format));
  const int64_t row_bytes = c.head_dim * element;
  return std::min((512 + row_bytes - 1) / row_bytes, c.block_size * c.kv_heads / 32);
}

// A side's storage for `elements` elements and `rows` token rows, zeroed.
void Allocate(CacheSide& side, quant::Format format, size_t elements, size_t rows, bool key) {
  side.format = format;
  if (format == quant::Format::kFp32) {
    side.values.assign(elements, 0.0f);
  } else if (quant::FormatBytes(format) == 2) {
    side.codes16.assign(elements, 0);
  } else {
    side.codes8.assign(elements, 0);
    side.scales.assign(rows, 0.0f);
    if (key && format == quant::Format::kInt8) side.sums.assign(rows, 0);
  }
}

// One appended side, encoded but not yet stored: [kv_heads][tokens] rows of codes (or values)
// and, for the 8-bit formats, a scale per row.
struct EncodedTokens {
  std::vector<float> values;
  std::vector<uint16_t> codes16;
  std::vector<uint8_t> codes8;
  std::vector<float> scales;
};

EncodedTokens Encode(quant::Format format, ConstTensor t, int64_t heads, int64_t tokens,
                     int64_t dim, const char* what) {
  EncodedTokens e;
  const size_t rows = size_t(heads * tokens), d = size_t(dim);
  const auto row = [&](size_t r) {
    return t.data + int64_t(r) / tokens * t.strides.head + int64_t(r) % tokens * t.strides.token;
  };
  if (format == quant::Format::kFp32) {
    e.values.resize(rows * d);
    for (size_t r = 0; r < rows; ++r) std::copy(row(r), row(r) + d, e.values.data() + r * d);
  } else if (quant::FormatBytes(format) == 2) {
    e.codes16.resize(rows * d);
    for (size_t r = 0; r < rows; ++r) quant::EncodeRow(format, row(r), 1.0f, &e.codes16[r * d], d);
  } else {  // a scale per token, exactly as the in-call quantizer with gran=token
    e.codes8.resize(rows * d);
    e.scales.resize(rows);
    quant::QuantSpec spec;
    spec.format = format;
    spec.granularity = quant::Granularity::kToken;
    const quant::TensorView view{t.data, 1, heads, tokens, dim, 0, t.strides.head, t.strides.token};
    quant::QuantizeToCodes(spec, view, e.codes8.data(), e.scales.data(), what);
    // An all-zero row's codes are 0 whatever its scale; the quantizer gives it 1, the cache 0,
    // the scale of what it holds: pfold (docs/math.md §4.3) takes a tile's largest token scale
    // as the unit of its weights, which an arbitrary 1 would make 1 / 127 of a real row's.
    for (size_t r = 0; r < rows; ++r) {
      const uint8_t* codes = &e.codes8[r * d];
      if (std::all_of(codes, codes + d, [](uint8_t c) { return c == 0; })) e.scales[r] = 0.0f;
    }
  }
  return e;
}

// Stores encoded rows [head][token] at tokens [first, first + tokens) of a slot.
void Store(const KvCache::Impl& c, CacheSide& side, const EncodedTokens& e, int64_t slot,
           int64_t first, int64_t tokens) {
  const int64_t heads = c.config.kv_heads;
  const size_t d = size_t(c.config.head_dim);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < tokens; ++j) {
      const size_t src = size_t(h * tokens + j), dst = c.Offset(slot, h, first + j);
      const size_t dst_row = dst / d;
      if (!e.values.empty()) {
        std::copy_n(&e.values[src * d], d, &side.values[dst]);
      } else if (!e.codes16.empty()) {
        std::copy_n(&e.codes16[src * d], d, &side.codes16[dst]);
      } else {
        std::copy_n(&e.codes8[src * d], d, &side.codes8[dst]);
        side.scales[dst_row] = e.scales[src];
        if (!side.sums.empty()) {
          int32_t sum = 0;
          for (size_t i = 0; i < d; ++i) sum += int8_t(e.codes8[src * d + i]);
          side.sums[dst_row] = sum;
        }
      }
    }
  }
}

// Points the problem at a side's storage from slot `first` on.
void BindSide(const KvCache::Impl& c, const CacheSide& side, int64_t first, bool key,
              AttentionProblem& p) {
  const int64_t dim = c.config.head_dim;
  // Contiguous: the slots' first element; paged: the pool's (the tables place every row).
  const size_t offset = c.paged() ? 0 : size_t(first * c.strides.batch);
  const size_t row = offset / size_t(dim);
  CodedKv coded;
  coded.strides = c.strides;
  coded.scale_strides = {c.strides.batch / dim, c.strides.head / dim, c.strides.token / dim};
  const int32_t* tables = c.paged() ? c.tables.data() + first * c.max_blocks : nullptr;
  if (tables != nullptr) {
    coded.block_tables = tables;
    coded.table_stride = size_t(c.max_blocks);
    coded.block_shift = c.block_shift;
    coded.block_stride = size_t(c.block_stride);
    coded.scale_block_stride = size_t(c.block_stride / dim);
  }
  if (side.format == quant::Format::kFp32) {
    coded.floats = side.values.data() + offset;
  } else if (quant::FormatBytes(side.format) == 2) {
    coded.data = side.codes16.data() + offset;
    coded.fp16 = side.format == quant::Format::kFp16;
  } else if (key && side.format == quant::Format::kInt8) {  // integer Q K^T
    p.int_qk.k_rows = reinterpret_cast<const int8_t*>(side.codes8.data()) + offset;
    p.int_qk.k_sums = side.sums.data() + row;
    p.int_qk.k_scale = side.scales.data() + row;
    p.int_qk.pairs = (size_t(dim) + 1) / 2;
    p.int_qk.slice_rows = size_t(c.config.capacity);
    p.int_qk.block_tables = coded.block_tables;
    p.int_qk.table_stride = coded.table_stride;
    p.int_qk.block_shift = coded.block_shift;
    p.int_qk.row_strides = {c.block_stride / dim, coded.scale_strides.head,
                            coded.scale_strides.token};
    return;
  } else {
    coded.codes8 = side.codes8.data() + offset;
    coded.token_scales = side.scales.data() + row;
    coded.e5m2 = side.format == quant::Format::kFp8E5M2;
    coded.int8 = side.format == quant::Format::kInt8;
    coded.no_nan = true;  // Append takes no value a scaled format cannot hold
  }
  (key ? p.k_codes : p.v_codes) = coded;
}

}  // namespace

KvCache::Impl::Impl(const KvCacheConfig& c) : config(c) {
  if (c.sequences < 1 || c.kv_heads < 1 || c.capacity < 1) {
    Fail("sequences, kv_heads and capacity must be positive, got " + std::to_string(c.sequences) +
         ", " + std::to_string(c.kv_heads) + ", " + std::to_string(c.capacity));
  }
  if (c.head_dim < 1 || c.head_dim > kMaxHeadDim) {
    Fail("head_dim must be in [1, " + std::to_string(kMaxHeadDim) + "], got " +
         std::to_string(c.head_dim));
  }
  const bool paged = c.block_size != 0;
  if (paged) {
    if (c.block_size < 1 || c.block_size > 1024 || (c.block_size & (c.block_size - 1)) != 0) {
      Fail("block_size must be 0 or a power of two in [1, 1024], got " +
           std::to_string(c.block_size));
    }
    if (c.blocks < 1 || c.blocks > std::numeric_limits<int32_t>::max()) {
      Fail("a paged cache needs blocks in [1, 2^31), got " + std::to_string(c.blocks));
    }
    if (c.layout != PagedLayout::kHeadMajor && c.layout != PagedLayout::kTokenMajor) {
      Fail("layout is not a PagedLayout");
    }
  }
  // Token rows of one side: every slot's capacity, or the pool's (its blocks' padding rows
  // included).
  const int64_t pad_rows = paged ? BlockPadRows(c) : 0;
  int64_t block_rows = 0, rows = 0, elements = 0;
  if (__builtin_mul_overflow(paged ? c.block_size : c.capacity, c.kv_heads, &block_rows) ||
      __builtin_add_overflow(block_rows, pad_rows, &block_rows) ||
      __builtin_mul_overflow(block_rows, paged ? c.blocks : c.sequences, &rows) ||
      __builtin_mul_overflow(rows, c.head_dim, &elements) ||
      elements > std::numeric_limits<int64_t>::max() / 8) {
    Fail("the storage size (tokens x kv_heads x head_dim) overflows");
  }
  if (paged) {
    block_stride = block_rows * c.head_dim;
    strides = c.layout == PagedLayout::kHeadMajor
                  ? Strides{0, c.block_size * c.head_dim, c.head_dim}
                  : Strides{0, c.head_dim, c.kv_heads * c.head_dim};
    max_blocks = (c.capacity + c.block_size - 1) / c.block_size;
    while ((int64_t(1) << block_shift) < c.block_size) ++block_shift;
    tables.assign(size_t(c.sequences * max_blocks), 0);
    table_lengths.assign(size_t(c.sequences), 0);
  } else {
    strides = {c.kv_heads * c.capacity * c.head_dim, c.capacity * c.head_dim, c.head_dim};
  }
  lengths.assign(size_t(c.sequences), 0);
  Allocate(k, c.k_format, size_t(elements), size_t(rows), true);
  if (!c.keys_only) Allocate(v, c.v_format, size_t(elements), size_t(rows), false);
}

void KvCache::Impl::ReadRow(const CacheSide& side, int64_t slot, int64_t head, int64_t token,
                            float* out) const {
  const size_t at = Offset(slot, head, token), d = size_t(config.head_dim);
  if (side.format == quant::Format::kFp32) {
    std::copy_n(&side.values[at], d, out);
  } else if (quant::FormatBytes(side.format) == 2) {
    quant::DecodeRow(side.format, &side.codes16[at], 1.0f, out, d);
  } else {
    quant::DecodeRow(side.format, &side.codes8[at], side.scales[at / d], out, d);
  }
}

void KvCache::Impl::Bind(int64_t first, AttentionProblem& problem) const {
  BindSide(*this, k, first, true, problem);
  BindSide(*this, v, first, false, problem);
}

KvCache::KvCache(const KvCacheConfig& config) : impl_(std::make_unique<Impl>(config)) {}
KvCache::~KvCache() = default;
KvCache::KvCache(KvCache&&) noexcept = default;
KvCache& KvCache::operator=(KvCache&&) noexcept = default;

const KvCacheConfig& KvCache::config() const { return impl_->config; }

int64_t KvCache::Length(int64_t sequence) const {
  if (sequence < 0 || sequence >= impl_->config.sequences) {
    Fail("sequence " + std::to_string(sequence) + " is not in [0, " +
         std::to_string(impl_->config.sequences) + ")");
  }
  return impl_->lengths[size_t(sequence)];
}

void KvCache::Append(int64_t sequence, int64_t tokens, ConstTensor k, ConstTensor v) {
  const int64_t length = Length(sequence);
  const KvCacheConfig& c = impl_->config;
  if (tokens < 1) Fail("tokens must be positive, got " + std::to_string(tokens));
  const int64_t room = impl_->Room(sequence);
  if (tokens > room - length) {
    Fail("sequence " + std::to_string(sequence) + " holds " + std::to_string(length) + " of " +
         std::to_string(room) + " tokens" + (impl_->paged() ? " its blocks have room for" : "") +
         "; " + std::to_string(tokens) + " more do not fit");
  }
  const AttentionShape rows{1, c.kv_heads, c.kv_heads, 1, tokens, c.head_dim};
  k.strides.batch = v.strides.batch = 0;
  ValidateKeyShaped(k, rows, "k");
  if (!c.keys_only) ValidateKeyShaped(v, rows, "v");
  // Both sides are encoded before either is stored, so a value one format rejects changes nothing.
  const EncodedTokens ek =
      Encode(c.k_format, k, c.kv_heads, tokens, c.head_dim, "lpattn KvCache K");
  const EncodedTokens ev =
      c.keys_only ? EncodedTokens{}
                  : Encode(c.v_format, v, c.kv_heads, tokens, c.head_dim, "lpattn KvCache V");
  Store(*impl_, impl_->k, ek, sequence, length, tokens);
  if (!c.keys_only) Store(*impl_, impl_->v, ev, sequence, length, tokens);
  impl_->lengths[size_t(sequence)] = length + tokens;
}

void KvCache::SetBlockTable(int64_t sequence, const int32_t* blocks, int64_t count,
                            int64_t new_length) {
  const int64_t length = new_length < 0 ? Length(sequence) : new_length;
  Length(sequence);  // checks the slot
  Impl& c = *impl_;
  if (!c.paged()) Fail("SetBlockTable needs a paged cache (block_size > 0)");
  if (count < 0 || count > c.max_blocks) {
    Fail("a block table holds at most " + std::to_string(c.max_blocks) + " blocks, got " +
         std::to_string(count));
  }
  if (count > 0 && blocks == nullptr) Fail("blocks is null");
  if (length > c.config.capacity || count * c.config.block_size < length) {
    Fail("sequence " + std::to_string(sequence) + " of " + std::to_string(length) +
         " tokens (capacity " + std::to_string(c.config.capacity) + ") does not fit " +
         std::to_string(count) + " blocks of " + std::to_string(c.config.block_size));
  }
  std::vector<int32_t> sorted(blocks, blocks + count);
  for (int64_t i = 0; i < count; ++i) {
    if (blocks[i] < 0 || blocks[i] >= c.config.blocks) {
      Fail("blocks[" + std::to_string(i) + "] = " + std::to_string(blocks[i]) + " is not in [0, " +
           std::to_string(c.config.blocks) + ")");
    }
  }
  std::sort(sorted.begin(), sorted.end());
  const auto repeated = std::adjacent_find(sorted.begin(), sorted.end());
  if (repeated != sorted.end()) {
    Fail("block " + std::to_string(*repeated) + " appears twice in sequence " +
         std::to_string(sequence) + "'s table");
  }
  std::copy_n(blocks, count, c.tables.begin() + sequence * c.max_blocks);
  c.table_lengths[size_t(sequence)] = count;
  c.lengths[size_t(sequence)] = length;
}

const int32_t* KvCache::BlockTable(int64_t sequence, int64_t* count) const {
  Length(sequence);  // checks the slot
  const Impl& c = *impl_;
  if (count != nullptr) *count = c.paged() ? c.table_lengths[size_t(sequence)] : 0;
  return c.paged() ? c.tables.data() + sequence * c.max_blocks : nullptr;
}

void KvCache::Truncate(int64_t sequence, int64_t length) {
  const int64_t held = Length(sequence);
  if (length < 0 || length > held) {
    Fail("cannot truncate sequence " + std::to_string(sequence) + " of " + std::to_string(held) +
         " tokens to " + std::to_string(length));
  }
  impl_->lengths[size_t(sequence)] = length;
}

void KvCache::Read(int64_t sequence, int64_t first, int64_t tokens, Tensor k, Tensor v) const {
  const int64_t length = Length(sequence);
  const KvCacheConfig& c = impl_->config;
  if (first < 0 || tokens < 1 || first > length - tokens) {
    Fail("tokens [" + std::to_string(first) + ", " + std::to_string(first + tokens) +
         ") are not in sequence " + std::to_string(sequence) + "'s [0, " + std::to_string(length) +
         ")");
  }
  const AttentionShape rows{1, c.kv_heads, c.kv_heads, 1, tokens, c.head_dim};
  k.strides.batch = v.strides.batch = 0;
  if (v.data != nullptr && c.keys_only) Fail("the cache holds keys only: Read takes no v");
  if (k.data != nullptr) ValidateKeyShaped(k, rows, "k");
  if (v.data != nullptr) ValidateKeyShaped(v, rows, "v");
  for (int64_t h = 0; h < c.kv_heads; ++h) {
    for (int64_t j = 0; j < tokens; ++j) {
      const int64_t at = h * k.strides.head + j * k.strides.token;
      if (k.data != nullptr) impl_->ReadRow(impl_->k, sequence, h, first + j, k.data + at);
      const int64_t v_at = h * v.strides.head + j * v.strides.token;
      if (v.data != nullptr) impl_->ReadRow(impl_->v, sequence, h, first + j, v.data + v_at);
    }
  }
}

size_t KvCache::StorageBytes() const {
  const auto bytes = [](const CacheSide& s) {
    return s.values.size() * sizeof(float) + s.codes16.size() * sizeof(uint16_t) +
           s.codes8.size() + s.scales.size() * sizeof(float) + s.sums.size() * sizeof(int32_t);
  };
  return bytes(impl_->k) + bytes(impl_->v);
}

Precision CachePrecision(const KvCacheConfig& config, const Precision& base) {
  Precision p = base;
  p.qk = config.k_format;
  p.pv = config.v_format;
  p.granularity = quant::Granularity::kToken;
  p.value_granularity.reset();
  p.smooth_k = false;
  p.path = ComputePath::kNative;
  return p;
}

}  // namespace lpattn
