// libFuzzer target: data-plane messages (scheduler/data_protocol.hpp) as rank 1 of a
// two-rank job receives them, and the replies rank 0's controller takes.
//
// A DataWorker (rank 1) gets each message through post(), as the runtime hands it a
// kData payload; its commands run on an executor that runs every task it is given,
// in order, on this thread, once the message is handled. What the worker sends to
// itself comes back to it at once (as the runtime delivers a rank's messages to
// itself); replies go to a DataController (rank 0's), whose handle() also gets
// messages of the input directly. Data sets, commands, templates, edits, copies,
// syncs, checkpoint plans and restores (from a loader that serves bytes of the
// input) all run; a malformed message must be dropped and reported, never crash,
// hang, leak or corrupt the worker for the messages after it.
//
// Input: messages, each a u32 length then [u8 target][u8 sender rank][bytes]
// (brisk::wire::append_record); an input that is not such a list is one message.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "brisk/core/detail/context.hpp"
#include "brisk/core/detail/task.hpp"
#include "brisk/runtime/wire.hpp"
#include "brisk/scheduler/data_controller.hpp"
#include "brisk/scheduler/data_protocol.hpp"
#include "brisk/scheduler/data_worker.hpp"
#include "data_tasks.hpp"
#include "testing/inline_executor.hpp"

namespace {

using Bytes = std::span<const std::byte>;

struct Rank1 {
  brisk::testing::InlineExecutor executor;
  int loopbacks = 0;  // messages the worker sent itself, bounded per input
  std::vector<std::byte> restore_bytes;  // what the restore loader serves
  brisk::DataController controller{2, [](int, std::vector<std::byte>) {}};
  brisk::DataWorker worker{1, executor, [this](int to, std::vector<std::byte> m) { sent(to, std::move(m)); }};

  Rank1() {
    (void)brisk_fuzz::log_type();
    (void)brisk_fuzz::big_type();
    worker.set_restore_loader([this](const std::string&, const std::string&) { return restore_bytes; });
  }

  void sent(int to, std::vector<std::byte> m) {
    if (!m.empty() && brisk::to_controller(std::to_integer<std::uint8_t>(m[0]))) {
      (void)controller.handle(1, m);
    } else if (to == 1 && ++loopbacks < 256) {
      worker.post(1, std::move(m));
    }
  }

  void message(std::uint8_t target, int from, Bytes bytes) {
    switch (target % 3) {
      case 0: worker.post(from, std::vector<std::byte>(bytes.begin(), bytes.end())); break;
      case 1: (void)controller.handle(from, bytes); break;
      case 2: restore_bytes.assign(bytes.begin(), bytes.end()); break;
    }
    executor.run_all();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const Bytes input(reinterpret_cast<const std::byte*>(data), size);
  std::vector<Bytes> messages;
  if (!brisk::wire::for_each_record(input, [&](Bytes m) { messages.push_back(m); }) || messages.empty()) {
    messages = {input};
  }
  Rank1 rank;
  for (Bytes m : messages) {
    if (m.size() < 2) continue;
    rank.message(std::to_integer<std::uint8_t>(m[0]), std::to_integer<std::uint8_t>(m[1]) % 2, m.subspan(2));
  }
  rank.worker.cancel();
  rank.executor.run_all();
  return 0;
}
