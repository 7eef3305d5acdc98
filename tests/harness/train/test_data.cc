// Training data (harness/train/data.cc): the document split, the seeded training windows, the fixed
// validation windows and the error messages, on small corpora written to a temporary folder.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/train/data.h"

namespace lpattn::harness {
namespace {

namespace fs = std::filesystem;

std::vector<uint8_t> Bytes(const std::string& text) { return {text.begin(), text.end()}; }

// Document d: a tag naming it plus d + 3 lines, so every document has its own length.
std::string Document(int d) {
  std::string text = "document " + std::to_string(d) + "\n";
  for (int line = 0; line < d + 3; ++line) text += "line " + std::to_string(line) + " of it\n";
  return text;
}

std::string Join(const std::vector<std::string>& documents) {
  std::string text;
  for (size_t d = 0; d < documents.size(); ++d) {
    if (d > 0) text += std::string(kDocumentSeparator) + "\n";
    text += documents[d];
  }
  return text;
}

std::vector<std::string> Documents(int count) {
  std::vector<std::string> documents;
  for (int d = 0; d < count; ++d) documents.push_back(Document(d));
  return documents;
}

// The bytes of the listed documents, concatenated in order.
std::vector<uint8_t> Concatenation(const std::vector<std::string>& documents,
                                   const std::vector<int>& which) {
  std::string text;
  for (int d : which) text += documents[d];
  return Bytes(text);
}

// Expects `call` to throw E with a message containing every one of `parts`.
template <typename E>
void ExpectThrowsWith(const std::function<void()>& call, const std::vector<std::string>& parts) {
  try {
    call();
    ADD_FAILURE() << "no exception";
  } catch (const E& error) {
    const std::string message = error.what();
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
    }
  }
}

// Restores an environment variable when the test ends.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    Set(value);
  }
  ~ScopedEnv() { Set(old_); }

 private:
  void Set(const std::optional<std::string>& value) {
    if (value) {
      setenv(name_, value->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  const char* name_;
  std::optional<std::string> old_;
};

class DataFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "lpattn-data-test.XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }

  fs::path dir_;
};

using DataSplit = DataFileTest;

TEST_F(DataSplit, EveryTenthDocumentGoesToValidation) {
  const std::vector<std::string> documents = Documents(23);
  const std::string text = Join(documents);
  const Corpus corpus = LoadCorpus(Write("corpus.txt", text), 16);
  EXPECT_EQ(corpus.documents, 23u);
  std::vector<int> train;
  for (int d = 0; d < 23; ++d) {
    if (d != 9 && d != 19) train.push_back(d);
  }
  EXPECT_EQ(corpus.train, Concatenation(documents, train));
  EXPECT_EQ(corpus.validation, Concatenation(documents, {9, 19}));
  // Every byte but the 22 separator lines lands in exactly one part.
  EXPECT_EQ(corpus.train.size() + corpus.validation.size(), text.size() - 22 * 2);
}

TEST_F(DataSplit, ExactlyTenDocumentsValidateOnTheLast) {
  const std::vector<std::string> documents = Documents(10);
  const Corpus corpus = LoadCorpus(Write("corpus.txt", Join(documents)), 8);
  EXPECT_EQ(corpus.documents, 10u);
  EXPECT_EQ(corpus.train, Concatenation(documents, {0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(corpus.validation, Concatenation(documents, {9}));
}

// Too few documents to split by document: the concatenated text's last tenth validates.
void ExpectSplitByBytes(const Corpus& corpus, const std::vector<uint8_t>& all) {
  const size_t cut = all.size() - all.size() / 10;
  EXPECT_EQ(corpus.train, std::vector<uint8_t>(all.begin(), all.begin() + long(cut)));
  EXPECT_EQ(corpus.validation, std::vector<uint8_t>(all.begin() + long(cut), all.end()));
}

TEST_F(DataSplit, FewerThanTenDocumentsSplitTheirTextNinetyTen) {
  for (int count : {2, 4, 9}) {
    SCOPED_TRACE(std::to_string(count) + " documents");
    const std::vector<std::string> documents = Documents(count);
    std::vector<int> all;
    for (int d = 0; d < count; ++d) all.push_back(d);
    const Corpus corpus = LoadCorpus(Write("corpus.txt", Join(documents)), 8);
    EXPECT_EQ(corpus.documents, static_cast<size_t>(count));
    ExpectSplitByBytes(corpus, Concatenation(documents, all));
  }
}

TEST_F(DataSplit, FileWithoutSeparatorsIsOneDocument) {
  // Any UTF-8 text file works (docs/harness.md §2): one document, split 90/10 by bytes.
  const std::string text = Document(50);
  const Corpus corpus = LoadCorpus(Write("plain.txt", text), 8);
  EXPECT_EQ(corpus.documents, 1u);
  ExpectSplitByBytes(corpus, Bytes(text));
}

TEST_F(DataSplit, SeparatorLinesOnly) {
  const std::string rs = kDocumentSeparator;
  // A separator must be a whole line (a "\r\n" ending is accepted); one inside a line is text.
  const std::string inline_rs = "alpha " + rs + " still alpha, and some more text\n";
  const std::string text = rs + "\n" + inline_rs + rs + "\r\n" + rs + "\n" + "beta\n" + rs;
  const Corpus corpus = LoadCorpus(Write("corpus.txt", text), 2);
  // The leading, repeated and trailing separators delimit empty documents, which are dropped.
  EXPECT_EQ(corpus.documents, 2u);
  ExpectSplitByBytes(corpus, Bytes(inline_rs + "beta\n"));
}

TEST_F(DataSplit, LastDocumentWithoutFinalNewline) {
  const Corpus corpus =
      LoadCorpus(Write("corpus.txt", "first one, a longer line\n\x1e\nsecond one"), 2);
  EXPECT_EQ(corpus.documents, 2u);
  ExpectSplitByBytes(corpus, Bytes("first one, a longer line\nsecond one"));
}

using DataErrors = DataFileTest;

TEST_F(DataErrors, MissingFile) {
  const std::string path = (dir_ / "absent.txt").string();
  ExpectThrowsWith<std::runtime_error>([&] { LoadCorpus(path, 8); }, {path, "does not exist"});
}

TEST_F(DataErrors, Directory) {
  const std::string path = dir_.string();
  ExpectThrowsWith<std::runtime_error>([&] { LoadCorpus(path, 8); }, {path, "directory"});
}

TEST_F(DataErrors, EmptyFile) {
  const std::string path = Write("empty.txt", "");
  ExpectThrowsWith<std::runtime_error>([&] { LoadCorpus(path, 8); }, {path, "is empty"});
}

TEST_F(DataErrors, OnlySeparators) {
  const std::string path = Write("separators.txt", "\x1e\n\x1e\n");
  ExpectThrowsWith<std::runtime_error>([&] { LoadCorpus(path, 8); }, {path, "no documents"});
}

TEST_F(DataErrors, ContextLongerThanData) {
  // 17 bytes in two documents: split 16 / 1 by bytes (fewer than ten documents).
  const std::string path = Write("short.txt", "abcdefghij\n\x1e\nklmno\n");
  ExpectThrowsWith<std::runtime_error>(
      [&] { LoadCorpus(path, 64); },
      {path, "too short", "context of 64 bytes", "16 train bytes", "1 validation bytes"});
  // Each part must be longer than the context: 21 documents of 20 bytes validate on 2 of them.
  std::string text;
  for (int d = 0; d < 21; ++d) text += std::string(d ? "\x1e\n" : "") + "0123456789abcdefghi\n";
  const std::string many = Write("many.txt", text);
  ExpectThrowsWith<std::runtime_error>([&] { LoadCorpus(many, 40); }, {"40 validation bytes"});
  EXPECT_NO_THROW(LoadCorpus(many, 39));
}

TEST(DataDefaultPath, PrefersDataDirThenHomeCache) {
  const fs::path root =
      fs::temp_directory_path() / ("lpattn-data-path-" + std::to_string(getpid()));
  fs::create_directories(root / "data");
  fs::create_directories(root / "home" / ".cache" / "lpattn");
  const ScopedEnv data_dir("LPATTN_DATA_DIR", (root / "data").string());
  const ScopedEnv home("HOME", (root / "home").string());

  ExpectThrowsWith<std::runtime_error>(
      [] { DefaultCorpusPath(); },
      {(root / "data" / "brown.txt").string(),
       (root / "home" / ".cache" / "lpattn" / "brown.txt").string(), "fetch_corpus.sh"});

  std::ofstream(root / "home" / ".cache" / "lpattn" / "brown.txt") << "text\n";
  EXPECT_EQ(DefaultCorpusPath(), (root / "home" / ".cache" / "lpattn" / "brown.txt").string());
  std::ofstream(root / "data" / "brown.txt") << "text\n";
  EXPECT_EQ(DefaultCorpusPath(), (root / "data" / "brown.txt").string());
  fs::remove_all(root);
}

// Data whose bytes differ from their neighbours', so a wrong offset shows.
std::vector<uint8_t> Ramp(size_t size) {
  std::vector<uint8_t> data(size);
  for (size_t i = 0; i < size; ++i) data[i] = static_cast<uint8_t>((i * 7 + i / 251) % 256);
  return data;
}

TEST(DataSampler, SplitMix64IsPinned) {
  // Windows must not change across versions, or resumed and matched runs would diverge.
  EXPECT_EQ(SplitMix64(0, 0, 0), 0xa706dd2f4d197e6fULL);
  EXPECT_EQ(SplitMix64(1, 0, 0), 0x55c55969ed403149ULL);
  EXPECT_EQ(SplitMix64(1, 1, 0), 0x81fb535ca52e6825ULL);
  EXPECT_EQ(SplitMix64(1, 0, 1), 0xfb85af9c9a7e41f1ULL);
  EXPECT_EQ(SplitMix64(42, 3, 1000000), 0x041d101ee5ca975eULL);
}

TEST(DataSampler, SplitMix64DependsOnEveryArgument) {
  std::set<uint64_t> values;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    for (uint64_t stream = 0; stream < 4; ++stream) {
      for (uint64_t index = 0; index < 64; ++index) values.insert(SplitMix64(seed, stream, index));
    }
  }
  EXPECT_EQ(values.size(), 4u * 4u * 64u);
}

TEST(DataSampler, TrainBatchIsDeterministic) {
  const std::vector<uint8_t> data = Ramp(5000);
  std::vector<uint8_t> a, b, other_step, other_seed;
  TrainBatch(data, 7, 3, 4, 16, a);
  TrainBatch(data, 7, 3, 4, 16, b);
  TrainBatch(data, 7, 4, 4, 16, other_step);
  TrainBatch(data, 8, 3, 4, 16, other_seed);
  ASSERT_EQ(a.size(), 4u * 17u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other_step);
  EXPECT_NE(a, other_seed);
}

TEST(DataSampler, WindowsAreSlicesAndTargetsShiftByOne) {
  const std::vector<uint8_t> data = Ramp(3000);
  const size_t B = 5, T = 32;
  const uint64_t seed = 11, step = 6;
  std::vector<uint8_t> tokens(3, 0xAB);  // resized by TrainBatch
  TrainBatch(data, seed, step, B, T, tokens);
  ASSERT_EQ(tokens.size(), B * (T + 1));
  for (size_t b = 0; b < B; ++b) {
    const size_t start = SplitMix64(seed, 0, step * B + b) % (data.size() - T);
    const uint8_t* window = tokens.data() + b * (T + 1);
    const uint8_t* inputs = window;       // first T bytes
    const uint8_t* targets = window + 1;  // last T bytes
    for (size_t t = 0; t < T; ++t) {
      EXPECT_EQ(inputs[t], data[start + t]) << "window " << b << " input " << t;
      EXPECT_EQ(targets[t], data[start + t + 1]) << "window " << b << " target " << t;
    }
  }
}

TEST(DataSampler, WindowsDependOnlyOnTheirGlobalIndex) {
  // Window b of step s is window s * B + b of one sequence, so step 1 with B = 4 repeats the
  // second half of step 0 with B = 8.
  const std::vector<uint8_t> data = Ramp(4000);
  std::vector<uint8_t> eight, four;
  TrainBatch(data, 5, 0, 8, 10, eight);
  TrainBatch(data, 5, 1, 4, 10, four);
  EXPECT_EQ(std::vector<uint8_t>(eight.begin() + 4 * 11, eight.end()), four);
}

TEST(DataSampler, StartsCoverTheWholeRange) {
  // Data of T + 3 bytes has three window starts; all appear, nothing beyond them.
  const size_t T = 8;
  const std::vector<uint8_t> data = Ramp(T + 3);
  std::set<uint8_t> firsts;
  std::vector<uint8_t> tokens;
  for (uint64_t step = 0; step < 20; ++step) {
    TrainBatch(data, 1, step, 4, T, tokens);
    for (size_t b = 0; b < 4; ++b) firsts.insert(tokens[b * (T + 1)]);
  }
  EXPECT_EQ(firsts, (std::set<uint8_t>{data[0], data[1], data[2]}));
}

TEST(DataValidation, WindowsAreEvenlySpacedAndInRange) {
  const std::vector<uint8_t> data = Ramp(1000);
  const size_t T = 9;
  std::vector<uint8_t> tokens;
  ValidationWindows(data, 5, T, tokens);
  ASSERT_EQ(tokens.size(), 5 * (T + 1));
  // Starts floor(i * 990 / 4): the first window at 0, the last ending at the last byte.
  const size_t starts[] = {0, 247, 495, 742, 990};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(
        std::vector<uint8_t>(tokens.begin() + i * (T + 1), tokens.begin() + (i + 1) * (T + 1)),
        std::vector<uint8_t>(data.begin() + starts[i], data.begin() + starts[i] + T + 1))
        << "window " << i;
  }
}

TEST(DataValidation, EdgeCounts) {
  const std::vector<uint8_t> data = Ramp(100);
  const size_t T = 9;
  std::vector<uint8_t> tokens(7, 0);
  ValidationWindows(data, 0, T, tokens);
  EXPECT_TRUE(tokens.empty());
  ValidationWindows(data, 1, T, tokens);
  EXPECT_EQ(tokens, std::vector<uint8_t>(data.begin(), data.begin() + T + 1));
  // More windows than starts: they overlap, all in range, the last one at the end.
  ValidationWindows(data, 500, T, tokens);
  ASSERT_EQ(tokens.size(), 500 * (T + 1));
  EXPECT_EQ(std::vector<uint8_t>(tokens.end() - (T + 1), tokens.end()),
            std::vector<uint8_t>(data.end() - (T + 1), data.end()));
}

TEST(DataSampler, RejectsDataWithoutAWindow) {
  const std::vector<uint8_t> data = Ramp(16);
  std::vector<uint8_t> tokens;
  ExpectThrowsWith<std::invalid_argument>([&] { TrainBatch(data, 0, 0, 2, 16, tokens); },
                                          {"TrainBatch", "16 bytes", "17 bytes"});
  ExpectThrowsWith<std::invalid_argument>([&] { ValidationWindows(data, 2, 16, tokens); },
                                          {"ValidationWindows", "16 bytes"});
  // With T + 1 bytes there is one window, the whole data.
  TrainBatch(data, 0, 0, 2, 15, tokens);
  std::vector<uint8_t> twice = data;
  twice.insert(twice.end(), data.begin(), data.end());
  EXPECT_EQ(tokens, twice);
}

}  // namespace
}  // namespace lpattn::harness
