"""Upstream's spec-modifier expectations (its stable-hook and hook-remover tables), restated
as our own tables over nct.runtime.modes."""

from __future__ import annotations

import copy

import pytest

from nct.runtime.modes import add_legacy_hook, remove_nvidia_hooks

HOOK = "/opt/bin/nvidia-container-runtime-hook"
ADDED = {"path": HOOK, "args": ["nvidia-container-runtime-hook", "prestart"]}

ADD_ROWS = [
    # spec before, spec after
    ({}, {"hooks": {"prestart": [ADDED]}}),
    ({"hooks": {}}, {"hooks": {"prestart": [ADDED]}}),
    ({"hooks": {"prestart": [{"path": "nvidia-container-runtime-hook"}]}},
     {"hooks": {"prestart": [{"path": "nvidia-container-runtime-hook"}]}}),   # a bare name counts
    ({"hooks": {"prestart": [{"path": "/usr/local/bin/nvidia-container-toolkit"}]}},
     {"hooks": {"prestart": [{"path": "/usr/local/bin/nvidia-container-toolkit"}]}}),
    ({"hooks": {"prestart": [{"path": "some-hook"}]}},
     {"hooks": {"prestart": [{"path": "some-hook"}, ADDED]}}),
    ({"hooks": {"createRuntime": [{"path": "/x/nvidia-container-runtime-hook"}]}},  # not a prestart hook
     {"hooks": {"createRuntime": [{"path": "/x/nvidia-container-runtime-hook"}], "prestart": [ADDED]}}),
]


@pytest.mark.parametrize("before, after", ADD_ROWS)
def test_legacy_hook_table(before, after):
    spec = copy.deepcopy(before)
    changed = add_legacy_hook(spec, HOOK)
    assert spec == after
    assert changed == (before != after)


def test_legacy_hook_args_use_the_basename():
    spec = {}
    add_legacy_hook(spec, "/usr/bin/nvidia-container-toolkit")
    assert spec["hooks"]["prestart"] == [{"path": "/usr/bin/nvidia-container-toolkit",
                                          "args": ["nvidia-container-toolkit", "prestart"]}]


REMOVE_ROWS = [
    ({}, {}),
    ({"hooks": {}}, {"hooks": {}}),
    ({"hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook"}]}}, {"hooks": {}}),
    ({"hooks": {"prestart": [{"path": "nvidia-container-toolkit"}]}}, {"hooks": {}}),
    ({"hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook"}, {"path": "/bin/other"}]}},
     {"hooks": {"prestart": [{"path": "/bin/other"}]}}),
    ({"hooks": {"prestart": [{"path": "/bin/other"}]}}, {"hooks": {"prestart": [{"path": "/bin/other"}]}}),
    ({"hooks": {"poststart": [{"path": "/usr/bin/nvidia-container-runtime-hook"}]}},
     {"hooks": {"poststart": [{"path": "/usr/bin/nvidia-container-runtime-hook"}]}}),
    ({"hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook-wrapper"}]}},
     {"hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook-wrapper"}]}}),
]


@pytest.mark.parametrize("before, after", REMOVE_ROWS)
def test_hook_remover_table(before, after):
    spec = copy.deepcopy(before)
    removed = remove_nvidia_hooks(spec)
    assert spec == after
    assert removed == len((before.get("hooks") or {}).get("prestart") or []) - \
        len((after.get("hooks") or {}).get("prestart") or [])


@pytest.mark.parametrize("env, graphics", [
    ([], False),
    (["NVIDIA_VISIBLE_DEVICES=all"], False),
    (["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute"], False),
    (["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=all"], True),
    (["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=graphics"], True),
    (["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,graphics"], True),
    (["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=display"], True),
    (["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=display,graphics"], True),
])
def test_legacy_graphics_modifier_table(env, graphics, monkeypatch, tmp_path):
    """Upstream's graphics modifier (legacy mode) applies when devices are requested and the
    capabilities include graphics or display (`all` does)."""
    from nct.runtime import lookup
    from nct.runtime.create import modify_spec

    from .test_create import LOG, FakeBackend, _cfg, _spec

    monkeypatch.setattr(lookup, "FALLBACK_DIRS", (str(tmp_path / "empty"),))
    b = FakeBackend()
    modify_spec(_spec(env), _cfg("legacy"), "legacy", LOG, b, "")
    assert any(c[0] == "graphics" for c in b.calls) is graphics
