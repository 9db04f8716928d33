// `trlx env`: what users paste into bug reports.
#include <dlfcn.h>
#include <link.h>

#include <fmt/format.h>

#include <charconv>
#include <iostream>
#include <sstream>

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/version.h>

#ifdef TRLX_WITH_MPI
#include <mpi.h>
#endif

#include "cli/cli.hpp"
#include "core/strings.hpp"
#include "core/version.hpp"
#include "core/error.hpp"
#include "dist/comm/rendezvous_check.hpp"
#include "dist/env/launcher_env.hpp"
#include "io/hub.hpp"
#include "io/trackio.hpp"
#include "model/decoder.hpp"

namespace trlx::cli {

namespace {

// NCCL is loaded with LibTorch's CUDA libraries when they are present; ask the
// library itself for its version.
std::string nccl_version() {
  void* lib = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_NOLOAD);
  if (!lib) lib = dlopen("libnccl.so.2", RTLD_LAZY);
  if (!lib) return "not found (libnccl.so.2 not loadable)";
  using GetVersion = int (*)(int*);
  auto fn = reinterpret_cast<GetVersion>(dlsym(lib, "ncclGetVersion"));
  int v = 0;
  if (!fn || fn(&v) != 0) return "found, version unknown";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
}

std::string mpi_version() {
#ifdef TRLX_WITH_MPI
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string s(buf, static_cast<size_t>(len));
  s = s.substr(0, s.find_first_of("\n,"));
  return trim(s);
#else
  return "not built (configure with -DTRLX_WITH_MPI=ON and libopenmpi-dev)";
#endif
}

// The CUDA runtime LibTorch loaded, if any (a CPU-only LibTorch loads none).
std::string cuda_runtime_version() {
  std::string path;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (name.find("libcudart.so") != std::string::npos) {
          *static_cast<std::string*>(out) = name;
          return 1;
        }
        return 0;
      },
      &path);
  if (path.empty()) return "";
  void* lib = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  if (!lib) return "";
  using GetVersion = int (*)(int*);
  auto fn = reinterpret_cast<GetVersion>(dlsym(lib, "cudaRuntimeGetVersion"));
  int v = 0;
  if (!fn || fn(&v) != 0) return "unknown version";
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

// Lines of LibTorch's build description that matter for a report.
std::string torch_build_detail(const std::string& key) {
  std::istringstream in(at::show_config());
  std::string line;
  while (std::getline(in, line)) {
    const std::string t = trim(line);
    if (starts_with(t, "- " + key)) return trim(t.substr(2 + key.size()));
  }
  return "";
}

}  // namespace

namespace {

// `trlx env --rendezvous`: rank 0 prints who met where; the others one line.
int run_rendezvous_check(const dist::LauncherEnv& env, std::chrono::seconds timeout) {
  const auto check = dist::check_rendezvous(env, timeout);
  if (env.rank != 0) {
    std::cout << fmt::format("rank {} of {} on {}: met rank 0 at {} in {:.2f} s\n", env.rank, env.world_size,
                             check.members.front().host, check.where, check.seconds);
    return 0;
  }
  std::cout << fmt::format("rendezvous {} ({}): {} rank(s) met in {:.2f} s\n", check.where,
                           dist::launcher_name(env.launcher), check.members.size(), check.seconds);
  std::cout << fmt::format("  {:<6}{:<6}{:<8}{:<10}{}\n", "rank", "node", "local", "pid", "host");
  for (const auto& m : check.members)
    std::cout << fmt::format("  {:<6}{:<6}{:<8}{:<10}{}\n", m.rank, m.node_rank < 0 ? "-" : std::to_string(m.node_rank),
                             fmt::format("{}/{}", m.local_rank, m.local_world_size), m.pid, m.host);
  for (const auto& p : check.problems) std::cout << "problem: " << p << "\n";
  if (!check.problems.empty()) {
    std::cout << "the ranks met, but this layout would put two ranks on one GPU or miscount the nodes: fix the "
                 "launcher's LOCAL_RANK / LOCAL_WORLD_SIZE / node rank settings\n";
    return static_cast<int>(ExitCode::kBadInput);
  }
  return 0;
}

}  // namespace

int run_env(const std::vector<std::string>& args) {
  bool rendezvous = false;
  long timeout_s = 60;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    if (a == "--help" || a == "-h") {
      std::cout << "Usage: trlx env [--rendezvous [--timeout SECONDS]]\n"
                   "Prints versions, devices, threads and the launcher environment.\n"
                   "  --rendezvous   run under the job's launcher: every rank meets at the rendezvous GPU ranks use\n"
                   "                 (MASTER_ADDR:MASTER_PORT, torchrun's store, or rank 0's port shared over MPI)\n"
                   "                 and rank 0 prints each rank's node, local rank and host; exit 0 when all met\n"
                   "                 with a consistent layout, 1 when some did not arrive, 2 for a wrong layout\n"
                   "  --timeout S    how long to wait for the others (default 60)\n";
      return 0;
    }
    if (a == "--rendezvous") {
      rendezvous = true;
    } else if (a == "--timeout" && i + 1 < args.size()) {
      const std::string& v = args[++i];
      long n = 0;
      const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || end != v.data() + v.size() || n <= 0) throw InputError(fmt::format("trlx env --timeout {}: expected a positive number of seconds", args[i]));
      timeout_s = n;
    } else {
      throw InputError(fmt::format("trlx env: unknown argument `{}` (it takes --rendezvous and --timeout SECONDS)", a));
    }
  }
  if (rendezvous) return run_rendezvous_check(dist::detect_launcher(), std::chrono::seconds(timeout_s));
  auto row = [](const std::string& k, const std::string& v) { std::cout << fmt::format("{:<18}{}\n", k, v); };
  row("trlx", version());
  row("LibTorch", TORCH_VERSION);
  const std::string cuda_rt = cuda_runtime_version();
  row("CUDA build", cuda_rt.empty() ? "no (CPU-only LibTorch)" : "yes, runtime " + cuda_rt);
  const bool cuda = torch::cuda::is_available();
  row("CUDA available", cuda ? fmt::format("yes, {} device(s)", torch::cuda::device_count()) : "no (training runs on the CPU)");
  const std::string cudnn = torch_build_detail("CuDNN");
  if (!cudnn.empty()) row("cuDNN", cudnn);
  row("NCCL", cuda_rt.empty() ? "not used (CPU-only LibTorch)" : nccl_version());
  // The attention path and kernel of each case (bf16, grouped heads of 128)
  // on GPU 0 as probed here.
  if (cuda) {
    const auto caps = model::attention_device(torch::Device(torch::kCUDA, 0), torch::kBFloat16);
    row("attention", fmt::format("flash {}, fused masked kernel {}{}", caps.flash ? "yes" : "no",
                                 caps.fused_masked ? "yes" : "no",
                                 caps.fused_masked_grouped ? " (grouped heads as they are)" : ""));
    for (const auto& r : model::attention_table(caps)) row("", fmt::format("{:<31}{:<27}{}", r.name, r.path, r.kernel));
  }
  row("MPI", mpi_version());
  row("optional parts", fmt::format("hub downloads (libcurl) {}, report_to trackio (SQLite) {}",
                                    io::hub::downloads_built() ? "yes" : "no", io::trackio_built() ? "yes" : "no"));
  row("threads", fmt::format("{} intra-op, {} inter-op", at::get_num_threads(), at::get_num_interop_threads()));
  const auto env = dist::detect_launcher();
  row("launcher", dist::launcher_name(env.launcher));
  row("rank", fmt::format("{} of world size {}", env.rank, env.world_size));
  row("local rank", fmt::format("{} of {} on this node", env.local_rank, env.local_world_size));
  row("nodes", fmt::format("{} (this is node {})", env.num_nodes, env.node_rank));
  row("master", env.master_addr.empty()
                    ? std::string("(not set)")
                    : env.master_addr + (env.master_port ? fmt::format(":{}", *env.master_port) : std::string()));
  if (env.torchelastic) row("torchelastic", "agent store available, run id " + env.run_id);
  return 0;
}

}  // namespace trlx::cli
