"""Upstream's CRI-O expectations (its crio engine tables), restated as our own tables: the new
runtime takes the other settings of the default runtime (crio.runtime.default_runtime), else
of runc, with its own runtime_path and runtime_type "oci"; the others stay as they were."""

from __future__ import annotations

import tomllib

import pytest

from nct.engines.configure import apply, plan_configure
from nct.engines.model import EngineRequest, RuntimeEntry

RUNC = '[crio.runtime.runtimes.runc]\nruntime_path = "/usr/bin/runc"\nruntime_type = "runcoci"\nrunc_option = "option"\n'
DEFAULT = ('[crio.runtime.runtimes.default]\nruntime_path = "/usr/bin/default"\nruntime_type = "defaultoci"\n'
           'default_option = "option"\n')
WITH_DEFAULT = '[crio.runtime]\ndefault_runtime = "default"\n'


def configure(tmp_path, text: str) -> dict:
    path = tmp_path / "crio.conf"
    path.write_text(text)
    apply(plan_configure(EngineRequest(engine="crio", config=str(path), drop_in="",
                                       runtimes=(RuntimeEntry("test", "/usr/bin/test"),))))
    return tomllib.loads(path.read_text())


@pytest.mark.parametrize("body, want", [
    ("[crio]\n", {"runtime_path": "/usr/bin/test", "runtime_type": "oci"}),
    ("[crio]\n" + RUNC, {"runtime_path": "/usr/bin/test", "runtime_type": "oci", "runc_option": "option"}),
    ("[crio]\n" + WITH_DEFAULT + DEFAULT,
     {"runtime_path": "/usr/bin/test", "runtime_type": "oci", "default_option": "option"}),
    ("[crio]\n" + WITH_DEFAULT + DEFAULT + RUNC,
     {"runtime_path": "/usr/bin/test", "runtime_type": "oci", "default_option": "option"}),
])
def test_crio_runtime_template_table(tmp_path, body, want):
    before = tomllib.loads(body)
    got = configure(tmp_path, body)
    rts = got["crio"]["runtime"]["runtimes"]
    assert rts["test"] == want
    for name, entry in ((before.get("crio") or {}).get("runtime") or {}).get("runtimes", {}).items():
        assert rts[name] == entry
