// `trlx launch`: starts the ranks of one machine and watches them.
//
//   trlx launch --nproc_per_node N [--accelerate_config NAME|FILE] -- trlx sft --config x.yaml
//
// GPUs: launch starts the N ranks itself with torchrun's variables (RANK,
// LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), so they meet through a
// TCPStore and talk through NCCL. CPUs: ranks talk through MPI, and MPI ranks
// must be started by mpirun; launch runs mpirun underneath, and each rank
// first runs `trlx launch --rank_output_dir DIR -- <command>`, which points
// its stdout and stderr at named pipes of its own before executing the
// command. Either way launch reads every rank's output separately, prefixes
// each line with `[rank N]`, forwards SIGINT and SIGTERM, stops every rank
// when one fails, and exits with the first failing rank's code.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <torch/cuda.h>

#include "cli/parse.hpp"
#include "config/accelerate.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/strings.hpp"
#include "dist/comm/make_communicator.hpp"
#include "dist/env/launcher_env.hpp"
#include "trainers/registry.hpp"

extern char** environ;

namespace trlx::cli {

namespace {

namespace fs = std::filesystem;

volatile sig_atomic_t g_signal = 0;
volatile sig_atomic_t g_signal_count = 0;

void on_signal(int sig) {
  g_signal = sig;
  g_signal_count = g_signal_count + 1;
}

std::string self_exe() {
  std::error_code ec;
  const fs::path p = fs::read_symlink("/proc/self/exe", ec);
  if (ec) fail("trlx launch: cannot find its own executable (/proc/self/exe): {}", ec.message());
  return p.string();
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (!path) return "";
  std::string dirs = path;
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const fs::path candidate = fs::path(dirs.substr(start, end - start)) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    start = end + 1;
  }
  return "";
}

int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 29500;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 29500;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

// The environment of a child: ours, with `set` replacing or adding entries.
std::vector<std::string> child_environment(const std::vector<std::pair<std::string, std::string>>& set) {
  std::vector<std::string> out;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    bool replaced = false;
    for (const auto& [k, v] : set) replaced = replaced || k == key;
    if (!replaced) out.push_back(kv);
  }
  for (const auto& [k, v] : set) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// One output stream of one rank (rank -1: mpirun's own messages).
struct Stream {
  int fd = -1;
  int rank = -1;
  bool is_err = false;
  bool open = true;
  int keep_open_fd = -1;  // our own write end of a named pipe, so it never reads as closed early
  std::string partial;
  // mpirun's: the notice block (between lines of dashes) being read.
  std::optional<std::vector<std::string>> block;
};

void write_line(const Stream& s, std::string_view line);

bool is_rule(std::string_view line) {
  return line.size() >= 20 && line.find_first_not_of('-') == std::string_view::npos;
}

// mpirun's notices after a rank exits with an error: "Primary job terminated
// normally, but 1 process returned a non-zero exit code" and "mpirun detected
// that one or more processes exited with non-zero status", boxed in dashes.
// The rank has said why itself; the two boxes become one line naming the
// rank and its code. Every other notice (a rank killed by a signal, a launch
// failure) passes unchanged.
void end_mpirun_block(const Stream& s, const std::vector<std::string>& block) {
  auto holds = [&](std::string_view text) {
    return std::any_of(block.begin(), block.end(),
                       [&](const std::string& l) { return l.find(text) != std::string::npos; });
  };
  if (holds("Primary job  terminated normally") || holds("Primary job terminated normally")) return;
  if (holds("exited with non-zero status")) {
    std::string rank = "?", code = "?";
    for (const std::string& l : block) {
      const auto name = l.find("Process name:");
      if (name != std::string::npos) {
        const auto close = l.rfind("]]") != std::string::npos ? l.rfind("]]") : l.rfind(']');
        const auto comma = l.rfind(',', close);
        if (comma != std::string::npos && close != std::string::npos && close > comma)
          rank = l.substr(comma + 1, close - comma - 1);
      }
      const auto at = l.find("Exit code:");
      if (at != std::string::npos) code = std::string(trim(l.substr(at + 10)));
    }
    write_line(s, fmt::format("trlx launch: rank {} was the first to exit with an error (code {}); mpirun stopped "
                              "the others",
                              rank, code));
    return;
  }
  for (const std::string& l : block) write_line(s, l);
}

void emit_line(Stream& s, std::string_view line) {
  if (s.rank >= 0) return write_line(s, line);
  if (s.block) {
    s.block->emplace_back(line);
    if (is_rule(line) && s.block->size() > 1) {
      end_mpirun_block(s, *s.block);
      s.block.reset();
    }
    return;
  }
  if (is_rule(line)) {
    s.block.emplace(std::vector<std::string>{std::string(line)});
    return;
  }
  write_line(s, line);
}

void write_line(const Stream& s, std::string_view line) {
  std::string out;
  const std::string tag = fmt::format("[rank {}]", s.rank);
  if (s.rank >= 0 && line.substr(0, tag.size()) != tag) out = tag + " ";
  out.append(line);
  out += '\n';
  FILE* f = s.is_err ? stderr : stdout;
  std::fwrite(out.data(), 1, out.size(), f);
}

// Reads what is there; returns false at end of stream.
bool pump(Stream& s) {
  char buf[65536];
  bool any = false;
  for (;;) {
    const ssize_t n = ::read(s.fd, buf, sizeof(buf));
    if (n > 0) {
      any = true;
      s.partial.append(buf, static_cast<size_t>(n));
      size_t pos;
      while ((pos = s.partial.find('\n')) != std::string::npos) {
        emit_line(s, std::string_view(s.partial).substr(0, pos));
        s.partial.erase(0, pos + 1);
      }
      continue;
    }
    if (n == 0) {
      s.open = false;
      break;
    }
    if (errno == EINTR) continue;
    break;  // EAGAIN: nothing more for now
  }
  if (any) std::fflush(s.is_err ? stderr : stdout);
  return s.open;
}

void flush_partial(Stream& s) {
  if (!s.partial.empty()) emit_line(s, s.partial);
  s.partial.clear();
  if (s.block)
    for (const std::string& l : *s.block) write_line(s, l);
  s.block.reset();
}

struct Child {
  pid_t pid = -1;
  int rank = -1;  // -1: mpirun
  bool running = true;
  int code = 0;
};

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("exited with code {}", WEXITSTATUS(status));
}

// Starts `argv` in process group `pgid` (0: a new group led by the child) with
// stdout and stderr going to `out_fd` and `err_fd` (-1: inherited).
pid_t spawn(std::vector<std::string> argv, std::vector<std::string> env, pid_t pgid, int out_fd, int err_fd,
            const std::vector<int>& close_fds) {
  auto cargv = c_strings(argv);
  auto cenv = c_strings(env);
  const pid_t pid = ::fork();
  if (pid < 0) fail("trlx launch: fork failed: {}", std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, pgid);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    if (out_fd >= 0) ::dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0) ::dup2(err_fd, STDERR_FILENO);
    for (int fd : close_fds) ::close(fd);
    ::execvpe(cargv[0], cargv.data(), cenv.data());
    const std::string msg = fmt::format("trlx launch: cannot run `{}`: {}\n", argv[0], std::strerror(errno));
    ssize_t n = ::write(STDERR_FILENO, msg.data(), msg.size());
    (void)n;
    ::_exit(127);
  }
  ::setpgid(pid, pgid == 0 ? pid : pgid);
  return pid;
}

// The pid a rank under mpirun wrote beside its pipes (exec_rank), once it has.
std::optional<pid_t> rank_pid(const fs::path& dir, int rank) {
  std::ifstream in(dir / fmt::format("{}.pid", rank));
  long pid = 0;
  if (!(in >> pid) || pid <= 0) return std::nullopt;
  return static_cast<pid_t>(pid);
}

struct Options {
  std::optional<int> nproc;
  std::string accelerate_config;
  std::optional<int> master_port;
  bool cpu = false;
  double grace_s = 10;
  std::string rank_output_dir;  // internal: this process is one rank under mpirun
  std::vector<std::string> command;
};

// Inside mpirun: point stdout/stderr at this rank's named pipes, then become
// the command.
int exec_rank(const Options& o) {
  const dist::LauncherEnv env = dist::detect_launcher();
  const fs::path dir = o.rank_output_dir;
  const int out = ::open((dir / fmt::format("{}.out", env.rank)).c_str(), O_WRONLY);
  const int err = ::open((dir / fmt::format("{}.err", env.rank)).c_str(), O_WRONLY);
  if (out < 0 || err < 0) fail("trlx launch: rank {} cannot open its output pipes in {}: {}", env.rank, dir.string(),
                               std::strerror(errno));
  // The launcher signals this process directly (stop_all); the pid stays
  // the same through the exec below.
  {
    std::ofstream pid_file(dir / fmt::format("{}.pid.tmp", env.rank));
    pid_file << ::getpid() << "\n";
  }
  fs::rename(dir / fmt::format("{}.pid.tmp", env.rank), dir / fmt::format("{}.pid", env.rank));
  std::fflush(stdout);
  std::fflush(stderr);
  ::dup2(out, STDOUT_FILENO);
  ::dup2(err, STDERR_FILENO);
  ::close(out);
  ::close(err);
  std::vector<std::string> argv = o.command;
  auto cargv = c_strings(argv);
  ::execvp(cargv[0], cargv.data());
  std::fprintf(stderr, "trlx launch: cannot run `%s`: %s\n", argv[0].c_str(), std::strerror(errno));
  return 127;
}

Options parse_launch_args(std::vector<std::string> args, int& stop_code) {
  Options o;
  std::vector<std::string> own;
  auto sep = std::find(args.begin(), args.end(), "--");
  own.assign(args.begin(), sep);
  if (sep != args.end()) o.command.assign(sep + 1, args.end());

  CLI::App app{"Start the ranks of one machine for a command and watch them: output prefixed by rank, SIGINT/SIGTERM "
               "forwarded, all ranks stopped when one fails, its exit code returned. CPU ranks talk through MPI "
               "(mpirun underneath), GPU ranks through NCCL.\n\n"
               "  trlx launch --nproc_per_node 2 -- trlx sft --config configs/sft.yaml",
               "trlx launch"};
  int nproc = 0;
  int port = 0;
  auto* np_opt = app.add_option("--nproc_per_node", nproc, "Ranks to start (default: num_processes of the accelerate "
                                                           "config, else 1)")
                     ->check(CLI::Range(1, 1024));
  app.add_option("--accelerate_config", o.accelerate_config,
                 "Accelerate config (a bundled preset or a file): its num_processes, use_cpu and main_process_port "
                 "are used, and trainer commands get it as --accelerate_config");
  auto* port_opt = app.add_option("--master_port", port, "Rendezvous port of GPU ranks (default: a free one)")
                       ->check(CLI::Range(1, 65535));
  app.add_flag("--cpu", o.cpu, "Run the ranks on CPU (MPI) even where GPUs are present");
  app.add_option("--grace_period", o.grace_s, "Seconds the other ranks get to exit after one fails (then SIGKILL)")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--rank_output_dir", o.rank_output_dir, "internal")->group("");
  app.allow_extras(false);
  app.footer("Everything after `--` is the command each rank runs; a leading `trlx` means this trlx.");
  if (auto rc = parse_args(app, own)) {
    stop_code = *rc;
    return o;
  }
  if (np_opt->count()) o.nproc = nproc;
  if (port_opt->count()) o.master_port = port;
  if (o.command.empty())
    fail_input("trlx launch: no command; put it after `--`: trlx launch --nproc_per_node 2 -- trlx sft --config x.yaml");
  return o;
}

}  // namespace

int run_launch(const std::string&, std::vector<std::string> args) {
  int stop_code = -1;
  Options o = parse_launch_args(std::move(args), stop_code);
  if (stop_code >= 0) return stop_code;
  if (!o.rank_output_dir.empty()) return exec_rank(o);

  // What to start.
  std::optional<config::DistributedConfig> accel;
  if (!o.accelerate_config.empty()) accel = config::read_accelerate_config(o.accelerate_config);
  if (accel && accel->num_machines > 1)
    fail_input("trlx launch starts the ranks of one machine, but {} has num_machines: {}; on several machines "
               "start trlx with srun (scripts/slurm/trlx.sbatch), mpirun or torchrun",
               accel->source, accel->num_machines);
  int nproc = 1;
  if (o.nproc) nproc = *o.nproc;
  else if (accel && accel->num_processes) nproc = *accel->num_processes;
  if (nproc < 1) fail_input("trlx launch: {} ranks; give --nproc_per_node 1 or more", nproc);
  const bool cpu = o.cpu || (accel && accel->use_cpu) || !torch::cuda::is_available();
  if (!cpu && static_cast<int>(torch::cuda::device_count()) < nproc)
    fail_input("trlx launch: {} ranks but {} GPU(s); one rank per GPU (or --cpu)", nproc, torch::cuda::device_count());
  const bool use_mpirun = cpu && nproc > 1;

  std::vector<std::string> command = o.command;
  if (command[0] == "trlx") command[0] = self_exe();
  const bool trainer_command = command.size() > 1 && command[0] == self_exe() && trainers::find_trainer(command[1]);
  if (accel && trainer_command &&
      std::none_of(command.begin(), command.end(), [](const std::string& a) {
        return a == "--accelerate_config" || a.rfind("--accelerate_config=", 0) == 0;
      })) {
    command.push_back("--accelerate_config");
    command.push_back(o.accelerate_config);
  }

  std::vector<std::pair<std::string, std::string>> common;
  if (!std::getenv("OMP_NUM_THREADS")) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const unsigned per_rank = std::max(1u, cores / static_cast<unsigned>(nproc));
    common.emplace_back("OMP_NUM_THREADS", std::to_string(per_rank));
    if (nproc > 1)
      log::info("setting OMP_NUM_THREADS={} for each of {} ranks ({} cores; set OMP_NUM_THREADS to choose)", per_rank,
                nproc, cores);
  }

  // Signals go to us; we pass them on, so each rank gets one copy.
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {}, old_term {};
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);

  std::vector<Child> children;
  std::vector<Stream> streams;
  pid_t pgid = 0;
  fs::path fifo_dir;
  auto cleanup = [&] {
    for (auto& s : streams) {
      if (s.fd >= 0) ::close(s.fd);
      if (s.keep_open_fd >= 0) ::close(s.keep_open_fd);
    }
    if (!fifo_dir.empty()) {
      std::error_code ec;
      fs::remove_all(fifo_dir, ec);
    }
    ::sigaction(SIGINT, &old_int, nullptr);
    ::sigaction(SIGTERM, &old_term, nullptr);
  };

  try {
    if (use_mpirun) {
      if (!dist::mpi_available())
        fail_input("trlx launch: {} CPU ranks talk through MPI, and this trlx was built without it (install "
                   "libopenmpi-dev and rebuild)",
                   nproc);
      std::string mpirun = std::getenv("TRLX_MPIRUN") ? std::getenv("TRLX_MPIRUN") : find_on_path("mpirun");
      if (mpirun.empty())
        fail_input("trlx launch: {} CPU ranks are started by Open MPI's mpirun, which is not on PATH (apt install "
                   "openmpi-bin)",
                   nproc);
      char tmpl[] = "/tmp/trlx-launch-XXXXXX";
      if (!::mkdtemp(tmpl)) fail("trlx launch: cannot create a temporary directory: {}", std::strerror(errno));
      fifo_dir = tmpl;
      for (int r = 0; r < nproc; ++r) {
        for (bool is_err : {false, true}) {
          const fs::path p = fifo_dir / fmt::format("{}.{}", r, is_err ? "err" : "out");
          if (::mkfifo(p.c_str(), 0600) != 0) fail("trlx launch: mkfifo {}: {}", p.string(), std::strerror(errno));
          Stream s;
          s.rank = r;
          s.is_err = is_err;
          s.fd = ::open(p.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
          s.keep_open_fd = ::open(p.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
          if (s.fd < 0 || s.keep_open_fd < 0) fail("trlx launch: open {}: {}", p.string(), std::strerror(errno));
          streams.push_back(s);
        }
      }
      // SIGINT and SIGTERM go to the ranks themselves (each writes its pid
      // beside its pipes; see stop_all), as srun and torchrun send them: a
      // SIGTERM to mpirun reaches the ranks a second late and is followed by
      // SIGKILL a second after that, too soon for a training rank to finish
      // its step and save.
      std::vector<std::string> argv = {mpirun, "-np", std::to_string(nproc), "--oversubscribe", "--bind-to", "none",
                                       self_exe(), "launch", "--rank_output_dir", fifo_dir.string(), "--"};
      argv.insert(argv.end(), command.begin(), command.end());
      auto env = common;
      if (::geteuid() == 0) {
        // Open MPI refuses root unless told; `trlx launch` users should not need to know.
        env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT", "1");
        env.emplace_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
      }
      log::info("launching {} ranks on CPU (MPI)", nproc);
      // mpirun's own messages, through a filter (end_mpirun_block).
      int out[2], err[2];
      if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
        fail("trlx launch: pipe: {}", std::strerror(errno));
      Child c;
      c.pid = spawn(argv, child_environment(env), 0, out[1], err[1], {out[0], err[0]});
      ::close(out[1]);
      ::close(err[1]);
      for (int i = 0; i < 2; ++i) {
        Stream s;
        s.rank = -1;
        s.is_err = i == 1;
        s.fd = i == 0 ? out[0] : err[0];
        ::fcntl(s.fd, F_SETFL, ::fcntl(s.fd, F_GETFL) | O_NONBLOCK);
        streams.push_back(s);
      }
      pgid = c.pid;
      children.push_back(c);
    } else {
      int port = o.master_port.value_or(0);
      if (!port && accel && accel->main_process_port) port = *accel->main_process_port;
      if (!port) port = free_local_port();
      if (nproc > 1) log::info("launching {} ranks on {} (NCCL), rendezvous 127.0.0.1:{}", nproc, cpu ? "CPU" : "GPUs", port);
      for (int r = 0; r < nproc; ++r) {
        int out[2], err[2];
        if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
          fail("trlx launch: pipe: {}", std::strerror(errno));
        auto env = common;
        for (auto kv : std::vector<std::pair<std::string, std::string>>{
                 {"RANK", std::to_string(r)}, {"LOCAL_RANK", std::to_string(r)},
                 {"WORLD_SIZE", std::to_string(nproc)}, {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
                 {"GROUP_RANK", "0"}, {"ROLE_RANK", std::to_string(r)}, {"MASTER_ADDR", "127.0.0.1"},
                 {"MASTER_PORT", std::to_string(port)}})
          env.push_back(kv);
        Child c;
        c.rank = r;
        c.pid = spawn(command, child_environment(env), pgid, out[1], err[1], {out[0], err[0]});
        if (pgid == 0) pgid = c.pid;
        ::close(out[1]);
        ::close(err[1]);
        for (int i = 0; i < 2; ++i) {
          Stream s;
          s.rank = r;
          s.is_err = i == 1;
          s.fd = i == 0 ? out[0] : err[0];
          ::fcntl(s.fd, F_SETFL, ::fcntl(s.fd, F_GETFL) | O_NONBLOCK);
          streams.push_back(s);
        }
        children.push_back(c);
      }
    }

    // Watch: output, exits, signals.
    std::optional<int> first_failure;
    bool stopping = false;
    int forwarded = 0;
    auto kill_deadline = std::chrono::steady_clock::time_point::max();
    auto stop_all = [&](int sig) {
      if (use_mpirun && sig != SIGKILL) {
        for (int r = 0; r < nproc; ++r)
          if (const auto pid = rank_pid(fifo_dir, r)) ::kill(*pid, sig);
      } else if (pgid > 0) {
        ::kill(-pgid, sig);
      }
      if (!stopping) kill_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(
                                                                            static_cast<int64_t>(o.grace_s * 1000));
      stopping = true;
    };
    auto running = [&] {
      return std::any_of(children.begin(), children.end(), [](const Child& c) { return c.running; });
    };
    while (running()) {
      std::vector<pollfd> fds;
      for (auto& s : streams)
        if (s.open) fds.push_back({s.fd, POLLIN, 0});
      ::poll(fds.data(), fds.size(), 100);
      for (auto& s : streams)
        if (s.open) pump(s);
      int status = 0;
      pid_t pid;
      while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
        for (auto& c : children) {
          if (c.pid != pid) continue;
          c.running = false;
          c.code = exit_code_of(status);
          if (c.code != 0 && !first_failure && !forwarded) {
            first_failure = c.code;
            if (c.rank >= 0 && running()) {
              log::error("rank {} {}: stopping the other ranks", c.rank, describe_status(status));
              stop_all(SIGTERM);
            }
          }
        }
      }
      if (g_signal_count > forwarded) {
        const int sig = g_signal;
        forwarded = g_signal_count;
        // A second Ctrl-C does not wait for a clean stop.
        stop_all(forwarded > 1 ? SIGKILL : sig);
        if (forwarded == 1) log::warn("{}: passed on to every rank", strsignal(sig));
      }
      if (stopping && std::chrono::steady_clock::now() > kill_deadline) {
        log::error("ranks still running {:.0f} s after the stop: killing them", o.grace_s);
        if (pgid > 0) ::kill(-pgid, SIGKILL);
        kill_deadline = std::chrono::steady_clock::time_point::max();
      }
    }
    for (auto& s : streams) {
      if (s.keep_open_fd >= 0) {
        ::close(s.keep_open_fd);
        s.keep_open_fd = -1;
      }
      if (s.open) pump(s);
      flush_partial(s);
    }
    std::fflush(stdout);
    std::fflush(stderr);
    cleanup();
    if (first_failure) return *first_failure;
    if (forwarded) {
      for (const auto& c : children)
        if (c.code != 0) return c.code;
    }
    return 0;
  } catch (...) {
    if (pgid > 0) ::kill(-pgid, SIGKILL);
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    cleanup();
    throw;
  }
}

}  // namespace trlx::cli
