// libFuzzer target: options, as a user types them.
//
//   * parse_options on argv and BRISK_* environment values (core/options.hpp): every
//     input gives Options or a kInvalidArgument naming the flag or variable; other
//     programs' tokens pass through in order;
//   * parse_size on each token;
//   * parse_fault_injects on BRISK_FAULT_INJECT (runtime/fault_inject.hpp): a plan
//     it accepts names a rank and a window MIN <= MAX, and drawing from it stays
//     inside the window.
//
// Input: lines. "NAME=value" lines whose NAME starts with BRISK_ are environment
// variables, every other line is one argv token (argv[0] is "prog"). The value of
// BRISK_FAULT_INJECT, or the whole input when there is none, goes to
// parse_fault_injects.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "brisk/core/options.hpp"
#include "brisk/runtime/fault_inject.hpp"

namespace {

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "options_fuzzer: %s\n", what);
    std::abort();
  }
}

bool is_invalid_argument(const brisk::Status& s) {
  return s.code() == brisk::StatusCode::kInvalidArgument && !s.message().empty();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> tokens{"prog"};
  std::map<std::string, std::string> env;
  for (std::size_t start = 0; start <= input.size();) {
    const std::size_t end = std::min(input.find('\n', start), input.size());
    const std::string_view line = input.substr(start, end - start);
    const std::size_t eq = line.find('=');
    if (line.substr(0, 6) == "BRISK_" && eq != std::string_view::npos) {
      env[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    } else {
      tokens.emplace_back(line.substr(0, line.find('\0')));  // as argv would hold it
    }
    start = end + 1;
  }
  std::vector<const char*> argv;
  for (const auto& t : tokens) argv.push_back(t.c_str());
  argv.push_back(nullptr);

  auto parsed = brisk::parse_options(static_cast<int>(tokens.size()), argv.data(), &env);
  if (parsed.ok()) {
    // The program's own tokens: a subsequence of argv, argv[0] first.
    const auto& args = parsed->program_args;
    check(!args.empty() && args[0] == "prog", "program_args does not start with argv[0]");
    std::size_t at = 0;
    for (const auto& a : args) {
      while (at < tokens.size() && tokens[at] != a) ++at;
      check(at < tokens.size(), "program_args holds a token that argv does not, or out of order");
      ++at;
    }
  } else {
    check(is_invalid_argument(parsed.status()), "parse_options failed with something other than kInvalidArgument");
  }
  for (const auto& t : tokens) {
    auto bytes = brisk::parse_size(t);
    check(bytes.ok() || is_invalid_argument(bytes.status()), "parse_size failed oddly");
  }

  const auto fault = env.find("BRISK_FAULT_INJECT");
  auto plans = brisk::parse_fault_injects(fault != env.end() ? std::string_view(fault->second) : input);
  if (plans.ok()) {
    for (const brisk::KillPlan& p : *plans) {
      check(p.rank >= 0 && p.min_ms <= p.max_ms, "an accepted fault plan has no valid window");
      const int at = p.delay_ms();
      check(at >= p.min_ms && at <= p.max_ms, "a fault plan drew a point outside its window");
    }
  } else {
    check(is_invalid_argument(plans.status()), "parse_fault_injects failed with something other than kInvalidArgument");
  }
  return 0;
}
