"""Code generation: IR to C (OpenMP, vector types), CUDA and HIP source. Arrives with the code generation issue."""
