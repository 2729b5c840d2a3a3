/* nvml.c: the simulated libnvidia-ml. Enough of the NVML C ABI for nvidia-ml-py (pynvml),
 * nvidia-container-cli style enumeration and the simulated nvidia-smi. Built with
 * -DNCT_DRIVER_VERSION="550.54.15" -DNCT_CUDA_VERSION=12040. */
#include "simnode.h"

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0, NVML_ERROR_UNINITIALIZED = 1, NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3, NVML_ERROR_NOT_FOUND = 6, NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9, NVML_ERROR_UNKNOWN = 999,
};

typedef struct nvml_dev {
    unsigned magic;
    int is_mig;
    int gpu;   /* index into g_gpus */
    int mig;   /* index into that GPU's migs */
} nvml_dev;
typedef nvml_dev *nvmlDevice_t;

typedef struct {
    char busIdLegacy[16];
    unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

#define MAGIC 0x4e435453u
static sim_gpu g_gpus[SIM_MAX_GPUS];
static nvml_dev g_gpu_handles[SIM_MAX_GPUS];
static nvml_dev g_mig_handles[SIM_MAX_GPUS][SIM_MAX_MIGS];
static int g_count;
static int g_refs;

static nvmlReturn_t do_init(void) {
    if (g_refs > 0) { g_refs++; return NVML_SUCCESS; }
    int n = sim_load((void *)&do_init, g_gpus, SIM_MAX_GPUS);
    if (n < 0) return NVML_ERROR_DRIVER_NOT_LOADED;
    g_count = n;
    for (int i = 0; i < n; i++) {
        g_gpu_handles[i] = (nvml_dev){MAGIC, 0, i, -1};
        for (int j = 0; j < SIM_MAX_MIGS; j++) g_mig_handles[i][j] = (nvml_dev){MAGIC, 1, i, j};
    }
    g_refs = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { return do_init(); }
nvmlReturn_t nvmlInit(void) { return do_init(); }
nvmlReturn_t nvmlInitWithFlags(unsigned flags) { (void)flags; return do_init(); }

nvmlReturn_t nvmlShutdown(void) {
    if (g_refs <= 0) return NVML_ERROR_UNINITIALIZED;
    g_refs--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 5: return "Already Initialized";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    default: return "Unknown Error";
    }
}

static nvmlReturn_t put_str(char *buf, unsigned len, const char *s) {
    if (!buf) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(s) + 1 > len) return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, s, strlen(s) + 1);
    return NVML_SUCCESS;
}

#define NEED_INIT() do { if (g_refs <= 0) return NVML_ERROR_UNINITIALIZED; } while (0)

/* Resolve a handle: *g gets the GPU, *m the MIG device (NULL for a full GPU). */
static nvmlReturn_t resolve(nvmlDevice_t d, sim_gpu **g, sim_mig **m) {
    if (g_refs <= 0) return NVML_ERROR_UNINITIALIZED;
    if (!d || d->magic != MAGIC || d->gpu < 0 || d->gpu >= g_count) return NVML_ERROR_INVALID_ARGUMENT;
    *g = &g_gpus[d->gpu];
    *m = NULL;
    if (d->is_mig) {
        if (d->mig < 0 || (unsigned)d->mig >= (*g)->n_migs) return NVML_ERROR_INVALID_ARGUMENT;
        *m = &(*g)->migs[d->mig];
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned len) {
    NEED_INIT();
    return put_str(v, len, NCT_DRIVER_VERSION);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned len) {
    char buf[96];
    snprintf(buf, sizeof buf, "%d.%s", NCT_CUDA_VERSION / 1000, NCT_DRIVER_VERSION);
    return put_str(v, len, buf);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) {
    if (!v) return NVML_ERROR_INVALID_ARGUMENT;
    *v = NCT_CUDA_VERSION;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *n) {
    NEED_INIT();
    if (!n) return NVML_ERROR_INVALID_ARGUMENT;
    *n = (unsigned)g_count;
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetCount(unsigned *n) { return nvmlDeviceGetCount_v2(n); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d) {
    NEED_INIT();
    if (!d || i >= (unsigned)g_count) return NVML_ERROR_INVALID_ARGUMENT;
    *d = &g_gpu_handles[i];
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned i, nvmlDevice_t *d) { return nvmlDeviceGetHandleByIndex_v2(i, d); }

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d) {
    NEED_INIT();
    if (!uuid || !d) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < g_count; i++) {
        if (!strcasecmp(g_gpus[i].uuid, uuid)) { *d = &g_gpu_handles[i]; return NVML_SUCCESS; }
        for (unsigned j = 0; j < g_gpus[i].n_migs; j++)
            if (!strcasecmp(g_gpus[i].migs[j].uuid, uuid)) { *d = &g_mig_handles[i][j]; return NVML_SUCCESS; }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus, nvmlDevice_t *d) {
    NEED_INIT();
    if (!bus || !d) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < g_count; i++) {
        const char *b = g_gpus[i].bus, *q = bus;
        /* compare ignoring the domain's width: 0000:07:00.0 == 00000000:07:00.0 */
        const char *bc = strchr(b, ':'), *qc = strchr(q, ':');
        if (bc && qc && !strcasecmp(bc, qc) && strtoul(b, NULL, 16) == strtoul(q, NULL, 16)) {
            *d = &g_gpu_handles[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *bus, nvmlDevice_t *d) { return nvmlDeviceGetHandleByPciBusId_v2(bus, d); }

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *name, unsigned len) {
    sim_gpu *g; sim_mig *m;
    nvmlReturn_t r = resolve(d, &g, &m);
    if (r) return r;
    if (!m) return put_str(name, len, g->model);
    char buf[160];
    snprintf(buf, sizeof buf, "%s MIG %s", g->model, m->profile);
    return put_str(name, len, buf);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *uuid, unsigned len) {
    sim_gpu *g; sim_mig *m;
    nvmlReturn_t r = resolve(d, &g, &m);
    if (r) return r;
    return put_str(uuid, len, m ? m->uuid : g->uuid);
}

static nvmlReturn_t fill_pci(nvmlDevice_t d, nvmlPciInfo_t *p, int v3) {
    sim_gpu *g; sim_mig *m;
    nvmlReturn_t r = resolve(d, &g, &m);
    if (r) return r;
    if (!p) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned dom = 0, bus = 0, dev = 0, fn = 0;
    sscanf(g->bus, "%x:%x:%x.%x", &dom, &bus, &dev, &fn);
    memset(p, 0, v3 ? sizeof *p : 16 + 9 * sizeof(unsigned));
    snprintf(p->busIdLegacy, sizeof p->busIdLegacy, "%04X:%02X:%02X.%X", dom, bus, dev, fn);
    p->domain = dom; p->bus = bus; p->device = dev;
    p->pciDeviceId = 0x20B010DE;
    p->pciSubSystemId = 0x134F10DE;
    if (v3) snprintf(p->busId, sizeof p->busId, "%08X:%02X:%02X.%X", dom, bus, dev, fn);
    return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) { return fill_pci(d, p, 1); }
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p) { return fill_pci(d, p, 0); }
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *p) { return fill_pci(d, p, 0); }

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned *minor) {
    sim_gpu *g; sim_mig *m;
    nvmlReturn_t r = resolve(d, &g, &m);
    if (r) return r;
    if (!minor) return NVML_ERROR_INVALID_ARGUMENT;
    if (m) return NVML_ERROR_NOT_SUPPORTED;
    *minor = g->minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *index) {
    sim_gpu *g; sim_mig *m;
    nvmlReturn_t r = resolve(d, &g, &m);
    if (r) return r;
    if (!index) return NVML_ERROR_INVALID_ARGUMENT;
    if (m) return NVML_ERROR_NOT_SUPPORTED;
    *index = (unsigned)d->gpu;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t d, int *brand) {
    sim_gpu *g; sim_mig *m;
    nvmlReturn_t r = resolve(d, &g, &m);
    if (r) return r;
    if (!brand) return NVML_ERROR_INVALID_ARGUMENT;
    *brand = g->brand;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *major, int *minor) {
    sim_gpu *g; sim_mig *m;
    nvmlReturn_t r = resolve(d, &g, &m);
    if (r) return r;
    if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    *major = g->cc_major;
    *minor = g->cc_minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned *current, unsigned *pending) {
    sim_gpu *g; sim_mig *m;
    nvmlReturn_t r = resolve(d, &g, &m);
    if (r) return r;
    if (!current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    if (m) return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = g->mig_mode ? 1u : 0u;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned *count) {
    sim_gpu *g; sim_mig *m;
    nvmlReturn_t r = resolve(d, &g, &m);
    if (r) return r;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    if (m) return NVML_ERROR_NOT_SUPPORTED;
    *count = g->mig_mode ? g->max_migs : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned index, nvmlDevice_t *out) {
    sim_gpu *g; sim_mig *m;
    nvmlReturn_t r = resolve(d, &g, &m);
    if (r) return r;
    if (!out || m) return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->mig_mode) return NVML_ERROR_NOT_SUPPORTED;
    if (index >= g->max_migs) return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= g->n_migs) return NVML_ERROR_NOT_FOUND;
    *out = &g_mig_handles[d->gpu][index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned *is_mig) {
    sim_gpu *g; sim_mig *m;
    nvmlReturn_t r = resolve(d, &g, &m);
    if (r) return r;
    if (!is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = m ? 1u : 0u;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned *id) {
    sim_gpu *g; sim_mig *m;
    nvmlReturn_t r = resolve(d, &g, &m);
    if (r) return r;
    if (!id || !m) return NVML_ERROR_INVALID_ARGUMENT;
    *id = m->gi;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned *id) {
    sim_gpu *g; sim_mig *m;
    nvmlReturn_t r = resolve(d, &g, &m);
    if (r) return r;
    if (!id || !m) return NVML_ERROR_INVALID_ARGUMENT;
    *id = m->ci;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t d, nvmlDevice_t *parent) {
    sim_gpu *g; sim_mig *m;
    nvmlReturn_t r = resolve(d, &g, &m);
    if (r) return r;
    if (!parent || !m) return NVML_ERROR_INVALID_ARGUMENT;
    *parent = &g_gpu_handles[d->gpu];
    return NVML_SUCCESS;
}

/* nct extension for the simulated nvidia-smi: the MIG profile name of a MIG handle. */
nvmlReturn_t nctSimDeviceGetMigProfile(nvmlDevice_t d, char *buf, unsigned len) {
    sim_gpu *g; sim_mig *m;
    nvmlReturn_t r = resolve(d, &g, &m);
    if (r) return r;
    if (!m) return NVML_ERROR_INVALID_ARGUMENT;
    return put_str(buf, len, m->profile);
}
