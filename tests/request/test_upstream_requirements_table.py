"""Upstream's requirement expectations (its constraint-factory tables and libnvidia-container's
DSL), restated as our own table: parse errors, operators, and how terms combine. nct follows
libnvidia-container's rules (the prestart hook's): space-separated terms are ORed, the
comma-separated conditions of a term ANDed, and an unknown name is an invalid expression
(upstream's Go CSV-mode parser ignores it; nct has no CSV mode)."""

from __future__ import annotations

import pytest

from nct.errors import RequirementError
from nct.request.requirements import Facts, evaluate, validate

FACTS = Facts(cuda="12.4", driver="550.54.15", arch="8.0", brand="tesla", has_device=True)
INVALID = "invalid"
UNSAT = "unsatisfied"

ROWS = [
    ("", None),
    ("notvalid", INVALID),            # no operator
    ("foo=45", INVALID),
    ("cuda=foo", INVALID),            # versions are numbers
    ("cuda>=11.6", None), ("cuda>11.6", None), ("cuda<=12.4", None), ("cuda<13.6", None),
    ("cuda=12.4", None), ("cuda!=11.6", None),
    ("cuda>12.4", UNSAT), ("cuda<11.6", UNSAT), ("cuda!=12.4", UNSAT), ("cuda=12.5", UNSAT),
    ("cuda>=11.6 arch=5.3", None),    # either term
    ("cuda>=13.0 arch=8.0", None),
    ("cuda>=13.0 arch=5.3", UNSAT),
    ("cuda>=11.6,arch=5.3", UNSAT),   # both conditions of one term
    ("cuda>=11.6,arch=8.0", None),
    ("cuda<13.6 cuda>=11.6,arch=5.3", None),
    ("cuda>13.6 cuda>=11.6,arch=5.3", UNSAT),
    ("brand=TESLA", None), ("brand!=tesla", UNSAT), ("brand>tesla", INVALID),
    ("driver>=550", None), ("driver<550.54.15", UNSAT),
]


@pytest.mark.parametrize("expr, want", ROWS)
def test_requirement_table(expr, want):
    if want is INVALID:
        with pytest.raises(RequirementError, match="invalid expression"):
            validate(expr)
        return
    validate(expr)
    if want is UNSAT:
        with pytest.raises(RequirementError, match="unsatisfied condition"):
            evaluate(expr, FACTS)
    else:
        evaluate(expr, FACTS)


@pytest.mark.parametrize("expr", ["arch=5.3", "brand=geforce", "arch<1.0,brand=nvs"])
def test_arch_and_brand_pass_without_a_device(expr):
    """libnvidia-container: evaluated once with no device, arch and brand are unknown: pass."""
    evaluate(expr, Facts(cuda="12.4", driver="550.54.15", arch="8.0", brand="tesla", has_device=False))
