"""nct.jsonio.loads answers exactly as json.loads, values and errors, in a fresh interpreter
where json.decoder is not loaded (the hook's situation) and in one where it is."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from nct import jsonio

CASES = ['{}', '[]', ' {"a": [1, 2.5, -3e2, true, false, null, "x\\u00e9\\n"]} ', '"s"', '1', 'NaN',
         '[Infinity, -Infinity]', '{"a":1}{', '{"a":1', '', ' ', '\ufeff{}', '{"a": "\x01"}', '[1,]',
         '{"k": 1, "k": 2}', '123abc', '{"a": 01}', '{not json']

PROBE = """
import json, sys
{pre}
from nct import jsonio
out = []
for case in json.loads(sys.stdin.read()):
    for data in (case, case.encode("utf-8"), case.encode("utf-16")):
        try:
            got = ("ok", repr(jsonio.loads(data)))
        except Exception as e:
            got = ("err", type(e).__name__, str(e))
        out.append(got)
print(json.dumps(out))
"""


def _expected() -> list:
    out = []
    for case in CASES:
        for data in (case, case.encode("utf-8"), case.encode("utf-16")):
            try:
                out.append(["ok", repr(json.loads(data))])
            except Exception as e:  # noqa: BLE001 - compared as they are
                out.append(["err", type(e).__name__, str(e)])
    return out


@pytest.mark.parametrize("pre", ["", "import json.decoder"], ids=["fresh", "json-loaded"])
def test_same_values_and_errors_as_json(pre):
    code = PROBE.format(pre=pre)
    if not pre:  # the probe reads its cases with json: forget it again before jsonio runs
        code = code.replace("from nct import jsonio", "for m in [m for m in sys.modules if m.startswith('json')]:\n"
                                                        "    del sys.modules[m]\nfrom nct import jsonio")
    r = subprocess.run([sys.executable, "-c", code], input=json.dumps(CASES), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == _expected()


@pytest.mark.parametrize("text", ["[" * 100000, "[" * 100000 + "]" * 100000, '{"a":' * 65 + "1" + "}" * 65,
                                  "[" * 65 + "]" * 65])
def test_nesting_beyond_the_limit_is_one_line_value_error(text):
    """Issue 9 §4: nesting past nct.limits.MAX_NESTING_DEPTH (64) is a ValueError naming
    the limit, never a RecursionError (json.loads raises one from ~1000 levels)."""
    from nct import jsonio
    from nct.limits import MAX_NESTING_DEPTH

    assert MAX_NESTING_DEPTH == 64
    for data in (text, text.encode()):
        with pytest.raises(ValueError, match=r"^nested deeper than 64 levels$"):
            jsonio.loads(data)


def test_nesting_at_the_limit_is_accepted():
    from nct import jsonio

    assert jsonio.loads("[" * 64 + "]" * 64) is not None
    assert jsonio.loads('{"a":' * 64 + "1" + "}" * 64)


DUMP_CASES = [{}, {"a": [1, 2.5, -0.0, 1e300, None, True, False, "x\u00e9\u2603\U0001F600\n\"\\/\x01"]},
              {"nan": float("nan"), "inf": [float("inf"), float("-inf")]}, {1: "int key", None: "n", 2.5: "f",
              True: "b"}, {"big": 10**40, "nested": {"l": [[], {}, [[{"x": ""}]]]}}, {"s": "\ud800"},
              {"set": {1}}, {"obj": object()}]
DUMP_PROBE = """
import sys
from nct import jsonio
assert "json" not in sys.modules
out = []
cases = {cases}
for i, case in enumerate(cases):
    if i == len(cases) - 2:  # the encodable ones done; the last two fail (json.dumps then explains)
        print("json" in sys.modules, file=sys.stderr)
    for ascii in (False, True):
        try:
            out.append(("ok", jsonio.dumps_compact(case, ascii)))
        except Exception as e:
            out.append(("err", type(e).__name__, str(e)))
print(repr(out))
"""


def test_dumps_compact_writes_exactly_as_json_dumps():
    """nct.jsonio.dumps_compact (the runtime's config.json writer, issue 14: `import json`
    cost ~6 ms per GPU create) gives json.dumps' compact output, and its errors."""
    want = []
    for case in DUMP_CASES:
        for ascii in (False, True):
            try:
                want.append(("ok", json.dumps(case, separators=(",", ":"), ensure_ascii=ascii)))
            except Exception as e:  # noqa: BLE001 - compared as they are
                want.append(("err", type(e).__name__, str(e)))
    want = [w if "object at 0x" not in str(w) else ("err", "TypeError") for w in want]
    cases = "[{}, {'a': [1, 2.5, -0.0, 1e300, None, True, False, 'x\\u00e9\\u2603\\U0001F600\\n\"\\\\/\\x01']}, " \
            "{'nan': float('nan'), 'inf': [float('inf'), float('-inf')]}, {1: 'int key', None: 'n', 2.5: 'f', " \
            "True: 'b'}, {'big': 10**40, 'nested': {'l': [[], {}, [[{'x': ''}]]]}}, {'s': '\\ud800'}, " \
            "{'set': {1}}, {'obj': object()}]"
    r = subprocess.run([sys.executable, "-c", DUMP_PROBE.format(cases=cases)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    import ast

    got = [g if "object at 0x" not in str(g) else ("err", "TypeError") for g in ast.literal_eval(r.stdout)]
    assert got == want
    assert r.stderr.strip() == "False"  # json was not imported for the encodable ones


def test_read_object_one_reader_callers_word_their_errors(tmp_path):
    """The hook, the CDI hooks and the OCI bundle reader share jsonio.read_object: the same
    checks everywhere, only the wording the caller passes differs."""
    from nct.errors import SpecError

    good = tmp_path / "ok.json"
    good.write_text('{"a": [1]}')
    assert jsonio.read_object(str(good), SpecError) == {"a": [1]}
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "a": }\n')
    with pytest.raises(SpecError, match=rf"^{bad}: invalid JSON at line 2 column 8: Expecting value$"):
        jsonio.read_object(str(bad), SpecError)
    arr = tmp_path / "arr.json"
    arr.write_text("[1]")
    with pytest.raises(SpecError, match=r"arr.json: the spec must be a JSON object, not an array$"):
        jsonio.read_object(str(arr), SpecError, not_object="the spec must be a JSON object, not {}")
    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"a": "\xe9"}')
    with pytest.raises(SpecError, match=r"latin.json: not UTF-8 text at byte 7$"):
        jsonio.read_object(str(latin), SpecError)
    with pytest.raises(SpecError, match=r"gone.json: No such file or directory$"):
        jsonio.read_object(str(tmp_path / "gone.json"), SpecError)
    with pytest.raises(SpecError, match=r"gone.json: no such file \(check the path\)$"):
        jsonio.read_object(str(tmp_path / "gone.json"), SpecError, missing="no such file (check the path)")
    with pytest.raises(SpecError, match=r"^state: cannot read: Is a directory$"):
        jsonio.read_object(str(tmp_path), SpecError, where="state", cannot_read="cannot read: {}")
