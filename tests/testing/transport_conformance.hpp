// tests/testing/transport_conformance.hpp — one test suite for every Transport.
//
// Each check is SPMD code for one rank: the fake backend runs it on N threads, the
// MPI and UCX backends in N processes under mpirun. `exposed` is memory of this rank
// that the backend can register (any heap memory for the fake and UCX, the window
// for MPI).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "brisk/core/serialize.hpp"
#include "brisk/core/transport.hpp"

namespace brisk::testing::conformance {

struct Env {
  Transport& transport;
  std::function<void()> barrier;   // all ranks
  std::span<std::byte> exposed;    // at least 1 MiB this rank may register
};

// Runs progress() until pred() holds; false after `timeout`.
template <class Pred>
bool pump(Transport& t, Pred pred, std::chrono::seconds timeout = std::chrono::seconds(30)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (t.progress() == 0) std::this_thread::yield();
    if (std::chrono::steady_clock::now() > deadline) return false;
  }
  return true;
}

// Drains messages that are still in flight, then synchronises.
inline void settle(Env& e) {
  e.barrier();
  for (int i = 0; i < 100; ++i) e.transport.progress();
  e.barrier();
  e.transport.set_message_handler(nullptr);
}

struct Numbered {
  int from = 0;
  int seq = 0;
  std::string text;
  template <class A>
  void serialize(A& ar) {
    ar(from, seq, text);
  }
};

// Every rank sends 200 numbered messages to every rank (itself too); each pair's
// messages arrive complete and in order.
inline void ordered_messages_between_all_pairs(Env e) {
  Transport& t = e.transport;
  const int n = t.size();
  constexpr int kPerPair = 200;
  std::vector<int> next(static_cast<std::size_t>(n), 0);
  std::atomic<int> received{0};
  bool in_order = true;
  t.set_message_handler([&](Rank from, std::span<const std::byte> bytes) {
    auto m = from_bytes<Numbered>(bytes);
    in_order &= m.from == from.value && m.seq == next[static_cast<std::size_t>(from.value)]++ &&
                m.text == "to " + std::to_string(t.rank().value);
    received.fetch_add(1);
  });
  e.barrier();
  for (int seq = 0; seq < kPerPair; ++seq)
    for (int to = 0; to < n; ++to)
      ASSERT_TRUE(t.send(Rank{to}, to_bytes(Numbered{t.rank().value, seq, "to " + std::to_string(to)})).ok());
  EXPECT_TRUE(pump(t, [&] { return received.load() == n * kPerPair; }));
  EXPECT_TRUE(in_order);
  settle(e);
}

// A 4 MiB message arrives intact.
inline void large_message(Env e) {
  Transport& t = e.transport;
  const int n = t.size();
  const int to = (t.rank().value + 1) % n;
  const int from = (t.rank().value + n - 1) % n;
  std::vector<std::byte> big(4 << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::byte>((i * 31 + static_cast<std::size_t>(t.rank().value)) & 0xff);
  bool got = false, intact = false;
  t.set_message_handler([&](Rank r, std::span<const std::byte> bytes) {
    got = true;
    intact = r.value == from && bytes.size() == big.size();
    for (std::size_t i = 0; intact && i < bytes.size(); i += 4093)
      intact = bytes[i] == static_cast<std::byte>((i * 31 + static_cast<std::size_t>(from)) & 0xff);
  });
  e.barrier();
  ASSERT_TRUE(t.send(Rank{to}, big).ok());
  EXPECT_TRUE(pump(t, [&] { return got; }));
  EXPECT_TRUE(intact);
  settle(e);
}

// Each rank exposes a patterned region, announces it, and every rank reads from
// every other rank's region at several offsets with one-sided gets.
inline void one_sided_get(Env e) {
  Transport& t = e.transport;
  const int n = t.size();
  const std::size_t len = 1 << 20;
  ASSERT_GE(e.exposed.size(), len);
  for (std::size_t i = 0; i < len; ++i) e.exposed[i] = static_cast<std::byte>((i + 7 * static_cast<std::size_t>(t.rank().value)) & 0xff);
  auto reg = t.register_memory(e.exposed.data(), len);
  ASSERT_TRUE(reg.ok()) << reg.status().message();
  std::vector<RemoteRegion> regions(static_cast<std::size_t>(n));
  std::atomic<int> known{0};
  t.set_message_handler([&](Rank from, std::span<const std::byte> bytes) {
    regions[static_cast<std::size_t>(from.value)] = from_bytes<RemoteRegion>(bytes);
    known.fetch_add(1);
  });
  e.barrier();
  for (int to = 0; to < n; ++to) ASSERT_TRUE(t.send(Rank{to}, to_bytes((*reg)->remote())).ok());
  ASSERT_TRUE(pump(t, [&] { return known.load() == n; }));
  const std::size_t offsets[] = {0, 1, 4095, 65536, len - 300};
  std::atomic<int> done{0};
  int failures = 0;
  std::vector<std::vector<std::byte>> buffers;
  std::vector<std::pair<int, std::size_t>> what;
  for (int owner = 0; owner < n; ++owner) {
    for (std::size_t off : offsets) {
      buffers.emplace_back(300);
      what.emplace_back(owner, off);
      ASSERT_TRUE(t.get(regions[static_cast<std::size_t>(owner)], off, buffers.back().data(), 300,
                        [&](Status s) {
                          failures += !s.ok();
                          done.fetch_add(1);
                        }).ok());
    }
  }
  ASSERT_TRUE(pump(t, [&] { return done.load() == static_cast<int>(buffers.size()); }));
  EXPECT_EQ(failures, 0);
  for (std::size_t k = 0; k < buffers.size(); ++k) {
    auto [owner, off] = what[k];
    for (std::size_t i = 0; i < 300; ++i) {
      ASSERT_EQ(buffers[k][i], static_cast<std::byte>((off + i + 7 * static_cast<std::size_t>(owner)) & 0xff))
          << "owner " << owner << " offset " << off + i;
    }
  }
  settle(e);
}

// For a backend that registers any memory (Transport::exposes_any_memory): each rank
// registers many small buffers of its heap, one registration each (as the runtime
// registers large values where they lie), twice over, and the next rank reads every
// one of them; more registrations than a backend keeps unpacked keys for.
inline void gets_from_many_registrations(Env e) {
  Transport& t = e.transport;
  ASSERT_TRUE(t.exposes_any_memory()) << t.name() << " registers only its window: not a backend for this test";
  const int n = t.size();
  const int me = t.rank().value;
  constexpr int kBuffers = 300;
  constexpr std::size_t kLen = 256;
  for (int round = 0; round < 2; ++round) {
    std::vector<std::vector<std::byte>> mine(kBuffers, std::vector<std::byte>(kLen));
    std::vector<std::unique_ptr<MemoryRegistration>> regs;
    std::vector<RemoteRegion> announced;
    for (int b = 0; b < kBuffers; ++b) {
      for (std::size_t i = 0; i < kLen; ++i) mine[b][i] = static_cast<std::byte>((i + 3 * b + 11 * me + round) & 0xff);
      auto reg = t.register_memory(mine[b].data(), kLen);
      ASSERT_TRUE(reg.ok()) << reg.status().message();
      announced.push_back((*reg)->remote());
      regs.push_back(std::move(reg).value());
    }
    std::vector<RemoteRegion> theirs;
    std::atomic<bool> known{false};
    t.set_message_handler([&](Rank, std::span<const std::byte> bytes) {
      theirs = from_bytes<std::vector<RemoteRegion>>(bytes);
      known.store(true);
    });
    e.barrier();
    const int from = (me + n - 1) % n;
    ASSERT_TRUE(t.send(Rank{(me + 1) % n}, to_bytes(announced)).ok());
    ASSERT_TRUE(pump(t, [&] { return known.load(); }));
    ASSERT_EQ(theirs.size(), static_cast<std::size_t>(kBuffers));
    std::vector<std::vector<std::byte>> read(kBuffers, std::vector<std::byte>(kLen));
    std::atomic<int> done{0}, failures{0};
    for (int b = 0; b < kBuffers; ++b) {
      ASSERT_TRUE(t.get(theirs[b], 0, read[b].data(), kLen, [&](Status s) {
                     failures.fetch_add(!s.ok());
                     done.fetch_add(1);
                   }).ok());
    }
    ASSERT_TRUE(pump(t, [&] { return done.load() == kBuffers; }));
    EXPECT_EQ(failures.load(), 0);
    for (int b = 0; b < kBuffers; ++b) {
      for (std::size_t i = 0; i < kLen; ++i) {
        ASSERT_EQ(read[b][i], static_cast<std::byte>((i + 3 * b + 11 * from + round) & 0xff))
            << "buffer " << b << " of rank " << from << ", byte " << i << ", round " << round;
      }
    }
    settle(e);  // every rank has read before the registrations go
  }
}

// Four threads send at once while this thread progresses.
inline void concurrent_senders(Env e) {
  Transport& t = e.transport;
  const int n = t.size();
  const int to = (t.rank().value + 1) % n;
  constexpr int kThreads = 4, kEach = 500;
  std::atomic<int> received{0};
  t.set_message_handler([&](Rank, std::span<const std::byte>) { received.fetch_add(1); });
  e.barrier();
  std::vector<std::thread> senders;
  std::atomic<int> send_errors{0};
  for (int k = 0; k < kThreads; ++k) {
    senders.emplace_back([&, k] {
      for (int i = 0; i < kEach; ++i)
        if (!t.send(Rank{to}, to_bytes(std::vector<int>{k, i})).ok()) send_errors.fetch_add(1);
    });
  }
  EXPECT_TRUE(pump(t, [&] { return received.load() == kThreads * kEach; }));
  for (auto& s : senders) s.join();
  EXPECT_EQ(send_errors.load(), 0);
  settle(e);
}

// Sending to a rank that does not exist is an error, not a crash or a hang.
inline void rejects_bad_ranks(Env e) {
  Transport& t = e.transport;
  auto s = t.send(Rank{t.size()}, to_bytes(1));
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(t.send(Rank{-1}, to_bytes(1)).ok());
  e.barrier();
}

}  // namespace brisk::testing::conformance
