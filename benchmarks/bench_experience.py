"""Experience I/O against trinity-rft 0.6.0: wire format and HF datasets.

Run: ``python benchmarks/bench_experience.py`` (``--sizes 1024 8192``, ``--quick`` for one size and
fewer rounds). Both sides get the same experiences: prompt 256 + response 256 tokens, rollout log-probs,
an action mask, a reward and an EID. Each side is timed on its own objects: ours on
``trinity_core.Experience``, the reference on ``trinity.common.experience.Experience``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import Row, add_reference_to_path, best_time, format_table, machine_line

PROMPT, RESPONSE = 256, 256
TARGETS = {"serialize_many": 15.0, "deserialize_many": 8.0, "to_hf_datasets": 10.0, "from_hf_datasets": 10.0}


def make_fields(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """Constructor keywords for ``n`` experiences, shared by both implementations."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 32_000, (n, PROMPT + RESPONSE), generator=gen, dtype=torch.int32)
    logprobs = -torch.rand((n, RESPONSE), generator=gen)
    masks = torch.rand((n, RESPONSE), generator=gen) > 0.1
    rewards = torch.rand(n, generator=gen).tolist()
    group = 8
    return [
        {
            "eid": {"batch": 3, "task": i // group, "run": i % group, "step": 0, "suffix": f"{i:06x}"},
            "tokens": tokens[i].clone(),
            "prompt_length": PROMPT,
            "logprobs": logprobs[i].clone(),
            "action_mask": masks[i].clone(),
            "reward": rewards[i],
        }
        for i in range(n)
    ]


def build(cls: type, fields: list[dict[str, Any]], eid_cls: type) -> list[Any]:
    """Experiences of class ``cls`` from shared constructor keywords."""
    return [cls(**{**f, "eid": eid_cls(**f["eid"])}) for f in fields]


def run(sizes: list[int], repeat: int) -> tuple[list[Row], list[str]]:
    """Time the four operations on both sides for each size; return table rows and payload notes."""
    add_reference_to_path()
    import trinity.common.experience as ref

    import trinity_core.codec as ours_codec
    import trinity_core.hf as ours_hf
    from trinity_core.experience import EID, Experience

    rows: list[Row] = []
    notes: list[str] = []
    for n in sizes:
        fields = make_fields(n)
        ref_exps = build(ref.Experience, fields, ref.EID)
        our_exps = build(Experience, fields, EID)
        case = f"N={n:,}"
        ref_payload = ref.Experience.serialize_many(ref_exps)
        our_payload = ours_codec.serialize_many(our_exps)
        notes.append(
            f"{case}: payload reference {len(ref_payload) / 2**20:.2f} MiB, ours "
            f"{len(our_payload) / 2**20:.2f} MiB ({len(our_payload) / len(ref_payload):.3f} of the reference)"
        )
        ref_ds = ref.to_hf_datasets(ref_exps)
        our_ds = ours_hf.to_hf_datasets(our_exps)
        pairs: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
            "serialize_many": (
                partial(ref.Experience.serialize_many, ref_exps),
                partial(ours_codec.serialize_many, our_exps),
            ),
            "deserialize_many": (
                partial(ref.Experience.deserialize_many, ref_payload),
                partial(ours_codec.deserialize_many, our_payload),
            ),
            "to_hf_datasets": (
                partial(ref.to_hf_datasets, ref_exps),
                partial(ours_hf.to_hf_datasets, our_exps),
            ),
            "from_hf_datasets": (
                partial(ref.from_hf_datasets, ref_ds),
                partial(ours_hf.from_hf_datasets, our_ds),
            ),
        }
        for op, (ref_fn, our_fn) in pairs.items():
            ref_s = best_time(ref_fn, repeat=repeat)
            our_s = best_time(our_fn, repeat=repeat)
            rows.append(Row(case, op, ref_s, our_s, TARGETS[op]))
    return rows, notes


def main(argv: list[str] | None = None) -> int:
    """Print the comparison table; exit 1 when a target is missed."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 8192])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one size (1,024) and 3 rounds")
    args = parser.parse_args(argv)
    sizes, repeat = ([1024], 3) if args.quick else (args.sizes, args.repeat)
    rows, notes = run(sizes, repeat)
    print(f"Experience I/O, trinity-core vs trinity-rft 0.6.0 ({machine_line()})\n")
    print(format_table(rows))
    print()
    for note in notes:
        print(f"- {note}")
    return 0 if all(row.verdict != "MISSED" for row in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
