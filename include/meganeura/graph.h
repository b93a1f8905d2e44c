// The typed static graph: an append-only arena of nodes, each producing one tensor of a known
// dtype and shape. Builders (free functions below) check shapes and dtypes when a node is built
// and throw std::invalid_argument naming the op and the shapes, so a malformed model never
// reaches planning. Gradients, optimizer updates and checkpoints are all expressed in this graph.
#pragma once

#include <cstdint>
#include <deque>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "meganeura/dtype.h"

namespace meganeura {

using Shape = std::vector<int64_t>;
using NodeId = uint32_t;

int64_t numel(const Shape& s);
std::string shape_str(const Shape& s);  // "(2,3)"

struct TensorType {
  DType dtype = DType::f32;
  Shape shape;
  int64_t numel() const { return meganeura::numel(shape); }
  int64_t bytes() const { return int64_t(storage_bytes(dtype, numel())); }
  bool operator==(const TensorType&) const = default;
};

// ---- The op set: a small closed set of primitives, each declared once in its own file under
// src/core/ops/ (its builder, gradient rule, cost and kernels); the build lists them here.
enum class Op : uint8_t {
#define MEGANEURA_X(name) name,
#include "meganeura/op_list.inc"
#undef MEGANEURA_X
  count_  // number of ops; keep last
};
constexpr size_t kOpCount = size_t(Op::count_);

// ---- Typed attributes, one struct per op family. -----
struct NoAttrs {
  bool operator==(const NoAttrs&) const = default;
};
struct AffineAttrs {
  double scale = 1, shift = 0;
  bool operator==(const AffineAttrs&) const = default;
};
struct CastAttrs {
  DType to = DType::f32;
  bool operator==(const CastAttrs&) const = default;
};
struct ClipAttrs {
  double max_norm = 1;
  bool operator==(const ClipAttrs&) const = default;
};
struct ReduceAttrs {
  std::vector<int64_t> axes;
  bool keepdims = false;
  bool operator==(const ReduceAttrs&) const = default;
};
struct AxisAttrs {
  int64_t axis = -1;
  bool operator==(const AxisAttrs&) const = default;
};
struct MatmulAttrs {
  bool trans_a = false, trans_b = false;
  bool operator==(const MatmulAttrs&) const = default;
};
struct ConvAttrs {
  int64_t stride[2] = {1, 1}, pad[2] = {0, 0}, dilation[2] = {1, 1};
  int64_t groups = 1;
  Shape grad_shape;  // backward ops: the shape of the input (or weight) the gradient is for
  bool operator==(const ConvAttrs&) const = default;
};
struct PoolAttrs {
  int64_t kernel[2] = {2, 2}, stride[2] = {2, 2}, pad[2] = {0, 0};
  Shape grad_shape;  // backward ops: the input shape
  bool operator==(const PoolAttrs&) const = default;
};
struct ShapeAttrs {
  Shape shape;
  bool operator==(const ShapeAttrs&) const = default;
};
struct PermuteAttrs {
  std::vector<int64_t> perm;
  bool operator==(const PermuteAttrs&) const = default;
};
struct SliceAttrs {
  std::vector<int64_t> starts, ends;
  bool operator==(const SliceAttrs&) const = default;
};
struct PadAttrs {
  std::vector<int64_t> before, after;
  bool operator==(const PadAttrs&) const = default;
};
struct EmbeddingAttrs {
  int64_t num_rows = 0;
  bool operator==(const EmbeddingAttrs&) const = default;
};
struct OneHotAttrs {
  int64_t classes = 0;
  int64_t ignore_index = -100;
  bool operator==(const OneHotAttrs&) const = default;
};
struct RopeAttrs {
  double theta = 10000;
  bool inverse = false;
  // Frequency scaling (Hugging Face `rope_scaling`). With original_max_position = 0 every
  // frequency is divided by `factor` ("linear"; factor 1: none). With original_max_position
  // = L > 0, Llama 3's: frequencies whose wavelength exceeds L / low_freq_factor are divided by
  // `factor`, those shorter than L / high_freq_factor are kept, and those between are blended
  // (see rope_frequency).
  double factor = 1;
  double low_freq_factor = 1;
  double high_freq_factor = 1;
  int64_t original_max_position = 0;
  bool operator==(const RopeAttrs&) const = default;
};
struct MaskAttrs {
  double fill = -1e30;
  bool operator==(const MaskAttrs&) const = default;
};  // large finite: no inf*0
struct ScheduleAttrs {
  double base_lr = 1e-3;
  int64_t warmup = 0;  // linear warm-up steps
  int64_t total = 0;   // 0: constant after warm-up; else cosine decay to min_lr at `total`
  double min_lr = 0;
  bool operator==(const ScheduleAttrs&) const = default;
};
// gather / gather_backward: indices select along `axis`, whose full length is `size`.
struct GatherAttrs {
  int64_t axis = 0, size = 0;
  bool operator==(const GatherAttrs&) const = default;
};
// top_k: the k largest entries of each row of the last axis.
struct TopKAttrs {
  int64_t k = 1;
  bool operator==(const TopKAttrs&) const = default;
};
struct AttentionAttrs {
  bool causal = false;
  double scale = 1;
  Shape q, k, v;  // the operand shapes the packed output and gradients are laid out for
  bool operator==(const AttentionAttrs&) const = default;
};
// cached_attention: queries at absolute positions pos..pos+S-1 over a key/value cache prefix
// [0, pos + S); window > 0 keeps only the keys within `window` positions of the query (the
// query's own position included), 0 keeps all.
struct CachedAttentionAttrs {
  double scale = 1;
  int64_t window = 0;
  bool operator==(const CachedAttentionAttrs&) const = default;
};

// Adam's bias correction (1 - beta^t)^power for the step t being taken, computed in double.
struct BiasCorrectionAttrs {
  double beta = 0.9;
  double power = -1;
  bool operator==(const BiasCorrectionAttrs&) const = default;
};
// One instruction of a fused elementwise program, run on a small stack per output element:
// `input` pushes input `index` (broadcast to the output shape), `constant` pushes `a`, `unary`
// and `binary` apply a primitive elementwise op (affine: scale a, shift b; clip_coef: max_norm a).
// A program with several outputs (fused_elementwise only) ends each one with `store`, which
// pops the top into output `index`; `load` pushes again the value stored to output `index`
// earlier for the same element. Every output is stored once and the stack ends empty. The
// outputs are written after all inputs of an element are read, so an output may take the
// memory of a same-shaped input (an optimizer's moments and parameter, updated in place).
struct FusedInstr {
  enum Kind : uint8_t { input, constant, unary, binary, store, load };
  Kind kind = input;
  Op op = Op::copy;
  uint32_t index = 0;
  double a = 0, b = 0;
  bool operator==(const FusedInstr&) const = default;
};
constexpr size_t kFusedMaxInputs = 8;   // inputs of one fused program
constexpr size_t kFusedMaxStack = 8;    // stack depth of one fused program
constexpr size_t kFusedMaxCode = 48;    // instructions of one fused program
constexpr size_t kFusedMaxOutputs = 3;  // outputs of one multi-output fused program
// The outputs a fused program writes: 1 without `store`, else one per stored index. Throws
// std::invalid_argument naming the problem for a malformed multi-output program (an index
// stored twice or never, a load before its store, a stack not empty at the end).
size_t fused_outputs(const std::vector<FusedInstr>& code);
// fused_elementwise: `code` over the node's inputs, broadcast to the output shape.
// fused_reduce: `code` evaluated over `domain` (inputs broadcast to it), then reduced by
// `reduce` (sum, mean or max) over `axes` as the primitive reductions do.
// matmul_epilogue: input 0 of `code` is the product of the node's inputs 0 and 1 (with
// `matmul`'s transposes); input k >= 1 of `code` is node input k + 1.
struct FusedAttrs {
  std::vector<FusedInstr> code;
  MatmulAttrs matmul;
  Op reduce = Op::sum;
  Shape domain;
  std::vector<int64_t> axes;
  bool keepdims = false;
  bool operator==(const FusedAttrs&) const = default;
};
// norm over the last axis: y = (x - mean if center) * rsqrt(mean((x - mean)^2) + eps) [* gamma] [+ beta]
struct NormAttrs {
  bool center = false;
  double eps = 1e-5;
  bool operator==(const NormAttrs&) const = default;
};
// softmax_scaled over the last axis: softmax(causal_mask(x * scale, fill)) (mask when causal)
struct SoftmaxAttrs {
  double scale = 1;
  bool causal = false;
  double fill = -1e30;
  bool operator==(const SoftmaxAttrs&) const = default;
};

using Attrs = std::variant<NoAttrs, AffineAttrs, CastAttrs, ClipAttrs, ReduceAttrs, AxisAttrs, MatmulAttrs, ConvAttrs,
                           PoolAttrs, ShapeAttrs, PermuteAttrs, SliceAttrs, PadAttrs, EmbeddingAttrs, OneHotAttrs,
                           RopeAttrs, MaskAttrs, ScheduleAttrs, BiasCorrectionAttrs, FusedAttrs, NormAttrs,
                           SoftmaxAttrs, GatherAttrs, AttentionAttrs, CachedAttentionAttrs, TopKAttrs>;

// How a parameter or state is initialised before training.
struct Init {
  enum Kind : uint8_t { zeros, ones, normal, uniform, constant } kind = zeros;
  double a = 0;  // normal: std; uniform: bound (samples in [-a, a]); constant: the value
};

struct Node {
  Op op;
  Attrs attrs;
  std::vector<NodeId> inputs;
  TensorType type;
  std::string name;                // leaves: the binding name; others: optional label
  Init init;                       // parameters and states
  std::vector<double> const_data;  // constants (converted to the node's dtype when bound)
  // Made by autodiff or an optimizer's update: runs in f32 under every precision contract
  // (apply_precision leaves its operands alone).
  bool pinned = false;
};

class Graph;
struct Tensor;
namespace graph_internal {  // src/core/graph/internal.h
Tensor add_node(Graph& g, Op op, Attrs attrs, std::vector<NodeId> inputs, TensorType type, std::string name);
// Where a graph lives now. A Graph owns one slot: moving the graph moves the slot and points it
// at the new address; destroying the graph (or assigning over it) clears it.
struct GraphSlot {
  Graph* graph = nullptr;
};
class PinnedScope;
}  // namespace graph_internal

// A tensor's reference to its graph. It follows the graph when the graph is moved; once the
// graph is destroyed or assigned over, using it throws std::logic_error saying so, instead of
// reading freed memory.
class GraphRef {
 public:
  GraphRef() = default;
  explicit GraphRef(std::shared_ptr<const graph_internal::GraphSlot> slot) : slot_(std::move(slot)) {}
  // The graph, or nullptr for a tensor made without one; throws when the graph is gone.
  Graph* get() const;
  Graph& operator*() const;  // throws also for a tensor made without a graph
  Graph* operator->() const { return &**this; }
  explicit operator bool() const { return slot_ != nullptr; }
  bool operator==(const GraphRef& o) const { return slot_ == o.slot_; }
  bool operator==(const Graph* g) const { return get() == g; }

 private:
  std::shared_ptr<const graph_internal::GraphSlot> slot_;
};

// A handle to one node's output: what builders take and return. Valid while its graph lives
// (wherever the graph is moved to); afterwards every use throws std::logic_error.
struct Tensor {
  GraphRef graph;
  NodeId id = 0;
  TensorType type() const;
  Shape shape() const { return type().shape; }
  DType dtype() const { return type().dtype; }
  int64_t rank() const { return int64_t(shape().size()); }
  int64_t dim(int64_t i) const;  // negative counts from the end
};

class Graph {
 public:
  Graph() = default;
  // A copy is a graph of its own: the tensors of `other` stay with `other`.
  Graph(const Graph& other);
  // Tensors of `other` follow its nodes here; `other` is left empty, a new graph.
  Graph(Graph&& other) noexcept;
  Graph& operator=(const Graph& other);
  Graph& operator=(Graph&& other) noexcept;
  ~Graph();

  Tensor input(const std::string& name, Shape shape, DType dtype = DType::f32);
  Tensor parameter(const std::string& name, Shape shape, Init init, DType dtype = DType::f32);
  // Persistent non-trainable tensor carried across steps (optimizer moments, step counter).
  Tensor state(const std::string& name, Shape shape, Init init = {}, DType dtype = DType::f32);
  Tensor constant(std::vector<double> values, Shape shape, DType dtype = DType::f32);
  Tensor scalar(double v) { return constant({v}, {}); }

  // Marks a tensor as a named result of the program.
  void output(const std::string& name, Tensor t);
  // At the end of each step, `state` takes the value `value` (same type).
  void assign(Tensor state, Tensor value);

  const Node& node(NodeId id) const { return nodes_.at(id); }
  size_t size() const { return nodes_.size(); }
  Tensor tensor(NodeId id) { return Tensor{GraphRef(slot()), id}; }

  const std::vector<std::pair<std::string, NodeId>>& outputs() const { return outputs_; }
  const std::vector<std::pair<NodeId, NodeId>>& assignments() const { return assignments_; }
  std::vector<NodeId> parameters() const;  // in creation order
  std::optional<NodeId> find(const std::string& leaf_name) const;

  // Human-readable dump, one node per line: "%7 = matmul(%3, %5) {trans_b} : f32(4,8)".
  std::string dump() const;
  std::string to_json() const;
  uint64_t hash() const;  // of the canonical JSON

 private:
  friend Tensor graph_internal::add_node(Graph&, Op, Attrs, std::vector<NodeId>, TensorType, std::string);
  friend class graph_internal::PinnedScope;
  Tensor leaf(Op op, const std::string& name, Shape shape, DType dtype, Init init);
  const std::shared_ptr<graph_internal::GraphSlot>& slot();  // made with the first tensor
  void release_slot();  // clears the slot: the graph's tensors report it gone from here on
  // A deque: appending never moves existing nodes, so a `const Node&` held by a builder or a
  // vjp rule stays valid while it appends more (a vector here caused dangling references).
  std::deque<Node> nodes_;
  std::vector<std::pair<std::string, NodeId>> outputs_;
  std::vector<std::pair<NodeId, NodeId>> assignments_;
  // Leaf name -> node: find() runs for every new leaf, and a scan made copying a graph
  // quadratic in its size.
  std::unordered_map<std::string, NodeId> leaf_names_;
  std::shared_ptr<graph_internal::GraphSlot> slot_;
  bool pinning_ = false;  // new nodes are pinned (graph_internal::PinnedScope)
};

// ---- Builders. All check their inputs and throw std::invalid_argument("[op] ...") -----
// The plain elementwise ops, one builder each, declared by the build from the ops' own files
// (src/core/ops/unary, src/core/ops/binary; the list is meganeura/op_builders.inc). Binary ones
// broadcast; positive_mask, equal and less give 1 where true, else 0; maximum sends the
// gradient of ties to a.
#include "meganeura/op_builders.inc"
Tensor copy(Tensor x);
Tensor detach(Tensor x);  // stop-gradient
Tensor gelu(Tensor x, bool tanh_approximation = false);
Tensor affine(Tensor x, double scale, double shift = 0);  // scale * x + shift
Tensor cast(Tensor x, DType to);
Tensor gelu_grad(Tensor x, bool tanh_approximation);  // d gelu / dx
Tensor clip_coef(Tensor norm, double max_norm);       // min(1, max_norm / (norm + 1e-6))

// cond != 0 ? a : b, all three broadcast together; cond is a float mask (from less, equal).
Tensor where(Tensor cond, Tensor a, Tensor b);
inline Tensor operator+(Tensor a, Tensor b) { return add(a, b); }
inline Tensor operator-(Tensor a, Tensor b) { return sub(a, b); }
inline Tensor operator*(Tensor a, Tensor b) { return mul(a, b); }
inline Tensor operator/(Tensor a, Tensor b) { return div(a, b); }
inline Tensor operator-(Tensor a) { return neg(a); }
Tensor operator*(Tensor a, double s);
Tensor operator+(Tensor a, double s);

Tensor sum(Tensor x, std::vector<int64_t> axes = {}, bool keepdims = false);  // {} = all axes
Tensor mean(Tensor x, std::vector<int64_t> axes = {}, bool keepdims = false);
Tensor max(Tensor x, std::vector<int64_t> axes = {}, bool keepdims = false);
Tensor softmax(Tensor x, int64_t axis = -1);
Tensor log_softmax(Tensor x, int64_t axis = -1);

// a: [..., M, K] (or [..., K, M] with trans_a); b: [..., K, N] (or [..., N, K] with trans_b).
// Batch dimensions must match, or one side has none (shared weights).
Tensor matmul(Tensor a, Tensor b, bool trans_a = false, bool trans_b = false);
// x [..., k] times w^T for a weight w [n, k] of a block type (q8_0, q4_0): [..., n], decoded
// as it is read. Inference only.
Tensor matmul_q(Tensor x, Tensor w);

struct Conv2dOptions {
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};
// x: [N, C, H, W], w: [O, C/groups, KH, KW] -> [N, O, OH, OW]
Tensor conv2d(Tensor x, Tensor w, const Conv2dOptions& o = {});
// x: [N, C, L], w: [O, C/groups, K]; lowered to conv2d over a unit height.
Tensor conv1d(Tensor x, Tensor w, int64_t stride = 1, int64_t pad = 0, int64_t dilation = 1, int64_t groups = 1);

Tensor max_pool2d(Tensor x, int64_t kernel, int64_t stride, int64_t pad = 0);
Tensor avg_pool2d(Tensor x, int64_t kernel, int64_t stride, int64_t pad = 0);  // pads count
Tensor global_avg_pool2d(Tensor x);                                            // [N, C, H, W] -> [N, C]
Tensor upsample_nearest2x(Tensor x);                                           // [N, C, H, W] -> [N, C, 2H, 2W]

Tensor reshape(Tensor x, Shape shape);  // one dimension may be -1
Tensor permute(Tensor x, std::vector<int64_t> perm);
Tensor transpose(Tensor x, int64_t a = -2, int64_t b = -1);
Tensor slice(Tensor x, std::vector<int64_t> starts, std::vector<int64_t> ends);
Tensor slice_axis(Tensor x, int64_t axis, int64_t start, int64_t end);
Tensor pad(Tensor x, std::vector<int64_t> before, std::vector<int64_t> after);  // zeros
Tensor concat(std::vector<Tensor> xs, int64_t axis);
Tensor broadcast_to(Tensor x, Shape shape);
Tensor sum_to(Tensor x, const Shape& shape);  // reverses broadcasting

Tensor embedding(Tensor table, Tensor ids);  // table [V, D], ids i32 [...] -> [..., D]
Tensor one_hot(Tensor ids, int64_t classes, int64_t ignore_index = -100);
// Selects entries along `axis` by i32 indices [n]: the output has n there (index_select).
Tensor gather(Tensor x, int64_t axis, Tensor indices);
// Mean token cross-entropy in one op: logits [N, C], targets i32 [N] -> scalar. Its backward
// is (softmax - target) * g / count in one [N, C] tensor: no one-hot, no log-softmax copy.
Tensor softmax_cross_entropy(Tensor logits, Tensor targets, int64_t ignore_index = -100);
// start, start + step, ... (n values) as a constant.
Tensor arange(Graph& g, int64_t n, double start = 0, double step = 1, DType dtype = DType::f32);

// Rotary position embedding over the last dimension (halves rotated), positions along axis -2.
Tensor rope(Tensor x, double theta = 10000, bool inverse = false);
// The same with every attribute given, frequency scaling included.
Tensor rope_scaled(Tensor x, const RopeAttrs& attrs);
// The rotation frequency of pair `pair` of a head of `dim` channels, scaling applied:
// theta^(-2 pair / dim), then Llama 3's blend or the linear division (RopeAttrs).
double rope_frequency(const RopeAttrs& a, int64_t pair, int64_t dim);
// rope at absolute positions: rows along axis -2 are at positions offset, offset + 1, ...,
// where offset is a runtime i32 tensor (a decode step's position): one element, or for x of
// rank >= 3 one per sequence of the leading axis (-1, an idle sequence, rotates as 0).
Tensor rope_at(Tensor x, Tensor offset, double theta = 10000, bool inverse = false);
// The same with every attribute given, frequency scaling included (as rope_scaled).
Tensor rope_at_scaled(Tensor x, Tensor offset, const RopeAttrs& attrs);
// Sets entries above the diagonal of the last two axes (aligned to the bottom right) to fill.
Tensor causal_mask(Tensor x, double fill = -1e30);

// ---- Compositions (user-level ops built from primitives) -----
Tensor layer_norm(Tensor x, std::optional<Tensor> gamma, std::optional<Tensor> beta, double eps = 1e-5);
Tensor rms_norm(Tensor x, std::optional<Tensor> gamma, double eps = 1e-5);
// x: [N, C, ...]; gamma, beta: [C]
Tensor group_norm(Tensor x, int64_t groups, std::optional<Tensor> gamma, std::optional<Tensor> beta, double eps = 1e-5);
Tensor swiglu(Tensor gate, Tensor up);  // silu(gate) * up
// The index of the largest entry along the last axis (the first, on ties), i32, the last axis
// removed: greedy decoding's choice, computed on the device. For a row holding NaN the index is
// unspecified but within [0, length] (length: no entry equals the row's maximum).
Tensor argmax(Tensor x);
// The k largest entries along the last axis, largest first (ties: the lower index first, NaN
// above every number), as values (x's dtype) and i32 indices, each of shape [..., k]; sampling's
// candidates without reading the whole row back. Forward only (no gradient). 1 <= k <= 1024 and
// k <= the last axis, which holds at most 2^24 entries.
struct TopK {
  Tensor values, indices;
};
TopK top_k(Tensor x, int64_t k);
// The same packed in one tensor [..., 2k]: the k values, then the k indices as values of x's
// dtype (exact: below 2^24). The op itself; top_k slices it.
Tensor top_k_packed(Tensor x, int64_t k);
// q: [B, Hq, Sq, D], k: [B, Hkv, Sk, D], v: [B, Hkv, Sk, Dv]; Hq a multiple of Hkv (grouped
// heads); causal aligns the mask to the bottom right so Sq < Sk attends to a prefix.
Tensor attention(Tensor q, Tensor k, Tensor v, bool causal, std::optional<double> scale = {});
// ---- Key/value cache for autoregressive decoding (forward only: autodiff refuses them). ---
// cache: [B, Hkv, Tmax, D], usually a Graph::state; rows: [B, Hkv, S, D]; pos: i32 vector read
// at run time, one position for every sequence or one per sequence ([B]: a batch whose
// sequences are at their own positions). Returns the cache with each sequence's rows written at
// its positions pos..pos+S-1 (the rest unchanged). Assign the result to the cache state: the
// planner then writes the rows into the state's own memory, no copy of the cache per step.
// Position -1 marks an idle sequence: nothing of it is written. Running with another pos < 0 or
// pos + S > Tmax fails with an error naming the position.
Tensor kv_cache_write(Tensor cache, Tensor rows, Tensor pos);
// q: [B, Hq, S, D] at positions pos..pos+S-1 attends causally over keys and values [0, pos + S)
// of k_cache [B, Hkv, Tmax, D] and v_cache [B, Hkv, Tmax, Dv] (query head h reads kv head
// h / (Hq / Hkv)); window > 0: only the last `window` positions up to the query's own. Scale
// defaults to 1 / sqrt(D). Output [B, Hq, S, Dv]; pos as kv_cache_write's (an idle sequence's
// output is zero).
Tensor cached_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor pos, int64_t window = 0,
                        std::optional<double> scale = {});
// logits [N, C], targets i32 [N]; mean over targets != ignore_index.
Tensor cross_entropy(Tensor logits, Tensor targets, int64_t ignore_index = -100);
Tensor mse(Tensor pred, Tensor target);

// Batch normalisation over x [N, C, ...] per channel C.
// Training mode: normalises with the batch's statistics (biased variance) and updates the
// running averages through `assign` (running = (1 - momentum) * running + momentum * batch,
// the variance unbiased), as PyTorch's BatchNorm does. The states must be [C].
Tensor batch_norm_train(Tensor x, Tensor gamma, Tensor beta, Tensor running_mean, Tensor running_var,
                        double momentum = 0.1, double eps = 1e-5);
// Inference mode: folded into a per-channel scale = gamma / sqrt(var + eps) and shift =
// beta - mean * scale, so the normalisation is one multiply-add.
Tensor batch_norm_inference(Tensor x, Tensor gamma, Tensor beta, Tensor running_mean, Tensor running_var,
                            double eps = 1e-5);
// Sinusoidal embedding of timesteps t [N] -> [N, dim]: [cos(t * f_i), sin(t * f_i)] with
// f_i = max_period^(-i / (dim/2)) (the diffusion/flow-matching convention, cos first).
Tensor timestep_embedding(Tensor t, int64_t dim, double max_period = 10000);

}  // namespace meganeura
