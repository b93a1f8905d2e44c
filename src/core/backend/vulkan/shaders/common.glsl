// Shared by every kernel: workgroup size from specialisation constant 0 and a flat invocation
// index over a 2-D grid (grids wider than maxComputeWorkGroupCount[0] wrap into y).
layout(local_size_x_id = 0) in;

uint flat_index() {
  return gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
}
uint flat_group() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }
