// One declaration per op. Every op is declared once, in its own file under src/core/ops/, by
// MEGANEURA_OP (or MEGANEURA_UNARY_OP / MEGANEURA_BINARY_OP): its family, arity, how it is
// differentiated and its vjp rule, its cost, the CPU kernel and the Vulkan lowering that run
// it, and for elementwise ops the scalar function itself (as loops for both float types and
// as GLSL). The op's builder (its shape and dtype rule) sits in the same file.
//
// Nothing else lists ops: the build generates the Op enum (meganeura/op_list.inc) from the
// MEGANEURA_*OP lines of these files, the public declarations of the plain unary and binary
// builders (meganeura/op_builders.inc) from the MEGANEURA_*_BUILDER lines, and the GLSL op
// functions the Vulkan kernels call (ops_generated.glsl) from the declarations themselves.
// A declaration that leaves out a required part does not compile (OpSpec's Required fields
// have no default), one whose parts contradict each other fails a static_assert naming the
// op, and an op in the enum without a declaration does not link.
#pragma once

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meganeura/graph.h"

namespace meganeura {

enum class GradKind : uint8_t {
  leaf,           // input, parameter, state, constant
  vjp,            // has a vjp rule; checked against finite differences
  none,           // output is piecewise constant or integer-valued: zero gradient by definition
  backward_only,  // only appears inside gradients; checked through `checked_by`'s check
  fused,          // created by rewrite passes after autodiff; checked by the pass-equivalence tests
  forward_only,   // inference only (the key/value cache): autodiff refuses to differentiate through it
};

enum class OpFamily : uint8_t { leaf, unary, binary, reduce, linalg, conv, pool, movement, index, seq, optim, fused };

// The CPU backend's kernel routine for an op (backend/cpu/kernels.h); the schedule writes that
// routine's push words. `none`: never dispatched (leaves; reshape and fused_output are views
// or extra writes the planner resolves).
enum class CpuKernel : uint8_t {
  none,
  unary,
  cast,
  binary,
  reduce,
  linalg,
  conv,
  pool,
  movement,
  index,
  sequence,
  fused
};

// The Vulkan lowering routine for an op (backend/vulkan/lowering.cpp).
enum class VkKernel : uint8_t {
  none,
  unary,
  binary,
  scalar,  // the optimizer's scalar ops (step counter, schedule, bias correction)
  reduce,
  matmul,
  conv,
  pool,
  movement,
  index,
  sequence,
  workload,
  attention,
  kv_cache,  // the key/value cache ops (kv_cache.comp)
  fused
};

// Work of one node: floating-point operations and bytes read + written (dense, no caching).
struct OpCost {
  double flops = 0;
  double bytes = 0;
};

namespace ops {

// A part every declaration must give: no default constructor, so a designated initialiser
// that leaves it out does not compile.
template <class T>
struct Required {
  T value;
  template <class U>
  requires std::convertible_to<U, T>
  constexpr Required(U&& v) : value(static_cast<U&&>(v)) {}  // NOLINT: implicit, for designated initialisers
};

using Grads = std::vector<std::optional<Tensor>>;  // one per input of the node

// What a vjp rule sees: the node, its output y and the gradient g arriving at it.
struct VjpArgs {
  Graph& graph;
  const Node& node;
  Tensor y;
  Tensor g;
  Tensor in(size_t k) const { return graph.tensor(node.inputs.at(k)); }
  Tensor x() const { return in(0); }
  template <class A>
  const A& attrs() const {
    return std::get<A>(node.attrs);
  }
};
using VjpFn = Grads (*)(const VjpArgs&);

struct CostArgs {
  const Graph& graph;
  const Node& node;
  double out() const { return double(node.type.numel()); }
  const Shape& in_shape(size_t k) const { return graph.node(node.inputs.at(k)).type.shape; }
  double in_numel(size_t k) const { return double(meganeura::numel(in_shape(k))); }
  template <class A>
  const A& attrs() const {
    return std::get<A>(node.attrs);
  }
};
// FLOPs of the node, and bytes beyond its inputs and output (which op_cost always counts).
using CostFn = OpCost (*)(const CostArgs&);

struct Cost {
  double per_output = 0;  // FLOPs per output element
  CostFn fn = nullptr;    // or: a function of the node
};
namespace cost {
constexpr Cost per_output(double flops) { return Cost{flops, nullptr}; }
constexpr Cost none() { return Cost{0, nullptr}; }  // moves or selects data, no arithmetic
constexpr Cost of(CostFn fn) { return Cost{0, fn}; }
}  // namespace cost

// Elementwise ops: the scalar function as span loops (y[j] = f(x[j]); p0, p1 are the op's
// parameters, e.g. affine's scale and shift), and the same function in GLSL.
template <class T>
using UnaryLoop = void (*)(T p0, T p1, const T* x, T* y, int64_t n);
// y[j] = f(a[j], b[j]); an operand that is uniform over the span (va or vb false) is one value.
template <class T>
using BinaryLoop = void (*)(const T* a, bool va, const T* b, bool vb, T* y, int64_t n);

struct Elementwise {
  UnaryLoop<float> unary_f32 = nullptr;
  UnaryLoop<double> unary_f64 = nullptr;
  BinaryLoop<float> binary_f32 = nullptr;
  BinaryLoop<double> binary_f64 = nullptr;
  // GLSL over `float x, p0, p1` (unary) or `float a, b` (binary): an expression, or statements
  // ending in `return`.
  std::string_view glsl;
  bool transcendental = false;  // calls exp, log, tanh, ...: not worth recomputing per consumer
  constexpr bool unary() const { return unary_f32 != nullptr; }
  constexpr bool binary() const { return binary_f32 != nullptr; }
  template <class T>
  UnaryLoop<T> unary_loop() const {
    if constexpr (sizeof(T) == sizeof(float))
      return unary_f32;
    else
      return unary_f64;
  }
  template <class T>
  BinaryLoop<T> binary_loop() const {
    if constexpr (sizeof(T) == sizeof(float))
      return binary_f32;
    else
      return binary_f64;
  }
};

// What an op's file declares, in this order (C++ designated initialisers keep declaration order).
struct OpSpec {
  Required<OpFamily> family;
  Required<int> arity;  // -1: variadic
  Required<GradKind> grad;
  Required<Cost> cost;
  Required<CpuKernel> cpu;
  Required<VkKernel> vulkan;
  VjpFn vjp = nullptr;           // exactly when grad is vjp
  Op checked_by = Op::count_;    // backward_only: the forward op whose gradient check covers it
  int inplace_input = -1;        // the input the output may overwrite (same size, read first), or -1
  Elementwise elementwise = {};  // unary and binary elementwise ops
};

}  // namespace ops

// The checked row of one op.
struct OpInfo {
  Op op;
  std::string_view name;
  int arity;
  OpFamily family;
  GradKind grad;
  Op checked_by;
  int inplace_input;
  ops::Cost cost;
  ops::VjpFn vjp;
  CpuKernel cpu;
  VkKernel vulkan;
  ops::Elementwise elementwise;
};

namespace ops {

constexpr OpInfo make_info(Op op, std::string_view name, const OpSpec& s) {
  return OpInfo{op,           name,  s.arity.value, s.family.value, s.grad.value, s.checked_by, s.inplace_input,
                s.cost.value, s.vjp, s.cpu.value,   s.vulkan.value, s.elementwise};
}

// One specialisation per op, defined by MEGANEURA_OP in the op's file.
template <Op op>
const OpInfo& op_def();

// ---- Elementwise helpers: F has `template <class T> static T f(T x, T p0, T p1)` (unary) or
// `static T f(T a, T b)` (binary), used for both float types. -----
template <class F, class T>
void unary_span(T p0, T p1, const T* x, T* y, int64_t n) {  // y may be x
  for (int64_t j = 0; j < n; ++j) y[j] = F::template f<T>(x[j], p0, p1);
}
template <class F, class T>
void binary_span(const T* a, bool va, const T* b, bool vb, T* y, int64_t n) {  // y may be a or b
  if (va && vb) {
    for (int64_t j = 0; j < n; ++j) y[j] = F::template f<T>(a[j], b[j]);
  } else if (va) {
    const T v = *b;
    for (int64_t j = 0; j < n; ++j) y[j] = F::template f<T>(a[j], v);
  } else if (vb) {
    const T v = *a;
    for (int64_t j = 0; j < n; ++j) y[j] = F::template f<T>(v, b[j]);
  } else {
    *y = F::template f<T>(*a, *b);
  }
}

// The identity on values (copy, detach; cast, whose kernels convert the storage).
struct Identity {
  template <class T>
  static T f(T x, T, T) {
    return x;
  }
};

struct ElementwiseSpec {
  Required<std::string_view> glsl;
  Required<bool> transcendental;
};
template <class F>
constexpr Elementwise unary_fn(ElementwiseSpec s) {
  return Elementwise{&unary_span<F, float>, &unary_span<F, double>, nullptr, nullptr,
                     s.glsl.value,          s.transcendental.value};
}
template <class F>
constexpr Elementwise binary_fn(ElementwiseSpec s) {
  return Elementwise{
      nullptr, nullptr, &binary_span<F, float>, &binary_span<F, double>, s.glsl.value, s.transcendental.value};
}

// A plain unary elementwise op: family unary, one input, computed in place, CPU and Vulkan
// pointwise kernels.
struct UnarySpec {
  Required<GradKind> grad;
  Required<double> flops;  // per element
  Required<std::string_view> glsl;
  Required<bool> transcendental;
  VjpFn vjp = nullptr;
  Op checked_by = Op::count_;
};
template <class F>
constexpr OpSpec unary_op(UnarySpec s) {
  return OpSpec{.family = OpFamily::unary,
                .arity = 1,
                .grad = s.grad,
                .cost = cost::per_output(s.flops.value),
                .cpu = CpuKernel::unary,
                .vulkan = VkKernel::unary,
                .vjp = s.vjp,
                .checked_by = s.checked_by,
                .inplace_input = 0,
                .elementwise = unary_fn<F>({.glsl = s.glsl, .transcendental = s.transcendental})};
}
struct BinarySpec {
  Required<GradKind> grad;
  Required<std::string_view> glsl;
  VjpFn vjp = nullptr;
};
template <class F>
constexpr OpSpec binary_op(BinarySpec s) {
  return OpSpec{.family = OpFamily::binary,
                .arity = 2,
                .grad = s.grad,
                .cost = cost::per_output(1),
                .cpu = CpuKernel::binary,
                .vulkan = VkKernel::binary,
                .vjp = s.vjp,
                .inplace_input = 0,
                .elementwise = binary_fn<F>({.glsl = s.glsl, .transcendental = false})};
}

// The consistency rules a declaration must meet (each a static_assert in MEGANEURA_OP).
constexpr bool vjp_matches_grad(const OpInfo& i) { return (i.grad == GradKind::vjp) == (i.vjp != nullptr); }
constexpr bool checked_by_matches_grad(const OpInfo& i) {
  return (i.grad == GradKind::backward_only) == (i.checked_by != Op::count_);
}
constexpr bool elementwise_matches_family(const OpInfo& i) {
  const bool fn = i.elementwise.unary() || i.elementwise.binary();
  const bool elementwise_family = i.family == OpFamily::unary || i.family == OpFamily::binary;
  return fn == elementwise_family && (!fn || !i.elementwise.glsl.empty()) && (!i.elementwise.unary() || i.arity == 1) &&
         (!i.elementwise.binary() || i.arity == 2);
}
constexpr bool leaf_matches_kernels(const OpInfo& i) {
  return (i.family == OpFamily::leaf) == (i.grad == GradKind::leaf) &&
         (i.family != OpFamily::leaf || (i.cpu == CpuKernel::none && i.vulkan == VkKernel::none));
}

// Builders shared by the op files.
Tensor unary_node(Op op, Tensor x, Attrs attrs = NoAttrs{});  // a float input, same type out
Tensor binary_node(Op op, Tensor a, Tensor b);                // same float dtypes, broadcast
[[noreturn]] void fail(Op op, const std::string& msg);        // std::invalid_argument "[op] msg"
Graph& graph_of(Op op, std::initializer_list<Tensor> ts);     // the one graph all inputs share
void require_float(Op op, Tensor x);
int64_t norm_axis(Op op, int64_t axis, int64_t rank);  // a negative axis counts from the end
Shape broadcast_shapes(Op op, const std::vector<Shape>& shapes);
// [..., seq, dim] with dim even, theta and the scaling attributes in range (rope, rope_at).
void require_rope(Op op, Tensor x, const RopeAttrs& a);

}  // namespace ops
}  // namespace meganeura

#define MEGANEURA_DEFINE_OP_(name_, spec_)                                                                            \
  template <>                                                                                                         \
  const ::meganeura::OpInfo& ::meganeura::ops::op_def<::meganeura::Op::name_>() {                                     \
    static constexpr ::meganeura::OpInfo info = ::meganeura::ops::make_info(::meganeura::Op::name_, #name_, spec_);   \
    static_assert(::meganeura::ops::vjp_matches_grad(info), #name_ ": a vjp rule is given exactly when grad is vjp"); \
    static_assert(::meganeura::ops::checked_by_matches_grad(info),                                                    \
                  #name_ ": checked_by is given exactly when grad is backward_only");                                 \
    static_assert(::meganeura::ops::elementwise_matches_family(info),                                                 \
                  #name_ ": unary and binary ops (only) give their scalar function and its GLSL");                    \
    static_assert(::meganeura::ops::leaf_matches_kernels(info), #name_ ": leaves (only) have no gradient or kernel"); \
    return info;                                                                                                      \
  }

// Declares op `name_` from OpSpec's fields (designated initialisers, in OpSpec's order).
#define MEGANEURA_OP(name_, ...) MEGANEURA_DEFINE_OP_(name_, (::meganeura::ops::OpSpec{__VA_ARGS__}))
// A plain unary elementwise op computing F::f (UnarySpec's fields).
#define MEGANEURA_UNARY_OP(name_, F, ...) \
  MEGANEURA_DEFINE_OP_(name_, (::meganeura::ops::unary_op<F>(::meganeura::ops::UnarySpec{__VA_ARGS__})))
// A binary elementwise op with broadcasting computing F::f (BinarySpec's fields).
#define MEGANEURA_BINARY_OP(name_, F, ...) \
  MEGANEURA_DEFINE_OP_(name_, (::meganeura::ops::binary_op<F>(::meganeura::ops::BinarySpec{__VA_ARGS__})))
// The public builders `Tensor name_(Tensor x)` / `Tensor name_(Tensor a, Tensor b)`; their
// declarations are generated into meganeura/op_builders.inc.
#define MEGANEURA_UNARY_BUILDER(name_) \
  ::meganeura::Tensor meganeura::name_(Tensor x) { return ::meganeura::ops::unary_node(::meganeura::Op::name_, x); }
#define MEGANEURA_BINARY_BUILDER(name_)                                 \
  ::meganeura::Tensor meganeura::name_(Tensor a, Tensor b) {            \
    return ::meganeura::ops::binary_node(::meganeura::Op::name_, a, b); \
  }
