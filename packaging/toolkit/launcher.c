/* nct toolkit launcher: one tiny static binary installed under every command name.  It finds
 * its toolkit from /proc/self/exe (so the tree works from any directory and through
 * symlinks), and execs the toolkit's own Python isolated from the host:
 *   <dir>/python/bin/python3 -I -S -c <entry> <argv0> <args...>
 * -I: no PYTHON* variables, no user site, no cwd on sys.path; -S: no site module.
 * nct and its dependencies live in the runtime's own lib/python3.11, so nothing else is
 * on sys.path.  If <dir>/.config is a directory (an `nct install` toolkit root), the
 * commands read their config.toml there (XDG_CONFIG_HOME) and find each other first on PATH.
 *
 * No libc (-nostdlib, raw Linux syscalls): no glibc symbol versions, no dynamic loader and
 * no libc start-up; the hop costs ~0.05 ms where a glibc-static one costs ~0.3 ms (see
 * docs/toolkit.md).  x86_64 only (the syscall stub and _start below). */

typedef unsigned long size_t;

#define SYS_write 1
#define SYS_open 2
#define SYS_close 3
#define SYS_execve 59
#define SYS_exit 60
#define SYS_readlink 89
#define O_RDONLY 0
#define O_DIRECTORY 0200000
#define O_CLOEXEC 02000000
#define PATH_MAX 4096

static long sys3(long n, long a, long b, long c)
{
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return r;
}

/* gcc may emit calls to these even with -ffreestanding */
void *memcpy(void *d, const void *s, size_t n)
{
    char *dp = d;
    const char *sp = s;
    while (n--)
        *dp++ = *sp++;
    return d;
}

void *memset(void *d, int c, size_t n)
{
    char *dp = d;
    while (n--)
        *dp++ = (char)c;
    return d;
}

static size_t slen(const char *s)
{
    size_t n = 0;
    while (s[n])
        n++;
    return n;
}

static int seq(const char *a, const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return *a == *b;
}

static int prefix(const char *s, const char *p)
{
    while (*p && *s == *p)
        s++, p++;
    return *p == '\0';
}

/* Concatenate up to three strings into buf (size cap); returns 0 when it does not fit. */
static int cat3(char *buf, size_t cap, const char *a, const char *b, const char *c)
{
    size_t la = slen(a), lb = slen(b), lc = slen(c);
    if (la + lb + lc + 1 > cap)
        return 0;
    memcpy(buf, a, la);
    memcpy(buf + la, b, lb);
    memcpy(buf + la + lb, c, lc + 1);
    return 1;
}

static void say(const char *s)
{
    sys3(SYS_write, 2, (long)s, (long)slen(s));
}

static const char *errname(long e)
{
    switch (e) {
    case 2: return "No such file or directory";
    case 8: return "Exec format error";
    case 13: return "Permission denied";
    case 20: return "Not a directory";
    case 36: return "File name too long";
    case 40: return "Too many levels of symbolic links";
    default: return "error";
    }
}

static void die(const char *what, const char *path, long err)
{
    say("nct launcher: ");
    say(what);
    say(" ");
    say(path);
    say(": ");
    say(errname(err));
    say("\n");
    sys3(SYS_exit, 127, 0, 0);
}

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
    {"nvidia-ctk-installer", RUN("nct.cli.installer", "main")},
    {"nvidia-toolkit", RUN("nct.cli.installer", "main")},
};

static char exe[PATH_MAX], python[PATH_MAX + 32], conf[PATH_MAX + 16], xdg[PATH_MAX + 40],
    newpath[2 * PATH_MAX + 64];

__attribute__((used, force_align_arg_pointer)) void launcher_main(long *sp)
{
    long argc = sp[0];
    char **argv = (char **)(sp + 1), **envp = argv + argc + 1;
    long n = sys3(SYS_readlink, (long)"/proc/self/exe", (long)exe, sizeof exe - 1);
    if (n <= 0)
        die("cannot read", "/proc/self/exe", -n);
    exe[n] = '\0';
    char *slash = exe + n;
    while (slash > exe && *slash != '/')
        slash--;
    *slash = '\0';
    const char *name = slash + 1, *code = 0;
    for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
        if (seq(entries[i].name, name))
            code = entries[i].code;
    if (!code) {
        say("nct launcher: unknown command name ");
        say(name);
        say(" (install it under an nct command name)\n");
        sys3(SYS_exit, 127, 0, 0);
    }
    if (!cat3(python, sizeof python, exe, "/python/bin/python3", "") || !cat3(conf, sizeof conf, exe, "/.config", ""))
        die("path too long:", exe, 36);

    size_t envc = 0;
    while (envp[envc])
        envc++;
    char *env[envc + 3];
    size_t k = 0;
    long fd = sys3(SYS_open, (long)conf, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (fd >= 0) {
        sys3(SYS_close, fd, 0, 0);
        const char *path = "/usr/sbin:/usr/bin:/sbin:/bin";
        for (size_t i = 0; i < envc; i++)
            if (prefix(envp[i], "PATH="))
                path = envp[i] + 5;
        if (!cat3(xdg, sizeof xdg, "XDG_CONFIG_HOME=", conf, "") ||
            !cat3(newpath, sizeof newpath, "PATH=", exe, ":") ||
            !cat3(newpath + slen(newpath), sizeof newpath - slen(newpath), path, "", ""))
            die("path too long:", exe, 36);
        for (size_t i = 0; i < envc; i++)
            if (!prefix(envp[i], "PATH=") && !prefix(envp[i], "XDG_CONFIG_HOME="))
                env[k++] = envp[i];
        env[k++] = xdg;
        env[k++] = newpath;
    } else {
        for (size_t i = 0; i < envc; i++)
            env[k++] = envp[i];
    }
    env[k] = 0;

    char *args[argc + 7];
    long a = 0;
    args[a++] = python;
    args[a++] = "-I";
    args[a++] = "-S";
    args[a++] = "-c";
    args[a++] = (char *)code;
    args[a++] = argc > 0 ? argv[0] : (char *)name;
    for (long i = 1; i < argc; i++)
        args[a++] = argv[i];
    args[a] = 0;
    long err = sys3(SYS_execve, (long)python, (long)args, (long)env);
    die("cannot execute", python, -err);
}

__asm__(".text\n.globl _start\n_start:\n xor %rbp, %rbp\n mov %rsp, %rdi\n call launcher_main\n hlt\n");
