"""Where a run's processes are: learner ranks on machines, explorer processes, their devices.

A launch (``accelerate launch`` or ``torchrun``) starts ``N`` learner ranks on one or more machines, ``L``
on each (``LOCAL_WORLD_SIZE``); rank ``r`` is local rank ``r mod L`` of machine ``r // L``. Mode ``async``
and ``synchronizer.explorer_process`` add ``M`` explorer processes (``synchronizer.explorers``, default
one per machine):

* explorer ``e`` runs on machine ``e mod machines``, started by that machine's first rank, its *leader*
  (one weights copy and one link per explorer there);
* it generates prompts ``[e·P/M, (e+1)·P/M)`` of every step (``P`` = ``rollout.prompts_per_step``): the
  task -> explorer assignment follows from the indices, never from which explorer is free first;
* learner rank ``r`` trains on the groups of prompts ``[r·P/N, (r+1)·P/N)``.

On GPUs explorer ``i`` of a machine uses ``synchronizer.explorer_devices[i]`` (devices no learner rank
uses), or, unset, the GPU of local rank ``i mod L``. Every check here runs before a model loads.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trinity_core.config import ConfigError, ConfigProblem, ResolvedConfig

__all__ = ["Layout", "check_explorers", "check_shared_run_dir", "launch_layout", "uses_explorer_process"]


@dataclass(frozen=True)
class Layout:
    """The learner ranks and explorer processes of a launch, seen from one rank."""

    rank: int
    world: int
    """Learner ranks ``N``."""
    local_world: int
    """Learner ranks per machine ``L``."""
    explorers: int
    """Explorer processes ``M`` (in modes without an explorer process: 1, unused)."""

    @property
    def machines(self) -> int:
        """Machines of the launch (``torchrun --nnodes``)."""
        return self.world // self.local_world

    @property
    def machine(self) -> int:
        """This rank's machine."""
        return self.rank // self.local_world

    @property
    def leader(self) -> bool:
        """Whether this rank is its machine's first: it starts and serves the machine's explorers."""
        return self.rank % self.local_world == 0

    @property
    def publishers(self) -> list[int]:
        """The leaders of the machines with explorers (rank 0 first): the ranks that hand weights to them."""
        return [machine * self.local_world for machine in range(min(self.machines, self.explorers))]

    def explorers_on(self, machine: int) -> list[int]:
        """The explorers that run on ``machine``, in index order."""
        return list(range(machine, self.explorers, self.machines))

    @property
    def local_explorers(self) -> list[int]:
        """The explorers this rank starts and serves (its machine's, when it is the leader)."""
        return self.explorers_on(self.machine) if self.leader else []

    def explorer_device(self, explorer: int, cpu: bool, devices: list[int] | None) -> str:
        """The torch device of ``explorer``: the CPU, its own GPU, or the GPU of a learner rank."""
        if cpu:
            return "cpu"
        slot = self.explorers_on(explorer % self.machines).index(explorer)
        return f"cuda:{devices[slot] if devices else slot % self.local_world}"

    @staticmethod
    def prompts(index: int, parts: int, total: int) -> range:
        """Prompts ``[index·total/parts, (index+1)·total/parts)`` of a step: share ``index`` of ``parts``."""
        return range(index * total // parts, (index + 1) * total // parts)


def uses_explorer_process(config: ResolvedConfig) -> bool:
    """Whether the run's explorers are processes of their own (mode ``async``, or
    ``synchronizer.explorer_process`` in mode ``both``)."""
    return config.mode == "async" or (config.mode == "both" and config.synchronizer.explorer_process)


def launch_layout(config: ResolvedConfig, rank: int, world: int, environ: Mapping[str, str]) -> Layout:
    """This rank's :class:`Layout`: machines from ``LOCAL_WORLD_SIZE`` (set by the launcher; one machine
    when absent), explorers from ``synchronizer.explorers`` (unset: one per machine).

    Raises:
        LaunchError: the ranks do not split evenly over the machines.
    """
    from trinity_core.train.report.result import LaunchError

    local_world = int(environ.get("LOCAL_WORLD_SIZE", world))
    if local_world < 1 or world % local_world:
        raise LaunchError(
            f"the launch has {world} processes, {local_world} per machine (LOCAL_WORLD_SIZE): machines "
            "must run the same number of processes (torchrun --nproc_per_node, accelerate launch "
            "--num_processes divided by --num_machines)"
        )
    machines = world // local_world
    explorers = (config.synchronizer.explorers or machines) if uses_explorer_process(config) else 1
    return Layout(rank=rank, world=world, local_world=local_world, explorers=explorers)


def check_explorers(config: ResolvedConfig, layout: Layout, *, cpu: bool, cuda_devices: int) -> None:
    """Refuse explorer processes that cannot be placed: a mode without them, prompts that do not split
    over them, GPUs asked for on the CPU, too few, overlapping or missing explorer devices.

    Raises:
        ConfigError: each problem at its ``synchronizer`` or ``rollout`` key, with what to change.
    """
    sync, problems = config.synchronizer, []
    if sync.explorer_process and (config.mode != "both" or sync.sync_offset == 0):
        where = f"mode {config.mode}" if config.mode != "both" else "sync_offset 0 (lock step)"
        problems.append(
            ConfigProblem(
                "synchronizer.explorer_process",
                f"an explorer process is for mode both with sync_offset > 0; this run has {where}",
                hint="set synchronizer.sync_offset: 1 (mode async always has an explorer process), "
                "or remove synchronizer.explorer_process",
            )
        )
    elif not uses_explorer_process(config):
        if (sync.explorers or 1) > 1 or sync.explorer_devices:
            key = "synchronizer.explorers" if (sync.explorers or 1) > 1 else "synchronizer.explorer_devices"
            problems.append(
                ConfigProblem(
                    key,
                    f"explorer processes are for mode async or synchronizer.explorer_process; mode "
                    f"{config.mode} runs {'no explorer' if config.mode == 'train' else 'its explorer'} "
                    "in the learner's process",
                    hint="set mode: async, or synchronizer.explorer_process: true with sync_offset: 1",
                )
            )
    else:
        problems += _placement_problems(config, layout, cpu=cpu, cuda_devices=cuda_devices)
    if problems:
        raise ConfigError(problems)


def _placement_problems(
    config: ResolvedConfig, layout: Layout, *, cpu: bool, cuda_devices: int
) -> list[ConfigProblem]:
    """Explorers against prompts and devices (modes with explorer processes)."""
    prompts, explorers = config.rollout.prompts_per_step, layout.explorers
    devices = config.synchronizer.explorer_devices
    problems = []
    if prompts % explorers:
        problems.append(
            ConfigProblem(
                "rollout.prompts_per_step",
                f"{prompts} prompts cannot be split over {explorers} explorer processes",
                hint=f"use a multiple of {explorers}, or synchronizer.explorers dividing {prompts}",
            )
        )
    if devices is None:
        return problems
    key, busiest = "synchronizer.explorer_devices", len(layout.explorers_on(0))
    learners = set(range(layout.local_world))
    if cpu:
        why = "this run is on the CPU (trainer.device)"
    elif len(devices) < busiest:
        why = f"{busiest} explorers run on a machine but {len(devices)} devices are listed: {devices}"
    elif len(set(devices)) < len(devices):
        why = f"a device is listed twice: {devices}"
    elif learners & set(devices):
        last = layout.local_world - 1
        why = (
            f"devices {sorted(learners & set(devices))} are learner ranks' (local ranks 0..{last} use "
            f"devices 0..{last}); an explorer device must be another GPU"
        )
    elif max(devices) >= cuda_devices:
        why = (
            f"this machine has {cuda_devices} CUDA devices (0..{cuda_devices - 1}); {devices} asks for others"
        )
    else:
        return problems
    hint = (
        "list one free GPU per explorer of a machine, or remove explorer_devices to share the learners' GPUs"
    )
    return [*problems, ConfigProblem(key, why, hint=hint)]


def check_shared_run_dir(config: ResolvedConfig, layout: Layout, run_dir: Path, accelerator: Any) -> None:
    """With ``synchronizer.method: checkpoint`` on several machines, check that every machine sees the run
    directory rank 0 writes the weights into (a file rank 0 writes, which each leader looks for).

    Every rank calls it (two collective calls); nothing stays in the run directory.

    Raises:
        ConfigError: at ``synchronizer.method``, naming the machines that do not see it.
    """
    import torch

    if (
        layout.machines == 1
        or config.synchronizer.method != "checkpoint"
        or not uses_explorer_process(config)
    ):
        return
    from accelerate.utils import broadcast_object_list

    name = [f".trinity-visible-{uuid.uuid4().hex}" if layout.rank == 0 else ""]
    probe = run_dir / name[0] if layout.rank == 0 else None
    if probe is not None:
        probe.write_bytes(b"")
    broadcast_object_list(name)
    seen = float(not layout.leader or (run_dir / name[0]).exists())
    flags = accelerator.gather(torch.tensor([seen], device=accelerator.device)).tolist()
    if probe is not None:
        os.remove(probe)
    blind = sorted({rank // layout.local_world for rank, ok in enumerate(flags) if not ok})
    if blind:
        raise ConfigError(
            [
                ConfigProblem(
                    "synchronizer.method",
                    f"checkpoint writes the weights into {run_dir}, which machine(s) {blind} do not see "
                    "(each machine must read the file rank 0 writes)",
                    hint="put --run-dir on a filesystem every machine mounts at the same path, or use "
                    "method: memory (the weights then cross machines by a torch.distributed broadcast)",
                )
            ]
        )
