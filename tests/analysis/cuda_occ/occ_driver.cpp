// Batch driver for CUDA's occupancy calculator (cuda_occupancy.h, header only, no CUDA runtime).
//
// Reads one case per line from stdin, 16 integers:
//   computeMajor computeMinor maxThreadsPerBlock maxThreadsPerMultiprocessor regsPerBlock
//   regsPerMultiprocessor warpSize sharedMemPerBlock sharedMemPerMultiprocessor numSms
//   sharedMemPerBlockOptin reservedSharedMemPerBlock blockSize numRegs dynamicSmemSize optin
// and calls cudaOccMaxActiveBlocksPerMultiprocessor with warpwatch's settings (spec
// `max_active_blocks_per_sm`): sharedSizeBytes 0, maxThreadsPerBlock INT_MAX, partitioned global
// caching off, numBlockBarriers 1, no virtual resources; optin=1: FUNC_SHMEM_LIMIT_OPTIN with
// maxDynamicSharedSizeBytes = sharedMemPerBlockOptin, optin=0: FUNC_SHMEM_LIMIT_DEFAULT with 0;
// the default device state (what Kineto's `cudaOccDeviceState occDeviceState = {};` builds).
//
// Prints one line per case:
//   R activeBlocks limitingFactors blockLimitWarps blockLimitRegs blockLimitSharedMem
//     blockLimitBlocks blockLimitBarriers
// or, when the calculator fails:
//   E errorCode
//
// Build: g++ -O1 -std=c++17 -I<cuda>/include occ_driver.cpp -o occ_driver
#include <climits>
#include <cstdio>
#include <cstring>

#include <cuda_occupancy.h>

int main() {
    long long v[16];
    for (;;) {
        int n = 0;
        while (n < 16 && std::scanf("%lld", &v[n]) == 1) {
            ++n;
        }
        if (n == 0) {
            break;
        }
        if (n != 16) {
            std::fprintf(stderr, "occ_driver: incomplete case (%d of 16 numbers)\n", n);
            return 2;
        }

        cudaOccDeviceProp prop;
        prop.computeMajor = (int)v[0];
        prop.computeMinor = (int)v[1];
        prop.maxThreadsPerBlock = (int)v[2];
        prop.maxThreadsPerMultiprocessor = (int)v[3];
        prop.regsPerBlock = (int)v[4];
        prop.regsPerMultiprocessor = (int)v[5];
        prop.warpSize = (int)v[6];
        prop.sharedMemPerBlock = (size_t)v[7];
        prop.sharedMemPerMultiprocessor = (size_t)v[8];
        prop.numSms = (int)v[9];
        prop.sharedMemPerBlockOptin = (size_t)v[10];
        prop.reservedSharedMemPerBlock = (size_t)v[11];

        const bool optin = v[15] != 0;
        cudaOccFuncAttributes attr;
        attr.maxThreadsPerBlock = INT_MAX;
        attr.numRegs = (int)v[13];
        attr.sharedSizeBytes = 0;
        attr.partitionedGCConfig = PARTITIONED_GC_OFF;
        attr.shmemLimitConfig = optin ? FUNC_SHMEM_LIMIT_OPTIN : FUNC_SHMEM_LIMIT_DEFAULT;
        attr.maxDynamicSharedSizeBytes = optin ? prop.sharedMemPerBlockOptin : 0;
        attr.numBlockBarriers = 1;
        attr.virtualResourceCount = 0;

        const cudaOccDeviceState state = {};

        cudaOccResult result;
        std::memset(&result, 0, sizeof(result));
        cudaOccError status = cudaOccMaxActiveBlocksPerMultiprocessor(
            &result, &prop, &attr, &state, (int)v[12], (size_t)v[14]);
        if (status != CUDA_OCC_SUCCESS) {
            std::printf("E %d\n", (int)status);
        } else {
            std::printf("R %d %u %d %d %d %d %d\n", result.activeBlocksPerMultiprocessor,
                        result.limitingFactors, result.blockLimitWarps, result.blockLimitRegs,
                        result.blockLimitSharedMem, result.blockLimitBlocks,
                        result.blockLimitBarriers);
        }
    }
    return 0;
}
