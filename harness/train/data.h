// Training data (docs/harness.md §2): a UTF-8 corpus of documents, split by document into
// train (90%) and validation (10%) deterministically, and sampled as random windows of bytes
// from a seeded generator, so matched runs (same seed) see the same windows whatever the arm.
#ifndef LPATTN_HARNESS_TRAIN_DATA_H_
#define LPATTN_HARNESS_TRAIN_DATA_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "harness/common/counter_rng.h"

namespace lpattn::harness {

// Documents are separated by a line holding only kDocumentSeparator; a file without one is a
// single document.
inline constexpr const char* kDocumentSeparator = "\x1e";  // ASCII record separator

struct Corpus {
  std::vector<uint8_t> train;       // concatenated training documents
  std::vector<uint8_t> validation;  // concatenated validation documents
  size_t documents = 0;
};

// Reads a corpus file and splits it: document d goes to validation iff d % 10 == 9, so the
// split is deterministic and independent of any seed. With fewer than 10 documents (a plain
// text file is one) the documents' concatenated text is split instead: its last tenth is the
// validation part. Throws std::runtime_error for a missing or unreadable file, an empty file, or a
// split whose train or validation part is not longer than `context` bytes.
Corpus LoadCorpus(const std::string& path, size_t context);

// The default corpus: the Brown corpus, tags stripped, cached by scripts/fetch_corpus.sh.
// Looks in $LPATTN_DATA_DIR, then ~/.cache/lpattn; throws std::runtime_error saying how to
// fetch it when absent.
std::string DefaultCorpusPath();


// Batch `step` of training windows: tokens[b * (T + 1) + t] for b < B, t <= T, each window a
// contiguous slice of `data` starting at a position drawn from SplitMix64(seed, 0, step * B +
// b). Inputs are the first T bytes of each window, targets the last T.
void TrainBatch(const std::vector<uint8_t>& data, uint64_t seed, uint64_t step, size_t B,
                size_t T, std::vector<uint8_t>& tokens);

// The fixed validation windows: `count` windows of T + 1 bytes, evenly spaced over the
// validation text (no randomness: the same for every seed and arm).
void ValidationWindows(const std::vector<uint8_t>& data, size_t count, size_t T,
                       std::vector<uint8_t>& tokens);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_TRAIN_DATA_H_
