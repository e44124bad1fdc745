"""``python -m pompy.launch``: torchrun, ending as pompy's commands end.

It takes torchrun's arguments as they are and runs torchrun's own code
(torch.distributed.run) in this process, so a training launch reads

    python -m pompy.launch --nproc_per_node=2 -m pompy train --config ...

and plain ``torchrun`` keeps working. What differs is how a launch ends.
Plain torchrun exits 1 with a traceback (ChildFailedError's, or
SignalException's when it gets SIGINT or SIGTERM), whatever its ranks
said. This one:

- exits with the ranks' status when one fails: 2 bad input (a certificate
  missing on a node), 3 a model stop, 4 a fault of the machine (a full
  disk), 130 or 143 a signal; the ranks agree before they stop
  (pompy.distributed.Distributed.stop_together), and their line, said by
  the first rank of each node, is the one line (torchrun's log lines about
  that stop are left out);
- on SIGINT or SIGTERM forwards it to the ranks as torchrun does (which
  stop as ``pompy train`` stops alone: the checkpoint to resume from and
  the command that does it, spelled ``python -m pompy.launch``) and exits
  128 + its number, no traceback; before the ranks start, it says so in
  one line;
- a rank killed by a signal (SIGKILL: the machine's memory) is one line
  naming it, and 128 + the signal; a rendezvous that fails (a node that
  never comes, the endpoint gone) is one line and exit 4.

A rank that fails with a bug (exit 1) has printed its traceback; torchrun's
lines about it are kept, and the status is 1.
"""
from __future__ import annotations

import logging
import os
import re
import shlex
import signal
import sys
from collections.abc import Sequence

# how ``python -m pompy.launch`` is spelled in the ranks' messages (pompy.train.cli)
SPELLING = "python -m pompy.launch"
LAUNCHER_VARIABLE = "POMPY_LAUNCHER"
# and its own options (those before the ranks' module or script), for the same
OPTIONS_VARIABLE = "POMPY_LAUNCH_OPTIONS"

# torchrun's log lines about a stop its ranks explain themselves; and, once
# they stopped, a node's rendezvous left by the node that kept it (the
# first node's torchrun holds it, and goes as soon as its ranks have)
_EXPLAINED = ("Received %s death signal, shutting down workers",
              "Sending process %s closing signal %s", "Closing process %s via signal %s",
              "failed (exitcode: %s) local_rank: %s (pid: %s) of binary: %s")
_RENDEZVOUS_LEFT = re.compile(r"The node '.*' has failed to shutdown the rendezvous '.*' due to "
                              r"an error of type RendezvousConnectionError\.")


# what a rendezvous error that says nothing means
_RENDEZVOUS_WHY = {"RendezvousTimeoutError": "the nodes did not all join in time (torchrun's "
                                            "--rdzv_conf join_timeout, 600 s by default)"}


class _Explained(logging.Filter):
    """Drops torchrun's lines on a stop the ranks said (not a bug's, exit 1)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and _RENDEZVOUS_LEFT.fullmatch(record.msg):
            return False
        if record.msg not in _EXPLAINED:
            return True
        if record.msg.startswith("failed (exitcode"):
            return bool(record.args) and record.args[0] == 1
        return False


class _Interrupted(BaseException):
    """A signal before torchrun's agent took its own handlers (a
    BaseException, as KeyboardInterrupt: torchrun's retries let it by)."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"signal {signum}")


def _raise(signum: int, frame) -> None:
    raise _Interrupted(signum)


def launch_options(words: list[str], args) -> str:
    """torchrun's own options of the command line ``words`` (parsed as
    ``args``): what comes before the ranks' module or script, -m aside."""
    before = words[:len(words) - len(args.training_script_args) - 1]
    return shlex.join(w for w in before if w not in ("-m", "--module"))


def main(argv: Sequence[str] | None = None) -> int:
    """torchrun with ``argv`` (its own argument parsing and errors); the
    status as the module's docstring says."""
    # torch's C++ warnings off in this process alone (torch reads the level
    # as it loads): the rendezvous' client warns, frame by frame, when the
    # node that kept it has gone; the ranks keep their own level
    quiet = "TORCH_CPP_LOG_LEVEL" not in os.environ
    if quiet:
        os.environ["TORCH_CPP_LOG_LEVEL"] = "ERROR"
    from torch.distributed import run as torchrun
    if quiet:
        del os.environ["TORCH_CPP_LOG_LEVEL"]

    words = list(sys.argv[1:] if argv is None else argv)
    args = torchrun.parse_args(words)
    os.environ[LAUNCHER_VARIABLE] = SPELLING       # the ranks inherit them
    os.environ[OPTIONS_VARIABLE] = launch_options(words, args)
    handlers = _torch_handlers()
    for handler in handlers:
        handler.addFilter(_Explained())
    previous = {s: signal.signal(s, _raise) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        torchrun.run(args)
        return 0
    except BaseException as exc:                  # noqa: BLE001 (each one is told below)
        code, line = _ending(exc)
        if line is not None:
            print(line, file=sys.stderr, flush=True)
        if code is None:
            raise
        return code
    finally:
        for s, old in previous.items():
            signal.signal(s, old)
        for handler in handlers:
            handler.filters = [f for f in handler.filters if not isinstance(f, _Explained)]


def _torch_handlers() -> list[logging.Handler]:
    """The handlers torch's loggers write through (``torch`` and
    ``torch.distributed`` each have one), and the root logger's."""
    loggers = [logging.getLogger()] + [
        logger for name, logger in logging.root.manager.loggerDict.items()
        if isinstance(logger, logging.Logger) and (name == "torch" or name.startswith("torch."))]
    return list({id(h): h for logger in loggers for h in logger.handlers}.values())


def _chain(exc: BaseException):
    """``exc`` and the errors it was raised from or while handling."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def _ending(exc: BaseException) -> tuple[int | None, str | None]:
    """The status and the line of a launch that raised ``exc`` (status
    None: re-raised, a bug's traceback)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import RendezvousError

    for err in _chain(exc):
        if isinstance(err, SignalException):        # the ranks were stopped and said so
            return 128 + int(err.sigval), None
        if isinstance(err, (_Interrupted, KeyboardInterrupt)):
            signum = getattr(err, "signum", signal.SIGINT)
            return 128 + signum, (f"pompy: interrupted ({signal.Signals(signum).name}) before "
                                  "the ranks started; nothing was written")
        if isinstance(err, ChildFailedError):
            rank, failure = err.get_first_failure()
            if failure.exitcode >= 0:              # the rank said why (a bug: its traceback)
                return failure.exitcode, None
            name = signal.Signals(-failure.exitcode).name
            return 128 - failure.exitcode, (f"pompy: rank {rank} (pid {failure.pid}) was killed "
                                            f"by {name}, its line unsaid (SIGKILL: often the "
                                            "machine's memory)")
    for err in _chain(exc):
        if isinstance(err, RendezvousError) or type(err).__name__ == "DistNetworkError":
            text = " ".join(str(err).split()) or _RENDEZVOUS_WHY.get(type(err).__name__, "")
            return 4, (f"pompy: torchrun's rendezvous failed: {type(err).__name__}"
                       f"{': ' + text if text else ''}; every node must run the same command "
                       "with the same --rdzv_id and --rdzv_endpoint (host:port of the first "
                       "node, reachable from each), within the join timeout")
    return None, None


if __name__ == "__main__":
    sys.exit(main())
