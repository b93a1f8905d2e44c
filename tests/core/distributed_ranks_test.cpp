// The data-parallel library across two ranks: run under `mpirun -np 2` (ctest does), each rank
// runs every test; the collectives inside keep them in step. Started alone it skips, saying so.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "meganeura/distributed.h"
#include "meganeura/models.h"
#include "meganeura/train.h"

namespace meganeura {
namespace {

Communicator* comm = nullptr;  // one per process (MPI is initialised once), made by main()

#define NEED_TWO_RANKS()                                                                                             \
  if (comm->size() != 2)                                                                                             \
  GTEST_SKIP() << "needs two ranks: run under mpirun -np 2 (this is rank " << comm->rank() << " of " << comm->size() \
               << ")"

models::MlpConfig mlp_config(int64_t hidden) { return models::MlpConfig{8, hidden, 3, 1}; }

// The loss over a batch of `rows` examples.
LossFn mlp_loss(int64_t rows, int64_t hidden = 16) {
  return [rows, hidden](Graph& g) {
    const models::MlpConfig c = mlp_config(hidden);
    return cross_entropy(models::mlp(g, g.input("x", {rows, c.inputs}), c), g.input("y", {rows}, DType::i32));
  };
}

// Rows [first, first + rows) of step `step`'s global batch.
void feed(Session& s, int step, int64_t first, int64_t rows) {
  const auto data = models::synthetic_classification(mlp_config(16), 64, uint64_t(step));
  const int64_t in = mlp_config(16).inputs;
  s.set("x", std::span<const float>(data.x.data() + first * in, size_t(rows * in)));
  s.set("y", std::span<const int32_t>(data.y.data() + first, size_t(rows)));
}

OptimizerConfig adam() {
  OptimizerConfig o;
  o.kind = OptimizerConfig::Kind::adam;
  o.lr = 1e-2;
  return o;
}

TEST(Ranks, SumsAndBroadcastsAreExact) {
  NEED_TWO_RANKS();
  std::vector<float> v = {float(comm->rank() + 1), 0.5f, -float(comm->rank())};
  comm->wait(comm->start_sum(v.data(), v.size(), DType::f32, "a test sum"));
  EXPECT_EQ(v, (std::vector<float>{3.0f, 1.0f, -1.0f}));
  std::vector<double> d(5, double(comm->rank() * 7 + 1));
  comm->wait(comm->start_broadcast(d.data(), d.size() * sizeof(double), 1, "a test broadcast"));
  EXPECT_EQ(d, std::vector<double>(5, 8.0));
  EXPECT_EQ(comm->all_gather(uint64_t(10 + comm->rank()), "a test gather"), (std::vector<uint64_t>{10, 11}));
}

// Differently seeded ranks hold different parameters, which the replica check names; after
// the broadcast every rank holds rank 0's, bit for bit.
TEST(Ranks, BroadcastGivesEveryRankRankZerosParameters) {
  NEED_TWO_RANKS();
  Trainer t(mlp_loss(32), adam(), SessionOptions{.device = Device::cpu, .seed = uint64_t(1 + comm->rank())},
            DataParallelOptions{.comm = comm});
  try {
    check_replicas(t.session(), *comm, "before the broadcast");
    ADD_FAILURE() << "differently seeded ranks passed the replica check";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("the parameters of rank(s) 1 differ from rank 0's before the broadcast"),
              std::string::npos)
        << e.what();
  }
  broadcast_parameters(t.session(), *comm);
  check_replicas(t.session(), *comm, "after the broadcast");
  Session seeded_like_rank0(SessionOptions{.device = Device::cpu, .seed = 1});
  seeded_like_rank0.add(training_graph(mlp_loss(32), adam()));
  for (const auto& [name, b] : t.session().buffers()) {
    if (b.role != Role::parameter) continue;
    EXPECT_EQ(t.session().read_raw(name), seeded_like_rank0.read_raw(name)) << name;
  }
}

// Data-parallel steps keep every rank bit-identical (checked after every update); a rank whose
// parameters change behind the trainer's back is named by the check on every rank.
TEST(Ranks, ReplicasStayBitIdenticalAndADifferingRankIsNamed) {
  NEED_TWO_RANKS();
  Trainer t(mlp_loss(32), adam(), SessionOptions{.device = Device::cpu, .seed = 1},
            DataParallelOptions{.comm = comm, .bucket_mb = 0.001, .check_replicas_every = 1});
  broadcast_parameters(t.session(), *comm);
  for (int step = 0; step < 5; ++step) {
    feed(t.session(), step, 32 * comm->rank(), 32);
    t.step();
  }
  EXPECT_EQ(t.comm_profile().updates, 5);
  if (comm->rank() == 1) {
    std::vector<float> w = t.session().get("mlp.0.weight");
    w[3] = std::nextafter(w[3], 1.0f);  // one ulp of one weight
    t.session().set("mlp.0.weight", std::span<const float>(w));
  }
  try {
    check_replicas(t.session(), *comm, "after the change");
    ADD_FAILURE() << "a one-ulp difference passed the replica check";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(comm->rank()) +
                                         " of 2: the parameters of rank(s) 1 differ from rank 0's"),
              std::string::npos)
        << e.what();
  }
}

// In f64 the split of the batch's sums no longer shows: two ranks of 32 examples equal one
// process of 64 to rounding (relative 1e-12 after 5 Adam steps), which checks the averaging
// itself (the sum over ranks divided by their count).
TEST(Ranks, InDoubleTwoRanksEqualOneProcessOfTwiceTheBatch) {
  NEED_TWO_RANKS();
  const SessionOptions f64{.device = Device::cpu, .f64_oracle = true, .seed = 1};
  Trainer two(mlp_loss(32), adam(), f64, DataParallelOptions{.comm = comm, .bucket_mb = 0.001});
  Trainer one(mlp_loss(64), adam(), f64);
  broadcast_parameters(two.session(), *comm);
  for (int step = 0; step < 5; ++step) {
    feed(two.session(), step, 32 * comm->rank(), 32);
    feed(one.session(), step, 0, 64);
    EXPECT_NEAR(two.step(), one.step(), 1e-6) << "step " << step;  // the losses, stored in f32
  }
  for (NodeId id : one.graph().parameters()) {
    const std::string& name = one.graph().node(id).name;
    const auto a = two.session().get_f64(name), b = one.session().get_f64(name);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12 * std::max(1.0, std::abs(b[i]))) << name;
  }
}

// Ranks that build different models stop at the start, every rank naming the one that differs.
TEST(Ranks, DifferentGraphsAreRefusedOnEveryRank) {
  NEED_TWO_RANKS();
  try {
    Trainer t(mlp_loss(32, 16 + 16 * comm->rank()), adam(), SessionOptions{}, DataParallelOptions{.comm = comm});
    ADD_FAILURE() << "ranks with different models started training";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 1 built a different training graph than rank 0"), std::string::npos)
        << e.what();
  }
  // Different run options (here the bucket size) are refused the same way.
  try {
    Trainer t(mlp_loss(32), adam(), SessionOptions{},
              DataParallelOptions{.comm = comm, .bucket_mb = 1.0 + comm->rank()});
    ADD_FAILURE() << "ranks with different bucket sizes started training";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank(s) 1 run with different options than rank 0"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace meganeura

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // Short deadlines: a test that fails on one rank only must not keep the other waiting long.
  auto c = meganeura::make_mpi_communicator(meganeura::CommOptions{.timeout_s = 30, .roll_call_s = 2});
  meganeura::comm = c.get();
  const int failed = RUN_ALL_TESTS();
  // Every rank's verdict: a test that failed on one rank fails the job.
  const auto all = c->all_gather(uint64_t(failed != 0), "the verdicts");
  int any = 0;
  for (uint64_t f : all) any |= int(f);
  return any;
}
