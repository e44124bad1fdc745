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

:func:`stopping` is the trainer's: within :meth:`Stop.raising` either signal
raises KeyboardInterrupt where the program is (SIGTERM as Ctrl-C), and
after it a signal is only noted, so that a rank that is already stopping
(closing its files, leaving the process group) is not stopped again inside
that; :attr:`Stop.signum`, the first signal, tells the exit status (128 +
it) even where what reached the program was the error a collective raised
once a peer had gone. As a raised KeyboardInterrupt may be dropped, the
signal comes again until the program has stopped.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
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


class Stop:
    """The first SIGINT or SIGTERM within :func:`stopping`'s block
    (``signum``, None before one came); while :meth:`raising`, a signal
    raises KeyboardInterrupt where the program is, and comes again every
    :attr:`again` seconds until the program has left that block: code may
    drop the KeyboardInterrupt (netCDF4 clears errors raised within its
    callbacks: a training run reading its dataset went on after SIGTERM in
    1 test of 3)."""

    again = 1.0

    def __init__(self) -> None:
        self.signum: int | None = None
        self._armed = False
        self._repeating: threading.Thread | None = None

    def _handle(self, signum: int, frame) -> None:
        if self.signum is None:
            self.signum = signum
        if self._armed:
            if self._repeating is None:
                self._repeating = threading.Thread(target=self._repeat, args=(signum,),
                                                   name="pompy-signal-again", daemon=True)
                self._repeating.start()
            raise KeyboardInterrupt

    def _repeat(self, signum: int) -> None:
        """The signal again while the program is within :meth:`raising`
        (once it has left, a signal is only noted)."""
        while self._armed:
            time.sleep(self.again)
            if self._armed:
                os.kill(os.getpid(), signum)

    @contextlib.contextmanager
    def raising(self) -> Iterator[None]:
        """Signals raise KeyboardInterrupt within the block; outside it they
        are noted only."""
        self._armed = True
        try:
            yield
        finally:
            self._armed = False


@contextlib.contextmanager
def stopping() -> Iterator[Stop]:
    """SIGINT and SIGTERM met alike for the block (see :class:`Stop`), the
    previous handlers back on exit; off the main thread nothing is caught
    and ``signum`` stays None."""
    stop = Stop()
    with _handling(stop._handle):
        yield stop
