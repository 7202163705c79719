#include "brisk/core/options.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <string>
#include <vector>

namespace brisk {
namespace {

using Env = std::map<std::string, std::string>;

// Parses "prog" followed by `args`, with `env` as the environment.
StatusOr<ParsedOptions> parse(std::vector<std::string> args, const Env& env = {}) {
  args.insert(args.begin(), "prog");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  argv.push_back(nullptr);
  return parse_options(static_cast<int>(args.size()), argv.data(), &env);
}

Options parse_ok(std::vector<std::string> args, const Env& env = {}) {
  auto parsed = parse(std::move(args), env);
  EXPECT_TRUE(parsed.ok()) << parsed.status().to_string();
  return parsed.ok() ? parsed->options : Options{};
}

// The message of a parse that must fail with kInvalidArgument.
std::string parse_error(std::vector<std::string> args, const Env& env = {}) {
  auto parsed = parse(std::move(args), env);
  EXPECT_FALSE(parsed.ok());
  if (parsed.ok()) return "";
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  return parsed.status().message();
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << "in: " << (haystack)

TEST(OptionsTest, DefaultsWithNoFlagsAndNoEnvironment) {
  auto parsed = parse({});
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  const Options& o = parsed->options;
  EXPECT_EQ(o.workers, 0);
  EXPECT_EQ(o.idle, IdleMode::kBackoff);
  EXPECT_EQ(o.spin, std::chrono::microseconds(50));
  EXPECT_EQ(o.store_bytes, 0u);
  EXPECT_EQ(o.spill_dir, "");
  EXPECT_EQ(o.spill_bytes, 0u);
  EXPECT_TRUE(o.events);
  EXPECT_EQ(o.event_buffer, std::size_t{1} << 16);
  EXPECT_EQ(o.timeline, "");
  EXPECT_TRUE(o.resources.empty());
  EXPECT_TRUE(o.bind);
  EXPECT_FALSE(o.keep_heap);
  EXPECT_FALSE(parsed->help_requested);
  EXPECT_EQ(parsed->program_args, std::vector<std::string>{"prog"});
}

TEST(OptionsTest, Workers) {
  EXPECT_EQ(parse_ok({"--brisk-workers=8"}).workers, 8);
  EXPECT_EQ(parse_ok({"--brisk-workers", "3"}).workers, 3);
  EXPECT_EQ(parse_ok({"--brisk-workers=0"}).workers, 0);
  EXPECT_EQ(parse_ok({"--brisk-workers=4096"}).workers, 4096);
}

TEST(OptionsTest, WorkersErrorsNameTheFlagAndRange) {
  std::string m = parse_error({"--brisk-workers=4097"});
  EXPECT_CONTAINS(m, "--brisk-workers");
  EXPECT_CONTAINS(m, "'4097'");
  EXPECT_CONTAINS(m, "4096");
  m = parse_error({"--brisk-workers=-1"});
  EXPECT_CONTAINS(m, "--brisk-workers");
  EXPECT_CONTAINS(m, "non-negative integer");
  m = parse_error({"--brisk-workers", "four"});
  EXPECT_EQ(m, "invalid value 'four' for --brisk-workers: expected a non-negative integer");
  EXPECT_CONTAINS(parse_error({"--brisk-workers=3.5"}), "non-negative integer");
  EXPECT_EQ(parse_error({"--brisk-workers=", "--brisk-idle=spin"}),
            "invalid value '' for --brisk-workers: expected a non-negative integer");
}

TEST(OptionsTest, Idle) {
  EXPECT_EQ(parse_ok({"--brisk-idle=spin"}).idle, IdleMode::kSpin);
  EXPECT_EQ(parse_ok({"--brisk-idle", "backoff"}).idle, IdleMode::kBackoff);
  EXPECT_EQ(parse_ok({"--brisk-idle=sleep"}).idle, IdleMode::kSleep);
  EXPECT_EQ(parse_ok({"--brisk-idle=SLEEP"}).idle, IdleMode::kSleep);
  EXPECT_EQ(parse_error({"--brisk-idle=fast"}),
            "invalid value 'fast' for --brisk-idle: expected one of spin, backoff, sleep");
}

TEST(OptionsTest, NodeShm) {
  EXPECT_EQ(parse({}).value().options.node_shm, NodeShm::kOn);
  EXPECT_EQ(parse_ok({"--brisk-node-shm=off"}).node_shm, NodeShm::kOff);
  EXPECT_EQ(parse_ok({"--brisk-node-shm", "ON"}).node_shm, NodeShm::kOn);
  EXPECT_EQ(parse_ok({"--brisk-node-shm=unmapped"}).node_shm, NodeShm::kUnmapped);
  EXPECT_EQ(parse_ok({}, Env{{"BRISK_NODE_SHM", "0"}}).node_shm, NodeShm::kOff);
  EXPECT_EQ(parse_error({"--brisk-node-shm=maybe"}),
            "invalid value 'maybe' for --brisk-node-shm: expected on, off or unmapped");
}

TEST(OptionsTest, SpinMicroseconds) {
  EXPECT_EQ(parse_ok({"--brisk-spin-us=0"}).spin, std::chrono::microseconds(0));
  EXPECT_EQ(parse_ok({"--brisk-spin-us", "250"}).spin, std::chrono::microseconds(250));
  const std::string m = parse_error({"--brisk-spin-us=5ms"});
  EXPECT_CONTAINS(m, "--brisk-spin-us");
  EXPECT_CONTAINS(m, "microseconds");
}

TEST(OptionsTest, StoreAndSpillBytes) {
  const Options o = parse_ok({"--brisk-store-bytes=2G", "--brisk-spill-bytes", "512M"});
  EXPECT_EQ(o.store_bytes, std::size_t{2} << 30);
  EXPECT_EQ(o.spill_bytes, std::size_t{512} << 20);
  EXPECT_EQ(parse_ok({"--brisk-store-bytes=4096"}).store_bytes, 4096u);
  EXPECT_EQ(parse_error({"--brisk-store-bytes=12Q"}),
            "invalid value '12Q' for --brisk-store-bytes: expected a size such as 4096, 64K, "
            "512M or 2G");
  const std::string m = parse_error({"--brisk-spill-bytes=lots"});
  EXPECT_CONTAINS(m, "--brisk-spill-bytes");
  EXPECT_CONTAINS(m, "64K");
}

TEST(OptionsTest, SpillDirAndTimelineTakeAnyString) {
  Options o = parse_ok({"--brisk-spill-dir=/scratch/me", "--brisk-timeline", "/tmp/t.json"});
  EXPECT_EQ(o.spill_dir, "/scratch/me");
  EXPECT_EQ(o.timeline, "/tmp/t.json");
  // Values may contain '=', ',', spaces and quotes, and may start with '-'.
  o = parse_ok({"--brisk-spill-dir=/a=b,c d\"e", "--brisk-timeline", "-odd-name"});
  EXPECT_EQ(o.spill_dir, "/a=b,c d\"e");
  EXPECT_EQ(o.timeline, "-odd-name");
  // An empty value is allowed and means "default".
  EXPECT_EQ(parse_ok({"--brisk-spill-dir=/x", "--brisk-spill-dir="}).spill_dir, "");
}

TEST(OptionsTest, EventsAndBindAcceptEveryBoolSpelling) {
  for (const char* on : {"on", "true", "1", "yes", "ON", "Yes"}) {
    SCOPED_TRACE(on);
    const Options o =
        parse_ok({std::string("--brisk-events=") + on, "--brisk-bind", on, std::string("--brisk-keep-heap=") + on},
                 {{"BRISK_EVENTS", "off"}, {"BRISK_KEEP_HEAP", "off"}});
    EXPECT_TRUE(o.events);
    EXPECT_TRUE(o.bind);
    EXPECT_TRUE(o.keep_heap);
  }
  for (const char* off : {"off", "false", "0", "no", "OFF"}) {
    SCOPED_TRACE(off);
    const Options o = parse_ok({std::string("--brisk-events=") + off, "--brisk-bind", off},
                               {{"BRISK_KEEP_HEAP", off}});
    EXPECT_FALSE(o.events);
    EXPECT_FALSE(o.bind);
    EXPECT_FALSE(o.keep_heap);
  }
  EXPECT_CONTAINS(parse_error({"--brisk-keep-heap=sometimes"}), "--brisk-keep-heap");
  std::string m = parse_error({"--brisk-events=maybe"});
  EXPECT_CONTAINS(m, "'maybe'");
  EXPECT_CONTAINS(m, "--brisk-events");
  EXPECT_CONTAINS(m, "on, off, true, false, 1, 0, yes, no");
  m = parse_error({"--brisk-bind=2"});
  EXPECT_CONTAINS(m, "--brisk-bind");
  EXPECT_CONTAINS(m, "on, off");
}

TEST(OptionsTest, EventBuffer) {
  EXPECT_EQ(parse_ok({"--brisk-event-buffer=1024"}).event_buffer, 1024u);
  EXPECT_EQ(parse_ok({"--brisk-event-buffer", "64K"}).event_buffer, 65536u);
  std::string m = parse_error({"--brisk-event-buffer=0"});
  EXPECT_CONTAINS(m, "--brisk-event-buffer");
  EXPECT_CONTAINS(m, "positive");
  EXPECT_CONTAINS(parse_error({"--brisk-event-buffer=many"}), "--brisk-event-buffer");
}

TEST(OptionsTest, Resources) {
  Options o = parse_ok({"--brisk-resources=GPU:1,disk:2"});
  EXPECT_EQ(o.resources, (std::map<std::string, double>{{"GPU", 1.0}, {"disk", 2.0}}));
  o = parse_ok({"--brisk-resources", " CPU:0.5 , _big_mem2 : 3 ,x:0"});
  EXPECT_EQ(o.resources,
            (std::map<std::string, double>{{"CPU", 0.5}, {"_big_mem2", 3.0}, {"x", 0.0}}));
  EXPECT_TRUE(parse_ok({"--brisk-resources="}).resources.empty());
}

TEST(OptionsTest, ResourceErrorsNameTheFlagAndFormat) {
  for (const char* bad : {"GPU", "GPU=1", "GPU:", "GPU:-1", "GPU:x", "1GPU:1", "G-PU:1",
                          "GPU:1,,disk:2", "GPU:inf", "GPU:nan", ":1"}) {
    SCOPED_TRACE(bad);
    const std::string m = parse_error({std::string("--brisk-resources=") + bad});
    EXPECT_CONTAINS(m, "--brisk-resources");
    EXPECT_CONTAINS(m, "NAME:COUNT");
    EXPECT_CONTAINS(m, std::string("'") + bad + "'");
  }
  const std::string m = parse_error({"--brisk-resources=GPU:1,disk:2,GPU:3"});
  EXPECT_CONTAINS(m, "--brisk-resources");
  EXPECT_CONTAINS(m, "'GPU' is given twice");
}

TEST(OptionsTest, EveryOptionReadsItsEnvironmentVariable) {
  const Env env = {{"BRISK_WORKERS", "6"},
                   {"BRISK_IDLE", "spin"},
                   {"BRISK_SPIN_US", "7"},
                   {"BRISK_STORE_BYTES", "1M"},
                   {"BRISK_SPILL_DIR", "/spill"},
                   {"BRISK_SPILL_BYTES", "3G"},
                   {"BRISK_EVENTS", "off"},
                   {"BRISK_EVENT_BUFFER", "128"},
                   {"BRISK_TIMELINE", "trace.json"},
                   {"BRISK_RESOURCES", "GPU:2"},
                   {"BRISK_BIND", "no"}};
  const Options o = parse_ok({}, env);
  EXPECT_EQ(o.workers, 6);
  EXPECT_EQ(o.idle, IdleMode::kSpin);
  EXPECT_EQ(o.spin, std::chrono::microseconds(7));
  EXPECT_EQ(o.store_bytes, std::size_t{1} << 20);
  EXPECT_EQ(o.spill_dir, "/spill");
  EXPECT_EQ(o.spill_bytes, std::size_t{3} << 30);
  EXPECT_FALSE(o.events);
  EXPECT_EQ(o.event_buffer, 128u);
  EXPECT_EQ(o.timeline, "trace.json");
  EXPECT_EQ(o.resources, (std::map<std::string, double>{{"GPU", 2.0}}));
  EXPECT_FALSE(o.bind);
}

TEST(OptionsTest, FlagBeatsEnvironmentBeatsDefault) {
  const Env env = {{"BRISK_WORKERS", "6"}, {"BRISK_IDLE", "sleep"}};
  const Options o = parse_ok({"--brisk-workers=2"}, env);
  EXPECT_EQ(o.workers, 2);               // flag
  EXPECT_EQ(o.idle, IdleMode::kSleep);   // environment
  EXPECT_EQ(o.spin.count(), 50);         // default
  // A bad variable that a flag overrides is not used, so it is not an error.
  EXPECT_EQ(parse_ok({"--brisk-workers=1"}, {{"BRISK_WORKERS", "x"}}).workers, 1);
}

TEST(OptionsTest, EnvironmentErrorsNameTheVariable) {
  EXPECT_EQ(parse_error({}, {{"BRISK_WORKERS", "x"}}),
            "invalid value 'x' in BRISK_WORKERS: expected a non-negative integer");
  std::string m = parse_error({}, {{"BRISK_IDLE", "fast"}});
  EXPECT_CONTAINS(m, "BRISK_IDLE");
  EXPECT_CONTAINS(m, "spin, backoff, sleep");
  m = parse_error({}, {{"BRISK_STORE_BYTES", "1.5G"}});
  EXPECT_CONTAINS(m, "BRISK_STORE_BYTES");
  EXPECT_CONTAINS(m, "512M");
  m = parse_error({}, {{"BRISK_RESOURCES", "GPU:1,GPU:1"}});
  EXPECT_CONTAINS(m, "BRISK_RESOURCES");
}

TEST(OptionsTest, UnknownEnvironmentVariablesAreIgnored) {
  EXPECT_EQ(parse_ok({}, {{"BRISK_FUTURE_FEATURE", "whatever"}, {"PATH", "/bin"}}).workers, 0);
}

TEST(OptionsTest, ReadsTheProcessEnvironmentWhenNoMapIsGiven) {
  ASSERT_EQ(setenv("BRISK_WORKERS", "5", 1), 0);
  const char* argv[] = {"prog", nullptr};
  auto parsed = parse_options(1, argv);
  unsetenv("BRISK_WORKERS");
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->options.workers, 5);
}

TEST(OptionsTest, LastOfARepeatedFlagWins) {
  const Options o = parse_ok({"--brisk-workers=1", "--brisk-idle=spin", "--brisk-workers", "9",
                              "--brisk-idle=sleep"});
  EXPECT_EQ(o.workers, 9);
  EXPECT_EQ(o.idle, IdleMode::kSleep);
}

TEST(OptionsTest, OtherArgumentsPassThroughInOrder) {
  auto parsed = parse({"input.h5", "--brisk-workers", "4", "-v", "--iters=10", "-abc",
                       "--brisk-idle=spin", "--other", "x", "-", "--brisk", "--BRISK-workers=1"});
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->program_args,
            (std::vector<std::string>{"prog", "input.h5", "-v", "--iters=10", "-abc", "--other",
                                      "x", "-", "--brisk", "--BRISK-workers=1"}));
  EXPECT_EQ(parsed->options.workers, 4);
  EXPECT_EQ(parsed->options.idle, IdleMode::kSpin);
}

TEST(OptionsTest, DoubleDashEndsFlagParsing) {
  auto parsed = parse({"--brisk-workers=2", "--", "--brisk-workers=3", "--brisk-bogus"});
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->options.workers, 2);
  EXPECT_EQ(parsed->program_args,
            (std::vector<std::string>{"prog", "--", "--brisk-workers=3", "--brisk-bogus"}));
}

TEST(OptionsTest, SeparateValueMayStartWithADash) {
  EXPECT_EQ(parse_ok({"--brisk-spill-dir", "--not-a-flag"}).spill_dir, "--not-a-flag");
  const std::string m = parse_error({"--brisk-workers", "-3"});
  EXPECT_CONTAINS(m, "'-3'");
}

TEST(OptionsTest, MissingValueIsAnError) {
  const std::string m = parse_error({"--brisk-idle"});
  EXPECT_CONTAINS(m, "missing value for --brisk-idle");
  EXPECT_CONTAINS(m, "spin, backoff, sleep");
}

TEST(OptionsTest, UnknownBriskFlagSuggestsTheNearestAndListsAll) {
  std::string m = parse_error({"--brisk-wrkers=4"});
  EXPECT_CONTAINS(m, "unknown option --brisk-wrkers (did you mean --brisk-workers?)");
  EXPECT_CONTAINS(m, "valid options: --brisk-workers, --brisk-idle");
  for (const char* name : {"--brisk-spin-us", "--brisk-store-bytes", "--brisk-spill-dir",
                           "--brisk-spill-bytes", "--brisk-events", "--brisk-event-buffer",
                           "--brisk-timeline", "--brisk-resources", "--brisk-bind",
                           "--brisk-help"}) {
    EXPECT_CONTAINS(m, name);
  }
  EXPECT_CONTAINS(parse_error({"--brisk-spil-dir", "/x"}), "did you mean --brisk-spill-dir?");
  EXPECT_CONTAINS(parse_error({"--brisk-time"}), "did you mean --brisk-timeline?");
  m = parse_error({"--brisk-completely-different"});
  EXPECT_EQ(m.find("did you mean"), std::string::npos) << m;
  EXPECT_CONTAINS(m, "valid options:");
}

TEST(OptionsTest, HelpIsReportedAndSetsNothing) {
  auto parsed = parse({"--brisk-workers=3", "run", "--brisk-help"}, {{"BRISK_IDLE", "spin"}});
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_TRUE(parsed->help_requested);
  EXPECT_EQ(parsed->options.workers, 0);
  EXPECT_EQ(parsed->options.idle, IdleMode::kBackoff);
  EXPECT_EQ(parsed->program_args, (std::vector<std::string>{"prog", "run"}));
  // Help wins over errors elsewhere on the line.
  parsed = parse({"--brisk-wrkers=3", "--brisk-help"});
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->help_requested);
}

TEST(OptionsTest, HelpTextListsEveryOptionVariableAndDefault) {
  const std::string help = options_help();
  for (const char* s : {"--brisk-workers", "BRISK_WORKERS", "--brisk-idle", "BRISK_IDLE",
                        "backoff", "--brisk-spin-us", "BRISK_SPIN_US", "--brisk-store-bytes",
                        "BRISK_STORE_BYTES", "--brisk-spill-dir", "BRISK_SPILL_DIR",
                        "--brisk-spill-bytes", "BRISK_SPILL_BYTES", "--brisk-events",
                        "BRISK_EVENTS", "--brisk-event-buffer", "BRISK_EVENT_BUFFER", "65536",
                        "--brisk-timeline", "BRISK_TIMELINE", "--brisk-resources",
                        "BRISK_RESOURCES", "GPU:1,disk:2", "--brisk-bind", "BRISK_BIND",
                        "--brisk-help"}) {
    EXPECT_CONTAINS(help, s);
  }
  EXPECT_EQ(help.back(), '\n');
}

TEST(OptionsTest, EmptyArgvIsAccepted) {
  const Env env;
  auto parsed = parse_options(0, nullptr, &env);
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->program_args.empty());
}

TEST(OptionsTest, ParseSizeAcceptsPlainAndSuffixedSizes) {
  struct Case {
    const char* text;
    std::size_t bytes;
  };
  for (const Case& c : {Case{"0", 0}, Case{"4096", 4096}, Case{"4096B", 4096}, Case{"64K", 65536},
                        Case{"64k", 65536}, Case{"64KB", 65536}, Case{"64KiB", 65536},
                        Case{"512M", std::size_t{512} << 20}, Case{"512MiB", std::size_t{512} << 20},
                        Case{"2G", std::size_t{2} << 30}, Case{"2gb", std::size_t{2} << 30},
                        Case{"3T", std::size_t{3} << 40}, Case{" 7K ", 7168}}) {
    SCOPED_TRACE(c.text);
    auto n = parse_size(c.text);
    ASSERT_TRUE(n.ok()) << n.status().to_string();
    EXPECT_EQ(*n, c.bytes);
  }
}

TEST(OptionsTest, ParseSizeRejectsMalformedSizes) {
  for (const char* bad : {"", " ", "K", "12Q", "-1", "+5", "1.5G", "1 G x", "64KiBs", "0x10",
                          "18446744073709551616", "16777216T"}) {
    SCOPED_TRACE(bad);
    auto n = parse_size(bad);
    ASSERT_FALSE(n.ok());
    EXPECT_EQ(n.status().code(), StatusCode::kInvalidArgument);
    EXPECT_CONTAINS(n.status().message(), std::string("'") + bad + "'");
  }
  EXPECT_CONTAINS(parse_size("12Q").status().message(), "4096, 64K, 512M or 2G");
  // The largest representable size is accepted.
  EXPECT_TRUE(parse_size("18446744073709551615").ok());
  EXPECT_TRUE(parse_size("16777215T").ok());
}

}  // namespace
}  // namespace brisk
