# Loaded by every kernel the tests start (IPYTHONDIR points here): each floating-point exercise check
# is run twice more, with its expected value moved by float32 round-off (a few units in the last place
# of the data's largest magnitude, signs at random). A book answer refused then would be refused on a
# machine that rounds differently, so the cell fails here.
import contextlib as _contextlib
import io as _io
import sys as _sys

import numpy as _np


def _install_roundoff_checks():
    shardlab = _sys.modules.get("shardlab")
    if shardlab is None or getattr(shardlab.check, "roundoff_checked", False):
        return
    original = shardlab.check

    def check(answer, expected, **kwargs):
        result = original(answer, expected, **kwargs)
        floating = isinstance(expected, (float, _np.floating)) or (
            hasattr(expected, "__array__") and _np.asarray(expected).dtype.kind == "f")
        if answer is Ellipsis or not floating:
            return result
        e = _np.asarray(expected, dtype=_np.float64)
        scale = float(_np.max(_np.abs(e))) if e.size else 0.0
        rng = _np.random.default_rng(0)
        for k in range(2):
            signs = rng.choice([-1.0, 1.0], size=e.shape)
            moved = e + signs * 4 * float(_np.finfo(_np.float32).eps) * scale
            moved = float(moved) if e.shape == () else moved
            try:
                with _contextlib.redirect_stdout(_io.StringIO()):
                    original(answer, moved, **kwargs)
            except AssertionError as error:
                raise AssertionError(
                    "this check refuses the answer once its expected value moves by float32 round-off "
                    f"(4 ulp of {scale:.3g}): give it a tolerance scaled to the data. {error}") from None
        return result

    check.roundoff_checked = True
    shardlab.check = check


get_ipython().events.register("pre_run_cell", lambda *_: _install_roundoff_checks())
