// Writes a checkpoint with known contents for the brisk-ckpt tests:
//   mpirun -n N checkpoint_fixture_writer DIR SEQUENCE
// /objects/alpha (1 MiB of 0x5a, rank 0), /objects/part/<rank> (100 KiB each),
// /driver/step (int 42), /driver/name ("fixture"), /meta/lineage (100 bytes).
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "brisk/checkpoint/checkpoint.hpp"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  if (argc != 3) {
    std::fprintf(stderr, "usage: checkpoint_fixture_writer DIR SEQUENCE\n");
    MPI_Finalize();
    return 2;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  auto w = brisk::CheckpointWriter::begin(MPI_COMM_WORLD, argv[1], std::stoull(argv[2]), {.keep = 0});
  brisk::Status s = w.ok() ? brisk::Status() : w.status();
  if (w.ok()) {
    if (rank == 0) {
      (void)w->add_object("alpha", std::vector<std::byte>(1 << 20, std::byte{0x5a}));
      (void)w->save("step", 42);
      (void)w->save("name", std::string("fixture"));
      (void)w->add_meta("lineage", std::vector<std::byte>(100, std::byte{7}));
    }
    (void)w->add_object("part/" + std::to_string(rank), std::vector<std::byte>(100 << 10, std::byte(rank)));
    s = w->commit();
  }
  if (!s.ok() && rank == 0) std::fprintf(stderr, "%s\n", s.to_string().c_str());
  MPI_Finalize();
  return s.ok() ? 0 : 1;
}
