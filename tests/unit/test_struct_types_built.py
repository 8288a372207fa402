"""msgspec's decoding information of every Struct the project defines is built when its module is imported
(eventdata.build_types), not at the type's first use: building it runs Python code (the annotations are read), where
another thread can run and meet it half-built, and a local run's CLI died of SIGSEGV in msgspec's convert so. Once
built, a conversion runs no Python code at all: that is what is checked, type by type, on a fresh interpreter."""

import subprocess
import sys
from pathlib import Path

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"
MODULES = ("brokerbench.eventdata", "brokerbench.events.memory", "brokerbench.reports.rows",
           "brokerbench.reports.changes", "brokerbench.reports.export", "brokerbench.reports.faults",
           "brokerbench.reports.regression", "brokerbench.reports.study", "brokerbench.reports.svg")
CHECK = """
import importlib, sys
import msgspec
modules = [importlib.import_module(name) for name in sys.argv[1:]]
types = [v for m in modules for v in vars(m).values()
         if isinstance(v, type) and issubclass(v, msgspec.Struct) and v.__module__ == m.__name__]
calls = []
def profile(frame, event, arg):
    if event == "call":
        calls.append(frame.f_code.co_qualname)
late = {}
for t in types:
    calls.clear()
    sys.setprofile(profile)
    try:
        msgspec.convert({}, t)
    except msgspec.ValidationError:
        pass
    finally:
        sys.setprofile(None)
    if calls:
        late[t.__qualname__] = calls[:3]
print(len(types), late)
"""


def test_every_struct_is_ready_before_its_first_use():
    done = subprocess.run([sys.executable, "-c", CHECK, *MODULES], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(FUNCTIONS), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    count, late = done.stdout.strip().split(" ", 1)
    assert int(count) > 100 and late == "{}", late
