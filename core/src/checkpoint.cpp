#include "brisk/core/checkpoint.hpp"

#include "brisk/core/error.hpp"

namespace brisk::checkpoint::detail {

brisk::detail::CheckpointService& service(const char* api) {
  brisk::detail::RuntimeContext& ctx = brisk::detail::require_context(api);
  if (!ctx.checkpoints) throw Error(std::string(api) + ": this runtime takes no checkpoints");
  if (ctx.rank != 0) throw Error(std::string(api) + ": only the driver (rank 0) saves and loads checkpoints");
  return *ctx.checkpoints;
}

}  // namespace brisk::checkpoint::detail
