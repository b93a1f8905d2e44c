// Shared by every kernel: workgroup size from specialisation constant 0 and a flat invocation
// index over a 2-D grid (grids wider than maxComputeWorkGroupCount[0] wrap into y).
layout(local_size_x_id = 0) in;

uint flat_index() {
  return gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
}
// The identity of max reductions and running maxima: the lowest finite float, not -inf (a
// driver that compiles with fast-math, MoltenVK's among them, may assume no infinities). The
// result differs from -inf's only where every element is -inf.
const float LOWEST = -3.402823466e38;
// Written, never computed with: the log-sum-exp of an empty row, an empty window's maximum.
const uint NEG_INF_BITS = 0xff800000u;

uint flat_group() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }
