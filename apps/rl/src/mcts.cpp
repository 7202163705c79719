#include "brisk_rl/mcts.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace brisk_rl {
namespace {

constexpr double kRolloutNoise = 0.25;  // share of random moves in the rollout policy

int tracking_action(const Pong& state, Rng& rng) {
  if (rng.uniform() < kRolloutNoise) return rng.below(kNumActions);
  const float target = state.ball_incoming() ? state.ball_y() : kFrameSide / 2.0f;
  const float gap = target - state.paddle_y();
  return gap < -2 ? kUp : gap > 2 ? kDown : kStay;
}

}  // namespace

double rollout(Pong state, int first_action, int depth, std::uint64_t seed) {
  Rng rng(seed);
  double total = state.step(first_action).reward;
  for (int d = 1; d < depth && !state.done(); ++d) total += state.step(tracking_action(state, rng)).reward;
  return total;
}

Mcts::Mcts(const Pong& root, MctsConfig config) : config_(config) {
  states_.push_back(root);
  nodes_.emplace_back();
  nodes_[0].state = 0;
}

const Pong& Mcts::state_of(std::int32_t n) {
  if (nodes_[n].state < 0) {
    Pong next = states_[nodes_[nodes_[n].parent].state];
    nodes_[n].reward = next.step(nodes_[n].action).reward;
    nodes_[n].state = static_cast<std::int32_t>(states_.size());
    states_.push_back(std::move(next));
  }
  return states_[nodes_[n].state];
}

std::int32_t Mcts::child_by_uct(const Node& node) const {
  const double log_n = std::log(static_cast<double>(node.visits + node.in_flight));
  std::int32_t best = -1;
  double best_score = -std::numeric_limits<double>::infinity();
  for (std::int32_t c : node.children) {
    const Node& child = nodes_[c];
    const double n = child.visits + child.in_flight;
    const double score = (child.value_sum - config_.virtual_loss * child.in_flight) / n +
                         config_.exploration * std::sqrt(log_n / n);
    if (score > best_score) best_score = score, best = c;
  }
  return best;
}

Leaf Mcts::make_leaf(std::int32_t node, const Pong& from, int action) {
  for (std::int32_t n = node; n >= 0; n = nodes_[n].parent) ++nodes_[n].in_flight;
  ++outstanding_;
  return Leaf{node, from, action, mix_seed(config_.seed, leaves_made_++)};
}

Leaf Mcts::select_and_expand() {
  std::int32_t n = 0;
  for (;;) {
    const Pong& state = state_of(n);
    if (state.done()) {  // replay the step into the end of the episode
      const std::int32_t parent = nodes_[n].parent;
      return make_leaf(n, parent < 0 ? state : states_[nodes_[parent].state], nodes_[n].action);
    }
    for (int a = 0; a < kNumActions; ++a) {
      if (nodes_[n].children[a] >= 0) continue;
      const auto child = static_cast<std::int32_t>(nodes_.size());
      nodes_[n].children[a] = child;
      Node node;
      node.parent = n;
      node.action = a;
      nodes_.push_back(node);
      return make_leaf(child, states_[nodes_[n].state], a);
    }
    n = child_by_uct(nodes_[n]);
  }
}

void Mcts::backup(std::int32_t handle, double value) {
  if (handle < 0 || handle >= static_cast<std::int32_t>(nodes_.size()) || nodes_[handle].in_flight == 0) {
    throw std::invalid_argument("brisk_rl::Mcts::backup: handle " + std::to_string(handle) +
                                " has no rollout in flight");
  }
  --outstanding_;
  for (std::int32_t n = handle; n >= 0; n = nodes_[n].parent) {
    Node& node = nodes_[n];
    --node.in_flight;
    ++node.visits;
    node.value_sum += value;
    if (node.parent >= 0) value += nodes_[node.parent].reward;  // the step into the parent
  }
}

int Mcts::visits(int action) const {
  const std::int32_t c = nodes_[0].children[action];
  return c < 0 ? 0 : nodes_[c].visits;
}

double Mcts::mean_value(int action) const {
  const std::int32_t c = nodes_[0].children[action];
  return c < 0 || nodes_[c].visits == 0 ? 0.0 : nodes_[c].value_sum / nodes_[c].visits;
}

int Mcts::best_action() const {
  int best = kStay;
  for (int a = 1; a < kNumActions; ++a) {
    if (visits(a) > visits(best) || (visits(a) == visits(best) && mean_value(a) > mean_value(best))) best = a;
  }
  return best;
}

void Mcts::search(int rollouts, int depth) {
  for (int i = 0; i < rollouts; ++i) {
    Leaf leaf = select_and_expand();
    backup(leaf.handle, rollout(std::move(leaf.state), leaf.first_action, depth, leaf.seed));
  }
}

}  // namespace brisk_rl
