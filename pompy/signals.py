"""SIGINT and SIGTERM during a command, met one of two ways.

:func:`signals_caught` notes a signal and lets the work go on to a point
where it can stop cleanly: ``pompy run`` finishes the step in progress and
writes its restart. :func:`raising_signals` raises
:class:`pompy.errors.Interrupted` where the program is, as Ctrl-C raises
KeyboardInterrupt: ``pompy generate`` then closes its dataset file and
keeps the snapshots finished. Either way SIGINT and SIGTERM are met
alike, and the previous handlers come back on exit; off the main thread
(where Python cannot install a handler) neither installs anything.

A raised Interrupted is an Exception, and code that turns the exceptions
it meets into its own lets it through only in the chain of its error:
torch.compile raises a TorchRuntimeError from one raised while it traces.
:func:`interruption` finds it there. Code may also drop it: netCDF4's
attribute probes clear any error (a generation under load lost about 1
signal in 30 there, measured), so :func:`raise_pending` raises it again
where the program can stop cleanly.
"""
from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator

from pompy.errors import Interrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _handling(handler: Callable) -> Iterator[bool]:
    """``handler`` on SIGINT and SIGTERM within the block (yields whether
    it was installed), the previous handlers back on exit."""
    try:
        previous = {s: signal.signal(s, handler) for s in SIGNALS}
    except ValueError:                   # not the main thread
        previous = None
    if previous is None:
        yield False
        return
    try:
        yield True
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


@contextlib.contextmanager
def signals_caught() -> Iterator[list[int]]:
    """SIGINT and SIGTERM noted (in the list yielded) instead of killing the
    run, so that the step in progress finishes and its restart is written;
    the previous handlers come back on exit. Off the main thread (where
    Python cannot install handlers) nothing is caught."""
    caught: list[int] = []
    with _handling(lambda signum, frame: caught.append(signum)):
        yield caught


# the signals raised within raising_signals' block, for raise_pending
_raised: list[int] = []


def _raise(signum: int, frame) -> None:
    _raised.append(signum)
    raise Interrupted(signum)


@contextlib.contextmanager
def raising_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`pompy.errors.Interrupted` (its
    ``signum`` the signal's) where the program is, so that files are
    closed as for Ctrl-C; the previous handlers come back on exit. Off the
    main thread nothing is installed."""
    _raised.clear()
    try:
        with _handling(_raise):
            yield
    finally:
        _raised.clear()


def raise_pending() -> None:
    """Within raising_signals' block, after a signal came: raise
    :class:`pompy.errors.Interrupted` for it again (code the first one went
    through may have dropped it). Call it where stopping is clean; it does
    nothing when no signal came."""
    if _raised:
        raise Interrupted(_raised[0])


def interruption(exc: BaseException) -> BaseException | None:
    """The KeyboardInterrupt or :class:`pompy.errors.Interrupted` that
    ``exc`` is, or that it was raised from or while handling (its
    ``__cause__`` and ``__context__``, followed); None if there is none."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, (KeyboardInterrupt, Interrupted)):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None
