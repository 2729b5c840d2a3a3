/* smi.c: the simulated nvidia-smi. Links against glibc only and dlopens
 * libnvidia-ml.so.1 at run time, like the real tool, so what it prints is whatever the
 * (simulated) NVML in the caller's view reports.
 *   nvidia-smi            a short table
 *   nvidia-smi -L         "GPU 0: <name> (UUID: GPU-...)" plus MIG lines
 *   nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,minor_number --format=csv[,noheader]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*fn_v)(void);
typedef int (*fn_u)(unsigned *);
typedef int (*fn_idx)(unsigned, void **);
typedef int (*fn_str)(void *, char *, unsigned);
typedef int (*fn_sys)(char *, unsigned);
typedef int (*fn_i)(int *);
typedef int (*fn_du)(void *, unsigned *);
typedef int (*fn_duu)(void *, unsigned *, unsigned *);
typedef int (*fn_mig)(void *, unsigned, void **);
typedef const char *(*fn_err)(int);

static void *lib;
static void *sym(const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "Failed to find %s in libnvidia-ml.so.1\n", name);
        exit(12);
    }
    return p;
}

static const char *field(void *dev, unsigned index, const char *name, char *buf, size_t n) {
    if (!strcmp(name, "index")) snprintf(buf, n, "%u", index);
    else if (!strcmp(name, "uuid")) ((fn_str)sym("nvmlDeviceGetUUID"))(dev, buf, (unsigned)n);
    else if (!strcmp(name, "name")) ((fn_str)sym("nvmlDeviceGetName"))(dev, buf, (unsigned)n);
    else if (!strcmp(name, "pci.bus_id")) {
        struct { char legacy[16]; unsigned d[5]; char busId[32]; } pci;
        ((int (*)(void *, void *))sym("nvmlDeviceGetPciInfo_v3"))(dev, &pci);
        snprintf(buf, n, "%s", pci.busId);
    } else if (!strcmp(name, "minor_number")) {
        unsigned m = 0;
        ((fn_du)sym("nvmlDeviceGetMinorNumber"))(dev, &m);
        snprintf(buf, n, "%u", m);
    } else if (!strcmp(name, "driver_version")) ((fn_sys)sym("nvmlSystemGetDriverVersion"))(buf, (unsigned)n);
    else if (!strcmp(name, "mig.mode.current")) {
        unsigned c = 0, p = 0;
        int r = ((fn_duu)sym("nvmlDeviceGetMigMode"))(dev, &c, &p);
        snprintf(buf, n, "%s", r ? "[N/A]" : (c ? "Enabled" : "Disabled"));
    } else {
        fprintf(stderr, "Field \"%s\" is not a valid field to query.\n", name);
        exit(2);
    }
    return buf;
}

int main(int argc, char **argv) {
    int list = 0, header = 1;
    const char *query = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-L") || !strcmp(argv[i], "--list-gpus")) list = 1;
        else if (!strncmp(argv[i], "--query-gpu=", 12)) query = argv[i] + 12;
        else if (!strncmp(argv[i], "--format=", 9)) header = strstr(argv[i], "noheader") == NULL;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("NVIDIA System Management Interface (simulated by nct)\n"
                   "  -L, --list-gpus  list GPUs and MIG devices\n"
                   "  --query-gpu=index,uuid,name,pci.bus_id,minor_number,driver_version,mig.mode.current\n"
                   "  --format=csv[,noheader]\n");
            return 0;
        } else {
            fprintf(stderr, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n");
            return 2;
        }
    }
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!lib) {
        printf("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. Please make sure that "
               "the NVIDIA Display Driver is properly installed and present in your system.\n"
               "Please also try adding directory that contains libnvidia-ml.so to your system PATH.\n");
        return 12;
    }
    if (((fn_v)sym("nvmlInit_v2"))() != 0) {
        printf("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
               "that the latest NVIDIA driver is installed and running.\n\n");
        return 9;
    }
    unsigned count = 0;
    ((fn_u)sym("nvmlDeviceGetCount_v2"))(&count);
    char drv[80] = "", name[96], uuid[96];
    ((fn_sys)sym("nvmlSystemGetDriverVersion"))(drv, sizeof drv);
    int cuda = 0;
    ((fn_i)sym("nvmlSystemGetCudaDriverVersion"))(&cuda);

    if (count == 0 && !query) {
        printf("No devices were found\n");
        ((fn_v)sym("nvmlShutdown"))();
        return 6;
    }
    if (query) {
        char *q = strdup(query), *save = NULL;
        char *names[16];
        int nf = 0;
        for (char *t = strtok_r(q, ",", &save); t && nf < 16; t = strtok_r(NULL, ",", &save)) names[nf++] = t;
        if (header)
            for (int f = 0; f < nf; f++) printf("%s%s", names[f], f + 1 < nf ? ", " : "\n");
        for (unsigned i = 0; i < count; i++) {
            void *dev;
            ((fn_idx)sym("nvmlDeviceGetHandleByIndex_v2"))(i, &dev);
            for (int f = 0; f < nf; f++) {
                char buf[128] = "";
                printf("%s%s", field(dev, i, names[f], buf, sizeof buf), f + 1 < nf ? ", " : "\n");
            }
        }
        free(q);
        return 0;
    }

    if (!list) {
        printf("+-----------------------------------------------------------------------------------------+\n");
        char head[128];
        snprintf(head, sizeof head, "NVIDIA-SMI %-15s Driver Version: %-15s CUDA Version: %d.%d", drv, drv,
                 cuda / 1000, (cuda % 1000) / 10);
        printf("| %-87s |\n", head);
        printf("|-----------------------------------------+------------------------+----------------------+\n");
        printf("| GPU  Name                               | Bus-Id          Disp.A | MIG M.               |\n");
        printf("|=========================================+========================+======================|\n");
    }
    for (unsigned i = 0; i < count; i++) {
        void *dev;
        if (((fn_idx)sym("nvmlDeviceGetHandleByIndex_v2"))(i, &dev)) continue;
        ((fn_str)sym("nvmlDeviceGetName"))(dev, name, sizeof name);
        ((fn_str)sym("nvmlDeviceGetUUID"))(dev, uuid, sizeof uuid);
        unsigned cur = 0, pend = 0, max = 0;
        int migr = ((fn_duu)sym("nvmlDeviceGetMigMode"))(dev, &cur, &pend);
        if (!list) {
            struct { char legacy[16]; unsigned d[5]; char busId[32]; } pci;
            ((int (*)(void *, void *))sym("nvmlDeviceGetPciInfo_v3"))(dev, &pci);
            printf("| %3u  %-34s | %-16s   Off | %-20s |\n", i, name, pci.busId,
                   migr ? "N/A" : (cur ? "Enabled" : "Disabled"));
            continue;
        }
        printf("GPU %u: %s (UUID: %s)\n", i, name, uuid);
        if (migr || !cur) continue;
        ((fn_du)sym("nvmlDeviceGetMaxMigDeviceCount"))(dev, &max);
        for (unsigned j = 0; j < max; j++) {
            void *mig;
            char prof[32] = "";
            if (((fn_mig)sym("nvmlDeviceGetMigDeviceHandleByIndex"))(dev, j, &mig)) continue;
            ((fn_str)sym("nvmlDeviceGetUUID"))(mig, uuid, sizeof uuid);
            ((fn_str)sym("nctSimDeviceGetMigProfile"))(mig, prof, sizeof prof);
            printf("  MIG %-11s Device %2u: (UUID: %s)\n", prof, j, uuid);
        }
    }
    if (!list) {
        printf("+-----------------------------------------+------------------------+----------------------+\n");
    }
    ((fn_v)sym("nvmlShutdown"))();
    return 0;
}
