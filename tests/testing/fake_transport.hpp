// tests/testing/fake_transport.hpp — an in-process Transport for tests.
//
// A FakeFabric holds N endpoints in one process. Messages go into the receiver's
// inbox and are delivered by its progress(); get() copies from the owner's
// registered memory (same address space) when the requester progresses. kill(r)
// makes rank r dead: sends to it fail and every other endpoint's failure handler
// runs once on its next progress().
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "brisk/core/transport.hpp"

namespace brisk::testing {

class FakeFabric {
 public:
  explicit FakeFabric(int ranks);
  ~FakeFabric();
  // The endpoint of `rank` (owned by the fabric).
  Transport& endpoint(int rank);
  int size() const noexcept { return static_cast<int>(endpoints_.size()); }
  void kill(int rank);

 private:
  friend class FakeEndpoint;
  std::vector<std::unique_ptr<Transport>> endpoints_;
  std::mutex mutex_;
  std::set<int> dead_;
};

}  // namespace brisk::testing
