// Logistic regression by batch gradient descent over many partitions, with and
// without execution templates, in the same run. One JSON line per mode.
//
//   mpirun -np 4 --oversubscribe --bind-to none build/benchmarks/brisk_logistic_regression \
//       [--partitions=128] [--rows=2000] [--features=16] [--iterations=50] [--mode=both|templates|no_templates]
//
// One iteration: every partition computes its gradient at the current weights (one
// task per partition, on the partition's rank, reading the weights, which the
// runtime copies to every rank), one task sums the gradients and updates the
// weights on rank 0. The template mode records the iteration once and instantiates
// it; the untemplated mode submits its tasks one by one. Both must reach the same
// weights bit for bit (checked).
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "brisk/brisk.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using Vec = std::vector<double>;

struct Partition {
  int rows = 0;
  int features = 0;
  std::vector<float> x;  // rows x features
  std::vector<float> y;  // 0 or 1
  template <class A>
  void serialize(A& a) {
    a(rows, features, x, y);
  }
};

struct Shape {
  int partitions = 128;
  int rows = 2000;
  int features = 16;
  int iterations = 50;
  int modes = 3;  // --mode=both (3), no_templates (1), templates (2)
  template <class A>
  void serialize(A& a) {
    a(partitions, rows, features, iterations);
  }
};

struct Step {
  double rate = 0.5;
  template <class A>
  void serialize(A& a) {
    a(rate);
  }
};

// A reproducible synthetic partition: labels from a fixed hidden hyperplane.
void generate(brisk::DataTask& t) {
  const auto [p, shape] = t.args<std::pair<int, Shape>>();
  Partition& part = t.write<Partition>(0);
  part.rows = shape.rows;
  part.features = shape.features;
  part.x.resize(static_cast<std::size_t>(shape.rows * shape.features));
  part.y.resize(static_cast<std::size_t>(shape.rows));
  std::uint64_t s = 0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(p + 1);
  auto next = [&s] {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<float>((s >> 11) * (1.0 / 9007199254740992.0)) * 2 - 1;
  };
  for (int r = 0; r < shape.rows; ++r) {
    double dot = 0;
    for (int f = 0; f < shape.features; ++f) {
      const float v = next();
      part.x[static_cast<std::size_t>(r * shape.features + f)] = v;
      dot += v * (f % 3 == 0 ? 1.0 : -0.5);
    }
    part.y[static_cast<std::size_t>(r)] = dot > 0 ? 1.0f : 0.0f;
  }
}
BRISK_DATA_TASK(generate);

// grad = X^T (sigmoid(X w) - y); accesses: grad (write), partition, weights.
void gradient(brisk::DataTask& t) {
  const Partition& part = t.read<Partition>(1);
  const Vec& w = t.read<Vec>(2);
  Vec& g = t.write<Vec>(0);
  g.assign(static_cast<std::size_t>(part.features), 0.0);
  for (int r = 0; r < part.rows; ++r) {
    const float* x = part.x.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(part.features);
    double z = 0;
    for (int f = 0; f < part.features; ++f) z += x[f] * w[static_cast<std::size_t>(f)];
    const double e = 1 / (1 + std::exp(-z)) - part.y[static_cast<std::size_t>(r)];
    for (int f = 0; f < part.features; ++f) g[static_cast<std::size_t>(f)] += e * x[f];
  }
}
BRISK_DATA_TASK(gradient);

// w -= rate * sum(grads) / rows; accesses: weights (update), grads...
void update(brisk::DataTask& t) {
  Vec& w = t.write<Vec>(0);
  const auto total_rows = t.args<double>();
  const double rate = t.params<Step>().rate;
  Vec sum(w.size(), 0.0);
  for (std::size_t i = 1; i < t.accesses(); ++i) {
    const Vec& g = t.read<Vec>(i);
    for (std::size_t f = 0; f < sum.size(); ++f) sum[f] += g[f];
  }
  for (std::size_t f = 0; f < w.size(); ++f) w[f] -= rate * sum[f] / total_rows;
}
BRISK_DATA_TASK(update);

void zeros(brisk::DataTask& t) { t.write<Vec>(0).assign(static_cast<std::size_t>(t.args<int>()), 0.0); }
BRISK_DATA_TASK(zeros);

Shape parse(int argc, char** argv) {
  Shape s;
  for (int i = 1; i < argc; ++i) {
    auto value = [&](const char* key, int& out) {
      const std::size_t n = std::strlen(key);
      if (std::strncmp(argv[i], key, n) == 0) out = std::max(1, std::atoi(argv[i] + n));
    };
    value("--partitions=", s.partitions);
    value("--rows=", s.rows);
    value("--features=", s.features);
    value("--iterations=", s.iterations);
    if (std::strcmp(argv[i], "--mode=no_templates") == 0) s.modes = 1;
    if (std::strcmp(argv[i], "--mode=templates") == 0) s.modes = 2;
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const Shape shape = parse(argc, argv);
  return brisk::run(argc, argv, [&] {
    const int ranks = brisk::size();
    const auto np = static_cast<std::size_t>(shape.partitions);
    brisk::DataSet<Partition> data("lr.data", np);
    brisk::DataSet<Vec> grads("lr.grads", np);
    for (int p = 0; p < shape.partitions; ++p) {
      brisk::data_task(generate).writes(data, p).args(std::make_pair(p, shape)).submit();
    }
    const double total_rows = static_cast<double>(shape.partitions) * shape.rows;
    std::vector<Vec> finals;
    for (const bool templated : {false, true}) {
      if (!(shape.modes & (templated ? 2 : 1))) continue;
      brisk::DataSet<Vec> w(templated ? "lr.w.t" : "lr.w.u", 1);
      brisk::data_task(zeros).writes(w, 0).args(shape.features).submit();
      auto body = [&](const Step&) {
        for (int p = 0; p < shape.partitions; ++p) {
          brisk::data_task(gradient).writes(grads, p).reads(data, p).reads(w, 0).submit();
        }
        auto u = brisk::data_task(update).updates(w, 0).args(total_rows);
        for (int p = 0; p < shape.partitions; ++p) u.reads(grads, p);
        u.submit();
      };
      auto iteration = brisk::record<Step>(templated ? "lr" : "lr.plain", body);
      auto run_one = [&](const Step& s) {
        if (templated) {
          iteration.instantiate(s);
        } else {
          iteration.run_untemplated(s);
        }
      };
      run_one(Step{});  // warm (records and installs in template mode)
      brisk::data_sync();
      const auto t0 = Clock::now();
      for (int i = 1; i < shape.iterations; ++i) run_one(Step{});
      const auto t1 = Clock::now();
      const Vec final_w = w.fetch(0);
      const auto t2 = Clock::now();
      finals.push_back(final_w);
      const double iters = shape.iterations - 1;
      // Figures rounded (3 and 1 places); one that is not finite is null.
      const auto fixed = [](double x, double scale) { return std::isfinite(x) ? std::round(x * scale) / scale : x; };
      const nlohmann::ordered_json line = {
          {"benchmark", "logistic_regression"},
          {"ranks", ranks},
          {"mode", templated ? "templates" : "no_templates"},
          {"partitions", shape.partitions},
          {"rows", shape.rows},
          {"features", shape.features},
          {"iterations", shape.iterations - 1},
          {"ms_per_iteration", fixed(std::chrono::duration<double, std::milli>(t2 - t0).count() / iters, 1e3)},
          {"driver_us_per_iteration", fixed(std::chrono::duration<double, std::micro>(t1 - t0).count() / iters, 1e1)},
          {"tasks_per_iteration", shape.partitions + 1}};
      std::printf("%s\n", line.dump().c_str());
    }
    if (finals.size() == 2 && finals[0] != finals[1]) {
      std::fprintf(stderr, "logistic_regression: the two modes reached different weights\n");
      return 1;
    }
    std::fflush(stdout);
    return 0;
  });
}
