// Tool programs: the announcement, calls, and every way a tool can fail
// without stopping the run, with a real process playing each case
// (tests/data/rewards/programs/tool_cases.py) and the shipped Python adapter
// (examples/tools/python_tools.py).
#include "rewards/tool_program.hpp"

#include <catch2/catch.hpp>
#include <chrono>

#include "core/error.hpp"
#include "support.hpp"

using trlx::rewards::ProgramOptions;
using trlx::rewards::start_tool_program;
using Json = nlohmann::ordered_json;

namespace {

ProgramOptions tool_options(const std::string& mode, double timeout = 20) {
  ProgramOptions o;
  o.command = "python3 '" + (trlx::test::data_dir() / "rewards" / "programs" / "tool_cases.py").string() + "' " + mode;
  o.timeout_seconds = timeout;
  o.startup_check_seconds = 0.2;
  return o;
}

// The message of the InputError `f` throws, else a text no expected message holds.
std::string input_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const trlx::InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not an InputError: ") + e.what() + ">";
  }
  return "<no error>";
}

}  // namespace

TEST_CASE("a tool program announces its tools and answers calls", "[tools]") {
  auto t = start_tool_program(tool_options("serve"));
  CHECK(t->name() == "tool_cases");
  REQUIRE(t->schemas().size() == 7);
  CHECK(t->schemas()[0]["function"]["name"] == "echo");
  CHECK(t->is_async("later"));
  CHECK_FALSE(t->is_async("echo"));
  auto r = t->call("echo", Json{{"text", "héllo \"x\""}});
  CHECK(r.ok);
  CHECK(r.text == "héllo \"x\"");
  r = t->call("later", Json{{"x", 12}});
  CHECK(r.ok);
  CHECK(r.text == "12");  // JSON that is not a string arrives as its text
  r = t->call("fail", Json{{"message", "no such city"}});
  CHECK_FALSE(r.ok);
  CHECK(r.text == "no such city");
  CHECK(t->restarts() == 0);
}

TEST_CASE("a tool that crashes, hangs or answers garbage fails that call and is started again", "[tools]") {
  auto t = start_tool_program(tool_options("serve", 2));
  CHECK(t->call("count", Json::object()).text == "1");
  auto r = t->call("crash", Json::object());
  CHECK_FALSE(r.ok);
  CHECK(r.text.find("tool_cases") != std::string::npos);
  CHECK(r.text.find("exit") != std::string::npos);
  // A fresh process answers the next call.
  r = t->call("count", Json::object());
  CHECK(r.ok);
  CHECK(r.text == "1");
  CHECK(t->restarts() == 1);

  const auto t0 = std::chrono::steady_clock::now();
  r = t->call("hang", Json::object());
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK_FALSE(r.ok);
  CHECK(r.text.find("timeout_seconds") != std::string::npos);
  CHECK(waited < 10);
  CHECK(t->call("echo", Json{{"text", "back"}}).text == "back");

  r = t->call("garbage", Json::object());
  CHECK_FALSE(r.ok);
  CHECK(r.text.find("this is not json") != std::string::npos);
  CHECK(t->call("echo", Json{{"text", "again"}}).ok);
  CHECK(t->restarts() == 3);
}

TEST_CASE("a tool program that cannot start or announce is an InputError", "[tools]") {
  auto o = tool_options("exit-at-once");
  o.startup_check_seconds = 20;
  auto m = input_error_of([&] { start_tool_program(o); });
  CHECK(m.find("cannot import my_tools") != std::string::npos);
  m = input_error_of([&] { start_tool_program(tool_options("bad-announce")); });
  CHECK(m.find("announced 'hello'") != std::string::npos);
  CHECK(m.find("{\"tools\"") != std::string::npos);
  m = input_error_of([&] { start_tool_program(tool_options("silent", 1)); });
  CHECK(m.find("announcement") != std::string::npos);
  m = input_error_of([&] { start_tool_program(tool_options("no-name")); });
  CHECK(m.find("no function name") != std::string::npos);
}

TEST_CASE("an environment program holds an episode per rollout: reset, calls in it, rewards", "[tools]") {
  auto env = start_tool_program(tool_options("environment"));
  CHECK(env->is_environment());
  CHECK(env->environment_name() == "Env");
  CHECK(env->has_reward());
  // The shipped adapter on TRL's kind of environment class.
  ProgramOptions o;
  o.command = "python3 '" + (trlx::test::source_dir() / "examples" / "tools" / "python_tools.py").string() +
              "' --environment '" + (trlx::test::data_dir() / "agents" / "env.py").string() + ":CalcEnv'";
  o.timeout_seconds = 60;
  auto calc = start_tool_program(o);
  REQUIRE(calc->is_environment());
  CHECK(calc->environment_name() == "CalcEnv");
  CHECK(calc->has_reward());
  std::vector<std::string> names;
  for (const auto& s : calc->schemas()) names.push_back(s["function"]["name"].get<std::string>());
  CHECK(names == std::vector<std::string>{"multiply", "submit"});
  const Json prompt = Json::array({{{"role", "user"}, {"content", "What is 16 times 9?"}}});
  CHECK(calc->reset(0, Json{{"prompt", prompt}, {"answer", 144}}) == std::optional<std::string>(" (Use the tools.)"));
  CHECK(calc->reset(1, Json{{"prompt", prompt}, {"answer", 21}}) == std::nullopt);
  CHECK(calc->call("multiply", Json{{"a", 16}, {"b", 9}}, 0).text == "144");
  CHECK(calc->call("submit", Json{{"answer", 144}}, 0).text == "correct");
  CHECK(calc->call("submit", Json{{"answer", 20}}, 1).text == "wrong");
  const auto r = calc->rewards({0, 1});
  REQUIRE(r.size() == 2);
  CHECK(*r[0] == Approx(0.9));  // right, one multiply call
  CHECK(*r[1] == Approx(0.0));
  // A new reset starts the episode over.
  calc->reset(0, Json{{"prompt", prompt}, {"answer", 144}});
  CHECK(*calc->rewards({0})[0] == Approx(0.0));
}

TEST_CASE("the Python adapter serves a module's functions as TRL would call them", "[tools]") {
  ProgramOptions o;
  o.command = "python3 '" + (trlx::test::source_dir() / "examples" / "tools" / "python_tools.py").string() + "' '" +
              (trlx::test::source_dir() / "examples" / "tools" / "calculator.py").string() + "'";
  o.timeout_seconds = 60;
  auto t = start_tool_program(o);
  REQUIRE(t->schemas().size() == 2);
  const auto& add = t->schemas()[0]["function"];
  CHECK(add["name"] == "add");
  CHECK(add["parameters"]["properties"]["a"]["type"] == "integer");
  CHECK(add["parameters"]["required"] == Json::array({"a", "b"}));
  auto r = t->call("multiply", Json{{"a", 123456789123LL}, {"b", 1000000007}});
  CHECK(r.ok);
  CHECK(r.text == "123456789987197523861");  // Python's exact integers, as text
  r = t->call("add", Json{{"a", 3}});
  CHECK_FALSE(r.ok);
  CHECK(r.text == "add() missing 1 required positional argument: 'b'");
  r = t->call("add", Json("3, 4"));
  CHECK_FALSE(r.ok);
  CHECK(r.text == "calculator.add() argument after ** must be a mapping, not str");
}
