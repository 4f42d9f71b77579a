// A CPU stand-in for the CUDA runtime, for the tests only: it runs a kernel's
// blocks one after another on one std::thread per GPU thread, which meet at a
// std::barrier for __syncthreads(), so ThreadSanitizer sees a missing barrier
// as a data race. `__shared__` is `static`: one copy for the block that runs.
// Unified memory is malloc's. The test rewrites each launch
// `k<<<blocks, threads>>>(args)` into `dojo_emulate(blocks, threads, [&] { k(args); })`.
#pragma once

#include <barrier>
#include <cstddef>
#include <cstdlib>
#include <thread>
#include <vector>

#define __global__
#define __host__
#define __device__
#define __shared__ static
#define __launch_bounds__(threads)
#define CUDART_VERSION 13000

typedef int cudaError_t;
typedef void *cudaStream_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
enum cudaDeviceAttr { cudaDevAttrConcurrentManagedAccess = 89 };
enum cudaMemLocationType { cudaMemLocationTypeDevice = 1 };
struct cudaMemLocation {
    cudaMemLocationType type;
    int id;
};

struct dojo_index {
    unsigned x;
};
inline thread_local dojo_index blockIdx, threadIdx;
inline std::barrier<> *dojo_block_barrier;

#define __syncthreads() dojo_block_barrier->arrive_and_wait()

template <class Kernel> void dojo_emulate(unsigned blocks, unsigned threads, Kernel kernel)
{
    std::barrier<> barrier(threads);
    dojo_block_barrier = &barrier;
    std::vector<std::thread> team;
    for (unsigned t = 0; t < threads; ++t)
        team.emplace_back([&barrier, &kernel, blocks, t] {
            threadIdx.x = t;
            for (unsigned b = 0; b < blocks; ++b) {
                blockIdx.x = b;
                kernel();
                barrier.arrive_and_wait();  // the next block reuses the shared memory
            }
        });
    for (std::thread &thread : team)
        thread.join();
}

inline const char *cudaGetErrorString(cudaError_t) { return "emulated error"; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaGetDevice(int *device)
{
    *device = 0;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr, int)
{
    *value = 0;  // no concurrent managed access: nothing is prefetched
    return cudaSuccess;
}
inline cudaError_t cudaMemPrefetchAsync(const void *, size_t, cudaMemLocation, unsigned, cudaStream_t)
{
    return cudaSuccess;
}
inline cudaError_t cudaMallocManaged(void **p, size_t bytes)
{
    *p = std::malloc(bytes);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
