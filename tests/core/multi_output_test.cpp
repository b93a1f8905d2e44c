// Multi-output fused programs: a hand-written program against values computed here in double,
// its JSON round trip, verify() on its secondary writes, malformed programs, and the planner
// writing each output into its state in place (or through a temporary and a copy when the
// state's old value is still needed).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "graph/op_table.h"
#include "meganeura/passes.h"
#include "meganeura/session.h"
#include "multi_output_case.h"
#include "plan/plan_internal.h"

namespace meganeura {
namespace {

using namespace multi_output_case;

std::vector<double> values(int64_t n, double phase) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = 1.5 * std::sin(0.61 * double(i) + phase);
  return v;
}

TEST(MultiOutput, HandWrittenProgramMatchesDoubleReference) {
  Built b = three_output_graph(false);
  const auto a = values(15, 0.3), bb = values(5, 1.1), c = values(15, 2.0);
  std::vector<double> y(15), u(15), w(15);
  for (size_t i = 0; i < 15; ++i) {
    u[i] = a[i] * bb[i % 5] + c[i];
    w[i] = std::exp(u[i]) - a[i];
    y[i] = 0.5 * u[i] + w[i];
  }
  for (bool f64 : {true, false}) {
    SessionOptions so;
    so.f64_oracle = f64;
    PlanOptions po;
    po.float_dtype = f64 ? DType::f64 : DType::f32;
    Program p = plan(b.g, po);
    ASSERT_EQ(p.dispatches.size(), 1u);
    ASSERT_EQ(p.dispatches[0].writes.size(), 3u);
    Session s(so);
    s.add(p);
    s.set("a", std::span<const double>(a));
    s.set("b", std::span<const double>(bb));
    s.set("c", std::span<const double>(c));
    s.run();
    // f64: the same operations in the same order, exp to within an ulp: 1e-14 relative. f32:
    // inputs and each of the five roundings (|u| <= 3.75, exp(u) <= 43) cost at most a few
    // ulps of the largest intermediate, so 1e-6 relative to (1 + |value|) is safe and still
    // far below a wrong operand or a swapped output.
    const double tol = f64 ? 1e-14 : 1e-6;
    for (auto [name, want] : {std::pair{"y", &y}, std::pair{"u", &u}, std::pair{"w", &w}}) {
      auto got = s.get_f64(name);
      ASSERT_EQ(got.size(), want->size()) << name;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], (*want)[i], tol * (1 + std::abs((*want)[i]))) << name << "[" << i << "] f64=" << f64;
      }
    }
  }
}

TEST(MultiOutput, JsonRoundTripKeepsEveryOutput) {
  Built b = three_output_graph(true);
  Program p = plan(b.g);
  const std::string j = p.to_json();
  EXPECT_NE(j.find("\"store1\""), std::string::npos);
  EXPECT_NE(j.find("\"load2\""), std::string::npos);
  Program q = Program::from_json(j);
  EXPECT_EQ(q.to_json(), j);
  EXPECT_EQ(q.hash(), p.hash());
  ASSERT_EQ(q.dispatches.size(), p.dispatches.size());
  for (size_t i = 0; i < p.dispatches.size(); ++i) {
    EXPECT_EQ(q.dispatches[i].writes, p.dispatches[i].writes) << i;
    EXPECT_EQ(q.dispatches[i].attrs, p.dispatches[i].attrs) << i;
  }
  EXPECT_NO_THROW(verify(q));
}

TEST(MultiOutput, VerifyCatchesAMissingHazardOnASecondaryOutput) {
  Built b = three_output_graph(true);
  Program p = plan(b.g);
  // the exp reads output 1 of the fused dispatch and nothing else
  size_t fused = p.dispatches.size(), reader = p.dispatches.size();
  for (size_t i = 0; i < p.dispatches.size(); ++i) {
    if (p.dispatches[i].writes.size() == 3) fused = i;
    if (p.dispatches[i].op == Op::exp) reader = i;
  }
  ASSERT_LT(fused, p.dispatches.size());
  ASSERT_LT(reader, p.dispatches.size());
  ASSERT_EQ(p.dispatches[reader].reads, std::vector<uint32_t>{p.dispatches[fused].writes[1]});
  EXPECT_EQ(p.dispatches[reader].waits, (std::vector<Hazard>{{uint32_t(fused), HazardKind::raw}}));
  EXPECT_NO_THROW(verify(p));
  Program broken = p;
  broken.dispatches[reader].waits.clear();
  planning::place_barriers(broken);
  try {
    verify(broken);
    FAIL() << "a read of a secondary output without waiting for its writer passed verify";
  } catch (const std::invalid_argument& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("without waiting"), std::string::npos) << msg;
    EXPECT_NE(msg.find("t" + std::to_string(p.dispatches[fused].writes[1])), std::string::npos) << msg;
  }
  // a fused dispatch whose writes do not match its program's outputs
  Program short_writes = p;
  short_writes.dispatches[fused].writes.pop_back();
  try {
    verify(short_writes);
    FAIL() << "two writes for a program of three outputs passed verify";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("2 writes for a program with 3 outputs"), std::string::npos) << e.what();
  }
}

TEST(MultiOutput, MalformedProgramsAreNamed) {
  auto error = [](std::vector<FusedInstr> code) {
    try {
      fused_outputs(code);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(fused_outputs({in(0), in(1), bin(Op::add)}), 1u);
  EXPECT_EQ(fused_outputs(three_outputs()), 3u);
  EXPECT_NE(error({in(0), store(0), in(0), store(0)}).find("stores output 0 twice"), std::string::npos);
  EXPECT_NE(error({load(1), store(0)}).find("loads output 1 before it is stored"), std::string::npos);
  EXPECT_NE(error({in(0), in(1), store(0)}).find("1 values left on the stack"), std::string::npos);
  EXPECT_NE(error({in(0), store(1)}).find("output 0 is never stored"), std::string::npos);
  EXPECT_NE(error({in(0), store(3)}).find("above kFusedMaxOutputs"), std::string::npos);
  EXPECT_NE(error({store(0)}).find("pops an empty stack"), std::string::npos);
  std::vector<FusedInstr> deep(kFusedMaxStack + 1, in(0));
  for (size_t k = 0; k < kFusedMaxStack; ++k) deep.push_back(bin(Op::add));
  deep.push_back(store(0));
  EXPECT_NE(error(deep).find("above kFusedMaxStack"), std::string::npos);
  // from JSON: the code parses, verify() names the problem
  Built b = three_output_graph(false);
  std::string j = plan(b.g).to_json();
  const std::string from = "\"store2\"", to = "\"store1\"";
  j.replace(j.find(from), from.size(), to);
  try {
    verify(Program::from_json(j));
    FAIL() << "a program storing output 1 twice passed verify";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("stores output 1 twice"), std::string::npos) << e.what();
  }
}

// An update of two states from one elementwise chain: s1' = 0.9 s1 + x, s2' = 0.5 s2 + s1'^2.
// With `keep_old`, a third state takes s1's old value, so s1' cannot overwrite s1 during the
// step: it goes to a temporary and is copied at the end.
Graph two_state_update(bool keep_old) {
  Graph g;
  Tensor x = g.input("x", {8});
  Tensor s1 = g.state("s1", {8}, Init{Init::constant, 0.25});
  Tensor s2 = g.state("s2", {8}, Init{Init::constant, -0.5});
  Tensor a = s1 * 0.9 + x;
  Tensor b = s2 * 0.5 + a * a;
  g.assign(s1, a);
  g.assign(s2, b);
  if (keep_old) g.assign(g.state("s3", {8}), s1);
  g.output("sum", sum(x));  // reads x only: the update is not an output
  return g;
}

TEST(MultiOutput, StatesAreWrittenInPlaceOrThroughACopy) {
  for (bool keep_old : {false, true}) {
    Graph g = two_state_update(keep_old);
    PassStats st;
    PlanOptions po;
    po.float_dtype = DType::f64;  // the f64 oracle: values checked to 1e-13 below
    Program p = plan(optimize(g, {}, &st), po);
    EXPECT_EQ(st.multi_outputs, 1u) << keep_old;
    const Dispatch* multi = nullptr;
    size_t copies = 0;
    for (const Dispatch& d : p.dispatches) {
      if (d.writes.size() == 2) multi = &d;
      copies += d.op == Op::copy;
    }
    ASSERT_NE(multi, nullptr) << keep_old;
    EXPECT_EQ(p.tensors[multi->writes[0]].binding, "s2");
    if (!keep_old) {
      EXPECT_EQ(p.tensors[multi->writes[1]].binding, "s1");
      EXPECT_EQ(copies, 0u);
    } else {
      EXPECT_EQ(p.tensors[multi->writes[1]].role, Role::temp);
      EXPECT_GE(copies, 2u);  // s1's new value, s3 taking s1's old one
    }
    // both ways compute what the unfused graph computes, over three steps (values checked
    // against a double recurrence computed here)
    Session s(SessionOptions{.device = Device::cpu, .f64_oracle = true, .seed = 1});
    s.add(p);
    std::vector<double> x = values(8, 0.7), s1(8, 0.25), s2(8, -0.5), s3(8, 0.0);
    for (int step = 0; step < 3; ++step) {
      s.set("x", std::span<const double>(x));
      s.run();
      for (size_t i = 0; i < 8; ++i) {
        const double a = 0.9 * s1[i] + x[i];
        s3[i] = s1[i];
        s2[i] = 0.5 * s2[i] + a * a;
        s1[i] = a;
      }
      for (auto [name, want] : {std::pair{"s1", &s1}, std::pair{"s2", &s2}}) {
        auto got = s.get_f64(name);
        for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(got[i], (*want)[i], 1e-13 * (1 + std::abs((*want)[i]))) << name << i;
      }
      if (keep_old) {
        auto got = s.get_f64("s3");
        for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(got[i], s3[i], 1e-13 * (1 + std::abs(s3[i]))) << "s3 " << i;
      }
    }
  }
}

}  // namespace
}  // namespace meganeura
