"""NVIDIA_REQUIRE_* expressions: upstream's small requirement language, evaluated per GPU.

An expression is OR-ed space-separated terms of AND-ed comma-separated conditions
`name op value`; names cuda, driver, arch, brand (any case); ops = != < <= > >=. Versions
compare numerically per dot-separated component, trailing zero components ignored; brand
compares as a case-insensitive string (= and != only). A fact the node does not know passes.
Evaluation is lazy, left to right, as upstream's: a malformed condition after a satisfied
term is never looked at.
"""

from __future__ import annotations

from nct.errors import RequirementError
from nct.limits import MAX_NUMBER_DIGITS, shown
from nct.record import Record

TYPE_CHECKING = False  # typing costs an import on the hook's path
if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Iterable

    from nct.driver.model import Gpu, Node

OPERATORS = ("=", "!=", "<", "<=", ">", ">=")
CUDA_ADVICE = "please update your driver to a newer version, or use an earlier cuda container"
_OP_CHARS = "<>=!"
_VERSION_CHARS = frozenset("0123456789.")


class _Invalid(Exception):
    """A condition that does not parse (reported as "invalid expression")."""


class Facts(Record):
    """What conditions are checked against; None = unknown (the condition passes).
    `has_device` False: arch/brand pass (no device is visible)."""

    cuda: str | None = None
    driver: str | None = None
    arch: str | None = None
    brand: str | None = None
    has_device: bool = False


def parse_condition(text: str) -> tuple[str, str, str]:
    """"cuda>=12.4" -> ("cuda", ">=", "12.4"); raises _Invalid."""
    i = 0
    while i < len(text) and text[i] not in _OP_CHARS:
        i += 1
    j = i
    while j < len(text) and text[j] in _OP_CHARS:
        j += 1
    name, op, value = text[:i], text[i:j], text[j:]
    if not name or op not in OPERATORS or not value:
        raise _Invalid(text)
    return name.lower(), op, value


def _version_key(v: str) -> tuple[int, ...]:
    if not _VERSION_CHARS.issuperset(v):
        raise _Invalid(v)
    parts = v.split(".")
    if not parts[0] and len(v) > 0:  # a leading dot: upstream's number parse fails
        raise _Invalid(v)
    if any(len(p) > MAX_NUMBER_DIGITS for p in parts):  # int() is slow on, then refuses, huge ones
        raise _Invalid(v)
    nums = [int(p) for p in parts if p]
    while nums and nums[-1] == 0:
        nums.pop()
    return tuple(nums)


def compare_versions(have: str, op: str, want: str) -> bool:
    """Numeric per component, trailing .0 components ignored ("12.4" == "12.4.0")."""
    a, b = _version_key(have), _version_key(want)
    return {"=": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def _check(cond: str, facts: Facts) -> bool:
    name, op, value = parse_condition(cond)
    if name == "brand":
        if op not in ("=", "!="):
            raise _Invalid(cond)
        if not facts.has_device or facts.brand is None:
            return True
        return (facts.brand.lower() == value.lower()) == (op == "=")
    if name in ("cuda", "driver"):
        have = facts.cuda if name == "cuda" else facts.driver
    elif name == "arch":
        if not facts.has_device:
            return True
        have = facts.arch
    else:
        raise _Invalid(cond)
    if have is None:
        return True  # unknown to the node: passes unchecked, as upstream's
    try:
        _version_key(have)
    except _Invalid:
        return True  # the node's own value is unreadable: treat as unknown
    return compare_versions(have, op, value)


def evaluate(expr: str, facts: Facts) -> None:
    """Raise RequirementError unless `expr` holds for `facts`."""
    ok = True
    try:
        for term in expr.split(" "):
            if not term:
                continue
            conds = [c for c in term.split(",") if c]
            if not conds:
                break
            ok = True
            for cond in conds:
                if not _check(cond, facts):
                    ok = False
                    break
            if ok:
                break
    except _Invalid:
        raise RequirementError(f"invalid expression: {shown(expr)}") from None
    if not ok:
        first = next((t for t in expr.split(" ") if t), "")
        if first.startswith("cuda>="):
            raise RequirementError(f"unsatisfied condition: {first}, {CUDA_ADVICE}")
        raise RequirementError(f"unsatisfied condition: {first}")


def validate(expr: str) -> None:
    """Raise RequirementError("invalid expression") if any condition of expr is malformed
    (stricter than evaluation, which stops at the first satisfied term)."""
    for term in expr.split(" "):
        for cond in term.split(","):
            if not cond:
                continue
            try:
                name, op, value = parse_condition(cond)
                if name == "brand":
                    if op not in ("=", "!="):
                        raise _Invalid(cond)
                elif name in ("cuda", "driver", "arch"):
                    _version_key(value)
                else:
                    raise _Invalid(cond)
            except _Invalid:
                raise RequirementError(f"invalid expression: {expr}") from None


def facts_for(node: "Node", gpu: "Gpu | None") -> Facts:
    return Facts(
        cuda=node.cuda_version, driver=node.driver_version or None,
        arch=gpu.architecture if gpu else None, brand=gpu.brand if gpu else None,
        has_device=gpu is not None,
    )


def check_requirements(node: "Node", selection, exprs: Iterable[str]) -> None:
    """Every expression must hold for every selected GPU and every selected MIG device's
    parent; with nothing selected, once with no device (arch and brand then pass)."""
    exprs = [e for e in exprs if e]
    if not exprs:
        return
    gpus: list = []
    for gpu in getattr(selection, "gpus", ()):
        if gpu not in gpus:
            gpus.append(gpu)
    by_index = {g.index: g for g in node.gpus}
    for mig in getattr(selection, "migs", ()):
        parent = by_index.get(mig.parent_index)
        if parent is not None and parent not in gpus:
            gpus.append(parent)
    targets = gpus or [None]
    for gpu in targets:
        facts = facts_for(node, gpu)
        for expr in exprs:
            evaluate(expr, facts)


def mentioned_names(exprs: "Iterable[str]") -> set[str]:
    """The fact names (cuda, driver, arch, brand, lower case) the expressions mention, so a
    caller can skip costly discovery (NVML) when no arch/brand condition needs it."""
    names: set[str] = set()
    for expr in exprs:
        for term in expr.split(" "):
            for cond in term.split(","):
                if cond:
                    try:
                        names.add(parse_condition(cond)[0])
                    except _Invalid:
                        continue
    return names
