// brisk_rl/mcts.hpp — UCT tree search over Pong snapshots, with rollouts that can
// run anywhere (other threads, other ranks) and return in any order.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "brisk_rl/pong.hpp"

namespace brisk_rl {

struct MctsConfig {
  double exploration = 1.0;   // UCT constant; rollout values are point rewards
  double virtual_loss = 1.0;  // value charged per rollout in flight through a node
  std::uint64_t seed = 0;     // the leaves' rollout seeds derive from it
};

// Work for one rollout: play `first_action` from `state`, then the rollout
// policy. Pass `handle` back to Mcts::backup with the result.
struct Leaf {
  std::int32_t handle = -1;
  Pong state;
  int first_action = kStay;
  std::uint64_t seed = 0;

  template <class Archive> void serialize(Archive& ar) { ar(handle, state, first_action, seed); }
};

// The default rollout: plays first_action, then up to depth - 1 steps of a
// noisy ball-tracking policy, and returns the sum of rewards (it stops at the end
// of the episode). A pure function of its arguments; each step costs what the
// state's StepCost says. Thread-safe.
double rollout(Pong state, int first_action, int depth, std::uint64_t seed);

// Mcts
//
// select_and_expand() descends by UCT (counting rollouts in flight as visits
// with value -virtual_loss each, so concurrent leaves spread out), adds one child
// and returns its leaf; backup() adds a rollout's value along that path. Any
// number of leaves may be outstanding; backups may arrive in any order. With the
// same sequence of calls the tree and its answers are identical.
// The tree steps a node's state itself (one game step, at its StepCost) the first
// time a descent passes through it, so about one step per rollout runs here.
// Thread safety: none; one thread owns a tree. Leaves are independent values.
class Mcts {
 public:
  explicit Mcts(const Pong& root, MctsConfig config = {});

  Leaf select_and_expand();
  void backup(std::int32_t handle, double value);

  // The root action with the most completed rollouts (ties: higher mean value,
  // then lower index); kStay before any backup.
  int best_action() const;
  int visits(int action) const;         // completed rollouts under a root action
  double mean_value(int action) const;  // their mean value, 0 when none
  int outstanding() const { return outstanding_; }

  // `rollouts` sequential rounds of select_and_expand, rollout(depth), backup.
  void search(int rollouts, int depth);

 private:
  struct Node {
    std::int32_t parent = -1;
    std::int32_t action = kStay;  // from the parent
    std::int32_t state = -1;      // index into states_, -1 until stepped
    float reward = 0;             // of the step from the parent (known with state)
    std::int32_t visits = 0, in_flight = 0;
    double value_sum = 0;
    std::array<std::int32_t, kNumActions> children{-1, -1, -1};
  };

  std::int32_t child_by_uct(const Node& node) const;
  const Pong& state_of(std::int32_t node);
  Leaf make_leaf(std::int32_t node, const Pong& from, int action);

  MctsConfig config_;
  std::vector<Node> nodes_;
  std::vector<Pong> states_;
  std::uint64_t leaves_made_ = 0;
  int outstanding_ = 0;
};

}  // namespace brisk_rl
