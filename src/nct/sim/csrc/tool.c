/* tool.c: the simulated driver daemons and helpers (nvidia-persistenced,
 * nvidia-debugdump, nv-fabricmanager, nvidia-cuda-mps-control/-server). They only say
 * what they are; -DNCT_TOOLNAME names each build. */
#include <stdio.h>
#include <string.h>

#ifndef NCT_TOOLNAME
#define NCT_TOOLNAME "nvidia-tool"
#endif
#ifndef NCT_DRIVER_VERSION
#define NCT_DRIVER_VERSION "0"
#endif

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--version") || !strcmp(argv[i], "-v")) {
            printf("%s: version %s (simulated by nct)\n", NCT_TOOLNAME, NCT_DRIVER_VERSION);
            return 0;
        }
    printf("%s %s (simulated by nct): nothing to do\n", NCT_TOOLNAME, NCT_DRIVER_VERSION);
    return 0;
}
