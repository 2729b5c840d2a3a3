"""PGO training for the toolkit's CPython (build_runtime.sh PGO=train, PROFILE_TASK): what the
toolkit's commands do.  Stdlib work (start an isolated interpreter, import the modules nct's
paths import, read TOML and JSON, match regexes, stat and walk paths) and, given nct's source
directory as argv[1], nct's own hot paths started the way the launchers start them
(`-I -S -c <entry>`): the prestart hook on a bundle that asks for no GPU and on one asking for
`NVIDIA_VISIBLE_DEVICES=all` (no driver here: it stops at the driver lookup, after the config
read and the spec parse), and the runtime shim's pass-through `state` (to a stub runc).  Cheap
(seconds), unlike CPython's default test-suite task.  The profile it leaves is committed
(prebuilt/*-pgo-profile.tar.xz), so its run-to-run variation does not reach the default build."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib

IMPORTS = ("import os, sys, json, re, stat, errno, struct, signal, fcntl, typing, enum, functools, "
           "collections, pathlib, subprocess, tomllib, shlex, hashlib, base64, ctypes, argparse, "
           "dataclasses, textwrap, datetime, tempfile, shutil, glob, fnmatch, contextlib, io, zlib")
# the launchers' -c entry (launcher.c RUN), with the source directory put first on sys.path
ENTRY = "import sys;del sys.argv[0];sys.path[:0]=[{src!r}];from {mod} import {fn};sys.exit({fn}())"


def work() -> None:
    doc = tomllib.loads('[a]\nx = 1\ny = ["p", "q"]\n[b.c]\nz = "s"\n' * 20)
    spec = {"ociVersion": "1.0.2", "process": {"env": [f"K{i}=v{i}" for i in range(50)], "args": ["sh"]},
            "mounts": [{"destination": f"/m{i}", "type": "bind", "source": f"/s{i}"} for i in range(50)],
            "doc": str(doc)}
    for _ in range(200):
        text = json.dumps(spec, indent=1)
        back = json.loads(text)
        [re.match(r"^([A-Z_]+)=(.*)$", e) for e in back["process"]["env"]]
    for _ in range(3):
        for root, dirs, files in os.walk(os.path.dirname(os.__file__)):
            for f in files:
                os.stat(os.path.join(root, f))


def _bundle(base: str, name: str, env: list[str]) -> str:
    """A bundle whose config.json has what a busybox container's has (runc spec's shape)."""
    bundle = os.path.join(base, name)
    for d in ("bin", "proc", "sys", "dev", "tmp", "etc"):
        os.makedirs(os.path.join(bundle, "rootfs", d), exist_ok=True)
    spec = {"ociVersion": "1.0.2",
            "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": ["true"], "cwd": "/",
                        "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                "TERM=xterm", *env],
                        "capabilities": {k: ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
                                         for k in ("bounding", "effective", "permitted", "ambient")},
                        "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
                        "noNewPrivileges": True},
            "root": {"path": "rootfs", "readonly": True}, "hostname": "runc",
            "mounts": [{"destination": d, "type": t, "source": t, "options": ["nosuid", "noexec"]}
                       for d, t in (("/proc", "proc"), ("/dev", "tmpfs"), ("/sys", "sysfs"))],
            "linux": {"namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount")],
                      "maskedPaths": ["/proc/kcore", "/proc/keys", "/sys/firmware"],
                      "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/sys"]}}
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(spec, f)
    return bundle


def nct_paths(src: str, rounds: int) -> None:
    """The hook and the shim's pass-through, as the launchers run them."""
    base = tempfile.mkdtemp(prefix="pgo-nct-")
    try:
        xdg = os.path.join(base, "xdg")
        os.makedirs(os.path.join(xdg, "nvidia-container-runtime"))
        config = os.path.join(xdg, "nvidia-container-runtime", "config.toml")
        shutil.copy(os.path.join(src, "config.toml"), config)
        stub = os.path.join(base, "bin")
        os.makedirs(stub)
        with open(os.path.join(stub, "runc"), "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(os.path.join(stub, "runc"), 0o755)
        env = {"PATH": f"{stub}:/usr/sbin:/usr/bin:/sbin:/bin", "XDG_CONFIG_HOME": xdg}
        hook = ENTRY.format(src=src, mod="nct.hook.main", fn="main")
        shim = ENTRY.format(src=src, mod="nct.runtime.main", fn="main")
        runs = []
        for name, extra in (("plain", []), ("gpu", ["NVIDIA_VISIBLE_DEVICES=all"])):
            bundle = _bundle(base, name, extra)
            state = json.dumps({"ociVersion": "1.0.2", "id": name, "pid": os.getpid(), "bundle": bundle,
                                "status": "creating"}).encode()
            runs.append(([sys.executable, "-I", "-S", "-c", hook, "nvidia-container-runtime-hook",
                          "-config", config, "prestart"], state))
        runs.append(([sys.executable, "-I", "-S", "-c", shim, "nvidia-container-runtime", "--root",
                      os.path.join(base, "runc-root"), "state", "plain"], None))
        for _ in range(rounds):
            for cmd, stdin in runs:
                subprocess.run(cmd, input=stdin, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, check=False)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    work()
    for _ in range(30):
        subprocess.run([sys.executable, "-s", "-S", "-c", IMPORTS], env={"PYTHONHASHSEED": "0"}, check=False)
    if len(sys.argv) > 1:
        nct_paths(sys.argv[1], 40)
