"""pdsl.numerics loads fixed_step and sensitivity on first use of their names (issue 36.2): a simulation reaching
pdsl.numerics.dop853 through the package loads neither; every exported name still resolves, to the submodule's
object."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r'''
import sys
import pdsl.numerics.dop853
assert "pdsl.numerics.fixed_step" not in sys.modules and "pdsl.numerics.sensitivity" not in sys.modules
import pdsl.numerics as N
from pdsl.numerics import make_step, LOSSES
from pdsl.numerics import fixed_step, sensitivity
assert make_step is fixed_step.make_step and LOSSES is sensitivity.LOSSES
for name in N.__all__:
    assert getattr(N, name) is getattr(fixed_step if hasattr(fixed_step, name) else sensitivity, name), name
assert set(N.__all__) <= set(dir(N))
try:
    N.no_such_name
except AttributeError as err:
    assert "no_such_name" in str(err)
else:
    raise AssertionError("an unknown name resolved")
print("ok")
'''


def test_numerics_names_load_their_module_on_first_use():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
