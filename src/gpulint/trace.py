"""Mark steps for `gpulint trace` in a program whose step is not an `optimizer.step()`.

    import gpulint.trace
    for batch in loader:
        run_inference(batch)
        gpulint.trace.step()

Outside `gpulint trace` this does nothing (and imports nothing heavy), so the call can stay in.
Once a program calls it, `gpulint trace` counts only these marks, not optimizer steps.
"""

from __future__ import annotations


def step() -> None:
    """The end of one step."""
    from gpulint.runtime import trace_runner

    trace_runner.step()
