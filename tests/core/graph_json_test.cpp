// Graph::to_json, whose text the graph hash (kept in checkpoints) is taken of, is the text of
// the json document the graph describes: compared here with that document built and dumped by
// the json library, for every workload with its gradients, before and after the rewrite passes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "graph/attr_fields.h"
#include "graph/op_table.h"
#include "meganeura/autodiff.h"
#include "meganeura/optim.h"
#include "meganeura/passes.h"
#include "meganeura/workloads.h"
#include "plan_util.h"

namespace meganeura {
namespace {

using nlohmann::json;

// The graph as a json document: nodes with op, inputs, dtype, shape, attributes, the name when
// there is one, the initialiser of parameters and states, the values of constants.
std::string document(const Graph& g) {
  json nodes = json::array();
  for (NodeId i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    json j = {{"op", op_name(n.op)},
              {"inputs", n.inputs},
              {"dtype", dtype_name(n.type.dtype)},
              {"shape", n.type.shape},
              {"attrs", json::parse(attrs_json(n.attrs))}};
    if (!n.name.empty()) j["name"] = n.name;
    if (n.op == Op::parameter || n.op == Op::state) j["init"] = {int(n.init.kind), n.init.a};
    if (n.op == Op::constant) j["values"] = n.const_data;
    nodes.push_back(std::move(j));
  }
  json outs = json::array();
  for (auto& [name, id] : g.outputs()) outs.push_back({name, id});
  json assigns = json::array();
  for (auto& [dst, src] : g.assignments()) assigns.push_back({dst, src});
  return json{{"nodes", nodes}, {"outputs", outs}, {"assign", assigns}}.dump();
}

TEST(GraphJson, EveryWorkloadWithGradientsBeforeAndAfterThePasses) {
  for (const char* id : {"smollm2", "smolvla", "unet", "resnet50", "whisper"}) {
    Graph g;
    workload_with_gradients(g, id);
    EXPECT_EQ(g.to_json(), document(g)) << id;
    const Graph o = optimize(g, PassOptions{});
    EXPECT_EQ(o.to_json(), document(o)) << id << " after the passes";
  }
}

TEST(GraphJson, OddNamesAndNumbers) {
  Graph g;
  const double inf = std::numeric_limits<double>::infinity();
  Tensor a = g.parameter("quote\"back\\slash\ttab\x01 \xc3\xa9t\xc3\xa9", {3}, Init{Init::normal, 1e-5});
  Tensor s = g.state("s", {3}, Init{Init::constant, -0.1});
  Tensor c = g.constant({std::nan(""), -inf, 1e300, -0.0, 5e-324, 3.0, 0.1}, {7});
  g.assign(s, a * 2.0 + 1.5);
  g.output("x", a + s);
  g.output("c \xe2\x82\xac", sum(c));
  EXPECT_EQ(g.to_json(), document(g));
  Graph e;
  e.output("in", e.input("in", {}));
  EXPECT_EQ(e.to_json(), document(e));
}

TEST(GraphJson, FusedProgramsWithEveryKindOfInstruction) {
  Graph g;
  Tensor x = g.input("x", {4, 8});
  Tensor y = affine(exp(x), 0.1, 3.0) * 2.0 + 0.5;
  Tensor c = clip_coef(sqrt(sum(y * y)), 1.0);
  g.output("y", y * c + x);
  g.output("m", matmul(x, x, false, true));
  const Graph o = optimize(g, PassOptions{});
  size_t fused = 0;
  for (NodeId i = 0; i < o.size(); ++i) fused += std::holds_alternative<FusedAttrs>(o.node(i).attrs);
  ASSERT_GT(fused, 0u) << o.dump();
  const std::string text = o.to_json();
  EXPECT_EQ(text, document(o)) << o.dump();
  // The instructions with operands were fused, so their text was exercised.
  EXPECT_NE(text.find("[\"affine\","), std::string::npos) << text;
  EXPECT_NE(text.find("[\"clip_coef\","), std::string::npos) << text;
}

// An AdamW update fuses into one program per parameter with several outputs (store/load).
TEST(GraphJson, MultiOutputPrograms) {
  Graph g;
  Tensor x = g.input("x", {4, 3});
  Tensor w = g.parameter("w", {3, 2}, Init{Init::normal, 0.5});
  Tensor loss = sum(matmul(x, w) * matmul(x, w));
  g.output("loss", loss);
  OptimizerConfig c;
  c.kind = OptimizerConfig::Kind::adamw;
  c.weight_decay = 0.1;
  append_update(g, {{w, grad(loss, {w})[0]}}, c);
  const Graph o = optimize(g, PassOptions{});
  const std::string text = o.to_json();
  EXPECT_EQ(text, document(o)) << o.dump();
  EXPECT_NE(text.find("\"store1\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"load"), std::string::npos) << text;
}

// Every attribute struct, with each field set away from its default, written by attrs_json and
// read back by parse_attrs (the program reader's), equal and of the same struct: so every
// field of every table is both written and read, and no two structs share a key set (the
// reader would return the other one).
struct NonDefault {
  void operator()(bool& v) const { v = !v; }
  void operator()(int64_t& v) const { v = v * 3 + 7; }
  void operator()(double& v) const { v = v * -0.5 + 0.375; }
  void operator()(DType& v) const { v = v == DType::i32 ? DType::f16 : DType::i32; }
  void operator()(Op& v) const { v = v == Op::max ? Op::mean : Op::max; }
  void operator()(int64_t (&v)[2]) const { v[0] += 2, v[1] += 5; }
  void operator()(std::vector<int64_t>& v) const { v = {3, 0, 5}; }
  void operator()(std::vector<FusedInstr>& code) const {
    code = {{FusedInstr::input, Op::copy, 1},
            {FusedInstr::constant, Op::copy, 0, -2.5},
            {FusedInstr::unary, Op::affine, 0, 2, 0.25},
            {FusedInstr::binary, Op::mul}};
  }
};

TEST(AttrFields, EveryStructRoundTripsWithEveryField) {
  size_t structs = 0, fields = 0;
  attr_fields::for_each_attrs_type([&](auto attrs) {
    using S = decltype(attrs);
    const Attrs before = attrs;
    attr_fields::for_each_field<S>([&](const auto& f) {
      NonDefault{}(f.get(attrs));
      ++fields;
    });
    if constexpr (!std::is_same_v<S, NoAttrs>) {
      EXPECT_NE(Attrs(attrs), before) << "a field the table names is not the struct's: " << attrs_json(attrs);
    }
    const std::string text = attrs_json(attrs);
    EXPECT_EQ(json::parse(text).dump(), text) << "not canonical JSON";
    const Attrs back = parse_attrs(text);
    EXPECT_EQ(back.index(), Attrs(attrs).index()) << text << " read back as another struct";
    EXPECT_EQ(back, Attrs(attrs)) << text << " read back as " << attrs_json(back);
    ++structs;
  });
  EXPECT_EQ(structs, std::variant_size_v<Attrs>);
  EXPECT_GE(fields, 50u);
}

TEST(AttrFields, MalformedAttributesAreNamed) {
  auto message = [](std::string_view text) {
    try {
      (void)parse_attrs(text);
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(R"({"trans_a":true})").find("match no op's attribute set"), std::string::npos);
  EXPECT_NE(message(R"({"trans_a":1,"trans_b":false})").find("attrs.trans_a"), std::string::npos);
  EXPECT_NE(message(R"({"dilation":[1],"grad_shape":[],"groups":1,"pad":[0,0],"stride":[1,1]})")
                .find("attrs.dilation: expected two integers"),
            std::string::npos);
  EXPECT_NE(message(R"({"causal":false,"k":[-1],"q":[1],"scale":1,"v":[1]})").find("attrs.k"), std::string::npos);
  EXPECT_NE(message(R"({"to":"f128"})").find("unknown dtype 'f128'"), std::string::npos);
  EXPECT_NE(message("[1,2]").find("expected an object"), std::string::npos);
  EXPECT_NE(message("{").find("not JSON"), std::string::npos);
}

}  // namespace
}  // namespace meganeura
