#include "testing/fake_transport.hpp"

#include <cstring>
#include <fmt/format.h>

namespace brisk::testing {

class FakeEndpoint final : public Transport {
 public:
  FakeEndpoint(FakeFabric* fabric, int rank) : fabric_(fabric), rank_(rank) {}

  Rank rank() const noexcept override { return Rank{rank_}; }
  int size() const noexcept override { return fabric_->size(); }
  const char* name() const noexcept override { return "fake"; }
  void set_message_handler(MessageHandler h) override { on_message_ = std::move(h); }
  void set_failure_handler(FailureHandler h) override { on_failure_ = std::move(h); }

  Status send(Rank to, std::vector<std::byte> message) override {
    if (to.value < 0 || to.value >= size()) return invalid_argument(fmt::format("no rank {} in a job of {}", to.value, size()));
    {
      std::lock_guard lock(fabric_->mutex_);
      if (fabric_->dead_.count(to.value)) return unavailable(fmt::format("rank {} is dead", to.value));
      if (fabric_->dead_.count(rank_)) return unavailable("this rank is dead");
    }
    auto* peer = static_cast<FakeEndpoint*>(&fabric_->endpoint(to.value));
    std::lock_guard lock(peer->mutex_);
    peer->inbox_.push_back({rank_, std::move(message)});
    return {};
  }

  int progress() override {
    int events = 0;
    std::deque<std::pair<int, std::vector<std::byte>>> inbox;
    std::vector<PendingGet> gets;
    {
      std::lock_guard lock(mutex_);
      inbox.swap(inbox_);
      gets.swap(gets_);
    }
    for (auto& [from, bytes] : inbox) {
      ++events;
      if (on_message_) on_message_(Rank{from}, bytes);
    }
    for (auto& g : gets) {
      ++events;
      g.done(complete_get(g));
    }
    std::vector<int> newly_dead;
    if (on_failure_) {
      std::lock_guard lock(fabric_->mutex_);
      for (int r : fabric_->dead_)
        if (r != rank_ && reported_dead_.insert(r).second) newly_dead.push_back(r);
    }
    for (int r : newly_dead) {
      ++events;
      on_failure_(Rank{r}, unavailable(fmt::format("rank {} was killed", r)));
    }
    return events;
  }

  bool exposes_any_memory() const noexcept override { return true; }
  StatusOr<std::unique_ptr<MemoryRegistration>> register_memory(void* base, std::size_t length) override {
    auto reg = std::make_unique<Registration>(this, base, length);
    std::lock_guard lock(mutex_);
    regions_[reinterpret_cast<std::uintptr_t>(base)] = length;
    return std::unique_ptr<MemoryRegistration>(std::move(reg));
  }

  Status get(const RemoteRegion& remote, std::uint64_t offset, void* dst, std::size_t length,
             Completion done) override {
    if (remote.owner.value < 0 || remote.owner.value >= size())
      return invalid_argument(fmt::format("no rank {} in a job of {}", remote.owner.value, size()));
    std::lock_guard lock(mutex_);
    gets_.push_back({remote, offset, dst, length, std::move(done)});
    return {};
  }

 private:
  struct Registration final : MemoryRegistration {
    Registration(FakeEndpoint* ep, void* base, std::size_t length) : ep(ep) {
      region.owner = Rank{ep->rank_};
      region.address = reinterpret_cast<std::uintptr_t>(base);
      region.length = length;
    }
    ~Registration() override {
      std::lock_guard lock(ep->mutex_);
      ep->regions_.erase(region.address);
    }
    const RemoteRegion& remote() const noexcept override { return region; }
    FakeEndpoint* ep;
    RemoteRegion region;
  };
  struct PendingGet {
    RemoteRegion remote;
    std::uint64_t offset;
    void* dst;
    std::size_t length;
    Completion done;
  };

  Status complete_get(const PendingGet& g) {
    {
      std::lock_guard lock(fabric_->mutex_);
      if (fabric_->dead_.count(g.remote.owner.value)) return unavailable(fmt::format("rank {} is dead", g.remote.owner.value));
    }
    auto* owner = static_cast<FakeEndpoint*>(&fabric_->endpoint(g.remote.owner.value));
    std::lock_guard lock(owner->mutex_);
    auto it = owner->regions_.upper_bound(g.remote.address);
    if (it == owner->regions_.begin()) return invalid_argument("get from memory that is not registered");
    --it;
    std::uint64_t start = g.remote.address + g.offset;
    if (start < it->first || start + g.length > it->first + it->second || g.offset + g.length > g.remote.length)
      return invalid_argument("get outside the registered region");
    std::memcpy(g.dst, reinterpret_cast<const void*>(start), g.length);
    return {};
  }

  FakeFabric* fabric_;
  int rank_;
  MessageHandler on_message_;
  FailureHandler on_failure_;
  std::mutex mutex_;
  std::deque<std::pair<int, std::vector<std::byte>>> inbox_;
  std::vector<PendingGet> gets_;
  std::map<std::uintptr_t, std::size_t> regions_;
  std::set<int> reported_dead_;
};

FakeFabric::FakeFabric(int ranks) {
  for (int r = 0; r < ranks; ++r) endpoints_.push_back(std::make_unique<FakeEndpoint>(this, r));
}
FakeFabric::~FakeFabric() = default;

Transport& FakeFabric::endpoint(int rank) { return *endpoints_.at(static_cast<std::size_t>(rank)); }

void FakeFabric::kill(int rank) {
  std::lock_guard lock(mutex_);
  dead_.insert(rank);
}

}  // namespace brisk::testing
