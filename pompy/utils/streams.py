"""The command line's stdout and stderr when their reader leaves or their
device fills: `pompy run ... 2>&1 | head -2`, `pompy compare A B | head`,
`pompy run ... > /dev/full`. A message that cannot be written is lost, not
the command's work: it goes on without its messages, to its own exit code
(a run to its restart, a comparison to its verdict); pompy.cli.main says
so, exit 4, where a full device took stdout from a command whose product
it is (config, compare)."""
from __future__ import annotations

import errno
import os

# what "the reader left" and "the device is full" raise on a write
LOST = (errno.EPIPE, errno.ENOSPC)


class Tolerant:
    """``stream`` as long as it takes what is written; from the first write
    or flush it refuses with one of LOST on, nothing (its file descriptor
    then points at the null device, so that the interpreter's last flush
    of what it still holds fails no more)."""

    def __init__(self, stream):
        self.stream = stream
        self.lost: int | None = None        # the errno of LOST it refused with

    def write(self, text: str) -> int:
        if self.lost is None:
            try:
                return self.stream.write(text)
            except OSError as err:
                self._lose(err)
        return len(text)

    def flush(self) -> None:
        if self.lost is None:
            try:
                self.stream.flush()
            except OSError as err:
                self._lose(err)

    def _lose(self, err: OSError) -> None:
        if err.errno not in LOST:
            raise err
        self.lost = err.errno
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self.stream.fileno())
            os.close(null)
        except (OSError, ValueError, AttributeError):   # no file descriptor (a test's capture)
            pass

    def __getattr__(self, name: str):
        return getattr(self.stream, name)
