// lpattn_engine: greedy text generation from a checkpoint trained by `lpattn train`, with a KV
// cache in any of lpattn's formats (contiguous or paged) and lpattn's kernels for the prefill
// and every decode step. With --check it first replays the prompts of an `lpattn logits` file
// (half of each prefilled, the rest decoded one token at a time) and compares its logits at
// every position with the harness's full-sequence forward.
//
//   lpattn train --preset tiny --out run
//   lpattn logits --checkpoint run/checkpoint.bin --prompt "The " --out logits.json
//   lpattn_engine run/checkpoint.bin --check logits.json --kv int8 --block-size 16
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint.h"
#include "gpt.h"

namespace {

using Tokens = std::vector<uint8_t>;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string checkpoint, check;
  std::vector<std::string> prompts;
  int64_t tokens = -1;  // per sequence; -1: until the context is full
  engine::CacheOptions cache;
  double bound = -1.0;  // -1: RelativeBound of the cache's format times the largest logit
};

// A check's default bound, as a share of the largest |logit| the harness gives: with an fp32
// cache the engine and the harness differ only in the order of their sums (7e-7 of the largest
// logit in the models of scripts/check_example.sh and a `small` one); the other formats round
// K and V once, and may then differ by twice their unit roundoff u (bf16 and int8 2^-8, fp16
// 2^-11, fp8 e4m3 2^-4, e5m2 2^-3), where those models show 0.06u to 0.53u.
double RelativeBound(lpattn::quant::Format format) {
  using lpattn::quant::Format;
  switch (format) {
    case Format::kFp32: return 1e-5;
    case Format::kBf16: return 2 * 0x1p-8;
    case Format::kFp16: return 2 * 0x1p-11;
    case Format::kInt8: return 2 * 0x1p-8;
    case Format::kFp8E4M3: return 2 * 0x1p-4;
    case Format::kFp8E5M2: return 2 * 0x1p-3;
  }
  return 2 * 0x1p-3;
}

const char kUsage[] =
    "usage: lpattn_engine CHECKPOINT [--prompt TEXT]... [--tokens N] [--kv FORMAT]\n"
    "                     [--block-size N] [--check LOGITS.json [--bound X]]\n"
    "  --prompt TEXT     a prompt; several make a batch decoded together (default \"The \")\n"
    "  --tokens N        tokens to generate after each prompt (default: to the context)\n"
    "  --kv FORMAT       the cache's K and V: fp32 (default), bf16, fp16, int8, fp8e4m3, fp8e5m2\n"
    "  --block-size N    a paged cache of N-token blocks (default: contiguous)\n"
    "  --check FILE      replay the prompts of `lpattn logits --out FILE` and compare logits\n"
    "  --bound X         the largest |logit difference| --check accepts (default: by --kv,\n"
    "                    from 1e-5 (fp32) to 0.25 (fp8e5m2) of the largest |logit|)\n";

// A bad command line (reported with the usage), as opposed to a bad file or cache.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

Options ParseOptions(int argc, char** argv) try {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--prompt") {
      o.prompts.push_back(value());
    } else if (arg == "--tokens") {
      o.tokens = std::stoll(value());
    } else if (arg == "--kv") {
      const std::string name = value();
      const auto format = lpattn::quant::ParseFormat(name);
      if (!format) throw std::invalid_argument("--kv: unknown format '" + name + "'");
      o.cache.format = *format;
    } else if (arg == "--block-size") {
      o.cache.block_size = std::stoll(value());
    } else if (arg == "--check") {
      o.check = value();
    } else if (arg == "--bound") {
      o.bound = std::stod(value());
      if (!(o.bound >= 0.0)) throw std::invalid_argument("--bound must be a number >= 0");
    } else if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg.rfind("--", 0) == 0 || !o.checkpoint.empty()) {
      throw std::invalid_argument("unexpected argument '" + arg + "'");
    } else {
      o.checkpoint = arg;
    }
  }
  if (o.checkpoint.empty()) throw std::invalid_argument("no checkpoint given");
  if (o.tokens < -1) throw std::invalid_argument("--tokens must be >= 0");
  if (!o.check.empty() && !o.prompts.empty()) {
    throw std::invalid_argument("--check takes its prompts from its file; drop --prompt");
  }
  return o;
} catch (const std::logic_error& e) {  // our own, and std::stoll's on a bad number
  throw UsageError(e.what());
}

// The harness's logits of an `lpattn logits` file, checked to be of this checkpoint's model.
struct Expected {
  std::vector<Tokens> prompts;
  std::vector<std::vector<float>> logits;  // [prompt][position * vocab + token]
};

Expected ReadExpected(const std::string& path, const engine::ModelShape& m) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  const nlohmann::json j = nlohmann::json::parse(in);
  const nlohmann::json& model = j.at("model");
  if (model.at("n_layer") != m.n_layer || model.at("n_head") != m.n_head ||
      model.at("n_embd") != m.n_embd || model.at("vocab") != m.vocab) {
    throw std::runtime_error(path + " holds logits of another model");
  }
  Expected e;
  for (const nlohmann::json& p : j.at("prompts")) {
    e.prompts.push_back(p.at("tokens").get<Tokens>());
    std::vector<float>& flat = e.logits.emplace_back();
    for (const nlohmann::json& row : p.at("logits")) {
      const auto values = row.get<std::vector<float>>();
      if (int64_t(values.size()) != m.vocab) throw std::runtime_error(path + ": a short row");
      flat.insert(flat.end(), values.begin(), values.end());
    }
    if (flat.size() != e.prompts.back().size() * size_t(m.vocab)) {
      throw std::runtime_error(path + ": logits and tokens disagree in length");
    }
  }
  if (e.prompts.empty()) throw std::runtime_error(path + " has no prompts");
  return e;
}

uint8_t Argmax(const float* logits, int64_t vocab) {
  return uint8_t(std::max_element(logits, logits + vocab) - logits);
}

// Differences between the engine's logits and the harness's over every checked position.
struct Comparison {
  double max_diff = 0.0, max_logit = 0.0;
  int64_t positions = 0, argmax_agree = 0;

  void Add(const float* engine, const float* harness, int64_t vocab) {
    for (int64_t t = 0; t < vocab; ++t) {
      max_diff = std::max(max_diff, double(std::abs(engine[t] - harness[t])));
      max_logit = std::max(max_logit, double(std::abs(harness[t])));
    }
    positions += 1;
    argmax_agree += Argmax(engine, vocab) == Argmax(harness, vocab);
  }
};

std::string Printable(const Tokens& tokens) {
  std::string s;
  for (const uint8_t t : tokens) {
    if (t == '\n') {
      s += "\\n";
    } else if (t >= 32 && t < 127) {
      s += char(t);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", t);
      s += hex;
    }
  }
  return s;
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

int Run(const Options& o) {
  const engine::Checkpoint ck = engine::LoadCheckpoint(o.checkpoint);
  const engine::ModelShape& m = ck.model;
  const int64_t V = m.vocab;
  Expected expected;
  std::vector<Tokens> prompts;
  if (!o.check.empty()) {
    expected = ReadExpected(o.check, m);
    prompts = expected.prompts;
  } else {
    for (const std::string& p : o.prompts) prompts.emplace_back(p.begin(), p.end());
    if (prompts.empty()) prompts.push_back({'T', 'h', 'e', ' '});
  }
  for (const Tokens& p : prompts) {
    if (p.empty() || int64_t(p.size()) > m.context) {
      throw std::invalid_argument("a prompt of " + std::to_string(p.size()) +
                                  " bytes; the model takes 1 to " + std::to_string(m.context));
    }
  }
  const size_t S = prompts.size();
  engine::Gpt gpt(ck, int64_t(S), o.cache);
  std::printf("checkpoint  %s (step %lld, %lld layers x %lld heads, C %lld, context %lld)\n",
              o.checkpoint.c_str(), (long long)ck.step, (long long)m.n_layer,
              (long long)m.n_head, (long long)m.n_embd, (long long)m.context);
  std::printf("arm         %s\n", ck.arm_text.c_str());
  std::printf("kv cache    %s, %s, %zu bytes\n", lpattn::quant::FormatName(o.cache.format),
              o.cache.block_size > 0
                  ? ("paged, blocks of " + std::to_string(o.cache.block_size)).c_str()
                  : "contiguous",
              gpt.CacheBytes());

  // The prompts: prefilled whole, or with --check half prefilled and the rest decoded one
  // token at a time, each position's logits compared. last[s]: logits after s's last token.
  std::vector<std::vector<float>> last(S, std::vector<float>(size_t(V)));
  std::vector<Tokens> chunks(S);
  Comparison comparison;
  const bool check = !o.check.empty();
  const auto take = [&](const std::vector<float>& logits) {
    size_t row = 0;
    for (size_t s = 0; s < S; ++s) {
      const int64_t first = gpt.Length(int64_t(s)) - int64_t(chunks[s].size());
      for (size_t i = 0; i < chunks[s].size(); ++i, ++row) {
        const float* got = logits.data() + row * size_t(V);
        const size_t position = size_t(first) + i;
        if (check && position < prompts[s].size()) {
          comparison.Add(got, expected.logits[s].data() + position * size_t(V), V);
        }
        std::copy(got, got + V, last[s].begin());
      }
    }
  };
  const Clock::time_point prefill_start = Clock::now();
  for (size_t s = 0; s < S; ++s) {
    const size_t n = check ? (prompts[s].size() + 1) / 2 : prompts[s].size();
    chunks[s].assign(prompts[s].begin(), prompts[s].begin() + std::ptrdiff_t(n));
  }
  take(gpt.Forward(chunks));
  for (bool more = true; more;) {
    more = false;
    for (size_t s = 0; s < S; ++s) {
      const size_t at = size_t(gpt.Length(int64_t(s)));
      chunks[s].clear();
      if (at < prompts[s].size()) chunks[s].push_back(prompts[s][at]), more = true;
    }
    if (more) take(gpt.Forward(chunks));
  }
  const double prefill_s = Seconds(prefill_start);

  // Greedy generation, every sequence a step at a time in one batch.
  std::vector<Tokens> generated(S);
  int64_t steps = 0;
  const Clock::time_point decode_start = Clock::now();
  for (bool more = true; more;) {
    more = false;
    for (size_t s = 0; s < S; ++s) {
      chunks[s].clear();
      const bool room = gpt.Length(int64_t(s)) < m.context;
      if (room && (o.tokens < 0 || int64_t(generated[s].size()) < o.tokens)) {
        generated[s].push_back(Argmax(last[s].data(), V));
        // The last token a sequence may hold needs no forward: nothing reads its logits.
        if (gpt.Length(int64_t(s)) + 1 < m.context &&
            (o.tokens < 0 || int64_t(generated[s].size()) < o.tokens)) {
          chunks[s].push_back(generated[s].back()), more = true;
        }
      }
    }
    if (more) take(gpt.Forward(chunks)), ++steps;
  }
  const double decode_s = Seconds(decode_start);
  for (size_t s = 0; s < S; ++s) {
    std::printf("[%zu] %s|%s\n", s, Printable(prompts[s]).c_str(),
                Printable(generated[s]).c_str());
  }
  std::printf("prompts     %.2f ms; %lld decode steps of the batch in %.2f ms\n",
              prefill_s * 1e3, (long long)steps, decode_s * 1e3);

  if (!check) return 0;
  const double bound =
      o.bound >= 0.0 ? o.bound : RelativeBound(o.cache.format) * comparison.max_logit;
  const bool ok = comparison.max_diff <= bound;
  std::printf("check       max |logit - harness| %.3g over %lld positions (bound %.3g, largest "
              "|logit| %.3g); greedy token agrees at %lld: %s\n",
              comparison.max_diff, (long long)comparison.positions, bound,
              comparison.max_logit, (long long)comparison.argmax_agree, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(ParseOptions(argc, argv));
  } catch (const UsageError& e) {
    std::fprintf(stderr, "lpattn_engine: %s\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lpattn_engine: %s\n", e.what());
    return 1;
  }
}
