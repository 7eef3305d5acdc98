// Shared by the harness tests: a small generated corpus (no download) and a tiny config.
#ifndef LPATTN_TESTS_HARNESS_HARNESS_FIXTURE_H_
#define LPATTN_TESTS_HARNESS_HARNESS_FIXTURE_H_

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "harness/model/config.h"
#include "harness/train/data.h"

namespace lpattn::harness::test {

// A scratch directory removed when the test ends.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             (name + "-" + std::to_string(std::random_device{}()))) {
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& leaf) const { return (path / leaf).string(); }
};

// English-like text from a small vocabulary, in 20 documents: learnable in a few hundred
// steps, so a falling loss is a real signal.
inline std::string WriteGeneratedCorpus(const ScratchDir& dir) {
  static const char* kWords[] = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran",
                                 "to", "house", "of", "red", "big", "small", "saw", "it"};
  std::mt19937 rng(3);
  std::string text;
  for (int doc = 0; doc < 20; ++doc) {
    if (doc > 0) text += std::string("\n") + kDocumentSeparator + "\n";
    for (int sentence = 0; sentence < 40; ++sentence) {
      std::string s;
      for (int w = 0; w < 6; ++w) s += std::string(w ? " " : "") + kWords[rng() % 17];
      s[0] = char(s[0] - 'a' + 'A');
      text += s + ". ";
    }
  }
  const std::string path = dir / "corpus.txt";
  std::ofstream(path) << text;
  return path;
}

inline TrainConfig TinyTestConfig(const std::string& data) {
  TrainConfig c = PresetConfig("tiny");
  c.data = data;
  c.steps = 40;
  c.warmup_steps = 5;
  c.eval_every = 10;
  c.checkpoint_every = 20;
  c.eval_windows = 16;
  c.model.context = 32;
  c.batch = 4;
  c.threads = 2;
  return c;
}

}  // namespace lpattn::harness::test

#endif  // LPATTN_TESTS_HARNESS_HARNESS_FIXTURE_H_
