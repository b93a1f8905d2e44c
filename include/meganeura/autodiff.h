// Reverse-mode automatic differentiation on the graph itself: the backward pass is appended to
// the same graph, built with the same builders, so every backend, the planner and the checks
// see gradients as ordinary nodes. Each vjp rule uses the upstream gradient it is given
// (never assumes it is one), which is what lets an op be checked mid-graph.
#pragma once

#include <vector>

#include "meganeura/graph.h"

namespace meganeura {

// d(loss)/d(w) for each w in `wrt`, appended to loss's graph. `loss` must be a scalar; a node
// the loss does not depend on gets a zero gradient. Gradients on fan-out are summed; `detach`
// stops them.
std::vector<Tensor> grad(Tensor loss, const std::vector<Tensor>& wrt);

// Same, seeded with an explicit cotangent `seed` of loss's shape (loss need not be a scalar).
std::vector<Tensor> vjp(Tensor y, Tensor seed, const std::vector<Tensor>& wrt);

}  // namespace meganeura
