"""Who this process is among the processes torchrun started, and what they
do together: :class:`Distributed` holds the rank, the world size, the
device and (once joined) the process group, and is the one place where
the ranks reduce, gather, wait for each other and agree to stop.

torchrun sets RANK, WORLD_SIZE and LOCAL_RANK; without them a process is
rank 0 of 1 and makes no group. The group is NCCL on CUDA and gloo on the
CPU. ``pompy generate`` reads the ranks to split its members and never
joins (its ranks do not talk); the trainer joins.

Where a rank meets an error the others must stop for (a certificate
missing on its node, a full disk under rank 0's checkpoint),
:meth:`Distributed.stop_together` hands its one-line message to every
rank, which raises it alike (marked :attr:`ALIKE`): each exits with the
same status, and the command line says the line once per node (local rank
0). Every collective gives up after :data:`TIMEOUT` (the group's), so a
rank that never arrives stops the others rather than holding them.
"""
from __future__ import annotations

import dataclasses
import datetime
import socket
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

from pompy.errors import EnvironmentFault, InputError

# how long a collective (the agreement included) waits for the other ranks:
# torch's default for gloo, made explicit; past it the waiting ranks stop
TIMEOUT = datetime.timedelta(minutes=30)

# the attribute marking an error every rank raised alike (stop_together)
ALIKE = "raised_alike_on_every_rank"


def _ranks(environ: Mapping[str, str]) -> tuple[int, int, int]:
    """(RANK, WORLD_SIZE, LOCAL_RANK) as torchrun sets them; (0, 1, 0) without."""
    values = {}
    for name, default in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", None)):
        text = environ.get(name, default)
        if text is None:
            continue
        try:
            values[name] = int(text)
        except ValueError:
            raise InputError(f"environment variable {name}={text!r} is not an integer") from None
    rank, world = values["RANK"], values["WORLD_SIZE"]
    if world < 1 or not 0 <= rank < world:
        raise InputError(f"RANK={rank}, WORLD_SIZE={world}: need 0 <= RANK < WORLD_SIZE")
    return rank, world, values.get("LOCAL_RANK", rank)


def torch_device(name: str) -> torch.device:
    """The torch device of ``--device NAME``; InputError naming it where
    torch knows no such device."""
    try:
        return torch.device(name)
    except RuntimeError:
        raise InputError(f"--device {name}: not a torch device (cpu, cuda, cuda:N)") from None


@dataclasses.dataclass
class Distributed:
    """This process among torchrun's: its rank, the world size, its local
    rank on the node, its device (a bare ``cuda`` becomes
    ``cuda:LOCAL_RANK``) and whether it has joined the process group."""
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    joined: bool = False

    @classmethod
    def from_environ(cls, environ: Mapping[str, str], device: str = "cpu") -> Distributed:
        rank, world, local = _ranks(environ)
        return cls(rank, world, local, torch_device(cls.device_name(device, local, world)))

    @staticmethod
    def device_name(device: str, local_rank: int, world_size: int) -> str:
        """Under torchrun each rank on its own GPU, cuda:LOCAL_RANK, whatever
        cuda device was asked for (one device for all would be shared by
        every rank); one process on the device asked for."""
        if world_size > 1 and str(device).startswith("cuda"):
            return f"cuda:{local_rank}"
        return str(device)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def many(self) -> bool:
        """More than one process: the ranks talk through the group."""
        return self.world_size > 1

    def prefix(self, command: str) -> str:
        """A message's prefix: the command, and the rank where there are several."""
        return f"{command} [rank {self.rank}/{self.world_size}]" if self.many else command

    # -------------------------------------------------------------- the group
    def join(self) -> None:
        """The process group (NCCL on CUDA, gloo on the CPU); none for one process."""
        if not self.many or self.joined:
            return
        if not dist.is_initialized():
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)
            dist.init_process_group(backend="nccl" if self.device.type == "cuda" else "gloo",
                                    timeout=TIMEOUT)
        self.joined = True

    def leave(self) -> None:
        if self.joined and dist.is_initialized():
            dist.destroy_process_group()
        self.joined = False

    def agree(self, ok: bool) -> bool:
        """Whether every rank is ok (each rank's own ``ok`` for one process):
        the ranks stop, or refuse, together."""
        if not self.joined:
            return ok
        flag = torch.tensor([1.0 if ok else 0.0], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())

    def stop_together(self, error: InputError | EnvironmentFault | None) -> None:
        """Every rank stops if any rank has an ``error``: each raises the
        first such rank's, with its message (prefixed with that rank, its
        world size and its host where there are several), an InputError
        (exit 2) or an EnvironmentFault (exit 4) as that rank's was, marked
        :data:`ALIKE`; nothing happens where no rank has one. A rank lost
        on the way (its process gone, or past :data:`TIMEOUT`) is an
        EnvironmentFault. One process raises its own ``error``."""
        if not self.joined:
            if error is not None:
                raise error
            return
        mine = None if error is None else (isinstance(error, InputError), str(error),
                                           socket.gethostname())
        try:
            every = self.gather(mine)
        except RuntimeError as lost:                 # gloo and NCCL's DistError among them
            text = " ".join(str(lost).split())[:300]
            raise EnvironmentFault(f"rank {self.rank} of {self.world_size}: lost the other "
                                   f"ranks while agreeing whether to go on ({text})") from lost
        first = next(((r, e) for r, e in enumerate(every) if e is not None), None)
        if first is None:
            return
        rank, (bad_input, message, host) = first
        shared = (InputError if bad_input else EnvironmentFault)(
            f"rank {rank} of {self.world_size} ({host}): {message}")
        setattr(shared, ALIKE, True)
        raise shared from error

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The ranks' sum of ``tensor`` (in place; itself for one process)."""
        if self.joined:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def mean(self, tensor: torch.Tensor) -> torch.Tensor:
        """The ranks' average of ``tensor`` (on this rank's device)."""
        if not self.joined:
            return tensor
        return self.sum(tensor.to(self.device)) / self.world_size

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (picklable), in rank order."""
        if not self.joined:
            return [value]
        out = [None] * self.world_size
        dist.all_gather_object(out, value)
        return out

    def barrier(self) -> None:
        if self.joined:
            dist.barrier()
