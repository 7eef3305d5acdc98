// Training data (docs/harness.md §2): corpus loading, the document split, and the seeded
// window sampler.
#include "harness/train/data.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string_view>
#include <system_error>

namespace lpattn::harness {
namespace {

std::string Quoted(const std::string& path) { return "'" + path + "'"; }

std::vector<uint8_t> ReadFile(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (!fs::exists(status)) {
    throw std::runtime_error("corpus file " + Quoted(path) + " does not exist");
  }
  if (fs::is_directory(status)) {
    throw std::runtime_error("corpus file " + Quoted(path) + " is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open corpus file " + Quoted(path));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (in.bad()) throw std::runtime_error("cannot read corpus file " + Quoted(path));
  return bytes;
}

struct Span {
  size_t begin;
  size_t size;
};

// Document byte ranges: the lines between separator lines, each line with its newline. A
// separator line may end in "\r\n". Empty documents (a leading, trailing or repeated
// separator) are dropped, so they neither count nor shift the split.
std::vector<Span> Documents(const std::vector<uint8_t>& bytes) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const std::string_view separator(kDocumentSeparator);
  std::vector<Span> documents;
  size_t document_begin = 0;
  size_t line_begin = 0;
  auto close_document = [&](size_t end) {
    if (end > document_begin) documents.push_back({document_begin, end - document_begin});
  };
  while (line_begin < text.size()) {
    const size_t newline = text.find('\n', line_begin);
    const size_t line_end = newline == std::string_view::npos ? text.size() : newline + 1;
    std::string_view line = text.substr(line_begin, line_end - line_begin);
    if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line == separator) {
      close_document(line_begin);
      document_begin = line_end;
    }
    line_begin = line_end;
  }
  close_document(text.size());
  return documents;
}

void CheckWindowArguments(const char* function, const std::vector<uint8_t>& data, size_t T) {
  if (data.size() <= T) {
    throw std::invalid_argument(std::string(function) + ": data of " + std::to_string(data.size()) +
                                " bytes holds no window of " + std::to_string(T + 1) +
                                " bytes (context " + std::to_string(T) + " + 1)");
  }
}


}  // namespace

Corpus LoadCorpus(const std::string& path, size_t context) {
  const std::vector<uint8_t> bytes = ReadFile(path);
  if (bytes.empty()) throw std::runtime_error("corpus file " + Quoted(path) + " is empty");
  const std::vector<Span> documents = Documents(bytes);
  if (documents.empty()) {
    throw std::runtime_error("corpus file " + Quoted(path) +
                             " holds no documents, only separator lines");
  }

  Corpus corpus;
  corpus.documents = documents.size();
  const size_t n = documents.size();
  size_t validation_documents = 0;
  if (n < 10) {
    // Too few documents to split by document: the last tenth of the text validates.
    for (const Span& document : documents) {
      const auto first = bytes.begin() + static_cast<ptrdiff_t>(document.begin);
      corpus.train.insert(corpus.train.end(), first, first + static_cast<ptrdiff_t>(document.size));
    }
    const auto cut = corpus.train.end() - static_cast<ptrdiff_t>(corpus.train.size() / 10);
    corpus.validation.assign(cut, corpus.train.end());
    corpus.train.erase(cut, corpus.train.end());
  } else {
    for (size_t d = 0; d < n; ++d) {
      const bool validation = d % 10 == 9;
      std::vector<uint8_t>& part = validation ? corpus.validation : corpus.train;
      const auto first = bytes.begin() + static_cast<ptrdiff_t>(documents[d].begin);
      part.insert(part.end(), first, first + static_cast<ptrdiff_t>(documents[d].size));
      validation_documents += validation ? 1 : 0;
    }
  }

  if (corpus.train.size() <= context || corpus.validation.size() <= context) {
    throw std::runtime_error(
        "corpus file " + Quoted(path) + " is too short for a context of " +
        std::to_string(context) + " bytes: its " + std::to_string(n) + " document(s) split into " +
        std::to_string(corpus.train.size()) + " train bytes and " +
        std::to_string(corpus.validation.size()) +
        " validation bytes; each part must be longer than the context");
  }
  return corpus;
}

std::string DefaultCorpusPath() {
  namespace fs = std::filesystem;
  std::vector<std::string> candidates;
  if (const char* dir = std::getenv("LPATTN_DATA_DIR"); dir != nullptr && *dir != '\0') {
    candidates.push_back((fs::path(dir) / "brown.txt").string());
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    candidates.push_back((fs::path(home) / ".cache" / "lpattn" / "brown.txt").string());
  }
  std::string looked;
  for (const std::string& candidate : candidates) {
    std::error_code error;
    if (fs::is_regular_file(candidate, error)) return candidate;
    looked += (looked.empty() ? "" : ", ") + candidate;
  }
  throw std::runtime_error(
      "the Brown corpus is not cached (looked for " +
      (looked.empty() ? std::string("it, but neither LPATTN_DATA_DIR nor HOME is set") : looked) +
      "); fetch it with scripts/fetch_corpus.sh, or pass a corpus file");
}

void TrainBatch(const std::vector<uint8_t>& data, uint64_t seed, uint64_t step, size_t B, size_t T,
                std::vector<uint8_t>& tokens) {
  CheckWindowArguments("TrainBatch", data, T);
  const uint64_t starts = data.size() - T;  // windows of T + 1 bytes fit at [0, size - T)
  tokens.resize(B * (T + 1));
  for (size_t b = 0; b < B; ++b) {
    const uint64_t start = SplitMix64(seed, 0, step * B + b) % starts;
    std::copy_n(data.begin() + static_cast<ptrdiff_t>(start), T + 1,
                tokens.begin() + static_cast<ptrdiff_t>(b * (T + 1)));
  }
}

void ValidationWindows(const std::vector<uint8_t>& data, size_t count, size_t T,
                       std::vector<uint8_t>& tokens) {
  CheckWindowArguments("ValidationWindows", data, T);
  // Starts floor(i * last / (count - 1)): the first window at 0, the last ending at the last
  // byte, computed without overflowing i * last.
  const uint64_t last = data.size() - T - 1;
  tokens.resize(count * (T + 1));
  for (size_t i = 0; i < count; ++i) {
    uint64_t start = 0;
    if (count > 1) {
      const uint64_t gaps = count - 1;
      start = i * (last / gaps) + i * (last % gaps) / gaps;
    }
    std::copy_n(data.begin() + static_cast<ptrdiff_t>(start), T + 1,
                tokens.begin() + static_cast<ptrdiff_t>(i * (T + 1)));
  }
}

}  // namespace lpattn::harness
