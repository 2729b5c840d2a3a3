"""The one way benchmarks keep their results: bench/results/<name>.json holds a list of
runs (newest last), or, for files shared by several scripts, a dict of such lists by key."""

from __future__ import annotations

import json
import os

DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def load(name: str, key: str | None = None) -> list[dict]:
    """Earlier runs, oldest first ([] when none or unreadable)."""
    try:
        with open(os.path.join(DIR, name + ".json")) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return []
    runs = doc.get(key, []) if key is not None and isinstance(doc, dict) else doc
    return runs if isinstance(runs, list) else []


def append(name: str, entry: dict, key: str | None = None, keep: int = 50) -> str:
    """Add a run (atomically: temp file + rename); returns the file's path."""
    path = os.path.join(DIR, name + ".json")
    runs = (load(name, key) + [entry])[-keep:]
    if key is not None:
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            doc = {}
        doc = doc if isinstance(doc, dict) else {}
        doc[key] = runs
    else:
        doc = runs
    os.makedirs(DIR, exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)
    return path
