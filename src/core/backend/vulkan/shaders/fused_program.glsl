// The fused program a kernel is compiled with. The backend compiles fused.comp and the GEMM
// with its epilogue at run time, once per program, with this file replaced by the program as
// straight-line GLSL (program_kernel.cpp: program_glsl); this stand-in lets the build check
// that both kernels compile. `program` returns the program's result for element i; input 0
// of an epilogue's program is `product`, every other input k is program_input(k, i).
float program(uint i, float product) { return product + program_input(1u, i); }
