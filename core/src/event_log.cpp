#include "brisk/core/event_log.hpp"

#include "brisk/core/array.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <limits>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <unordered_map>

namespace brisk {

const char* intern(const std::string& s) {
  static std::mutex* mutex = new std::mutex;
  static std::set<std::string>* strings = new std::set<std::string>;  // never freed
  std::lock_guard lock(*mutex);
  return strings->insert(s).first->c_str();
}

namespace {
std::atomic<std::uint64_t> g_generation{1};

struct ThreadSlot {
  std::uint64_t generation = 0;
  void* ring = nullptr;
};
thread_local ThreadSlot t_slot;

std::size_t round_pow2(std::size_t n) {
  std::size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}
}  // namespace

// One thread's ring. Written only by its thread; fields are relaxed atomics so that
// a concurrent snapshot is race-free (it rechecks head to drop overwritten slots).
struct EventLog::Ring {
  struct Slot {
    std::atomic<std::uint64_t> ts{0};
    std::atomic<std::uint64_t> task{0};
    std::atomic<const char*> name{nullptr};
    std::atomic<EventKind> kind{EventKind::kSubmit};
  };
  explicit Ring(std::size_t cap, int index) : slots(cap), mask(cap - 1), thread_index(index) {}
  std::vector<Slot> slots;
  std::size_t mask;
  std::atomic<std::uint64_t> head{0};
  int thread_index;
  std::string name;  // guarded by EventLog::mutex_
};

EventLog::EventLog(std::size_t per_thread)
    : capacity_(round_pow2(std::max<std::size_t>(per_thread, 16))),
      generation_(g_generation.fetch_add(1)) {}

EventLog::~EventLog() = default;

std::uint64_t EventLog::now_ns() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

EventLog::Ring* EventLog::ring_for_this_thread() {
  ThreadSlot& slot = t_slot;
  if (slot.generation == generation_) return static_cast<Ring*>(slot.ring);
  std::lock_guard lock(mutex_);
  int index = static_cast<int>(rings_.size());
  detail::PrivateArrays private_memory;  // the runtime's own: not in the arena
  rings_.push_back(std::make_unique<Ring>(capacity_, index));
  rings_.back()->name = fmt::format("thread {}", index);
  slot.generation = generation_;
  slot.ring = rings_.back().get();
  return rings_.back().get();
}

void EventLog::record(EventKind kind, std::uint64_t task, const char* name) noexcept {
  Ring* r = ring_for_this_thread();
  std::uint64_t h = r->head.load(std::memory_order_relaxed);
  Ring::Slot& s = r->slots[h & r->mask];
  s.ts.store(now_ns(), std::memory_order_relaxed);
  s.task.store(task, std::memory_order_relaxed);
  s.name.store(name, std::memory_order_relaxed);
  s.kind.store(kind, std::memory_order_relaxed);
  r->head.store(h + 1, std::memory_order_release);
}

void EventLog::set_thread_name(std::string name) {
  Ring* r = ring_for_this_thread();
  std::lock_guard lock(mutex_);
  r->name = std::move(name);
}

std::vector<EventLog::Event> EventLog::read_new(std::vector<std::uint64_t>& cursors, std::size_t max,
                                                 std::uint64_t* missed) const {
  std::lock_guard lock(mutex_);
  std::vector<Event> out;
  if (cursors.size() < rings_.size()) cursors.resize(rings_.size(), 0);
  for (std::size_t i = 0; i < rings_.size() && out.size() < max; ++i) {
    const Ring& r = *rings_[i];
    const std::uint64_t head = r.head.load(std::memory_order_acquire);
    const std::uint64_t cap = r.slots.size();
    std::uint64_t from = cursors[i];
    if (head > cap && from < head - cap + 1) {
      if (missed) *missed += head - cap + 1 - from;
      from = head - cap + 1;  // the oldest slot may be in the middle of a rewrite
    }
    std::uint64_t to = std::min<std::uint64_t>(head, from + (max - out.size()));
    for (std::uint64_t k = from; k < to; ++k) {
      const Ring::Slot& s = r.slots[k & r.mask];
      out.push_back(Event{s.ts.load(std::memory_order_relaxed), s.task.load(std::memory_order_relaxed),
                          s.name.load(std::memory_order_relaxed), s.kind.load(std::memory_order_relaxed)});
    }
    // Slots rewritten while we read them are unreliable: drop them.
    const std::uint64_t head2 = r.head.load(std::memory_order_acquire);
    if (head2 > cap && head2 - cap + 1 > from) {
      const std::uint64_t bad = std::min<std::uint64_t>(head2 - cap + 1 - from, to - from);
      out.erase(out.end() - static_cast<std::ptrdiff_t>(to - from), out.end() - static_cast<std::ptrdiff_t>(to - from - bad));
      if (missed) *missed += bad;
    }
    cursors[i] = to;
  }
  return out;
}

std::vector<EventLog::ThreadEvents> EventLog::snapshot() const {
  std::lock_guard lock(mutex_);
  std::vector<ThreadEvents> out;
  for (const auto& r : rings_) {
    ThreadEvents te;
    te.thread_name = r->name;
    te.thread_index = r->thread_index;
    std::uint64_t head = r->head.load(std::memory_order_acquire);
    std::uint64_t cap = r->slots.size();
    std::uint64_t first = head > cap ? head - cap : 0;
    std::vector<Event> events;
    events.reserve(head - first);
    for (std::uint64_t i = first; i < head; ++i) {
      const Ring::Slot& s = r->slots[i & r->mask];
      events.push_back(Event{s.ts.load(std::memory_order_relaxed), s.task.load(std::memory_order_relaxed),
                             s.name.load(std::memory_order_relaxed), s.kind.load(std::memory_order_relaxed)});
    }
    // Slots the writer reused while we copied are unreliable: drop them.
    std::uint64_t head2 = r->head.load(std::memory_order_acquire);
    std::uint64_t first_valid = head2 > cap ? head2 - cap + 1 : 0;
    std::size_t skip = first_valid > first ? static_cast<std::size_t>(std::min(first_valid - first, head - first)) : 0;
    te.events.assign(events.begin() + static_cast<std::ptrdiff_t>(skip), events.end());
    te.dropped = first + skip;
    out.push_back(std::move(te));
  }
  return out;
}

namespace {
void json_escape(std::string& out, const char* s) {
  for (; s && *s; ++s) {
    unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
}
}  // namespace

// fmt rather than a JSON library: a trace holds millions of events and this is the
// only writer; tests parse the output with nlohmann::json.
Status write_merged_chrome_trace(const std::string& path, const std::vector<RankEvents>& ranks, const char* clock) {
  std::int64_t t0 = std::numeric_limits<std::int64_t>::max();
  for (const auto& r : ranks)
    for (const auto& t : r.threads)
      for (const auto& e : t.events) t0 = std::min(t0, e.ts_ns);
  std::string out;
  out.reserve(1 << 20);
  if (t0 == std::numeric_limits<std::int64_t>::max()) t0 = 0;
  out += fmt::format(R"({{"displayTimeUnit":"ns","otherData":{{"clock":"{}","origin_ns":{}}},"traceEvents":[)", clock, t0);
  out += "\n";
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  auto us = [&](std::int64_t ns) { return static_cast<double>(ns - t0) / 1000.0; };
  for (const auto& r : ranks) {
    const int rank = r.rank;
    sep();
    out += fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":"rank {})", rank, rank);
    if (!r.host.empty()) {
      out += " (";
      json_escape(out, r.host.c_str());
      out += ")";
    }
    out += "\"}}";
    sep();
    out += fmt::format(R"({{"ph":"M","name":"process_sort_index","pid":{},"tid":0,"args":{{"sort_index":{}}}}})", rank, rank);
    if (r.os_pid > 0) {  // shown beside the rank's name; matches perf's records of the process
      sep();
      out += fmt::format(R"({{"ph":"M","name":"process_labels","pid":{},"tid":0,"args":{{"labels":"pid {}"}}}})", rank, r.os_pid);
    }
    for (const auto& t : r.threads) {
      sep();
      out += fmt::format(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":")", rank, t.index);
      json_escape(out, t.name.c_str());
      out += "\"}}";
      std::unordered_map<std::uint64_t, const RankEvents::Event*> open;
      for (const auto& e : t.events) {
        switch (e.kind) {
          case EventKind::kStart:
            open[e.task] = &e;
            break;
          case EventKind::kEnd: {
            auto it = open.find(e.task);
            if (it == open.end()) break;
            const RankEvents::Event* s = it->second;
            open.erase(it);
            sep();
            out += fmt::format(R"({{"ph":"X","pid":{},"tid":{},"ts":{:.3f},"dur":{:.3f},"name":")", rank, t.index,
                               us(s->ts_ns), static_cast<double>(e.ts_ns - s->ts_ns) / 1000.0);
            json_escape(out, e.name.c_str());
            out += fmt::format(R"(","args":{{"task":"{:016x}"}}}})", e.task);
            sep();
            out += fmt::format(R"({{"ph":"f","bp":"e","pid":{},"tid":{},"ts":{:.3f},"id":"{:x}","name":"submit","cat":"task"}})",
                               rank, t.index, us(s->ts_ns), e.task);
            break;
          }
          case EventKind::kSubmit:
            sep();
            out += fmt::format(R"({{"ph":"s","pid":{},"tid":{},"ts":{:.3f},"id":"{:x}","name":"submit","cat":"task"}})",
                               rank, t.index, us(e.ts_ns), e.task);
            sep();
            out += fmt::format(R"({{"ph":"i","s":"t","pid":{},"tid":{},"ts":{:.3f},"name":"submit )", rank, t.index,
                               us(e.ts_ns));
            json_escape(out, e.name.c_str());
            out += fmt::format(R"(","args":{{"task":"{:016x}"}}}})", e.task);
            break;
          case EventKind::kGet:
            sep();
            out += fmt::format(R"({{"ph":"i","s":"t","pid":{},"tid":{},"ts":{:.3f},"name":"get","args":{{"task":"{:016x}"}}}})",
                               rank, t.index, us(e.ts_ns), e.task);
            break;
        }
      }
    }
  }
  out += "\n]}\n";
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return unavailable(fmt::format("cannot open timeline file {} for writing", path));
  bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) return unavailable(fmt::format("cannot write timeline file {}", path));
  return {};
}

Status EventLog::write_chrome_trace(const std::string& path, int rank) const {
  RankEvents r;
  r.rank = rank;
  r.os_pid = ::getpid();
  for (auto& t : snapshot()) {
    RankEvents::Thread th;
    th.name = std::move(t.thread_name);
    th.index = t.thread_index;
    th.dropped = t.dropped;
    th.events.reserve(t.events.size());
    for (const auto& e : t.events) {
      th.events.push_back(RankEvents::Event{static_cast<std::int64_t>(e.ts_ns), e.task, e.kind, e.name ? e.name : ""});
    }
    r.threads.push_back(std::move(th));
  }
  return write_merged_chrome_trace(path, {r}, "CLOCK_MONOTONIC");  // steady_clock
}

}  // namespace brisk
