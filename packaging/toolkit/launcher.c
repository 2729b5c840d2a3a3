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
 * docs/toolkit.md).  x86_64 only (the syscall stub and _start below).
 *
 * Pass-through fast path (nvidia-container-runtime{,.cdi,.legacy} only): for a subcommand that
 * is plainly not `create` (state, start, kill, delete, exec...), the launcher execs the
 * low-level runtime itself, the way nct.runtime.main would, from the settings that Python
 * left in <dir>/python/.passthrough-cache after a full pass-through of its own
 * (nct/runtime/passthrough.py writes it and documents the format).  On any doubt it execs
 * Python as above instead: see fast_passthrough(). */

typedef unsigned long size_t;

#define SYS_read 0
#define SYS_write 1
#define SYS_open 2
#define SYS_close 3
#define SYS_stat 4
#define SYS_fstat 5
#define SYS_rt_sigaction 13
#define SYS_rt_sigprocmask 14
#define SYS_execve 59
#define SYS_exit 60
#define SYS_readlink 89
#define SYS_geteuid 107
#define O_RDONLY 0
#define O_WRONLY 01
#define O_CREAT 0100
#define O_APPEND 02000
#define O_NOFOLLOW 0400000
#define O_DIRECTORY 0200000
#define O_CLOEXEC 02000000
#define PATH_MAX 4096
#define ENOENT 2

/* struct stat of the x86_64 kernel ABI (asm/stat.h) */
struct kstat {
    unsigned long dev, ino, nlink;
    unsigned int mode, uid, gid, pad0;
    unsigned long rdev;
    long size, blksize, blocks;
    unsigned long atime, atime_ns, mtime, mtime_ns, ctime, ctime_ns;
    long unused[3];
};
#define S_IFMT 0170000
#define S_IFREG 0100000

static long sys3(long n, long a, long b, long c)
{
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return r;
}

static long sys4(long n, long a, long b, long c, long d)
{
    long r;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
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

static char exe[PATH_MAX], python[PATH_MAX + 32], conf[PATH_MAX + 16], xdg[PATH_MAX + 40];


/* ---- pass-through fast path ------------------------------------------------------------ */

#define CACHE_MAX 16384
#define MAX_FIELDS 64
static char cache[CACHE_MAX + 1], confbuf[CACHE_MAX + 1], keybuf[256], cand[PATH_MAX + 256], found[PATH_MAX + 256];
static const char *field[MAX_FIELDS];

/* Decimal text of v appended at p; returns the new end. */
static char *put_u(char *p, unsigned long v)
{
    char t[24];
    int n = 0;
    do
        t[n++] = (char)('0' + v % 10);
    while (v /= 10);
    while (n)
        *p++ = t[--n];
    return p;
}

/* "dev:ino:size:mtime:mtime_ns:ctime:ctime_ns": the identity of a file's content (the same
 * text nct.runtime.passthrough.stat_key writes). */
static const char *stat_key(const struct kstat *st)
{
    unsigned long v[7] = {st->dev, st->ino, (unsigned long)st->size, st->mtime, st->mtime_ns, st->ctime,
                          st->ctime_ns};
    char *p = keybuf;
    for (int i = 0; i < 7; i++) {
        if (i)
            *p++ = ':';
        p = put_u(p, v[i]);
    }
    *p = '\0';
    return keybuf;
}

/* The value of NAME= in env: 0 when absent, "" when present twice (ambiguous: caller gives up
 * through *dup). */
static const char *getenv_once(char **env, const char *name, int *dup)
{
    const char *v = 0;
    for (size_t i = 0; env[i]; i++)
        if (prefix(env[i], name)) {
            if (v)
                *dup = 1;
            v = env[i] + slen(name);
        }
    return v;
}

/* Whether Python would hand env to the runtime unchanged: nct.runtime.main.original_environ
 * makes a dict of /proc/self/environ, so an entry without `=` or with an empty name is
 * dropped and of two entries with one name only the last one's value is kept.  Any of these
 * (or an environment too large to check quickly) sends the call to Python. */
static int env_plain(char **env)
{
    size_t n = 0;
    for (; env[n]; n++) {
        const char *eq = env[n];
        while (*eq && *eq != '=')
            eq++;
        if (!*eq || eq == env[n] || n >= 512)
            return 0;
    }
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            const char *a = env[i], *b = env[j];
            while (*a == *b && *a != '=')
                a++, b++;
            if (*a == '=' && *b == '=')
                return 0;
        }
    return 1;
}

static int subcommand_passes(const char *a)
{
    static const char *const ok[] = {"state", "start", "kill", "delete", "exec", "ps", "pause", "resume",
                                     "events", "update", "list", "features", 0};
    for (int i = 0; ok[i]; i++)
        if (seq(a, ok[i]))
            return 1;
    return 0;
}

/* "--log=x" -> "log" (dashes stripped, up to '='), written into buf. */
static const char *flag_key(const char *a, char *buf, size_t cap)
{
    while (*a == '-')
        a++;
    size_t n = 0;
    while (a[n] && a[n] != '=' && n + 1 < cap) {
        buf[n] = a[n];
        n++;
    }
    buf[n] = '\0';
    return buf;
}

/* Whether argv is a pass-through nct.runtime.main handles without writing anything: the
 * first positional (global flags with values skipped, as nct.runtime.argv.is_create does) is
 * a known non-creating subcommand, no token is `create`/`run`/`restore`, and no token is
 * a --version or --debug flag (those print or log), not even as another flag's value.
 * Sets *logfile to the engine's --log value (the last one, scanned as
 * nct.runtime.argv.log_args does) or 0. */
static int plain_passthrough(long argc, char **argv, const char **logfile)
{
    static const char *const valued[] = {"root", "log", "log-format", "log-level", "criu", "rootless",
                                         "cgroup-manager", "b", "bundle", 0};
    char key[32];
    *logfile = 0;
    for (long i = 1; i < argc; i++) {
        if (seq(argv[i], "create") || seq(argv[i], "run") || seq(argv[i], "restore"))
            return 0;
        /* anywhere, even as --log's value: nct.runtime.argv.has_version_flag prints the
         * version for `--log --version state`, where log_args reads a file name */
        if (argv[i][0] == '-' && (seq(flag_key(argv[i], key, sizeof key), "version") || seq(key, "debug")))
            return 0;
    }
    for (long i = 1; i < argc;) {
        const char *a = argv[i++];
        if (a[0] != '-')
            continue;
        flag_key(a, key, sizeof key);
        if (seq(key, "log") || seq(key, "log-format")) {
            const char *eq = a;
            while (*eq && *eq != '=')
                eq++;
            const char *value = eq + 1;
            if (!*eq) {
                if (i >= argc)
                    continue;
                value = argv[i++];
            }
            if (seq(key, "log"))
                *logfile = value;
        }
    }
    int skip = 0;
    for (long i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (skip) {
            skip = 0;
            continue;
        }
        if (a[0] != '-' || !a[1])
            return subcommand_passes(a);
        flag_key(a, key, sizeof key);
        int has_eq = 0;
        for (const char *c = a; *c; c++)
            has_eq |= *c == '=';
        for (int v = 0; valued[v] && !has_eq; v++)
            if (seq(key, valued[v]))
                skip = 1;
    }
    return 0;
}

/* Open-and-close a log file the way nct.runtime.log._open_log does (create 0644, append):
 * at the levels the fast path allows nothing is written, but the file is made.  0 on
 * failure (Python then does it, with its directory creation and its warning). */
static int touch_log(const char *path)
{
    if (!path || !*path || seq(path, "/dev/null"))
        return 1;
    long fd = sys3(SYS_open, (long)path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return 0;
    sys3(SYS_close, fd, 0, 0);
    return 1;
}

static int executable(const char *path, const struct kstat *self, int have_self)
{
    struct kstat st;
    if (sys3(SYS_stat, (long)path, (long)&st, 0) != 0)
        return 0;
    if ((st.mode & S_IFMT) != S_IFREG || !(st.mode & 0111))
        return 0;
    return !(have_self && st.dev == self->dev && st.ino == self->ino);
}

/* Whether the PATH entry dir[0..len) is an entry of path (string equality, as Python's `in`). */
static int on_path(const char *path, const char *dir, size_t len)
{
    while (path && *path) {
        const char *end = path;
        while (*end && *end != ':')
            end++;
        size_t i = 0;
        if ((size_t)(end - path) == len)
            while (i < len && path[i] == dir[i])
                i++;
        if (len && i == len)
            return 1;
        path = *end ? end + 1 : end;
    }
    return 0;
}

/* dir[0..len) joined with name (os.path.join) into `found` when that is an executable file. */
static const char *in_dir(const char *dir, size_t len, const char *name, const struct kstat *self, int have_self)
{
    if (!len || len >= PATH_MAX)
        return 0;
    memcpy(cand, dir, len);
    cand[len] = '\0';
    if (cat3(found, sizeof found, cand, cand[len - 1] == '/' ? "" : "/", name) && executable(found, self, have_self))
        return found;
    return 0;
}

/* nct.runtime.lookup.find_runtime: each candidate in order; a bare name through $PATH's
 * non-empty entries, then the fallback directories that are not among them; the shim
 * itself (argv[0]'s inode) skipped. */
static const char *find_runtime(const char **names, int count, const char *path, const char *argv0)
{
    static const char *const fallback[] = {"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin",
                                           "/sbin", "/bin", 0};
    struct kstat self;
    int have_self = argv0 && sys3(SYS_stat, (long)argv0, (long)&self, 0) == 0;
    for (int c = 0; c < count; c++) {
        const char *name = names[c], *hit = 0;
        int bare = 1;
        for (const char *p = name; *p; p++)
            bare &= *p != '/';
        if (!bare) { /* absolute and normalised: the cache writer guarantees it */
            if (executable(name, &self, have_self) && cat3(found, sizeof found, name, "", ""))
                return found;
            continue;
        }
        for (const char *p = path; p && *p && !hit;) {
            const char *end = p;
            while (*end && *end != ':')
                end++;
            hit = in_dir(p, (size_t)(end - p), name, &self, have_self);
            p = *end ? end + 1 : end;
        }
        for (int f = 0; fallback[f] && !hit; f++)
            if (!on_path(path, fallback[f], slen(fallback[f])))
                hit = in_dir(fallback[f], slen(fallback[f]), name, &self, have_self);
        if (hit)
            return hit;
    }
    return 0;
}

/* Whether config.toml at path is still what the cache recorded: absent ("-"), or readable
 * by us (as Python's open) with the recorded identity and exactly the recorded bytes.  The
 * identity alone is not enough: timestamps are only as fine as the filesystem keeps them
 * (1 s on ext4 with 128-byte inodes), so a same-size rewrite in the same tick keeps it. */
static int same_config(const char *path, const char *key, const char *content)
{
    long fd = sys3(SYS_open, (long)path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return fd == -ENOENT && seq(key, "-");
    struct kstat st;
    long got = 0, r = 0, want = (long)slen(content);
    int ok = sys3(SYS_fstat, fd, (long)&st, 0) == 0 && seq(stat_key(&st), key) && st.size == want;
    while (ok && got <= want && (r = sys3(SYS_read, fd, (long)confbuf + got, CACHE_MAX + 1 - got)) > 0)
        got += r;
    sys3(SYS_close, fd, 0, 0);
    if (!ok || r != 0 || got != want)
        return 0;
    for (long i = 0; i < want; i++)
        if (confbuf[i] != content[i])
            return 0;
    return 1;
}

/* Every ignored signal back to default and an empty mask, as nct.sigreset does before exec
 * (32 and 33 are glibc's own, which Python cannot touch: left as they are). */
static void default_signals(void)
{
    struct { unsigned long handler, flags, restorer, mask; } act, old;
    for (long sig = 1; sig <= 64; sig++) {
        if (sig == 9 || sig == 19 || sig == 32 || sig == 33)
            continue;
        if (sys4(SYS_rt_sigaction, sig, 0, (long)&old, 8) == 0 && old.handler == 1) {
            memset(&act, 0, sizeof act);
            sys4(SYS_rt_sigaction, sig, (long)&act, 0, 8);
        }
    }
    unsigned long none = 0;
    sys4(SYS_rt_sigprocmask, 2, (long)&none, 0, 8); /* SIG_SETMASK */
}

/* Exec the low-level runtime directly when everything the cache says still holds; returns
 * (and the caller starts Python) on any doubt. */
static void fast_passthrough(const char *dir, long argc, char **argv, char **env)
{
    const char *logfile;
    if (argc < 2 || !plain_passthrough(argc, argv, &logfile) || !env_plain(env))
        return;
    /* the cache: a regular file (not a symlink) owned by root or by us, writable by no one else */
    if (!cat3(cand, sizeof cand, dir, "/python/.passthrough-cache", ""))
        return;
    long fd = sys3(SYS_open, (long)cand, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
    if (fd < 0)
        return;
    struct kstat st;
    long n = -1;
    unsigned int euid = (unsigned int)sys3(SYS_geteuid, 0, 0, 0);
    if (sys3(SYS_fstat, fd, (long)&st, 0) == 0 && (st.mode & S_IFMT) == S_IFREG && !(st.mode & 022) &&
        (st.uid == 0 || st.uid == euid) && st.size > 0 && st.size <= CACHE_MAX) {
        long got = 0, r;
        while (got < st.size && (r = sys3(SYS_read, fd, (long)cache + got, st.size - got)) > 0)
            got += r;
        n = got == st.size ? got : -1;
    }
    sys3(SYS_close, fd, 0, 0);
    if (n <= 0 || cache[n - 1] != '\0')
        return;
    /* NUL-separated fields: magic, toolkit key, NVIDIA_CTK_CONFIG_FILE_PATH, XDG_CONFIG_HOME,
     * config path, config key ("-": absent), config content, debug file, runtime count,
     * runtimes..., "end" */
    int nf = 0;
    for (long i = 0; i < n && nf < MAX_FIELDS; i++) {
        field[nf++] = cache + i;
        while (cache[i])
            i++;
    }
    if (nf < 10 || !seq(field[0], "nct-passthrough 2"))
        return;
    int count = 0;
    for (const char *p = field[8]; *p; p++) {
        if (*p < '0' || *p > '9' || count > 40)
            return;
        count = count * 10 + (*p - '0');
    }
    if (count < 1 || nf != 10 + count || !seq(field[9 + count], "end"))
        return;
    /* the same toolkit (python/ replaced on upgrade: a new marker inode) */
    if (!cat3(cand, sizeof cand, dir, "/python/NCT-TOOLKIT", "") || sys3(SYS_stat, (long)cand, (long)&st, 0) != 0 ||
        !seq(stat_key(&st), field[1]))
        return;
    /* the same config file, found the same way */
    int dup = 0;
    const char *explicit = getenv_once(env, "NVIDIA_CTK_CONFIG_FILE_PATH=", &dup);
    const char *xdg = getenv_once(env, "XDG_CONFIG_HOME=", &dup);
    const char *path = getenv_once(env, "PATH=", &dup);
    if (dup || !seq(explicit ? explicit : "", field[2]) || !seq(xdg ? xdg : "", field[3]))
        return;
    if (!same_config(field[4], field[5], field[6]))
        return;
    if (!touch_log(field[7]) || !touch_log(logfile))
        return;
    const char *runtime = find_runtime(field + 9, count, path, argv[0]);
    if (!runtime)
        return;
    char *args[argc + 1];
    args[0] = (char *)runtime;
    for (long i = 1; i < argc; i++)
        args[i] = argv[i];
    args[argc] = 0;
    default_signals();
    sys3(SYS_execve, (long)runtime, (long)args, (long)env); /* failed: Python reports it */
}

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
    const char *path = "/usr/sbin:/usr/bin:/sbin:/bin";
    for (size_t i = 0; i < envc; i++)
        if (prefix(envp[i], "PATH="))
            path = envp[i] + 5;
    char newpath[slen(exe) + slen(path) + 8]; /* PATH=<exe>:<path>: any length the kernel took */
    long fd = sys3(SYS_open, (long)conf, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (fd >= 0) {
        sys3(SYS_close, fd, 0, 0);
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

    if (prefix(name, "nvidia-container-runtime") &&
        (seq(name + 24, "") || seq(name + 24, ".cdi") || seq(name + 24, ".legacy")))
        fast_passthrough(exe, argc, argv, env);

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
