"""Upstream's `nvidia-ctk config --set` expectations (its set-flag table), restated as our own
table over nct.config.edit.parse_set: key lookup, booleans, strings and lists."""

from __future__ import annotations

import pytest

from nct.config.edit import parse_set
from nct.errors import NctError

ERROR = "error"

ROWS = [
    ("undefined=new-value", ERROR),
    ("nvidia-container-cli.undefined", ERROR),
    ("disable-require", ("disable-require", True)),            # a bare boolean is true
    ("disable-require=true", ("disable-require", True)),
    ("disable-require=false", ("disable-require", False)),
    ("disable-require=something", ERROR),
    ("swarm-resource", ERROR),                                  # a string needs a value
    ("swarm-resource=string-value", ("swarm-resource", "string-value")),
    ("swarm-resource=string-value=more", ("swarm-resource", "string-value=more")),
    ("swarm-resource=true", ("swarm-resource", "true")),
    ("swarm-resource=5", ("swarm-resource", "5")),
    ("nvidia-container-cli.environment=string-value", ("nvidia-container-cli.environment", ["string-value"])),
    ("nvidia-container-cli.environment=first,second", ("nvidia-container-cli.environment", ["first", "second"])),
    ("nvidia-container-cli.environment=first=1,second=2",
     ("nvidia-container-cli.environment", ["first=1", "second=2"])),
]


@pytest.mark.parametrize("flag, want", ROWS)
def test_set_flag_table(flag, want):
    if want is ERROR:
        with pytest.raises(NctError):
            parse_set(flag)
        return
    key, value = parse_set(flag)
    assert (key, list(value) if isinstance(value, (list, tuple)) else value) == want
