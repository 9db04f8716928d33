// Reward functions and judges that are programs speaking JSON lines on stdin and stdout.
#include "rewards/program.hpp"
#include "rewards/tool_program.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <regex>
#include <thread>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/stop.hpp"

extern char** environ;

namespace trlx::rewards {
namespace {

using Clock = std::chrono::steady_clock;

// Enough for a Python traceback's last frames and its error line.
constexpr size_t kStderrKeep = 4096;
// An answer is a few bytes per completion; a line this long means the program
// is printing something else (or no newlines at all).
constexpr size_t kMaxAnswerBytes = size_t{64} << 20;
// How long an exiting program gets to finish (after its stdin closes, or
// after it closed its stdout) before trlx stops waiting.
constexpr double kExitGraceSeconds = 2.0;
// How long a program that broke a pipe (closed stdin or stdout) gets to exit,
// so that the message can say how it ended.
constexpr double kDyingGraceSeconds = 1.0;
// poll() wakes at least this often to look at the process itself: a program
// whose pipes are also held by a child of its own never shows EOF on them.
constexpr int kTickMs = 100;

double seconds_left(Clock::time_point deadline) {
  return std::chrono::duration<double>(deadline - Clock::now()).count();
}

Clock::time_point after(double seconds) {
  // A year is "no limit" for a training run and keeps the clock arithmetic
  // far from overflow.
  seconds = std::min(seconds, 365.0 * 24 * 3600);
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

int poll_ms(Clock::time_point deadline) {
  const double left = seconds_left(deadline);
  if (left <= 0) return 0;
  return static_cast<int>(std::min<double>(kTickMs, std::ceil(left * 1000)));
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGTERM:
      return "SIGTERM";
    default:
      return nullptr;
  }
}

std::string describe_signal(int sig) {
  const char* n = signal_name(sig);
  return n ? fmt::format("signal {} ({})", sig, n) : fmt::format("signal {}", sig);
}

// What a wait status means, with the shell's conventions spelled out: the
// command runs under /bin/sh, which reports "not found" as 127 and a child
// killed by signal N as 128+N.
std::string describe_status(int status) {
  if (WIFSIGNALED(status)) return "was killed by " + describe_signal(WTERMSIG(status));
  if (!WIFEXITED(status)) return fmt::format("stopped (wait status {})", status);
  const int code = WEXITSTATUS(status);
  std::string s = fmt::format("exited with status {}", code);
  if (code == 127)
    s += " (the shell could not find the command)";
  else if (code == 126)
    s += " (the shell could not execute the command: not executable?)";
  else if (code > 128 && code < 128 + 65)
    s += " (the shell's way of saying: killed by " + describe_signal(code - 128) + ")";
  return s;
}

// Moves a descriptor above stdin/stdout/stderr, so that the dup2 file actions
// that wire the child's 0/1/2 can never overwrite one another (trlx may run
// with some of its own standard descriptors closed).
[[noreturn]] void sys_fail(const char* what) {
  fail("reward program: {} failed: {}", what, std::strerror(errno));
}

int lift_fd(int fd) {
  if (fd > 2) return fd;
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  if (moved < 0) sys_fail("fcntl(F_DUPFD_CLOEXEC)");  // `fd` stays the caller's to close
  ::close(fd);
  return moved;
}

void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) sys_fail("fcntl(O_NONBLOCK)");
}

// write() that reports a reader that went away as EPIPE instead of killing
// trlx with SIGPIPE. SIGPIPE from a pipe write goes to the writing thread, so
// blocking it in this thread (and consuming the one this write raised) leaves
// the process's disposition, and every other thread, alone.
ssize_t write_no_sigpipe(int fd, const char* data, size_t size) {
  sigset_t pipe_set, old_mask;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_mask);
  sigset_t pending;
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  const ssize_t n = ::write(fd, data, size);
  const int err = errno;
  if (n < 0 && err == EPIPE && !was_pending) {
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  errno = err;
  return n;
}

bool is_blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

std::string shorten(const std::string& s, size_t max = 200) {
  if (s.size() <= max) return s;
  return s.substr(0, max) + fmt::format("... ({} bytes in all)", s.size());
}

}  // namespace

struct ProgramProcess {
  ProgramOptions options;  // name resolved
  // What the program is ("reward program", "judge program") and what each
  // request holds ("completion", "pair"), for messages.
  std::string kind = "reward program";
  std::string item = "completion";
  std::string doing = "scoring";
  pid_t pid = -1;
  bool exited = false;  // reaped; `status` holds its wait status
  int status = 0;
  int in_fd = -1, out_fd = -1, err_fd = -1;
  bool out_eof = false, err_eof = false;
  std::string out_buf;   // stdout bytes not yet taken as an answer
  std::string err_tail;  // the last kStderrKeep bytes of stderr
  bool err_truncated = false;
  std::string err_line;  // stderr since its last newline, for the debug log
  std::optional<int64_t> step;
  int64_t requests = 0;  // requests sent
  std::optional<std::string> failure;
  // Whether a stop request cuts a pending answer short (reward and judge
  // programs: their answer only feeds a round that can be dropped).
  bool interruptible = false;

  ~ProgramProcess() { shut_down(); }

  std::string who() const {
    return fmt::format("{} '{}' (command: {})", kind, options.name, options.command);
  }

  std::string stderr_section() const {
    if (is_blank(err_tail)) return "\nIt wrote nothing to stderr.";
    std::string tail = err_tail;
    if (err_truncated) {
      const auto nl = tail.find('\n');
      if (nl != std::string::npos && nl + 1 < tail.size()) tail = tail.substr(nl + 1);
      tail = "...\n" + tail;
    }
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == '\r')) tail.pop_back();
    return fmt::format("\nThe end of its stderr:\n{}", tail);
  }

  void take_stderr(const char* data, size_t n) {
    err_tail.append(data, n);
    if (err_tail.size() > kStderrKeep) {
      err_tail.erase(0, err_tail.size() - kStderrKeep);
      err_truncated = true;
    }
    // Diagnostics stay out of the way unless asked for (log_level: debug).
    if (!log::enabled(log::Level::Debug)) return;
    err_line.append(data, n);
    size_t start = 0;
    for (size_t nl; (nl = err_line.find('\n', start)) != std::string::npos; start = nl + 1)
      log::debug("[reward {}] {}", options.name, shorten(err_line.substr(start, nl - start), 2000));
    err_line.erase(0, start);
  }

  // Reads what is available on one of the program's output pipes.
  void read_some(int fd) {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) {
        if (fd == out_fd)
          out_buf.append(buf, static_cast<size_t>(n));
        else
          take_stderr(buf, static_cast<size_t>(n));
        if (static_cast<size_t>(n) < sizeof buf) return;
        continue;
      }
      if (n == 0) {
        (fd == out_fd ? out_eof : err_eof) = true;
        return;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      (fd == out_fd ? out_eof : err_eof) = true;  // nothing more will come
      return;
    }
  }

  // Waits for what is readable (or for `deadline`) and reads it; with
  // `want_write`, also returns when stdin takes more bytes (true then).
  bool pump(Clock::time_point deadline, bool want_write) {
    pollfd fds[3];
    nfds_t n = 0;
    int out_i = -1, err_i = -1, in_i = -1;
    if (!out_eof) out_i = static_cast<int>(n), fds[n++] = pollfd{out_fd, POLLIN, 0};
    if (!err_eof) err_i = static_cast<int>(n), fds[n++] = pollfd{err_fd, POLLIN, 0};
    if (want_write) in_i = static_cast<int>(n), fds[n++] = pollfd{in_fd, POLLOUT, 0};
    const int r = ::poll(fds, n, poll_ms(deadline));
    if (r < 0) {
      if (errno == EINTR) return false;
      sys_fail("poll");
    }
    if (out_i >= 0 && fds[out_i].revents) read_some(out_fd);
    if (err_i >= 0 && fds[err_i].revents) read_some(err_fd);
    return in_i >= 0 && fds[in_i].revents != 0;
  }

  // Reaps the program if it has exited; true then.
  bool check_exited() {
    if (exited) return true;
    if (pid <= 0) return false;
    int st = 0;
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) {
      exited = true;
      status = st;
    } else if (r < 0 && errno == ECHILD) {
      // Someone else reaped it (SIGCHLD ignored, or a waitpid(-1) elsewhere):
      // it is gone, its status unknown.
      exited = true;
      status = -1;
    }
    return exited;
  }

  std::string exit_description() const {
    return status == -1 ? std::string("exited (its status was taken by someone else)")
                        : describe_status(status);
  }

  // Gives an exiting program `seconds` to finish, reading its last words.
  bool wait_exit(double seconds) {
    const auto deadline = after(seconds);
    while (!check_exited()) {
      if (seconds_left(deadline) <= 0) return false;
      if (out_eof && err_eof)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      else
        pump(deadline, false);
    }
    drain();
    return true;
  }

  // Reads what an exited program left in its pipes (its answer, its
  // traceback); bounded, since a child of its own may still hold them open.
  void drain() {
    const auto deadline = after(0.2);
    while ((!out_eof || !err_eof) && seconds_left(deadline) > 0) pump(deadline, false);
  }

  void kill_now() {
    if (pid > 0 && !exited) {
      // The whole process group: /bin/sh may have started the real program
      // as its child.
      ::killpg(pid, SIGKILL);
      int st = 0;
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
      exited = true;
      status = st;
    }
  }

  void close_fds() {
    for (int* fd : {&in_fd, &out_fd, &err_fd})
      if (*fd >= 0) ::close(*fd), *fd = -1;
  }

  // Ends the program as the protocol says: stdin closes, it exits; one that
  // does not is killed.
  void shut_down() {
    if (pid <= 0) {
      close_fds();
      return;
    }
    if (in_fd >= 0) ::close(in_fd), in_fd = -1;
    if (!exited && !wait_exit(kExitGraceSeconds)) {
      log::debug("{} '{}' did not exit within {}s of its stdin closing; killing it", kind,
                 options.name, kExitGraceSeconds);
      kill_now();
    }
    // What it started in the background (its process group) ends with it.
    ::killpg(pid, SIGKILL);
    log::debug("{} '{}' {}", kind, options.name, exit_description());
    close_fds();
    pid = -1;
  }

  // Records the failure (later calls repeat it), stops the program and
  // throws. The stderr tail is read after the program has stopped, so that it
  // holds the program's last words.
  [[noreturn]] void fail_now(const std::string& what, bool input_error = false) {
    if (!exited) kill_now();
    drain();
    close_fds();
    pid = -1;
    failure = fmt::format("{} {}{}", who(), what, stderr_section());
    if (input_error) throw InputError(*failure);
    throw Error(*failure);
  }

  // A program that ends before its first request never worked (a missing
  // script, an import error): like a command that cannot start, that is the
  // user's to fix, exit code 2.
  [[noreturn]] void fail_exited(const std::string& when) {
    const bool clean = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    fail_now(fmt::format("{} {}.{}", exit_description(), when,
                         clean ? fmt::format(" A {} keeps running and answers one JSON line per request "
                                             "line on stdin until its stdin closes.",
                                             kind)
                               : std::string()),
             requests == 0);
  }

  void check_failed() const {
    if (failure) throw Error("stopped after an earlier failure: " + *failure);
  }

  void check_alive() {
    check_failed();
    if (check_exited())
      fail_exited(requests == 0 ? std::string("before its first request")
                                : fmt::format("after request {}, before the next one", requests));
  }

  std::string request_label(size_t count) const {
    return fmt::format("request {} ({} {}{})", requests, count, item, count == 1 ? "" : "s");
  }

  // The list `key` of an answer line, `count` long; `each` says what an
  // entry is, for messages.
  nlohmann::json answer_list(const std::string& line, size_t count, const char* key, const char* noun,
                             const char* each) {
    const auto answer = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const std::string label = request_label(count);
    if (answer.is_discarded()) {
      std::string hint = " stdout carries answers only; print diagnostics to stderr.";
      if (line.find("NaN") != std::string::npos || line.find("Infinity") != std::string::npos)
        hint =
            " JSON has no NaN or Infinity; answer null to skip a completion (in Python: "
            "json.dumps(..., allow_nan=False) catches this).";
      fail_now(fmt::format("printed a line that is not JSON in answer to {}: '{}'.{}", label,
                           shorten(line), hint));
    }
    if (!answer.is_object() || !answer.contains(key))
      fail_now(fmt::format("answered {} with '{}', which has no \"{}\"; expected {{\"{}\": [...]}} with {} per {}.",
                           label, shorten(line), key, key, each, item));
    const auto& list = answer[key];
    if (!list.is_array())
      fail_now(fmt::format("answered {} with \"{}\": {}, not a list.", label, key, shorten(list.dump())));
    if (list.size() != count)
      fail_now(fmt::format("answered {} with {} {}{}; expected exactly one per {} ({}).", label, list.size(), noun,
                           list.size() == 1 ? "" : "s", item, count));
    return list;
  }

  Scores parse_rewards(const std::string& line, size_t count) {
    const auto rewards = answer_list(line, count, "rewards", "reward", "one number or null");
    const std::string label = request_label(count);
    Scores scores;
    scores.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      const auto& r = rewards[i];
      if (r.is_null()) {
        scores.emplace_back(std::nullopt);
      } else if (r.is_number()) {
        const double v = r.get<double>();
        if (!std::isfinite(v))
          fail_now(fmt::format("answered {} with reward {} = {}, which is not finite.", label, i,
                               r.dump()));
        scores.emplace_back(v);
      } else {
        fail_now(fmt::format(
            "answered {} with reward {} = {} ({}); each reward must be a number, or null to skip "
            "the completion.",
            label, i, shorten(r.dump()), r.type_name()));
      }
    }
    return scores;
  }

  // Takes the next non-blank line from stdout, if one is complete.
  std::optional<std::string> next_line() {
    for (;;) {
      const auto nl = out_buf.find('\n');
      if (nl == std::string::npos) return std::nullopt;
      std::string line = out_buf.substr(0, nl);
      out_buf.erase(0, nl + 1);
      if (!is_blank(line)) return line;
    }
  }

  // Sends one request line (with its newline) about `count` items and waits
  // for the answer line.
  std::string exchange(const std::string& request, size_t count) {
    if (failure) throw Error("stopped after an earlier failure: " + *failure);
    // What came since the last answer: stderr to keep, and stdout that must
    // be empty (anything there would be taken as the next answer, shifting
    // every later one by a request).
    if (!out_eof || !err_eof) pump(Clock::now(), false);
    if (auto stray = next_line())
      fail_now(fmt::format(
          "printed '{}' to stdout outside of an answer (after request {}); stdout carries exactly "
          "one answer line per request; print diagnostics to stderr.",
          shorten(*stray), requests));
    check_alive();

    ++requests;
    const std::string label = request_label(count);
    const auto deadline = after(options.timeout_seconds);
    size_t written = 0;
    for (;;) {
      if (auto line = next_line()) {
        if (written < request.size())
          fail_now(
              fmt::format("answered {} before reading all of it: '{}'.", label, shorten(*line)));
        return *line;
      }
      if (out_buf.size() > kMaxAnswerBytes)
        fail_now(fmt::format("printed {} bytes to stdout without a newline in answer to {}.",
                             out_buf.size(), label));
      if (out_eof) {
        // Closing stdout is how a dying program looks from here.
        if (wait_exit(kDyingGraceSeconds)) fail_exited("while " + doing + " " + label);
        fail_now(fmt::format("closed its stdout while {} {}.", doing, label));
      }
      if (check_exited()) {
        drain();
        if (auto line = next_line()) {
          if (written == request.size()) return *line;
        }
        fail_exited("while " + doing + " " + label);
      }
      if (interruptible && stop::requested() && stop::seconds_since_request() >= options.stop_grace_seconds) {
        // The answer would come too late to be used: the run is stopping.
        if (!exited) kill_now();
        drain();
        close_fds();
        pid = -1;
        failure = fmt::format("{} was stopped with the run", who());
        throw stop::Interrupted(fmt::format("{} had not answered {} {}s after the stop request (its "
                                            "stop_grace_seconds), so trlx killed it",
                                            who(), label, options.stop_grace_seconds));
      }
      if (seconds_left(deadline) <= 0) {
        std::string partial;
        if (!is_blank(out_buf))
          partial = fmt::format(" It printed '{}' without ending the line.", shorten(out_buf));
        fail_now(fmt::format(
            "gave no answer to {} within {}s (timeout_seconds), so trlx killed it.{} A program "
            "must end each answer with a newline and flush its stdout (Python: print(..., "
            "flush=True)).",
            label, options.timeout_seconds, partial));
      }
      const bool writable = pump(deadline, written < request.size());
      if (writable) {
        const size_t chunk = std::min<size_t>(request.size() - written, 1 << 16);
        const ssize_t n = write_no_sigpipe(in_fd, request.data() + written, chunk);
        if (n > 0) {
          written += static_cast<size_t>(n);
        } else if (n < 0 && errno == EPIPE) {
          if (wait_exit(kDyingGraceSeconds)) fail_exited("while reading " + label);
          fail_now(fmt::format("closed its stdin while reading {}.", label));
        } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          fail_now(fmt::format("could not be sent {}: {}.", label, std::strerror(errno)));
        }
      }
    }
  }

  // Writes `line` (its newline included) and waits for no answer (a
  // logger's); what the program prints meanwhile is read, stdout dropped and
  // stderr kept for messages.
  void send_only(const std::string& line) {
    if (failure) throw Error("stopped after an earlier failure: " + *failure);
    ++requests;
    const auto deadline = after(options.timeout_seconds);
    size_t written = 0;
    while (written < line.size()) {
      if (check_exited()) {
        drain();
        fail_exited(fmt::format("before taking line {}", requests));
      }
      if (seconds_left(deadline) <= 0)
        fail_now(fmt::format("did not take line {} within {}s (timeout_seconds), so trlx killed it; a logger must "
                             "keep reading its stdin",
                             requests, options.timeout_seconds));
      const bool writable = pump(deadline, true);
      out_buf.clear();
      if (!writable) continue;
      const size_t chunk = std::min<size_t>(line.size() - written, 1 << 16);
      const ssize_t n = write_no_sigpipe(in_fd, line.data() + written, chunk);
      if (n > 0) {
        written += static_cast<size_t>(n);
      } else if (n < 0 && errno == EPIPE) {
        if (wait_exit(kDyingGraceSeconds)) fail_exited(fmt::format("while taking line {}", requests));
        fail_now(fmt::format("closed its stdin while taking line {}.", requests));
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        fail_now(fmt::format("could not be sent line {}: {}.", requests, std::strerror(errno)));
      }
    }
    if (!out_eof || !err_eof) pump(Clock::now(), false);
    out_buf.clear();
  }

  // Closes stdin and gives the program `seconds` to exit; its exit, described.
  std::string finish(double seconds) {
    if (pid <= 0) return "stopped";
    if (in_fd >= 0) ::close(in_fd), in_fd = -1;
    if (!exited && !wait_exit(seconds)) kill_now();
    ::killpg(pid, SIGKILL);
    drain();
    const std::string how = exit_description();
    close_fds();
    pid = -1;
    return how;
  }

  // The first line the program prints on its own (a tool program's
  // announcement), within `seconds`; failures as exchange()'s, InputError
  // since nothing was asked yet.
  std::string read_unprompted(double seconds, const std::string& what) {
    const auto deadline = after(seconds);
    for (;;) {
      if (auto line = next_line()) return *line;
      if (out_eof || check_exited()) {
        wait_exit(kDyingGraceSeconds);
        if (exited) fail_exited("before " + what);
        fail_now(fmt::format("closed its stdout before {}.", what), true);
      }
      if (seconds_left(deadline) <= 0)
        fail_now(fmt::format("printed no {} within {}s (timeout_seconds), so trlx killed it. A program must end "
                             "each line with a newline and flush its stdout (Python: print(..., flush=True)).",
                             what, seconds),
                 true);
      pump(deadline, false);
    }
  }

  void start() {
    if (options.working_dir && !std::filesystem::is_directory(*options.working_dir))
      fail_input("reward program '{}' (command: {}): its working_dir {} is not a directory.",
                 options.name, options.command, options.working_dir->string());
    int in_pipe[2] = {-1, -1}, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
    int* const all[] = {&in_pipe[0],  &in_pipe[1],  &out_pipe[0],
                        &out_pipe[1], &err_pipe[0], &err_pipe[1]};
    try {
      for (int* p : {in_pipe, out_pipe, err_pipe})
        if (::pipe2(p, O_CLOEXEC) < 0) sys_fail("pipe2");
      for (int* fd : all) *fd = lift_fd(*fd);
    } catch (...) {
      for (int* fd : all)
        if (*fd >= 0) ::close(*fd);
      throw;
    }

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in_pipe[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
    posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
    if (options.working_dir)
      posix_spawn_file_actions_addchdir_np(&actions, options.working_dir->c_str());
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    // Descriptors trlx opened without O_CLOEXEC (by libraries: sockets,
    // model files) would otherwise live as long as the program does.
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);
#endif
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    // Its own process group, so that a kill reaches the program even when the
    // shell runs it as a child; with default SIGPIPE and no blocked signals,
    // whatever trlx's threads had set.
    sigset_t defaults, empty;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    sigemptyset(&empty);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setsigmask(&attr, &empty);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(
        &attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);

    // Python block-buffers a piped stdout, and a program that forgets to
    // flush would sit on its answer until the timeout.
    std::vector<std::string> env_strings;
    bool has_unbuffered = false;
    for (char** e = environ; e && *e; ++e) {
      env_strings.emplace_back(*e);
      if (std::strncmp(*e, "PYTHONUNBUFFERED=", 17) == 0) has_unbuffered = true;
    }
    if (!has_unbuffered) env_strings.emplace_back("PYTHONUNBUFFERED=1");
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string sh = "/bin/sh", dash_c = "-c", cmd = options.command;
    char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};

    const int rc = ::posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    ::close(in_pipe[0]);
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    in_fd = in_pipe[1];
    out_fd = out_pipe[0];
    err_fd = err_pipe[0];
    if (rc != 0) {
      pid = -1;
      close_fds();
      fail_input("{}: cannot start /bin/sh{}: {}.", who(),
                 options.working_dir ? " in " + options.working_dir->string() : std::string(),
                 std::strerror(rc));
    }
    set_nonblocking(in_fd);
    set_nonblocking(out_fd);
    set_nonblocking(err_fd);
    log::debug("started {} '{}' (pid {}): {}", kind, options.name, pid, options.command);

    // The start-up check: a missing script, a typo'd interpreter or an import
    // error ends the program within moments, and trlx says so before any
    // training instead of at the first batch.
    const auto deadline = after(options.startup_check_seconds);
    while (seconds_left(deadline) > 0 && !check_exited()) {
      if (out_eof && err_eof)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      else
        pump(deadline, false);
    }
    if (check_exited()) fail_exited("at once, before any request");
  }
};

RewardProgram::RewardProgram(std::unique_ptr<ProgramProcess> process) : process_(std::move(process)) {}
RewardProgram::~RewardProgram() = default;
const std::string& RewardProgram::name() const { return process_->options.name; }
Scores RewardProgram::score(const std::vector<Sample>& batch) {
  process_->check_failed();
  if (batch.empty()) return {};
  return process_->parse_rewards(process_->exchange(reward_request_line(batch, process_->step) + "\n", batch.size()),
                                 batch.size());
}
void RewardProgram::set_step(int64_t step) { process_->step = step; }
void RewardProgram::check_alive() { process_->check_alive(); }
int RewardProgram::pid() const { return process_->pid; }

namespace {

std::unique_ptr<ProgramProcess> start_program(const ProgramOptions& options, const std::string& kind,
                                              const std::string& item, const std::string& doing, const char* example) {
  if (is_blank(options.command)) fail_input("a {} needs a command (e.g. {{command: \"{}\"}}).", kind, example);
  if (!(options.timeout_seconds > 0))
    fail_input("{} ({}): timeout_seconds must be positive, got {}.", kind, options.command, options.timeout_seconds);
  if (!(options.stop_grace_seconds >= 0))
    fail_input("{} ({}): stop_grace_seconds must be >= 0, got {}.", kind, options.command, options.stop_grace_seconds);
  if (!(options.startup_check_seconds >= 0))
    fail_input("{} ({}): startup_check_seconds must be >= 0, got {}.", kind, options.command,
               options.startup_check_seconds);
  auto process = std::make_unique<ProgramProcess>();
  process->options = options;
  process->kind = kind;
  process->item = item;
  process->doing = doing;
  if (process->options.name.empty()) process->options.name = program_name_from_command(options.command);
  process->start();
  return process;
}

}  // namespace

std::unique_ptr<RewardProgram> start_reward_program(const ProgramOptions& options) {
  auto process = start_program(options, "reward program", "completion", "scoring", "python3 my_reward.py");
  process->interruptible = true;
  return std::unique_ptr<RewardProgram>(new RewardProgram(std::move(process)));
}

JudgeProgram::JudgeProgram(std::unique_ptr<ProgramProcess> process) : process_(std::move(process)) {}
JudgeProgram::~JudgeProgram() = default;
const std::string& JudgeProgram::name() const { return process_->options.name; }
void JudgeProgram::set_step(int64_t step) { process_->step = step; }

std::vector<std::optional<int>> JudgeProgram::judge(const std::vector<std::pair<Sample, Sample>>& pairs) {
  process_->check_failed();
  if (pairs.empty()) return {};
  const auto line = process_->exchange(judge_request_line(pairs, process_->step) + "\n", pairs.size());
  const auto list = process_->answer_list(line, pairs.size(), "preferences", "preference", "0 (the first), 1 (the second) or null");
  std::vector<std::optional<int>> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const auto& p = list[i];
    if (p.is_null()) out.emplace_back(std::nullopt);
    else if (p.is_number_integer() && (p.get<int64_t>() == 0 || p.get<int64_t>() == 1)) out.emplace_back(p.get<int>());
    else
      process_->fail_now(fmt::format("answered {} with preference {} = {}; each must be 0 (the first completion is "
                                     "better), 1 (the second) or null (no preference).",
                                     process_->request_label(pairs.size()), i, shorten(p.dump())));
  }
  return out;
}

LoggerProgram::LoggerProgram(std::unique_ptr<ProgramProcess> process) : process_(std::move(process)) {}
LoggerProgram::~LoggerProgram() = default;
const std::string& LoggerProgram::name() const { return process_->options.name; }
void LoggerProgram::send(const std::string& line) { process_->send_only(line + "\n"); }
std::string LoggerProgram::finish() { return process_->finish(process_->options.timeout_seconds); }

std::unique_ptr<LoggerProgram> start_logger_program(const ProgramOptions& options) {
  return std::unique_ptr<LoggerProgram>(
      new LoggerProgram(start_program(options, "logger program", "line", "logging", "python3 my_logger.py")));
}

ProgramOptions program_entry(const nlohmann::json& spec, const std::string& field, const std::string& entry) {
  // Only a reward's or a judge's answer is something a stopping run can do
  // without (stop_grace_seconds).
  const bool graceful = field == "reward_funcs" || field == "judge";
  ProgramOptions o;
  for (const auto& [k, v] : spec.items()) {
    const bool number = v.is_number(), text = v.is_string();
    if (k == "command" && text) o.command = v.get<std::string>();
    else if (k == "name" && text) o.name = v.get<std::string>();
    else if (k == "timeout_seconds" && number && v.get<double>() > 0) o.timeout_seconds = v.get<double>();
    else if (k == "working_dir" && text) o.working_dir = v.get<std::string>();
    else if (k == "stop_grace_seconds" && !graceful)
      fail_input("{}: stop_grace_seconds is for reward and judge programs, whose answer a stopping run can do "
                 "without; {} (in {})",
                 field,
                 field == "tools" ? "a tool's answer is part of the completion being generated, and the run waits "
                                    "for it up to timeout_seconds"
                                  : "this program answers nothing",
                 entry);
    else if (k == "stop_grace_seconds" && number && v.get<double>() >= 0) o.stop_grace_seconds = v.get<double>();
    else if (k == "command" || k == "name" || k == "timeout_seconds" || k == "working_dir" || k == "stop_grace_seconds")
      fail_input("{}: `{}` of a program entry expects {} (in {})", field, k,
                 k == "timeout_seconds"      ? "a number of seconds > 0"
                 : k == "stop_grace_seconds" ? "a number of seconds >= 0"
                                             : "a string",
                 entry);
    else
      fail_input("{}: a program entry takes {}; `{}` is not one of them (in {})", field,
                 graceful ? "command, name, timeout_seconds, working_dir and stop_grace_seconds"
                          : "command, name, timeout_seconds and working_dir",
                 k, entry);
  }
  return o;
}

std::unique_ptr<JudgeProgram> start_judge_program(const ProgramOptions& options) {
  auto process = start_program(options, "judge program", "pair", "judging", "python3 my_judge.py");
  process->interruptible = true;
  return std::unique_ptr<JudgeProgram>(new JudgeProgram(std::move(process)));
}

std::string program_name_from_command(const std::string& command) {
  // Words roughly as the shell splits them (quotes group, operators split);
  // a name needs no more.
  std::vector<std::string> words;
  std::string cur;
  char quote = 0;
  for (char c : command) {
    if (quote) {
      if (c == quote)
        quote = 0;
      else
        cur += c;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == ';' || c == '&' || c == '|' || c == '(' ||
               c == ')') {
      if (!cur.empty()) words.push_back(cur), cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) words.push_back(cur);

  static const std::regex assignment("[A-Za-z_][A-Za-z0-9_]*=.*");
  static const std::regex interpreter(
      "(python|pypy|pypy3)[0-9.]*|env|exec|nohup|nice|time|stdbuf|timeout|uv|uvx|run|poetry|pipenv|"
      "conda|bash|sh|dash|zsh|node|deno|bun|perl|ruby|Rscript|julia|srun|apptainer|singularity");
  std::string chosen;
  bool module = false;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    if (w == "-m" && i + 1 < words.size()) {  // python3 -m pkg.mod
      chosen = words[i + 1];
      module = true;
      break;
    }
    if (w == "-c" || w == "-e") break;  // inline code (python3 -c ...) has no file to name it
    if (w == "cd") {                    // cd DIR && ...: the directory is no name
      ++i;
      continue;
    }
    if (w.empty() || w[0] == '-' || std::regex_match(w, assignment)) continue;
    const std::string base = std::filesystem::path(w).filename().string();
    if (std::regex_match(base, interpreter)) continue;
    chosen = w;
    break;
  }
  std::string name;
  if (module) {
    const auto dot = chosen.rfind('.');
    name = dot == std::string::npos ? chosen : chosen.substr(dot + 1);
  } else if (!chosen.empty()) {
    name = std::filesystem::path(chosen).stem().string();
  }
  for (char& c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) c = '_';
  if (name.size() > 64) name.resize(64);
  return name.empty() ? "reward_program" : name;
}

namespace {

// The rows' columns, one list each in the order they first appear; a row
// without one gets null, so that every list stays aligned with the rows.
nlohmann::ordered_json aligned_columns(const std::vector<const Sample*>& rows) {
  using J = nlohmann::ordered_json;
  J columns = J::object();
  for (const auto* s : rows)
    if (s->columns.is_object())
      for (auto it = s->columns.begin(); it != s->columns.end(); ++it)
        if (!columns.contains(it.key())) columns[it.key()] = J::array();
  for (const auto* s : rows)
    for (auto it = columns.begin(); it != columns.end(); ++it) {
      const bool has = s->columns.is_object() && s->columns.contains(it.key());
      it.value().push_back(has ? s->columns[it.key()] : J(nullptr));
    }
  return columns;
}

// The request line: one entry per row in each list, then the step.
std::string request_text(nlohmann::ordered_json prompts, nlohmann::ordered_json completions,
                         nlohmann::ordered_json ids, const std::vector<const Sample*>& rows,
                         std::optional<int64_t> step) {
  nlohmann::ordered_json request = nlohmann::ordered_json::object();
  request["prompts"] = std::move(prompts);
  request["completions"] = std::move(completions);
  request["completion_ids"] = std::move(ids);
  request["columns"] = aligned_columns(rows);
  if (step) request["step"] = *step;
  return request.dump(-1, ' ', /*ensure_ascii=*/true, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

std::string reward_request_line(const std::vector<Sample>& batch, std::optional<int64_t> step) {
  using J = nlohmann::ordered_json;
  J prompts = J::array(), completions = J::array(), ids = J::array();
  std::vector<const Sample*> rows;
  for (const auto& s : batch) {
    prompts.push_back(s.prompt);
    completions.push_back(s.completion);
    ids.push_back(s.completion_ids);
    rows.push_back(&s);
  }
  return request_text(std::move(prompts), std::move(completions), std::move(ids), rows, step);
}

std::string judge_request_line(const std::vector<std::pair<Sample, Sample>>& pairs, std::optional<int64_t> step) {
  using J = nlohmann::ordered_json;
  J prompts = J::array(), completions = J::array(), ids = J::array();
  std::vector<const Sample*> rows;
  for (const auto& [first, second] : pairs) {
    prompts.push_back(first.prompt);
    completions.push_back(J::array({first.completion, second.completion}));
    ids.push_back(J::array({first.completion_ids, second.completion_ids}));
    rows.push_back(&first);
  }
  return request_text(std::move(prompts), std::move(completions), std::move(ids), rows, step);
}

// ------------------------------------------------------------ tool programs

ToolProgram::ToolProgram(ProgramOptions options) : options_(std::move(options)) {}
ToolProgram::~ToolProgram() = default;
const std::string& ToolProgram::name() const { return options_.name; }
const std::string& ToolProgram::command() const { return options_.command; }
bool ToolProgram::is_async(const std::string& tool) const {
  return std::find(async_.begin(), async_.end(), tool) != async_.end();
}

void ToolProgram::launch() {
  process_ = start_program(options_, "tool program", "call", "running", "python3 examples/tools/python_tools.py my_tools.py");
  const std::string line = process_->read_unprompted(options_.timeout_seconds, "its announcement line ({\"tools\": [...]})");
  const auto a = nlohmann::ordered_json::parse(line, nullptr, false);
  auto bad = [&](const std::string& what) {
    process_->fail_now(fmt::format("announced '{}': {}. A tool program starts by printing one line {{\"tools\": "
                                   "[{{\"type\": \"function\", \"function\": {{\"name\": ..., \"description\": ..., "
                                   "\"parameters\": {{...}}}}}}, ...]}} (docs/tools.md).",
                                   shorten(line), what),
                       true);
  };
  if (a.is_discarded() || !a.is_object()) bad("not a JSON object");
  if (!a.contains("tools") || !a["tools"].is_array()) bad("no \"tools\" list");
  nlohmann::ordered_json schemas = nlohmann::ordered_json::array();
  for (const auto& t : a["tools"]) {
    const auto* fn = t.is_object() && t.contains("function") ? &t["function"] : nullptr;
    if (!fn || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string() ||
        (*fn)["name"].get<std::string>().empty())
      bad(fmt::format("the tool {} has no function name", shorten(t.dump())));
    schemas.push_back(t);
  }
  std::vector<std::string> async;
  if (a.contains("async")) {
    if (!a["async"].is_array()) bad("\"async\" is not a list of tool names");
    for (const auto& n : a["async"]) {
      if (!n.is_string()) bad("\"async\" is not a list of tool names");
      async.push_back(n.get<std::string>());
    }
  }
  bool env = false, reward = false;
  std::string env_name;
  if (a.contains("environment") && !a["environment"].is_null()) {
    const auto& e = a["environment"];
    if (!e.is_object() || !e.contains("name") || !e["name"].is_string() || e["name"].get<std::string>().empty() ||
        (e.contains("reward") && !e["reward"].is_boolean()))
      bad("\"environment\" must be {\"name\": \"...\", \"reward\": true|false}");
    env = true;
    env_name = e["name"].get<std::string>();
    reward = e.value("reward", false);
  }
  if (schemas.empty() && !env) bad("an empty tool list");
  if (restarts_ == 0) {
    schemas_ = std::move(schemas);
    async_ = std::move(async);
    environment_ = env;
    has_reward_ = reward;
    environment_name_ = env_name;
  } else if (schemas != schemas_) {
    process_->fail_now("announced other tools when started again than at its first start");
  }
}

ToolResult ToolProgram::call(const std::string& tool, const nlohmann::ordered_json& arguments,
                             std::optional<int64_t> episode) {
  if (dead_) return {false, *dead_};
  try {
    if (!process_) {
      ++restarts_;
      launch();
    }
    nlohmann::ordered_json request = {{"call", {{"name", tool}, {"arguments", arguments}}}};
    if (episode) request["episode"] = *episode;
    const std::string line = process_->exchange(
        request.dump(-1, ' ', true, nlohmann::ordered_json::error_handler_t::replace) + "\n", 1);
    const auto answer = nlohmann::ordered_json::parse(line, nullptr, false);
    if (!answer.is_discarded() && answer.is_object()) {
      if (auto it = answer.find("error"); it != answer.end())
        return {false, it->is_string() ? it->get<std::string>() : it->dump()};
      if (auto it = answer.find("result"); it != answer.end())
        return {true, it->is_string() ? it->get<std::string>() : it->dump()};
    }
    process_->fail_now(fmt::format("answered call {} of '{}' with '{}'; expected {{\"result\": ...}} or "
                                   "{{\"error\": \"...\"}}.",
                                   process_->requests, tool, shorten(line)));
  } catch (const Error& e) {
    // What went wrong is the call's result; the program starts again for
    // the next call.
    const std::string what = e.what();
    if (!logged_failure_) {
      log::warn("a tool call failed; the model sees the error, the program starts again for the next call, and later "
                "failures of this program are counted in tools/failure_frequency, not logged: {}",
                what);
      logged_failure_ = true;
    }
    const bool never_started = process_ == nullptr || process_->requests == 0;
    process_.reset();
    if (never_started && restarts_ > 0) dead_ = "the tool program could not be started again: " + what;
    return {false, fmt::format("tool program '{}' failed: {}", options_.name,
                               what.substr(0, what.find('\n')))};
  }
  return {false, "unreachable"};
}

std::optional<std::string> ToolProgram::reset(int64_t episode, const nlohmann::ordered_json& row) {
  if (dead_) throw Error(*dead_);
  if (!process_) {
    ++restarts_;
    launch();
  }
  nlohmann::ordered_json request = {{"reset", {{"episode", episode}, {"row", row}}}};
  const std::string line =
      process_->exchange(request.dump(-1, ' ', true, nlohmann::ordered_json::error_handler_t::replace) + "\n", 1);
  const auto answer = nlohmann::ordered_json::parse(line, nullptr, false);
  if (answer.is_discarded() || !answer.is_object() || !answer.contains("observation") ||
      !(answer["observation"].is_null() || answer["observation"].is_string()))
    process_->fail_now(fmt::format("answered the reset of episode {} with '{}'; expected {{\"observation\": "
                                   "\"text\"}} or {{\"observation\": null}}.",
                                   episode, shorten(line)));
  if (answer["observation"].is_null()) return std::nullopt;
  return answer["observation"].get<std::string>();
}

std::vector<std::optional<double>> ToolProgram::rewards(const std::vector<int64_t>& episodes) {
  if (episodes.empty()) return {};
  if (dead_) throw Error(*dead_);
  if (!process_) {
    ++restarts_;
    launch();
  }
  nlohmann::ordered_json request = {{"reward", {{"episodes", episodes}}}};
  const auto list = process_->answer_list(process_->exchange(request.dump() + "\n", episodes.size()),
                                          episodes.size(), "rewards", "reward", "one number or null");
  std::vector<std::optional<double>> out;
  for (const auto& r : list) {
    if (r.is_null()) out.emplace_back(std::nullopt);
    else if (r.is_number() && std::isfinite(r.get<double>())) out.emplace_back(r.get<double>());
    else process_->fail_now(fmt::format("answered a reward {}; each must be a finite number or null.", shorten(r.dump())));
  }
  return out;
}

std::unique_ptr<ToolProgram> start_tool_program(const ProgramOptions& options) {
  auto o = options;
  if (o.name.empty()) o.name = program_name_from_command(o.command);
  std::unique_ptr<ToolProgram> t(new ToolProgram(o));
  t->launch();
  return t;
}

}  // namespace trlx::rewards
