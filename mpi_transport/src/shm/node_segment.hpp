// Named shared memory that a node's ranks map (the wake words, the ucx rings): one
// rank creates a segment under a name no other run uses, the others open it by that
// name, and the name is unlinked once every rank has mapped what it could.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>

namespace brisk::detail {

// Creates the segment `name` (never one that exists: O_EXCL), reserves its `bytes`
// (posix_fallocate: shared memory that runs out fails here, not with SIGBUS on a
// later store) and maps it, every page at once where `populate`. Returns the mapping,
// or null with what failed in `error`. `created`: the name exists, to unlink.
void* create_node_segment(const std::string& name, std::size_t bytes, bool populate, bool& created,
                          std::string& error);
// Maps `bytes` of the segment `name` that rank `owner` created; null with what
// failed in `error`.
void* map_node_segment(const std::string& name, std::size_t bytes, int owner, std::string& error);
// Collective over `comm`: whether `error` is empty on every rank.
bool all_ranks_ok(MPI_Comm comm, const std::string& error);

}  // namespace brisk::detail
