// One unit of work the physical energy model prices: a dispatch of a compiled Program, or one
// operator of a transformer layer. The model needs only how much arithmetic and memory traffic
// it does; `layer` groups items for the per-layer breakdown.
#pragma once

#include <string>

namespace meganeura::energy {

struct WorkItem {
  std::string name;  // "layer3.ffn_up", "matmul_17", ...
  // "matmul" and "attention" run at the dtype's (tensor-core) peak; every other kind
  // ("elementwise", "reduce", "optimizer", ...) at the fp32 vector rate.
  std::string kind;
  double flops = 0;  // floating-point operations of this dispatch
  double bytes = 0;  // bytes read plus written in device memory
  int layer = -1;    // transformer layer, or -1 when not part of one
};

}  // namespace meganeura::energy
