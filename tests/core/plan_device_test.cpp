// Planning for real devices: arena buffers within a binding limit, hazards on byte ranges,
// verify(Program) and the Program's JSON round trip.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "meganeura/session.h"
#include "plan/plan_internal.h"
#include "plan_util.h"

namespace meganeura {
namespace {

constexpr uint64_t kMiB = 1 << 20;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

// Runs one training step with fixed data and returns the loss and every parameter.
std::map<std::string, std::vector<float>> one_step(Program p) {
  Session s(SessionOptions{.device = Device::cpu, .seed = 3});
  s.add(std::move(p));
  std::vector<int32_t> ids(4 * 64), targets(4 * 64);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = int32_t((i * 7) % 48);
    targets[i] = int32_t((i * 5 + 1) % 48);
  }
  s.set("ids", std::span<const int32_t>(ids));
  s.set("targets", std::span<const int32_t>(targets));
  s.run();
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, b] : s.buffers()) {
    if (b.role == Role::parameter || b.role == Role::output) out[name] = s.get(name);
  }
  return out;
}

TEST(PlanDevice, OneMiBBindingLimitPlacesATrainingStep) {
  PlanOptions o;
  o.limits.max_binding_bytes = kMiB;
  Graph g = transformer_step(2);
  Program limited = plan(g, o);
  Program free = plan(g);
  std::printf("1 MiB bindings: %zu arena buffers, %llu bytes (unlimited: %llu in one)\n", limited.arena_buffers.size(),
              static_cast<unsigned long long>(limited.arena_bytes), static_cast<unsigned long long>(free.arena_bytes));
  ASSERT_GT(free.arena_bytes, 2 * kMiB);  // otherwise the limit tests nothing
  EXPECT_GE(limited.arena_buffers.size(), 3u);
  for (uint64_t b : limited.arena_buffers) EXPECT_LE(b, kMiB);
  for (const ProgramTensor& t : limited.tensors) {
    if (t.external()) continue;
    ASSERT_LT(t.buffer, limited.arena_buffers.size());
    EXPECT_LE(t.offset + t.bytes, limited.arena_buffers[t.buffer]);
    EXPECT_EQ(t.offset % o.limits.offset_alignment, 0u);
  }
  EXPECT_NO_THROW(verify(limited));
  // The CPU backend binds (buffer, offset): both layouts compute the same step, bit for bit.
  EXPECT_EQ(one_step(limited), one_step(free));
}

TEST(PlanDevice, TensorAboveTheLimitIsAnErrorNamingIt) {
  Graph g;
  Tensor x = g.input("x", {64, 64});
  g.output("y", sum(matmul(x, x) * 2.0));  // the matmul output: 16384 bytes
  PlanOptions o;
  o.limits.max_binding_bytes = 16384;
  o.limits.max_allocation_bytes = 1 << 30;
  EXPECT_NO_THROW(plan(g, o));
  o.limits.max_binding_bytes = 8192;
  // The input itself is 16384 bytes too: make it fit by shrinking what the limit guards.
  Graph h;
  Tensor a = h.input("a", {32, 32});                                // 4096 bytes
  Tensor big = broadcast_to(reshape(a, {1, 32, 32}), {4, 32, 32});  // 16384 bytes
  h.output("s", sum(big * 2.0));
  std::string e = error_of([&] { plan(h, o); });
  EXPECT_NE(e.find("[plan] tensor t"), std::string::npos) << e;
  EXPECT_NE(e.find("(4,32,32)"), std::string::npos) << e;
  EXPECT_NE(e.find("broadcast_to"), std::string::npos) << e;
  EXPECT_NE(e.find("16384 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("limit (max storage buffer range) of 8192 bytes"), std::string::npos) << e;
  // An external buffer above the limit is named too.
  Graph k;
  k.output("total", sum(k.input("x", {64, 64})));
  e = error_of([&] { plan(k, o); });
  EXPECT_NE(e.find("buffer 'x' is 16384 bytes"), std::string::npos) << e;
}

// Reachability through waits, computed here independently of the planner.
std::vector<std::set<uint32_t>> closure(const Program& p) {
  std::vector<std::set<uint32_t>> reach(p.dispatches.size());
  for (size_t j = 0; j < p.dispatches.size(); ++j) {
    for (const Hazard& h : p.dispatches[j].waits) {
      reach[j].insert(h.dispatch);
      reach[j].insert(reach[h.dispatch].begin(), reach[h.dispatch].end());
    }
  }
  return reach;
}

TEST(PlanDevice, HazardsAreMinimalAndBarriersShared) {
  for (bool grouped : {false, true}) {
    PlanOptions o;
    o.group_barriers = grouped;
    Program p = plan(transformer_step(2), o);
    auto reach = closure(p);
    size_t war = 0, waw = 0;
    for (size_t j = 0; j < p.dispatches.size(); ++j) {
      const auto& w = p.dispatches[j].waits;
      for (size_t a = 0; a < w.size(); ++a) {
        war += w[a].kind == HazardKind::war;
        waw += w[a].kind == HazardKind::waw;
        for (size_t b = 0; b < w.size(); ++b) {
          if (a == b) continue;
          EXPECT_FALSE(reach[w[b].dispatch].count(w[a].dispatch))
              << "#" << j << " waits for #" << w[a].dispatch << " twice";
        }
      }
    }
    const double per = double(p.barrier_count()) / double(p.dispatches.size());
    std::printf("%s: %zu dispatches, %zu barriers (%.2f per dispatch), %zu war and %zu waw waits, arena %llu\n",
                grouped ? "grouped" : "node order", p.dispatches.size(), p.barrier_count(), per, war, waw,
                static_cast<unsigned long long>(p.arena_bytes));
    EXPECT_GT(war, 0u);  // the optimizer overwrites parameters the forward pass read
    if (grouped) {
      EXPECT_LE(per, 0.6);
    }
  }
}

// A hand-made program: dispatch 1 reads t1, dispatch 2 writes t2 over the same bytes.
Program reuse_program() {
  Program p;
  auto tensor = [&](Role role, std::string binding, uint64_t offset) {
    ProgramTensor t{TensorType{DType::f32, {64}}, DType::f32, role, std::move(binding), 0, offset, 256, 0, -1};
    p.tensors.push_back(t);
    return uint32_t(p.tensors.size() - 1);
  };
  uint32_t x = tensor(Role::input, "x", 0), y = tensor(Role::output, "y", 0), z = tensor(Role::output, "z", 0);
  uint32_t t1 = tensor(Role::temp, "", 0), t2 = tensor(Role::temp, "", 0);
  p.externals = {ExternalBuffer{"x", Role::input, {DType::f32, {64}}, DType::f32, {}, {}},
                 ExternalBuffer{"y", Role::output, {DType::f32, {64}}, DType::f32, {}, {}},
                 ExternalBuffer{"z", Role::output, {DType::f32, {64}}, DType::f32, {}, {}}};
  p.arena_buffers = {256};
  p.arena_bytes = 256;
  p.dispatches = {Dispatch{Op::exp, NoAttrs{}, {x}, {t1}, 0, 0, {}, false},
                  Dispatch{Op::neg, NoAttrs{}, {t1}, {y}, 0, 0, {}, false},
                  Dispatch{Op::exp, NoAttrs{}, {x}, {t2}, 0, 0, {}, false},
                  Dispatch{Op::neg, NoAttrs{}, {t2}, {z}, 0, 0, {}, false}};
  return p;
}

TEST(PlanDevice, ReuseOfBytesIsAHazardBetweenDifferentTensors) {
  Program p = reuse_program();
  planning::compute_hazards(p);
  EXPECT_EQ(p.dispatches[1].waits, (std::vector<Hazard>{{0, HazardKind::raw}}));
  // t2 overwrites the bytes t1 had: after its reader (war), and the write it replaces is
  // already ordered through that reader.
  EXPECT_EQ(p.dispatches[2].waits, (std::vector<Hazard>{{1, HazardKind::war}}));
  EXPECT_EQ(p.dispatches[3].waits, (std::vector<Hazard>{{2, HazardKind::raw}}));
  EXPECT_EQ(p.barrier_count(), 3u);
  EXPECT_NO_THROW(verify(p));
  // Without the war wait, verify sees the unordered overwrite.
  Program q = p;
  q.dispatches[2].waits.clear();
  std::string e = error_of([&] { verify(q); });
  EXPECT_NE(e.find("[verify] dispatch #2 (exp) writes t4"), std::string::npos) << e;
  EXPECT_NE(e.find("without waiting"), std::string::npos) << e;
  // A wait with no barrier in between is caught too.
  Program r = p;
  r.dispatches[2].barrier = false;
  e = error_of([&] { verify(r); });
  EXPECT_NE(e.find("no barrier"), std::string::npos) << e;
}

TEST(PlanDevice, VerifyCatchesBrokenMemory) {
  Program p = reuse_program();
  planning::compute_hazards(p);
  // Reading t1 after t2 overwrote its bytes.
  Program a = p;
  std::swap(a.dispatches[1], a.dispatches[2]);
  planning::compute_hazards(a);
  std::string e = error_of([&] { verify(a); });
  EXPECT_NE(e.find("reads t3"), std::string::npos) << e;
  EXPECT_NE(e.find("overwritten by t4"), std::string::npos) << e;
  // Read before any write.
  Program b = p;
  b.dispatches.erase(b.dispatches.begin());
  planning::compute_hazards(b);
  e = error_of([&] { verify(b); });
  EXPECT_NE(e.find("reads t3"), std::string::npos) << e;
  EXPECT_NE(e.find("before it is written"), std::string::npos) << e;
  // Misaligned, out of the buffer, over the binding limit.
  Program c = p;
  c.tensors[3].offset = 4;
  EXPECT_NE(error_of([&] { verify(c); }).find("not a multiple of 256"), std::string::npos);
  c = p;
  c.tensors[4].offset = 256;
  EXPECT_NE(error_of([&] { verify(c); }).find("crosses the end of arena buffer 0"), std::string::npos);
  c = p;
  c.limits.max_binding_bytes = 128;
  EXPECT_NE(error_of([&] { verify(c); }).find("above the limit of 128"), std::string::npos);
}

// Secondary outputs: a dispatch writing two tensors (attention's output and log-sum-exp,
// batch norm's statistics) is its writes [0] and [1]; readers of either wait for it.
TEST(PlanDevice, MultiOutputDispatch) {
  Program p;
  auto tensor = [&](Role role, std::string binding, uint64_t offset, Shape s) {
    ProgramTensor t{TensorType{DType::f32, s}, DType::f32, role, std::move(binding), 0, offset,
                    uint64_t(numel(s)) * 4,    0,          -1};
    p.tensors.push_back(t);
    return uint32_t(p.tensors.size() - 1);
  };
  uint32_t x = tensor(Role::input, "x", 0, {8, 16});
  uint32_t out = tensor(Role::temp, "", 0, {8, 16}), stat = tensor(Role::temp, "", 512, {8, 1});
  uint32_t y = tensor(Role::output, "y", 0, {8, 16});
  p.externals = {ExternalBuffer{"x", Role::input, {DType::f32, {8, 16}}, DType::f32, {}, {}},
                 ExternalBuffer{"y", Role::output, {DType::f32, {8, 16}}, DType::f32, {}, {}}};
  p.arena_buffers = {768};
  p.arena_bytes = 768;
  p.dispatches = {Dispatch{Op::softmax, AxisAttrs{1}, {x}, {out, stat}, 0, 0, {}, false},
                  Dispatch{Op::mul, NoAttrs{}, {out, stat}, {y}, 0, 0, {}, false}};
  planning::compute_hazards(p);
  EXPECT_EQ(p.dispatches[1].waits, (std::vector<Hazard>{{0, HazardKind::raw}}));
  EXPECT_NO_THROW(verify(p));
  EXPECT_EQ(Program::from_json(p.to_json()).to_json(), p.to_json());
  // The two outputs of one dispatch may not overlap.
  p.tensors[stat].offset = 256;
  std::string e = error_of([&] { verify(p); });
  EXPECT_NE(e.find("writes t1"), std::string::npos) << e;
  EXPECT_NE(e.find("over each other"), std::string::npos) << e;
}

TEST(PlanDevice, JsonRoundTripIsExact) {
  PlanOptions o;
  o.limits.max_binding_bytes = kMiB;
  Program p = plan(transformer_step(1), o);
  const std::string j = p.to_json();
  Program q = Program::from_json(j);
  EXPECT_EQ(q.to_json(), j);
  EXPECT_EQ(q.hash(), p.hash());
  EXPECT_NO_THROW(verify(q));
  ASSERT_GT(q.dispatches.size(), 10u);
  EXPECT_EQ(q.dispatches[10].waits, p.dispatches[10].waits);
}

TEST(PlanDevice, MalformedJsonNamesTheField) {
  Program p = plan(transformer_step(1));
  auto j = nlohmann::json::parse(p.to_json());
  auto broken = [&](auto edit) {
    auto k = j;
    edit(k);
    return error_of([&] { Program::from_json(k.dump()); });
  };
  std::string e = broken([](auto& k) { k["dispatches"][3].erase("reads"); });
  EXPECT_NE(e.find("[program] from_json: dispatches[3].reads: missing"), std::string::npos) << e;
  e = broken([](auto& k) { k["tensors"][2]["offset"] = "zero"; });
  EXPECT_NE(e.find("tensors[2].offset: expected a non-negative integer"), std::string::npos) << e;
  e = broken([](auto& k) { k["dispatches"][0]["op"] = "frobnicate"; });
  EXPECT_NE(e.find("dispatches[0].op: unknown op 'frobnicate'"), std::string::npos) << e;
  e = broken([](auto& k) { k["dispatches"][5]["waits"] = {{1, "rar"}}; });
  EXPECT_NE(e.find("unknown hazard kind 'rar'"), std::string::npos) << e;
  e = error_of([] { Program::from_json("{\"float_dtype\": "); });
  EXPECT_NE(e.find("[program] from_json: not valid JSON"), std::string::npos) << e;
  // Well-formed JSON of an inconsistent program: verify names the problem, the session refuses it.
  auto k = j;
  k["dispatches"][4]["reads"][0] = 100000;
  Program bad = Program::from_json(k.dump());
  e = error_of([&] { Session().add(bad); });
  EXPECT_NE(e.find("[verify] dispatch #4"), std::string::npos) << e;
}

std::string read_text(const std::string& path) {
  std::ifstream in(std::string(MEGANEURA_SOURCE_DIR) + "/tests/fuzz/" + path);
  EXPECT_TRUE(in) << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
std::string fixture(const std::string& name) { return read_text("regressions/program_json/" + name); }

// The fuzz seeds `meganeura program --json` made: optimised programs with fused, norm and
// softmax dispatches read back, verify and round-trip; their dispatches are exactly the tool's.
TEST(PlanDevice, PlannedModelProgramsReadBackFromJson) {
  for (const char* name : {"mlp_train", "mlp_inference", "chargpt_train", "chargpt_inference"}) {
    const std::string text = read_text(std::string("corpus/program_json/") + name);
    Program p = Program::from_json(text);
    EXPECT_NO_THROW(verify(p)) << name;
    EXPECT_EQ(Program::from_json(p.to_json()).to_json(), p.to_json()) << name;
    EXPECT_EQ(nlohmann::json::parse(p.to_json())["dispatches"], nlohmann::json::parse(text)["dispatches"]) << name;
    size_t fused = 0;
    for (const Dispatch& d : p.dispatches) fused += std::holds_alternative<FusedAttrs>(d.attrs);
    EXPECT_GT(fused, 0u) << name;
  }
}

TEST(PlanDevice, NonFiniteAttributesRoundTrip) {
  Program p = Program::from_json(read_text("corpus/program_json/view_chain"));
  const auto* a = std::get_if<AffineAttrs>(&p.dispatches[0].attrs);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(std::isinf(a->scale) && a->scale > 0);
  EXPECT_TRUE(std::isnan(a->shift));
  Program q = Program::from_json(p.to_json());
  const auto* b = std::get_if<AffineAttrs>(&q.dispatches[0].attrs);
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(std::isinf(b->scale) && b->scale > 0);
  EXPECT_TRUE(std::isnan(b->shift));
}

// Hostile programs (the fuzz target's reproducers): a named error, never undefined behaviour.
TEST(PlanDevice, ShapesWhoseSizeOverflowsAreRefused) {
  std::string e = error_of([] { Program::from_json(fixture("shape-element-count-overflows")); });
  EXPECT_NE(e.find("[program] from_json: tensors[2].shape: more than kMaxProgramTensorElements"), std::string::npos)
      << e;
  e = error_of([] { Program::from_json(fixture("negative-dimension")); });
  EXPECT_NE(e.find("[program] from_json: externals[0].shape: negative dimension -4"), std::string::npos) << e;
  // 214E7483648: a number no double holds (the JSON parser's out_of_range, not a parse error)
  e = error_of([] { Program::from_json(fixture("number-too-large-for-a-double")); });
  EXPECT_NE(e.find("[program] from_json: not valid JSON"), std::string::npos) << e;
  EXPECT_NE(e.find("number overflow parsing '214E7483648'"), std::string::npos) << e;
}

TEST(PlanDevice, VerifyFollowsViewChainsOnlyWithinTheTable) {
  Program p = Program::from_json(fixture("view-of-a-view-out-of-range"));
  ASSERT_EQ(p.tensors.size(), 5u);
  std::string e = error_of([&] { verify(p); });
  EXPECT_NE(e.find("[verify] tensor t4: view of t9, which does not exist"), std::string::npos) << e;
}

}  // namespace
}  // namespace meganeura
