"""nct.config.tomlscan.parse_simple reads the plain subset of TOML exactly as tomllib does,
and declines (None) everything else, so callers fall back to tomllib (and its errors)."""

from __future__ import annotations

import random
import tomllib
from pathlib import Path

import pytest

from nct.config.tomlscan import parse_simple

DEFAULT = (Path(__file__).resolve().parents[2] / "config" / "config.toml").read_text()


def agree(text: str) -> object:
    """parse_simple's answer, checked against tomllib: equal documents, or None."""
    mine = parse_simple(text)
    try:
        theirs = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        assert mine is None, f"accepted invalid TOML: {text!r}"
        return None
    if mine is not None:
        assert mine == theirs, text
    return mine


def test_the_default_config_is_in_the_subset():
    doc = agree(DEFAULT)
    assert doc is not None and doc == tomllib.loads(DEFAULT)
    assert doc["nvidia-container-cli"]["ldconfig"] == "@/sbin/ldconfig"


@pytest.mark.parametrize("text", [
    "", "\n\n", "# only a comment\n", "a = 1\n", "a = -0\nb = +7\n", "a = true\nb = false\n",
    'a = "x"  # note\n', "a = 'lit \"eral\"'\n", 'a = "it\'s"\n', 'a = []\nb = [ ]\n',
    'a = ["x", \'y\',]\n', '[t]\n[t.u]\nk = "v"\n', '[ t . u ]\n', "[a.b]\n[a]\nc = 1\n",
    "a = \"caf\u00e9\"\n", "k = \"tab\there\"\n", "a = 1\r\nb = 2\r\n", "a=1\n[t]#c\nb=2",
    '[nvidia-container-runtime]\nruntimes = ["runc", "crun"]\n',
])
def test_subset_documents_equal_tomllib(text):
    assert agree(text) is not None


@pytest.mark.parametrize("text", [
    'a = "esc\\"aped"\n', 'a = """multi"""\n', "a = '''multi'''\n", "a = 1.5\n", "a = 1979-05-27\n",
    "a = 0x1f\n", "a = 1_000\n", "a = 007\n", "a = [1, 2]\n", 'a = ["x",\n  "y"]\n', "a = {x = 1}\n",
    "a.b = 1\n", '"q" = 1\n', "[[t]]\n", "a = 1\na = 2\n", "[t]\n[t]\n", "a = 1\n[a]\n", "a = [,]\n",
    "a = True\n", 'a = "x" y\n', "a =\n", "= 1\n", "\ufeffa = 1\n", "a = 1\rb = 2\n", "a = \"\x01\"\n",
    "# bad \x01 comment\n", '[t]\nk = 1\n[t.k]\n', "\x0ba = 1\n", 'a = ["x,y"]\n', "[]\n", "[a.]\n",
    "a=1\r", "[a]\r", "# c\r", "\r",
])
def test_outside_the_subset_is_declined(text):
    assert agree(text) is None


def test_random_edits_of_the_default_never_disagree():
    """Mutations of the default file (deleted, duplicated, swapped characters and lines):
    whatever parse_simple accepts, tomllib reads the same."""
    rng = random.Random(1234)
    alphabet = list(" \t\"'[]=#,.\\\n\rxyz0123-_") + ["true", "false", "\u00e9", "\x00"]
    accepted = 0
    for _ in range(3000):
        text = DEFAULT
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(text))
            op = rng.randrange(4)
            if op == 0:
                text = text[:i] + text[i + 1:]
            elif op == 1:
                text = text[:i] + rng.choice(alphabet) + text[i:]
            elif op == 2:
                lines = text.split("\n")
                j = rng.randrange(len(lines))
                lines.insert(j, lines[rng.randrange(len(lines))])
                text = "\n".join(lines)
            else:
                text = text[:i] + text[i + 1:i + 2] + text[i:i + 1] + text[i + 2:]
        if agree(text) is not None:
            accepted += 1
    assert accepted > 300  # the subset is exercised, not merely declined


def test_random_edits_read_one_table_as_tomllib_does():
    """read_table_keys (the runtime shim's pass-through read) on mutations of the default
    file: whenever tomllib reads the file and the scanner answers, the answers agree."""
    from nct.config.tomlscan import read_table_keys

    keys = ("runtimes", "debug", "log-level", "mode")
    rng = random.Random(4321)
    alphabet = list(" \t\"'[]=#,.\\\n\rxyz0123-_") + ["true", "\u00e9", "[[a]]\n", "modes.x = 1\n",
                                                            "x = [\n  [1],\n]\n", "[a]\n", "mode = 1\n"]
    answered = 0
    for _ in range(3000):
        text = DEFAULT
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(text))
            text = text[:i] + rng.choice(alphabet) + text[i + rng.randrange(2):]
        mine = read_table_keys(text, "nvidia-container-runtime", keys)
        try:
            theirs = tomllib.loads(text).get("nvidia-container-runtime", {})
        except tomllib.TOMLDecodeError:
            continue
        if mine is not None and isinstance(theirs, dict):
            answered += 1
            assert mine == {k: theirs[k] for k in keys if k in theirs}, text
    assert answered > 300
