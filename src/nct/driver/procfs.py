"""Parsers for the NVIDIA kernel module's procfs files.

Each `parse_*` function takes the file's text (pure, tested on captured contents) and the
path it came from (only for error messages); `read_*` helpers add the thin file access.
Garbage raises DiscoveryError naming the file and the line at fault.
"""

from __future__ import annotations

import os
from nct.errors import DiscoveryError
from nct.record import Record

# Paths relative to the proc root.
VERSION_FILE = "driver/nvidia/version"
GPUS_DIR = "driver/nvidia/gpus"
CAPABILITIES_DIR = "driver/nvidia/capabilities"
MIG_MINORS_FILE = "driver/nvidia-caps/mig-minors"
DEVICES_FILE = "devices"

_HEX = frozenset("0123456789abcdefABCDEF")


class DriverVersion(Record):
    """/proc/driver/nvidia/version: the NVRM version and whether it is the open module."""

    version: str
    open_module: bool
    line: str  # the full NVRM line, for logs


class GpuInfo(Record):
    """One /proc/driver/nvidia/gpus/<bus>/information file. bus_id is normalised (8-digit
    domain, lower case: "00000000:01:00.0"); firmware is "GPU Firmware" (GSP), when present."""

    model: str
    uuid: str
    bus_id: str
    minor: int
    excluded: bool = False
    irq: int | None = None
    video_bios: str | None = None
    bus_type: str | None = None
    firmware: str | None = None


class CapabilityFile(Record):
    """A file of the capabilities tree (e.g. .../gpu0/mig/gi1/access). mode is the
    DeviceFileMode (decimal in the file), e.g. 256 = 0o400."""

    minor: int
    mode: int
    modify: bool = True


def _fail(path: str, lineno: int | None, what: str) -> DiscoveryError:
    where = f"{path}:{lineno}" if lineno else path
    return DiscoveryError(f"{where}: {what}")


def read_text(path: str) -> str:
    """Read a small proc/sys file; OS errors become DiscoveryError naming the file."""
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 20)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise DiscoveryError(f"cannot read {path}: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise DiscoveryError(f"{path}: not a text file") from None


def split_pci_address(value: str) -> tuple[int, int, int, int | None] | None:
    """'DDDDDDDD:BB:DD.F' with 1-8, 1-2, 1-2 hex digits and an optional function 0-7 ->
    (domain, bus, device, function or None); None when `value` is not such an address."""
    head, dot, fn = value.partition(".")
    parts = head.split(":")
    if len(parts) != 3 or (dot and (len(fn) != 1 or fn not in "01234567")):
        return None
    for part, most in zip(parts, (8, 2, 2)):
        if not 1 <= len(part) <= most or not set(part) <= _HEX:
            return None
    return int(parts[0], 16), int(parts[1], 16), int(parts[2], 16), int(fn) if dot else None


def normalise_bus_id(value: str) -> str | None:
    """'0:1:0.0' / '0000:01:00.0' / '00000000:01:00' -> '00000000:01:00.0', NVML's form, as
    libnvidia-container matches a requested bus id (the function is optional and taken
    as 0: a GPU is function 0); None when `value` is not a PCI address with a domain.
    The one normaliser: device selection, NVML's and procfs' bus ids."""
    pci = split_pci_address(value.strip())
    if pci is None:
        return None
    return f"{pci[0]:08x}:{pci[1]:02x}:{pci[2]:02x}.0"


def _driver_version(text: str) -> str | None:
    """The first version number (N.N or N.N.N) standing alone in `text`: a maximal run of
    word characters and dots that is made of digits and dots only."""
    run = ""
    for ch in text + " ":
        if ch.isalnum() or ch in "._":
            run += ch
            continue
        parts = run.split(".")
        if 2 <= len(parts) <= 3 and all(p.isascii() and p.isdigit() for p in parts):
            return run
        run = ""
    return None


def parse_version(text: str, path: str = VERSION_FILE) -> DriverVersion:
    """Find the NVRM line and the version in it (proprietary and open module layouts)."""
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.startswith("NVRM version:"):
            continue
        rest = line[len("NVRM version:"):]
        version = _driver_version(rest)
        if version is None:
            raise _fail(path, lineno, f"no driver version in {line.strip()!r}")
        return DriverVersion(version, "Open Kernel Module" in rest, line.strip())
    raise _fail(path, None, "no 'NVRM version:' line")


def _key_values(text: str, path: str) -> list[tuple[int, str, str]]:
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep or not key.strip():
            raise _fail(path, lineno, f"expected 'Key: value', got {line.strip()[:60]!r}")
        rows.append((lineno, key.strip(), value.strip()))
    return rows


def _int(value: str, path: str, lineno: int, key: str) -> int:
    try:
        return int(value, 0) if value.lower().startswith("0x") else int(value)
    except ValueError:
        raise _fail(path, lineno, f"{key} is not a number: {value[:40]!r}") from None


def parse_gpu_information(text: str, path: str = "information") -> GpuInfo:
    """A GPU's information file; Model, GPU UUID, Bus Location and Device Minor are required."""
    fields: dict[str, tuple[int, str]] = {}
    for lineno, key, value in _key_values(text, path):
        fields[key] = (lineno, value)
    for required in ("Model", "GPU UUID", "Bus Location", "Device Minor"):
        if required not in fields:
            raise _fail(path, None, f"missing '{required}'")
    lineno, bus = fields["Bus Location"]
    bus_id = normalise_bus_id(bus)
    if bus_id is None or "." not in bus:  # the driver always writes the function
        raise _fail(path, lineno, f"bad Bus Location {bus[:40]!r}")
    lineno, minor_s = fields["Device Minor"]
    minor = _int(minor_s, path, lineno, "Device Minor")
    if not 0 <= minor < 256:
        raise _fail(path, lineno, f"Device Minor out of range: {minor}")
    lineno, uuid = fields["GPU UUID"]
    if not uuid or " " in uuid:
        raise _fail(path, lineno, f"bad GPU UUID {uuid[:60]!r}")
    excluded = fields.get("GPU Excluded", (0, "No"))[1].lower() in ("yes", "1", "true")
    irq = None
    if "IRQ" in fields:
        lineno, v = fields["IRQ"]
        irq = _int(v, path, lineno, "IRQ")
    return GpuInfo(
        model=fields["Model"][1], uuid=uuid, bus_id=bus_id, minor=minor, excluded=excluded, irq=irq,
        video_bios=fields.get("Video BIOS", (0, None))[1], bus_type=fields.get("Bus Type", (0, None))[1],
        firmware=fields.get("GPU Firmware", (0, None))[1],
    )


def parse_devices(text: str, path: str = DEVICES_FILE) -> dict[str, int]:
    """/proc/devices: name -> major of the 'Character devices:' section only."""
    majors: dict[str, int] = {}
    section = None
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        if s.endswith(":") and s[:-1] in ("Character devices", "Block devices"):
            section = s[:-1]
            continue
        if section is None:
            raise _fail(path, lineno, f"expected 'Character devices:', got {s[:60]!r}")
        parts = s.split(None, 1)
        if len(parts) != 2 or not parts[0].isdigit():
            raise _fail(path, lineno, f"expected 'MAJOR name', got {s[:60]!r}")
        if section == "Character devices":
            majors.setdefault(parts[1], int(parts[0]))
    if section is None:
        raise _fail(path, None, "no 'Character devices:' section")
    return majors


def parse_capability(text: str, path: str) -> CapabilityFile:
    """A capabilities tree file: DeviceFileMinor / DeviceFileMode / DeviceFileModify."""
    fields = {}
    for lineno, key, value in _key_values(text, path):
        fields[key] = _int(value, path, lineno, key)
    if "DeviceFileMinor" not in fields:
        raise _fail(path, None, "missing 'DeviceFileMinor'")
    return CapabilityFile(
        minor=fields["DeviceFileMinor"], mode=fields.get("DeviceFileMode", 0o444) & 0o7777,
        modify=bool(fields.get("DeviceFileModify", 1)),
    )


# The bytes str.split() separates ASCII words on; all others are dropped to see the layout.
_SPACES = b" \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f"
_NOT_SPACES = bytes(sorted(set(range(256)) - set(_SPACES)))


def _driver_layout_words(text: str) -> list[str] | None:
    """The words of a mig-minors text in the driver's own layout ('NAME MINOR' lines: ASCII,
    one space each, newline terminated, the minor digits), checked by whole-text operations
    (a real file has ~4300 lines: 32 GPUs x 15 GIs x 8 CIs, read on every discovery); None
    for anything else (blank lines, tabs, garbage), which goes line by line."""
    if not text.isascii() or not text.endswith("\n") or text.startswith(" ") or " \n" in text or "\n " in text:
        return None
    if text.encode().translate(None, _NOT_SPACES) != b" \n" * text.count("\n"):
        return None
    words = text.split()  # two per line, by the layout above
    return words if "".join(words[1::2]).isdigit() else None


def check_mig_minors(text: str, path: str = MIG_MINORS_FILE) -> None:
    """Raise DiscoveryError (naming the file and line) for garbage in a mig-minors text;
    for callers that do not use the minors (discovery validates the file)."""
    if _driver_layout_words(text) is None:
        parse_mig_minors(text, path)


def parse_mig_minors(text: str, path: str = MIG_MINORS_FILE) -> dict[str, int]:
    """/proc/driver/nvidia-caps/mig-minors: 'config 1', 'gpu0/gi1/ci0/access 9' -> name: minor."""
    words = _driver_layout_words(text)
    if words is not None:
        return dict(zip(words[0::2], map(int, words[1::2])))
    minors: dict[str, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s:
            continue
        parts = s.split()
        if len(parts) != 2 or not (parts[1].isascii() and parts[1].isdigit()):
            raise _fail(path, lineno, f"expected 'NAME MINOR', got {s[:60]!r}")
        minors[parts[0]] = int(parts[1])
    return minors


class MigCaps(Record):
    """One MIG compute instance as the capabilities tree shows it (gpuN is the GPU minor)."""

    gpu_minor: int
    gi: int
    ci: int
    gi_access_path: str
    ci_access_path: str
    gi_access: CapabilityFile
    ci_access: CapabilityFile


def numbered(entries: list[str], prefix: str) -> list[tuple[int, str]]:
    """(number, name) of the entries named prefix + digits, in number order."""
    out = []
    for name in entries:
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            out.append((int(name[len(prefix):]), name))
    return sorted(out)


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        raise DiscoveryError(f"{path}: not a directory") from None
    except OSError as e:
        raise DiscoveryError(f"cannot list {path}: {e.strerror or e}") from None


def read_capability(path: str) -> CapabilityFile:
    return parse_capability(read_text(path), path)


def scan_mig_caps(caps_dir: str, gpu_minor: int) -> list[MigCaps]:
    """Walk <caps_dir>/gpu<minor>/mig/gi*/ci*/access (capabilities tree of one GPU)."""
    mig_dir = os.path.join(caps_dir, f"gpu{gpu_minor}", "mig")
    found = []
    for gi, gi_name in numbered(_listdir(mig_dir), "gi"):
        gi_dir = os.path.join(mig_dir, gi_name)
        gi_access_path = os.path.join(gi_dir, "access")
        if not os.path.isfile(gi_access_path):
            continue
        gi_access = read_capability(gi_access_path)
        for ci, ci_name in numbered(_listdir(gi_dir), "ci"):
            ci_access_path = os.path.join(gi_dir, ci_name, "access")
            if not os.path.isfile(ci_access_path):
                continue
            found.append(MigCaps(gpu_minor, gi, ci, gi_access_path, ci_access_path,
                                 gi_access, read_capability(ci_access_path)))
    return found


def list_gpu_dirs(proc_root: str) -> list[str]:
    """Host paths of /proc/driver/nvidia/gpus/<bus> dirs, any order."""
    base = os.path.join(proc_root, GPUS_DIR)
    return [os.path.join(base, n) for n in sorted(_listdir(base))]
