// brisk/core/transport.hpp — the interface between ranks: messages and one-sided reads.
//
// core and scheduler talk to other ranks only through Transport. Backends live in
// mpi_transport/ (MPI two-sided + RMA; UCX active messages + ucp_get_nbx); tests use
// an in-process fake (tests/testing/fake_transport.hpp). Every backend passes the
// same typed test suite.
//
// Threading: send() and get() may be called from any thread; progress() from one
// thread at a time (the rank's progress engine). Handlers and completions run
// inside progress(), on the progressing thread, and must not block.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "brisk/core/ids.hpp"
#include "brisk/core/status.hpp"

namespace brisk {

// Where a peer can read from one-sidedly: an address range in the owner's memory
// plus the backend's key for it (UCX: a packed rkey; MPI: unused, the window is
// per rank). Plain data: it travels inside messages.
struct RemoteRegion {
  Rank owner;
  std::uint64_t address = 0;
  std::uint64_t length = 0;
  std::vector<std::byte> key;

  template <class A>
  void serialize(A& ar) {
    ar(owner.value, address, length, key);
  }
};

// A local range registered for one-sided reads; deregistered on destruction.
class MemoryRegistration {
 public:
  virtual ~MemoryRegistration() = default;
  virtual const RemoteRegion& remote() const noexcept = 0;
};

class Transport {
 public:
  using MessageHandler = std::function<void(Rank from, std::span<const std::byte> message)>;
  using FailureHandler = std::function<void(Rank peer, const Status& why)>;
  using Completion = std::function<void(Status)>;

  virtual ~Transport() = default;

  virtual Rank rank() const noexcept = 0;
  virtual int size() const noexcept = 0;
  // "mpi", "ucx", "fake".
  virtual const char* name() const noexcept = 0;

  // Handlers run inside progress(). Set them before the first progress().
  virtual void set_message_handler(MessageHandler handler) = 0;
  // Called once per peer found dead (backends that can tell; see each backend).
  // Failures found before a handler is set are kept and reported once one is.
  virtual void set_failure_handler(FailureHandler handler) = 0;

  // Queues `message` for `to` (which may be this rank). Messages between one pair of
  // ranks arrive in the order sent. kUnavailable if `to` is known dead,
  // kInvalidArgument if it is not a rank of the job.
  virtual Status send(Rank to, std::vector<std::byte> message) = 0;

  // Messages sent to `to` that no progress() call has found finished yet (0 where the
  // backend does not count them). Callers batch further messages to a peer while many
  // are in flight, rather than add to a queue that only grows. Any thread; approximate.
  virtual std::size_t sends_in_flight(Rank to) const noexcept {
    (void)to;
    return 0;
  }

  // Moves messages and transfers along; runs handlers and completions. Returns the
  // number of events handled (0: nothing happened, the caller may back off).
  virtual int progress() = 0;

  // Values of the wake word (below).
  static constexpr std::uint32_t kAwake = 0;
  static constexpr std::uint32_t kAsleep = 1;               // only this rank wakes it
  static constexpr std::uint32_t kAsleepUntilMessage = 2;  // node peers that send to it wake it too
  // A word in memory that this rank's node shares, or null where the backend keeps
  // none. The thread that polls this rank sleeps on it (detail::futex_wait_shared)
  // when it finds nothing to do; while it holds kAsleepUntilMessage, a rank of the
  // node that sends this rank a message sets it to kAwake and wakes the sleeper
  // (detail::futex_wake_shared), which would otherwise sleep out its nap. A sleeper
  // sets the word first, then polls once more before it sleeps: a message sent
  // before the word was set is found then.
  virtual std::atomic<std::uint32_t>* wake_word() noexcept { return nullptr; }

  // Registers [base, base + length) so that peers can get() from it. Backends that
  // can only expose a fixed window return kFailedPrecondition for memory outside it.
  virtual StatusOr<std::unique_ptr<MemoryRegistration>> register_memory(void* base, std::size_t length) = 0;

  // Whether register_memory takes any memory of this process (not only a window),
  // cheaply enough to register one object's own storage. The runtime then lets other
  // ranks read a large value where it lies instead of copying it into its arena
  // first.
  virtual bool exposes_any_memory() const noexcept { return false; }

  // The job declared `peer` dead (its heartbeats stopped, or another rank saw it
  // die): nothing more is sent to it, and transfers in flight from it end with an
  // error instead of waiting for a process that may be hung. Backends that cannot
  // run through a failure ignore it.
  virtual void disconnect(Rank peer) { (void)peer; }

  // Reads `length` bytes at `remote.address + offset` of `remote.owner` into `dst`;
  // `done` runs inside progress() when the bytes are there (or with the error).
  virtual Status get(const RemoteRegion& remote, std::uint64_t offset, void* dst, std::size_t length,
                     Completion done) = 0;
};

}  // namespace brisk
