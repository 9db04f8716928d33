// Communicators. Cases tagged [mpi] run under mpirun with 2 and 3 ranks (see
// CMakeLists.txt); [single] ones in one plain process. The hidden cases
// ([.crash], [.kill], [.hang]) make one rank fail on purpose; a script checks
// that the whole job then ends non-zero, quickly, naming rank and operation.
#include "catch_torch.hpp"

#include <signal.h>
#include <unistd.h>

#include <thread>

#include "dist/comm/communicator.hpp"
#include "dist/comm/make_communicator.hpp"
#include "dist/comm/rendezvous_check.hpp"
#include "dist/env/launcher_env.hpp"
#include "dist/strategy/mesh.hpp"
#include "mpi_world.hpp"

using namespace trlx;
using namespace trlx::dist;
using trlx::dist::test::mpi_comm;

namespace {

const std::vector<torch::ScalarType> kDtypes = {torch::kFloat, torch::kBFloat16, torch::kHalf, torch::kLong};

bool same_values(const torch::Tensor& a, const torch::Tensor& b) { return a.to(torch::kDouble).equal(b.to(torch::kDouble)); }

}  // namespace

TEST_CASE("all_reduce: sum, avg and max for every dtype", "[mpi]") {
  Communicator& c = mpi_comm();
  const int w = c.world_size(), r = c.rank();
  REQUIRE(w >= 2);
  for (auto dt : kDtypes) {
    INFO(c10::toString(dt));
    // Rank r holds r + 1 (and 2r + 1 in the second half, to see positions kept).
    auto make = [&] {
      auto t = torch::full({6}, r + 1, torch::TensorOptions().dtype(dt));
      t.narrow(0, 3, 3).fill_(2 * r + 1);
      return t;
    };
    auto t = make();
    c.all_reduce(t, ReduceOp::Sum)->wait();
    CHECK(t[0].item<double>() == w * (w + 1) / 2);
    CHECK(t[5].item<double>() == w * w);
    t = make();
    c.all_reduce(t, ReduceOp::Avg)->wait();
    if (dt == torch::kLong) CHECK(t[0].item<double>() == (w + 1) / 2);  // rounds down
    else CHECK(t[0].item<double>() == Approx((w + 1) / 2.0));
    CHECK(t[5].item<double>() == w);
    t = make();
    c.all_reduce(t, ReduceOp::Max)->wait();
    CHECK(t[0].item<double>() == w);
    CHECK(t[5].item<double>() == 2 * w - 1);
    CHECK(t.scalar_type() == dt);
  }
}

TEST_CASE("all_reduce of bfloat16 rounds like a float32 sum, identically on every rank", "[mpi]") {
  Communicator& c = mpi_comm();
  auto t = torch::full({1000}, 1.0 / 3.0 + c.rank() * 1e-3, torch::kFloat).to(torch::kBFloat16);
  auto ref = t.clone();
  c.all_reduce(t, ReduceOp::Sum)->wait();
  // Every rank's sum close to w/3, and the same bits everywhere.
  CHECK(t.to(torch::kFloat).sub(c.world_size() / 3.0).abs().max().item<float>() < 0.02);
  auto first = t.clone();
  c.broadcast(first, 0)->wait();
  CHECK(first.equal(t));
}

TEST_CASE("all_gather: even and uneven shards", "[mpi]") {
  Communicator& c = mpi_comm();
  const int w = c.world_size(), r = c.rank();
  for (auto dt : kDtypes) {
    for (int64_t total : {int64_t(4 * w), int64_t(4 * w + 1), int64_t(4 * w + w - 1)}) {
      INFO(c10::toString(dt) << " total " << total);
      const Shard s = shard_of(total, w, r);
      auto in = torch::arange(s.offset, s.offset + s.numel, torch::TensorOptions().dtype(dt));
      auto out = torch::full({total}, -1, torch::TensorOptions().dtype(dt));
      c.all_gather(in, out)->wait();
      CHECK(same_values(out, torch::arange(total)));
    }
  }
}

TEST_CASE("all_to_all: chunk j goes to rank j, for every dtype", "[mpi]") {
  Communicator& c = mpi_comm();
  const int w = c.world_size(), r = c.rank();
  for (auto dt : kDtypes) {
    INFO(c10::toString(dt));
    // Rank r sends 100 * r + j (3 values) to rank j.
    auto in = torch::empty({w, 3}, torch::TensorOptions().dtype(dt));
    for (int j = 0; j < w; ++j) in[j].fill_(100 * r + j);
    auto out = torch::full({w, 3}, -1, torch::TensorOptions().dtype(dt));
    c.all_to_all(in, out)->wait();
    for (int i = 0; i < w; ++i) CHECK(same_values(out[i], torch::full({3}, 100 * i + r)));
  }
  auto odd = torch::zeros({w * 2 + 1});
  auto odd_out = torch::zeros({w * 2 + 1});
  CHECK_THROWS_WITH(c.all_to_all(odd, odd_out), Catch::Contains("a multiple of the"));
}

TEST_CASE("split: mesh dimensions whose collectives match only among their ranks", "[mpi]") {
  Communicator& c = mpi_comm();
  const int w = c.world_size(), r = c.rank();
  // Even and odd ranks, ranked in reverse: rank order follows the key.
  auto part = c.split(r % 2, -r);
  const int size = (w - r % 2 + 1) / 2;
  REQUIRE(part->world_size() == size);
  int below = 0;  // members with a larger world rank come first
  for (int q = r % 2; q < w; q += 2)
    if (q > r) ++below;
  CHECK(part->rank() == below);
  auto t = torch::full({2}, static_cast<double>(r), torch::kDouble);
  part->all_reduce(t)->wait();
  double expect = 0;
  for (int q = r % 2; q < w; q += 2) expect += q;
  CHECK(t[0].item<double>() == expect);
  // The parent still works, and a part of a part too.
  auto all = torch::ones({1});
  c.all_reduce(all)->wait();
  CHECK(all.item<float>() == static_cast<float>(w));
  auto alone = part->split(part->rank(), 0);
  CHECK(alone->world_size() == 1);
  auto one = torch::full({1}, 7.0);
  alone->all_reduce(one)->wait();
  CHECK(one.item<float>() == 7.0f);
}

TEST_CASE("reduce_scatter: sum, avg, max, sizes not divisible by the world size", "[mpi]") {
  Communicator& c = mpi_comm();
  const int w = c.world_size(), r = c.rank();
  for (auto dt : kDtypes) {
    for (int64_t total : {int64_t(3 * w), int64_t(7), int64_t(3 * w + 1)}) {
      INFO(c10::toString(dt) << " total " << total);
      const Shard s = shard_of(total, w, r);
      auto in = (torch::arange(total) * (r + 1)).to(dt);
      auto base = torch::arange(s.offset, s.offset + s.numel).to(torch::kDouble);
      auto out = torch::empty({s.numel}, torch::TensorOptions().dtype(dt));
      c.reduce_scatter(in, out, ReduceOp::Sum)->wait();
      CHECK(same_values(out, base * (w * (w + 1) / 2)));
      c.reduce_scatter(in, out, ReduceOp::Max)->wait();
      CHECK(same_values(out, base * w));
      if (dt != torch::kLong) {
        c.reduce_scatter(in, out, ReduceOp::Avg)->wait();
        CHECK(torch::allclose(out.to(torch::kDouble), base * ((w + 1) / 2.0), 1e-2));
      }
    }
  }
}

TEST_CASE("a shard of the wrong size is refused before anything is sent", "[mpi]") {
  Communicator& c = mpi_comm();
  auto in = torch::zeros({10});
  auto out = torch::zeros({10});  // should be shard_of(10, w, r).numel
  const int64_t before = c.bytes_communicated();
  CHECK_THROWS_WITH(c.reduce_scatter(in, out), Catch::Contains("passed a shard of 10"));
  CHECK(c.bytes_communicated() == before);
  auto gpu_like = torch::zeros({2, 3}).t();  // not contiguous
  CHECK_THROWS_WITH(c.all_reduce(gpu_like), Catch::Contains("contiguous"));
}

TEST_CASE("broadcast from a non-zero root", "[mpi]") {
  Communicator& c = mpi_comm();
  const int root = c.world_size() - 1;
  for (auto dt : kDtypes) {
    auto t = torch::full({5}, c.rank() * 10 + 1, torch::TensorOptions().dtype(dt));
    c.broadcast(t, root)->wait();
    CHECK(t[4].item<double>() == root * 10 + 1);
  }
  auto t = torch::zeros({1});
  CHECK_THROWS_WITH(c.broadcast(t, c.world_size()), Catch::Contains("root"));
}

TEST_CASE("barrier: nobody leaves before the last rank arrives", "[mpi]") {
  Communicator& c = mpi_comm();
  auto start = std::chrono::steady_clock::now();
  if (c.rank() == c.world_size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  c.barrier();
  auto waited = std::chrono::steady_clock::now() - start;
  CHECK(waited >= std::chrono::milliseconds(250));
}

TEST_CASE("asynchronous operations complete whatever order they are waited in", "[mpi]") {
  Communicator& c = mpi_comm();
  const int w = c.world_size();
  std::vector<torch::Tensor> ts;
  std::vector<WorkPtr> works;
  for (int i = 0; i < 4; ++i) {
    ts.push_back(torch::full({1000 * (i + 1)}, i + c.rank(), torch::kFloat));
    works.push_back(c.all_reduce(ts.back(), i % 2 ? ReduceOp::Max : ReduceOp::Sum));
  }
  auto b = torch::full({3}, c.rank(), torch::kLong);
  auto bw = c.broadcast(b, 1);
  for (int i = 3; i >= 0; --i) works[i]->wait();
  bw->wait();
  works[0]->wait();  // a second wait is a no-op
  for (int i = 0; i < 4; ++i) {
    const double want = i % 2 ? i + w - 1 : i * w + w * (w - 1) / 2.0;
    CHECK(ts[i].min().item<double>() == want);
    CHECK(ts[i].max().item<double>() == want);
  }
  CHECK(b.sum().item<int64_t>() == 3);
}

TEST_CASE("bytes_communicated counts the input of every operation", "[mpi]") {
  Communicator& c = mpi_comm();
  const int64_t before = c.bytes_communicated();
  auto t = torch::zeros({100}, torch::kFloat);
  c.all_reduce(t)->wait();
  auto h = torch::zeros({50}, torch::kBFloat16);
  c.broadcast(h, 0)->wait();
  auto out = torch::zeros({10 * c.world_size()});
  c.all_gather(torch::zeros({10}), out)->wait();
  c.barrier();
  CHECK(c.bytes_communicated() - before == 400 + 100 + 40);
}

TEST_CASE("the factory gives MPI ranks of a CPU run the MPI communicator", "[mpi]") {
  Communicator& c = mpi_comm();
  const LauncherEnv env = detect_launcher();
  CHECK(c.backend() == "mpi");
  CHECK(c.world_size() == env.world_size);
  CHECK(c.rank() == env.rank);
  // A second communicator works beside the first.
  auto other = make_mpi_communicator(std::chrono::seconds(20));
  auto t = torch::ones({3});
  other->all_reduce(t)->wait();
  CHECK(t[0].item<float>() == env.world_size);
}

// ---- one process ---------------------------------------------------------

TEST_CASE("single communicator: every collective is the identity", "[single]") {
  auto c = make_single_communicator();
  CHECK(c->backend() == "single");
  CHECK(c->world_size() == 1);
  CHECK(c->rank() == 0);
  auto t = torch::tensor({1.5f, 2.5f});
  c->all_reduce(t, ReduceOp::Avg)->wait();
  CHECK(t[1].item<float>() == 2.5f);
  auto out = torch::zeros({2});
  c->all_gather(t, out)->wait();
  CHECK(out.equal(t));
  auto rs = torch::zeros({2});
  c->reduce_scatter(t, rs, ReduceOp::Sum)->wait();
  CHECK(rs.equal(t));
  c->broadcast(t, 0)->wait();
  c->barrier();
  CHECK(c->bytes_communicated() == 4 * 8);
  CHECK_THROWS_WITH(c->broadcast(t, 1), Catch::Contains("root 1"));
}

TEST_CASE("every communicator refuses a tensor off its device, by type and index", "[single]") {
  // A single-GPU run's communicator: a host tensor is refused as NCCL would.
  auto gpu = make_single_communicator(torch::Device(torch::kCUDA, 1));
  CHECK(gpu->device() == torch::Device(torch::kCUDA, 1));
  auto host = torch::ones({2});
  auto out = torch::zeros({2});
  CHECK_THROWS_WITH(gpu->all_reduce(host, ReduceOp::Sum), Catch::Contains("on cpu") && Catch::Contains("cuda:1"));
  CHECK_THROWS_WITH(gpu->all_gather(host, out), Catch::Contains("all_gather"));
  CHECK_THROWS_WITH(gpu->broadcast(host, 0), Catch::Contains("broadcast"));
  CHECK(make_single_communicator()->device() == torch::Device(torch::kCPU));
}

TEST_CASE("factory: world 1 is single, and CPU ranks from torchrun are told to use mpirun", "[single]") {
  LauncherEnv one;
  CHECK(make_communicator(one, torch::kCPU, std::chrono::seconds(5))->backend() == "single");
  CHECK(make_communicator(one, torch::Device(torch::kCUDA, 0), std::chrono::seconds(5))->backend() == "single");

  const LauncherEnv torchrun = detect_launcher(map_lookup(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1234"}}));
  try {
    make_communicator(torchrun, torch::kCPU, std::chrono::seconds(5));
    FAIL("expected an error");
  } catch (const InputError& e) {
    if (mpi_available())
      CHECK_THAT(e.what(), Catch::Contains("torchrun") && Catch::Contains("mpirun -np 2") &&
                               Catch::Contains("trlx launch --nproc_per_node 2"));
    else  // a build without MPI (a GPU machine's) says that instead
      CHECK_THAT(e.what(), Catch::Contains("built without it") && Catch::Contains("libopenmpi-dev"));
  }
  if (!nccl_available()) {
    CHECK_THROWS_WITH(make_communicator(torchrun, torch::Device(torch::kCUDA, 0), std::chrono::seconds(5)),
                      Catch::Contains("NCCL"));
  }
}

TEST_CASE("rendezvous: MASTER_ADDR, torchrun's agent store, MPI, none", "[single]") {
  auto env_of = [](std::map<std::string, std::string> m) { return detect_launcher(map_lookup(m)); };
  const auto none = map_lookup({});

  Rendezvous rv = rendezvous_for(
      env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "node1"}, {"MASTER_PORT", "2345"}}),
      none);
  CHECK(rv.host == "node1");
  CHECK(rv.port == 2345);
  CHECK(rv.is_server);
  CHECK(rv.prefix.empty());

  const std::map<std::string, std::string> elastic = {
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}, {"MASTER_ADDR", "node1"}, {"MASTER_PORT", "2345"},
      {"TORCHELASTIC_RUN_ID", "x"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RESTART_COUNT", "2"}};
  rv = rendezvous_for(env_of(elastic), map_lookup(elastic));
  CHECK_FALSE(rv.is_server);  // torchrun's agent hosts the store
  CHECK(rv.prefix == "/worker/attempt_2");

  rv = rendezvous_for(env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}),
                      none);
  CHECK(rv.share_over_mpi);
  CHECK(rv.rank == 1);
  CHECK(rv.host == "127.0.0.1");  // the launcher says both ranks are on this node
  // Nothing says the ranks share a node: rank 0 offers its host name, never
  // a loopback address another node would dial on itself.
  rv = rendezvous_for(env_of({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}), none);
  CHECK(rv.share_over_mpi);
  CHECK(rv.host != "127.0.0.1");
  CHECK_FALSE(rv.host.empty());

  rv = rendezvous_for(env_of({{"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "2"},
                              {"SLURM_LOCALID", "0"}, {"SLURM_JOB_NODELIST", "gpu[003-004]"}, {"SLURM_JOB_ID", "77"}}),
                      none);
  CHECK(rv.host == "gpu003");
  CHECK(rv.port == 20077);

  LauncherEnv bare;
  bare.world_size = 2;
  bare.launcher = Launcher::Torchrun;
  CHECK_THROWS_WITH(rendezvous_for(bare, none), Catch::Contains("MASTER_ADDR"));
}

TEST_CASE("shards: the first total % world ranks hold one element more", "[single]") {
  CHECK(shard_of(7, 3, 0).offset == 0);
  CHECK(shard_of(7, 3, 0).numel == 3);
  CHECK(shard_of(7, 3, 1).offset == 3);
  CHECK(shard_of(7, 3, 1).numel == 2);
  CHECK(shard_of(7, 3, 2).offset == 5);
  CHECK(shard_of(7, 3, 2).numel == 2);
  CHECK(shard_of(2, 3, 2).numel == 0);
  CHECK(shard_of(9, 3, 2).offset == 6);
}

// ---- failures (hidden; run by expect_failure.sh under mpirun) ------------

namespace {

// Some work first, so the failure is mid-run; then rank 1 fails in `how` while
// the others enter all_reduce #4.
void fail_rank1_midrun(const std::function<void()>& how, std::chrono::seconds timeout) {
  auto comm = make_communicator(detect_launcher(), torch::kCPU, timeout);
  for (int i = 0; i < 3; ++i) {
    auto t = torch::ones({1000});
    comm->all_reduce(t)->wait();
  }
  if (comm->rank() == 1) how();
  auto t = torch::ones({1000});
  comm->all_reduce(t)->wait();
  FAIL("all_reduce #4 finished although rank 1 never joined it");
}

}  // namespace

TEST_CASE("rank 1 crashes (abort) mid-run", "[.crash]") {
  fail_rank1_midrun([] { std::abort(); }, std::chrono::seconds(5));
}

TEST_CASE("rank 1 is killed (SIGKILL) mid-run", "[.kill]") {
  fail_rank1_midrun([] { ::kill(::getpid(), SIGKILL); }, std::chrono::seconds(5));
}

TEST_CASE("rank 1 hangs instead of joining a collective", "[.hang]") {
  fail_rank1_midrun([] { std::this_thread::sleep_for(std::chrono::seconds(60)); }, std::chrono::seconds(3));
}

TEST_CASE("rendezvous check: the layouts that cannot be right are named", "[single]") {
  using trlx::dist::RendezvousMember;
  using trlx::dist::rendezvous_problems;
  auto m = [](int rank, int world, int local, int local_world, int node, const char* host) {
    RendezvousMember x;
    x.rank = rank, x.world_size = world, x.local_rank = local, x.local_world_size = local_world;
    x.node_rank = node, x.host = host;
    return x;
  };
  // Two nodes of two ranks each: nothing to say.
  CHECK(rendezvous_problems({m(0, 4, 0, 2, 0, "a"), m(1, 4, 1, 2, 0, "a"), m(2, 4, 0, 2, 1, "b"), m(3, 4, 1, 2, 1, "b")},
                            4)
            .empty());
  auto one = [&](std::vector<RendezvousMember> ms, int world) {
    const auto p = rendezvous_problems(ms, world);
    REQUIRE(p.size() == 1);
    return p.front();
  };
  CHECK_THAT(one({m(0, 2, 0, 2, 0, "a"), m(1, 3, 1, 2, 0, "a")}, 2),
             Catch::Matchers::Contains("rank 1 on a was started with world size 3, rank 0 with 2"));
  CHECK_THAT(one({m(0, 2, 0, 2, 0, "a"), m(1, 2, 0, 2, 0, "a")}, 2),
             Catch::Matchers::Contains("ranks 0 and 1 on a both have local rank 0"));
  CHECK_THAT(one({m(0, 2, 0, 2, 0, "a"), m(1, 2, 0, 1, 1, "b")}, 2),
             Catch::Matchers::Contains("a runs 1 rank(s) but they were told the local world size is 2"));
  CHECK_THAT(one({m(0, 2, 0, 1, 0, "a"), m(1, 2, 0, 1, 0, "b")}, 2),
             Catch::Matchers::Contains("a and b both say they are node 0"));
  CHECK_THAT(one({m(0, 2, 0, 2, 0, "a"), m(1, 2, 1, 2, 1, "a")}, 2),
             Catch::Matchers::Contains("the ranks on a disagree on their node rank"));
  // Node ranks an MPI launcher does not give (-1) are not held against anyone.
  CHECK(rendezvous_problems({m(0, 4, 0, 2, -1, "a"), m(1, 4, 1, 2, -1, "a"), m(2, 4, 0, 2, -1, "b"),
                             m(3, 4, 1, 2, -1, "b")},
                            4)
            .empty());
}

// The device mesh on 4 MPI ranks (CMakeLists.txt runs these with -np 4).
TEST_CASE("mesh: hybrid sharding per node, sequence groups, and sizes that do not fit", "[mesh]") {
  auto world = std::shared_ptr<Communicator>(&mpi_comm(), [](Communicator*) {});
  REQUIRE(world->world_size() == 4);
  const int r = world->rank();
  auto sum_of_ranks = [&](Communicator& c) {
    auto t = torch::full({1}, static_cast<double>(r), torch::kDouble);
    c.all_reduce(t)->wait();
    return t.item<double>();
  };
  config::DistributedConfig fsdp;
  fsdp.strategy = config::Strategy::FSDP;
  fsdp.source = "fsdp.yaml";
  {
    // HYBRID_SHARD with 2 processes per node: shards within {0,1} and
    // {2,3}, replicas across {0,2} and {1,3}.
    config::ParallelismConfig p;
    p.hybrid_per_node = true;
    const Mesh m = make_mesh(world, p, fsdp, /*local_world_size=*/2);
    CHECK(m.dp_replicate == 2);
    CHECK(m.dp_shard == 2);
    CHECK(m.describe() == "dp_replicate 2 x dp_shard 2");
    CHECK(m.data_rank() == r);
    CHECK(m.data_size() == 4);
    CHECK(sum_of_ranks(*m.replica) == (r < 2 ? 1.0 : 5.0));
    CHECK(sum_of_ranks(*m.across_replicas) == (r % 2 == 0 ? 2.0 : 4.0));
    CHECK(m.sequence == nullptr);
  }
  {
    // 2 data ranks x sp 2: neighbours share a sequence, and read one batch.
    config::ParallelismConfig p;
    p.sp_size = 2;
    const Mesh m = make_mesh(world, p, fsdp, 4);
    CHECK(m.dp_shard == 2);
    CHECK(m.data_rank() == r / 2);
    CHECK(m.data_size() == 2);
    CHECK(m.sequence->rank() == r % 2);
    CHECK(sum_of_ranks(*m.sequence) == (r < 2 ? 1.0 : 5.0));
    CHECK(m.replica.get() == world.get());
  }
  {
    config::ParallelismConfig p;
    p.dp_shard_size = 2;
    p.source = "mesh.yaml:3:1";
    CHECK_THROWS_WITH(make_mesh(world, p, fsdp, 4),
                      Catch::Contains("dp_replicate_size 1 x dp_shard_size 2 x cp_size 1 x "
                                                         "sp_size 1 = 2, but 4 processes were started"));
    config::ParallelismConfig rep;
    rep.dp_replicate_size = 4;
    CHECK_THROWS_WITH(make_mesh(world, rep, fsdp, 4), Catch::Contains("raise dp_shard_size"));
    config::DistributedConfig ddp;
    ddp.strategy = config::Strategy::DDP;
    config::ParallelismConfig shard4;
    shard4.dp_shard_size = 4;
    CHECK_THROWS_WITH(make_mesh(world, shard4, ddp, 4),
                      Catch::Contains("DDP keeps it whole on every rank"));
    config::ParallelismConfig odd;
    odd.sp_size = 3;
    CHECK_THROWS_WITH(make_mesh(world, odd, fsdp, 4), Catch::Contains("does not divide the 4"));
  }
}
