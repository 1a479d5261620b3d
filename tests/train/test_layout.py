"""Where explorer processes go, which prompts each generates and each learner rank trains on, how their
steps cross (pickle-free, nothing lost or twice), and the placements refused before a model loads."""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from async_support import broadcast_rank, broadcast_weights
from hypothesis import given
from hypothesis import strategies as st

from trinity_core.codec import serialize_many
from trinity_core.config import ConfigError, resolve_config
from trinity_core.experience import EID, Experience
from trinity_core.train.data.tasks import build_task
from trinity_core.train.modes.explorer_process import TaskShare
from trinity_core.train.modes.layout import Layout, check_explorers, check_shared_run_dir, launch_layout
from trinity_core.train.modes.shipments import (
    Shipment,
    pack,
    rank_share,
    step_metrics,
    step_shipments,
    unpack,
)
from trinity_core.train.report.result import LaunchError

BASE: dict[str, Any] = {
    "mode": "async",
    "rollout": {"prompts_per_step": 12},
    "synchronizer": {"sync_offset": 1},
    "tasks": {"name": "copy"},
}


def _config(mode: str = "async", prompts: int = 12, **sync: Any) -> Any:
    data = copy.deepcopy(BASE)
    data["mode"] = mode
    data["rollout"]["prompts_per_step"] = prompts
    data["synchronizer"].update(sync)
    return resolve_config(data)


def _refusal(config: Any, layout: Layout, *, cpu: bool = False, cuda: int = 8) -> str:
    with pytest.raises(ConfigError) as caught:
        check_explorers(config, layout, cpu=cpu, cuda_devices=cuda)
    return str(caught.value)


# ------------------------------------------------------------------------------------------- placement


def test_explorers_go_round_robin_over_machines_each_started_by_its_first_rank() -> None:
    # 2 machines x 3 ranks, 5 explorers: machine 0 gets explorers 0, 2, 4 and machine 1 gets 1, 3.
    layouts = [Layout(rank=r, world=6, local_world=3, explorers=5) for r in range(6)]
    assert [(lay.machine, lay.leader) for lay in layouts] == [
        (0, True), (0, False), (0, False), (1, True), (1, False), (1, False),
    ]  # fmt: skip
    assert [lay.local_explorers for lay in layouts] == [[0, 2, 4], [], [], [1, 3], [], []]
    assert layouts[0].publishers == [0, 3]
    # Explorer devices: the i-th explorer of a machine; unset, the GPU of local rank i mod 3.
    assert [layouts[0].explorer_device(e, False, [6, 7, 5]) for e in range(5)] == [
        "cuda:6", "cuda:6", "cuda:7", "cuda:7", "cuda:5",
    ]  # fmt: skip
    assert [layouts[0].explorer_device(e, False, None) for e in range(5)] == [
        "cuda:0", "cuda:0", "cuda:1", "cuda:1", "cuda:2",
    ]  # fmt: skip
    assert layouts[0].explorer_device(3, True, [6, 7]) == "cpu"
    # One explorer on 2 machines: only machine 0's leader hands weights to explorers.
    assert Layout(rank=0, world=4, local_world=2, explorers=1).publishers == [0]


def test_the_launch_layout_reads_the_launchers_variables_and_defaults_to_an_explorer_per_machine() -> None:
    two_machines = {"LOCAL_WORLD_SIZE": "2"}
    assert launch_layout(_config(), 3, 4, two_machines) == Layout(rank=3, world=4, local_world=2, explorers=2)
    assert launch_layout(_config(explorers=3), 0, 4, two_machines).explorers == 3
    assert launch_layout(_config(), 0, 1, {}).explorers == 1  # one process, no launcher
    assert launch_layout(_config(mode="both"), 0, 4, two_machines).explorers == 1  # a thread per rank
    with pytest.raises(LaunchError, match=r"the launch has 3 processes, 2 per machine \(LOCAL_WORLD_SIZE\)"):
        launch_layout(_config(), 0, 3, two_machines)


@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 8))
def test_the_prompt_shares_cover_each_step_once(parts_a: int, parts_b: int, scale: int) -> None:
    total = parts_a * parts_b * scale
    for parts in (parts_a, parts_b):
        shares = [Layout.prompts(i, parts, total) for i in range(parts)]
        assert [p for share in shares for p in share] == list(range(total))
        assert {len(share) for share in shares} == {total // parts}


def test_each_explorer_draws_the_whole_steps_tasks_and_keeps_its_share() -> None:
    task = build_task(_config())
    whole = task.sample(6, torch.Generator().manual_seed(3))
    gens = [torch.Generator().manual_seed(3) for _ in range(3)]
    shares = [TaskShare(task, i, 3).sample(2, gens[i]) for i in range(3)]
    assert [row for share in shares for row in share] == whole  # the same tasks whatever the count
    assert TaskShare(task, 1, 3).fields == task.fields  # everything else is the task's


# ------------------------------------------------------------------------------------------- shipments


def _experiences(tasks: range, step: int, group: int = 2) -> list[Experience]:
    return [
        Experience(
            eid=EID(batch=step, task=t, run=j),
            tokens=torch.tensor([1, 2, 3 + t], dtype=torch.int32),
            prompt_length=2,
            reward=float(t),
            info={"model_version": 0},
        )
        for t in tasks
        for j in range(group)
    ]


def _shipments(step: int, explorers: int, prompts: int) -> list[bytes]:
    return [
        Shipment(
            e, step, serialize_many(_experiences(Layout.prompts(e, explorers, prompts), step)), {"r": e}, 0.5
        ).encode()
        for e in range(explorers)
    ]


def test_a_shipment_round_trips_without_pickle_and_packs_with_others() -> None:
    shipment = Shipment(3, 7, b"\x00wire", {"explorer/reward_mean": float("nan"), "x": 1.5}, 0.25)
    raw = shipment.encode()
    assert b"pickle" not in raw
    assert raw[8:9] == b"{"  # an 8-byte length, then the JSON header
    back = Shipment.decode(raw)
    assert (back.explorer, back.step, back.experiences, back.idle_fraction) == (3, 7, b"\x00wire", 0.25)
    assert back.metrics["x"] == 1.5
    assert back.metrics["explorer/reward_mean"] != back.metrics["explorer/reward_mean"]  # NaN survives
    assert unpack(pack([raw, b"", b"abc"])) == [raw, b"", b"abc"]


@pytest.mark.parametrize(("ranks", "explorers"), [(1, 1), (2, 1), (1, 2), (2, 2), (3, 2), (2, 3)])
def test_each_rank_gets_the_groups_of_its_prompts_once(ranks: int, explorers: int) -> None:
    prompts = 6
    shipments = step_shipments(list(reversed(_shipments(4, explorers, prompts))), 4, explorers)
    seen = []
    for rank in range(ranks):
        layout = Layout(rank=rank, world=ranks, local_world=ranks, explorers=explorers)
        share = rank_share(shipments, layout, prompts)
        assert sorted({e.eid.task for e in share}) == list(Layout.prompts(rank, ranks, prompts))
        seen += [e.eid.uid for e in share]
    assert len(seen) == len(set(seen)) == prompts * 2  # every row of the step, on one rank each
    metrics, idle = step_metrics(shipments)
    assert float(metrics["r"]) == sum(range(explorers)) / explorers
    assert idle == 0.5


def test_a_step_missing_twice_or_late_from_an_explorer_is_an_error() -> None:
    good = _shipments(2, 2, 4)
    for blobs in ([good[0]], [good[0], good[0], good[1]], [good[0], _shipments(3, 2, 4)[1]]):
        with pytest.raises(
            RuntimeError, match=r"learner step 3 expected step 3 from explorers 0\.\.1 once each"
        ):
            step_shipments(blobs, 2, 2)


# ------------------------------------------------------------------------------------------- bad input


def test_explorers_where_a_mode_has_none_are_refused() -> None:
    one = Layout(rank=0, world=1, local_world=1, explorers=1)
    message = _refusal(_config(mode="both", explorers=2), one)
    assert (
        "synchronizer.explorers: explorer processes are for mode async or synchronizer.explorer_process"
        in message
    )
    assert "mode both runs its explorer in the learner's process" in message
    assert "mode train runs no explorer" in _refusal(_config(mode="train", explorers=2), one)
    assert "synchronizer.explorer_devices" in _refusal(_config(mode="explore", explorer_devices=[1]), one)


def test_prompts_that_do_not_split_over_the_explorers_are_refused() -> None:
    message = _refusal(_config(prompts=12, explorers=5), Layout(rank=0, world=1, local_world=1, explorers=5))
    assert "rollout.prompts_per_step: 12 prompts cannot be split over 5 explorer processes" in message


@pytest.mark.parametrize(
    ("devices", "cpu", "says"),
    [
        ([7], False, "2 explorers run on a machine but 1 devices are listed: [7]"),
        ([6, 6], False, "a device is listed twice: [6, 6]"),
        ([1, 7], False, "devices [1] are learner ranks' (local ranks 0..5 use devices 0..5)"),
        ([7, 8], False, "this machine has 8 CUDA devices (0..7); [7, 8] asks for others"),
        ([6, 7], True, "this run is on the CPU (trainer.device)"),
    ],
)
def test_explorer_devices_that_cannot_be_placed_are_refused(devices: list[int], cpu: bool, says: str) -> None:
    layout = Layout(rank=0, world=6, local_world=6, explorers=2)  # an 8-GPU machine, 6 learner ranks
    message = _refusal(_config(explorers=2, explorer_devices=devices), layout, cpu=cpu)
    assert f"synchronizer.explorer_devices: {says}" in message
    check_explorers(_config(explorers=2, explorer_devices=[6, 7]), layout, cpu=False, cuda_devices=8)


def _leaders(view: Path, names: list[str]) -> Any:
    """The accelerator of rank 0 of 4 ranks on 2 machines, where machine 1's leader (rank 2) sees the run
    directory as ``view``."""

    def gather(mine: torch.Tensor) -> torch.Tensor:
        theirs = torch.tensor([float((view / names[-1]).exists())])
        return torch.cat([mine, torch.ones(1), theirs, torch.ones(1)])  # ranks 1 and 3 are no leaders

    return SimpleNamespace(device=torch.device("cpu"), gather=gather)


def test_a_run_dir_another_machine_does_not_see_is_refused_for_method_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import accelerate.utils

    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    elsewhere.mkdir()
    names: list[str] = []  # the probe's name, as rank 0 broadcasts it
    monkeypatch.setattr(accelerate.utils, "broadcast_object_list", lambda holder: names.append(holder[0]))
    layout, config = Layout(rank=0, world=4, local_world=2, explorers=2), _config(method="checkpoint")
    with pytest.raises(ConfigError) as caught:
        check_shared_run_dir(config, layout, run, _leaders(elsewhere, names))
    assert (
        f"synchronizer.method: checkpoint writes the weights into {run}, which machine(s) [1] do not see"
        in str(caught.value)
    )
    assert list(run.iterdir()) == []  # the probe is gone
    check_shared_run_dir(config, layout, run, _leaders(run, names))  # a shared filesystem: fine
    check_shared_run_dir(_config(method="memory"), layout, run, None)  # memory: nothing to check


# ------------------------------------------------------------------------------------------- weights


def test_the_weights_broadcast_carries_every_tensor_with_its_name_dtype_and_shape(tmp_path: Path) -> None:
    import multiprocessing

    from safetensors.torch import load_file

    ctx = multiprocessing.get_context("spawn")
    out = tmp_path / "received.safetensors"
    ranks = [ctx.Process(target=broadcast_rank, args=(r, str(tmp_path / "store"), str(out))) for r in (0, 1)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join(120)
    assert [p.exitcode for p in ranks] == [0, 0]
    got, sent = load_file(str(out)), broadcast_weights()
    assert set(got) == set(sent)
    for name, value in sent.items():
        assert got[name].dtype == value.dtype, name
        assert torch.equal(got[name], value), name
