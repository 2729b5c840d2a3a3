"""The two ways a CDI hook runs: alone (`nvidia-cdi-hook NAME ARGS`, as CDI specs for every
engine write it) and as a step of `nvidia-cdi-hook nct-steps` (the one hook of the jit-cdi
specs nct's runtime writes). Hook tests use `hook_argv` and the `hook_form` fixture
(conftest.py), so that every well-formed invocation they make is checked in both forms:
the same protections, the same results, the same messages."""

from __future__ import annotations

from nct.cli.cdi_hook import FLAGS, STEPS_HOOK, parse_argv

FORMS = ("single", "steps")
FORM = ["single"]  # set by the hook_form fixture


def as_steps(args: list[str]) -> list[str]:
    """`args` (after the program, or after `nvidia-ctk hook`) as the second step of an nct-steps
    invocation, when they are a well-formed single hook; anything else (an unknown hook or
    flag, help) as is."""
    if parse_argv(list(args)) is None:
        return list(args)
    i = next(i for i, a in enumerate(args) if a in FLAGS)
    # after a first step, as in every jit-cdi spec: an update-ldcache step then forks its
    # ldconfig child before the steps ahead of it run (nct.cli.cdi_hook.run_steps)
    return [*args[:i], STEPS_HOOK, "noop", *args[i:]]


def hook_argv(argv: list[str]) -> list[str]:
    """[prog, *args] in the current form (prog: nvidia-cdi-hook, or nvidia-ctk with `hook`)."""
    if FORM[0] != "steps":
        return list(argv)
    if len(argv) > 1 and argv[1] == "hook":
        return [argv[0], "hook", *as_steps(argv[2:])]
    return [argv[0], *as_steps(argv[1:])]
