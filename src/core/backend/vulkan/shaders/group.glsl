// Reductions over a workgroup of at most 256 invocations (the row kernels' size); every
// invocation of the workgroup must call them. Compiled with SUBGROUP (a kernel's subgroup
// variant, for devices with subgroup arithmetic): each subgroup reduces with subgroupAdd or
// subgroupMax, then a tree over the subgroups' results; else a tree over the invocations.
shared float partial[256];

#ifdef SUBGROUP
float group_reduce(float v, bool is_max) {
  const float s = is_max ? subgroupMax(v) : subgroupAdd(v);
  if (subgroupElect()) partial[gl_SubgroupID] = s;
  barrier();
  const uint lid = gl_LocalInvocationID.x;
  for (uint n = gl_NumSubgroups / 2; n > 0; n >>= 1) {
    if (lid < n) partial[lid] = is_max ? max(partial[lid], partial[lid + n]) : partial[lid] + partial[lid + n];
    barrier();
  }
  float r = partial[0];
  barrier();
  return r;
}
#else
float group_reduce(float v, bool is_max) {
  uint lid = gl_LocalInvocationID.x;
  partial[lid] = v;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (lid < s) partial[lid] = is_max ? max(partial[lid], partial[lid + s]) : partial[lid] + partial[lid + s];
    barrier();
  }
  float r = partial[0];
  barrier();
  return r;
}
#endif

float group_sum(float v) { return group_reduce(v, false); }
float group_max(float v) { return group_reduce(v, true); }
