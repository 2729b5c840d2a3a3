"""issue 12 #12: ldconfig, started from a Python process (which ignores SIGPIPE and SIGXFSZ),
gets every signal at its default disposition and none blocked. A static stand-in ldconfig
asks the kernel (sigaction, sigprocmask: /proc is hidden from it) and writes the answer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from realparts import needs_gcc, needs_root

PROBE = r'''
#include <signal.h>
#include <stdio.h>
int main(void) {
    unsigned long long ign = 0, blk = 0;
    sigset_t set;
    for (int s = 1; s < 64; s++) {
        struct sigaction sa;
        if (sigaction(s, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN) ign |= 1ULL << (s - 1);
    }
    sigprocmask(SIG_BLOCK, NULL, &set);
    for (int s = 1; s < 64; s++) if (sigismember(&set, s) == 1) blk |= 1ULL << (s - 1);
    FILE *out = fopen("/ldconfig.out", "w");
    if (!out) return 3;
    fprintf(out, "%llx %llx\n", ign, blk);
    return fclose(out) ? 4 : 0;
}
'''


@needs_root
@needs_gcc
def test_ldconfig_gets_default_signals(tmp_path, rootfs):
    src = tmp_path / "probe.c"
    src.write_text(PROBE)
    dst = os.path.join(rootfs, "sbin", "ldconfig")
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.lexists(dst):
        os.unlink(dst)
    subprocess.run(["gcc", "-O1", "-static", "-o", dst, str(src)], check=True)
    code = textwrap.dedent(f"""
        import signal
        signal.signal(signal.SIGHUP, signal.SIG_IGN)            # as an engine might pass it
        signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGUSR1}})
        from nct.container import ldconfig as L
        from nct.container.rootfs import Root
        with Root({rootfs!r}) as r:
            L.run_ldconfig(r, ["/usr/lib/x86_64-linux-gnu"], ldconfig="/sbin/ldconfig", write_conf=True)
        print("OK")
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    assert res.stdout.strip() == "OK", res.stdout + res.stderr
    ign, blk = (int(x, 16) for x in open(os.path.join(rootfs, "ldconfig.out")).read().split())
    assert ign == 0, f"ignored: {[signal.Signals(s).name for s in range(1, 64) if ign >> (s - 1) & 1]}"
    assert blk == 0, f"blocked: {[s for s in range(1, 64) if blk >> (s - 1) & 1]}"


MODPROBE_PROBE = PROBE.replace('FILE *out = fopen("/ldconfig.out", "w");\n    if (!out) return 3;\n', "FILE *out = stderr;\n")


@needs_root
@needs_gcc
def test_modprobe_gets_default_signals(tmp_path):
    """nvidia-container-cli --load-kmods / the hook run `[chroot ROOT] /sbin/modprobe`: a static
    stand-in reports its signal state on stderr (which run_modprobe hands back)."""
    root = tmp_path / "driver-root"
    (root / "sbin").mkdir(parents=True)
    src = tmp_path / "modprobe.c"
    src.write_text(MODPROBE_PROBE)
    subprocess.run(["gcc", "-O1", "-static", "-o", str(root / "sbin" / "modprobe"), str(src)], check=True)
    code = textwrap.dedent(f"""
        import signal
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.pthread_sigmask(signal.SIG_BLOCK, {{signal.SIGUSR1}})
        from nct.nodeprep.devinit import run_modprobe
        print(run_modprobe({str(root)!r}, "nvidia"))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    status, last = eval(res.stdout)  # noqa: S307 - our own repr of (int, str)
    assert status == 0, last
    assert last.split() == ["0", "0"], last
