"""Golden CDI specs and jit-cdi OCI specs of simulated nodes.

Builds `nct sim` nodes (1, 8 and 64 GPUs, a MIG node), runs the installed commands on them
(`nvidia-ctk cdi generate`, the `nvidia-container-runtime` shim's `create` in jit-cdi and
legacy mode) and returns each output as bytes, with the one thing that varies from run to
run, the directory the nodes live in, replaced by `@SIM@`. UUIDs are fixed by each node's
seed. To keep the repository small, only a few representative outputs are stored in full
(FULL); the others as their SHA-256 and size (a failing test writes the actual outputs
out for a diff against `git stash; python tests/golden/specgen.py`).

`python tests/golden/specgen.py` rewrites tests/golden/data from the current code: do it
only for a change that is meant to change the output, and say why in the commit.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
DATA = Path(__file__).parent / "data"
HOOK = "/usr/bin/nvidia-cdi-hook"
CTK = "/usr/bin/nvidia-ctk"
PRESTART = "/usr/bin/nvidia-container-runtime-hook"
# Outputs stored in full; every other one as `NAME.sha256`.
FULL = frozenset({
    "generate-n1-default.yaml", "generate-mig-default.yaml", "generate-n8-gds.yaml", "generate-n8-mofed.yaml",
    "generate-n8-gdrcopy.json", "generate-n8-nvswitch.yaml", "generate-n8-imex.yaml",
    "runtime-n1-jit-cdi-all.json", "runtime-mig-jit-cdi-mig-index.json", "runtime-n8-jit-cdi-gated.json",
    "runtime-n8-legacy-legacy-gated-graphics.json",
})

# name -> `nct sim create` arguments
NODES = {
    "n1": ["--gpus", "1"],
    "n8": ["--gpus", "8", "--imex-channels", "4"],
    "n64": ["--gpus", "64"],
    "mig": ["--gpus", "2", "--mig", "1:3"],
}

# Device-class nodes made in the 8-GPU node's /dev (the sim has none): gds, mofed,
# gdrcopy, nvswitch; and the files gds mounts.
CLASS_NODES = (("nvidia-fs0", 241, 0), ("nvidia-fs1", 241, 1), ("infiniband/uverbs0", 231, 192),
               ("infiniband/rdma_cm", 10, 58), ("gdrdrv", 240, 0), ("nvidia-nvswitchctl", 507, 255),
               ("nvidia-nvswitch0", 507, 0), ("nvidia-nvswitch1", 507, 1))

# (case name, node, extra `cdi generate` arguments)
GENERATE = [
    ("default", "n1", ["--format", "yaml"]),
    ("default", "n1", ["--format", "json"]),
    ("default", "n8", ["--format", "yaml"]),
    ("default", "n8", ["--format", "json"]),
    ("type-index-uuid", "n8", ["--format", "yaml", "--device-name-strategy", "type-index",
                               "--device-name-strategy", "uuid"]),
    ("no-all-device-ids", "n8", ["--format", "json", "--no-all-device", "--device-id", "3",
                                 "--device-id", "1"]),
    ("management", "n8", ["--format", "yaml", "--mode", "management"]),
    ("imex", "n8", ["--format", "yaml", "--mode", "imex", "--device-id", "all"]),
    ("gds", "n8", ["--format", "yaml", "--mode", "gds"]),
    ("mofed", "n8", ["--format", "yaml", "--mode", "mofed"]),
    ("gdrcopy", "n8", ["--format", "json", "--mode", "gdrcopy"]),
    ("nvswitch", "n8", ["--format", "yaml", "--mode", "nvswitch"]),
    ("vendor-class-hooks", "n8", ["--format", "yaml", "--vendor", "example.com", "--class", "dev",
                                  "--disable-hook", "create-symlinks", "--enable-hook", "chmod"]),
    ("default", "mig", ["--format", "yaml"]),
    ("default", "mig", ["--format", "json"]),
    ("index-only", "mig", ["--format", "yaml", "--device-name-strategy", "index"]),
    ("management", "mig", ["--format", "json", "--mode", "management"]),
    ("default", "n64", ["--format", "yaml"]),
    ("default", "n64", ["--format", "json"]),
]

# (case name, node, runtime mode, container env)
UUID = "@UUID:{node}:{index}@"  # replaced by the GPU's UUID from node.json
MIG_UUID = "@MIGUUID:{node}:{gpu}:{ordinal}@"
RUNTIME = [
    ("all", "n1", "jit-cdi", ["NVIDIA_VISIBLE_DEVICES=all"]),
    ("all", "n8", "jit-cdi", ["NVIDIA_VISIBLE_DEVICES=all"]),
    ("subset", "n8", "jit-cdi", ["NVIDIA_VISIBLE_DEVICES=3,1", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]),
    ("uuid", "n8", "jit-cdi", [f"NVIDIA_VISIBLE_DEVICES={UUID.format(node='n8', index=5)}"]),
    ("qualified", "n8", "jit-cdi", ["NVIDIA_VISIBLE_DEVICES=runtime.nvidia.com/gpu=2"]),
    ("graphics", "n8", "jit-cdi", ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=graphics"]),
    ("caps-all", "n8", "jit-cdi", ["NVIDIA_VISIBLE_DEVICES=0,7", "NVIDIA_DRIVER_CAPABILITIES=all"]),
    ("none", "n8", "jit-cdi", ["NVIDIA_VISIBLE_DEVICES=none"]),
    ("imex", "n8", "jit-cdi", ["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_IMEX_CHANNELS=0,2"]),
    ("imex-all", "n8", "jit-cdi", ["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_IMEX_CHANNELS=all"]),
    ("gated", "n8", "jit-cdi", ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDS=enabled", "NVIDIA_MOFED=enabled",
                                "NVIDIA_GDRCOPY=enabled", "NVIDIA_NVSWITCH=enabled"]),
    ("legacy-gated-graphics", "n8", "legacy", ["NVIDIA_VISIBLE_DEVICES=2,4", "NVIDIA_DRIVER_CAPABILITIES=all",
                                              "NVIDIA_GDS=enabled", "NVIDIA_MOFED=enabled"]),
    ("all", "mig", "jit-cdi", ["NVIDIA_VISIBLE_DEVICES=all"]),
    ("mig-index", "mig", "jit-cdi", ["NVIDIA_VISIBLE_DEVICES=1:0,1:2"]),
    ("mig-uuid", "mig", "jit-cdi", [f"NVIDIA_VISIBLE_DEVICES={MIG_UUID.format(node='mig', gpu=1, ordinal=1)}",
                                    "NVIDIA_DRIVER_CAPABILITIES=all"]),
    ("gpu-and-mig", "mig", "jit-cdi", ["NVIDIA_VISIBLE_DEVICES=0,1:1"]),
    ("all", "n64", "jit-cdi", ["NVIDIA_VISIBLE_DEVICES=all"]),
    ("subset", "n64", "jit-cdi", ["NVIDIA_VISIBLE_DEVICES=63,0,31"]),
]


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        raise FileNotFoundError(f"{name} is not installed next to {sys.executable} (pip install -e .)")
    return str(path)


def build_nodes(base: Path) -> dict[str, Path]:
    """The simulated nodes under `base` (root needed: the sim and the class nodes mknod)."""
    out = {}
    for name, args in NODES.items():
        d = base / name
        subprocess.run([_tool("nct"), "sim", "create", str(d), "--seed", name, *args], check=True,
                       capture_output=True, text=True)
        out[name] = d
    root = out["n8"] / "root"
    for rel, major, minor in CLASS_NODES:
        path = root / "dev" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))
    (root / "etc/cufile.json").write_text("{}\n")
    (root / "run/udev").mkdir(parents=True, exist_ok=True)
    return out


def _env(base: Path, node: Path, **extra: str) -> dict[str, str]:
    env = {"PATH": f"{BIN}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(base),
           "NCT_PROC_ROOT": str(node / "root" / "proc"), "LC_ALL": "C.UTF-8"}
    env.update(extra)
    return env


def _substitute(text: str, nodes: dict[str, Path]) -> str:
    """UUID placeholders of the case tables -> the nodes' UUIDs."""
    for name, d in nodes.items():
        if "@" not in text:
            break
        info = json.loads((d / "node.json").read_text())
        for g in info["gpus"]:
            text = text.replace(UUID.format(node=name, index=g["index"]), g["uuid"])
            for m in g.get("migs") or []:
                key = MIG_UUID.format(node=name, gpu=g["index"], ordinal=m.get("ordinal", m.get("index")))
                if key in text and m.get("uuid"):
                    text = text.replace(key, m["uuid"])
    return text


def normalise(data: bytes, base: Path) -> bytes:
    return data.replace(str(base).encode(), b"@SIM@")


def generate_case(base: Path, nodes: dict[str, Path], node: str, args: list[str]) -> bytes:
    root = nodes[node] / "root"
    r = subprocess.run([_tool("nvidia-ctk"), "cdi", "generate", "--driver-root", str(root),
                        "--nvidia-cdi-hook-path", HOOK, *args],
                       env=_env(base, nodes[node], NVIDIA_CTK_CONFIG_FILE_PATH=str(base / "absent.toml")),
                       capture_output=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"cdi generate {args} on {node} failed: {r.stderr.decode()}")
    return normalise(r.stdout, base)


def runtime_case(base: Path, nodes: dict[str, Path], case: str, node: str, mode: str, env: list[str]) -> bytes:
    work = base / "bundles" / f"{node}-{mode}-{case}"
    work.mkdir(parents=True)
    config = work / "config.toml"
    config.write_text(
        f'[nvidia-container-cli]\nroot = "{nodes[node]}/root"\n'
        f'[nvidia-container-runtime]\nmode = "{mode}"\nruntimes = ["/bin/true"]\n'
        f'[nvidia-ctk]\npath = "{CTK}"\n[nvidia-container-runtime-hook]\npath = "{PRESTART}"\n')
    spec = {
        "ociVersion": "1.0.2",
        "process": {"user": {"uid": 0, "gid": 0}, "args": ["sh"], "cwd": "/",
                    "env": ["PATH=/usr/bin:/bin", *(_substitute(e, nodes) for e in env)]},
        "root": {"path": "rootfs"},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
        "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}]},
    }
    bundle = work / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps(spec, indent=1))
    r = subprocess.run([_tool("nvidia-container-runtime"), "create", "--bundle", str(bundle), "ctr"],
                       env=_env(base, nodes[node], NVIDIA_CTK_CONFIG_FILE_PATH=str(config)),
                       capture_output=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"runtime create {case} on {node} failed: {r.stderr.decode()}")
    return normalise((bundle / "config.json").read_bytes(), base)


def cases() -> list[tuple[str, str, str, object]]:
    """(file name, kind, node, case arguments) of every golden output."""
    out = []
    for case, node, args in GENERATE:
        fmt = args[args.index("--format") + 1]
        out.append((f"generate-{node}-{case}.{fmt}", "generate", node, args))
    for case, node, mode, env in RUNTIME:
        out.append((f"runtime-{node}-{mode}-{case}.json", "runtime", node, (case, mode, env)))
    return out


def produce(base: Path) -> dict[str, bytes]:
    """Every golden output (file name -> normalised bytes) on nodes built under `base`."""
    nodes = build_nodes(base)
    out = {}
    for name, kind, node, args in cases():
        if kind == "generate":
            out[name] = generate_case(base, nodes, node, args)  # type: ignore[arg-type]
        else:
            case, mode, env = args  # type: ignore[misc]
            out[name] = runtime_case(base, nodes, case, node, mode, env)
    return out


def stored_name(name: str) -> str:
    """The file under DATA holding `name`'s output: itself, or `name.sha256` when hashed."""
    return name if name in FULL else name + ".sha256"


def stored_form(name: str, data: bytes) -> bytes:
    if stored_name(name) != name:
        return f"{hashlib.sha256(data).hexdigest()}  {len(data)}\n".encode()
    return data


def main() -> int:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="nct-golden-") as tmp:
        outputs = produce(Path(tmp))
    DATA.mkdir(exist_ok=True)
    for old in DATA.iterdir():
        old.unlink()
    for name, data in outputs.items():
        (DATA / stored_name(name)).write_bytes(stored_form(name, data))
    print(f"wrote {len(outputs)} golden outputs to {DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
