// Rewrite passes: Graph -> Graph transformations that keep every output and assignment's value
// and cut the number of dispatches. They run after autodiff and the optimizer (the fused ops
// they create have no gradient rules) and before plan(): Session::add(const Graph&) applies
// optimize() unless told not to. Each pass is also callable alone (the equivalence tests run
// them one by one against the unrewritten graph).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "meganeura/graph.h"

namespace meganeura {

struct PassOptions {
  bool dead_nodes = true;           // drop nodes no output or assignment needs
  bool softmax = true;              // softmax(causal_mask(x * s)) -> softmax_scaled
  bool norms = true;                // RMS / layer / group normalisation chains -> norm
  bool batched_matmul_sums = true;  // sum over the batch of a batched A^T B -> one GEMM
  bool pointwise = true;            // elementwise chains -> fused_elementwise / fused_reduce
  bool matmul_epilogue = true;      // matmul followed by elementwise work -> matmul_epilogue
  // For a backend without their kernels: the fused token cross-entropy (and its backward) and
  // `where` become compositions of primitive ops (one-hot, log-softmax, masks). Runs first.
  bool decompose = false;
  // Elementwise programs whose results are all assigned to states of one shape (an optimizer's
  // moments and parameter) -> one fused_elementwise with several outputs (fused_output selects
  // the further ones), each written in place into its state where the planner finds it safe.
  // Last: positional initialisers in use name the fields above.
  bool multi_output = true;
  // Reductions over non-contiguous axes (batch norm's per-channel sums over N, H and W) take
  // the elementwise work that feeds them as fused_reduce: for a backend whose fused reduction
  // walks any axes (the CPU's); otherwise they stay primitive.
  bool strided_reductions = true;
};

struct PassStats {
  uint32_t removed = 0;        // dead nodes dropped
  uint32_t softmaxes = 0;      // softmax_scaled created
  uint32_t norms = 0;          // norm created
  uint32_t fused = 0;          // fused_elementwise / fused_reduce created
  uint32_t inlined = 0;        // elementwise nodes folded into a fused program
  uint32_t epilogues = 0;      // matmul_epilogue created
  uint32_t folded = 0;         // batched matmul + batch sum turned into one matmul
  uint32_t multi_outputs = 0;  // programs merged into another as its secondary outputs
};

// The passes one by one (each in its own file under src/core/passes/).
Graph remove_dead_nodes(const Graph& g, PassStats* stats = nullptr);
Graph fuse_softmax(const Graph& g, PassStats* stats = nullptr);
Graph fuse_norms(const Graph& g, PassStats* stats = nullptr);
Graph fold_batched_matmul_sums(const Graph& g, PassStats* stats = nullptr);
// Pointwise fusion; reads PassOptions::matmul_epilogue, multi_output and strided_reductions.
Graph fuse_pointwise(const Graph& g, const PassOptions& options = {}, PassStats* stats = nullptr);
// Rewrites softmax_cross_entropy(_backward) and where into primitive ops (PassOptions::decompose).
Graph decompose_to_primitives(const Graph& g);

// Inference in 8 or 4 bits (not part of optimize(): it changes what the parameters hold): every
// f32 parameter W [out, in] with `in` a multiple of 32 that enters the graph only as the
// transposed right operand of matmuls (linear layers, y = x W^T) is held in `format` (q8_0,
// q4_0) under the same name, and those matmuls become matmul_q. Parameters keep_f32 names stay
// f32. Setting such a parameter from f32 values quantises them. A graph with gradients keeps its
// weights (a gradient reads W another way); build the forward graph alone.
Graph quantise_weights(const Graph& g, DType format, const std::function<bool(const std::string&)>& keep_f32 = {});

// Precision contracts. strict: every product in f32. accelerated: the forward products (matmul,
// conv2d, fused attention) read their f32 operands rounded to f16, accumulate and store f32;
// gradients and the optimizer's update (Node::pinned) stay f32 throughout, reading the unrounded
// values. accelerated_bf16: the same with bf16 operands.
enum class Precision : uint8_t { strict, accelerated, accelerated_bf16 };
std::string_view precision_name(Precision p);      // "strict", "accelerated", "accelerated-bf16"
Precision parse_precision(std::string_view name);  // throws std::invalid_argument naming the choices

// What the gradients' products read under an accelerated contract. f32 (the reference's rule):
// the unrounded values. reduced (opt-in, accelerated only): the gradients' matmuls, both
// convolution gradients and the attention backward read operands rounded like the forward's;
// accumulation, the stored gradients and the update stay f32. A training step then needs loss
// scaling (Trainer does it dynamically), or small gradients vanish in f16.
enum class Backward : uint8_t { f32, reduced };
std::string_view backward_name(Backward b);      // "f32", "reduced"
Backward parse_backward(std::string_view name);  // throws std::invalid_argument naming the choices
// Throws std::invalid_argument when `b` cannot go with `p`: reduced needs accelerated (bf16
// operands in backward fail ResNet-50's gradient gate: docs/precision.md).
void check_backward(Precision p, Backward b);

// A contract applied to a graph (not part of optimize(); Session::add applies
// SessionOptions::precision first): under accelerated / accelerated_bf16, each f32 operand of an
// unpinned matmul, conv2d or attention_fused is replaced by round_f16 / round_bf16 of it, one
// rounding node per source tensor (a weight's is computed once per step). `rounded` counts the
// rounding nodes made. strict returns g unchanged. Inference-only ops (cached attention,
// block-format matmul_q) keep f32 operands.
//
// With `held_parameters`, the parameters are stored in the contract's own 16-bit type
// (SessionOptions::weights_dtype f16 under accelerated, bf16 under accelerated_bf16), so their
// values are rounded already: the products read them directly and a parameter gets no rounding
// node. Their names are added to `held_parameters`; the plan must then store them so.
//
// With Backward::reduced, the pinned products of the gradients (matmul, conv2d_backward_input,
// conv2d_backward_weight, and attention_fused_backward's q, k, v and incoming gradient) read
// rounded operands as well, from rounding nodes of their own (one per source tensor, made where
// the first gradient product reads it), so that the forward's copies need not live until the
// backward.
Graph apply_precision(const Graph& g, Precision p, uint32_t* rounded = nullptr,
                      std::vector<std::string>* held_parameters = nullptr, Backward backward = Backward::f32);

// All enabled passes in the pipeline's order (src/core/passes/pipeline.cpp): decompose, dead
// nodes, softmax, norms, batched matmul sums, pointwise (with epilogues, fused reductions and
// multi-output programs), dead nodes.
Graph optimize(const Graph& g, const PassOptions& options = {}, PassStats* stats = nullptr);

}  // namespace meganeura
