"""PGO training for the toolkit's CPython (build_runtime.sh, PROFILE_TASK): what the
toolkit's commands do, in the stdlib only: start an isolated interpreter and import the
modules nct's hot paths import (from byte-compiled files), read TOML and JSON, match
regexes, stat and walk paths.  Cheap (seconds), unlike CPython's default test-suite task."""

import json
import os
import re
import subprocess
import sys
import tomllib

IMPORTS = ("import os, sys, json, re, stat, errno, struct, signal, fcntl, typing, enum, functools, "
           "collections, pathlib, subprocess, tomllib, shlex, hashlib, base64, ctypes, argparse, "
           "dataclasses, textwrap, datetime, tempfile, shutil, glob, fnmatch, contextlib, io, zlib")


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


if __name__ == "__main__":
    work()
    # -E-less children with a fixed hash seed: the same profile, so the same binary, every build
    for _ in range(30):
        subprocess.run([sys.executable, "-s", "-S", "-c", IMPORTS], env={"PYTHONHASHSEED": "0"}, check=False)
