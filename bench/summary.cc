// main of lpattn_bench. Without --summary it is BENCHMARK_MAIN with the reporters of
// --benchmark_format and --benchmark_out_format, except that names are printed and written
// without Google Benchmark's "/real_time" suffix (see PlainNames). With --summary it runs only
// the key shapes, briefly, and prints one Markdown table of time, GFLOPS and peak_frac.
// Either way it first applies LPATTN_TARGET (a Highway target name such as SSE4 or AVX2) with
// lpattn::SelectTarget, measures the FMA peak (always on the CPU's best target), and records
// both in the benchmark context.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>
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
    "|peak_fma/threads:[12])$";
constexpr const char* kSummaryMinTime = "0.2";
constexpr const char* kSummaryRepetitions = "3";

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
  std::vector<std::string> native;
  for (const lpattn::NativePathInfo& path : info.native) {
    if (path.enabled) native.push_back(path.name);
  }
  benchmark::AddCustomContext("lpattn_native_enabled", native.empty() ? "none" : Join(native));
  for (const int threads : kThreadCounts) {
    benchmark::AddCustomContext("peak_gflops_threads_" + std::to_string(threads),
                                FormatDouble("%.2f", lpattn::bench::MeasuredPeakGflops(threads)));
  }
}

// Every benchmark here uses UseRealTime(), so Google Benchmark 1.7.1 ends every name with
// "/real_time" (BenchmarkName::time_type). The names lpattn documents omit it:
//   <kernel>_<pass>/N:<T>/D:<D>/H:<H>/causal:<0|1>/threads:<n>   and   peak_fma/threads:<n>
constexpr std::string_view kRealTimeSuffix = "/real_time";

using Run = benchmark::BenchmarkReporter::Run;

std::vector<Run> PlainNames(std::vector<Run> runs) {
  for (Run& run : runs) run.run_name.time_type.clear();
  return runs;
}

// --benchmark_filter is matched against the full name, suffix included, so a filter anchored
// with `$` at a documented name (`...threads:1$`) would match nothing. Each `$` not escaped by
// a backslash therefore becomes `(/real_time)?$`; filters that spell the suffix still match.
void LetFilterAnchorOnPlainNames() {
  const std::string filter = benchmark::GetBenchmarkFilter();
  std::string rewritten;
  for (size_t i = 0; i < filter.size(); ++i) {
    if (filter[i] == '$' && (i == 0 || filter[i - 1] != '\\')) rewritten += "(/real_time)?";
    rewritten += filter[i];
  }
  benchmark::SetBenchmarkFilter(rewritten);
}

// The value of --<name>=<value> as Google Benchmark reads it: the last one given, else the
// environment variable of the upper-cased name, else "".
std::string FlagValue(const std::vector<std::string>& args, std::string_view name) {
  const std::string prefix = "--" + std::string(name) + "=";
  for (auto arg = args.rbegin(); arg != args.rend(); ++arg) {
    if (arg->starts_with(prefix)) return arg->substr(prefix.size());
  }
  std::string variable(name);
  for (char& c : variable) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const char* value = std::getenv(variable.c_str());
  return value == nullptr ? "" : value;
}

// Forwards everything to `inner` with the names made plain. A decorator rather than a subclass
// of each reporter, so that the display keeps CreateDefaultDisplayReporter's reading of
// --benchmark_format, --benchmark_color and --benchmark_counters_tabular.
class PlainNameReporter : public benchmark::BenchmarkReporter {
 public:
  explicit PlainNameReporter(std::unique_ptr<BenchmarkReporter> inner)
      : inner_(std::move(inner)) {}

  bool ReportContext(const Context& context) override {
    // RunSpecifiedBenchmarks sets the streams on this reporter (the file's for --benchmark_out)
    // after construction; the first call that can write is this one.
    inner_->SetOutputStream(&GetOutputStream());
    inner_->SetErrorStream(&GetErrorStream());
    Context plain = context;  // the name column (at least 10 wide) needs no room for the suffix
    if (plain.name_field_width >= 10 + kRealTimeSuffix.size()) {
      plain.name_field_width -= kRealTimeSuffix.size();
    }
    return inner_->ReportContext(plain);
  }
  void ReportRuns(const std::vector<Run>& runs) override { inner_->ReportRuns(PlainNames(runs)); }
  void Finalize() override { inner_->Finalize(); }

 private:
  std::unique_ptr<BenchmarkReporter> inner_;
};

// The reporter RunSpecifiedBenchmarks would make for --benchmark_out_format (json by default).
std::unique_ptr<benchmark::BenchmarkReporter> MakeFileReporter(const std::string& format) {
  if (format == "console") {
    return std::make_unique<benchmark::ConsoleReporter>(benchmark::ConsoleReporter::OO_None);
  }
  if (format == "csv") {
    BENCHMARK_DISABLE_DEPRECATED_WARNING
    return std::make_unique<benchmark::CSVReporter>();
    BENCHMARK_RESTORE_DEPRECATED_WARNING
  }
  return std::make_unique<benchmark::JSONReporter>();
}

// Collects the runs and prints them as a Markdown table at the end; progress goes to stderr.
class SummaryReporter : public benchmark::BenchmarkReporter {
 public:
  explicit SummaryReporter(std::string heading) : heading_(std::move(heading)) {}

  bool ReportContext(const Context&) override { return true; }

  // One benchmark's runs: its repetitions, then their aggregates. The table shows the median
  // (this machine is shared, and single runs drift), under the plain benchmark name.
  void ReportRuns(const std::vector<Run>& runs) override {
    const Run* first = nullptr;
    const Run* median = nullptr;
    for (const Run& run : runs) {
      if (run.run_type == Run::RT_Iteration && first == nullptr) first = &run;
      if (run.run_type == Run::RT_Aggregate && run.aggregate_name == "median") median = &run;
    }
    if (first == nullptr) return;
    Run row = median != nullptr ? *median : *first;
    row.run_name = PlainNames({*first}).front().run_name;
    row.run_type = Run::RT_Iteration;  // so benchmark_name() carries no aggregate suffix
    std::fprintf(stderr, "  ran %s\n", row.benchmark_name().c_str());
    rows_.push_back(std::move(row));
  }

  void Finalize() override {
    std::printf("%s Each row: median of %s repetitions.\n\n", heading_.c_str(),
                kSummaryRepetitions);
    std::printf("| benchmark | time (ms) | GFLOPS | peak_frac |\n");
    std::printf("|---|---:|---:|---:|\n");
    for (const Run& run : rows_) {
      const std::string name = run.benchmark_name();
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
                                   std::string("--benchmark_min_time=") + kSummaryMinTime,
                                   std::string("--benchmark_repetitions=") + kSummaryRepetitions});
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
  LetFilterAnchorOnPlainNames();
  if (summary && !listing) {
    SummaryReporter reporter(TargetAndPeakLine(info));
    benchmark::RunSpecifiedBenchmarks(&reporter);
  } else {
    // CreateDefaultDisplayReporter hands over ownership, as RunSpecifiedBenchmarks() assumes.
    PlainNameReporter display(std::unique_ptr<benchmark::BenchmarkReporter>(
        benchmark::CreateDefaultDisplayReporter()));
    std::ostringstream listed;  // --benchmark_list_tests writes to the display's stream
    if (listing) display.SetOutputStream(&listed);
    const std::string out = FlagValue(args, "benchmark_out");
    if (out.empty()) {
      benchmark::RunSpecifiedBenchmarks(&display);
    } else {  // RunSpecifiedBenchmarks opens the file and points this reporter's streams at it
      const std::string format = FlagValue(args, "benchmark_out_format");
      PlainNameReporter file(MakeFileReporter(format.empty() ? "json" : format));
      benchmark::RunSpecifiedBenchmarks(&display, &file);
    }
    std::istringstream lines(listed.str());
    for (std::string line; std::getline(lines, line);) {
      if (line.ends_with(kRealTimeSuffix)) line.resize(line.size() - kRealTimeSuffix.size());
      std::cout << line << '\n';
    }
  }
  benchmark::Shutdown();
  return 0;
}
