// main of lpattn_bench. Without --summary it is BENCHMARK_MAIN. With --summary it runs only the
// key shapes, briefly, and prints one Markdown table of time, GFLOPS and peak_frac.
// Either way it first applies LPATTN_TARGET (a Highway target name such as SSE4 or AVX2) with
// lpattn::SelectTarget, measures the FMA peak (always on the CPU's best target), and records
// both in the benchmark context.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench/peak_fma.h"
#include "kernels/attention.h"

namespace {

// The thread counts the suites run with; the peak of each is measured up front.
constexpr int kThreadCounts[] = {1, 2};

constexpr const char* kSummaryFilter =
    "^(exact_(fwd|bwd)/N:1024/D:64/H:8/causal:[01]/threads:[12]"
    "|exact_fwd/N:4096/D:64/H:8/causal:1/threads:2"
    "|naive_fwd/N:1024/D:64/H:8/causal:0/threads:2"
    "|peak_fma/threads:[12])(/real_time)?$";
constexpr const char* kSummaryMinTime = "0.2";

std::string Join(const std::vector<std::string>& items) {
  std::string joined;
  for (const std::string& item : items) {
    if (!joined.empty()) joined += ',';
    joined += item;
  }
  return joined;
}

std::string FormatDouble(const char* format, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), format, value);
  return buffer;
}

// One line naming the dispatch target and the measured peak of each thread count.
std::string TargetAndPeakLine(const lpattn::DispatchInfo& info) {
  std::string line = "CPU target: " + info.chosen + " (compiled: " + Join(info.compiled) +
                     "; supported: " + Join(info.supported) + "). FMA peak (" +
                     lpattn::bench::PeakFmaTarget() + " loop):";
  const char* separator = " ";
  for (const int threads : kThreadCounts) {
    char part[96];
    std::snprintf(part, sizeof(part), "%s%d thread%s %.1f GFLOPS", separator, threads,
                  threads == 1 ? "" : "s", lpattn::bench::MeasuredPeakGflops(threads));
    line += part;
    separator = ", ";
  }
  return line + ".";
}

void AddLpattnContext(const lpattn::DispatchInfo& info) {
  benchmark::AddCustomContext("lpattn_target", info.chosen);
  benchmark::AddCustomContext("lpattn_targets_compiled", Join(info.compiled));
  benchmark::AddCustomContext("lpattn_targets_supported", Join(info.supported));
  benchmark::AddCustomContext("peak_fma_target", lpattn::bench::PeakFmaTarget());
  for (const int threads : kThreadCounts) {
    benchmark::AddCustomContext("peak_gflops_threads_" + std::to_string(threads),
                                FormatDouble("%.2f", lpattn::bench::MeasuredPeakGflops(threads)));
  }
}

// Collects the runs and prints them as a Markdown table at the end; progress goes to stderr.
class SummaryReporter : public benchmark::BenchmarkReporter {
 public:
  explicit SummaryReporter(std::string heading) : heading_(std::move(heading)) {}

  bool ReportContext(const Context&) override { return true; }

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.run_type != Run::RT_Iteration) continue;
      std::fprintf(stderr, "  ran %s\n", run.benchmark_name().c_str());
      rows_.push_back(run);
    }
  }

  void Finalize() override {
    std::printf("%s\n\n", heading_.c_str());
    std::printf("| benchmark | time (ms) | GFLOPS | peak_frac |\n");
    std::printf("|---|---:|---:|---:|\n");
    for (const Run& run : rows_) {
      std::string name = run.benchmark_name();
      constexpr std::string_view kSuffix = "/real_time";
      if (name.ends_with(kSuffix)) name.resize(name.size() - kSuffix.size());
      if (run.error_occurred) {
        std::printf("| %s | error: %s | | |\n", name.c_str(), run.error_message.c_str());
        continue;
      }
      const double ms = run.real_accumulated_time / static_cast<double>(run.iterations) * 1e3;
      std::printf("| %s | %.3f | %s | %s |\n", name.c_str(), ms,
                  Counter(run, "GFLOPS", "%.1f").c_str(),
                  Counter(run, "peak_frac", "%.3f").c_str());
    }
    std::fflush(stdout);
  }

 private:
  static std::string Counter(const Run& run, const char* name, const char* format) {
    const auto it = run.counters.find(name);
    return it == run.counters.end() ? "" : FormatDouble(format, it->second.value);
  }

  std::string heading_;
  std::vector<Run> rows_;
};

void PrintHelp() {
  benchmark::PrintDefaultHelp();
  std::fprintf(stdout,
               "  [--summary]  run only the key shapes, briefly, and print a Markdown table\n"
               "Environment: LPATTN_TARGET=<Highway target, e.g. SSE4 or AVX2> restricts the\n"
               "kernels' dispatch to that target.\n");
}

bool IsListing(const std::vector<std::string>& args) {
  for (const std::string& arg : args) {
    if (arg == "--benchmark_list_tests" || arg == "--benchmark_list_tests=true" ||
        arg == "--benchmark_list_tests=1" || arg == "--help") {
      return true;
    }
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  bool summary = false;
  std::vector<std::string> args = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--summary") == 0) {
      summary = true;
    } else {
      args.emplace_back(argv[i]);
    }
  }
  if (summary) {
    // Before the caller's own arguments, which therefore win.
    args.insert(args.begin() + 1, {std::string("--benchmark_filter=") + kSummaryFilter,
                                   std::string("--benchmark_min_time=") + kSummaryMinTime});
  }

  // What the CPU supports is read before SelectTarget, which narrows it to the one selected.
  lpattn::DispatchInfo info = lpattn::GetDispatchInfo();
  if (const char* target = std::getenv("LPATTN_TARGET"); target != nullptr && *target != '\0') {
    if (!lpattn::SelectTarget(target)) {
      std::fprintf(stderr, "LPATTN_TARGET=%s is not a compiled target this CPU supports (%s)\n",
                   target, Join(info.supported).c_str());
      return 1;
    }
    info.chosen = lpattn::GetDispatchInfo().chosen;
  }
  // The peak takes about 0.2 s per thread count; listing the benchmarks does not need it.
  const bool listing = IsListing(args);
  if (!listing) AddLpattnContext(info);

  std::vector<char*> arg_pointers;
  for (std::string& arg : args) arg_pointers.push_back(arg.data());
  arg_pointers.push_back(nullptr);
  int arg_count = static_cast<int>(args.size());
  benchmark::Initialize(&arg_count, arg_pointers.data(), PrintHelp);
  if (benchmark::ReportUnrecognizedArguments(arg_count, arg_pointers.data())) return 1;
  if (summary && !listing) {
    SummaryReporter reporter(TargetAndPeakLine(info));
    benchmark::RunSpecifiedBenchmarks(&reporter);
  } else {
    benchmark::RunSpecifiedBenchmarks();
  }
  benchmark::Shutdown();
  return 0;
}
