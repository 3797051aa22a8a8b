"""Console-script entry points that take Ctrl-C over before anything heavy is imported.

A package's console script is ``iclr25-<slug> = "iclr25_shared.entry:<module>"`` (``<module>`` = the import name
without ``iclr25_``, e.g. ``hyper_connections``). The script imports only this small module, records a Ctrl-C from
then on, imports the package's ``cli`` (tyro and the package: 0.2-0.6 s, the window in which a Ctrl-C used to print
a traceback) and calls its ``main()``, whose runner installs its own handler. A Ctrl-C recorded during the import
exits 130 with the runner's one line, before anything is written.
"""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Callable

__all__: list[str] = []


def _launch(module: str) -> int:
    fired: list[int] = []
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.SIG_IGN:  # an inherited "ignore" (a background job) stays ignored
        signal.signal(signal.SIGINT, lambda signum, frame: fired.append(signum))
    try:
        main = importlib.import_module(f"iclr25_{module}.cli").main
    except KeyboardInterrupt:  # a Ctrl-C before the handler was set (interpreter start-up): same message
        fired.append(signal.SIGINT)
        main = None
    finally:
        if previous is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, previous)
    if fired or main is None:
        args = sys.argv[1:]
        label = f"iclr25-{module.replace('_', '-')}" + (
            f" {args[0]}" if args and not args[0].startswith("-") else ""
        )
        print(f"{label}: interrupted; no results were written", file=sys.stderr)
        return 130
    return int(main() or 0)


def __getattr__(name: str) -> Callable[[], int]:
    """``entry.<module>``: the console-script function of ``iclr25_<module>``."""
    if name.startswith("_"):
        raise AttributeError(name)

    def script() -> int:
        return _launch(name)

    script.__name__ = name
    return script
