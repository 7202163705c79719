#include <fmt/format.h>

#include <atomic>

#include "brisk/core/api.hpp"
#include "brisk/core/detail/context.hpp"
#include "brisk/core/detail/distributed.hpp"
#include "brisk/core/detail/task.hpp"

namespace brisk::detail {
namespace {
std::atomic<RuntimeContext*> g_context{nullptr};
std::atomic<std::uint64_t> g_epoch{1};
std::atomic<std::uint64_t> g_thread_roots{1};
thread_local SubmitterState t_submitter;

void refresh_root(SubmitterState& s) noexcept {
  std::uint64_t epoch = g_epoch.load(std::memory_order_acquire);
  if (s.root_generation != epoch) {
    RuntimeContext* ctx = g_context.load(std::memory_order_acquire);
    std::uint64_t job = ctx ? ctx->job_id : 0;
    s.root = TaskId::root(job).child(~g_thread_roots.fetch_add(1, std::memory_order_relaxed));
    s.root_counter = 0;
    s.root_generation = epoch;
  }
}
}  // namespace

RuntimeContext* context() noexcept { return g_context.load(std::memory_order_acquire); }

void set_context(RuntimeContext* ctx) noexcept {
  g_epoch.fetch_add(1, std::memory_order_acq_rel);
  g_context.store(ctx, std::memory_order_release);
}

RuntimeContext& require_context(const char* api) {
  RuntimeContext* ctx = context();
  if (!ctx) throw Error(fmt::format("{} called outside brisk::run (the runtime is not running)", api));
  return *ctx;
}

SubmitterState& submitter() noexcept { return t_submitter; }

void set_submitter_root(TaskId root) noexcept {
  SubmitterState& s = t_submitter;
  s.root = root;
  s.root_counter = 0;
  s.root_generation = g_epoch.load(std::memory_order_acquire);
}

TaskId next_task_id() noexcept {
  SubmitterState& s = t_submitter;
  if (s.current_task) return s.current_task->next_child_id();
  refresh_root(s);
  return s.root.child(s.root_counter++);
}

ObjectId next_put_id() noexcept {
  SubmitterState& s = t_submitter;
  if (s.current_task) return s.current_task->next_put_id();
  refresh_root(s);
  return ObjectId::put_by(s.root, s.root_counter++);
}

std::shared_ptr<const ErrorInfo> make_task_error(const char* name, std::string message, int attempts) {
  auto e = std::make_shared<ErrorInfo>();
  e->kind = ErrorKind::kTaskFailed;
  e->message = std::move(message);
  e->function = name;
  RuntimeContext* ctx = context();
  e->rank = ctx ? ctx->rank : -1;
  e->attempts = attempts;
  return e;
}

void throw_unregistered(const void* address) {
  throw Error(fmt::format(
      "brisk::remote: the function at address {} is not registered; add BRISK_REMOTE(name) at "
      "namespace scope next to its definition",
      address));
}

void throw_options_error(const std::string& message) { throw Error(message); }

std::string infeasible_reason(const std::map<std::string, double>& demand) {
  RuntimeContext& ctx = require_context("brisk::remote");
  for (const auto& [name, amount] : demand) {
    auto it = ctx.max_node_resources.find(name);
    double have = it == ctx.max_node_resources.end() ? 0.0 : it->second;
    if (amount > have) {
      std::string offered;
      for (const auto& [n, v] : ctx.max_node_resources) {
        offered += fmt::format("{}{}={}", offered.empty() ? "" : ", ", n, v);
      }
      return fmt::format("it demands {}={} but no node of this job has more than {}={} "
                         "(largest node offers: {})",
                         name, amount, name, have, offered.empty() ? "nothing" : offered);
    }
  }
  return {};
}

}  // namespace brisk::detail

namespace brisk {

Status timeline(const std::string& path) {
  detail::RuntimeContext& ctx = detail::require_context("brisk::timeline");
  if (!ctx.events) return failed_precondition("brisk::timeline: the event log is off (--brisk-events=off)");
  if (ctx.distributed && ctx.rank == 0) return ctx.distributed->write_timeline(path);
  return ctx.events->write_chrome_trace(path, ctx.rank);
}

int rank() { return detail::require_context("brisk::rank").rank; }

int size() { return detail::require_context("brisk::size").size; }

const std::vector<std::string>& program_args() {
  return detail::require_context("brisk::program_args").program_args;
}

}  // namespace brisk
