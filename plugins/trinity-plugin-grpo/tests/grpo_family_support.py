"""Helpers of the tests of dr_grpo / opo / gpg / grpo_passk / grpo_verl: builders and numpy references."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from trinity_core.experience import EID, Experience


def make_exps(
    groups: Sequence[Sequence[float | None]],
    lengths: Sequence[Sequence[int]] | None = None,
    masks: Sequence[Sequence[Sequence[bool]]] | None = None,
) -> list[Experience]:
    """One experience per reward, group ``g`` = task ``g``; response of ``lengths[g][i]`` tokens (default 3),
    ``action_mask`` ``masks[g][i]`` when given."""
    exps = []
    for task, rewards in enumerate(groups):
        for run, reward in enumerate(rewards):
            n = 3 if lengths is None else lengths[task][run]
            exps.append(
                Experience(
                    eid=EID(batch=0, task=task, run=run, suffix=f"f{task}r{run}"),
                    tokens=list(range(2 + n)),
                    prompt_length=2,
                    reward=reward,
                    action_mask=None if masks is None else list(masks[task][run]),
                )
            )
    return exps


def first_scores(exps: Sequence[Experience]) -> np.ndarray:
    """The advantage of each experience at its first action token (float64; 0 without one)."""
    out = []
    for e in exps:
        adv = e.advantages.double().numpy()
        mask = np.ones(len(adv), dtype=bool) if e.action_mask is None else e.action_mask.numpy()
        out.append(float(adv[mask][0]) if mask.any() else 0.0)
    return np.array(out)


def _groups(index: np.ndarray) -> list[np.ndarray]:
    return [np.flatnonzero(index == g) for g in np.unique(index)]


def numpy_centred(rewards: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Dr. GRPO in float64 numpy: ``r − mean_g``; singletons and equal rewards 0."""
    out = np.zeros(len(rewards))
    for idx in _groups(index):
        r = rewards[idx]
        if len(idx) > 1 and r.max() != r.min():
            out[idx] = r - r.mean()
    return out


def numpy_opo(rewards: np.ndarray, lengths: np.ndarray, index: np.ndarray) -> np.ndarray:
    """OPO in float64 numpy: ``r − Σ l r / Σ l`` (plain mean when Σ l = 0); singletons and equal rewards 0."""
    out = np.zeros(len(rewards))
    for idx in _groups(index):
        r, w = rewards[idx], lengths[idx].astype(np.float64)
        if len(idx) < 2 or r.max() == r.min():
            continue
        baseline = (w * r).sum() / w.sum() if w.sum() > 0 else r.mean()
        out[idx] = r - baseline
    return out


def numpy_passk(rewards: np.ndarray, index: np.ndarray, epsilon: float, normalize: bool) -> np.ndarray:
    """Pass@k in float64 numpy: the unique best of a group gets ``(max − second) / (std + ε)``."""
    out = np.zeros(len(rewards))
    for idx in _groups(index):
        r = rewards[idx]
        if len(idx) < 2:
            continue
        order = np.sort(r)[::-1]
        if order[0] == order[1]:
            continue
        gap = order[0] - order[1]
        if normalize:
            gap = gap / (np.std(r, ddof=1) + epsilon)
        out[idx[np.argmax(r)]] = gap
    return out


def numpy_grpo(rewards: np.ndarray, index: np.ndarray, epsilon: float) -> np.ndarray:
    """GRPO in float64 numpy: ``(r − mean_g) / (std_g + ε)``; singletons and equal rewards 0."""
    out = np.zeros(len(rewards))
    for idx in _groups(index):
        r = rewards[idx]
        if len(idx) > 1 and r.max() != r.min():
            out[idx] = (r - r.mean()) / (np.std(r, ddof=1) + epsilon)
    return out
