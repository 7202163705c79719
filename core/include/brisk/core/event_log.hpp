// brisk/core/event_log.hpp — per-thread task event rings and the Chrome trace writer.
//
// Every task records submit (on the submitting thread), start and end (on the
// worker), and the get that consumed it (on the getter). Recording is a few stores
// into a per-thread ring of fixed capacity, so memory stays flat however many tasks
// run; when a ring wraps, its oldest events are overwritten and counted as dropped.
// write_chrome_trace() produces a JSON file that Perfetto and chrome://tracing open:
// one process row per rank, one thread row per worker (and per driver thread).
//
// Thread safety: record() from any thread; snapshot/write from any thread at any
// time (events being written concurrently may be missed, never torn).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "brisk/core/status.hpp"

namespace brisk {

enum class EventKind : std::uint8_t { kSubmit, kStart, kEnd, kGet };

class EventLog {
 public:
  struct Event {
    std::uint64_t ts_ns;     // steady clock
    std::uint64_t task;      // low 64 bits of the task id
    const char* name;        // interned (lives as long as the process)
    EventKind kind;
  };
  struct ThreadEvents {
    std::string thread_name;
    int thread_index;
    std::uint64_t dropped;
    std::vector<Event> events;  // oldest first
  };

  // `per_thread` events are kept per thread (rounded up to a power of two).
  explicit EventLog(std::size_t per_thread);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  void record(EventKind kind, std::uint64_t task, const char* name) noexcept;
  // Names the calling thread's row ("worker 3", "driver").
  void set_thread_name(std::string name);

  std::vector<ThreadEvents> snapshot() const;
  // Events recorded since the last call with the same `cursors` (one position per
  // thread, grown as threads appear), at most `max` of them, oldest first per
  // thread; events overwritten before they were read are skipped and counted in
  // `*missed`. For shipping the log elsewhere in increments.
  std::vector<Event> read_new(std::vector<std::uint64_t>& cursors, std::size_t max, std::uint64_t* missed) const;
  // Writes a Chrome trace of everything recorded so far. pid = rank.
  Status write_chrome_trace(const std::string& path, int rank) const;

  static std::uint64_t now_ns() noexcept;

 private:
  struct Ring;
  Ring* ring_for_this_thread();

  std::size_t capacity_;
  std::uint64_t generation_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Ring>> rings_;
};

// One rank's events, for a timeline merged across ranks (times on a clock shared
// by the ranks).
struct RankEvents {
  struct Event {
    std::int64_t ts_ns = 0;
    std::uint64_t task = 0;
    EventKind kind = EventKind::kSubmit;
    std::string name;
  };
  struct Thread {
    std::string name;
    int index = 0;
    std::uint64_t dropped = 0;
    std::vector<Event> events;  // oldest first
  };
  int rank = 0;
  std::string host;
  std::int64_t os_pid = 0;  // the rank's process id on its host (0: unknown)
  std::vector<Thread> threads;
};

// Writes one Chrome trace with a process row per rank and a thread row per thread.
// The events' times are ns on `clock` (a clock_gettime name: "CLOCK_MONOTONIC" for one
// process's own log, "CLOCK_REALTIME" for ranks merged onto the wall clock); the trace
// names it, with the origin of its "ts", in "otherData", so that it can be laid beside
// other records of that clock (perf record -k mono or -k realtime).
Status write_merged_chrome_trace(const std::string& path, const std::vector<RankEvents>& ranks,
                                 const char* clock);

// Interns a string for event names: the pointer stays valid until exit.
const char* intern(const std::string& s);

}  // namespace brisk
