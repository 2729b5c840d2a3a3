"""A kernel without the new mount API, for tests on a new one: `oldkernel PROG ARGS...` execs
PROG under a seccomp filter that answers ENOSYS to open_tree, move_mount, fsopen, fsconfig,
fsmount, openat2 and mount_setattr (none exists before Linux 5.2/5.6/5.12; RHEL 8 runs 4.18),
for PROG and everything it starts. nct must then take its mount(2) and O_NOFOLLOW-walk paths."""

from __future__ import annotations

import subprocess
from pathlib import Path

ENOSYS_SYSCALLS = (428, 429, 430, 431, 432, 437, 442)  # x86_64 = generic numbers for these

SOURCE = r"""
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/prctl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>

#define ENOSYS_FOR(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), \
                       BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS)

int main(int argc, char **argv) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        %(rules)s
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof f / sizeof f[0], f};
    if (argc < 2) { fprintf(stderr, "usage: oldkernel PROG ARGS...\n"); return 2; }
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) { perror("oldkernel: seccomp"); return 1; }
    execv(argv[1], argv + 1);
    perror(argv[1]);
    return 127;
}
"""


def build(path: Path) -> Path:
    src = path.with_suffix(".c")
    src.write_text(SOURCE % {"rules": " ".join(f"ENOSYS_FOR({nr})," for nr in ENOSYS_SYSCALLS)})
    subprocess.run(["gcc", "-O1", "-o", str(path), str(src)], check=True)
    return path
