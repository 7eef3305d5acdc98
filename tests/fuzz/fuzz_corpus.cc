// Fuzzing of the corpus loader (docs/design.md §10): any file is refused with
// std::runtime_error or split into train and validation parts each longer than the context,
// from which training batches and validation windows are cut inside their text (ASan checks
// every read). Anything else is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "harness/train/data.h"
#include "tests/fuzz/fuzz_support.h"

// docs/design.md §10: the first two bytes pick the context and the batch, the rest is the file.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lpattn::harness;
  lpattn::fuzz::ByteReader in(data, size);
  const size_t context = size_t(in.Byte()) + 1;
  const size_t batch = size_t(in.Byte() % 4) + 1;
  const size_t offset = size - in.remaining();
  const lpattn::fuzz::ScratchFile file("corpus", data + offset, size - offset);
  Corpus corpus;
  try {
    corpus = LoadCorpus(file.path(), context);
  } catch (const std::runtime_error&) {
    return 0;  // refused, naming the file
  }
  if (corpus.train.size() <= context || corpus.validation.size() <= context ||
      corpus.documents < 1) {
    std::fprintf(stderr, "fuzz_corpus finding: a split with %zu train and %zu validation bytes "
                 "(%zu documents) for a context of %zu\n", corpus.train.size(),
                 corpus.validation.size(), corpus.documents, context);
    std::abort();
  }
  std::vector<uint8_t> tokens;
  TrainBatch(corpus.train, 1, 0, batch, context, tokens);
  ValidationWindows(corpus.validation, batch, context, tokens);
  return 0;
}
