"""The NVIDIA_REQUIRE_* language: operators, OR/AND, version rules, messages."""

from __future__ import annotations

import pytest

from nct.errors import RequirementError
from nct.request.requirements import CUDA_ADVICE, Facts, compare_versions, evaluate, validate

GPU = Facts(cuda="12.4", driver="550.54.15", arch="8.0", brand="Tesla", has_device=True)
NO_DEVICE = Facts(cuda="12.4", driver="550.54.15")
UNKNOWN = Facts(has_device=True)


@pytest.mark.parametrize("have, op, want, result", [
    ("12.4", "=", "12.4", True), ("12.4", "=", "12.4.0", True), ("12.4.0.0", "=", "12.4", True),
    ("12.4", "=", "12.40", False), ("12.4", "!=", "12.4.0", False), ("12.4", "!=", "12.5", True),
    ("12.4", "<", "12.10", True), ("12.10", ">", "12.9", True), ("12.4", "<=", "12.4", True),
    ("12.4", "<", "12.4", False), ("12.4", ">=", "12.4.0", True), ("12.4", ">", "12", True),
    ("12", "<", "12.0.1", True), ("550.54.15", ">=", "550", True), ("550.54.15", "<", "550.100", True),
    ("9.0", "<", "10.0", True), ("010", "=", "10", True), ("8.0", ">=", "7.5", True), ("8.0", ">", "8", False),
])
def test_compare_versions(have, op, want, result):
    assert compare_versions(have, op, want) is result


@pytest.mark.parametrize("expr", [
    "cuda>=12.4", "cuda>=12", "cuda=12.4.0", "cuda!=12.3", "cuda<12.5", "cuda<=12.4", "cuda>12.3",
    "CUDA>=12.0", "Driver>=550", "driver<551", "driver=550.54.15", "arch>=8.0", "arch=8", "arch<9.0",
    "brand=tesla", "BRAND=TESLA", "brand!=geforce",
    # OR of terms, AND within a term
    "cuda>=13 cuda>=12", "brand=geforce,driver>=1 brand=tesla,driver>=550",
    "cuda>=12.0,driver>=550,arch>=8.0",
    "  cuda>=12   ", ",cuda>=12,", "",
    # evaluation stops at the first satisfied term: the rest is never parsed
    "cuda>=12 this-is-not-parsed",
])
def test_satisfied(expr):
    evaluate(expr, GPU)


@pytest.mark.parametrize("expr, shown", [
    ("cuda>=12.5", "cuda>=12.5, " + CUDA_ADVICE),
    ("cuda>12.4 brand=tesla,driver<500", "cuda>12.4"),
    ("cuda>=13.0 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471",
     "cuda>=13.0, " + CUDA_ADVICE),
    ("brand=tesla,driver<500 cuda>=12.5", "brand=tesla,driver<500"),  # first term, commas and all
    ("driver>=551", "driver>=551"),
    ("arch>=9.0", "arch>=9.0"),
    ("brand=GeForce", "brand=GeForce"),
    ("brand!=TESLA", "brand!=TESLA"),
    ("cuda<12.4", "cuda<12.4"),
    ("cuda!=12.4.0", "cuda!=12.4.0"),
    ("cuda=12.3", "cuda=12.3"),
])
def test_unsatisfied_message(expr, shown):
    with pytest.raises(RequirementError) as exc:
        evaluate(expr, GPU)
    assert str(exc.value) == f"unsatisfied condition: {shown}"


@pytest.mark.parametrize("expr", [
    "cuda", "cuda>=", ">=12", "cuda==12", "cuda=>12", "cuda<>12", "cuda>=abc", "cuda>=12a",
    "cuda>=.5", "brand<tesla", "brand>=tesla", "foo=1", "cuda>=12<3",
    "cuda>=13 bogus",  # reached after the first term fails
])
def test_invalid_expression(expr):
    with pytest.raises(RequirementError, match="^invalid expression: "):
        evaluate(expr, GPU)


def test_no_device_skips_arch_and_brand():
    evaluate("arch>=99 brand=nope", NO_DEVICE)
    evaluate("brand=geforce,arch<1", NO_DEVICE)
    with pytest.raises(RequirementError):
        evaluate("arch>=99,cuda>=13", NO_DEVICE)


def test_unknown_facts_pass():
    evaluate("cuda>=99,driver>=999,arch>=99,brand=nope", UNKNOWN)
    evaluate("cuda>=99", Facts(cuda="garbage", has_device=True))


def test_validate_is_strict():
    validate("cuda>=12 brand=tesla,driver>=470")
    with pytest.raises(RequirementError, match="invalid expression"):
        validate("cuda>=12 this-is-not-parsed")


def test_mentioned_names():
    from nct.request.requirements import mentioned_names

    assert mentioned_names(["cuda>=12 Brand=tesla,driver>=470", "ARCH>=8.0"]) == {"cuda", "brand", "driver", "arch"}
    assert mentioned_names(["cuda>=12", "bogus"]) == {"cuda"}
    assert mentioned_names([]) == set()
