"""Thread-block clusters in the interpreter (the `cluster` launch option).

With `cluster=N`, programs N*c .. N*c+N-1 along grid axis 0 form cluster c. The
programs of one cluster run at the same time, one Python thread each (their own
registers, the run's memory shared); clusters run one after another. A
`tile.cluster_sync` waits for every program of the cluster.

What the hardware leaves undefined is an InterpreterError here, never a hang:

- a program that ends (or fails) while others wait at a cluster_sync, which is
  also how different numbers of syncs per program show up;
- a `tile.load_view` marked `multicast` whose k-th execution loads a different
  tile in two programs of a cluster, or that two programs execute a different
  number of times.
"""
from __future__ import annotations

import threading
from typing import Dict, List, Tuple

import numpy as np

from ..errors import InterpreterError
from ..ir import tile_ops as T
from .engine import CLUSTER, PID, EarlyReturn, rule, run_body

__all__ = ["ClusterRun", "ClusterMember", "check_multicast", "run_clusters"]


def _where(op) -> str:
    return f"{op.loc.file}:{op.loc.line}" if op.loc.known else f"'{op.name}'"


class _Aborted(InterpreterError):
    """A program of the cluster failed: the others stop at their next cluster_sync (an
    InterpreterError so that the op-fault wrapping lets it through)."""


class _Deadlock(InterpreterError):
    """A program waits at a cluster_sync that another program of its cluster will never reach."""


class ClusterRun:
    """The shared state of one cluster's programs: the barrier and the multicast log."""

    def __init__(self, size: int, pids: List[Tuple[int, int, int]]):
        self.size = size
        self.pids = pids                       # program id per rank
        self.cv = threading.Condition()
        self.arrived = 0
        self.generation = 0
        self.syncs = [0] * size                # cluster_syncs reached, per rank
        self.ended: Dict[int, int] = {}        # rank -> syncs done when it ended
        self.failed = False
        # (id of the op, k) -> (rank, tile start, index values) of the first program there
        self.multicast: Dict[Tuple[int, int], Tuple[int, Tuple, Tuple]] = {}
        self.multicast_counts: List[Dict[int, int]] = [{} for _ in range(size)]
        self.multicast_ops: Dict[int, object] = {}
        # (id of the op, k) -> the values of the k-th execution of a cluster_gather, by rank
        self.gathered: Dict[Tuple[int, int], list] = {}
        self.gather_counts: List[Dict[int, int]] = [{} for _ in range(size)]

    # -- cluster_sync ------------------------------------------------------------
    def sync(self, rank: int, op) -> None:
        with self.cv:
            self.syncs[rank] += 1
            self._check_ended(rank, op)
            gen = self.generation
            self.arrived += 1
            if self.arrived == self.size:
                self.arrived = 0
                self.generation += 1
                self.cv.notify_all()
                return
            while self.generation == gen:
                self.cv.wait()
                if self.generation == gen:
                    self._check_ended(rank, op)

    def gather(self, rank: int, op, value) -> list:
        """Every rank's `value` at this execution of the gather `op` (a cluster_sync between)."""
        with self.cv:
            counts = self.gather_counts[rank]
            k = counts.get(id(op), 0)
            counts[id(op)] = k + 1
            self.gathered.setdefault((id(op), k), [None] * self.size)[rank] = value
        self.sync(rank, op)
        with self.cv:
            return list(self.gathered[(id(op), k)])

    def _check_ended(self, rank: int, op) -> None:
        if self.failed:
            raise _Aborted()
        if self.ended:
            other, done = next(iter(self.ended.items()))
            raise _Deadlock(
                f"cluster_sync deadlock: program {self.pids[rank]} waits at cluster_sync number "
                f"{self.syncs[rank]} at {_where(op)}, but program {self.pids[other]} of its cluster "
                f"ended after {done} cluster_sync(s); every program of a cluster must reach each "
                "cluster_sync the same number of times")

    def end(self, rank: int, failed: bool) -> None:
        with self.cv:
            self.ended[rank] = self.syncs[rank]
            self.failed = self.failed or failed
            self.cv.notify_all()

    # -- the multicast promise ---------------------------------------------------
    def check_multicast(self, rank: int, op, start, index) -> None:
        key = id(op)
        with self.cv:
            counts = self.multicast_counts[rank]
            k = counts.get(key, 0)
            counts[key] = k + 1
            self.multicast_ops[key] = op
            first = self.multicast.setdefault((key, k), (rank, tuple(start), tuple(index)))
        if first[1] != tuple(start):
            raise InterpreterError(
                f"multicast load at {_where(op)} breaks its promise (execution {k + 1}): program "
                f"{self.pids[first[0]]} loads the tile at index {first[2]} but program {self.pids[rank]} "
                f"of the same cluster loads index {tuple(index)}; every program of a cluster must load "
                "the same tile there")

    def check_multicast_counts(self) -> None:
        """After the cluster ran: every program executed each multicast load equally often."""
        for key, op in self.multicast_ops.items():
            counts = [c.get(key, 0) for c in self.multicast_counts]
            if len(set(counts)) > 1:
                lo, hi = counts.index(min(counts)), counts.index(max(counts))
                raise InterpreterError(
                    f"multicast load at {_where(op)} breaks its promise: program {self.pids[lo]} executes it "
                    f"{counts[lo]} time(s), program {self.pids[hi]} {counts[hi]} time(s); every program of a "
                    "cluster must execute it equally often")


class ClusterMember:
    """What a program's `regs[CLUSTER]` holds: its cluster and its rank there."""

    __slots__ = ("run", "rank")

    def __init__(self, run: ClusterRun, rank: int):
        self.run = run
        self.rank = rank


def _run_member(prog, base_regs: list, member: ClusterMember, errors: list) -> None:
    regs = list(base_regs)
    regs[PID] = tuple(np.int32(p) for p in member.run.pids[member.rank])
    regs[CLUSTER] = member
    failed = False
    try:
        with np.errstate(all="ignore"):  # numpy's error state is per thread
            try:
                run_body(prog.entry, regs)
            except EarlyReturn:
                pass
    except _Aborted:
        failed = True
    except BaseException as e:  # noqa: BLE001 - reported by the launching thread
        failed = True
        errors.append((member.rank, e))
    finally:
        member.run.end(member.rank, failed)


# ----------------------------------------------------------------------------- rules
@rule(T.ClusterRankOp)
def _cluster_rank(op, cx):
    o = cx.out(op)
    zero = np.int32(0)

    def step(r):
        member = r[CLUSTER]
        r[o] = zero if member is None else np.int32(member.rank)
    return step


@rule(T.ClusterSyncOp)
def _cluster_sync(op, cx):
    def step(r):
        member = r[CLUSTER]
        if member is not None:  # one program alone: nothing to wait for
            member.run.sync(member.rank, op)
    return step


@rule(T.ClusterGatherOp)
def _cluster_gather(op, cx):
    outs, ins = [cx.out(op, i) for i in range(len(op.results))], cx.ins(op)
    size = op.attrs["size"]
    np_dtypes = [np.float32 if v.type.dtype.name == "f32" else np.int32 for v in op.operands]

    def step(r):
        member = r[CLUSTER]
        have = 1 if member is None else member.run.size
        if have != size:
            raise InterpreterError(f"cluster_gather at {_where(op)} gathers {size} values, but the launch "
                                   f"runs clusters of {have} program(s): size must be the `cluster` option")
        mine = tuple(r[x] for x in ins)
        every = [mine] if member is None else member.run.gather(member.rank, op, mine)
        pad = op.attrs.get("padding") or [0] * len(outs)
        for i, (o, d) in enumerate(zip(outs, np_dtypes)):
            r[o] = np.array([v[i] for v in every] + [pad[i]] * (op.entries - size), dtype=d)
    return step


def check_multicast(r, op, start, index) -> None:
    """The multicast promise of one execution of `op` (no-op outside clusters)."""
    member = r[CLUSTER]
    if member is not None:
        member.run.check_multicast(member.rank, op, start, index)


def run_clusters(prog, base_regs: list, grid3, cluster: int) -> None:
    """Run every program of `grid3` in clusters of `cluster` along x (x % cluster == 0)."""
    gx, gy, gz = grid3
    for z in range(gz):
        for y in range(gy):
            for x0 in range(0, gx, cluster):
                run = ClusterRun(cluster, [(x0 + r, y, z) for r in range(cluster)])
                errors: list = []
                threads = [threading.Thread(target=_run_member, args=(prog, base_regs, ClusterMember(run, r), errors),
                                            name=f"tilec-program-{x0 + r}-{y}-{z}", daemon=True)
                           for r in range(cluster)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                _raise_first(errors)
                run.check_multicast_counts()


def _raise_first(errors: list) -> None:
    """The error to report: a program's own failure before a deadlock it caused."""
    if not errors:
        return
    errors.sort(key=lambda e: (isinstance(e[1], _Deadlock), e[0]))
    raise errors[0][1]
