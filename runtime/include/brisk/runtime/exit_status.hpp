// brisk/runtime/exit_status.hpp — each rank's exit status, written where a launcher
// that runs through a rank's death can read it.
//
// `mpirun --enable-recovery --mca orte_abort_on_non_zero_status 0` (and srun with
// --no-kill) keep a job's survivors running when a rank dies, and then report
// success or a dead rank's signal whatever the job's outcome. With BRISK_STATUS_DIR
// set (slurm/brisk-launch --keep-going sets it), every rank writes the code it ends
// with to DIR/rank-N as one line
//   exit=CODE rank=N size=SIZE lost=R,R,... why=TEXT
// (a temporary file renamed into place; `lost` lists the ranks it knew dead), and
// the wrapper exits with the job's code (slurm/README.md, "Exit status"). A rank
// that dies writes nothing. The reports also tell the wrapper when the job is over
// (every rank reported or is known lost): mpirun --enable-recovery in a Slurm
// allocation does not always end after a rank's death.
//
// Thread safety: record() may be called from any thread, also while another
// thread calls it; the first call wins and later ones do nothing.
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace brisk::detail {

// Reads BRISK_STATUS_DIR (nothing to do without it). Call once, as soon as the
// rank is known.
void init_exit_status(int rank, int size);

// Writes this rank's exit status (once). `why` is one line saying what ended the
// rank ("the driver returned 3"); it is cut at 400 bytes. `lost`: the ranks this
// rank knows dead, as "1,2" (lost_ranks_text).
void record_exit_status(int code, std::string_view why, std::string_view lost = {}) noexcept;

// "1,2": the ranks below `size` for which `lost` is true.
std::string lost_ranks_text(int size, const std::function<bool(int)>& lost);

}  // namespace brisk::detail
