"""Editing config.toml with tomlkit: --set parsing, placement, comments kept, atomic writes."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

from nct.config import edit, load
from nct.errors import ConfigError

REPO_DEFAULT = Path(__file__).resolve().parents[2] / "config" / "config.toml"


@pytest.fixture(autouse=True)
def no_ldconfig_real(monkeypatch):
    monkeypatch.setattr(load, "_ldconfig_real_exists", lambda: False)


def _default_doc():
    return edit.parse_document(REPO_DEFAULT.read_text())


def _changed_lines(before: str, after: str) -> list[str]:
    return [
        line for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


# --- --set parsing (upstream's table) ------------------------------------------------------


@pytest.mark.parametrize(
    "flag,key,value",
    [
        ("disable-require", "disable-require", True),
        ("disable-require=true", "disable-require", True),
        ("disable-require=false", "disable-require", False),
        ("disable-require=1", "disable-require", True),
        ("disable-require=F", "disable-require", False),
        ("swarm-resource=string-value", "swarm-resource", "string-value"),
        ("swarm-resource=string-value=more", "swarm-resource", "string-value=more"),
        ("swarm-resource=true", "swarm-resource", "true"),
        ("swarm-resource=5", "swarm-resource", "5"),
        ("swarm-resource=", "swarm-resource", ""),
        ("nvidia-container-cli.environment=string-value", "nvidia-container-cli.environment", ["string-value"]),
        ("nvidia-container-cli.environment=first,second", "nvidia-container-cli.environment", ["first", "second"]),
        ("nvidia-container-cli.environment=first=1,second=2", "nvidia-container-cli.environment", ["first=1", "second=2"]),
        # environment values may hold ':' (PATH-like): only ',' splits them
        ("nvidia-container-cli.environment=P=/a:/b", "nvidia-container-cli.environment", ["P=/a:/b"]),
        ("nvidia-container-runtime.runtimes=runc:crun", "nvidia-container-runtime.runtimes", ["runc", "crun"]),
        ("nvidia-container-runtime.runtimes=/usr/bin/runc,crun", "nvidia-container-runtime.runtimes", ["/usr/bin/runc", "crun"]),
        ("nvidia-container-runtime.runtimes=", "nvidia-container-runtime.runtimes", []),
        ("features.allow-ldconfig-from-container=nil", "features.allow-ldconfig-from-container", edit.DELETE),
        ("nvidia-container-runtime.modes.csv.compat-container-root=nil",
         "nvidia-container-runtime.modes.csv.compat-container-root", edit.DELETE),
    ],
)
def test_parse_set(flag, key, value):
    assert edit.parse_set(flag) == (key, value)


@pytest.mark.parametrize(
    "flag,message",
    [
        ("undefined=new-value", "invalid config option undefined: unknown key"),
        ("nvidia-container-cli.undefined", "invalid config option nvidia-container-cli.undefined: unknown key"),
        ("nvidia-container-cli=x", "invalid config option nvidia-container-cli: a section, not a key"),
        ("disable-require=something", "invalid --set option disable-require=something: expected a boolean (true/false)"),
        ("swarm-resource", "invalid --set option swarm-resource: expected swarm-resource=VALUE"),
        ("=x", "invalid --set option '=x': empty key"),
    ],
)
def test_parse_set_errors(flag, message):
    with pytest.raises(ConfigError) as ei:
        edit.parse_set(flag)
    assert str(ei.value) == message


def test_list_separator_override():
    assert edit.parse_set("nvidia-container-runtime.runtimes=a;b", list_separator=";")[1] == ["a", "b"]


def test_nil_only_unsets_optional_keys():
    assert edit.parse_set("swarm-resource=nil") == ("swarm-resource", "nil")
    doc = _default_doc()
    with pytest.raises(ConfigError, match="cannot be unset"):
        edit.set_value(doc, "disable-require", edit.DELETE)


# --- placement and preservation ------------------------------------------------------------


def test_existing_key_changes_only_its_line():
    before = REPO_DEFAULT.read_text()
    doc = _default_doc()
    edit.apply_sets(doc, ["nvidia-container-runtime.mode=cdi"])
    after = edit.render(doc)
    assert _changed_lines(before, after) == ['-mode = "auto"', '+mode = "cdi"']


def test_commented_suggestion_is_replaced_in_place():
    before = REPO_DEFAULT.read_text()
    doc = _default_doc()
    edit.apply_sets(doc, ["nvidia-container-cli.no-cgroups", "nvidia-container-cli.root=/run/nvidia/driver"])
    after = edit.render(doc)
    assert _changed_lines(before, after) == [
        "-#no-cgroups = false", "+no-cgroups = true",
        '-#root = "/run/nvidia/driver"', '+root = "/run/nvidia/driver"',
    ]
    # order inside the table is unchanged
    cli = after.split("[nvidia-container-cli]\n")[1].split("\n\n")[0].splitlines()
    assert [line.lstrip("#").split(" =")[0] for line in cli] == [
        "debug", "environment", "ldcache", "ldconfig", "load-kmods", "no-cgroups", "path", "root", "user",
    ]
    cfg = load.parse_config(after)
    assert cfg.nvidia_container_cli.no_cgroups is True
    assert cfg.nvidia_container_cli.root == "/run/nvidia/driver"


def test_setting_a_default_back_restores_the_comment():
    doc = _default_doc()
    edit.apply_sets(doc, ["nvidia-container-cli.no-cgroups=true", "nvidia-container-runtime.debug=/var/log/r.log"])
    edit.apply_sets(doc, ["nvidia-container-cli.no-cgroups=false", "nvidia-container-runtime.debug=/dev/null"])
    assert edit.render(doc) == REPO_DEFAULT.read_text()
    # a key that only had an active line gets the upstream suggestion comment
    doc = edit.parse_document('[nvidia-container-cli]\nroot = "/x"\nload-kmods = true\n')
    edit.set_value(doc, "nvidia-container-cli.root", "")
    assert edit.render(doc) == '[nvidia-container-cli]\n#root = "/run/nvidia/driver"\nload-kmods = true\n'


def test_comments_and_unrelated_formatting_survive_byte_for_byte():
    text = (
        "# site config -- managed by hand\n"
        "disable-require   =   false    # spacing kept\n"
        "\n"
        "[nvidia-container-cli]\n"
        "    # indented comment\n"
        "    environment = [ 'A=1',\n"
        "                    'B=2' ]\n"
        '    ldconfig = "@/sbin/ldconfig"  # host ldconfig\n'
        "\n"
        "[some-vendor-extension]\n"
        "answer = 42\n"
        "\n"
        "[nvidia-container-runtime]\n"
        'mode = "auto" # trailing\n'
    )
    doc = edit.parse_document(text)
    edit.apply_sets(doc, ["nvidia-container-runtime.mode=legacy", "disable-require"])
    after = edit.render(doc)
    assert _changed_lines(text, after) == [
        "-disable-require   =   false    # spacing kept",
        "+disable-require   =   true    # spacing kept",
        '-mode = "auto" # trailing',
        '+mode = "legacy" # trailing',
    ]


def test_new_keys_and_tables_are_added_cleanly():
    doc = _default_doc()
    edit.apply_sets(doc, [
        "features.allow-ldconfig-from-container",
        "nvidia-container-runtime.modes.jit-cdi.nvcdi-feature-flags=a,b",
        "nvidia-container-cli.no-pivot=true",
        "swarm-resource=DOCKER_RESOURCE_GPU,OTHER",
    ])
    after = edit.render(doc)
    assert "\n[nvidia-container-runtime.modes.legacy]\ncuda-compat-mode = \"ldconfig\"\n\n" \
           "[nvidia-container-runtime.modes.jit-cdi]\nnvcdi-feature-flags = [\"a\", \"b\"]\n\n" \
           "[nvidia-container-runtime-hook]\n" in after
    assert after.endswith('[nvidia-ctk]\npath = "nvidia-ctk"\n\n[features]\nallow-ldconfig-from-container = true\n')
    assert '\nswarm-resource = "DOCKER_RESOURCE_GPU,OTHER"\n' in after
    cfg = load.parse_config(after)
    assert cfg.features.allow_ldconfig_from_container is True
    assert cfg.nvidia_container_cli.no_pivot is True
    assert cfg.nvidia_container_runtime.modes.jit_cdi.nvcdi_feature_flags == ("a", "b")
    # nil removes an optional key again
    edit.apply_sets(doc, ["features.allow-ldconfig-from-container=nil", "nvidia-container-cli.no-pivot=nil"])
    cfg = load.parse_config(edit.render(doc))
    assert cfg.features.allow_ldconfig_from_container is False
    assert "no-pivot" not in edit.render(doc)


def test_empty_document_gets_tables():
    doc = edit.parse_document("")
    edit.apply_sets(doc, ["nvidia-container-runtime.modes.cdi.default-kind=x.com/gpu", "disable-require"])
    after = edit.render(doc)
    assert load.parse_config(after).nvidia_container_runtime.modes.cdi.default_kind == "x.com/gpu"
    assert after.startswith("disable-require = true\n")


def test_inline_tables_are_edited_in_place():
    doc = edit.parse_document('[nvidia-container-runtime]\nmodes = { cdi = { default-kind = "a/b" } }\n')
    edit.set_value(doc, "nvidia-container-runtime.modes.cdi.default-kind", "c/d")
    assert edit.render(doc) == '[nvidia-container-runtime]\nmodes = { cdi = { default-kind = "c/d" } }\n'


def test_value_where_a_table_is_expected():
    doc = edit.parse_document("nvidia-container-cli = 1\n")
    with pytest.raises(ConfigError, match="^cannot set keys under nvidia-container-cli: it is a value, not a table$"):
        edit.set_value(doc, "nvidia-container-cli.root", "/x")


def test_typed_values_are_checked():
    doc = _default_doc()
    with pytest.raises(ConfigError, match="nvidia-container-cli.environment: expected list"):
        edit.set_value(doc, "nvidia-container-cli.environment", [1])
    with pytest.raises(ConfigError, match="disable-require: expected bool"):
        edit.set_value(doc, "disable-require", 3)
    edit.set_value(doc, "disable-require", "true")  # raw --set strings are parsed
    assert load.parse_config(edit.render(doc)).disable_require is True


def test_render_refuses_an_invalid_result():
    doc = _default_doc()
    edit.set_value(doc, "nvidia-container-cli.ldconfig", "/sbin/ldconfig")
    with pytest.raises(ConfigError, match="nvidia-container-cli.ldconfig: .* must be a host path"):
        edit.render(doc, "/etc/c.toml")
    edit.set_value(doc, "features.allow-ldconfig-from-container", True)
    assert 'ldconfig = "/sbin/ldconfig"' in edit.render(doc)


def test_parse_document_errors_name_file_and_line():
    with pytest.raises(ConfigError) as ei:
        edit.parse_document("a = 1\nb = \n", "/etc/c.toml")
    assert str(ei.value).startswith("/etc/c.toml: line 2, column 5: invalid TOML: ")


def test_load_document_missing_file_is_the_default(tmp_path):
    doc, existed = edit.load_document(str(tmp_path / "none.toml"))
    assert not existed and edit.render(doc) == REPO_DEFAULT.read_text()


# --- atomic writes -----------------------------------------------------------------------------


def test_write_atomic_keeps_mode_and_creates_dirs(tmp_path):
    target = tmp_path / "a" / "b" / "config.toml"
    edit.write_atomic(str(target), "x = 1\n")
    assert target.read_text() == "x = 1\n"
    assert (target.stat().st_mode & 0o777) == 0o644
    os.chmod(target, 0o600)
    edit.write_atomic(str(target), "x = 2\n")
    assert target.read_text() == "x = 2\n" and (target.stat().st_mode & 0o777) == 0o600
    assert sorted(p.name for p in target.parent.iterdir()) == ["config.toml"]


def test_write_atomic_failure_leaves_original_and_no_temp(tmp_path):
    target = tmp_path / "config.toml"
    target.mkdir()  # os.replace onto a directory fails
    (target / "keep").write_text("k")
    with pytest.raises(ConfigError, match=f"^{target}: cannot write config file: "):
        edit.write_atomic(str(target), "x = 1\n")
    assert (target / "keep").read_text() == "k"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]
