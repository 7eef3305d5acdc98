// The processes of a job and their deterministic collectives (docs/harness.md §3.7).
#include "harness/common/ranks.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef LPATTN_WITH_MPI
// The C API only: Open MPI's mpi.h otherwise pulls in its deprecated C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace lpattn::harness {
namespace {

Ranks* world = nullptr;  // set by MpiSession while MPI runs

#ifdef LPATTN_WITH_MPI
bool StartedByMpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

void Check(int status, const char* what) {
  if (status != MPI_SUCCESS) throw std::runtime_error(std::string("MPI ") + what + " failed");
}

template <class T>
MPI_Datatype TypeOf();
template <>
MPI_Datatype TypeOf<float>() { return MPI_FLOAT; }
template <>
MPI_Datatype TypeOf<double>() { return MPI_DOUBLE; }

// Slice s of n values over p ranks: [n s / p, n (s + 1) / p).
size_t SliceBegin(size_t n, int s, int p) { return n * size_t(s) / size_t(p); }

// Reduce-scatter by slices (rank s receives every rank's slice s and adds them in rank order),
// then an all-gather of the summed slices. The same bytes move as in a ring all-reduce.
template <class T>
void SumSlices(std::vector<T>& values, int rank, int ranks) {
  const size_t n = values.size(), p = static_cast<size_t>(ranks);
  std::vector<int> counts(p), offsets(p);
  for (int s = 0; s < ranks; ++s) {
    offsets[size_t(s)] = int(SliceBegin(n, s, ranks));
    counts[size_t(s)] = int(SliceBegin(n, s + 1, ranks) - SliceBegin(n, s, ranks));
  }
  const int mine = counts[size_t(rank)];
  std::vector<int> received_counts(p, mine), received_offsets(p);
  for (int s = 0; s < ranks; ++s) received_offsets[size_t(s)] = s * mine;
  std::vector<T> received(size_t(mine) * p);
  Check(MPI_Alltoallv(values.data(), counts.data(), offsets.data(), TypeOf<T>(), received.data(),
                      received_counts.data(), received_offsets.data(), TypeOf<T>(),
                      MPI_COMM_WORLD),
        "all-to-all");
  std::vector<T> sum(received.begin(), received.begin() + mine);
  for (int s = 1; s < ranks; ++s) {
    const T* part = received.data() + size_t(s) * size_t(mine);
    for (int i = 0; i < mine; ++i) sum[size_t(i)] += part[i];
  }
  Check(MPI_Allgatherv(sum.data(), mine, TypeOf<T>(), values.data(), counts.data(),
                       offsets.data(), TypeOf<T>(), MPI_COMM_WORLD),
        "all-gather");
}
#endif

}  // namespace

const Ranks& Ranks::Self() {
  static const Ranks self(0, 1);
  return self;
}

const Ranks& Ranks::World() { return world != nullptr ? *world : Self(); }

void Ranks::SumInRankOrder(std::vector<float>& values) const {
#ifdef LPATTN_WITH_MPI
  if (size_ > 1) SumSlices(values, rank_, size_);
#else
  (void)values;
#endif
}

void Ranks::SumInRankOrder(std::vector<double>& values) const {
#ifdef LPATTN_WITH_MPI
  if (size_ > 1) SumSlices(values, rank_, size_);
#else
  (void)values;
#endif
}

void Ranks::Broadcast(void* data, size_t bytes) const {
#ifdef LPATTN_WITH_MPI
  if (size_ > 1 && bytes > 0) {
    Check(MPI_Bcast(data, int(bytes), MPI_BYTE, 0, MPI_COMM_WORLD), "broadcast");
  }
#else
  (void)data;
  (void)bytes;
#endif
}

void Ranks::Agree(const std::function<void()>& fn) const {
  std::exception_ptr failure;
  std::string message;
  try {
    fn();
  } catch (const std::exception& e) {
    failure = std::current_exception();
    message = e.what();
  }
#ifdef LPATTN_WITH_MPI
  if (size_ > 1) {
    // The lowest failing rank: MPI_MIN over (rank if failed, else size).
    int failed_rank = failure ? rank_ : size_, first = size_;
    Check(MPI_Allreduce(&failed_rank, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD),
          "all-reduce");
    if (first == size_) return;
    // Every rank takes part in the broadcast of the first failure's message, then throws.
    size_t length = message.size();
    Check(MPI_Bcast(&length, sizeof(length), MPI_BYTE, first, MPI_COMM_WORLD), "broadcast");
    std::string text = message;
    text.resize(length);
    Check(MPI_Bcast(text.data(), int(length), MPI_BYTE, first, MPI_COMM_WORLD), "broadcast");
    if (failure) std::rethrow_exception(failure);
    throw std::runtime_error("rank " + std::to_string(first) + ": " + text);
  }
#endif
  if (failure) std::rethrow_exception(failure);
}

void Ranks::Abort(const std::string& message) const {
  std::fflush(stdout);
  std::fprintf(stderr, "%s\n", message.c_str());
  std::fflush(stderr);
#ifdef LPATTN_WITH_MPI
  if (size_ > 1) MPI_Abort(MPI_COMM_WORLD, 1);
#endif
  std::exit(1);
}

MpiSession::MpiSession(int& argc, char**& argv) {
#ifdef LPATTN_WITH_MPI
  if (!StartedByMpirun()) return;
  int provided = 0;
  // Only one thread at a time calls MPI (the one that runs the step), but it need not be the
  // thread that started MPI: TBB's arena may run the step's caller on a worker.
  Check(MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided), "init");
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    throw std::runtime_error("this MPI library cannot be called from more than one thread");
  }
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  world = new Ranks(rank, size);
  started_ = true;
#else
  (void)argc;
  (void)argv;
#endif
}

MpiSession::~MpiSession() {
#ifdef LPATTN_WITH_MPI
  if (!started_) return;
  delete world;
  world = nullptr;
  MPI_Finalize();
#endif
}

}  // namespace lpattn::harness
