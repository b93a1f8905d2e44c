#include "meganeura/graph.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "graph/attr_fields.h"
#include "graph/internal.h"
#include "graph/op_table.h"

namespace meganeura {

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

size_t fused_outputs(const std::vector<FusedInstr>& code) {
  size_t stores = 0;
  for (const FusedInstr& f : code) stores += f.kind == FusedInstr::store;
  bool loads = false;
  for (const FusedInstr& f : code) loads |= f.kind == FusedInstr::load;
  if (stores == 0 && !loads) return 1;
  auto bad = [](const std::string& why) {
    throw std::invalid_argument("[fused_elementwise] multi-output program: " + why);
  };
  std::vector<char> stored(kFusedMaxOutputs, 0);
  size_t depth = 0;
  for (size_t i = 0; i < code.size(); ++i) {
    const FusedInstr& f = code[i];
    const std::string at = "instruction " + std::to_string(i);
    const size_t pops = f.kind == FusedInstr::binary                                 ? 2
                        : f.kind == FusedInstr::unary || f.kind == FusedInstr::store ? 1
                                                                                     : 0;
    if (depth < pops) bad(at + " pops an empty stack");
    if (f.kind == FusedInstr::store || f.kind == FusedInstr::load) {
      if (f.index >= kFusedMaxOutputs)
        bad(at + " names output " + std::to_string(f.index) + ", above kFusedMaxOutputs (" +
            std::to_string(kFusedMaxOutputs) + ")");
      if (f.kind == FusedInstr::store && stored[f.index])
        bad(at + " stores output " + std::to_string(f.index) + " twice");
      if (f.kind == FusedInstr::load && !stored[f.index])
        bad(at + " loads output " + std::to_string(f.index) + " before it is stored");
      if (f.kind == FusedInstr::store) stored[f.index] = 1;
    }
    depth = depth - pops +
            (f.kind == FusedInstr::binary || f.kind == FusedInstr::unary || f.kind == FusedInstr::input ||
             f.kind == FusedInstr::constant || f.kind == FusedInstr::load);
    if (depth > kFusedMaxStack)
      bad(at + " grows the stack above kFusedMaxStack (" + std::to_string(kFusedMaxStack) + ")");
  }
  if (depth != 0) bad(std::to_string(depth) + " values left on the stack: every value must be stored");
  for (size_t k = 0; k < stores; ++k) {
    if (!stored[k])
      bad("output " + std::to_string(k) + " is never stored (outputs are 0 to " + std::to_string(stores - 1) + ")");
  }
  return stores;
}

std::string shape_str(const Shape& s) {
  std::string r = "(";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
  return r + ")";
}

Graph* GraphRef::get() const {
  if (!slot_) return nullptr;
  if (!slot_->graph) {
    throw std::logic_error(
        "[graph] a tensor whose graph was destroyed or assigned over was used: a Tensor is valid only while its "
        "Graph lives");
  }
  return slot_->graph;
}

Graph& GraphRef::operator*() const {
  Graph* g = get();
  if (!g) throw std::logic_error("[graph] a tensor that belongs to no graph was used (a default-constructed Tensor)");
  return *g;
}

Graph::Graph(const Graph& other)
    : nodes_(other.nodes_),
      outputs_(other.outputs_),
      assignments_(other.assignments_),
      leaf_names_(other.leaf_names_) {}

Graph::Graph(Graph&& other) noexcept
    : nodes_(std::move(other.nodes_)),
      outputs_(std::move(other.outputs_)),
      assignments_(std::move(other.assignments_)),
      leaf_names_(std::move(other.leaf_names_)),
      slot_(std::move(other.slot_)) {
  if (slot_) slot_->graph = this;
  other.nodes_.clear();
  other.outputs_.clear();
  other.assignments_.clear();
  other.leaf_names_.clear();
}

Graph& Graph::operator=(const Graph& other) {
  if (this != &other) *this = Graph(other);
  return *this;
}

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this == &other) return *this;
  release_slot();
  nodes_ = std::move(other.nodes_);
  outputs_ = std::move(other.outputs_);
  assignments_ = std::move(other.assignments_);
  leaf_names_ = std::move(other.leaf_names_);
  slot_ = std::move(other.slot_);
  if (slot_) slot_->graph = this;
  other.nodes_.clear();
  other.outputs_.clear();
  other.assignments_.clear();
  other.leaf_names_.clear();
  return *this;
}

Graph::~Graph() { release_slot(); }

void Graph::release_slot() {
  if (slot_) slot_->graph = nullptr;
  slot_.reset();
}

const std::shared_ptr<graph_internal::GraphSlot>& Graph::slot() {
  if (!slot_) slot_ = std::make_shared<graph_internal::GraphSlot>(graph_internal::GraphSlot{this});
  return slot_;
}

TensorType Tensor::type() const { return (*graph).node(id).type; }

int64_t Tensor::dim(int64_t i) const {
  const Shape s = shape();
  int64_t r = int64_t(s.size());
  if (i < 0) i += r;
  if (i < 0 || i >= r) {
    throw std::invalid_argument("[graph] axis " + std::to_string(i) + " out of range for shape " + shape_str(s));
  }
  return s[size_t(i)];
}

namespace {
void check_name(const std::string& what, const std::string& name) {
  if (name.empty()) throw std::invalid_argument("[graph] " + what + " needs a name");
}
void check_shape(const std::string& what, const Shape& s) {
  for (int64_t d : s) {
    if (d < 0) throw std::invalid_argument("[graph] " + what + " has a negative dimension " + shape_str(s));
  }
}
}  // namespace

Tensor Graph::leaf(Op op, const std::string& name, Shape shape, DType dtype, Init init) {
  check_name(std::string(op_name(op)), name);
  check_shape(std::string(op_name(op)) + " '" + name + "'", shape);
  if (find(name)) throw std::invalid_argument("[graph] duplicate name '" + name + "'");
  Node n{op, NoAttrs{}, {}, TensorType{dtype, std::move(shape)}, name, init, {}, pinning_};
  nodes_.push_back(std::move(n));
  leaf_names_.emplace(name, NodeId(nodes_.size() - 1));
  return Tensor{GraphRef(slot()), NodeId(nodes_.size() - 1)};
}

Tensor Graph::input(const std::string& name, Shape shape, DType dtype) {
  return leaf(Op::input, name, std::move(shape), dtype, {});
}
Tensor Graph::parameter(const std::string& name, Shape shape, Init init, DType dtype) {
  if (dtype_is_block(dtype)) {  // a weight for matmul_q: rows of whole blocks
    const int64_t block = dtype_block(dtype).elements;
    if (shape.size() != 2 || shape[1] <= 0 || shape[1] % block != 0) {
      throw std::invalid_argument("[graph] parameter '" + name + "' of type " + std::string(dtype_name(dtype)) +
                                  " needs a shape [n, k] with k a multiple of " + std::to_string(block) + ", got " +
                                  shape_str(shape));
    }
    return leaf(Op::parameter, name, std::move(shape), dtype, init);
  }
  if (!dtype_is_float(dtype)) throw std::invalid_argument("[graph] parameter '" + name + "' must be floating point");
  return leaf(Op::parameter, name, std::move(shape), dtype, init);
}
Tensor Graph::state(const std::string& name, Shape shape, Init init, DType dtype) {
  return leaf(Op::state, name, std::move(shape), dtype, init);
}

Tensor Graph::constant(std::vector<double> values, Shape shape, DType dtype) {
  check_shape("constant", shape);
  if (int64_t(values.size()) != numel(shape)) {
    throw std::invalid_argument("[constant] " + std::to_string(values.size()) + " values do not fill shape " +
                                shape_str(shape));
  }
  Node n{Op::constant, NoAttrs{}, {}, TensorType{dtype, std::move(shape)}, {}, {}, std::move(values), pinning_};
  nodes_.push_back(std::move(n));
  return Tensor{GraphRef(slot()), NodeId(nodes_.size() - 1)};
}

void Graph::output(const std::string& name, Tensor t) {
  check_name("output", name);
  if (t.graph.get() != this) throw std::invalid_argument("[graph] output '" + name + "' is from another graph");
  for (auto& [n, id] : outputs_) {
    if (n == name) throw std::invalid_argument("[graph] duplicate output '" + name + "'");
  }
  outputs_.emplace_back(name, t.id);
}

void Graph::assign(Tensor state, Tensor value) {
  const Node& s = node(state.id);
  if (s.op != Op::state && s.op != Op::parameter) {
    throw std::invalid_argument("[assign] target must be a state or parameter, got " + std::string(op_name(s.op)));
  }
  if (s.type != value.type()) {
    throw std::invalid_argument("[assign] '" + s.name + "' has type " + shape_str(s.type.shape) +
                                " but the value has " + shape_str(value.shape()));
  }
  for (auto& [dst, src] : assignments_) {
    if (dst == state.id) throw std::invalid_argument("[assign] '" + s.name + "' assigned twice");
  }
  assignments_.emplace_back(state.id, value.id);
}

Tensor graph_internal::add_node(Graph& g, Op op, Attrs attrs, std::vector<NodeId> inputs, TensorType type,
                                std::string name) {
  const OpInfo& info = op_info(op);
  if (info.arity >= 0 && int(inputs.size()) != info.arity) {
    throw std::invalid_argument("[" + std::string(info.name) + "] expects " + std::to_string(info.arity) +
                                " inputs, got " + std::to_string(inputs.size()));
  }
  for (NodeId i : inputs) {
    if (i >= g.nodes_.size())
      throw std::invalid_argument("[" + std::string(info.name) + "] input %" + std::to_string(i) + " does not exist");
  }
  check_shape(std::string(info.name), type.shape);
  g.nodes_.push_back(
      Node{op, std::move(attrs), std::move(inputs), std::move(type), std::move(name), {}, {}, g.pinning_});
  return Tensor{GraphRef(g.slot()), NodeId(g.nodes_.size() - 1)};
}

std::vector<NodeId> Graph::parameters() const {
  std::vector<NodeId> r;
  for (NodeId i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].op == Op::parameter) r.push_back(i);
  }
  return r;
}

std::optional<NodeId> Graph::find(const std::string& leaf_name) const {
  auto it = leaf_names_.find(leaf_name);
  if (it == leaf_names_.end()) return std::nullopt;
  return it->second;
}

// ---- serialisation -----
namespace {
using nlohmann::json;

// Doubles JSON cannot hold (a -inf mask fill, a nan constant) are written as strings, as in
// Program::to_json, so that they read back instead of becoming null.
json real(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

// The canonical text of attributes, walked from their field tables (graph/attr_fields.h): what
// json's dump() gives (keys sorted, no spaces), written directly, since a full-scale graph has
// tens of thousands of nodes.
struct AttrWriter {
  std::string& o;

  void operator()(bool v) const { o += v ? "true" : "false"; }
  void operator()(int64_t v) const { o += std::to_string(v); }
  void operator()(double v) const { o += real(v).dump(); }
  void operator()(DType v) const { quoted(dtype_name(v)); }
  void operator()(Op v) const { quoted(op_name(v)); }
  void operator()(const int64_t (&v)[2]) const { ints(v, 2); }
  void operator()(const std::vector<int64_t>& v) const { ints(v.data(), v.size()); }
  // A fused program: "in<k>", "store<k>", "load<k>", a constant, an op name, or [op, constants...]
  // for the ops that carry constants (affine: scale, shift; clip_coef: max_norm).
  void operator()(const std::vector<FusedInstr>& code) const {
    o += '[';
    for (size_t i = 0; i < code.size(); ++i) {
      const FusedInstr& c = code[i];
      if (i) o += ',';
      switch (c.kind) {
        case FusedInstr::input: o += "\"in" + std::to_string(c.index) + "\""; break;
        case FusedInstr::constant: (*this)(c.a); break;
        case FusedInstr::unary:
          if (c.op == Op::affine || c.op == Op::clip_coef) {
            o += '[';
            quoted(op_name(c.op));
            o += ',';
            (*this)(c.a);
            if (c.op == Op::affine) {
              o += ',';
              (*this)(c.b);
            }
            o += ']';
          } else {
            quoted(op_name(c.op));
          }
          break;
        case FusedInstr::binary: quoted(op_name(c.op)); break;
        case FusedInstr::store: o += "\"store" + std::to_string(c.index) + "\""; break;
        case FusedInstr::load: o += "\"load" + std::to_string(c.index) + "\""; break;
      }
    }
    o += ']';
  }

  template <class S>
  void attrs(const S& s) const {
    o += '{';
    bool first = true;
    attr_fields::for_each_field<S>([&](const auto& f) {
      o += first ? "\"" : ",\"";
      first = false;
      o += f.key;
      o += "\":";
      (*this)(f.get(s));
    });
    o += '}';
  }
  void attrs(const Attrs& a) const {
    std::visit([&](const auto& s) { attrs(s); }, a);
  }

 private:
  void quoted(std::string_view name) const {  // dtype and op names are plain identifiers: nothing to escape
    o += '"';
    o += name;
    o += '"';
  }
  void ints(const int64_t* v, size_t n) const {
    o += '[';
    for (size_t i = 0; i < n; ++i) {
      if (i) o += ',';
      o += std::to_string(v[i]);
    }
    o += ']';
  }
};

}  // namespace

std::string attrs_json(const Attrs& a) {
  std::string o;
  AttrWriter{o}.attrs(a);
  return o;
}

// Written out directly, not through a json document (building one for a full-scale graph
// took longer than planning it), in exactly the text json's dump() gives: objects with their
// keys sorted, no spaces. The graph hash is of this text and is kept in checkpoints, so the
// text must not change.
std::string Graph::to_json() const {
  std::string o;
  o.reserve(nodes_.size() * 96);
  // Quoted and escaped as json does; printable ASCII without quote or backslash (almost every
  // name) needs neither escaping nor UTF-8 checks and is copied as it is.
  auto text = [&](std::string_view s) {
    bool plain = true;
    for (char c : s) plain &= c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
    if (!plain) {
      o += json(s).dump();
      return;
    }
    o += '"';
    o += s;
    o += '"';
  };
  auto number = [&](double v) { o += json(v).dump(); };  // as json prints a double
  auto index = [&](uint64_t v) { o += std::to_string(v); };
  // [[first, second], ...] of (node, node) or (name, node) pairs
  auto pairs = [&](const auto& list, auto&& first) {
    for (size_t i = 0; i < list.size(); ++i) {
      o += i ? ",[" : "[";
      first(list[i].first);
      o += ',';
      index(list[i].second);
      o += ']';
    }
  };
  o += "{\"assign\":[";
  pairs(assignments_, index);
  o += "],\"nodes\":[";
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    o += i ? ",{\"attrs\":" : "{\"attrs\":";
    AttrWriter{o}.attrs(n.attrs);
    o += ",\"dtype\":";
    text(dtype_name(n.type.dtype));
    if (n.op == Op::parameter || n.op == Op::state) {
      o += ",\"init\":[" + std::to_string(int(n.init.kind)) + ",";
      number(n.init.a);
      o += ']';
    }
    o += ",\"inputs\":[";
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (k) o += ',';
      index(n.inputs[k]);
    }
    o += ']';
    if (!n.name.empty()) {
      o += ",\"name\":";
      text(n.name);
    }
    o += ",\"op\":";
    text(op_name(n.op));
    o += ",\"shape\":[";
    for (size_t k = 0; k < n.type.shape.size(); ++k) {
      if (k) o += ',';
      o += std::to_string(n.type.shape[k]);
    }
    o += ']';
    if (n.op == Op::constant) {
      o += ",\"values\":[";
      for (size_t k = 0; k < n.const_data.size(); ++k) {
        if (k) o += ',';
        number(n.const_data[k]);
      }
      o += ']';
    }
    o += '}';
  }
  o += "],\"outputs\":[";
  pairs(outputs_, text);
  o += "]}";
  return o;
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

uint64_t Graph::hash() const { return fnv1a(to_json()); }

std::string Graph::dump() const {
  std::ostringstream os;
  for (NodeId i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    os << '%' << i << " = " << op_name(n.op) << '(';
    for (size_t k = 0; k < n.inputs.size(); ++k) os << (k ? ", %" : "%") << n.inputs[k];
    os << ')';
    const std::string a = attrs_json(n.attrs);
    if (a != "{}") os << ' ' << a;
    if (!n.name.empty()) os << " \"" << n.name << '"';
    os << " : " << dtype_name(n.type.dtype) << shape_str(n.type.shape) << '\n';
  }
  for (auto& [name, id] : outputs_) os << "output " << name << " = %" << id << '\n';
  for (auto& [dst, src] : assignments_) os << "assign %" << dst << " <- %" << src << '\n';
  return os.str();
}

}  // namespace meganeura
