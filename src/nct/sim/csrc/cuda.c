/* cuda.c: the simulated libcuda. cuDriverGetVersion answers the node's CUDA version
 * (-DNCT_CUDA_VERSION=12040); cuInit/cuDeviceGetCount see the same GPUs as the simulated
 * NVML (visible /dev/nvidia<minor> nodes). */
#include "simnode.h"

typedef int CUresult;
enum { CUDA_SUCCESS = 0, CUDA_ERROR_INVALID_VALUE = 1, CUDA_ERROR_NOT_INITIALIZED = 3,
       CUDA_ERROR_NO_DEVICE = 100, CUDA_ERROR_INVALID_DEVICE = 101 };

static int g_count = -1;
static sim_gpu g_gpus[SIM_MAX_GPUS];

CUresult cuDriverGetVersion(int *v) {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = NCT_CUDA_VERSION;
    return CUDA_SUCCESS;
}

CUresult cuInit(unsigned flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    int n = sim_load((void *)&cuInit, g_gpus, SIM_MAX_GPUS);
    if (n <= 0) return CUDA_ERROR_NO_DEVICE;
    g_count = n;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count) {
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    if (g_count < 0) return CUDA_ERROR_NOT_INITIALIZED;
    *count = g_count;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(int *dev, int ordinal) {
    if (!dev) return CUDA_ERROR_INVALID_VALUE;
    if (g_count < 0) return CUDA_ERROR_NOT_INITIALIZED;
    if (ordinal < 0 || ordinal >= g_count) return CUDA_ERROR_INVALID_DEVICE;
    *dev = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, int dev) {
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (g_count < 0) return CUDA_ERROR_NOT_INITIALIZED;
    if (dev < 0 || dev >= g_count) return CUDA_ERROR_INVALID_DEVICE;
    snprintf(name, (size_t)len, "%s", g_gpus[dev].model);
    return CUDA_SUCCESS;
}
