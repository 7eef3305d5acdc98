// kv_read: the read ceiling of a decode step's K and V (docs/performance.md §4.10). A pass
// reads every kv head's rows in token order, as the step's tasks read them, from a pool laid out
// as a KvCache holds it (contiguous, or paged in blocks of block_size tokens, head- or
// token-major, the blocks in reverse order as exact_decode_paged scatters them), asking for
// each row 64 rows ahead as the decode tiles do, and adds the bytes up: no attention arithmetic.
// What a layout costs the memory system alone, so that exact_decode_paged's time can be read
// against its own layout's ceiling and not only against the contiguous cache's. order:blocks
// reads a paged pool block by block instead (all heads of a block, the blocks split over the
// threads): the ceiling of a step whose tasks would cover every kv head of their blocks.
// order:tiles reads a contiguous pool as a decode step's tiles do (kTileK K rows, then their
// V rows, nothing asked for ahead), on one thread and on two.
//   kv_read/Tk:<T>/D:<D>/Hkv:<H>/bytes:<element bytes>/block:<0 = contiguous>/layout:<...>
//   [/order:blocks|tiles]/threads:<n>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>
#include <string>
#include <vector>

#include "bench/peak_bw.h"
#include "bench/peak_loop.h"
#include "kernels/native/huge_pages.h"
#include "kernels/skeleton/tile_sizes.h"

namespace lpattn::bench {
namespace {

constexpr size_t kRowsAhead = 64;

struct KvPool {
  size_t tokens, heads, row_bytes, block;  // block 0: contiguous [head][token]
  bool token_major;
  size_t bytes() const { return tokens * heads * row_bytes; }
  // Byte offset of (head, token)'s row: block t / block lies at pool block (blocks - 1 - that).
  size_t RowOffset(size_t head, size_t t) const {
    if (block == 0) return (head * tokens + t) * row_bytes;
    const size_t blocks = tokens / block, physical = blocks - 1 - t / block, r = t % block;
    const size_t row = token_major ? (physical * block + r) * heads + head
                                   : (physical * heads + head) * block + r;
    return row * row_bytes;
  }
};

// A pool side in huge pages as a KvCache's rows are (its first write faults the pages in).
using PoolBytes = std::vector<uint8_t, native::HugePageAllocator<uint8_t>>;

// Rows 0 .. rows - 1 of a pass over K and V, row i at byte offset(i), read in order with
// row i + 64 asked for as row i is read; returns a sum of their 8-byte words.
template <class Offset>
uint64_t ReadRows(const KvPool& pool, const uint8_t* k, const uint8_t* v, size_t rows,
                  const Offset& offset) {
  uint64_t sum = 0;
  for (size_t i = 0; i < rows; ++i) {
    if (i + kRowsAhead < rows) {
      const size_t ahead = offset(i + kRowsAhead);
      for (size_t b = 0; b < pool.row_bytes; b += 64) {
        __builtin_prefetch(k + ahead + b, 0, 2);
        __builtin_prefetch(v + ahead + b, 0, 2);
      }
    }
    const size_t at = offset(i);
    for (size_t b = 0; b < pool.row_bytes; b += 8) {
      uint64_t x, y;
      std::memcpy(&x, k + at + b, 8);
      std::memcpy(&y, v + at + b, 8);
      sum += x ^ y;
    }
  }
  return sum;
}

// Heads [first, last) of K and V, each head's rows in token order.
uint64_t ReadHeads(const KvPool& pool, const uint8_t* k, const uint8_t* v, size_t first,
                   size_t last) {
  uint64_t sum = 0;
  for (size_t h = first; h < last; ++h) {
    sum += ReadRows(pool, k, v, pool.tokens, [&](size_t t) { return pool.RowOffset(h, t); });
  }
  return sum;
}

// Pool blocks [first, last) of K and V read whole, in the pool's order: every head's rows of a
// block before the next block's (a paged pool only). What a decode task would read if it
// covered all kv heads of its blocks instead of one head.
uint64_t ReadBlocks(const KvPool& pool, const uint8_t* k, const uint8_t* v, size_t first,
                    size_t last) {
  return ReadRows(pool, k, v, (last - first) * pool.heads * pool.block, [&](size_t i) {
    const size_t block = first + i / (pool.heads * pool.block);
    const size_t head = i / pool.block % pool.heads;
    return pool.RowOffset(head, block * pool.block + i % pool.block);
  });
}

// Heads [first, last), each read a key tile at a time as a decode tile reads a contiguous
// cache: the tile's kTileK K rows, then its V rows, nothing asked for ahead (as the int8
// step's tiles leave a contiguous head's 8-bit rows to the hardware, AsksDecodeRows).
uint64_t ReadTiles(const KvPool& pool, const uint8_t* k, const uint8_t* v, size_t first,
                   size_t last) {
  uint64_t sum = 0;
  for (size_t h = first; h < last; ++h) {
    for (size_t t0 = 0; t0 < pool.tokens; t0 += kTileK) {
      const size_t end = std::min(pool.tokens, t0 + kTileK);
      for (const uint8_t* side : {k, v}) {
        for (size_t t = t0; t < end; ++t) {
          const uint8_t* row = side + pool.RowOffset(h, t);
          for (size_t b = 0; b < pool.row_bytes; b += 8) {
            uint64_t x;
            std::memcpy(&x, row + b, 8);
            sum ^= x;
          }
        }
      }
    }
  }
  return sum;
}

// How a pass walks the pool: head by head with requests ahead (ReadHeads), block by block
// (ReadBlocks), or head by head a key tile at a time without requests (ReadTiles).
enum class ReadOrder { kHeads, kBlocks, kTiles };

void BM_KvRead(benchmark::State& state, KvPool pool, ReadOrder order, int threads) {
  const double peak = MeasuredPeakBandwidth(threads);
  const PoolBytes k(pool.bytes(), 1), v(pool.bytes(), 1);
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  for (auto _ : state) {
    RunConcurrently(threads, [&](int t) {
      // The heads, or the blocks, split over the threads.
      const size_t units = order == ReadOrder::kBlocks ? pool.tokens / pool.block : pool.heads;
      const size_t first = units * size_t(t) / size_t(threads);
      const size_t last = units * size_t(t + 1) / size_t(threads);
      switch (order) {
        case ReadOrder::kHeads:
          sums[size_t(t)] = ReadHeads(pool, k.data(), v.data(), first, last);
          break;
        case ReadOrder::kBlocks:
          sums[size_t(t)] = ReadBlocks(pool, k.data(), v.data(), first, last);
          break;
        case ReadOrder::kTiles:
          sums[size_t(t)] = ReadTiles(pool, k.data(), v.data(), first, last);
          break;
      }
    });
    benchmark::DoNotOptimize(sums.data());
  }
  const double gb = 2.0 * double(pool.bytes()) * 1e-9 * double(state.iterations());
  state.counters["GBps"] = benchmark::Counter(gb, benchmark::Counter::kIsRate);
  state.counters["bw_frac"] = benchmark::Counter(gb / peak, benchmark::Counter::kIsRate);
}

// The decode benchmarks' shape (Tk 32768, D 128, Hkv 8), fp32 rows and 8-bit ones, in the
// layouts exact_decode_cache and exact_decode_paged read.
void Register(const KvPool& pool, size_t element, ReadOrder order, int threads) {
  const char* layout = pool.block == 0 ? "contiguous" : pool.token_major ? "token" : "head";
  const char* order_name = order == ReadOrder::kBlocks  ? "/order:blocks"
                           : order == ReadOrder::kTiles ? "/order:tiles"
                                                        : "";
  const std::string name = "kv_read/Tk:" + std::to_string(pool.tokens) + "/D:" +
                           std::to_string(pool.row_bytes / element) + "/Hkv:" +
                           std::to_string(pool.heads) + "/bytes:" +
                           std::to_string(element) + "/block:" +
                           std::to_string(pool.block) + "/layout:" + layout + order_name +
                           "/threads:" + std::to_string(threads);
  benchmark::RegisterBenchmark(name.c_str(), BM_KvRead, pool, order, threads)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

const bool kRegistered = [] {
  constexpr size_t kTokens = 32768, kDim = 128, kHeads = 8;
  for (const size_t element : {4, 1}) {
    for (const auto& [block, token_major] : std::vector<std::pair<size_t, bool>>{
             {0, false}, {16, false}, {128, false}, {16, true}, {128, true}}) {
      const KvPool pool{kTokens, kHeads, kDim * element, block, token_major};
      Register(pool, element, ReadOrder::kHeads, 2);
      if (block != 0) Register(pool, element, ReadOrder::kBlocks, 2);
    }
    // A contiguous cache read as the decode tiles read it, on one thread and on two.
    const KvPool contiguous{kTokens, kHeads, kDim * element, 0, false};
    for (const int threads : {1, 2}) Register(contiguous, element, ReadOrder::kTiles, threads);
  }
  return true;
}();

}  // namespace
}  // namespace lpattn::bench
