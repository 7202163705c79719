// brisk_rl/pong.hpp — a deterministic single-agent Pong rendered as 84x84 frames.
#pragma once

#include <array>
#include <cstdint>

#include "brisk_rl/rng.hpp"

namespace brisk_rl {

inline constexpr int kFrameSide = 84;
inline constexpr int kFrameSize = kFrameSide * kFrameSide;
inline constexpr int kNumActions = 3;
enum Action : int { kStay = 0, kUp = 1, kDown = 2 };

// Row-major grayscale pixels, 0 = background.
using Frame = std::array<std::uint8_t, kFrameSize>;

// Extra CPU work per step, to model expensive simulators. Each step performs real
// arithmetic (not sleep, not a wall-clock spin: a descheduled rank does not get
// its work done for free) sized by calibrate_step_work(): mean_ms on average, and
// with sigma > 0 a log-normal multiple exp(sigma z - sigma^2 / 2) of it, which
// keeps the mean. z comes from a stream of the game's own state, separate from
// the game's randomness, so a run is reproducible and the game does not depend
// on the cost.
struct StepCost {
  double mean_ms = 0;
  double sigma = 0;
  template <class Archive> void serialize(Archive& ar) { ar(mean_ms, sigma); }
};

struct StepResult {
  float reward = 0;   // +1 the agent won a point, -1 it lost one
  bool done = false;  // the episode is over; call reset() to play on
  float work_ms = 0;  // the extra work this step was sized to (nominal, from StepCost)
};

// Measures once per process how many work-loop iterations run per microsecond of
// thread CPU time (about 50 ms); later calls return at once. Thread-safe. Pong
// calls it on the first step that has a cost, so call it up front to keep the
// measurement out of timed regions.
void calibrate_step_work();
// Iterations per microsecond (calibrates if needed).
double step_work_rate();
// Runs the work loop for about `ms` milliseconds of CPU time. Thread-safe.
void do_step_work(double ms);

// Pong
//
// The agent plays the right paddle against a scripted left paddle that tracks the
// ball at limited speed. Actions: kStay, kUp, kDown. A point scores +1 or -1;
// an episode ends when a side reaches kPointsToWin, or after kMaxSteps steps.
// Each step moves everything once and renders frame().
//
// Determinism: the whole state is the members listed in serialize(); the same
// seed and actions give identical frames and rewards, and a copy is a snapshot
// that continues exactly as the original would. reset() starts a new episode and
// continues the random stream, so successive episodes differ.
// Thread safety: a value type; distinct objects may be used from distinct threads.
class Pong {
 public:
  static constexpr int kPointsToWin = 5;
  static constexpr int kMaxSteps = 1000;

  Pong() : Pong(0) {}
  explicit Pong(std::uint64_t seed, StepCost cost = {});

  void reset();
  // Plays one step; on a finished episode it does nothing and returns done.
  // Throws std::out_of_range for an action outside [0, kNumActions).
  StepResult step(int action);

  const Frame& frame() const { return frame_; }
  int steps() const { return steps_; }
  bool done() const { return done_; }
  int agent_score() const { return agent_score_; }
  int opponent_score() const { return opponent_score_; }
  const StepCost& cost() const { return cost_; }

  // Pixel centres, for scripted players (the rollout policy of tree search).
  float ball_y() const;
  float ball_x() const;
  float paddle_y() const;
  // Whether the ball moves towards the agent's paddle.
  bool ball_incoming() const { return ball_vx_ > 0; }

  template <class Archive> void serialize(Archive& ar) {
    ar(rng_, cost_rng_, cost_, ball_x_, ball_y_, ball_vx_, ball_vy_, agent_y_, opponent_y_, opponent_aim_,
       agent_score_, opponent_score_, steps_, done_, frame_);
  }

 private:
  void serve(int direction);
  void render();

  Rng rng_;
  Rng cost_rng_;
  StepCost cost_;
  // Positions and velocities in 1/16 pixel; paddle positions are their top rows.
  std::int32_t ball_x_ = 0, ball_y_ = 0, ball_vx_ = 0, ball_vy_ = 0;
  std::int32_t agent_y_ = 0, opponent_y_ = 0, opponent_aim_ = 0;
  std::int32_t agent_score_ = 0, opponent_score_ = 0, steps_ = 0;
  bool done_ = false;
  Frame frame_{};
};

}  // namespace brisk_rl
