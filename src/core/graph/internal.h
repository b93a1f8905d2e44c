// What the compiler creates but a model does not build: the builders of ops that appear only
// inside gradients or the optimizer's update, and the raw node append the rewrite passes use.
// Users build graphs with the public builders (meganeura/graph.h); these stay inside the
// library (and its tests).
#pragma once

#include <string>
#include <vector>

#include "meganeura/graph.h"

namespace meganeura {

namespace graph_internal {
// Appends a node after checking its arity and shape (not the op's shape rule: the builders do
// that); the fusion passes append the nodes they create this way.
Tensor add_node(Graph& g, Op op, Attrs attrs, std::vector<NodeId> inputs, TensorType type, std::string name = {});

// While one lives, the nodes appended to `g` are marked Node::pinned (autodiff's gradients and
// the optimizer's update: strict f32 under every precision contract). Scopes nest.
class PinnedScope {
 public:
  explicit PinnedScope(Graph& g) : g_(g), before_(g.pinning_) { g.pinning_ = true; }
  ~PinnedScope() { g_.pinning_ = before_; }
  PinnedScope(const PinnedScope&) = delete;
  PinnedScope& operator=(const PinnedScope&) = delete;

 private:
  Graph& g_;
  bool before_;
};
}  // namespace graph_internal

// Gradients of convolution and pooling (ConvAttrs/PoolAttrs::grad_shape: the input's shape).
Tensor conv2d_backward_input(Tensor dy, Tensor w, const ConvAttrs& a);
Tensor conv2d_backward_weight(Tensor x, Tensor dy, const ConvAttrs& a);
Tensor max_pool2d_backward(Tensor x, Tensor dy, const PoolAttrs& a);
Tensor avg_pool2d_backward(Tensor dy, const PoolAttrs& a);
Tensor embedding_backward(Tensor dy, Tensor ids, int64_t num_rows);             // scatter-add
Tensor gather_backward(Tensor dy, Tensor indices, int64_t axis, int64_t size);  // scatter-add
Tensor softmax_cross_entropy_backward(Tensor logits, Tensor targets, Tensor g, int64_t ignore_index);

// The optimizer's scalars.
Tensor lr_schedule(Tensor step, const ScheduleAttrs& a);  // step: f32 or i32 scalar; output f32
// (1 - beta^(step+1))^power in double, rounded once to f32: no cancellation for beta near 1.
Tensor bias_correction(Tensor step, double beta, double power);
Tensor increment(Tensor counter);  // i32 scalar + 1, exact (an f32 counter stops at 2^24)

// Attention in query tiles with the row log-sum-exp saved for backward, never a full score
// matrix: one dispatch whose 1-D output packs [out (B*Hq*Sq*Dv) | lse (B*Hq*Sq)] (one tensor
// per dispatch today; a multi-output dispatch would write the two separately). The backward
// recomputes each tile's probabilities from the saved lse and packs [dq | dk | dv].
// attention() uses it for long sequences.
Tensor attention_fused_packed(Tensor q, Tensor k, Tensor v, bool causal, double scale);
Tensor attention_fused_backward(Tensor q, Tensor k, Tensor v, Tensor packed, Tensor grad_packed,
                                const AttentionAttrs& a);

}  // namespace meganeura
