// The forward of docs/harness.md §1 (pre-LayerNorm blocks, tanh-GELU MLP, a head tied to the
// token embedding) one chunk of tokens at a time, over lpattn's KV cache.
#include "gpt.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace engine {
namespace {

// out[r][o] = b[o] + sum_c in[r][c] w[o][c]: the harness's [out][in] matrices.
void Linear(float* out, const float* in, const float* w, const float* b, int64_t rows,
            int64_t in_dim, int64_t out_dim) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * in_dim;
    for (int64_t o = 0; o < out_dim; ++o) {
      const float* w_o = w + o * in_dim;
      float sum = b != nullptr ? b[o] : 0.0f;
      for (int64_t c = 0; c < in_dim; ++c) sum += x[c] * w_o[c];
      out[r * out_dim + o] = sum;
    }
  }
}

// Over each row of C channels: (x - mean) / sqrt(var + 1e-5) * w + b, var the biased one.
void LayerNorm(float* out, const float* in, const float* w, const float* b, int64_t rows,
               int64_t C) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in + r * C;
    float mean = 0.0f, var = 0.0f;
    for (int64_t c = 0; c < C; ++c) mean += x[c];
    mean /= float(C);
    for (int64_t c = 0; c < C; ++c) var += (x[c] - mean) * (x[c] - mean);
    const float rstd = 1.0f / std::sqrt(var / float(C) + 1e-5f);
    for (int64_t c = 0; c < C; ++c) out[r * C + c] = (x[c] - mean) * rstd * w[c] + b[c];
  }
}

void Gelu(float* x, int64_t n) {
  const float k = std::sqrt(2.0f / float(M_PI));
  for (int64_t i = 0; i < n; ++i) {
    x[i] = 0.5f * x[i] * (1.0f + std::tanh(k * (x[i] + 0.044715f * x[i] * x[i] * x[i])));
  }
}

void AddTo(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace

Gpt::Gpt(const Checkpoint& checkpoint, int64_t sequences, const CacheOptions& cache)
    : ck_(checkpoint), tables_(size_t(sequences)) {
  const ModelShape& m = ck_.model;
  lpattn::KvCacheConfig config;
  config.sequences = sequences;
  config.kv_heads = m.n_head;
  config.head_dim = m.n_embd / m.n_head;
  config.capacity = m.context;
  config.k_format = config.v_format = cache.format;
  if (cache.block_size > 0) {
    config.block_size = cache.block_size;
    config.blocks = sequences * ((m.context + cache.block_size - 1) / cache.block_size);
  }
  for (int64_t l = 0; l < m.n_layer; ++l) caches_.emplace_back(config);

  options_.causal = true;
  options_.sink = ck_.arm.sink;
  options_.softcap = ck_.arm.softcap;
  options_.window = ck_.arm.window;
  if (ck_.arm.alibi) {
    alibi_slopes_ = lpattn::AlibiSlopes(m.n_head);
    options_.alibi_slopes = alibi_slopes_.data();
  }
}

size_t Gpt::CacheBytes() const {
  size_t bytes = 0;
  for (const lpattn::KvCache& cache : caches_) bytes += cache.StorageBytes();
  return bytes;
}

void Gpt::Reserve(int64_t s, int64_t tokens) {
  const int64_t block = caches_.front().config().block_size;
  std::vector<int32_t>& table = tables_[size_t(s)];
  if (block == 0 || int64_t(table.size()) * block >= tokens) return;
  while (int64_t(table.size()) * block < tokens) table.push_back(next_block_++);
  for (lpattn::KvCache& cache : caches_) {
    cache.SetBlockTable(s, table.data(), int64_t(table.size()));
  }
}

const std::vector<float>& Gpt::Forward(const std::vector<std::vector<uint8_t>>& chunks) {
  const ModelShape& m = ck_.model;
  const int64_t C = m.n_embd;
  if (chunks.size() != tables_.size()) {
    throw std::invalid_argument("Forward: " + std::to_string(chunks.size()) + " chunks for " +
                                std::to_string(tables_.size()) + " sequences");
  }
  slots_.clear();
  offsets_.assign(1, 0);
  for (size_t s = 0; s < chunks.size(); ++s) {
    if (chunks[s].empty()) continue;
    const int64_t end = Length(int64_t(s)) + int64_t(chunks[s].size());
    if (end > m.context) {
      throw std::invalid_argument("sequence " + std::to_string(s) + " would hold " +
                                  std::to_string(end) + " tokens; the model's context is " +
                                  std::to_string(m.context));
    }
    slots_.push_back(int64_t(s));
    offsets_.push_back(offsets_.back() + int64_t(chunks[s].size()));
  }
  const int64_t rows = offsets_.back();
  logits_.resize(size_t(rows * m.vocab));
  if (rows == 0) return logits_;
  for (const int64_t s : slots_) Reserve(s, Length(s) + int64_t(chunks[size_t(s)].size()));

  // The embedding: token plus learned position (the sequence's length so far, onwards).
  x_.resize(size_t(rows * C));
  for (size_t a = 0; a < slots_.size(); ++a) {
    const std::vector<uint8_t>& chunk = chunks[size_t(slots_[a])];
    const int64_t start = Length(slots_[a]);
    for (size_t i = 0; i < chunk.size(); ++i) {
      float* x = x_.data() + (offsets_[a] + int64_t(i)) * C;
      const float* token = ck_.wte + int64_t(chunk[i]) * C;
      const float* position = ck_.wpe + (start + int64_t(i)) * C;
      for (int64_t c = 0; c < C; ++c) x[c] = token[c] + position[c];
    }
  }
  for (size_t l = 0; l < caches_.size(); ++l) Block(l, rows);
  ln_.resize(size_t(rows * C));
  LayerNorm(ln_.data(), x_.data(), ck_.lnf_w, ck_.lnf_b, rows, C);
  Linear(logits_.data(), ln_.data(), ck_.wte, nullptr, rows, C, m.vocab);  // the tied head
  return logits_;
}

// x += Attn(LN1(x)); x += MLP(LN2(x)), the call's new keys and values appended first so that
// each query sees its own token (causal, bottom-right aligned per sequence).
void Gpt::Block(size_t layer, int64_t rows) {
  const LayerWeights& w = ck_.layers[layer];
  const int64_t C = ck_.model.n_embd, H = ck_.model.n_head, D = C / H;
  ln_.resize(size_t(rows * C));
  qkv_.resize(size_t(rows * 3 * C));
  att_.resize(size_t(rows * C));
  proj_.resize(size_t(rows * C));
  fc_.resize(size_t(rows * 4 * C));
  lse_.resize(size_t(rows * H));

  LayerNorm(ln_.data(), x_.data(), w.ln1_w, w.ln1_b, rows, C);
  Linear(qkv_.data(), ln_.data(), w.qkv_w, w.qkv_b, rows, C, 3 * C);
  // qkv rows hold q, k, v side by side: [rows, H, D] views of token stride 3C.
  const lpattn::Strides qkv_strides{0, D, 3 * C}, out_strides{0, D, C};
  lpattn::KvCache& cache = caches_[layer];
  for (size_t a = 0; a < slots_.size(); ++a) {
    const float* row = qkv_.data() + offsets_[a] * 3 * C;
    cache.Append(slots_[a], offsets_[a + 1] - offsets_[a], {row + C, qkv_strides},
                 {row + 2 * C, qkv_strides});
  }
  const lpattn::AttentionShape shape{.batch = int64_t(slots_.size()), .heads = H,
                                     .kv_heads = H, .q_len = 1, .kv_len = 1, .head_dim = D};
  lpattn::AttentionOptions options = options_;
  options.sink_logits = w.sink;
  lpattn::ExactForward(shape, options, {qkv_.data(), qkv_strides}, cache,
                       {att_.data(), out_strides}, lse_.data(), slots_.data(), offsets_.data());

  Linear(proj_.data(), att_.data(), w.attproj_w, w.attproj_b, rows, C, C);
  AddTo(x_.data(), proj_.data(), rows * C);
  LayerNorm(ln_.data(), x_.data(), w.ln2_w, w.ln2_b, rows, C);
  Linear(fc_.data(), ln_.data(), w.fc_w, w.fc_b, rows, C, 4 * C);
  Gelu(fc_.data(), rows * 4 * C);
  Linear(proj_.data(), fc_.data(), w.fcproj_w, w.fcproj_b, rows, 4 * C, C);
  AddTo(x_.data(), proj_.data(), rows * C);
}

}  // namespace engine
