/* nct toolkit launcher: one static binary installed under every command name.  It finds
 * its toolkit from /proc/self/exe (so the tree works from any directory and through
 * symlinks), and execs the toolkit's own Python isolated from the host:
 *   <dir>/python/bin/python3 -I -S -c <entry> <argv0> <args...>
 * -I: no PYTHON* variables, no user site, no cwd on sys.path; -S: no site module.
 * nct and its dependencies live in the runtime's own lib/python3.11, so nothing else is
 * on sys.path.  If <dir>/.config is a directory (an `nct install` toolkit root), the
 * commands read their config.toml there (XDG_CONFIG_HOME) and find each other first on PATH.
 * Static (gcc -static): no glibc symbol versions, no dynamic loader, fast start. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct entry { const char *name, *code; };

#define RUN(mod, fn) "import sys;del sys.argv[0];from " mod " import " fn ";sys.exit(" fn "())"
/* Keep in step with [project.scripts] in pyproject.toml (a test checks). */
static const struct entry entries[] = {
    {"nct", RUN("nct.cli.nct", "main")},
    {"nvidia-container-runtime", RUN("nct.runtime.main", "main")},
    {"nvidia-container-runtime.cdi", RUN("nct.runtime.main", "main_cdi")},
    {"nvidia-container-runtime.legacy", RUN("nct.runtime.main", "main_legacy")},
    {"nvidia-container-runtime-hook", RUN("nct.hook.main", "main")},
    {"nvidia-container-toolkit", RUN("nct.hook.main", "main")},
    {"nvidia-container-cli", RUN("nct.cli.container_cli", "main")},
    {"nvidia-ctk", RUN("nct.cli.ctk", "main")},
    {"nvidia-cdi-hook", RUN("nct.cli.cdi_hook", "main")},
};

static void die(const char *what, const char *path)
{
    fprintf(stderr, "nct launcher: %s %s: %s\n", what, path, strerror(errno));
    exit(127);
}

int main(int argc, char **argv)
{
    static char exe[PATH_MAX], python[PATH_MAX + 32], conf[PATH_MAX + 16];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        die("cannot read", "/proc/self/exe");
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        die("bad path", exe);
    *slash = '\0';
    const char *name = slash + 1, *code = NULL;
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
        if (strcmp(entries[i].name, name) == 0)
            code = entries[i].code;
    if (!code) {
        fprintf(stderr, "nct launcher: unknown command name %s (install it under an nct command name)\n", name);
        return 127;
    }
    snprintf(python, sizeof python, "%s/python/bin/python3", exe);
    snprintf(conf, sizeof conf, "%s/.config", exe);
    struct stat st;
    if (stat(conf, &st) == 0 && S_ISDIR(st.st_mode)) {
        const char *path = getenv("PATH");
        size_t len = strlen(exe) + 2 + strlen(path ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
        char *newpath = malloc(len);
        if (!newpath)
            return 127;
        snprintf(newpath, len, "%s:%s", exe, path ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
        setenv("XDG_CONFIG_HOME", conf, 1);
        setenv("PATH", newpath, 1);
    }
    char **args = malloc((size_t)(argc + 6) * sizeof *args);
    if (!args)
        return 127;
    int k = 0;
    args[k++] = python;
    args[k++] = "-I";
    args[k++] = "-S";
    args[k++] = "-c";
    args[k++] = (char *)code;
    args[k++] = argc > 0 ? argv[0] : (char *)name;
    for (int i = 1; i < argc; i++)
        args[k++] = argv[i];
    args[k] = NULL;
    execv(python, args);
    die("cannot execute", python);
    return 127;
}
