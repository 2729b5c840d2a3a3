/* simnode.h: what the simulated driver "knows" about its GPUs, shared by the simulated
 * libnvidia-ml and libcuda (header-only; every function is static).
 *
 * Sources, in order:
 *  1. /proc/driver/nvidia/gpus/<bus>/information (+ the nct-sim file beside it), as a real
 *     driver exposes them; this is what a host or a legacy-hook container sees.
 *  2. the node description appended to this library's own file (a trailer written by
 *     `nct sim create`), used when the proc tree is absent, e.g. in a CDI container whose
 *     fresh procfs has no /proc/driver/nvidia.
 * Either way a GPU is visible only when /dev/nvidia<minor> exists in the caller's view
 * as character device 195:<minor> and opening it is not refused (a device cgroup denial
 * gives EPERM), and a MIG device only when both of its /dev/nvidia-caps nodes pass the
 * same test (minor checked; the caps major is dynamic). /proc/driver and /dev paths are
 * taken under the node's root (see sim_set_root).
 */
#ifndef NCT_SIMNODE_H
#define NCT_SIMNODE_H

#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define SIM_MAX_GPUS 64
#define SIM_MAX_MIGS 8

typedef struct sim_mig {
    unsigned gi, ci, gi_minor, ci_minor;
    char profile[32];
    char uuid[96];
} sim_mig;

typedef struct sim_gpu {
    char model[96];
    char uuid[96];
    char bus[32];        /* as in Bus Location, e.g. 0000:07:00.0 */
    unsigned minor;
    int brand;
    int cc_major, cc_minor;
    int mig_mode;
    unsigned max_migs;
    unsigned n_migs;
    sim_mig migs[SIM_MAX_MIGS];
    int have_minor;
} sim_gpu;

static char sim_root_buf[4096];

static const char *sim_root(void) { return sim_root_buf; }

/* The node's root: $NCT_SIM_ROOT, else the prefix P of this library's own path when it is
 * P/usr/lib/<multiarch>/lib... and P/proc/driver/nvidia exists (a node read in place, like a
 * driver root), else "" (the node is at the real paths, e.g. inside `nct sim run`). */
static void sim_set_root(void *self) {
    const char *env = getenv("NCT_SIM_ROOT");
    Dl_info info;
    sim_root_buf[0] = 0;
    if (env && *env) {
        snprintf(sim_root_buf, sizeof sim_root_buf, "%s", env);
        return;
    }
    if (!dladdr(self, &info) || !info.dli_fname || info.dli_fname[0] != '/') return;
    static const char *dirs[] = {"/usr/lib/x86_64-linux-gnu/", "/usr/lib/i386-linux-gnu/",
                                 "/lib/x86_64-linux-gnu/", "/lib/i386-linux-gnu/"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        const char *at = strstr(info.dli_fname, dirs[i]);
        if (!at || at == info.dli_fname || strchr(at + strlen(dirs[i]), '/')) continue;
        char probe[4096];
        struct stat st;
        int n = (int)(at - info.dli_fname);
        snprintf(probe, sizeof probe, "%.*s/proc/driver/nvidia", n, info.dli_fname);
        if (stat(probe, &st) == 0 && S_ISDIR(st.st_mode)) {
            snprintf(sim_root_buf, sizeof sim_root_buf, "%.*s", n, info.dli_fname);
            return;
        }
    }
}

static void sim_path(char *out, size_t n, const char *path) {
    snprintf(out, n, "%s%s", sim_root(), path);
}

/* A node is usable when it is the expected character device (major < 0: any major) and
 * opening it is not refused. A simulated node on a machine without the driver answers
 * ENXIO/ENODEV: that counts as present. */
static int sim_node_usable(const char *path, int want_major, int want_minor) {
    char full[512];
    struct stat st;
    sim_path(full, sizeof full, path);
    if (stat(full, &st) != 0 || !S_ISCHR(st.st_mode))
        return 0;
    if ((want_major >= 0 && (int)major(st.st_rdev) != want_major) || (int)minor(st.st_rdev) != want_minor)
        return 0;
    int fd = open(full, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    return errno == ENXIO || errno == ENODEV;
}

static char *sim_trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
        s[--n] = 0;
    return s;
}

static void sim_copy(char *dst, size_t n, const char *src) {
    snprintf(dst, n, "%s", src);
}

/* Apply one "Key: value" line to a GPU record. */
static void sim_apply_line(sim_gpu *g, char *line) {
    char *colon = strchr(line, ':');
    if (!colon) return;
    *colon = 0;
    char *key = sim_trim(line), *val = sim_trim(colon + 1);
    if (!strcmp(key, "Model")) sim_copy(g->model, sizeof g->model, val);
    else if (!strcmp(key, "GPU UUID")) sim_copy(g->uuid, sizeof g->uuid, val);
    else if (!strcmp(key, "Bus Location")) sim_copy(g->bus, sizeof g->bus, val);
    else if (!strcmp(key, "Device Minor")) { g->minor = (unsigned)strtoul(val, NULL, 10); g->have_minor = 1; }
    else if (!strcmp(key, "Brand")) g->brand = atoi(val);
    else if (!strcmp(key, "Compute Capability")) sscanf(val, "%d.%d", &g->cc_major, &g->cc_minor);
    else if (!strcmp(key, "MIG Mode")) g->mig_mode = atoi(val);
    else if (!strcmp(key, "MIG Max Devices")) g->max_migs = (unsigned)atoi(val);
    else if (!strcmp(key, "MIG Device") && g->n_migs < SIM_MAX_MIGS) {
        sim_mig *m = &g->migs[g->n_migs];
        if (sscanf(val, "%u %u %u %u %31s %95s", &m->gi, &m->ci, &m->gi_minor, &m->ci_minor,
                   m->profile, m->uuid) == 6)
            g->n_migs++;
    }
}

static void sim_apply_file(sim_gpu *g, const char *path) {
    FILE *f = fopen(path, "re");
    char line[512];
    if (!f) return;
    while (fgets(line, sizeof line, f)) sim_apply_line(g, line);
    fclose(f);
}

static int sim_cmp_bus(const void *a, const void *b) {
    return strcasecmp(((const sim_gpu *)a)->bus, ((const sim_gpu *)b)->bus);
}

/* Read every GPU from the proc tree. Returns the count, or -1 when there is no tree. */
static int sim_read_proc(sim_gpu *gpus, int max) {
    char dir[512];
    sim_path(dir, sizeof dir, "/proc/driver/nvidia/gpus");
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        if (e->d_name[0] == '.') continue;
        char p[1024];
        sim_gpu *g = &gpus[n];
        memset(g, 0, sizeof *g);
        snprintf(p, sizeof p, "%s/%s/information", dir, e->d_name);
        sim_apply_file(g, p);
        snprintf(p, sizeof p, "%s/%s/nct-sim", dir, e->d_name);
        sim_apply_file(g, p);
        if (g->uuid[0] && g->have_minor) n++;
    }
    closedir(d);
    return n;
}

/* Read the node description appended to the file that holds `self` (a symbol of ours):
 * "<records>NCTSIM<10-digit length>\n" at the very end; records are separated by "%%". */
static int sim_read_trailer(void *self, sim_gpu *gpus, int max) {
    Dl_info info;
    if (!dladdr(self, &info) || !info.dli_fname) return -1;
    FILE *f = fopen(info.dli_fname, "re");
    if (!f) return -1;
    char tail[18] = {0};
    long len;
    if (fseek(f, -17, SEEK_END) != 0 || fread(tail, 1, 17, f) != 17 || strncmp(tail, "NCTSIM", 6) != 0) {
        fclose(f);
        return -1;
    }
    len = strtol(tail + 6, NULL, 10);
    if (len <= 0 || len > (1L << 22) || fseek(f, -17 - len, SEEK_END) != 0) {
        fclose(f);
        return -1;
    }
    char *buf = malloc((size_t)len + 1);
    if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) {
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    buf[len] = 0;
    int n = 0;
    sim_gpu *g = NULL;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strcmp(line, "%%")) {
            if (g && g->uuid[0] && g->have_minor) n++;
            g = NULL;
            continue;
        }
        if (!g) {
            if (n >= max) break;
            g = &gpus[n];
            memset(g, 0, sizeof *g);
        }
        sim_apply_line(g, line);
    }
    if (g && g->uuid[0] && g->have_minor && n < max) n++;
    free(buf);
    return n;
}

/* The driver is "loaded" when /dev/nvidiactl is usable and GPU facts can be read. Fills
 * `gpus` with the visible ones, in bus-id order, MIG devices filtered too; returns the
 * count, or -1 when the driver is not there. */
static int sim_load(void *self, sim_gpu *gpus, int max) {
    sim_gpu all[SIM_MAX_GPUS];
    sim_set_root(self);
    if (!sim_node_usable("/dev/nvidiactl", 195, 255)) return -1;
    int n = sim_read_proc(all, SIM_MAX_GPUS);
    if (n < 0) n = sim_read_trailer(self, all, SIM_MAX_GPUS);
    if (n < 0) return -1;
    qsort(all, (size_t)n, sizeof all[0], sim_cmp_bus);
    int out = 0;
    for (int i = 0; i < n && out < max; i++) {
        char p[64];
        snprintf(p, sizeof p, "/dev/nvidia%u", all[i].minor);
        if (!sim_node_usable(p, 195, (int)all[i].minor)) continue;
        sim_gpu *g = &gpus[out++];
        *g = all[i];
        g->n_migs = 0;
        for (unsigned j = 0; j < all[i].n_migs; j++) {
            char a[64], b[64];
            snprintf(a, sizeof a, "/dev/nvidia-caps/nvidia-cap%u", all[i].migs[j].gi_minor);
            snprintf(b, sizeof b, "/dev/nvidia-caps/nvidia-cap%u", all[i].migs[j].ci_minor);
            if (sim_node_usable(a, -1, (int)all[i].migs[j].gi_minor) &&
                sim_node_usable(b, -1, (int)all[i].migs[j].ci_minor)) g->migs[g->n_migs++] = all[i].migs[j];
        }
        if (g->mig_mode && g->max_migs == 0) g->max_migs = 7;
    }
    return out;
}

#endif
