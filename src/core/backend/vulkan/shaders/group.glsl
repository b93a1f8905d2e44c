// Tree reductions over a workgroup of at most 256 invocations (the row kernels' size); every
// invocation of the workgroup must call them.
shared float partial[256];

float group_sum(float v) {
  uint lid = gl_LocalInvocationID.x;
  partial[lid] = v;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (lid < s) partial[lid] += partial[lid + s];
    barrier();
  }
  float r = partial[0];
  barrier();
  return r;
}

float group_max(float v) {
  uint lid = gl_LocalInvocationID.x;
  partial[lid] = v;
  barrier();
  for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
    if (lid < s) partial[lid] = max(partial[lid], partial[lid + s]);
    barrier();
  }
  float r = partial[0];
  barrier();
  return r;
}
