#include "experiment.hpp"

#include <brisk/brisk.hpp>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <optional>

#include "brisk_rl/mcts.hpp"
#include "brisk_rl/policy.hpp"
#include "brisk_rl/rng.hpp"

namespace brisk_rl {

// What one environment step hands back: the features of the state it reached.
struct EnvStep {
  std::vector<float> features;
  float reward = 0;
  bool done = false;
  template <class A>
  void serialize(A& ar) {
    ar(features, reward, done);
  }
};

// One environment and its feature state: called directly (single) or as an actor.
class Simulator {
 public:
  Simulator() = default;
  Simulator(std::uint64_t seed, StepCost cost) : game_(seed, cost), previous_(game_.frame()) {}
  // Its whole state, for checkpoints (an actor made from it goes on from there).
  Simulator state() const { return *this; }
  template <class A>
  void serialize(A& ar) {
    ar(game_, previous_);
  }
  EnvStep observe() const {
    EnvStep out;
    out.features.resize(kFeatures);
    extract_features(game_.frame(), game_.frame(), out.features.data());
    return out;
  }
  EnvStep step(int action) {
    const StepResult r = game_.step(action);
    if (r.done) {
      game_.reset();
      previous_ = game_.frame();
    }
    EnvStep out;
    out.features.resize(kFeatures);
    extract_features(game_.frame(), previous_, out.features.data());
    previous_ = game_.frame();
    out.reward = r.reward;
    out.done = r.done;
    return out;
  }

 private:
  Pong game_;
  Frame previous_{};
};
BRISK_REMOTE(Simulator::observe);
BRISK_REMOTE(Simulator::step);
BRISK_REMOTE(Simulator::state);

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::uint64_t env_seed(const ExperimentConfig& c, int env) { return mix_seed(c.seed, static_cast<std::uint64_t>(env)); }

// The driver's side, shared by every way: the policy's batched choice, the
// learner, the rewards and the learning curve.
class Agent {
 public:
  Agent() = default;
  explicit Agent(const ExperimentConfig& c)
      : learner_(learner_config(c), c.seed), rngs_(static_cast<std::size_t>(c.envs)),
        features_(static_cast<std::size_t>(c.envs)), actions_(static_cast<std::size_t>(c.envs), kStay),
        returns_(static_cast<std::size_t>(c.envs), 0.0), episodes_(static_cast<std::size_t>(c.envs)) {
    for (int e = 0; e < c.envs; ++e) rngs_[static_cast<std::size_t>(e)] = Rng(mix_seed(c.seed ^ 0xac7ULL, static_cast<std::uint64_t>(e)));
  }

  void set_features(int env, std::vector<float> f) { features_[static_cast<std::size_t>(env)] = std::move(f); }

  // Chooses the next action of each environment in `envs` with one batched forward pass.
  void choose(const std::vector<int>& envs) {
    batch_.resize(envs.size() * kFeatures);
    logits_.resize(envs.size() * kNumActions);
    for (std::size_t i = 0; i < envs.size(); ++i) {
      const auto& f = features_[static_cast<std::size_t>(envs[i])];
      std::copy(f.begin(), f.end(), batch_.begin() + static_cast<std::ptrdiff_t>(i * kFeatures));
    }
    learner_.policy().forward_batch(batch_.data(), static_cast<int>(envs.size()), logits_.data());
    for (std::size_t i = 0; i < envs.size(); ++i) {
      const auto e = static_cast<std::size_t>(envs[i]);
      actions_[e] = sample_action(logits_.data() + i * kNumActions, rngs_[e]);
    }
  }
  int action(int env) const { return actions_[static_cast<std::size_t>(env)]; }

  // The step of `env` with its chosen action returned `s`.
  void observe(int env, EnvStep s, std::int64_t steps, double seconds) {
    const auto e = static_cast<std::size_t>(env);
    learner_.record(env, features_[e].data(), actions_[e], s.reward, s.done);
    returns_[e] += s.reward;
    if (s.done) {
      episodes_[e].push_back(returns_[e]);
      returns_[e] = 0;
    }
    features_[e] = std::move(s.features);
    if (learner_.ready()) {
      const UpdateStats u = learner_.update();
      CurvePoint p;
      p.iteration = u.update;
      p.steps = steps;
      p.wall_s = seconds;
      p.mean_reward = u.mean_episode_reward;
      p.episodes = u.episodes;
      p.entropy = u.entropy;
      p.policy_loss = u.policy_loss;
      p.value_loss = u.value_loss;
      curve_.push_back(p);
    }
  }

  void finish(WayResult& r) const {
    for (const auto& e : episodes_) r.episode_rewards.insert(r.episode_rewards.end(), e.begin(), e.end());
    r.curve = curve_;
    r.final_params = learner_.policy().params();
  }

  // The state a checkpoint keeps (not the scratch buffers of choose()).
  template <class A>
  void serialize(A& ar) {
    ar(learner_, rngs_, features_, actions_, returns_, episodes_, curve_);
  }

 private:
  static LearnerConfig learner_config(const ExperimentConfig& c) {
    LearnerConfig l = c.learner;
    l.envs = c.envs;
    return l;
  }
  Learner learner_;
  std::vector<Rng> rngs_;
  std::vector<std::vector<float>> features_;
  std::vector<int> actions_;
  std::vector<double> returns_;
  std::vector<std::vector<double>> episodes_;
  std::vector<float> batch_, logits_;
  std::vector<CurvePoint> curve_;
};

std::vector<int> all_envs(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

void report(const Progress& progress, std::int64_t done, std::int64_t total, Clock::time_point& last) {
  if (progress && (done >= total || since(last) > 0.2)) {
    progress(done, total);
    last = Clock::now();
  }
}

// The simulator actors, fresh or (`saved`) made from a checkpoint's states.
std::vector<brisk::Actor<Simulator>> make_simulators(const ExperimentConfig& c,
                                                     const std::vector<Simulator>* saved = nullptr) {
  std::vector<brisk::Actor<Simulator>> sims;
  const brisk::ActorOptions options{.max_restarts = c.actor_restarts, .replay_calls = c.actor_restarts > 0};
  for (int e = 0; e < c.envs; ++e) {
    sims.push_back(saved ? brisk::actor<Simulator>(options, (*saved)[static_cast<std::size_t>(e)])
                         : brisk::actor<Simulator>(options, env_seed(c, e), c.cost));
  }
  for (const auto& s : sims) s.rank();  // created everywhere before the clock starts
  return sims;
}

// The simulator actors of a brisk way, created before its clock starts, and their
// first observations handed to the agent.
std::vector<brisk::Actor<Simulator>> start_simulators(const ExperimentConfig& c, Agent& agent) {
  auto sims = make_simulators(c);
  for (int e = 0; e < c.envs; ++e) {
    agent.set_features(e, brisk::get(sims[static_cast<std::size_t>(e)].call(&Simulator::observe)).features);
  }
  return sims;
}

// What a bsp checkpoint keeps: where the run was, and the agent and simulators then.
struct BspCheckpoint {
  std::int64_t total_steps = 0;  // the run's --steps (a checkpoint of another run is not used)
  std::int64_t steps = 0;
  Agent agent;
  std::vector<Simulator> sims;
  template <class A>
  void serialize(A& ar) {
    ar(total_steps, steps, agent, sims);
  }
};
constexpr const char* kBspCheckpoint = "brisk_rl.bsp";

// The bsp state of the checkpoint this run was restored from, when it is this run's.
std::optional<BspCheckpoint> restored_bsp(const ExperimentConfig& c) {
  if (c.checkpoint_rounds <= 0) return std::nullopt;
  auto saved = brisk::checkpoint::load<BspCheckpoint>(kBspCheckpoint);
  if (saved && (saved->total_steps != c.steps || saved->sims.size() != static_cast<std::size_t>(c.envs))) {
    std::fprintf(stderr, "brisk_rl: the checkpoint's bsp state is of another run (%lld steps, %zu environments); "
                         "bsp starts afresh\n",
                 static_cast<long long>(saved->total_steps), saved->sims.size());
    return std::nullopt;
  }
  return saved;
}

int calibrate_here() {
  calibrate_step_work();
  return brisk::rank();
}
BRISK_REMOTE(calibrate_here);

}  // namespace

WayResult run_single(const ExperimentConfig& c, const Progress& progress) {
  WayResult r;
  r.name = "single";
  Agent agent(c);
  std::vector<Simulator> sims;
  for (int e = 0; e < c.envs; ++e) {
    sims.emplace_back(env_seed(c, e), c.cost);
    agent.set_features(e, sims.back().observe().features);
  }
  const auto envs = all_envs(c.envs);
  const auto t0 = Clock::now();
  auto last = t0;
  while (r.steps < c.steps) {
    agent.choose(envs);
    for (int e = 0; e < c.envs; ++e) {
      EnvStep s = sims[static_cast<std::size_t>(e)].step(agent.action(e));
      ++r.steps;
      agent.observe(e, std::move(s), r.steps, since(t0));
    }
    report(progress, r.steps, c.steps, last);
  }
  r.seconds = since(t0);
  agent.finish(r);
  return r;
}

WayResult run_bsp(const ExperimentConfig& c, const Progress& progress) {
  WayResult r;
  r.name = "bsp";
  Agent agent;
  std::vector<brisk::Actor<Simulator>> sims;
  if (auto saved = restored_bsp(c)) {
    agent = std::move(saved->agent);
    sims = make_simulators(c, &saved->sims);
    r.steps = saved->steps;
    std::printf("bsp resumes at step %lld of %lld from checkpoint %llu\n", static_cast<long long>(r.steps),
                static_cast<long long>(c.steps), static_cast<unsigned long long>(brisk::checkpoint::restored()));
  } else {
    agent = Agent(c);
    sims = start_simulators(c, agent);
  }
  const auto envs = all_envs(c.envs);
  std::vector<brisk::Ref<EnvStep>> refs(static_cast<std::size_t>(c.envs));
  const auto t0 = Clock::now();
  auto last = t0;
  std::int64_t rounds = r.steps / c.envs;
  while (r.steps < c.steps) {
    agent.choose(envs);
    for (int e = 0; e < c.envs; ++e) refs[static_cast<std::size_t>(e)] = sims[static_cast<std::size_t>(e)].call(&Simulator::step, agent.action(e));
    for (int e = 0; e < c.envs; ++e) {
      ++r.steps;
      agent.observe(e, brisk::get(refs[static_cast<std::size_t>(e)]), r.steps, since(t0));
    }
    report(progress, r.steps, c.steps, last);
    ++rounds;
    if (c.checkpoint_rounds > 0 && rounds % c.checkpoint_rounds == 0 && r.steps < c.steps) {
      // Between rounds nothing is in flight: the agent and each simulator's state
      // are the whole of the run.
      BspCheckpoint ck;
      ck.total_steps = c.steps;
      ck.steps = r.steps;
      ck.agent = agent;
      for (const auto& s : sims) ck.sims.push_back(brisk::get(s.call(&Simulator::state)));
      brisk::checkpoint::save(kBspCheckpoint, ck);
      brisk::checkpoint::now();
    }
    if (rounds == c.die_after_rounds) {
      std::printf("bsp: killed after round %lld (--die-after-rounds)\n", static_cast<long long>(rounds));
      std::fflush(nullptr);
      raise(SIGKILL);
    }
  }
  r.seconds = since(t0);
  agent.finish(r);
  return r;
}

WayResult run_async(const ExperimentConfig& c, const Progress& progress) {
  WayResult r;
  r.name = "async";
  Agent agent(c);
  auto sims = start_simulators(c, agent);
  const std::size_t k = static_cast<std::size_t>(c.async_batch > 0 ? std::min(c.async_batch, c.envs) : std::max(1, c.envs / 4));
  // One step in flight per environment; `owner` maps a Ref back to its environment.
  std::vector<brisk::Ref<EnvStep>> pending;
  std::vector<int> owner;
  auto launch = [&](const std::vector<int>& envs) {
    agent.choose(envs);
    for (int e : envs) {
      pending.push_back(sims[static_cast<std::size_t>(e)].call(&Simulator::step, agent.action(e)));
      owner.push_back(e);
    }
  };
  const auto t0 = Clock::now();
  auto last = t0;
  std::int64_t launched = c.envs;
  launch(all_envs(c.envs));
  while (!pending.empty()) {
    auto w = brisk::wait(pending, std::min(k, pending.size()));
    std::vector<int> ready_envs;
    std::vector<brisk::Ref<EnvStep>> still;
    std::vector<int> still_owner;
    std::size_t ri = 0;
    for (std::size_t i = 0; i < pending.size(); ++i) {
      if (ri < w.ready.size() && pending[i] == w.ready[ri]) {
        ++r.steps;
        agent.observe(owner[i], brisk::get(pending[i]), r.steps, since(t0));
        ready_envs.push_back(owner[i]);
        ++ri;
      } else {
        still.push_back(pending[i]);
        still_owner.push_back(owner[i]);
      }
    }
    pending = std::move(still);
    owner = std::move(still_owner);
    std::vector<int> next;
    for (int e : ready_envs) {
      if (launched < c.steps) {
        next.push_back(e);
        ++launched;
      }
    }
    if (!next.empty()) launch(next);
    report(progress, r.steps, c.steps, last);
  }
  r.seconds = since(t0);
  agent.finish(r);
  return r;
}

// ---- tree search ------------------------------------------------------------

namespace {

// A rollout from a leaf; a promising one spawns `fanout` more from the same leaf
// (dynamic task creation) and returns the mean of all.
// (mean value, rollouts run) of a rollout from `leaf`; a promising one spawns two
// more from the same leaf (dynamic task creation).
std::pair<double, int> rollout_task(const Leaf& leaf, int depth, int spawn_levels, double promising) {
  const double v = rollout(leaf.state, leaf.first_action, depth, leaf.seed);
  if (spawn_levels <= 0 || v < promising) return {v, 1};
  std::vector<brisk::Ref<std::pair<double, int>>> more;
  for (std::uint64_t j = 1; j <= 2; ++j) {
    Leaf child = leaf;
    child.seed = mix_seed(leaf.seed, j);
    more.push_back(brisk::remote(rollout_task, child, depth, spawn_levels - 1, promising));
  }
  double sum = v;
  int count = 1;
  for (auto [m, n] : brisk::get(more)) {
    sum += m * n;
    count += n;
  }
  return {sum / count, count};
}
BRISK_REMOTE(rollout_task);

}  // namespace

WayResult run_search(const ExperimentConfig& c, bool use_brisk, const Progress& progress) {
  WayResult r;
  r.name = use_brisk ? "search" : "search-single";
  Pong game(c.seed, c.search_cost);
  const auto budget = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(c.move_budget_ms));
  const double promising = 0.0;  // a rollout that did not lose a point
  const auto t0 = Clock::now();
  auto last = t0;
  // Rollouts still running when a move's budget ends are dropped from that move;
  // the last ones are waited for before the way ends.
  std::vector<brisk::Ref<std::pair<double, int>>> abandoned;
  Clock::duration total_wait{};
  std::int64_t finished = 0;
  for (int move = 0; move < c.search_moves && !game.done(); ++move) {
    MctsConfig mc;
    mc.seed = mix_seed(c.seed, static_cast<std::uint64_t>(move));
    Mcts tree(game, mc);
    const auto deadline = Clock::now() + budget;
    if (use_brisk) {
      std::vector<brisk::Ref<std::pair<double, int>>> pending;
      std::vector<std::int32_t> handles;
      std::vector<Clock::time_point> started;
      for (;;) {
        // Start no rollout that would likely end after the budget: its work would
        // be thrown away (the estimate is the mean time rollouts took so far).
        const auto now = Clock::now();
        if (now >= deadline) break;
        const auto typical = finished ? total_wait / finished : Clock::duration::zero();
        while (static_cast<int>(pending.size()) < c.search_parallel && (pending.empty() || deadline - now > typical)) {
          Leaf leaf = tree.select_and_expand();
          handles.push_back(leaf.handle);
          started.push_back(Clock::now());
          pending.push_back(brisk::remote(rollout_task, leaf, c.rollout_depth, 1, promising));
        }
        const auto left = deadline - Clock::now();
        if (left <= Clock::duration::zero()) break;
        auto w = brisk::wait(pending, 1, left);
        const auto seen = Clock::now();
        for (std::size_t i = 0, ri = 0; i < pending.size();) {
          if (ri < w.ready.size() && pending[i] == w.ready[ri]) {
            const auto [value, count] = brisk::get(pending[i]);
            tree.backup(handles[i], value);
            r.rollouts += count;
            total_wait += seen - started[i];
            ++finished;
            ++ri;
            pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
            handles.erase(handles.begin() + static_cast<std::ptrdiff_t>(i));
            started.erase(started.begin() + static_cast<std::ptrdiff_t>(i));
          } else {
            ++i;
          }
        }
      }
      abandoned.insert(abandoned.end(), pending.begin(), pending.end());
      std::erase_if(abandoned, [](const auto& ref) { return ref.ready(); });
    } else {
      while (Clock::now() < deadline) {
        Leaf leaf = tree.select_and_expand();
        const auto [value, count] = rollout_task(leaf, c.rollout_depth, 1, promising);
        tree.backup(leaf.handle, value);
        r.rollouts += count;
      }
    }
    const StepResult s = game.step(tree.best_action());
    r.search_reward += s.reward;
    ++r.moves;
    report(progress, r.moves, c.search_moves, last);
  }
  r.seconds = since(t0);
  r.steps = r.rollouts * c.rollout_depth;
  if (!abandoned.empty()) brisk::wait(abandoned);
  return r;
}

double random_policy_reward(std::uint64_t seed, int episodes) {
  Rng rng(seed);
  double total = 0;
  for (int e = 0; e < episodes; ++e) {
    Pong game(mix_seed(seed, static_cast<std::uint64_t>(e)));
    while (!game.done()) total += game.step(rng.below(kNumActions)).reward;
  }
  return total / episodes;
}

void warm_up_ranks() {
  std::vector<brisk::Ref<int>> refs;
  for (int r = 0; r < brisk::size(); ++r) {
    refs.push_back(brisk::task(calibrate_here).resources({{"rank" + std::to_string(r), 1}}).remote());
  }
  brisk::get(refs);
  calibrate_step_work();
}

}  // namespace brisk_rl
