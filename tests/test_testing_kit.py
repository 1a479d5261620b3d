"""The conformance kit: good components pass, each kind of broken component fails the right check with a
message naming it, its distribution and the fix; ``--trinity-plugin`` runs it on installed distributions."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import torch

from trinity_core.registry import reset_registry
from trinity_core.testing import check_names, count_host_syncs, reference

if TYPE_CHECKING:
    from plugin_dists import PluginSite

pytest_plugins = ["pytester", "plugin_dists"]

# Inner runs load no installed pytest plugins (fast, and the kit's own entry point, once installed,
# would register it twice); the kit's plugin is named explicitly.
PLUGIN_ARGS = ["-p", "trinity_core.testing.plugin"]

# The invariance checks have tests of their own; elsewhere they are deselected (the 2-rank check starts
# processes), and policy losses count this many checks fewer.
NOT_INVARIANCE = ("-k", "not invariant")
INVARIANCE_CHECKS = 2

GOOD = '''
import torch
from pydantic import Field
from trinity_core import registry
from trinity_core.components import (
    AlgorithmType, ComponentArgs, EntropyLossFn, GroupAdvantage, GroupAdvantageStrategy, KLFn,
    LossAggArgs, PolicyLossFn, summarize_metric, write_advantages,
)
from trinity_core.ops import group_stats


class GoodLoss(PolicyLossFn):
    """PPO clip: max(-A r, -A clip(r, 1-eps, 1+eps)), r = exp(logp - old)."""

    class Args(LossAggArgs):
        clip_range: float = Field(0.2, gt=0, description="Clip epsilon.")

    def __call__(self, logprob, old_logprob, action_mask, advantages, **kwargs):
        log_ratio = torch.where(action_mask, logprob - old_logprob, 0.0).clamp(-20, 20)
        ratio = torch.exp(log_ratio)
        adv = torch.where(action_mask, advantages, 0.0)
        clipped = ratio.clamp(1 - self.clip_range, 1 + self.clip_range)
        loss = self.aggregate(torch.maximum(-adv * ratio, -adv * clipped), action_mask)
        return loss, {"pg_loss": loss.detach()}


def _grpo(rewards, index, num_groups, eps):
    stats = group_stats(rewards, index, num_groups)
    dev = rewards - stats.mean[index]
    std = stats.std_unbiased[index]
    return torch.where(std > 0, dev / (std + eps), torch.zeros_like(dev))


class GoodAdv(GroupAdvantage):
    """GRPO: A = (r - mean_g) / (std_g + eps); 0 for a zero-variance group."""

    class Args(ComponentArgs):
        epsilon: float = Field(1e-6, gt=0, description="Added to the group std.")

    def calculate_group_advantage(self, group_id, exps, precomputed_std=None):
        rewards = torch.tensor([e.reward for e in exps], dtype=torch.float64)
        adv = _grpo(rewards, torch.zeros(len(exps), dtype=torch.int64), 1, self.epsilon)
        write_advantages(exps, adv)
        return exps, {"reward_mean": rewards.mean()}

    def process_batch(self, batch):
        index = batch.group_index["task"]
        n = batch.num_groups["task"]
        adv = _grpo(batch.rewards, index, n, self.epsilon)
        means = group_stats(batch.rewards, index, n).mean
        return adv, summarize_metric(means, "reward_mean", self.metric_prefix)


class GoodStrategy(GroupAdvantageStrategy):
    """Mean baseline written to the buffer: A = r - mean_g."""

    class Args(ComponentArgs):
        scale: float = Field(1.0, gt=0, description="Multiplies the advantages.")

    def calculate_group_advantage(self, group_id, exps):
        rewards = torch.tensor([e.reward for e in exps], dtype=torch.float64)
        stats = group_stats(rewards, torch.zeros(len(exps), dtype=torch.int64), 1)
        write_advantages(exps, (rewards - stats.mean[0]) * self.scale)
        return exps, {}


class GoodKL(KLFn):
    """k2 = 0.5 (logp - ref)^2, with masked positions neutralised before the estimator."""

    def calculate_kl(self, logprob, ref_logprob, old_logprob=None):
        return 0.5 * (logprob - ref_logprob).square()

    def calculate_kl_loss(self, logprob, ref_logprob, response_mask, loss_agg_mode=None, old_logprob=None,
                          loss_scale=None):
        m = response_mask.bool()
        return super().calculate_kl_loss(
            torch.where(m, logprob, 0.0), torch.where(m, ref_logprob, 0.0), response_mask, loss_agg_mode,
            old_logprob, loss_scale,
        )


class GoodEntropy(EntropyLossFn):
    """Entropy bonus: entropy_coef * agg(H)."""

    def __call__(self, entropy, action_mask, **kwargs):
        value = self.aggregate(entropy, action_mask)
        return value * self.entropy_coef, {"entropy_loss": value.detach()}


class GoodAlgo(AlgorithmType):
    """A preset naming the good components."""

    use_critic = False
    use_reference = True
    compute_advantage_in_trainer = False
    can_balance_batch = True
    schema = "experience"

    @classmethod
    def default_config(cls):
        return {"repeat_times": 4, "advantage_fn": "good_adv", "policy_loss_fn": "good_loss",
                "policy_loss_fn_args": {"clip_range": 0.3}, "kl_loss_fn": "good_kl", "kl_penalty_fn": None,
                "entropy_loss_fn": "good_entropy"}
'''

REGISTER_GOOD = """
for kind, name, cls in [
    ("policy_loss", "good_loss", GoodLoss), ("advantage_fn", "good_adv", GoodAdv),
    ("add_strategy", "good_strategy", GoodStrategy), ("kl_fn", "good_kl", GoodKL),
    ("entropy_loss", "good_entropy", GoodEntropy), ("algorithm", "good_algo", GoodAlgo),
]:
    registry.register(kind, name, cls)
"""


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Inner runs register components in this process's registry: start and end clean."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_registry()
    yield
    reset_registry()


def _run(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_inner=GOOD + REGISTER_GOOD + textwrap.dedent(source))
    return pytester.runpytest_inprocess(*PLUGIN_ARGS, "-v", "-rs", "-p", "no:cacheprovider", *args)


def _outcome(result: pytest.RunResult, case_id: str) -> str:
    """PASSED / FAILED / SKIPPED of the test whose id is ``case_id``."""
    for line in result.outlines:
        if f"[{case_id}]" in line and line.rstrip().split()[-1] in {"PASSED", "FAILED", "SKIPPED"}:
            return line.rstrip().split()[-1]
        if f"[{case_id}]" in line:
            for word in ("PASSED", "FAILED", "SKIPPED"):
                if word in line:
                    return word
    raise AssertionError(f"no test {case_id!r} in the output:\n" + "\n".join(result.outlines))


def test_good_components_pass_every_check(pytester: pytest.Pytester) -> None:
    result = _run(
        pytester,
        """
        from trinity_core.testing import (
            AddStrategyConformance, AdvantageFnConformance, AlgorithmConformance, EntropyLossConformance,
            KLFnConformance, PolicyLossConformance,
        )

        class TestLoss(PolicyLossConformance):
            component = "good_loss"
            args = {"clip_range": 0.1, "loss_agg_mode": "seq-mean-token-mean"}

        class TestAdv(AdvantageFnConformance):
            component = "good_adv"

        class TestStrategy(AddStrategyConformance):
            component = "good_strategy"

        class TestKL(KLFnConformance):
            component = "good_kl"
            args = {"adaptive": True, "target_kl": 0.1, "horizon": 100}

        class TestEntropy(EntropyLossConformance):
            component = "good_entropy"
            args = {"entropy_coef": 0.01}

        class TestAlgo(AlgorithmConformance):
            component = "good_algo"
        """,
    )
    kinds = ("policy_loss", "kl_fn", "entropy_loss", "algorithm", "advantage_fn")
    # GoodStrategy has no process_batch: every add_strategy check but vectorized_matches_per_group;
    # GoodAdv is a group computation: none of the trainer-side advantage checks.
    trainer_side = [c for c in check_names("advantage_fn") if c.startswith("trainer_")]
    expected = (
        sum(len(check_names(kind)) for kind in kinds)
        + len(check_names("add_strategy"))
        - 1
        - len(trainer_side)
    )
    result.assert_outcomes(passed=expected)
    # GoodLoss is defined in the importable module test_inner: the child processes import it by name.
    assert _outcome(result, "policy_loss:good_loss:rank_invariant") == "PASSED"
    assert _outcome(result, "algorithm:good_algo:preset_validates") == "PASSED"
    assert _outcome(result, "advantage_fn:good_adv:vectorized_matches_per_group") == "PASSED"
    assert _outcome(result, "policy_loss:good_loss:no_host_sync") == "PASSED"


def test_loss_leaking_nan_from_masked_positions_fails_only_the_masking_check(
    pytester: pytest.Pytester,
) -> None:
    result = _run(
        pytester,
        '''
        from trinity_core.testing import PolicyLossConformance

        class LeakyLoss(PolicyLossFn):
            """-A * logp, masked by multiplying (0 * nan = nan)."""

            def __call__(self, logprob, action_mask, advantages, **kwargs):
                m = action_mask.float()
                loss = (-advantages * logprob * m).sum() / m.sum()
                return loss, {"loss": loss.detach()}

        registry.register("policy_loss", "leaky", LeakyLoss)

        class TestLeaky(PolicyLossConformance):
            component = "leaky"
        ''',
        *NOT_INVARIANCE,
    )
    assert _outcome(result, "policy_loss:leaky:masked_positions_ignored") == "FAILED"
    assert _outcome(result, "policy_loss:leaky:loss_is_finite") == "PASSED"
    result.assert_outcomes(passed=len(check_names("policy_loss")) - INVARIANCE_CHECKS - 1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*policy loss 'leaky' (test_inner:LeakyLoss) from <in-process> fails conformance check "
            "'masked_positions_ignored'*",
            "*when NaN/inf were planted at masked positions*",
            "*How to fix: select before computing: torch.where(mask, x, 0)*",
        ]
    )


def test_item_call_fails_host_sync_check_naming_the_line_and_opt_out_is_a_reported_skip(
    pytester: pytest.Pytester,
) -> None:
    result = _run(
        pytester,
        '''
        from trinity_core.testing import PolicyLossConformance

        class SyncingLoss(PolicyLossFn):
            """-A * logp with a Python-side guard."""

            def __call__(self, logprob, action_mask, advantages, **kwargs):
                if advantages.abs().max().item() > 1e6:  # SYNC HERE
                    raise ValueError("huge advantages")
                loss = self.aggregate(-torch.where(action_mask, advantages, 0) * logprob, action_mask)
                return loss, {"loss": loss.detach()}

        class ExcusedLoss(SyncingLoss):
            """The same loss, declaring why it synchronises."""

            conformance_skip = {"no_host_sync": "guards against corrupt advantages; runs once per step"}

        class TypoLoss(GoodLoss):
            """Declares an opt-out of a check that does not exist."""

            conformance_skip = {"no_host_synk": "typo"}

        registry.register("policy_loss", "syncing", SyncingLoss)
        registry.register("policy_loss", "excused", ExcusedLoss)
        registry.register("policy_loss", "typo", TypoLoss)

        class TestSyncing(PolicyLossConformance):
            component = "syncing"

        class TestExcused(PolicyLossConformance):
            component = "excused"

        class TestTypo(PolicyLossConformance):
            component = "typo"
        ''',
        *NOT_INVARIANCE,
    )
    assert _outcome(result, "policy_loss:syncing:no_host_sync") == "FAILED"
    assert _outcome(result, "policy_loss:syncing:masked_positions_ignored") == "PASSED"
    assert _outcome(result, "policy_loss:excused:no_host_sync") == "SKIPPED"
    assert _outcome(result, "policy_loss:typo:opt_outs_are_valid") == "FAILED"
    n = len(check_names("policy_loss")) - INVARIANCE_CHECKS
    result.assert_outcomes(passed=3 * n - 3, failed=2, skipped=1)
    lines = (pytester.path / "test_inner.py").read_text().splitlines()
    sync_line = next(i for i, line in enumerate(lines, 1) if "# SYNC HERE" in line)
    result.stdout.fnmatch_lines(
        [
            "*policy loss 'syncing' (test_inner:SyncingLoss) from <in-process> fails conformance check "
            "'no_host_sync'*",
            "*made 1 host synchronisation(s):",
            f"*Tensor.item() at *test_inner.py:{sync_line} (1x)",
        ]
    )
    result.stdout.fnmatch_lines(["*conformance_skip names unknown check 'no_host_synk'*"])
    result.stdout.fnmatch_lines(
        ["SKIPPED*opts out of conformance check 'no_host_sync': guards against corrupt advantages*"]
    )


def test_attached_and_non_scalar_metrics_fail_the_metrics_checks(pytester: pytest.Pytester) -> None:
    result = _run(
        pytester,
        '''
        from trinity_core.testing import KLFnConformance, PolicyLossConformance

        class VectorMetricLoss(GoodLoss):
            """PPO clip, reporting a per-sequence metric."""

            def __call__(self, logprob, old_logprob, action_mask, advantages, **kwargs):
                loss, metrics = super().__call__(logprob, old_logprob, action_mask, advantages)
                return loss, {**metrics, "per_seq": torch.where(action_mask, logprob, 0).sum(-1)}

        class AttachedKL(GoodKL):
            """k2, returning its KL loss metric still attached to the graph."""

            def calculate_kl_loss(self, logprob, ref_logprob, response_mask, loss_agg_mode=None,
                                  old_logprob=None, loss_scale=None):
                loss, metrics = super().calculate_kl_loss(logprob, ref_logprob, response_mask)
                return loss, {**metrics, "kl_loss": loss}

        registry.register("policy_loss", "vector_metric", VectorMetricLoss)
        registry.register("kl_fn", "attached", AttachedKL)

        class TestVector(PolicyLossConformance):
            component = "vector_metric"

        class TestAttached(KLFnConformance):
            component = "attached"
        ''',
        "-k",
        "metrics",
    )
    assert _outcome(result, "policy_loss:vector_metric:metrics_are_detached_scalars") == "FAILED"
    assert _outcome(result, "kl_fn:attached:kl_loss_metrics_are_detached_scalars") == "FAILED"
    assert _outcome(result, "kl_fn:attached:kl_penalty_metrics_are_detached_scalars") == "PASSED"
    result.stdout.fnmatch_lines(["*metric 'per_seq' has shape (*,), not a 0-d tensor*"])
    result.stdout.fnmatch_lines(
        ["*metric 'kl_loss' is attached to the autograd graph*", "*How to fix: return*"]
    )


def test_group_mixing_and_nonzero_zero_variance_advantages_fail_their_checks(
    pytester: pytest.Pytester,
) -> None:
    result = _run(
        pytester,
        '''
        from trinity_core.testing import AdvantageFnConformance

        from trinity_core.components import GroupAdvantage

        class BatchMean(GroupAdvantage):
            """A = r - mean over the whole batch (mixes groups)."""

            def group_experiences(self, exps):
                return {"everything": exps}

            def calculate_group_advantage(self, group_id, exps, precomputed_std=None):
                rewards = torch.tensor([e.reward for e in exps], dtype=torch.float64)
                write_advantages(exps, rewards - rewards.mean())
                return exps, {}

        class OneForTies(GroupAdvantage):
            """GRPO, but a zero-variance group gets 1."""

            def calculate_group_advantage(self, group_id, exps, precomputed_std=None):
                rewards = torch.tensor([e.reward for e in exps], dtype=torch.float64)
                std = rewards.std()
                adv = torch.where(std > 0, (rewards - rewards.mean()) / (std + 1e-6), 1.0)
                write_advantages(exps, adv)
                return exps, {}

        class DeclaredTies(OneForTies):
            """GRPO, but a zero-variance group gets 1 (documented: keeps ties trainable)."""

            zero_variance_policy = "finite"

        registry.register("advantage_fn", "batch_mean", BatchMean)
        registry.register("advantage_fn", "one_for_ties", OneForTies)
        registry.register("advantage_fn", "declared_ties", DeclaredTies)

        class TestBatchMean(AdvantageFnConformance):
            component = "batch_mean"

        class TestOneForTies(AdvantageFnConformance):
            component = "one_for_ties"

        class TestDeclared(AdvantageFnConformance):
            component = "declared_ties"
        ''',
        "-k",
        "independent or zero_variance or permutation",
    )
    assert _outcome(result, "advantage_fn:batch_mean:groups_are_independent") == "FAILED"
    assert _outcome(result, "advantage_fn:batch_mean:permutation_equivariant") == "PASSED"
    assert _outcome(result, "advantage_fn:one_for_ties:zero_variance_group") == "FAILED"
    assert _outcome(result, "advantage_fn:one_for_ties:groups_are_independent") == "PASSED"
    assert _outcome(result, "advantage_fn:declared_ties:zero_variance_group") == "PASSED"
    result.stdout.fnmatch_lines(
        [
            "*advantage function 'batch_mean' (test_inner:BatchMean) from <in-process> fails conformance "
            "check 'groups_are_independent'*",
            "*changing the rewards of group 1 changed the output for experience *kit0x0 of another group*",
        ]
    )
    result.stdout.fnmatch_lines(["*group whose rewards are all 0.5 got advantages *, not exactly 0"])


def test_args_without_extra_forbid_fail_the_args_checks(pytester: pytest.Pytester) -> None:
    result = _run(
        pytester,
        '''
        import pydantic
        from trinity_core.testing import EntropyLossConformance

        class LooseEntropy(GoodEntropy):
            """Entropy bonus with a plain pydantic Args."""

            class Args(pydantic.BaseModel):
                entropy_coef: float = pydantic.Field(0.0, description="Weight.")
                loss_agg_mode: str | None = pydantic.Field(None, description="Aggregation mode.")

        registry.register("entropy_loss", "loose", LooseEntropy)

        class TestLoose(EntropyLossConformance):
            component = "loose"
        ''',
        "-k",
        "args",
    )
    assert _outcome(result, "entropy_loss:loose:args_model_forbids_unknown_keys") == "FAILED"
    assert _outcome(result, "entropy_loss:loose:args_reject_unknown_keys") == "FAILED"
    assert _outcome(result, "entropy_loss:loose:args_validate_with_defaults") == "PASSED"
    result.stdout.fnmatch_lines(
        [
            "*LooseEntropy.Args.model_config has extra=None*",
            "*How to fix: declare the arguments as `class Args(ComponentArgs)`*",
        ]
    )
    result.stdout.fnmatch_lines(["*validate_args accepted the unknown key 'conformance_unknown_key'*"])


def test_unknown_component_is_a_failing_case_with_the_registry_message(pytester: pytest.Pytester) -> None:
    result = _run(
        pytester,
        """
        from trinity_core.testing import PolicyLossConformance

        class TestMissing(PolicyLossConformance):
            component = "good_los"
        """,
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*unknown policy loss 'good_los'*", "*Did you mean 'good_loss'?*"])


PLUGIN_MODULE = '''
import torch
from trinity_core.components import PolicyLossFn


class GoodLoss(PolicyLossFn):
    """-A * logp, token-mean."""

    def __call__(self, logprob, action_mask, advantages, **kwargs):
        loss = self.aggregate(-torch.where(action_mask, advantages, 0) * logprob, action_mask)
        return loss, {"loss": loss.detach()}


class ItemLoss(GoodLoss):
    """-A * logp, reporting a Python float."""

    def __call__(self, logprob, action_mask, advantages, **kwargs):
        loss, _ = super().__call__(logprob, action_mask, advantages)
        return loss, {"loss": loss.item()}
'''


def _install_plugin(site: PluginSite) -> str:
    mod = site.module("losses", PLUGIN_MODULE)
    site.dist(
        "trinity-plugin-fake",
        "0.3.0",
        {"trinity_core.policy_losses": {"fake_good": f"{mod}:GoodLoss", "fake_item": f"{mod}:ItemLoss"}},
    )
    return mod


def test_trinity_plugin_option_checks_an_installed_distribution_from_any_directory(
    pytester: pytest.Pytester, site: PluginSite
) -> None:
    _install_plugin(site)
    pytester.makepyfile(test_unrelated="def test_not_collected():\n    raise AssertionError('collected')\n")
    result = pytester.runpytest_inprocess(
        *PLUGIN_ARGS, "-v", "-p", "no:cacheprovider", "--trinity-plugin=trinity-plugin-fake", *NOT_INVARIANCE
    )
    n = len(check_names("policy_loss")) - INVARIANCE_CHECKS
    result.assert_outcomes(passed=2 * n - 2, failed=2)
    assert "test_not_collected" not in result.stdout.str()
    assert _outcome(result, "policy_loss:fake_good:no_host_sync") == "PASSED"
    assert _outcome(result, "policy_loss:fake_item:no_host_sync") == "FAILED"
    assert _outcome(result, "policy_loss:fake_item:metrics_are_detached_scalars") == "FAILED"
    result.stdout.fnmatch_lines(
        [
            f"*policy loss 'fake_item' ({site.mod('losses')}:ItemLoss) from trinity-plugin-fake 0.3.0 fails "
            "conformance check 'metrics_are_detached_scalars'*",
            "*metric 'loss' is a float*",
        ]
    )


def test_plugin_conformance_subclass_and_missing_distribution(
    pytester: pytest.Pytester, site: PluginSite
) -> None:
    _install_plugin(site)
    pytester.makepyfile(
        test_conformance="""
        from trinity_core.testing import PluginConformance

        class TestConformance(PluginConformance):
            distribution = "trinity_plugin.FAKE"

        class TestNotInstalled(PluginConformance):
            distribution = "trinity-plugin-absent"
        """
    )
    result = pytester.runpytest_inprocess(*PLUGIN_ARGS, "-v", "-p", "no:cacheprovider", *NOT_INVARIANCE)
    n = len(check_names("policy_loss")) - INVARIANCE_CHECKS
    result.assert_outcomes(passed=2 * n - 2, failed=3)
    result.stdout.fnmatch_lines(
        ["*distribution 'trinity-plugin-absent' is not installed in this environment*"]
    )


def test_distribution_that_provides_nothing_fails_with_the_entry_point_fix(
    pytester: pytest.Pytester, site: PluginSite
) -> None:
    site.dist("trinity-plugin-empty", "0.1.0", {"console_scripts": {"x": "y:z"}})
    result = pytester.runpytest_inprocess(
        *PLUGIN_ARGS, "-p", "no:cacheprovider", "--trinity-plugin=trinity-plugin-empty"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*provides no components and no hooks: declare *entry-points*"])


def test_host_sync_counter_counts_cpu_on_cpu_tensors_and_restores_tensor_methods() -> None:
    x = torch.ones(3)
    before = {name: torch.Tensor.__dict__.get(name) for name in ("item", "cpu", "__bool__")}
    with count_host_syncs() as log:
        x.cpu()
        bool(x[0])
        x.sum().item()
        torch.where(x > 0, x, 0).sum()
    assert [m for m, _ in log.calls] == ["cpu", "__bool__", "item"]
    assert all(where.startswith(__file__) for _, where in log.calls)
    assert {name: torch.Tensor.__dict__.get(name) for name in before} == before


def test_import_reference_uses_the_ray_stub_and_skips_or_fails_when_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(reference, "REF_DIR", tmp_path / "missing")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"reference trinity-rft 0\.6\.0 not found"):
        reference.import_reference("trinity")
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="not found"):
        reference.import_reference("trinity")

    ref = tmp_path / "ref"
    (ref / "trinity").mkdir(parents=True)
    (ref / "trinity" / "__init__.py").write_text("")
    (ref / "kit_ref_probe.py").write_text("import ray\nCLUSTER = ray.is_initialized()\n")
    monkeypatch.setattr(reference, "REF_DIR", ref)
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    module = reference.import_reference("kit_ref_probe")
    assert module.CLUSTER is False
    assert sys.modules["ray"].__file__ == str(reference.STUB_DIR / "ray" / "__init__.py")
    for name in ("kit_ref_probe", "ray"):
        sys.modules.pop(name, None)


def test_loss_normalised_per_call_fails_microbatch_invariance_and_a_declared_one_is_skipped(
    pytester: pytest.Pytester,
) -> None:
    result = _run(
        pytester,
        '''
        from trinity_core.testing import PolicyLossConformance

        class PerCallMean(GoodLoss):
            """PPO clip averaged over this call's tokens (ignores the step's normalizers)."""

            def __call__(self, logprob, old_logprob, action_mask, advantages, **kwargs):
                ratio = torch.exp(torch.where(action_mask, logprob - old_logprob, 0.0))
                per_token = torch.where(action_mask, -advantages * ratio, 0.0)
                loss = per_token.sum() / action_mask.sum().clamp_min(1)
                return loss, {}

        class DeclaredPerCall(PerCallMean):
            """The same, declaring that it depends on the split."""

            microbatch_invariant = False

        registry.register("policy_loss", "per_call", PerCallMean)
        registry.register("policy_loss", "declared_per_call", DeclaredPerCall)

        class TestGood(PolicyLossConformance):
            component = "good_loss"

        class TestPerCall(PolicyLossConformance):
            component = "per_call"

        class TestDeclared(PolicyLossConformance):
            component = "declared_per_call"
        ''',
        "-k",
        "microbatch_invariant",
    )
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    assert _outcome(result, "policy_loss:good_loss:microbatch_invariant") == "PASSED"
    assert _outcome(result, "policy_loss:per_call:microbatch_invariant") == "FAILED"
    assert _outcome(result, "policy_loss:declared_per_call:microbatch_invariant") == "SKIPPED"
    result.stdout.fnmatch_lines(
        [
            "*policy loss 'per_call' (test_inner:PerCallMean) from <in-process> fails conformance check "
            "'microbatch_invariant'*",
            "*with loss_agg_mode=token-mean (seed 0, * rows, row 3 empty), the sum of the losses of rows "
            "[[]0, 2) and [[]2, *), each called with loss_scale=global_normalizers([[]mask_a, mask_b]), has "
            "another gradient than the whole batch*: max |difference| *",
            "How to fix: aggregate with self.aggregate(values, mask)*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "SKIPPED*'declared_per_call'*skips conformance check 'microbatch_invariant': it declares "
            "microbatch_invariant = False*"
        ]
    )


RANK_MODULE = '''
import torch
from trinity_core.components import LossAggArgs, PolicyLossFn


class MeanLoss(PolicyLossFn):
    """-A * logp with loss_agg_mode."""

    Args = LossAggArgs

    def __call__(self, logprob, action_mask, advantages, **kwargs):
        loss = self.aggregate(-torch.where(action_mask, advantages, 0) * logprob, action_mask)
        return loss, {}


class WorldBlindLoss(PolicyLossFn):
    """-A * logp over the step's token count, forgetting the world size (DDP averages over ranks)."""

    def __call__(self, logprob, action_mask, advantages, **kwargs):
        total = torch.where(action_mask, -advantages * logprob, 0.0).sum()
        count = self.loss_scale.num_tokens if self.loss_scale is not None else action_mask.sum()
        return total / count.clamp_min(1), {}
'''


def test_rank_check_runs_every_loss_of_a_distribution_in_one_2_rank_run(
    pytester: pytest.Pytester, site: PluginSite
) -> None:
    mod = site.module("ranks", RANK_MODULE)
    site.dist(
        "trinity-plugin-ranks",
        "0.2.0",
        {"trinity_core.policy_losses": {"mean": f"{mod}:MeanLoss", "world_blind": f"{mod}:WorldBlindLoss"}},
    )
    pytester.makepyfile(
        test_local='''
        import torch
        from trinity_core.components import PolicyLossFn
        from trinity_core.testing import PolicyLossConformance

        def make():
            class Local(PolicyLossFn):
                """-A * logp, defined inside a function."""

                def __call__(self, logprob, action_mask, advantages, **kwargs):
                    return self.aggregate(-torch.where(action_mask, advantages, 0) * logprob, action_mask), {}

            return Local

        class TestLocal(PolicyLossConformance):
            component = make()
        '''
    )
    result = pytester.runpytest_inprocess(
        *PLUGIN_ARGS,
        "-v",
        "-rs",
        "-p",
        "no:cacheprovider",
        "--trinity-plugin=trinity-plugin-ranks",
        str(pytester.path),
        "-k",
        "invariant",
    )
    assert _outcome(result, "policy_loss:mean:rank_invariant") == "PASSED"
    assert _outcome(result, "policy_loss:mean:microbatch_invariant") == "PASSED"
    # Micro-batches on one rank have world_size 1: only the rank check sees the missing factor.
    assert _outcome(result, "policy_loss:world_blind:microbatch_invariant") == "PASSED"
    assert _outcome(result, "policy_loss:world_blind:rank_invariant") == "FAILED"
    assert _outcome(result, "policy_loss:Local:rank_invariant") == "SKIPPED"
    result.assert_outcomes(passed=4, failed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            f"*policy loss 'world_blind' ({mod}:WorldBlindLoss) from trinity-plugin-ranks 0.2.0 fails "
            "conformance check 'rank_invariant'*",
            "*on 2 gloo ranks*the gradient differs from the whole batch's:",
            "loss_agg_mode=None, seed 0: max |difference| * = 0.5 of max |gradient|*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "SKIPPED*'Local'*skips conformance check 'rank_invariant': *<locals>.Local cannot be imported by "
            "name in a new process*"
        ]
    )


TRAINER_ADVANTAGES = '''
from trinity_core.components import TrainerAdvantage
from trinity_core.ops import group_stats, masked_whiten


def _scores(batch):
    return batch.token_level_scores().sum(-1).to(torch.float64)


class MeanBaseline(TrainerAdvantage):
    """A = r - mean of its group, on every token; returns = A + values."""

    required_fields = ("reward", "action_mask", "values")

    def compute(self, batch):
        index, n = batch.group_index["task"], batch.num_groups["task"]
        scores = _scores(batch)
        adv = (scores - group_stats(scores, index, n).mean[index]).float()[:, None]
        adv = adv.expand(len(batch), batch.max_response_length)
        return adv, adv + batch.column("values"), {"score_mean": scores.mean()}


class Whitened(MeanBaseline):
    """A = whiten(r) over the batch's tokens."""

    def compute(self, batch):
        mask = batch.action_mask
        adv = masked_whiten(_scores(batch)[:, None].expand(mask.shape).float(), mask)
        return adv, adv, {}


class DeclaredWhitened(Whitened):
    """A = whiten(r) over the batch's tokens (couples the groups, by design)."""

    groups_independent = False


class UnguardedStd(MeanBaseline):
    """A = (r - mean) / std of its group, no guard for std = 0."""

    def compute(self, batch):
        index, n = batch.group_index["task"], batch.num_groups["task"]
        stats = group_stats(_scores(batch), index, n)
        adv = ((_scores(batch) - stats.mean[index]) / stats.std_unbiased[index]).float()[:, None]
        adv = adv.expand(len(batch), batch.max_response_length)
        return adv, adv, {}


class Syncing(MeanBaseline):
    """A = r - mean, after a Python-side check."""

    def compute(self, batch):
        if _scores(batch).abs().max().item() > 1e9:  # SYNC HERE
            raise ValueError("huge scores")
        return super().compute(batch)


for name, cls in [("mean_baseline", MeanBaseline), ("whitened", Whitened), ("declared", DeclaredWhitened),
                  ("unguarded", UnguardedStd), ("syncing", Syncing)]:
    registry.register("advantage_fn", name, cls)
'''


def test_trainer_advantages_checks_find_mixed_groups_non_finite_values_and_host_syncs(
    pytester: pytest.Pytester,
) -> None:
    result = _run(
        pytester,
        TRAINER_ADVANTAGES
        + """
from trinity_core.testing import AdvantageFnConformance

class TestMean(AdvantageFnConformance):
    component = "mean_baseline"

class TestWhitened(AdvantageFnConformance):
    component = "whitened"

class TestDeclared(AdvantageFnConformance):
    component = "declared"

class TestUnguarded(AdvantageFnConformance):
    component = "unguarded"

class TestSyncing(AdvantageFnConformance):
    component = "syncing"
""",
        "-k",
        "trainer_",
    )
    for check in ("trainer_advantages_are_finite", "trainer_groups_are_independent", "trainer_no_host_sync"):
        assert _outcome(result, f"advantage_fn:mean_baseline:{check}") == "PASSED"
    assert _outcome(result, "advantage_fn:whitened:trainer_groups_are_independent") == "FAILED"
    assert _outcome(result, "advantage_fn:whitened:trainer_advantages_are_finite") == "PASSED"
    assert _outcome(result, "advantage_fn:declared:trainer_groups_are_independent") == "SKIPPED"
    assert _outcome(result, "advantage_fn:unguarded:trainer_advantages_are_finite") == "FAILED"
    assert _outcome(result, "advantage_fn:syncing:trainer_no_host_sync") == "FAILED"
    result.assert_outcomes(passed=11, failed=3, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*advantage function 'whitened' (test_inner:Whitened) from <in-process> fails conformance "
            "check 'trainer_groups_are_independent'*",
            "*changing the rewards of group 1 (rows 4-7) changed the advantages of rows [[]0, 1, 2, 3, 8, *",
            "*declare `groups_independent = False` on the class*",
        ]
    )
    result.stdout.fnmatch_lines(["*advantages has non-finite entries in rows [[]8, 9, 10, 11]*"])
    lines = (pytester.path / "test_inner.py").read_text().splitlines()
    sync_line = next(i for i, line in enumerate(lines, 1) if "# SYNC HERE" in line)
    result.stdout.fnmatch_lines(
        ["*the call made 1 host synchronisation(s):", f"*Tensor.item() at *test_inner.py:{sync_line} (1x)"]
    )
    result.stdout.fnmatch_lines(
        [
            "SKIPPED*'declared'*skips conformance check 'trainer_groups_are_independent': it declares "
            "groups_independent = False*"
        ]
    )


def test_preset_that_does_not_resolve_fails_preset_validates_listing_the_problems(
    pytester: pytest.Pytester,
) -> None:
    result = _run(
        pytester,
        """
        from trinity_core.testing import AlgorithmConformance

        class Misplaced(GoodAlgo):
            '''Computes advantages in the trainer, but names a pipeline advantage function.'''

            compute_advantage_in_trainer = True

        class NeedsLr(GoodAlgo):
            '''Only runs with a learning rate of 0.5.'''

            @classmethod
            def check_config(cls, config):
                if config.trainer.lr != 0.5:
                    raise ValueError("set trainer.lr to 0.5")

        class DeclaresLr(NeedsLr):
            '''Only runs with a learning rate of 0.5, and says so.'''

            conformance_config = {"trainer": {"lr": 0.5}}

        registry.register("algorithm", "misplaced", Misplaced)
        registry.register("algorithm", "needs_lr", NeedsLr)
        registry.register("algorithm", "declares_lr", DeclaresLr)

        class TestGood(AlgorithmConformance):
            component = "good_algo"

        class TestMisplaced(AlgorithmConformance):
            component = "misplaced"

        class TestNeedsLr(AlgorithmConformance):
            component = "needs_lr"

        class TestDeclaresLr(AlgorithmConformance):
            component = "declares_lr"
        """,
        "-k",
        "preset_validates",
    )
    result.assert_outcomes(passed=2, failed=2)
    assert _outcome(result, "algorithm:declares_lr:preset_validates") == "PASSED"
    assert _outcome(result, "algorithm:needs_lr:preset_validates") == "FAILED"
    result.stdout.fnmatch_lines(["*algorithm: rejected by check_config: set trainer.lr to 0.5*"])
    result.stdout.fnmatch_lines(
        [
            "*algorithm 'misplaced' (test_inner:Misplaced) from <in-process> fails conformance check "
            "'preset_validates'*",
            "*resolve_config({'algorithm': {'algorithm_type': 'misplaced'}}) fails: 1 problem:",
            "*algorithm.advantage_fn: advantage function 'good_adv' runs in the experience pipeline, but "
            "preset 'misplaced' computes advantages in the trainer*",
            "How to fix: make every component the preset names*",
        ]
    )
