"""The torch.distributed calls context parallelism makes: ring exchanges (batched isend/irecv),
an equal-split all-to-all, an all-gather and a cross-rank agreement check.

NCCL moves CUDA tensors on the process group's own CUDA streams: ``Work.wait()`` makes the
caller's current stream wait on an event, so nothing here blocks the host and transfers overlap
the attention the caller launches meanwhile. gloo moves host tensors only: CUDA tensors on a gloo
group are staged through host copies (correct, synchronous; meant for tests).
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import Tensor

from .._errors import ArgumentError


class Group:
    """A process group as the ring sees it: this rank, the size, global ranks of peers."""

    def __init__(self, group: Optional[Any]) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise ArgumentError("argument 'group': torch.distributed is not initialized; call "
                                "torch.distributed.init_process_group first", "group")
        self.group = group
        self.rank = dist.get_rank(group)
        if self.rank < 0:
            raise ArgumentError("argument 'group': this process is not a member of the group", "group")
        self.size = dist.get_world_size(group)
        self.backend = str(dist.get_backend(group))

    def global_rank(self, group_rank: int) -> int:
        group_rank %= self.size
        return group_rank if self.group is None else dist.get_global_rank(self.group, group_rank)

    def staged(self, t: Tensor) -> bool:
        """True where the backend cannot move t's memory itself (a CUDA tensor on gloo)."""
        return t.device.type == "cuda" and "nccl" not in self.backend


class Pending:
    """Transfers in flight; wait() finishes them (on NCCL: orders the current stream after them)."""

    def __init__(self, works: List[Any], keep: List[Tensor], copies: List[Tuple[Tensor, Tensor]]) -> None:
        self._works, self._keep, self._copies = works, keep, copies

    def wait(self) -> None:
        for work in self._works:
            work.wait()
        for device_tensor, host_tensor in self._copies:
            device_tensor.copy_(host_tensor)
        self._works, self._keep, self._copies = [], [], []


def exchange(g: Group, sends: Sequence[Tensor], send_to: int, recvs: Sequence[Tensor], recv_from: int,
             tag: int = 0) -> Pending:
    """Sends each of sends to group rank send_to and receives recvs (preallocated, same order,
    same shapes as the peer's sends) from recv_from, as one batch_isend_irecv, the i-th with tag
    tag + i. Every rank of the ring posts the same pattern, so NCCL (which ignores tags) matches
    them in order; tags keep gloo's messages that are in flight together apart.

    On NCCL the transfers run on the process group's stream, which first waits for the work
    queued so far on the current stream; no stream of our own is needed: a transfer for the next
    step becomes ready exactly when this step's attention can start (both wait for the block to
    arrive and the previous step's work to finish), and buffers stay in the current stream's
    allocation order."""
    ops, keep, copies = [], [], []
    for i, t in enumerate(sends):
        if g.staged(t):
            t = t.cpu()
            keep.append(t)
        ops.append(dist.P2POp(dist.isend, t, g.global_rank(send_to), g.group, tag + i))
    for i, t in enumerate(recvs):
        if g.staged(t):
            host = torch.empty(t.shape, dtype=t.dtype)
            copies.append((t, host))
            t = host
        ops.append(dist.P2POp(dist.irecv, t, g.global_rank(recv_from), g.group, tag + i))
    keep.extend(sends)
    return Pending(dist.batch_isend_irecv(ops), keep, copies)


def all_to_all(g: Group, x: Tensor) -> Tensor:
    """x (size, ...) contiguous: returns y with y[i] = rank i's x[this rank]."""
    if g.staged(x):
        return all_to_all(_HostView(g), x.cpu()).to(x.device)
    y = torch.empty_like(x)
    dist.all_to_all_single(y, x, group=g.group)
    return y


def all_gather(g: Group, x: Tensor) -> List[Tensor]:
    """Every rank's x (same shape everywhere), in group rank order."""
    if g.staged(x):
        return [t.to(x.device) for t in all_gather(_HostView(g), x.cpu())]
    out = [torch.empty_like(x) for _ in range(g.size)]
    dist.all_gather(out, x.contiguous(), group=g.group)
    return out


class _HostView(Group):
    """The same group, for host tensors (after staging)."""

    def __init__(self, g: Group) -> None:  # noqa: D107 - shares g's state
        self.__dict__.update(g.__dict__)

    def staged(self, t: Tensor) -> bool:
        return False


def check_same_on_every_rank(g: Group, **named: Any) -> None:
    """Raises ArgumentError on every rank when some named value differs between ranks: peers
    exchange tensors of the shapes they compute locally, so a difference would otherwise hang
    or mix unrelated data."""
    if g.size == 1:
        return
    everyone: List[Any] = [None] * g.size
    dist.all_gather_object(everyone, named, group=g.group)
    for name in named:
        values = [d[name] for d in everyone]
        if any(v != values[0] for v in values):
            shown = ", ".join(f"rank {r}: {v}" for r, v in enumerate(values))
            raise ArgumentError(f"argument '{name}': must agree on every rank of the group ({shown})", name)
