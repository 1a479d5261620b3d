"""EID, Experience, group_by and split_dpo_experience_to_single_turn (trinity-rft's Experience semantics)."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from reference import import_reference

from trinity_core import (
    EID,
    CustomField,
    Experience,
    ExperienceError,
    group_by,
    split_dpo_experience_to_single_turn,
)
from trinity_core.experience import escape_id_component

pytestmark = pytest.mark.core_alone  # no plugin changes what this tests: it runs in tox env core only

ids = st.one_of(st.integers(-5, 10**6), st.text(max_size=6))


class TestEID:
    def test_ids_join_components_as_the_seed_defines(self) -> None:
        eid = EID(batch=3, task=7, run=2, step=5, suffix="abc")
        assert eid.uid == "3/7/2/5/abc"
        assert eid.sid == "3/7/5"
        assert eid.rid == "3/7/2"
        assert eid.tid == "3/7"
        assert str(eid) == eid.uid

    def test_repr_reads_as_the_reference_and_str_stays_the_uid(self) -> None:
        eid = EID(batch=1, task=2, run=3, step=4, suffix="abc123")
        assert repr(eid) == "EID(batch=1, task=2, run=3, step=4, uuid=abc123)"
        assert repr(EID(batch="b", task="a/b", suffix="s")) == "EID(batch=b, task=a/b, run=0, step=0, uuid=s)"
        assert str(EID(batch="b", task="a/b", suffix="s")) == "b/a%2Fb/0/0/s"

    def test_repr_equals_the_references(self) -> None:
        ref = import_reference("trinity.common.experience")
        for fields in ({"batch": 1, "task": 2, "run": 3, "step": 4, "suffix": "abc123"}, {"suffix": "x"}):
            assert repr(EID(**fields)) == repr(ref.EID(**fields))

    def test_defaults_and_fresh_suffixes(self) -> None:
        a, b = EID(), EID()
        assert (a.batch, a.task, a.run, a.step) == ("", "", 0, 0)
        assert a.suffix != b.suffix
        assert len(a.suffix) == 16
        assert all(c in "0123456789abcdef" for c in a.suffix)

    def test_to_dict_round_trips(self) -> None:
        eid = EID(batch="b", task=4, run=1, step=2, suffix="s")
        assert eid.to_dict() == {"batch": "b", "task": 4, "run": 1, "step": 2, "suffix": "s"}
        assert EID(**eid.to_dict()) == eid

    def test_slash_in_a_task_id_is_escaped(self) -> None:
        assert EID(batch=1, task="a/b").tid == "1/a%2Fb"
        assert EID(batch="1/a", task="b").tid == "1%2Fa/b"
        assert EID(batch=1, task="50%").tid == "1/50%25"
        assert EID(batch=1, task="a/b", run=0, step=0, suffix="x").uid.count("/") == 4

    def test_int_and_its_string_are_the_same_task(self) -> None:
        assert EID(batch=2, task=3).tid == EID(batch="2", task="3").tid

    @given(ids, ids, ids, ids)
    def test_task_ids_are_unambiguous(
        self, b1: int | str, t1: int | str, b2: int | str, t2: int | str
    ) -> None:
        same_components = str(b1) == str(b2) and str(t1) == str(t2)
        assert (EID(batch=b1, task=t1).tid == EID(batch=b2, task=t2).tid) == same_components

    @given(st.text(max_size=12))
    def test_escaping_is_reversible(self, text: str) -> None:
        escaped = escape_id_component(text)
        assert "/" not in escaped
        assert escaped.replace("%2F", "/").replace("%25", "%") == text

    def test_reference_ids_agree_without_slashes(self) -> None:
        ref = import_reference("trinity.common.experience")
        for fields in (
            {"batch": 1, "task": 2, "run": 3, "step": 4, "suffix": "x"},
            {"batch": "a", "task": "b"},
        ):
            full = {"run": 0, "step": 0, "suffix": "s", **fields}
            ours, theirs = EID(**full), ref.EID(**full)
            assert (ours.uid, ours.sid, ours.rid, ours.tid) == (
                theirs.uid,
                theirs.sid,
                theirs.rid,
                theirs.tid,
            )


class TestExperience:
    def test_single_turn_derives_its_action_mask(self) -> None:
        exp = Experience(tokens=[1, 2, 3, 4, 5], prompt_length=2, reward=1.0)
        assert exp.experience_type == "single_turn"
        assert exp.tokens is not None
        assert exp.tokens.dtype == torch.int32
        assert exp.action_mask is not None
        assert torch.equal(exp.action_mask, torch.ones(3, dtype=torch.bool))
        assert exp.response_length == 3

    def test_prompt_truncated_masks_every_response_position(self) -> None:
        exp = Experience(
            tokens=[1, 2], prompt_length=2, logprobs=[0.0, 0.0], truncate_status="prompt_truncated"
        )
        assert exp.action_mask is not None
        assert torch.equal(exp.action_mask, torch.zeros(2, dtype=torch.bool))

    def test_multi_turn_keeps_the_given_mask(self) -> None:
        exp = Experience(tokens=[1, 2, 3, 4], prompt_length=1, action_mask=[True, False, True])
        assert exp.experience_type == "multi_turn"
        assert exp.action_mask is not None
        assert exp.action_mask.dtype == torch.bool
        assert exp.action_mask.tolist() == [True, False, True]

    def test_dpo_pair(self) -> None:
        exp = Experience(tokens=[1, 2, 3], chosen=[4, 5], rejected=[6])
        assert exp.experience_type == "dpo"
        assert exp.prompt_length == 3

    def test_list_inputs_become_typed_tensors(self) -> None:
        exp = Experience(
            tokens=[1, 2, 3],
            prompt_length=1,
            logprobs=[-0.5, -0.25],
            advantages=[1, 2],
            returns=[1, 2],
            token_level_reward=[0, 1],
            teacher_logprobs=[-1, -2],
            multi_modal_inputs={"pixels": [[1.0, 2.0]]},
        )
        for name in ("logprobs", "advantages", "returns", "token_level_reward", "teacher_logprobs"):
            assert getattr(exp, name).dtype == torch.float32, name
        assert exp.multi_modal_inputs is not None
        assert isinstance(exp.multi_modal_inputs["pixels"], torch.Tensor)

    def test_tensors_pass_through_unchanged(self) -> None:
        tokens = torch.tensor([1, 2, 3], dtype=torch.int64)
        exp = Experience(tokens=tokens, prompt_length=1)
        assert exp.tokens is tokens

    def test_eid_from_dict_and_defaults(self) -> None:
        exp = Experience(eid={"batch": 1, "task": 2}, tokens=[1, 2])
        assert exp.eid.tid == "1/2"
        assert exp.info == {}
        assert exp.metrics == {}
        assert exp.custom_fields == []
        assert Experience(tokens=[1, 2]).info is not Experience(tokens=[1, 2]).info

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"tokens": [1, 2], "prompt_length": 0}, "prompt_length > 0"),
            ({"tokens": [1, 2], "prompt_length": 2}, "needs a response"),
            ({"tokens": [1, 2], "eid": 5}, "takes an EID"),
        ],
    )
    def test_bad_input_raises_clear_errors(self, kwargs: dict[str, object], message: str) -> None:
        with pytest.raises((ValueError, TypeError), match=message):
            Experience(**kwargs)  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        "kwargs",
        [
            {"tokens": [1, 2], "prompt_length": 0},
            {"tokens": [1, 2], "prompt_length": 2},
            {"tokens": None, "prompt_length": 1},
        ],
    )
    def test_invalid_experiences_raise_an_error_that_is_both_value_and_assertion_error(
        self, kwargs: dict[str, object]
    ) -> None:
        # Code written for trinity-rft catches AssertionError (it validates with assert); ours ValueError.
        assert issubclass(ExperienceError, ValueError)
        assert issubclass(ExperienceError, AssertionError)
        with pytest.raises(AssertionError) as caught:
            Experience(**kwargs)  # type: ignore[arg-type]
        assert isinstance(caught.value, ExperienceError)
        assert isinstance(caught.value, ValueError)

    def test_the_reference_asserts_where_we_raise_experience_error(self) -> None:
        ref = import_reference("trinity.common.experience")
        for kwargs in ({"tokens": [1, 2], "prompt_length": 0}, {"tokens": [1, 2], "prompt_length": 2}):
            with pytest.raises(AssertionError):
                ref.Experience(**kwargs)
            with pytest.raises(AssertionError):
                Experience(**kwargs)  # type: ignore[arg-type]

    def test_constructor_keywords_match_the_seed(self) -> None:
        import inspect

        params = inspect.signature(Experience.__init__).parameters
        seed = [
            "eid",
            "tokens",
            "logprobs",
            "reward",
            "token_level_reward",
            "advantages",
            "returns",
            "truncate_status",
            "info",
            "metrics",
            "prompt_length",
            "response_text",
            "prompt_text",
            "action_mask",
            "messages",
            "tools",
            "chosen",
            "rejected",
            "chosen_messages",
            "rejected_messages",
            "multi_modal_inputs",
            "teacher_logprobs",
            "custom_fields",
        ]
        assert [name for name in params if name != "self"] == seed
        assert all(params[name].kind is inspect.Parameter.KEYWORD_ONLY for name in seed)
        assert params["prompt_length"].default == 1

    def test_dataclass_fields_cover_every_seed_field(self) -> None:
        names = {f.name for f in dataclasses.fields(Experience)}
        assert {"eid", "tokens", "custom_fields", "teacher_logprobs", "multi_modal_inputs"} <= names

    def test_to_dict(self) -> None:
        exp = Experience(
            eid=EID(batch=1, task=2, run=0, step=0, suffix="s"),
            tokens=[1, 2, 3, 4],
            prompt_length=1,
            reward=0.5,
            prompt_text="p",
            response_text="r",
            info={"k": 1},
            custom_fields=[CustomField("k", "k_dest", torch.float32)],
        )
        assert exp.to_dict() == {
            "eid": {"batch": 1, "task": 2, "run": 0, "step": 0, "suffix": "s"},
            "type": "single_turn",
            "prompt_length": 1,
            "response_length": 3,
            "info": {"k": 1},
            "metrics": {},
            "prompt_text": "p",
            "response_text": "r",
            "reward": 0.5,
        }


def _exp(batch: int, task: int | str, run: int = 0, step: int = 0) -> Experience:
    return Experience(eid=EID(batch=batch, task=task, run=run, step=step), tokens=[1, 2])


class TestGroupBy:
    def test_groups_keep_first_appearance_order(self) -> None:
        exps = [_exp(0, 2), _exp(0, 1), _exp(0, 2, run=1), _exp(0, 1, run=1), _exp(1, 2)]
        groups = group_by(exps, "task")
        assert list(groups) == ["0/2", "0/1", "1/2"]
        assert groups["0/2"] == [exps[0], exps[2]]
        assert groups["0/1"] == [exps[1], exps[3]]

    def test_run_and_step_levels(self) -> None:
        exps = [_exp(0, 0, run=0, step=0), _exp(0, 0, run=0, step=1), _exp(0, 0, run=1, step=0)]
        assert list(group_by(exps, "run")) == ["0/0/0", "0/0/1"]
        assert list(group_by(exps, "step")) == ["0/0/0", "0/0/1"]
        assert group_by(exps, "step")["0/0/0"] == [exps[0], exps[2]]

    def test_tasks_with_slashes_do_not_merge(self) -> None:
        exps = [_exp(1, "a/b"), Experience(eid=EID(batch="1/a", task="b"), tokens=[1, 2])]
        assert len(group_by(exps, "task")) == 2

    def test_unknown_level(self) -> None:
        with pytest.raises(ValueError, match="id_type must be one of"):
            group_by([], "batch")  # type: ignore[arg-type]


class TestSplitDPO:
    def _pair(self) -> Experience:
        return Experience(
            eid=EID(batch=1, task=2, run=3, step=4),
            tokens=[1, 2],
            chosen=[3, 4],
            rejected=[5],
            reward=1.0,
            info={"nested": {"a": 1}},
            metrics={"m": 1.0},
            prompt_text="p",
            chosen_messages=[{"role": "assistant", "content": "yes"}],
            rejected_messages=[{"role": "assistant", "content": "no"}],
        )

    def test_chosen_then_rejected(self) -> None:
        chosen, rejected = split_dpo_experience_to_single_turn([self._pair()])
        assert chosen.tokens is not None
        assert rejected.tokens is not None
        assert chosen.tokens.tolist() == [1, 2, 3, 4]
        assert rejected.tokens.tolist() == [1, 2, 5]
        assert chosen.prompt_length == rejected.prompt_length == 2
        assert chosen.messages == [{"role": "assistant", "content": "yes"}]
        assert rejected.messages == [{"role": "assistant", "content": "no"}]
        assert chosen.experience_type == rejected.experience_type == "single_turn"
        assert (chosen.eid.tid, chosen.eid.run, chosen.eid.step) == ("1/2", 3, 4)
        assert chosen.eid.suffix != rejected.eid.suffix
        assert chosen.reward == rejected.reward == 1.0

    def test_halves_share_no_mutable_dict(self) -> None:
        pair = self._pair()
        chosen, rejected = split_dpo_experience_to_single_turn([pair])
        chosen.info["nested"]["a"] = 99
        chosen.metrics["m"] = 5.0
        assert rejected.info == {"nested": {"a": 1}}
        assert rejected.metrics == {"m": 1.0}
        assert pair.info == {"nested": {"a": 1}}

    def test_rejects_non_pairs(self) -> None:
        with pytest.raises(ExperienceError, match="not a DPO pair"):
            split_dpo_experience_to_single_turn([Experience(tokens=[1, 2])])

    def test_matches_the_reference_tokens(self) -> None:
        ref = import_reference("trinity.common.experience")
        kwargs = {"tokens": [1, 2], "chosen": [3, 4], "rejected": [5], "reward": 1.0, "prompt_text": "p"}
        ours = split_dpo_experience_to_single_turn([Experience(**kwargs)])  # type: ignore[arg-type]
        theirs = ref.split_dpo_experience_to_single_turn([ref.Experience(**kwargs)])
        for a, b in zip(ours, theirs, strict=True):
            assert a.tokens.tolist() == b.tokens.tolist()
            assert a.prompt_length == b.prompt_length
            assert a.reward == b.reward


def test_eid_is_slotted_and_still_copies_pickles_and_replaces() -> None:
    eid = EID(batch=1, task="a/b", run=2, step=3)
    assert not hasattr(eid, "__dict__")
    with pytest.raises(AttributeError):
        eid.note = "x"  # type: ignore[attr-defined]
    for clone in (pickle.loads(pickle.dumps(eid)), copy.copy(eid), copy.deepcopy(eid)):
        assert clone == eid
        assert clone is not eid
        assert clone.uid == "1/a%2Fb/2/3/" + eid.suffix
    assert dataclasses.replace(eid, run=5).rid == "1/a%2Fb/5"
    assert dataclasses.asdict(eid) == eid.to_dict()
