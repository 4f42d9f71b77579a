"""Code generation: the IR to C (OpenMP, vector types), CUDA and HIP source (to come)."""
