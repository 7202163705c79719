#include "brisk_rl/pong.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <ctime>
#include <mutex>
#include <stdexcept>
#include <string>

namespace brisk_rl {
namespace {

constexpr std::int32_t kSub = 16;  // sub-pixels per pixel
constexpr std::int32_t kBall = 3 * kSub;
constexpr std::int32_t kPaddleW = 2 * kSub;
constexpr std::int32_t kPaddleH = 14 * kSub;
constexpr std::int32_t kAgentX = 78 * kSub;
constexpr std::int32_t kOpponentX = 4 * kSub;
constexpr std::int32_t kAgentSpeed = 3 * kSub;
constexpr std::int32_t kOpponentSpeed = 2 * kSub;
constexpr std::int32_t kOpponentError = 14 * kSub;  // its aim is off by up to this
constexpr std::int32_t kBallVx = 3 * kSub;
constexpr std::int32_t kMaxVy = 3 * kSub;
constexpr std::int32_t kSide = kFrameSide * kSub;

std::atomic<double> g_work_rate{0};
std::once_flag g_work_once;

// A dependent chain of integer arithmetic that the compiler cannot shorten.
void work_loop(std::uint64_t iterations) {
  std::uint64_t x = 0x243F6A8885A308D3ull;
  for (std::uint64_t i = 0; i < iterations; ++i) {
    x = x * 0x9E3779B97F4A7C15ull + i;
    x ^= x >> 29;
  }
  asm volatile("" : : "r"(x));
}

// CPU time of this thread, which time on other threads or descheduled does not inflate.
double thread_cpu_us() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

double time_work_us(std::uint64_t iterations) {
  const double t0 = thread_cpu_us();
  work_loop(iterations);
  return thread_cpu_us() - t0;
}

void move_towards(std::int32_t& y, std::int32_t target, std::int32_t speed) {
  y += std::clamp(target - y, -speed, speed);
  y = std::clamp(y, 0, kSide - kPaddleH);
}

// The vertical speed a paddle gives the ball: steeper the farther from its centre.
std::int32_t deflect(std::int32_t ball_y, std::int32_t paddle_y) {
  const std::int32_t offset = (ball_y + kBall / 2) - (paddle_y + kPaddleH / 2);
  return std::clamp(offset * kMaxVy / ((kPaddleH + kBall) / 2), -kMaxVy, kMaxVy);
}

bool overlaps(std::int32_t ball_y, std::int32_t paddle_y) {
  return ball_y + kBall > paddle_y && ball_y < paddle_y + kPaddleH;
}

}  // namespace

void calibrate_step_work() {
  std::call_once(g_work_once, [] {
    std::uint64_t n = 1 << 14;
    while (time_work_us(n) < 4000) n *= 2;
    double best = 0;  // the fastest trial: the least disturbed by a busy sibling core
    for (int trial = 0; trial < 5; ++trial) best = std::max(best, n / time_work_us(n));
    g_work_rate.store(best, std::memory_order_release);
  });
}

double step_work_rate() {
  calibrate_step_work();
  return g_work_rate.load(std::memory_order_acquire);
}

void do_step_work(double ms) {
  if (ms > 0) work_loop(static_cast<std::uint64_t>(ms * 1000.0 * step_work_rate()));
}

Pong::Pong(std::uint64_t seed, StepCost cost)
    : rng_(mix_seed(seed, 1)), cost_rng_(mix_seed(seed, 2)), cost_(cost) {
  reset();
}

void Pong::reset() {
  agent_score_ = opponent_score_ = steps_ = 0;
  done_ = false;
  agent_y_ = opponent_y_ = (kSide - kPaddleH) / 2;
  serve(rng_.below(2) == 0 ? -1 : 1);
  render();
}

void Pong::serve(int direction) {
  ball_x_ = (kSide - kBall) / 2;
  ball_y_ = 20 * kSub + rng_.below(44 * kSub);
  ball_vx_ = direction * kBallVx;
  ball_vy_ = rng_.below(kMaxVy + 1) - kMaxVy / 2;
  opponent_aim_ = rng_.below(2 * kOpponentError + 1) - kOpponentError;
}

StepResult Pong::step(int action) {
  if (action < 0 || action >= kNumActions) {
    throw std::out_of_range("brisk_rl::Pong::step: action " + std::to_string(action) +
                            ", expected 0 (stay), 1 (up) or 2 (down)");
  }
  StepResult result;
  if (done_) {
    result.done = true;
    return result;
  }
  if (cost_.mean_ms > 0) {
    double factor = 1;
    if (cost_.sigma > 0) {
      factor = std::exp(cost_.sigma * cost_rng_.normal() - 0.5 * cost_.sigma * cost_.sigma);
    }
    result.work_ms = static_cast<float>(cost_.mean_ms * factor);
    do_step_work(cost_.mean_ms * factor);
  }

  if (action == kUp) agent_y_ = std::max(agent_y_ - kAgentSpeed, 0);
  if (action == kDown) agent_y_ = std::min(agent_y_ + kAgentSpeed, kSide - kPaddleH);
  move_towards(opponent_y_,
               ball_vx_ < 0 ? ball_y_ + kBall / 2 - kPaddleH / 2 + opponent_aim_ : (kSide - kPaddleH) / 2,
               kOpponentSpeed);

  std::int32_t x = ball_x_ + ball_vx_;
  std::int32_t y = ball_y_ + ball_vy_;
  if (y < 0 || y > kSide - kBall) {
    y = y < 0 ? -y : 2 * (kSide - kBall) - y;
    ball_vy_ = -ball_vy_;
  }
  if (ball_vx_ > 0 && ball_x_ + kBall <= kAgentX && x + kBall > kAgentX && overlaps(y, agent_y_)) {
    x = kAgentX - kBall;
    ball_vx_ = -ball_vx_;
    ball_vy_ = deflect(y, agent_y_);
    opponent_aim_ = rng_.below(2 * kOpponentError + 1) - kOpponentError;
  } else if (ball_vx_ < 0 && ball_x_ >= kOpponentX + kPaddleW && x < kOpponentX + kPaddleW &&
             overlaps(y, opponent_y_)) {
    x = kOpponentX + kPaddleW;
    ball_vx_ = -ball_vx_;
    ball_vy_ = deflect(y, opponent_y_);
  }
  ball_x_ = x;
  ball_y_ = y;

  if (ball_x_ >= kSide || ball_x_ + kBall <= 0) {
    const bool agent_won = ball_x_ + kBall <= 0;
    result.reward = agent_won ? 1.0f : -1.0f;
    ++(agent_won ? agent_score_ : opponent_score_);
    serve(agent_won ? -1 : 1);  // towards the side that lost the point
  }
  ++steps_;
  done_ = agent_score_ >= kPointsToWin || opponent_score_ >= kPointsToWin || steps_ >= kMaxSteps;
  result.done = done_;
  render();
  return result;
}

float Pong::ball_y() const { return (ball_y_ + kBall / 2) / float{kSub}; }
float Pong::ball_x() const { return (ball_x_ + kBall / 2) / float{kSub}; }
float Pong::paddle_y() const { return (agent_y_ + kPaddleH / 2) / float{kSub}; }

void Pong::render() {
  frame_.fill(0);
  const auto rect = [this](std::int32_t x, std::int32_t y, std::int32_t w, std::int32_t h,
                           std::uint8_t value) {
    const int x0 = std::max(x / kSub, 0), x1 = std::min((x + w) / kSub, kFrameSide);
    const int y0 = std::max(y / kSub, 0), y1 = std::min((y + h) / kSub, kFrameSide);
    for (int r = y0; r < y1; ++r)
      std::fill_n(frame_.data() + r * kFrameSide + x0, std::max(x1 - x0, 0), value);
  };
  rect(kOpponentX, opponent_y_, kPaddleW, kPaddleH, 160);
  rect(kAgentX, agent_y_, kPaddleW, kPaddleH, 200);
  rect(ball_x_, ball_y_, kBall, kBall, 255);
}

}  // namespace brisk_rl
