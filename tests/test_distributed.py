"""pompy.distributed: the ranks torchrun's environment gives, each rank's
device, and what the ranks do together (agree, sum, mean, gather, stop
together), on two gloo processes on 127.0.0.1 against the values each rank
holds."""
from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from pompy.distributed import ALIKE, Distributed
from pompy.errors import EnvironmentFault, InputError


def test_the_environment_gives_the_ranks():
    d = Distributed.from_environ({})
    assert (d.rank, d.world_size, d.local_rank, d.device, d.many) == \
        (0, 1, 0, torch.device("cpu"), False)
    d = Distributed.from_environ({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"})
    assert (d.rank, d.world_size, d.local_rank, d.is_main, d.many) == (3, 4, 1, False, True)
    assert d.prefix("pompy generate") == "pompy generate [rank 3/4]"
    for environ, told in (({"RANK": "x"}, "RANK='x' is not an integer"),
                          ({"RANK": "2", "WORLD_SIZE": "2"}, "need 0 <= RANK < WORLD_SIZE")):
        with pytest.raises(InputError, match=told):
            Distributed.from_environ(environ)
    with pytest.raises(InputError, match=r"^--device tpu: not a torch device"):
        Distributed.from_environ({}, "tpu")


def test_under_torchrun_each_rank_has_its_own_gpu():
    """Any cuda device asked for under torchrun is the rank's own,
    cuda:LOCAL_RANK (one device shared by every rank would be refused by
    NCCL); one process keeps the device asked for."""
    name = Distributed.device_name
    assert name("cuda", 1, 2) == name("cuda:0", 1, 2) == "cuda:1"
    assert name("cuda:1", 0, 1) == "cuda:1" and name("cuda", 0, 1) == "cuda"
    assert name("cpu", 1, 2) == "cpu"


def test_one_process_does_alone_what_the_ranks_would_do_together():
    d = Distributed()
    x = torch.tensor([1.0, 2.0])
    assert d.agree(True) and not d.agree(False)
    assert d.sum(x) is x and d.mean(x) is x and d.gather("a") == ["a"]
    d.join()
    d.barrier()
    assert not d.joined


def _rank(rank: int, port: int, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE="2", LOCAL_RANK=str(rank))       # as torchrun sets them
    d = Distributed.from_environ(os.environ)
    d.join()
    try:
        out[rank] = {"agree_all": d.agree(True), "agree_one": d.agree(rank == 0),
                     "sum": d.sum(torch.tensor([rank + 1.0])).tolist(),
                     "mean": d.mean(torch.tensor([rank * 2.0, 1.0])).tolist(),
                     "gather": d.gather({"rank": rank})}
        d.barrier()
    finally:
        d.leave()


def test_two_gloo_ranks_agree_reduce_and_gather():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with mp.Manager() as manager:
        out = manager.dict()
        mp.start_processes(_rank, args=(port, out), nprocs=2, start_method="spawn", join=True)
        got = dict(out)
    for rank in (0, 1):
        assert got[rank] == {"agree_all": True, "agree_one": False, "sum": [3.0],
                             "mean": [1.0, 1.0], "gather": [{"rank": 0}, {"rank": 1}]}, rank


def _stopping_rank(rank: int, port: int, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE="2", LOCAL_RANK=str(rank))
    d = Distributed.from_environ(os.environ)
    d.join()
    try:
        d.stop_together(None)                       # no rank has an error: nothing happens
        got = []
        for error in (InputError("rank 1 has no certificate here") if rank == 1 else None,
                      EnvironmentFault(f"disk of rank {rank} full")):
            try:
                d.stop_together(error)
            except (InputError, EnvironmentFault) as err:
                got.append((type(err).__name__, str(err), getattr(err, ALIKE, False)))
        out[rank] = got
    finally:
        d.leave()


def test_a_rank_that_stops_hands_its_line_to_every_rank():
    """stop_together: the first rank with an error gives every rank its
    line (naming that rank and its host) and its kind, InputError or
    EnvironmentFault, marked alike; one process raises its own error."""
    alone = InputError("mine")
    with pytest.raises(InputError) as raised:
        Distributed().stop_together(alone)
    assert raised.value is alone
    Distributed().stop_together(None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with mp.Manager() as manager:
        out = manager.dict()
        mp.start_processes(_stopping_rank, args=(port, out), nprocs=2, start_method="spawn",
                           join=True)
        got = dict(out)
    host = socket.gethostname()
    want = [("InputError", f"rank 1 of 2 ({host}): rank 1 has no certificate here", True),
            ("EnvironmentFault", f"rank 0 of 2 ({host}): disk of rank 0 full", True)]
    assert got == {0: want, 1: want}
