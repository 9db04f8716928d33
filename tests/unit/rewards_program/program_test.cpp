// Reward programs: the JSON-lines protocol end to end, with real processes
// (tests/data/rewards/programs/mirror.py plays each protocol case) and the
// shipped examples (examples/rewards).
#include "rewards/program.hpp"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "core/error.hpp"
#include "support.hpp"

using trlx::rewards::ProgramOptions;
using trlx::rewards::Sample;
using trlx::rewards::Scores;
using trlx::rewards::start_reward_program;
using trlx::rewards::judge_request_line;
using trlx::rewards::start_judge_program;
using Json = nlohmann::ordered_json;

namespace {

std::string mirror(const std::string& args) {
  return "python3 '" + (trlx::test::data_dir() / "rewards" / "programs" / "mirror.py").string() +
         "' " + args;
}

std::filesystem::path examples_dir() {
  return trlx::test::source_dir() / "examples" / "rewards";
}

ProgramOptions options_for(const std::string& command, double timeout = 30) {
  ProgramOptions o;
  o.command = command;
  o.timeout_seconds = timeout;
  // Long enough for python3 to fail on a missing script; short, since every
  // good program waits it out.
  o.startup_check_seconds = 0.5;
  return o;
}

// Options for a program expected to fail at start: the check returns as soon
// as the program exits, so the generous limit costs nothing and absorbs slow
// interpreters (a pyenv shim on a loaded machine).
ProgramOptions starting(const std::string& command) {
  ProgramOptions o = options_for(command);
  o.startup_check_seconds = 20;
  return o;
}

Sample sample(const std::string& completion, std::vector<int64_t> ids,
              Json columns = Json::object()) {
  Sample s;
  s.prompt = "What is 2 plus 3?";
  s.completion = completion;
  s.completion_ids = std::move(ids);
  s.columns = std::move(columns);
  return s;
}

// The message of the trlx::Error `f` throws (not an InputError), else a text
// no expected message contains.
std::string runtime_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const trlx::InputError& e) {
    return std::string("<an InputError: ") + e.what() + ">";
  } catch (const trlx::Error& e) {
    CHECK(static_cast<int>(e.code()) == 1);
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a trlx::Error: ") + e.what() + ">";
  }
  return "<no error>";
}

// A process is gone once kill(0) fails or it is a zombie waiting for a parent
// (init in a container may be slow to reap a reparented child).
bool process_gone(pid_t pid) {
  if (::kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'Z';
}

bool gone_within(pid_t pid, double seconds) {
  const auto end = std::chrono::steady_clock::now() +
                   std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (std::chrono::steady_clock::now() < end) {
    if (process_gone(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return process_gone(pid);
}

pid_t read_pid(const std::filesystem::path& file) {
  for (int i = 0; i < 200; ++i) {
    std::ifstream in(file);
    pid_t pid = 0;
    if (in >> pid && pid > 0) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  FAIL("the program never wrote its pid to " << file);
  return -1;
}

}  // namespace

TEST_CASE("reward program: scores and nulls come back in order, columns arrive aligned",
          "[rewards_program]") {
  auto program = start_reward_program(options_for(mirror("column score")));
  CHECK(program->name() == "mirror");
  const std::vector<Sample> batch = {sample("a", {1}, {{"score", 0.25}}),
                                     sample("b", {2}, {{"score", nullptr}}),
                                     sample("c", {3}, {{"score", -3}})};
  const Scores scores = program->score(batch);
  REQUIRE(scores.size() == 3);
  CHECK(scores[0] == std::optional<double>(0.25));
  CHECK_FALSE(scores[1].has_value());
  CHECK(scores[2] == std::optional<double>(-3.0));
}

TEST_CASE("reward program: the request carries prompts, completions, ids, columns and step",
          "[rewards_program]") {
  trlx::test::TempDir dir("trlx_reward_record");
  const auto record = dir.path / "requests.jsonl";
  auto program = start_reward_program(options_for(mirror("record '" + record.string() + "'")));
  Sample chat = sample("", {7, 8}, {{"solution", "5"}, {"level", 2}});
  chat.prompt = Json::array({{{"role", "user"}, {"content", "What is 2 plus 3? \xc3\xa9"}}});
  chat.completion = Json::array({{{"role", "assistant"}, {"content", "5\n"}}});
  // The second row lacks "level" and has an "extra" the first lacks: both
  // lists stay aligned with the completions, with null where a row has none.
  Sample plain = sample("bad utf-8: \xff", {}, {{"solution", "6"}, {"extra", true}});
  program->score({chat, plain});
  program->set_step(12);
  program->score({plain});

  std::ifstream in(record);
  std::string line1, line2;
  REQUIRE(std::getline(in, line1));
  REQUIRE(std::getline(in, line2));
  // ASCII on the wire, whatever the locale of the program.
  for (unsigned char c : line1) CHECK(c < 0x80);
  const auto r1 = Json::parse(line1);
  CHECK(r1["prompts"][0][0]["content"] == "What is 2 plus 3? \xc3\xa9");
  CHECK(r1["prompts"][1] == "What is 2 plus 3?");
  CHECK(r1["completions"][0][0]["role"] == "assistant");
  CHECK(r1["completions"][0][0]["content"] == "5\n");
  CHECK(r1["completions"][1] == "bad utf-8: \xef\xbf\xbd");  // replaced by U+FFFD
  CHECK(r1["completion_ids"] == Json::parse("[[7, 8], []]"));
  CHECK(r1["columns"] ==
        Json::parse(R"({"solution": ["5", "6"], "level": [2, null], "extra": [null, true]})"));
  CHECK_FALSE(r1.contains("step"));
  const auto r2 = Json::parse(line2);
  CHECK(r2["step"] == 12);
  CHECK(r2["columns"] == Json::parse(R"({"solution": ["6"], "extra": [true]})"));
}

TEST_CASE("reward program: one process serves every batch", "[rewards_program]") {
  auto program = start_reward_program(options_for(mirror("count")));
  const pid_t pid = program->pid();
  REQUIRE(pid > 0);
  for (int i = 1; i <= 4; ++i) {
    const Scores s = program->score({sample("x", {1}), sample("y", {2})});
    REQUIRE(s.size() == 2);
    CHECK(s[0] == std::optional<double>(i));
    CHECK(s[1] == std::optional<double>(i));
  }
  CHECK(program->pid() == pid);
  // An empty batch is answered without bothering the program.
  CHECK(program->score({}).empty());
  CHECK(program->score({sample("z", {3})})[0] == std::optional<double>(5));
}

TEST_CASE("reward program: the step reaches the program once set", "[rewards_program]") {
  auto program = start_reward_program(options_for(mirror("step")));
  CHECK_FALSE(program->score({sample("x", {1})})[0].has_value());
  program->set_step(3);
  CHECK(program->score({sample("x", {1})})[0] == std::optional<double>(3));
}

TEST_CASE("reward program: a crash mid-run names the program, its status and its stderr",
          "[rewards_program]") {
  auto program = start_reward_program(options_for(mirror("crash_after 2")));
  program->score({sample("x", {1})});
  program->score({sample("x", {1})});
  const std::string msg = runtime_error_of([&] { program->score({sample("x", {1})}); });
  CHECK_THAT(msg, Catch::Contains("reward program 'mirror'"));
  CHECK_THAT(msg, Catch::Contains("mirror.py"));  // the command
  CHECK_THAT(msg, Catch::Contains("exited with status 3"));
  CHECK_THAT(msg, Catch::Contains("request 3"));
  CHECK_THAT(msg, Catch::Contains("mirror: giving up at request 3"));
  // Failed stays failed.
  CHECK_THAT(runtime_error_of([&] { program->score({sample("x", {1})}); }),
             Catch::Contains("earlier failure"));
  CHECK(program->pid() == -1);
}

TEST_CASE("reward program: a program that never answers is killed at the timeout",
          "[rewards_program]") {
  trlx::test::TempDir dir("trlx_reward_hang");
  const auto pid_file = dir.path / "pid";
  // `cd` first, so that the shell cannot exec python3: the program is the
  // shell's child, and the kill must reach it too.
  ProgramOptions o = options_for("cd / && " + mirror("hang '" + pid_file.string() + "'"), 1.0);
  o.name = "slow";
  auto program = start_reward_program(o);
  const pid_t python_pid = read_pid(pid_file);
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = runtime_error_of([&] { program->score({sample("x", {1})}); });
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(waited >= 0.9);
  CHECK(waited < 10);
  CHECK_THAT(msg, Catch::Contains("reward program 'slow'"));
  CHECK_THAT(msg, Catch::Contains("no answer"));
  CHECK_THAT(msg, Catch::Contains("within 1s"));
  CHECK_THAT(msg, Catch::Contains("mirror: thinking forever"));
  CHECK(gone_within(python_pid, 5));
}

TEST_CASE("reward program: off-protocol answers are refused, each with its reason",
          "[rewards_program]") {
  struct Case {
    std::string mode;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"garbage", {"not JSON", "this is not json", "stderr"}},
      {"wrong_count", {"with 3 rewards", "exactly one per completion (2)"}},
      {"no_rewards", {"no \"rewards\"", "scores"}},
      {"nan", {"not JSON", "NaN", "null"}},
  };
  for (const auto& c : cases) {
    INFO(c.mode);
    auto program = start_reward_program(options_for(mirror(c.mode)));
    const std::string msg = runtime_error_of([&] {
      program->score({sample("x", {1}), sample("y", {2})});
    });
    CHECK_THAT(msg, Catch::Contains("reward program 'mirror'"));
    for (const auto& e : c.expected) CHECK_THAT(msg, Catch::Contains(e));
  }
}

TEST_CASE("reward program: a reward that is neither a number nor null is refused",
          "[rewards_program]") {
  for (const auto& bad : {Json("1.0"), Json(true), Json::array({1})}) {
    INFO(bad.dump());
    auto program = start_reward_program(options_for(mirror("column score")));
    const std::string msg = runtime_error_of([&] {
      program->score({sample("x", {1}, {{"score", 1}}), sample("y", {2}, {{"score", bad}})});
    });
    CHECK_THAT(msg, Catch::Contains("reward 1 = " + bad.dump()));
    CHECK_THAT(msg, Catch::Contains("number, or null"));
  }
}

TEST_CASE("reward program: stdout beyond one line per answer is refused", "[rewards_program]") {
  auto program = start_reward_program(options_for(mirror("stray")));
  CHECK(program->score({sample("x", {1})}).size() == 1);
  const std::string msg = runtime_error_of([&] { program->score({sample("x", {1})}); });
  CHECK_THAT(msg, Catch::Contains("debug: done"));
  CHECK_THAT(msg, Catch::Contains("outside of an answer"));
}

TEST_CASE("reward program: a command that cannot start is an input error before any request",
          "[rewards_program]") {
  SECTION("no such program") {
    const std::string msg =
        trlx::test::input_error_of([] { start_reward_program(starting("/nonexistent/prog")); });
    CHECK_THAT(msg, Catch::Contains("reward program 'prog' (command: /nonexistent/prog)"));
    CHECK_THAT(msg, Catch::Contains("status 127"));
    CHECK_THAT(msg, Catch::Contains("not found"));  // what the shell said
  }
  SECTION("no such script") {
    const std::string msg = trlx::test::input_error_of(
        [] { start_reward_program(starting("python3 /nonexistent.py")); });
    CHECK_THAT(msg, Catch::Contains("reward program 'nonexistent'"));
    CHECK_THAT(msg, Catch::Contains("python3 /nonexistent.py"));
    CHECK_THAT(msg, Catch::Contains("status 2"));
    CHECK_THAT(msg, Catch::Contains("/nonexistent.py"));
    CHECK_THAT(msg, Catch::Contains("No such file"));  // python3's own words
  }
  SECTION("a program that ends at once, even cleanly") {
    const std::string msg =
        trlx::test::input_error_of([] { start_reward_program(starting("true")); });
    CHECK_THAT(msg, Catch::Contains("exited with status 0 at once"));
  }
  SECTION("a program that exits after the start-up check, before its first request") {
    ProgramOptions o = options_for("sleep 0.3; echo 'late import error' >&2; exit 4");
    o.startup_check_seconds = 0.05;
    auto program = start_reward_program(o);
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    const std::string msg = trlx::test::input_error_of([&] { program->check_alive(); });
    CHECK_THAT(msg, Catch::Contains("exited with status 4 before its first request"));
    CHECK_THAT(msg, Catch::Contains("late import error"));
    // score() says the same, as the failure it repeats.
    CHECK_THAT(runtime_error_of([&] { program->score({sample("x", {1})}); }),
               Catch::Contains("late import error"));
  }
  SECTION("a working_dir that does not exist") {
    ProgramOptions o = options_for(mirror("count"));
    o.working_dir = "/nonexistent/dir";
    CHECK_THAT(trlx::test::input_error_of([&] { start_reward_program(o); }),
               Catch::Contains("/nonexistent/dir"));
  }
  SECTION("no command") {
    CHECK_THAT(trlx::test::input_error_of([] { start_reward_program(options_for("  ")); }),
               Catch::Contains("needs a command"));
  }
}

TEST_CASE("reward program: the stderr tail is the last 4 KiB, at a line boundary",
          "[rewards_program]") {
  // 200 numbered lines, then an exit: the message shows the last lines only.
  const std::string cmd =
      "read line; i=0; while [ $i -lt 200 ]; do echo \"stderr line $i of the program\" >&2; "
      "i=$((i+1)); done; exit 5";
  ProgramOptions o = options_for(cmd);
  o.name = "chatty";
  auto program = start_reward_program(o);
  const std::string msg = runtime_error_of([&] { program->score({sample("x", {1})}); });
  CHECK_THAT(msg, Catch::Contains("reward program 'chatty'"));
  CHECK_THAT(msg, Catch::Contains("exited with status 5"));
  CHECK_THAT(msg, Catch::Contains("stderr line 199 of the program"));
  CHECK_THAT(msg, !Catch::Contains("stderr line 10 of the program"));
  CHECK(msg.size() < 4096 + 1024);
}

TEST_CASE("reward program: a flood of stderr while a large request is written does not deadlock",
          "[rewards_program]") {
  auto program = start_reward_program(options_for(mirror("flood_stderr 65536"), 60));
  std::vector<Sample> batch;
  const std::string long_text(40000, 'w');
  for (int i = 0; i < 64; ++i) batch.push_back(sample(long_text, std::vector<int64_t>(2000, i)));
  for (int round = 0; round < 2; ++round) {
    const Scores s = program->score(batch);
    REQUIRE(s.size() == 64);
    CHECK(s[0].value() > 64 * 40000);  // the program saw the whole request
  }
}

TEST_CASE("reward program: a program that closes its stdin is reported, and trlx survives SIGPIPE",
          "[rewards_program]") {
  // `exec`: /bin/sh (dash) would otherwise wait as the program's parent,
  // holding the pipe open, and the write would block until the timeout.
  auto program = start_reward_program(options_for("exec " + mirror("close_stdin"), 10));
  std::vector<Sample> batch(16, sample(std::string(100000, 'z'), {1}));
  const std::string msg = runtime_error_of([&] { program->score(batch); });
  CHECK_THAT(msg, Catch::Contains("reward program 'mirror'"));
  CHECK_THAT(msg, Catch::Contains("closed its stdin"));
}

TEST_CASE("reward program: Python that forgets to flush still answers", "[rewards_program]") {
  auto program = start_reward_program(options_for(mirror("unflushed"), 5));
  CHECK(program->score({sample("x", {1})})[0] == std::optional<double>(2.0));
}

TEST_CASE("reward program: the end closes stdin, and a program that stays is killed",
          "[rewards_program]") {
  SECTION("a program that exits at EOF") {
    auto program = start_reward_program(options_for(mirror("count")));
    const pid_t pid = program->pid();
    program->score({sample("x", {1})});
    const auto t0 = std::chrono::steady_clock::now();
    program.reset();
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 1.5);
    CHECK(process_gone(pid));
  }
  SECTION("a program that ignores EOF") {
    trlx::test::TempDir dir("trlx_reward_eof");
    const auto pid_file = dir.path / "pid";
    auto program =
        start_reward_program(options_for(mirror("ignore_eof '" + pid_file.string() + "'")));
    const pid_t pid = read_pid(pid_file);
    program->score({sample("x", {1})});
    const auto t0 = std::chrono::steady_clock::now();
    program.reset();
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 5);
    CHECK(gone_within(pid, 5));
  }
}

TEST_CASE("reward program: the working directory applies to the command", "[rewards_program]") {
  ProgramOptions o = options_for("python3 programs/mirror.py len");
  o.working_dir = trlx::test::data_dir() / "rewards";
  auto program = start_reward_program(o);
  const Scores s = program->score({sample("x", {1, 2, 3}), sample("y", {})});
  CHECK(s[0] == std::optional<double>(3));
  CHECK_FALSE(s[1].has_value());
}

TEST_CASE("reward program: the default name is the script's stem", "[rewards_program]") {
  using trlx::rewards::program_name_from_command;
  CHECK(program_name_from_command("python3 my_reward.py") == "my_reward");
  CHECK(program_name_from_command("PYTHONPATH=. /usr/bin/python3.11 -u scripts/acc.py --x 1") ==
        "acc");
  CHECK(program_name_from_command("bash examples/rewards/length_reward.sh") == "length_reward");
  CHECK(program_name_from_command("./score") == "score");
  CHECK(program_name_from_command("python3 -m pkg.rewards.format") == "format");
  CHECK(program_name_from_command("uv run judge.py") == "judge");
  CHECK(program_name_from_command("cd /x && python3 'my reward.py'") == "my_reward");
  CHECK(program_name_from_command("exec python3 \"$HOME/r/judge.py\" --model m") == "judge");
  CHECK(program_name_from_command("python3") == "reward_program");
  CHECK(program_name_from_command("python3 -c 'import sys; print(1)'") == "reward_program");
}

TEST_CASE("example addition_reward.py: 1 for the right sum, 0 for another, null for none", "[rewards_program][examples]") {
  auto program = start_reward_program(
      options_for("python3 '" + (examples_dir() / "addition_reward.py").string() + "'"));
  const Scores s = program->score({sample("2 plus 3 is 5", {1}, {{"answer", 5}}),
                                   sample("2 plus 3 is 4", {1}, {{"answer", 5}}),
                                   sample("no idea", {1}, {{"answer", 5}})});
  REQUIRE(s.size() == 3);
  CHECK(s[0] == std::optional<double>(1.0));
  CHECK(s[1] == std::optional<double>(0.0));
  CHECK_FALSE(s[2].has_value());
}

TEST_CASE("example addition_reward.py --partial: partial credit for sums", "[rewards_program][examples]") {
  auto program = start_reward_program(
      options_for("python3 '" + (examples_dir() / "addition_reward.py").string() + "' --partial"));
  CHECK(program->name() == "addition_reward");
  Sample chat = sample("", {1}, {{"answer", 5}});
  chat.completion = Json::array({{{"role", "assistant"}, {"content", "2 plus 3 is 4"}}});
  const std::vector<Sample> batch = {
      sample("2 plus 3 is 5", {1}, {{"answer", 5}}),    // exact
      chat,                                             // 1 - 1/5
      sample("It is 1,234.", {1}, {{"answer", 1000}}),  // 1 - 234/1000
      sample("It is 3000", {1}, {{"answer", 1000}}),    // too far: 0
      sample("no idea", {1}, {{"answer", 5}}),          // no number: null
      sample("-2", {1}, {{"answer", 0}}),               // |answer| < 1: divide by 1 -> 0
      sample("0", {1}, {{"answer", "0"}}),              // a string column works too
  };
  const Scores s = program->score(batch);
  REQUIRE(s.size() == batch.size());
  CHECK(s[0] == std::optional<double>(1.0));
  CHECK(s[1].value() == Approx(0.8));
  CHECK(s[2].value() == Approx(0.766));
  CHECK(s[3] == std::optional<double>(0.0));
  CHECK_FALSE(s[4].has_value());
  CHECK(s[5] == std::optional<double>(0.0));
  CHECK(s[6] == std::optional<double>(1.0));
}

TEST_CASE("judge program: one preference per pair, the request pairs the completions", "[rewards_program][judge]") {
  // The example judge: the completion whose last integer is nearer the answer.
  auto judge = start_judge_program(
      options_for("python3 '" + (examples_dir() / "addition_judge.py").string() + "'"));
  CHECK(judge->name() == "addition_judge");
  auto pair = [](const std::string& a, const std::string& b) {
    return std::make_pair(sample(a, {1, 2}, {{"answer", 5}}), sample(b, {3}, {{"answer", 5}}));
  };
  const auto p = judge->judge({pair("4", "5"), pair("5", "9"), pair("no", "idea"), pair("6", "4")});
  REQUIRE(p.size() == 4);
  CHECK(p[0] == std::optional<int>(1));
  CHECK(p[1] == std::optional<int>(0));
  CHECK_FALSE(p[2].has_value());
  CHECK_FALSE(p[3].has_value());  // equally near: no preference
  // The request: one prompt and one column value per pair, completions and
  // their ids in pairs.
  const auto line = nlohmann::json::parse(judge_request_line({pair("4", "5")}, 3));
  CHECK(line.at("prompts") == nlohmann::json::array({"What is 2 plus 3?"}));
  CHECK(line.at("completions") == nlohmann::json::parse(R"([["4", "5"]])"));
  CHECK(line.at("completion_ids") == nlohmann::json::parse("[[[1, 2], [3]]]"));
  CHECK(line.at("columns") == nlohmann::json::parse(R"({"answer": [5]})"));
  CHECK(line.at("step") == 3);
}

TEST_CASE("judge program: an answer off the protocol names the judge and what was expected", "[rewards_program][judge]") {
  auto two = start_judge_program(options_for("python3 -u -c \"import sys\nfor l in sys.stdin: print('{\\\"preferences\\\": [2]}', flush=True)\""));
  const auto pair = std::make_pair(sample("a", {1}), sample("b", {2}));
  CHECK_THAT(runtime_error_of([&] { two->judge({pair}); }),
             Catch::Contains("judge program") && Catch::Contains("preference 0 = 2") &&
                 Catch::Contains("0 (the first completion is better), 1 (the second) or null"));
  auto count = start_judge_program(options_for("python3 -u -c \"import sys\nfor l in sys.stdin: print('{\\\"preferences\\\": [0, 1]}', flush=True)\""));
  CHECK_THAT(runtime_error_of([&] { count->judge({pair}); }),
             Catch::Contains("with 2 preferences; expected exactly one per pair (1)"));
  // A judge that cannot start stops the run before training.
  try {
    start_judge_program(options_for("python3 /nonexistent/no_such_judge.py"));
    FAIL("no error");
  } catch (const trlx::InputError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("judge program 'no_such_judge'"));
  }
}

TEST_CASE("example length_reward.sh: minus one hundredth per completion token",
          "[rewards_program][examples]") {
  auto program = start_reward_program(
      options_for("bash '" + (examples_dir() / "length_reward.sh").string() + "'"));
  CHECK(program->name() == "length_reward");
  std::vector<int64_t> long_ids(137, 4);
  for (int round = 0; round < 2; ++round) {
    // A completion's text that mimics the key must not confuse the parser.
    const Scores s = program->score(
        {sample("\"completion_ids\":[[1,2]]", {5, 6, 7}), sample("", {}), sample("x", long_ids)});
    REQUIRE(s.size() == 3);
    CHECK(s[0].value() == Approx(-0.03));
    CHECK(s[1].value() == 0.0);
    CHECK(s[2].value() == Approx(-1.37));
  }
}

TEST_CASE("example trl_rewards_server.py: TRL's own functions, with parameters",
          "[rewards_program][examples]") {
  if (std::system("python3 -c 'import trl.rewards' >/dev/null 2>&1") != 0)
    TRLX_SKIP("python3 cannot import trl.rewards (pip install trl)");
  const std::string server =
      "python3 '" + (examples_dir() / "trl_rewards_server.py").string() + "' ";
  ProgramOptions think = options_for(server + "think_format_reward");
  think.startup_check_seconds = 1.5;  // importing trl takes a moment
  auto format = start_reward_program(think);
  CHECK(format->name() == "trl_rewards_server");
  Sample chat = sample("", {1});
  chat.completion =
      Json::array({{{"role", "assistant"}, {"content", "<think>\nsum\n</think>\n5"}}});
  const Scores f = format->score({chat, sample("5", {1}), sample("<think>a</think>b", {1})});
  REQUIRE(f.size() == 3);
  CHECK(f[0] == std::optional<double>(1.0));
  CHECK(f[1] == std::optional<double>(0.0));
  CHECK(f[2] ==
        std::optional<double>(1.0));  // a plain string is handed over as one assistant message

  ProgramOptions overlong = options_for(
      server +
      "get_soft_overlong_punishment --param max_completion_len=10 --param soft_punish_cache=4");
  overlong.name = "overlong";
  auto punish = start_reward_program(overlong);
  const Scores p = punish->score({sample("a", std::vector<int64_t>(6, 1)),
                                  sample("b", std::vector<int64_t>(8, 1)),
                                  sample("c", std::vector<int64_t>(11, 1))});
  CHECK(p[0] == std::optional<double>(0.0));
  CHECK(p[1].value() == Approx(-0.5));
  CHECK(p[2] == std::optional<double>(-1.0));

  // The check ends as soon as the program does; the margin is for slow imports.
  ProgramOptions unknown = options_for(server + "no_such_reward");
  unknown.startup_check_seconds = 10;
  const std::string msg = trlx::test::input_error_of([&] { start_reward_program(unknown); });
  CHECK_THAT(msg, Catch::Contains("no function 'no_such_reward'"));
}
