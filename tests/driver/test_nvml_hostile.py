"""The NVML child's answer is not trusted (review finding): the driver's libnvidia-ml.so runs
in the forked child and shares its fds, so a broken or hostile library can write anything into
the pipe the parent reads. Whatever it writes, query() answers "no NVML facts" and one reason:
never a RecursionError, ValueError or TypeError, and never more than a bounded read.
Real parts: gcc-built libraries whose constructor writes into every fd, then exits."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build the libraries")

WRITER_C = r'''
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
static const char text[] = TEXT;
__attribute__((constructor)) static void answer(void) {
    static char buf[1 << 16];
    struct stat st;
    for (int fd = 3; fd < 64; fd++) {  /* every pipe: the answer's is one of them */
        if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode))
            continue;
        if (REPEAT_CHAR) {
            memset(buf, REPEAT_CHAR, sizeof buf);
            for (long i = 0; i < REPEAT; i++)
                if (write(fd, buf, sizeof buf) < 0) break;
        } else if (write(fd, text, sizeof text - 1) < 0) {
            continue;
        }
    }
    _exit(0);
}
int nvmlInit_v2(void) { return 0; }
'''


def _lib(tmp_path, name: str, *, text: str = "", char: str = "0", repeat: int = 0) -> str:
    src = tmp_path / f"{name}.c"
    src.write_text(WRITER_C)
    out = tmp_path / f"{name}.so"
    ctext = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    subprocess.run(["gcc", "-shared", "-fPIC", f"-DTEXT={ctext}", f"-DREPEAT_CHAR={char}", f"-DREPEAT={repeat}",
                    "-o", str(out), str(src)], check=True)
    return str(out)


def _query(lib: str, timeout: int) -> tuple[bool, int, str | None]:
    """(nvml, number of GPUs, error) of nvml.query in a fresh process: the library writes into
    every pipe it inherits, and pytest's own (saved stdout) must not be one of them."""
    code = (f"import json; from nct.driver import nvml; f = nvml.query({lib!r}, None, timeout={timeout}); "
            "print(json.dumps([f.nvml, len(f.gpus), f.error]))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout + 60)
    assert res.returncode == 0, res.stderr[-2000:]
    nvml_ok, gpus, error = json.loads(res.stdout)
    return nvml_ok, gpus, error


@pytest.mark.parametrize("name, text, char, repeat", [
    ("deep", "", "'['", 16),                                              # 1 MiB of "[": RecursionError
    ("not-an-object", "[1, 2, 3]", "0", 0),
    ("mig-gi-string", '{"nvml": true, "gpus": [{"bus_id": "0000:01:00.0", "migs": [{"gi": "x", "ci": 1}]}]}',
     "0", 0),
    ("uuid-a-list", '{"nvml": true, "gpus": [{"bus_id": "0000:01:00.0", "uuid": ["GPU-1"]}]}', "0", 0),
    ("bus-id-number", '{"nvml": true, "gpus": [{"bus_id": 7}]}', "0", 0),
    ("gpus-a-string", '{"nvml": true, "gpus": "GPU-1"}', "0", 0),
])
def test_garbled_answer_is_no_facts(tmp_path, name, text, char, repeat):
    nvml_ok, gpus, error = _query(_lib(tmp_path, name, text=text, char=char, repeat=repeat), 30)
    assert not nvml_ok and gpus == 0
    assert error == "the NVML query in a child process gave a garbled answer", error


def test_answer_read_is_bounded(tmp_path):
    """64 MiB of spaces (valid JSON whitespace, so the old reader kept all of it): the read
    stops past MAX_ANSWER and the child is killed."""
    nvml_ok, _, error = _query(_lib(tmp_path, "long", char="' '", repeat=1024), 60)
    assert not nvml_ok
    assert error == f"the NVML query in a child process gave an answer longer than {4 << 20} bytes", error
