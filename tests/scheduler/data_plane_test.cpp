// The data plane without MPI: one DataController and, per in-process "rank", a
// LocalScheduler and a DataWorker, wired as runtime/src/data_plane.cpp wires them.
// Replies (brisk::to_controller: kFetched, kSyncDone, kFailed) go to the controller,
// everything else to the worker's post(). A rank's messages to itself are delivered on the sending thread, as the
// runtime does; messages to other ranks go through one FIFO "wire" thread, as a
// transport's progress thread would deliver them.
//
// Covered: version ordering across ranks, the holder table and copies, templates
// against the same tasks submitted untemplated (validation skips, patches computed
// and reused), edits (move_tasks), malformed messages, failing data tasks, and
// fetches as of the call.
#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "brisk/core/data.hpp"
#include "brisk/core/error.hpp"
#include "brisk/core/function_registry.hpp"
#include "brisk/core/serialize.hpp"
#include "brisk/scheduler/data_controller.hpp"
#include "brisk/scheduler/data_protocol.hpp"
#include "brisk/scheduler/data_worker.hpp"
#include "brisk/scheduler/local_scheduler.hpp"
#include "testing/inline_executor.hpp"

namespace {

using brisk::DataController;
using brisk::DataMessage;
using brisk::DataMode;
using brisk::DataWorker;
using brisk::detail::DataAccess;
using brisk::detail::DataTaskSpec;
using Bytes = std::vector<std::byte>;

// A partition's history: every value appended, and the rank each append ran on.
struct Log {
  std::vector<int> values;
  std::vector<int> ranks;
  template <class A>
  void serialize(A& a) {
    a(values, ranks);
  }
  friend bool operator==(const Log&, const Log&) = default;
  friend std::ostream& operator<<(std::ostream& os, const Log& l) {
    os << "{values [";
    for (int v : l.values) os << v << ' ';
    os << "] ranks [";
    for (int r : l.ranks) os << r << ' ';
    return os << "]}";
  }
};
using Big = std::vector<double>;

const brisk::detail::DataTypeOps* log_type() { return brisk::detail::DataTypeRegistration<Log>::ops; }
const brisk::detail::DataTypeOps* big_type() { return brisk::detail::DataTypeRegistration<Big>::ops; }

int block_param(const brisk::DataTask& t) { return t.params_bytes().empty() ? 0 : t.params<int>(); }

// log(0) += args + the block's parameter, on this rank.
void dp_append(brisk::DataTask& t) {
  Log& l = t.write<Log>(0);
  l.values.push_back(t.args<int>() + block_param(t));
  l.ranks.push_back(t.rank());
}
BRISK_DATA_TASK(dp_append);

// As dp_append, slowly: later commands queue up behind it.
void dp_slow_append(brisk::DataTask& t) {
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  dp_append(t);
}
BRISK_DATA_TASK(dp_slow_append);

// log(0) = {args + parameter} (declared write-only: the old value is not needed).
void dp_overwrite(brisk::DataTask& t) {
  Log& l = t.write<Log>(0);
  l.values.assign(1, t.args<int>() + block_param(t));
  l.ranks.assign(1, t.rank());
}
BRISK_DATA_TASK(dp_overwrite);

// log(0) = log(1).
void dp_snapshot(brisk::DataTask& t) { t.write<Log>(0) = t.read<Log>(1); }
BRISK_DATA_TASK(dp_snapshot);

// log(0) += args + parameter + the last value of every read log (-1 when empty).
void dp_combine(brisk::DataTask& t) {
  int sum = t.args<int>() + block_param(t);
  for (std::size_t i = 1; i < t.accesses(); ++i) {
    const Log& in = t.read<Log>(i);
    sum += in.values.empty() ? -1 : in.values.back();
  }
  Log& out = t.write<Log>(0);
  out.values.push_back(sum);
  out.ranks.push_back(t.rank());
}
BRISK_DATA_TASK(dp_combine);

// Throws for a negative argument, else appends it.
void dp_fail_if_negative(brisk::DataTask& t) {
  if (t.args<int>() < 0) throw std::runtime_error("negative argument " + std::to_string(t.args<int>()));
  dp_append(t);
}
BRISK_DATA_TASK(dp_fail_if_negative);

// Where each dp_where task ran, by its argument.
std::mutex g_where_mutex;
std::map<int, std::thread::id> g_where;
// As dp_append (reading log(1) too), noting the thread it runs on.
void dp_where(brisk::DataTask& t) {
  {
    std::lock_guard lock(g_where_mutex);
    g_where[t.args<int>()] = std::this_thread::get_id();
  }
  (void)t.read<Log>(1);
  dp_append(t);
}
BRISK_DATA_TASK(dp_where);

// big(0) = args doubles of value 1.5.
void dp_fill_big(brisk::DataTask& t) { t.write<Big>(0).assign(static_cast<std::size_t>(t.args<int>()), 1.5); }
BRISK_DATA_TASK(dp_fill_big);

DataAccess rd(std::uint32_t ds, std::uint32_t p) { return {ds, p, DataMode::kRead}; }
DataAccess wr(std::uint32_t ds, std::uint32_t p) { return {ds, p, DataMode::kWrite}; }
DataAccess rw(std::uint32_t ds, std::uint32_t p) { return {ds, p, DataMode::kReadWrite}; }

brisk::FunctionId id_of(brisk::DataFunction f) {
  const brisk::FunctionInfo* info = brisk::detail::find_function(reinterpret_cast<const void*>(f));
  if (!info) throw std::logic_error("a data task of this test is not registered");
  return info->id;
}

DataTaskSpec spec(brisk::DataFunction f, std::vector<DataAccess> accesses, int arg, int rank = -1) {
  return DataTaskSpec{id_of(f), std::move(accesses), brisk::to_bytes(arg), rank};
}

std::shared_ptr<const Bytes> params_of(int k) { return std::make_shared<const Bytes>(brisk::to_bytes(k)); }

Bytes message(DataMessage kind, const brisk::Writer& body) {
  Bytes out;
  out.reserve(body.size() + 1);
  out.push_back(std::byte{static_cast<std::uint8_t>(kind)});
  out.insert(out.end(), body.bytes().begin(), body.bytes().end());
  return out;
}

// Aborts the test program when a test hangs (the usual failure of a data plane), so
// that the hang is named at once instead of at CTest's timeout.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    name_ = info ? std::string(info->test_suite_name()) + "." + info->name() : "a test";
    thread_ = std::thread([this, limit] {
      std::unique_lock lock(mutex_);
      if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
        std::fprintf(stderr, "data_plane_test: %s hung (not done after %lld s)\n", name_.c_str(),
                     static_cast<long long>(limit.count()));
        std::abort();
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::string name_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// N in-process ranks: a LocalScheduler and a DataWorker each, and the controller
// (rank 0). Counts every message delivered, by kind, and copies by (from, to).
class Fabric {
 public:
  // kWire: other ranks' messages through the FIFO wire thread (the runtime's
  // shape); kInline: every message delivered on the sending thread.
  enum class Delivery { kWire, kInline };

  Fabric(int ranks, int workers, Delivery delivery = Delivery::kWire) : size_(ranks), delivery_(delivery) {
    for (int r = 0; r < ranks; ++r) {
      brisk::LocalScheduler::Config config;
      config.workers = workers;
      schedulers_.push_back(std::make_unique<brisk::LocalScheduler>(std::move(config)));
      schedulers_.back()->start();
      // With headroom, as the runtime makes its workers: every message a worker sends
      // begins with kHeadroom zero bytes, taken off here.
      workers_.push_back(std::make_unique<DataWorker>(
          r, *schedulers_.back(), [this, r](int to, Bytes m) { send(r, to, without_headroom(std::move(m))); },
          nullptr, kHeadroom));
    }
    controller_ = std::make_unique<DataController>(ranks, [this](int to, Bytes m) { send(0, to, std::move(m)); });
    wire_ = std::thread([this] { wire_main(); });
  }

  ~Fabric() {
    {
      std::lock_guard lock(wire_mutex_);
      stopping_ = true;
    }
    wire_cv_.notify_all();
    wire_.join();
    for (auto& s : schedulers_) s->shutdown();
    controller_.reset();
    workers_.clear();
    schedulers_.clear();
  }

  DataController& controller() { return *controller_; }
  DataWorker& worker(int r) { return *workers_.at(static_cast<std::size_t>(r)); }
  int size() const { return size_; }
  // The thread that delivers messages between ranks (a transport's progress thread).
  std::thread::id wire_thread() const { return wire_.get_id(); }

  std::uint64_t delivered(DataMessage kind) const {
    return delivered_[static_cast<std::size_t>(kind)].load(std::memory_order_relaxed);
  }
  std::uint64_t copies(int from, int to) const {
    return copies_[static_cast<std::size_t>(from * kMaxRanks + to)].load(std::memory_order_relaxed);
  }
  std::uint64_t copies() const {
    std::uint64_t n = 0;
    for (const auto& c : copies_) n += c.load(std::memory_order_relaxed);
    return n;
  }
  // Replies addressed to a rank other than 0 (the runtime drops them).
  std::uint64_t misrouted() const { return misrouted_.load(std::memory_order_relaxed); }
  std::uint64_t malformed() const {
    std::uint64_t n = 0;
    for (const auto& w : workers_) n += w->malformed();
    return n;
  }

  // Waits until every message sent so far was delivered (the runtime's transport
  // delivers a rank's messages in order, so a rollback's start comes after them).
  void await_wire() const {
    while (in_flight_.load(std::memory_order_acquire) > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  template <class T>
  T fetch(std::uint32_t ds, std::uint32_t part) {
    return brisk::from_bytes<T>(controller_->fetch_wait(controller_->fetch_start(ds, part)));
  }

 private:
  static constexpr int kMaxRanks = 8;
  static constexpr std::size_t kHeadroom = 28;  // the runtime's: a frame header and a data header
  struct Message {
    int from, to;
    Bytes bytes;
  };

  Bytes without_headroom(Bytes m) {
    if (m.size() < kHeadroom ||
        std::any_of(m.begin(), m.begin() + kHeadroom, [](std::byte b) { return b != std::byte{0}; })) {
      ADD_FAILURE() << "a worker's message of " << m.size() << " bytes lacks its " << kHeadroom << " bytes of headroom";
      return m;
    }
    m.erase(m.begin(), m.begin() + kHeadroom);
    return m;
  }

  void send(int from, int to, Bytes m) {
    if (delivery_ == Delivery::kInline || from == to) {
      deliver(from, to, std::move(m));
      return;
    }
    in_flight_.fetch_add(1, std::memory_order_acq_rel);
    {
      std::lock_guard lock(wire_mutex_);
      wire_queue_.push_back(Message{from, to, std::move(m)});
    }
    wire_cv_.notify_one();
  }

  // As RuntimeDataPlane::send and ::receive.
  void deliver(int from, int to, Bytes m) {
    if (!m.empty()) {
      delivered_[static_cast<std::uint8_t>(m[0])].fetch_add(1, std::memory_order_relaxed);
      if (m[0] == std::byte{static_cast<std::uint8_t>(DataMessage::kCopy)}) {
        copies_[static_cast<std::size_t>(from * kMaxRanks + to)].fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (!m.empty() && brisk::to_controller(static_cast<std::uint8_t>(m[0]))) {
      if (to == 0) {
        controller_->handle(from, m);
      } else {
        misrouted_.fetch_add(1, std::memory_order_relaxed);
      }
      return;
    }
    workers_.at(static_cast<std::size_t>(to))->post(from, std::move(m));
  }

  void wire_main() {
    std::unique_lock lock(wire_mutex_);
    for (;;) {
      wire_cv_.wait(lock, [this] { return stopping_ || !wire_queue_.empty(); });
      if (stopping_) return;
      Message m = std::move(wire_queue_.front());
      wire_queue_.pop_front();
      lock.unlock();
      deliver(m.from, m.to, std::move(m.bytes));
      in_flight_.fetch_sub(1, std::memory_order_acq_rel);
      lock.lock();
    }
  }

  int size_;
  Delivery delivery_;
  std::vector<std::unique_ptr<brisk::LocalScheduler>> schedulers_;
  std::vector<std::unique_ptr<DataWorker>> workers_;
  std::unique_ptr<DataController> controller_;

  std::mutex wire_mutex_;
  std::condition_variable wire_cv_;
  std::deque<Message> wire_queue_;
  bool stopping_ = false;
  std::thread wire_;

  std::array<std::atomic<std::uint64_t>, 256> delivered_{};
  std::array<std::atomic<std::uint64_t>, kMaxRanks * kMaxRanks> copies_{};
  std::atomic<std::uint64_t> misrouted_{0};
  std::atomic<std::int64_t> in_flight_{0};  // messages on the wire
};

struct Shape {
  int ranks;
  int workers;
};

class DataPlaneTest : public ::testing::TestWithParam<Shape> {
 protected:
  int n() const { return GetParam().ranks; }
  int workers() const { return GetParam().workers; }
  Watchdog watchdog_{std::chrono::seconds(30)};
};

std::string shape_name(const ::testing::TestParamInfo<Shape>& info) {
  return "ranks" + std::to_string(info.param.ranks) + "_workers" + std::to_string(info.param.workers);
}

INSTANTIATE_TEST_SUITE_P(Shapes, DataPlaneTest,
                         ::testing::Values(Shape{1, 1}, Shape{1, 2}, Shape{2, 1}, Shape{2, 2}, Shape{3, 1},
                                           Shape{3, 2}, Shape{4, 1}, Shape{4, 2}),
                         shape_name);

// ---------------------------------------------------------------------------
// 1. Version ordering.

TEST_P(DataPlaneTest, UpdatesAndReadsOfOnePartitionOnDifferentRanksFollowProgramOrder) {
  Fabric f(n(), workers());
  DataController& c = f.controller();
  const std::uint32_t log = c.create("log", log_type(), {n() - 1});
  constexpr int kOps = 60;
  constexpr int kSnaps = kOps / 4;
  std::vector<int> snap_homes;
  for (int s = 0; s < kSnaps; ++s) snap_homes.push_back((s * 3 + 1) % n());
  const std::uint32_t snaps = c.create("snaps", log_type(), snap_homes);

  Log expected;
  std::vector<Log> expected_snaps(kSnaps);
  int s = 0, writes = 0;
  for (int i = 0; i < kOps; ++i) {
    if (i % 4 == 3) {
      // A reader on the snapshot's home: sees every update before it and none after.
      c.submit(spec(dp_snapshot, {wr(snaps, static_cast<std::uint32_t>(s)), rd(log, 0)}, 0), nullptr);
      expected_snaps[static_cast<std::size_t>(s++)] = expected;
    } else if (i == 30) {
      // A write-only task: no copy, the old value is dropped.
      const int r = i % n();
      c.submit(spec(dp_overwrite, {wr(log, 0)}, i, r), nullptr);
      expected = Log{{i}, {r}};
      ++writes;
    } else {
      const int r = (i * 5 + i / 3) % n();
      c.submit(spec(i % 2 ? dp_slow_append : dp_append, {rw(log, 0)}, i, r), nullptr);
      expected.values.push_back(i);
      expected.ranks.push_back(r);
      ++writes;
    }
    if (i % 10 == 9) c.flush();  // program order spans several batches
  }
  // Fetched without a sync first: the delivery waits for the version.
  EXPECT_EQ(f.fetch<Log>(log, 0), expected);
  for (int k = 0; k < kSnaps; ++k) {
    EXPECT_EQ(f.fetch<Log>(snaps, static_cast<std::uint32_t>(k)), expected_snaps[static_cast<std::size_t>(k)])
        << "snapshot " << k;
    EXPECT_EQ(c.version(snaps, static_cast<std::uint32_t>(k)), 1u);
  }
  c.sync();
  EXPECT_EQ(c.version(log, 0), static_cast<std::uint64_t>(writes));
  EXPECT_EQ(c.stats().commands, static_cast<std::uint64_t>(kOps));
  // Every copy the controller issued crossed the wire exactly once.
  EXPECT_EQ(f.copies(), c.stats().copies);
  if (n() == 1) {
    EXPECT_EQ(c.stats().copies, 0u);
  }
  std::uint64_t run = 0;
  for (int r = 0; r < n(); ++r) run += f.worker(r).tasks_run();
  EXPECT_EQ(run, static_cast<std::uint64_t>(kOps));
  EXPECT_EQ(f.malformed(), 0u);
  EXPECT_EQ(f.misrouted(), 0u);
}

// Several partitions, each a chain of updates on rotating ranks that reads the
// others: every value depends on exactly the versions program order gives.
TEST_P(DataPlaneTest, ChainsAcrossPartitionsReadTheVersionsProgramOrderGives) {
  Fabric f(n(), workers());
  DataController& c = f.controller();
  constexpr std::uint32_t kParts = 3;
  std::vector<int> homes;
  for (std::uint32_t p = 0; p < kParts; ++p) homes.push_back(static_cast<int>(p) % n());
  const std::uint32_t logs = c.create("logs", log_type(), homes);
  std::vector<Log> expected(kParts);
  auto last = [](const Log& l) { return l.values.empty() ? -1 : l.values.back(); };
  for (int i = 0; i < 45; ++i) {
    const auto out = static_cast<std::uint32_t>(i % kParts);
    const auto in = static_cast<std::uint32_t>((i + 1) % kParts);
    const int r = (i / 2) % n();
    c.submit(spec(dp_combine, {rw(logs, out), rd(logs, in)}, i, r), nullptr);
    Log& e = expected[out];
    e.values.push_back(i + last(expected[in]));
    e.ranks.push_back(r);
  }
  for (std::uint32_t p = 0; p < kParts; ++p) EXPECT_EQ(f.fetch<Log>(logs, p), expected[p]) << "partition " << p;
  c.sync();
  EXPECT_EQ(f.copies(), c.stats().copies);
}

// ---------------------------------------------------------------------------
// 2. Copies and the holder table.

TEST_P(DataPlaneTest, HoldersFollowReadsAndWrites) {
  Fabric f(n(), workers());
  DataController& c = f.controller();
  const std::uint32_t p = c.create("p", log_type(), {0});
  std::vector<int> homes;
  for (int r = 0; r < n(); ++r) homes.push_back(r);
  const std::uint32_t snaps = c.create("snaps", log_type(), homes);
  using V = std::vector<int>;

  EXPECT_EQ(c.holders(p, 0), V{0}) << "a new partition is held by its home";
  EXPECT_EQ(c.version(p, 0), 0u);
  c.submit(spec(dp_append, {rw(p, 0)}, 1), nullptr);
  EXPECT_EQ(c.holders(p, 0), V{0});
  EXPECT_EQ(c.version(p, 0), 1u);
  EXPECT_EQ(c.stats().copies, 0u);

  // Reads on every other rank: one copy each from the home, then held there too.
  V all{0};
  for (int r = 1; r < n(); ++r) {
    c.submit(spec(dp_snapshot, {wr(snaps, static_cast<std::uint32_t>(r)), rd(p, 0)}, 0), nullptr);
    all.push_back(r);
    EXPECT_EQ(c.holders(p, 0), all);
  }
  EXPECT_EQ(c.version(p, 0), 1u) << "reads do not change the version";
  EXPECT_EQ(c.stats().copies, static_cast<std::uint64_t>(n() - 1));
  // A second read where it is held: no copy.
  if (n() > 1) c.submit(spec(dp_snapshot, {wr(snaps, 1), rd(p, 0)}, 0), nullptr);
  EXPECT_EQ(c.stats().copies, static_cast<std::uint64_t>(n() - 1));
  c.sync();
  for (int r = 1; r < n(); ++r) EXPECT_EQ(f.copies(0, r), 1u) << "copy 0 -> " << r;
  for (int r = 1; r < n(); ++r) {
    EXPECT_EQ(f.fetch<Log>(snaps, static_cast<std::uint32_t>(r)), (Log{{1}, {0}})) << "snapshot on rank " << r;
  }

  // An update on the last rank (which holds it): no copy; only the writer holds it.
  const int last = n() - 1;
  c.submit(spec(dp_append, {rw(p, 0)}, 2, last), nullptr);
  EXPECT_EQ(c.holders(p, 0), V{last});
  EXPECT_EQ(c.version(p, 0), 2u);
  EXPECT_EQ(c.stats().copies, static_cast<std::uint64_t>(n() - 1));
  // An update back on rank 0, which holds a stale version: one copy.
  c.submit(spec(dp_append, {rw(p, 0)}, 3, 0), nullptr);
  EXPECT_EQ(c.holders(p, 0), V{0});
  EXPECT_EQ(c.version(p, 0), 3u);
  const std::uint64_t copies_before_overwrite = static_cast<std::uint64_t>(n() - 1) + (last != 0 ? 1 : 0);
  EXPECT_EQ(c.stats().copies, copies_before_overwrite);
  // A write-only task elsewhere: no copy (the old value is not needed).
  const int other = 1 % n();
  c.submit(spec(dp_overwrite, {wr(p, 0)}, 4, other), nullptr);
  EXPECT_EQ(c.holders(p, 0), V{other});
  EXPECT_EQ(c.version(p, 0), 4u);
  EXPECT_EQ(c.stats().copies, copies_before_overwrite);
  // Fetching does not change who holds it.
  EXPECT_EQ(f.fetch<Log>(p, 0), (Log{{4}, {other}}));
  EXPECT_EQ(c.holders(p, 0), V{other});
  c.sync();
  EXPECT_EQ(f.copies(), c.stats().copies);
  if (last != 0) {
    EXPECT_EQ(f.copies(last, 0), 1u);
  }
}

// ---------------------------------------------------------------------------
// 3 and 4. Templates and edits, against the same tasks submitted untemplated.

// A 2-partition log `a`, and 1-partition logs `b` and `c`, homes spread over ranks.
struct Family {
  std::uint32_t a, b, c;
};
Family make_family(DataController& c, const std::string& tag, int n) {
  return Family{c.create(tag + ".a", log_type(), {0, 1 % n}), c.create(tag + ".b", log_type(), {2 % n}),
                c.create(tag + ".c", log_type(), {3 % n})};
}
std::vector<std::pair<std::uint32_t, std::uint32_t>> parts_of(const Family& f) {
  return {{f.a, 0}, {f.a, 1}, {f.b, 0}, {f.c, 0}};
}

// S: every partition read at entry is held at exit by the same rank (its
// postcondition covers its precondition), with copies inside the block.
std::vector<DataTaskSpec> block_s(const Family& f) {
  return {spec(dp_append, {rw(f.a, 0)}, 1), spec(dp_append, {rw(f.a, 1)}, 2),
          spec(dp_combine, {rw(f.b, 0), rd(f.a, 0), rd(f.a, 1)}, 3), spec(dp_snapshot, {wr(f.c, 0), rd(f.b, 0)}, 0)};
}
// T: also self-consistent, but with a.0 on rank 1 and b on rank 0, so entering T
// from S (and S from T) needs a patch.
std::vector<DataTaskSpec> block_t(const Family& f, int n) {
  return {spec(dp_append, {rw(f.a, 0)}, 5, 1 % n), spec(dp_combine, {rw(f.b, 0), rd(f.a, 0)}, 7, 0),
          spec(dp_append, {rw(f.a, 0)}, 9, 1 % n)};
}
// U: a.1 read at entry on rank 0 but held at exit by rank 1 only (with two ranks
// or more): its instantiations are always checked.
std::vector<DataTaskSpec> block_u(const Family& f, int n) {
  return {spec(dp_append, {rw(f.a, 1)}, 11, 0), spec(dp_append, {rw(f.a, 1)}, 13, 1 % n)};
}

using Table = std::vector<std::pair<std::vector<int>, std::uint64_t>>;
Table family_table(DataController& c, const Family& f) {
  Table t;
  for (auto [ds, p] : parts_of(f)) t.emplace_back(c.holders(ds, p), c.version(ds, p));
  return t;
}

// The state of a templated family after each step (holders and versions, and a
// fetch of every partition started then), and the same steps run untemplated on
// another family checked against it.
struct TemplatedRun {
  std::vector<Table> tables;
  std::vector<std::vector<std::uint64_t>> keys;

  void record(DataController& c, const Family& x) {
    tables.push_back(family_table(c, x));
    keys.emplace_back();
    for (auto [ds, p] : parts_of(x)) keys.back().push_back(c.fetch_start(ds, p));
  }
  // Submits step `i`'s tasks on `y` and expects the templated run's table and values.
  void expect_same(Fabric& f, DataController& c, const Family& y, std::vector<DataTaskSpec> specs,
                   const std::shared_ptr<const Bytes>& params, std::size_t i, const char* what) const {
    for (auto& s : specs) c.submit(std::move(s), params);
    EXPECT_EQ(family_table(c, y), tables[i]) << "holders and versions after " << what << " " << i;
    const auto py = parts_of(y);
    for (std::size_t j = 0; j < py.size(); ++j) {
      const Log want = f.fetch<Log>(py[j].first, py[j].second);
      const Log got = brisk::from_bytes<Log>(c.fetch_wait(keys[i][j]));
      EXPECT_EQ(got, want) << "partition " << j << " after " << what << " " << i;
    }
  }
};

TEST_P(DataPlaneTest, TemplatesMatchUntemplatedSubmissionsAndSkipOrReuseValidation) {
  Fabric f(n(), workers());
  DataController& c = f.controller();
  const Family x = make_family(c, "x", n());  // templated
  const Family y = make_family(c, "y", n());  // the same tasks, untemplated
  const std::uint32_t ts = c.install("S", block_s(x));
  const std::uint32_t tt = c.install("T", block_t(x, n()));
  const std::uint32_t tu = c.install("U", block_u(x, n()));
  EXPECT_EQ(c.task_rank(ts, 2), 2 % n());
  EXPECT_EQ(c.task_rank(tt, 1), 0);
  EXPECT_EQ(c.task_rank(ts, 4), -1);

  enum Block { kS, kT, kU };
  const std::vector<Block> steps{kS, kS, kS, kT, kS, kT, kS, kT, kU, kU, kU, kS};
  // Templated: every partition fetched (asynchronously) after every step.
  TemplatedRun run;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const int k = 100 * static_cast<int>(i + 1);
    c.instantiate(steps[i] == kS ? ts : steps[i] == kT ? tt : tu, brisk::to_bytes(k));
    run.record(c, x);
  }
  c.sync();
  const brisk::detail::DataPlaneStats st = c.stats();
  EXPECT_EQ(st.instantiations, steps.size());
  if (n() == 1) {
    // One rank: U is self-consistent too.
    EXPECT_EQ(st.validations_skipped, 4u);  // S2, S3, U10, U11
    EXPECT_EQ(st.patches_computed, 5u);     // S1 (no predecessor), T4 (after S), S5 (after T), U9 (after T), S12 (after U)
    EXPECT_EQ(st.patches_reused, 3u);       // T6, S7, T8
  } else {
    EXPECT_EQ(st.validations_skipped, 2u);  // S2, S3
    EXPECT_EQ(st.patches_computed, 6u);     // S1, T4, S5, U9, U10 (after U), S12 (after U)
    EXPECT_EQ(st.patches_reused, 4u);       // T6, S7, T8, U11
  }
  EXPECT_EQ(st.commands, 0u) << "no task was submitted untemplated";

  // Untemplated, step by step, compared with the templated fetches and tables.
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const int k = 100 * static_cast<int>(i + 1);
    auto specs = steps[i] == kS ? block_s(y) : steps[i] == kT ? block_t(y, n()) : block_u(y, n());
    run.expect_same(f, c, y, std::move(specs), params_of(k), i, "step");
  }
  c.sync();
  // The last values, by hand: S's combine after the last S (k = 1200) reads a.0 and a.1.
  const Log b = f.fetch<Log>(x.b, 0);
  ASSERT_FALSE(b.values.empty());
  const Log a0 = f.fetch<Log>(x.a, 0), a1 = f.fetch<Log>(x.a, 1);
  EXPECT_EQ(b.values.back(), 3 + 1200 + a0.values.back() + a1.values.back());
  EXPECT_EQ(a0.values.back(), 1 + 1200);
  EXPECT_EQ(a1.values.back(), 2 + 1200);
  EXPECT_EQ(f.fetch<Log>(x.c, 0), b);
  EXPECT_EQ(b.ranks.back(), 2 % n());
  EXPECT_EQ(f.malformed(), 0u);
}

TEST_P(DataPlaneTest, MovedTasksRunOnTheirNewRankWithTheSameResults) {
  Fabric f(n(), workers());
  DataController& c = f.controller();
  const Family x = make_family(c, "x", n());
  const Family y = make_family(c, "y", n());
  const std::uint32_t ts = c.install("S", block_s(x));
  const std::uint32_t tasks = 4;
  const std::vector<int> home{0, 1 % n(), 2 % n(), 3 % n()};
  for (std::uint32_t t = 0; t < tasks; ++t) ASSERT_EQ(c.task_rank(ts, t), home[t]);
  auto next = [&](int r) { return (r + 1) % n(); };

  struct Step {
    std::vector<std::pair<std::uint32_t, int>> moves;  // before the instantiation
    int instantiations;
  };
  const std::vector<Step> steps{
      {{}, 2},
      {{{1, next(home[1])}}, 2},                                        // one task
      {{{1, home[1]}}, 1},                                              // moved back
      {{{0, next(home[0])}, {2, next(home[2])}, {3, 0}, {2, 0}}, 2},    // several (task 2's last move wins)
      {{{0, next(home[0])}}, 1},                                        // where it already is
      {{{0, home[0]}, {2, home[2]}, {3, home[3]}}, 1},                  // all back
      {{{1, next(home[1])}}, 0},  // two edits, each sent on its own (sync), then
      {{{3, next(home[3])}}, 1},  // one instantiation: the ranks' lists are remade once
      {{{1, home[1]}, {3, home[3]}}, 1},                                // home again
  };

  // Templated.
  std::vector<std::vector<int>> ranks;  // per instantiation: each task's rank
  TemplatedRun run;
  std::vector<std::uint64_t> edit_messages;
  int k = 0;
  for (const Step& s : steps) {
    const std::uint64_t edits_before = f.delivered(DataMessage::kEdit);
    if (!s.moves.empty()) c.move_tasks(ts, s.moves);
    c.sync();
    edit_messages.push_back(f.delivered(DataMessage::kEdit) - edits_before);
    for (int i = 0; i < s.instantiations; ++i) {
      c.instantiate(ts, brisk::to_bytes(++k));
      ranks.emplace_back();
      for (std::uint32_t t = 0; t < tasks; ++t) ranks.back().push_back(c.task_rank(ts, t));
      run.record(c, x);
    }
  }
  c.sync();
  if (n() >= 2) {
    EXPECT_EQ(ranks[2][1], next(home[1])) << "task 1 moved";
    EXPECT_EQ(ranks[4][1], home[1]) << "task 1 moved back";
    EXPECT_EQ(ranks[5], (std::vector<int>{next(home[0]), home[1], 0, 0}));
    EXPECT_GT(edit_messages[1], 0u);
    EXPECT_GT(edit_messages[3], 0u);
  }
  EXPECT_EQ(ranks[7], ranks[6]) << "moving a task to its own rank changes nothing";
  EXPECT_EQ(edit_messages[4], 0u) << "moving a task to its own rank sends no edit";
  EXPECT_EQ(ranks[8], home);
  if (n() >= 2) {
    EXPECT_GT(edit_messages[6], 0u);
    EXPECT_GT(edit_messages[7], 0u);
    EXPECT_EQ(ranks[9], (std::vector<int>{home[0], next(home[1]), home[2], next(home[3])}))
        << "both edits sent before the instantiation hold";
  }
  EXPECT_EQ(ranks[10], home);
  EXPECT_EQ(f.malformed(), 0u);

  // The same tasks untemplated, each on the rank the template had it on.
  k = 0;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    auto specs = block_s(y);
    for (std::uint32_t t = 0; t < tasks; ++t) specs[t].rank = ranks[i][t];
    run.expect_same(f, c, y, std::move(specs), params_of(++k), i, "instantiation");
  }
  c.sync();

  // The moved task recorded the rank it ran on: a.1's appends are by task 1.
  const Log a1 = f.fetch<Log>(x.a, 1);
  ASSERT_EQ(a1.ranks.size(), ranks.size());
  for (std::size_t i = 0; i < ranks.size(); ++i) EXPECT_EQ(a1.ranks[i], ranks[i][1]) << "instantiation " << i;
  std::vector<int> want_values;
  for (int i = 1; i <= k; ++i) want_values.push_back(2 + i);
  EXPECT_EQ(a1.values, want_values) << "results do not depend on where the task ran";
  // Holders after the last instantiation (every task home again): a.1 on its writer
  // and the combine's rank.
  std::vector<int> want_a1{home[1]};
  if (home[2] != home[1]) want_a1.push_back(home[2]);
  std::sort(want_a1.begin(), want_a1.end());
  EXPECT_EQ(c.holders(x.a, 1), want_a1);
  EXPECT_EQ(c.version(x.a, 1), static_cast<std::uint64_t>(k));
}

// ---------------------------------------------------------------------------
// 4b. Templates kept through a rollback: the survivors' epoch takes them over by an
// edit (carry_templates, kAdopt) instead of installing them again.

// A rollback between two fabrics: `after` takes over the templates of `before`,
// whose rank r is after's rank map[r] (-1: lost).
void take_over(Fabric& before, Fabric& after, const std::vector<int>& map) {
  after.controller().carry_templates(before.controller(), map);
  for (std::size_t r = 0; r < map.size(); ++r) {
    if (map[r] >= 0) after.worker(map[r]).carry_templates(before.worker(static_cast<int>(r)), map);
  }
}

// The family `tag` with a's partitions on a_homes, b on b_home and c on c_home.
Family family_on(DataController& c, const std::string& tag, std::vector<int> a_homes, int b_home, int c_home) {
  return Family{c.create(tag + ".a", log_type(), std::move(a_homes)), c.create(tag + ".b", log_type(), {b_home}),
                c.create(tag + ".c", log_type(), {c_home})};
}

TEST(DataPlaneRollbackTest, TemplatesAreTakenOverByAnEditThatMovesOnlyWhatTheLossChanged) {
  Watchdog watchdog(std::chrono::seconds(30));
  // Three ranks: S's tasks (a.0, a.1, b, c) run on ranks 0, 1, 2, 0.
  Fabric before(3, 1);
  DataController& c1 = before.controller();
  const Family x1 = make_family(c1, "x", 3);
  const std::uint32_t s1 = c1.install("S", block_s(x1));
  c1.install("T", block_t(x1, 3));
  c1.install("twice", block_u(x1, 3));
  c1.install("twice", block_u(x1, 3));  // a name installed twice is not kept
  c1.instantiate(s1, brisk::to_bytes(1));
  c1.sync();
  for (std::uint32_t j = 0; j < 4; ++j) ASSERT_EQ(c1.task_rank(s1, j), (std::vector<int>{0, 1, 2, 0})[j]);

  // Rank 1 is lost; processes 0 and 2 go on as ranks 0 and 1.
  Fabric after(2, 1);
  take_over(before, after, {0, -1, 1});
  DataController& c = after.controller();
  // The driver, run again, creates the same data sets (with other ids here: one more
  // comes first) and places a.1, whose rank is lost, on rank 1 (b's).
  (void)c.create("other", log_type(), {0});
  const Family x = family_on(c, "x", {0, 1}, 1, 0);
  const Family y = family_on(c, "y", {0, 1}, 1, 0);  // the same tasks, untemplated

  const std::uint32_t s = c.install("S", block_s(x));
  EXPECT_EQ(c.stats().templates_adopted, 1u);
  EXPECT_EQ(c.stats().adopted_tasks_moved, 1u) << "only the lost rank's task moves";
  for (std::uint32_t j = 0; j < 4; ++j) EXPECT_EQ(c.task_rank(s, j), (std::vector<int>{0, 1, 1, 0})[j]) << "task " << j;
  // T with another shape (one task fewer) and the twice-installed name: installed.
  auto t_specs = [](const Family& f) { return std::vector<DataTaskSpec>{spec(dp_append, {rw(f.a, 0)}, 5, 1)}; };
  const std::uint32_t t = c.install("T", t_specs(x));
  const std::uint32_t u = c.install("twice", block_u(x, 2));
  EXPECT_EQ(c.stats().templates_adopted, 1u);
  c.sync();
  EXPECT_EQ(after.delivered(DataMessage::kAdopt), 2u) << "S on both ranks";
  EXPECT_EQ(after.delivered(DataMessage::kInstall), 4u) << "T and 'twice' on both ranks, S not";
  EXPECT_GT(after.delivered(DataMessage::kEdit), 0u);

  enum Block { kS, kT, kU };
  const std::vector<Block> steps{kS, kS, kT, kS, kU, kS, kS};
  TemplatedRun run;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    c.instantiate(steps[i] == kS ? s : steps[i] == kT ? t : u, brisk::to_bytes(100 * static_cast<int>(i + 1)));
    run.record(c, x);
  }
  c.sync();
  for (std::size_t i = 0; i < steps.size(); ++i) {
    auto specs = steps[i] == kS ? block_s(y) : steps[i] == kT ? t_specs(y) : block_u(y, 2);
    run.expect_same(after, c, y, std::move(specs), params_of(100 * static_cast<int>(i + 1)), i, "step");
  }
  c.sync();
  const Log a1 = after.fetch<Log>(x.a, 1);
  // S's task on a.1 runs on its new rank; U appends on ranks 0 and 1.
  EXPECT_EQ(a1.ranks, (std::vector<int>{1, 1, 1, 0, 1, 1, 1}));
  EXPECT_EQ(after.malformed(), 0u);
  EXPECT_EQ(before.malformed(), 0u);
}

// log(0) += args, after a nap of `args` ms (holds a rank's only worker).
void dp_nap(brisk::DataTask& t) {
  std::this_thread::sleep_for(std::chrono::milliseconds(t.args<int>()));
  dp_append(t);
}
BRISK_DATA_TASK(dp_nap);

// Waits until `f` delivered `n` messages of `kind` in all.
void await_delivered(const Fabric& f, DataMessage kind, std::uint64_t n) {
  while (f.delivered(kind) < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST(DataPlaneRollbackTest, TemplateMessagesAWorkerHadNotHandledYetAreKept) {
  Watchdog watchdog(std::chrono::seconds(30));
  Fabric before(3, 1);
  DataController& c1 = before.controller();
  const Family x1 = make_family(c1, "x", 3);  // b on rank 2
  const std::uint32_t s1 = c1.install("S", block_s(x1));
  c1.sync();
  // Rank 2's only worker naps, so the template messages that follow wait in its inbox.
  c1.submit(spec(dp_nap, {rw(x1.b, 0)}, 400), nullptr);
  c1.flush();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::uint64_t installs = before.delivered(DataMessage::kInstall);
  const std::uint64_t edits = before.delivered(DataMessage::kEdit);
  const std::vector<std::pair<std::uint32_t, int>> to_rank_2{{0, 2}};
  c1.move_tasks(s1, to_rank_2);  // a.0's task to rank 2 (an edit of ranks 0 and 2)
  c1.install("Q", {spec(dp_append, {rw(x1.b, 0)}, 7)});  // on rank 2
  c1.flush();
  await_delivered(before, DataMessage::kInstall, installs + 3);
  await_delivered(before, DataMessage::kEdit, edits + 2);
  // Rank 1 is lost; processes 0 and 2 go on. Rank 2's worker has not handled the
  // edit and Q yet: carry_templates applies them.
  Fabric after(2, 1);
  take_over(before, after, {0, -1, 1});
  DataController& c = after.controller();
  const Family x = family_on(c, "x", {0, 1}, 1, 0);
  const Family y = family_on(c, "y", {0, 1}, 1, 0);
  auto s_specs = [](const Family& f) {
    auto specs = block_s(f);
    specs[0].rank = 1;  // where the edit put it (rank 2 then)
    return specs;
  };
  const std::uint32_t s = c.install("S", s_specs(x));
  const std::uint32_t q = c.install("Q", {spec(dp_append, {rw(x.b, 0)}, 7)});
  EXPECT_EQ(c.stats().templates_adopted, 2u);
  EXPECT_EQ(c.task_rank(s, 0), 1);
  EXPECT_EQ(c.task_rank(q, 0), 1);
  TemplatedRun run;
  for (int i = 0; i < 4; ++i) {
    c.instantiate(i % 2 ? q : s, brisk::to_bytes(10 * (i + 1)));
    run.record(c, x);
  }
  c.sync();
  for (int i = 0; i < 4; ++i) {
    auto specs = i % 2 ? std::vector<DataTaskSpec>{spec(dp_append, {rw(y.b, 0)}, 7)} : s_specs(y);
    run.expect_same(after, c, y, std::move(specs), params_of(10 * (i + 1)), static_cast<std::size_t>(i), "step");
  }
  c.sync();
  EXPECT_EQ(after.fetch<Log>(x.a, 0).ranks, (std::vector<int>{1, 1})) << "a.0's task runs where the edit put it";
  EXPECT_EQ(after.malformed(), 0u);
  EXPECT_EQ(before.malformed(), 0u);
}

TEST(DataPlaneRollbackTest, ASecondLossTakesOverAgainAndAnEditNotSentYetIsInstalledAfresh) {
  Watchdog watchdog(std::chrono::seconds(30));
  // Four ranks; rank 1 lost (processes 0, 2, 3 go on); then process 3 lost.
  Fabric first(4, 1);
  const Family x1 = make_family(first.controller(), "x", 4);  // a {0, 1}, b {2}, c {3}
  first.controller().install("S", block_s(x1));
  first.controller().install("M", block_s(x1));
  first.controller().sync();

  Fabric second(3, 1);
  take_over(first, second, {0, -1, 1, 2});
  DataController& c2 = second.controller();
  const Family x2 = family_on(c2, "x", {0, 0}, 1, 2);
  const std::uint32_t s2 = c2.install("S", block_s(x2));
  const std::uint32_t m2 = c2.install("M", block_s(x2));
  EXPECT_EQ(c2.stats().templates_adopted, 2u);
  c2.instantiate(s2, brisk::to_bytes(1));
  const std::vector<std::pair<std::uint32_t, int>> to_rank_0{{2, 0}};
  c2.move_tasks(m2, to_rank_0);  // not sent before the next loss
  // No flush: process 3 is lost now (what was sent before has arrived).
  second.await_wire();

  Fabric third(2, 1);
  take_over(second, third, {0, 1, -1});
  DataController& c = third.controller();
  const Family x = family_on(c, "x", {0, 0}, 1, 1);
  const Family y = family_on(c, "y", {0, 0}, 1, 1);
  const std::uint32_t s = c.install("S", block_s(x));
  const std::uint32_t m = c.install("M", block_s(x));
  EXPECT_EQ(c.stats().templates_adopted, 1u) << "S taken over again; M, edited and not sent, installed";
  EXPECT_EQ(c.stats().adopted_tasks_moved, 1u) << "c's task, on the lost process";
  TemplatedRun run;
  for (int i = 0; i < 4; ++i) {
    c.instantiate(i % 2 ? m : s, brisk::to_bytes(i + 1));
    run.record(c, x);
  }
  c.sync();
  for (int i = 0; i < 4; ++i) {
    run.expect_same(third, c, y, block_s(y), params_of(i + 1), static_cast<std::size_t>(i), "step");
  }
  c.sync();
  EXPECT_EQ(third.malformed(), 0u);
  EXPECT_EQ(second.malformed(), 0u);
}

// ---------------------------------------------------------------------------
// 5. Malformed messages.

Bytes commands_message(std::vector<brisk::DataCommand> cmds, std::vector<Bytes> params = {}) {
  brisk::Writer w;
  w(params, cmds);
  return message(DataMessage::kCommands, w);
}
Bytes copy_message(std::uint64_t key, const Log& value) {
  brisk::Writer w;
  w(key, value);
  return message(DataMessage::kCopy, w);
}
brisk::DataCommand recv_command(std::uint32_t ds, std::uint32_t part, std::uint64_t key, int from) {
  brisk::DataCommand cmd;
  cmd.kind = brisk::DataCommand::kRecv;
  cmd.accesses = {rd(ds, part)};
  cmd.key = key;
  cmd.peer = from;
  return cmd;
}
brisk::DataCommand deliver_command(std::uint32_t ds, std::uint32_t part, std::uint64_t key) {
  brisk::DataCommand cmd;
  cmd.kind = brisk::DataCommand::kDeliver;
  cmd.accesses = {rd(ds, part)};
  cmd.key = key;
  cmd.peer = 0;
  return cmd;
}

class DataWorkerMalformedTest : public ::testing::Test {
 protected:
  Watchdog watchdog_{std::chrono::seconds(30)};
  Fabric f_{2, 2};
  // Keys far above the controller's (which count from 1).
  static constexpr std::uint64_t kKey = std::uint64_t{1} << 40;

  // Runs a few tasks on both ranks through the controller and checks the results.
  void expect_still_works(std::uint32_t ds) {
    DataController& c = f_.controller();
    for (int i = 0; i < 6; ++i) c.submit(spec(dp_append, {rw(ds, 0)}, i, i % 2), nullptr);
    c.sync();
    EXPECT_EQ(f_.fetch<Log>(ds, 0), (Log{{0, 1, 2, 3, 4, 5}, {0, 1, 0, 1, 0, 1}}));
  }
};

TEST_F(DataWorkerMalformedTest, EachBadMessageIsReportedAndDroppedAndTheWorkerCarriesOn) {
  DataController& c = f_.controller();
  const std::uint32_t ds = c.create("ok", log_type(), {1, 1});
  c.sync();
  DataWorker& w = f_.worker(1);
  std::uint64_t bad = 0;
  auto expect_dropped = [&](const Bytes& m, const char* what) {
    EXPECT_FALSE(w.handle(0, m)) << what;
    EXPECT_EQ(w.malformed(), ++bad) << what;
  };

  expect_dropped({}, "empty");
  expect_dropped({std::byte{0}}, "kind 0");
  expect_dropped({std::byte{200}, std::byte{1}}, "kind 200");
  expect_dropped({std::byte{static_cast<std::uint8_t>(DataMessage::kFetched)}}, "a reply sent to a worker");

  brisk::DataCommand compute;
  compute.kind = brisk::DataCommand::kCompute;
  compute.function = id_of(dp_append);
  compute.accesses = {rw(ds, 0)};
  compute.args = brisk::to_bytes(99);
  compute.task = 1;
  Bytes good = commands_message({compute});
  for (std::size_t cut : {good.size() - 1, good.size() / 2, std::size_t{2}}) {
    expect_dropped(Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(cut)), "truncated commands");
  }
  brisk::DataCommand unknown_set = compute;
  unknown_set.accesses = {rw(77, 0)};
  expect_dropped(commands_message({unknown_set}), "a command naming an unknown data set");
  brisk::DataCommand bad_kind = compute;
  bad_kind.kind = 9;
  expect_dropped(commands_message({bad_kind}), "an unknown command kind");
  brisk::DataCommand bad_flags = compute;
  bad_flags.flags = 0x80;
  expect_dropped(commands_message({bad_flags}), "unknown command flags");
  brisk::DataCommand inline_copy = recv_command(ds, 1, kKey + 9, 0);
  inline_copy.flags = brisk::DataCommand::kRunsInline;
  expect_dropped(commands_message({inline_copy}), "a copy declared inline");
  brisk::DataCommand bad_mode = compute;
  bad_mode.accesses = {DataAccess{ds, 0, static_cast<DataMode>(7)}};
  expect_dropped(commands_message({bad_mode}), "an invalid access mode");
  {
    brisk::Writer b;
    b(std::uint32_t{42}, std::uint64_t{1}, std::uint64_t{1}, Bytes{});
    expect_dropped(message(DataMessage::kInstantiate, b), "an instantiation of an unknown template");
  }
  {
    brisk::Writer b;
    b(std::uint32_t{42}, std::vector<std::uint64_t>{}, std::vector<brisk::DataCommand>{});
    expect_dropped(message(DataMessage::kEdit, b), "an edit of an unknown template");
  }
  {
    brisk::Writer b;
    b(std::uint32_t{3}, std::uint64_t{0x1234}, std::string("x"), std::vector<std::int32_t>{0});
    expect_dropped(message(DataMessage::kDataSet, b), "a data set of an unknown type");
  }
  expect_dropped({std::byte{static_cast<std::uint8_t>(DataMessage::kSync)}, std::byte{1}}, "a truncated sync");
  expect_dropped({std::byte{static_cast<std::uint8_t>(DataMessage::kCheckpointPlan)}, std::byte{1}},
                 "a truncated checkpoint plan");
  expect_dropped({std::byte{static_cast<std::uint8_t>(DataMessage::kRestore)}, std::byte{1}}, "a truncated restore");
  {
    brisk::Writer b;
    b(std::uint32_t{77}, std::uint32_t{0}, std::string("file.h5"), std::string("data/x/0"));
    expect_dropped(message(DataMessage::kRestore, b), "a restore naming an unknown data set");
  }
  expect_dropped({std::byte{static_cast<std::uint8_t>(DataMessage::kAdopt)}, std::byte{1}}, "a truncated adoption");
  {
    brisk::Writer b;
    b(std::uint32_t{5}, std::string("never kept"), std::vector<std::pair<std::uint32_t, std::uint32_t>>{});
    expect_dropped(message(DataMessage::kAdopt, b), "the adoption of a template this rank did not keep");
  }

  // A copy that arrives twice before its recv: the second is dropped, the first kept.
  EXPECT_TRUE(w.handle(0, copy_message(kKey, Log{{7}, {0}})));
  expect_dropped(copy_message(kKey, Log{{8}, {0}}), "a copy arriving twice");
  EXPECT_EQ(w.outstanding(), 0);
  EXPECT_TRUE(w.handle(0, commands_message({recv_command(ds, 1, kKey, 0), deliver_command(ds, 1, kKey + 1)})));
  EXPECT_EQ(brisk::from_bytes<Log>(c.fetch_wait(kKey + 1)), (Log{{7}, {0}})) << "the first copy is the one kept";

  c.sync();
  EXPECT_EQ(w.malformed(), bad);
  expect_still_works(ds);
  EXPECT_EQ(w.malformed(), bad);
  EXPECT_EQ(f_.worker(0).malformed(), 0u);
}

// A task declared runs_inline runs on the thread that makes it ready: here, the one
// that delivers the copy it waits for (the last of its inputs, as the writer on rank 0
// is slow), unless the task before it on rank 1 finished later (a recv waits for the
// readers before it). Others go to a worker.
TEST(DataPlaneInlineTaskTest, AnInlineTaskRunsOnTheThreadThatMakesItReady) {
  Watchdog watchdog{std::chrono::seconds(30)};
  Fabric f(2, 2);
  DataController& c = f.controller();
  const std::uint32_t ds = c.create("inline", log_type(), {0, 1});
  constexpr int kTasks = 12;
  for (int i = 0; i < kTasks; ++i) {
    c.submit(spec(dp_slow_append, {rw(ds, 0)}, i, 0), nullptr);
    DataTaskSpec s = spec(dp_where, {rw(ds, 1), rd(ds, 0)}, i, 1);
    s.runs_inline = i % 2 == 0;
    c.submit(std::move(s), nullptr);
  }
  c.sync();
  Log want;
  for (int i = 0; i < kTasks; ++i) {
    want.values.push_back(i);
    want.ranks.push_back(1);
  }
  EXPECT_EQ(f.fetch<Log>(ds, 1), want);
  std::lock_guard lock(g_where_mutex);
  int on_wire = 0;
  for (int i = 0; i < kTasks; ++i) {
    if (i % 2 == 0) {
      // The first may find its copy already there when rank 1 links it (its commands
      // reach rank 1 late on a loaded machine): it then runs where it was linked.
      const bool wire = g_where.at(i) == f.wire_thread();
      if (i > 0) EXPECT_TRUE(wire || g_where.at(i) == g_where.at(i - 1)) << "inline task " << i;
      on_wire += wire ? 1 : 0;
    } else {
      EXPECT_NE(g_where.at(i), f.wire_thread()) << "task " << i << " is not inline";
    }
  }
  EXPECT_GT(on_wire, 0) << "no inline task ran where its copy landed";
}

// The order in which one rank's worker ran tasks (their args).
std::mutex g_ran_mutex;
std::vector<int> g_ran;
void dp_note_order(brisk::DataTask& t) {
  std::lock_guard lock(g_ran_mutex);
  g_ran.push_back(t.args<int>());
}
BRISK_DATA_TASK(dp_note_order);

// Ready computes run first in program order: with one worker, a task that its
// predecessor's end makes ready runs after a task before it in program order that
// was ready all along (the executor alone runs the newest first: 0, 2, 1).
TEST(DataPlaneOrderTest, ReadyComputesRunInProgramOrder) {
  Watchdog watchdog{std::chrono::seconds(30)};
  Fabric f(1, 1);
  DataController& c = f.controller();
  const std::uint32_t ds = c.create("order", log_type(), {0, 0, 0});
  for (int round = 0; round < 5; ++round) {
    {
      std::lock_guard lock(g_ran_mutex);
      g_ran.clear();
    }
    c.submit(spec(dp_note_order, {rw(ds, 0)}, 0), nullptr);
    c.submit(spec(dp_note_order, {rw(ds, 1)}, 1), nullptr);
    c.submit(spec(dp_note_order, {rw(ds, 2), rd(ds, 0)}, 2), nullptr);
    c.submit(spec(dp_note_order, {rw(ds, 1)}, 3), nullptr);
    c.sync();
    std::lock_guard lock(g_ran_mutex);
    EXPECT_EQ(g_ran, (std::vector<int>{0, 1, 2, 3})) << "round " << round;
  }
}

// A copy handed over in a buffer that is reused right after the call (a transport's
// receive buffer) is read before post_view returns: in place when its recv waits for
// it, kept as a copy when it comes first.
// A command naming an unknown data set is dropped whole: it leaves no empty entry in
// the worker's table of partitions, which a rollback's cancel walks to free them
// (found by tests/fuzz/data_fuzzer: the walk dereferenced the empty entry).
TEST_F(DataWorkerMalformedTest, ACommandNamingAnUnknownDataSetLeavesNoEmptyPartitionBehind) {
  DataController& c = f_.controller();
  const std::uint32_t ds = c.create("known", log_type(), {1, 1});
  c.sync();
  DataWorker& w = f_.worker(1);
  brisk::DataCommand cmd;
  cmd.kind = brisk::DataCommand::kCompute;
  cmd.function = id_of(dp_append);
  cmd.accesses = {rw(ds, 0), rw(ds + 40, 0)};
  cmd.args = brisk::to_bytes(1);
  EXPECT_FALSE(w.handle(0, commands_message({cmd})));
  EXPECT_EQ(w.malformed(), 1u);
  expect_still_works(ds);
  w.cancel();  // frees every partition's value: none is missing
  EXPECT_TRUE(w.cancelled());
}

TEST_F(DataWorkerMalformedTest, ACopyInABorrowedBufferIsReadBeforeTheCallReturns) {
  DataController& c = f_.controller();
  const std::uint32_t ds = c.create("borrowed", log_type(), {1, 1});
  c.sync();
  DataWorker& w = f_.worker(1);
  auto post_and_scribble = [&](std::uint64_t key, const Log& value) {
    Bytes m = copy_message(key, value);
    w.post_view(0, m);
    std::fill(m.begin(), m.end(), std::byte{0xEE});
  };
  // The recv waits first: the copy is unpacked from the message itself.
  EXPECT_TRUE(w.handle(0, commands_message({recv_command(ds, 0, kKey, 0), deliver_command(ds, 0, kKey + 1)})));
  post_and_scribble(kKey, Log{{41}, {0}});
  EXPECT_EQ(brisk::from_bytes<Log>(c.fetch_wait(kKey + 1)), (Log{{41}, {0}}));
  // The copy comes first: it is kept until its recv.
  post_and_scribble(kKey + 2, Log{{42}, {0}});
  EXPECT_TRUE(w.handle(0, commands_message({recv_command(ds, 1, kKey + 2, 0), deliver_command(ds, 1, kKey + 3)})));
  EXPECT_EQ(brisk::from_bytes<Log>(c.fetch_wait(kKey + 3)), (Log{{42}, {0}}));
  // The recv waits for an earlier reader as well as for its data: a copy.
  brisk::DataCommand first = recv_command(ds, 0, kKey + 4, 0), second = recv_command(ds, 0, kKey + 5, 0);
  EXPECT_TRUE(w.handle(0, commands_message({first, second, deliver_command(ds, 0, kKey + 6)})));
  post_and_scribble(kKey + 5, Log{{44}, {0}});
  post_and_scribble(kKey + 4, Log{{43}, {0}});
  EXPECT_EQ(brisk::from_bytes<Log>(c.fetch_wait(kKey + 6)), (Log{{44}, {0}}));
  c.sync();
  EXPECT_EQ(w.malformed(), 0u);
}

// A copy that arrives again after its recv consumed the first is reported and dropped
// (handle returns false), like a duplicate before the recv: after a sync, every copy
// keyed below the sync's mark has been consumed.
TEST_F(DataWorkerMalformedTest, ACopyArrivingAgainAfterItsRecvRanIsDropped) {
  DataController& c = f_.controller();
  const std::uint32_t copied = c.create("copied", log_type(), {0, 1});
  c.submit(spec(dp_append, {rw(copied, 0)}, 7, 0), nullptr);
  // A snapshot on rank 1 of partition 0 (home rank 0): the controller's first key
  // (they count from 1) goes to that copy.
  c.submit(spec(dp_snapshot, {wr(copied, 1), rd(copied, 0)}, 0, 1), nullptr);
  c.sync();
  EXPECT_EQ(f_.fetch<Log>(copied, 1), (Log{{7}, {0}}));
  DataWorker& w = f_.worker(1);
  EXPECT_FALSE(w.handle(0, copy_message(1, Log{{8}, {0}}))) << "a duplicate copy was accepted";
  EXPECT_EQ(w.malformed(), 1u);
  expect_still_works(c.create("ok", log_type(), {1, 1}));
}

TEST(DataControllerMalformedTest, BadRepliesAreDropped) {
  Watchdog watchdog{std::chrono::seconds(30)};
  Fabric f(2, 1);
  DataController& c = f.controller();
  EXPECT_FALSE(c.handle(1, {}));
  const Bytes commands{std::byte{static_cast<std::uint8_t>(DataMessage::kCommands)}};
  EXPECT_FALSE(c.handle(1, commands)) << "a command sent to the controller";
  const Bytes truncated{std::byte{static_cast<std::uint8_t>(DataMessage::kSyncDone)}, std::byte{1}};
  EXPECT_FALSE(c.handle(1, truncated));
  const Bytes truncated_failure{std::byte{static_cast<std::uint8_t>(DataMessage::kFailed)}, std::byte{200}};
  EXPECT_FALSE(c.handle(1, truncated_failure));
  // Nothing of it is left behind: the next sync neither throws nor returns early.
  const std::uint32_t ds = c.create("ok", log_type(), {1});
  c.submit(spec(dp_slow_append, {rw(ds, 0)}, 4), nullptr);
  EXPECT_NO_THROW(c.sync());
  EXPECT_EQ(f.worker(1).tasks_run(), 1u);
  EXPECT_EQ(f.fetch<Log>(ds, 0), (Log{{4}, {1}}));
}

// ---------------------------------------------------------------------------
// 6. A failing data task.

TEST_P(DataPlaneTest, AFailingTaskIsReportedOnceWithItsFunctionAndRank) {
  Fabric f(n(), workers());
  DataController& c = f.controller();
  const int bad_rank = n() - 1;
  const std::uint32_t ds = c.create("d", log_type(), {0, bad_rank});
  c.submit(spec(dp_append, {rw(ds, 0)}, 1), nullptr);
  c.submit(spec(dp_fail_if_negative, {rw(ds, 1)}, -3), nullptr);
  // Work after the failure still runs, reading the failed task's partition as it is.
  c.submit(spec(dp_combine, {rw(ds, 0), rd(ds, 1)}, 10), nullptr);
  int thrown = 0;
  try {
    c.sync();
  } catch (const brisk::TaskError& e) {
    ++thrown;
    EXPECT_EQ(e.function_name(), "dp_fail_if_negative");
    EXPECT_EQ(e.rank(), bad_rank);
    EXPECT_EQ(e.message(), "negative argument -3");
    EXPECT_NE(std::string(e.what()).find("dp_fail_if_negative"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(bad_rank)), std::string::npos) << e.what();
  }
  EXPECT_EQ(thrown, 1);
  EXPECT_NO_THROW(c.sync()) << "a failure is reported once";
  // The combine read the failed task's partition as it was (empty: -1).
  EXPECT_EQ(f.fetch<Log>(ds, 0), (Log{{1, 10 - 1}, {0, 0}}));
  EXPECT_EQ(f.fetch<Log>(ds, 1), Log{}) << "the failed task left its partition as it was";
  // The partition is usable afterwards.
  c.submit(spec(dp_fail_if_negative, {rw(ds, 1)}, 5), nullptr);
  EXPECT_NO_THROW(c.sync());
  EXPECT_EQ(f.fetch<Log>(ds, 1), (Log{{5}, {bad_rank}}));
  EXPECT_EQ(f.misrouted(), 0u);
}

TEST_P(DataPlaneTest, AFailureIsThrownByTheNextFetch) {
  Fabric f(n(), workers());
  DataController& c = f.controller();
  const std::uint32_t ds = c.create("d", log_type(), {n() - 1});
  c.submit(spec(dp_fail_if_negative, {rw(ds, 0)}, -1), nullptr);
  const std::uint64_t key = c.fetch_start(ds, 0);
  EXPECT_THROW((void)c.fetch_wait(key), brisk::TaskError);
  c.fetch_forget(key);
  EXPECT_NO_THROW(c.sync());
  EXPECT_EQ(f.fetch<Log>(ds, 0), Log{});
}

// ---------------------------------------------------------------------------
// 7. Fetches as of the call.

TEST_P(DataPlaneTest, FetchReturnsTheVersionAsOfTheCall) {
  Fabric f(n(), workers());
  DataController& c = f.controller();
  const int home = 1 % n(), away = 2 % n();
  const std::uint32_t ds = c.create("d", log_type(), {home});
  c.submit(spec(dp_slow_append, {rw(ds, 0)}, 1), nullptr);
  c.submit(spec(dp_slow_append, {rw(ds, 0)}, 2), nullptr);
  const std::uint64_t k1 = c.fetch_start(ds, 0);
  EXPECT_EQ(c.version(ds, 0), 2u);
  // Later writes, elsewhere and back home: the home's instance is overwritten by a
  // copy, which must wait for the delivery.
  c.submit(spec(dp_append, {rw(ds, 0)}, 3, away), nullptr);
  c.submit(spec(dp_slow_append, {rw(ds, 0)}, 4, home), nullptr);
  const std::uint64_t k2 = c.fetch_start(ds, 0);
  c.submit(spec(dp_overwrite, {wr(ds, 0)}, 5, 0), nullptr);
  c.submit(spec(dp_append, {rw(ds, 0)}, 6, 0), nullptr);
  const std::uint64_t k3 = c.fetch_start(ds, 0);
  c.submit(spec(dp_append, {rw(ds, 0)}, 7, home), nullptr);
  EXPECT_EQ(brisk::from_bytes<Log>(c.fetch_wait(k3)), (Log{{5, 6}, {0, 0}}));
  EXPECT_EQ(brisk::from_bytes<Log>(c.fetch_wait(k1)), (Log{{1, 2}, {home, home}}));
  EXPECT_EQ(brisk::from_bytes<Log>(c.fetch_wait(k2)), (Log{{1, 2, 3, 4}, {home, home, away, home}}));
  EXPECT_EQ(f.fetch<Log>(ds, 0), (Log{{5, 6, 7}, {0, 0, home}}));
  EXPECT_EQ(c.version(ds, 0), 7u);
  EXPECT_EQ(f.delivered(DataMessage::kFetched), 4u);
}

std::size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// A worker destroyed while commands wait (a recv whose copy never came, a compute
// behind it: a worker a rollback cancelled) frees them with their batch (found by
// tests/fuzz/data_fuzzer under LeakSanitizer).
TEST(DataWorkerLifetimeTest, CommandsThatNeverRanAreFreedWithTheWorker) {
  Watchdog watchdog{std::chrono::seconds(30)};
  constexpr int kWorkers = 64;
  constexpr std::size_t kParams = 256 << 10;  // held by each batch
  const std::size_t before = heap_in_use();
  for (int i = 0; i < kWorkers; ++i) {
    brisk::testing::InlineExecutor executor;
    DataWorker w(1, executor, [](int, Bytes) {});
    brisk::Writer ds;
    ds(std::uint32_t{0}, log_type()->id, std::string("a"), std::vector<std::int32_t>{1});
    ASSERT_TRUE(w.handle(0, message(DataMessage::kDataSet, ds)));
    brisk::DataCommand append;
    append.kind = brisk::DataCommand::kCompute;
    append.function = id_of(dp_append);
    append.accesses = {rw(0, 0)};
    append.args = brisk::to_bytes(1);
    ASSERT_TRUE(w.handle(0, commands_message({recv_command(0, 0, 5, 0), append}, {Bytes(kParams)})));
    executor.run_all();
    EXPECT_EQ(w.outstanding(), 2);
    if (i % 2 == 1) w.cancel();  // as a rollback leaves it
  }
  EXPECT_LT(heap_in_use(), before + kWorkers * kParams / 4) << "the waiting commands' batches were not freed";
}

TEST_P(DataPlaneTest, ForgottenFetchesAreDropped) {
  Fabric f(n(), workers());
  DataController& c = f.controller();
  constexpr int kDoubles = 2 << 20;  // 16 MiB a value
  const std::uint32_t big = c.create("big", big_type(), {n() - 1});
  c.submit(spec(dp_fill_big, {wr(big, 0)}, kDoubles), nullptr);
  c.sync();
  EXPECT_EQ(f.fetch<Big>(big, 0).size(), static_cast<std::size_t>(kDoubles));
  const std::size_t before = heap_in_use();
  for (int i = 0; i < 4; ++i) {
    // Forgotten before the value arrives, then after.
    const std::uint64_t early = c.fetch_start(big, 0);
    c.fetch_forget(early);
    const std::uint64_t late = c.fetch_start(big, 0);
    c.sync();
    c.fetch_forget(late);
  }
  c.sync();
  const std::size_t after = heap_in_use();
  EXPECT_LT(after, before + (8u << 20)) << "forgotten values are kept (" << (after - before) / (1 << 20) << " MiB more)";
  EXPECT_EQ(f.delivered(DataMessage::kFetched), 9u);
  // Fetches still work.
  const Big v = f.fetch<Big>(big, 0);
  ASSERT_EQ(v.size(), static_cast<std::size_t>(kDoubles));
  EXPECT_EQ(v.front(), 1.5);
}

// ---------------------------------------------------------------------------
// Delivery on the sending thread.

// Waits up to `limit` for every worker to have no command left.
bool quiesce(Fabric& f, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    bool idle = true;
    for (int r = 0; r < f.size(); ++r) idle = idle && f.worker(r).outstanding() == 0;
    if (idle) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// DataWorker::handle may be called from any thread. When rank 0's worker thread
// runs a send inline and the copy is handed to rank 1's worker on that same thread
// (an in-process transport that delivers at once), rank 1's recv joins the thread's
// queue of inline copies; it must still be executed and completed by rank 1's
// DataWorker (its combine runs on rank 1, and both ranks' outstanding counts return
// to 0).
TEST(DataPlaneInlineDeliveryTest, EachCommandRunsOnItsOwnRank) {
  Watchdog watchdog{std::chrono::seconds(30)};
  Fabric f(2, 1, Fabric::Delivery::kInline);
  DataController& c = f.controller();
  const std::uint32_t ds = c.create("d", log_type(), {0, 1});
  for (int i = 0; i < 3; ++i) {
    // Slow: rank 1 has linked the recv by the time rank 0 sends.
    c.submit(spec(dp_slow_append, {rw(ds, 0)}, i), nullptr);
    c.submit(spec(dp_combine, {rw(ds, 1), rd(ds, 0)}, 0), nullptr);
  }
  EXPECT_EQ(f.fetch<Log>(ds, 1), (Log{{0, 1, 2}, {1, 1, 1}}));
  ASSERT_TRUE(quiesce(f, std::chrono::milliseconds(2000)))
      << "outstanding commands: rank 0 " << f.worker(0).outstanding() << ", rank 1 " << f.worker(1).outstanding();
  c.sync();
}

}  // namespace
