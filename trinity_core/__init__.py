"""trinity-core: reinforcement fine-tuning of language models as a plugin framework.

The root re-exports the data model; the component contracts live in :mod:`trinity_core.components`,
discovery in :mod:`trinity_core.registry`, hooks in :mod:`trinity_core.hookspecs`, configuration in
:mod:`trinity_core.config` and numeric helpers in :mod:`trinity_core.ops`. ``to_hf_datasets`` and
``from_hf_datasets`` import ``datasets`` only when called.
"""

from trinity_core.batch import (
    ExperienceBatch,
    gather_action_masks,
    gather_attention_masks,
    gather_multi_modal_inputs,
    gather_response_attrs,
    gather_token_ids,
)
from trinity_core.codec import (
    ExperienceDecodeError,
    ExperienceEncodeError,
    deserialize_many,
    serialize_many,
)
from trinity_core.experience import (
    EID,
    CustomField,
    Experience,
    ExperienceError,
    group_by,
    split_dpo_experience_to_single_turn,
)
from trinity_core.hf import from_hf_datasets, to_hf_datasets

__version__ = "0.1.0"

__all__ = [
    "EID",
    "CustomField",
    "Experience",
    "ExperienceBatch",
    "ExperienceDecodeError",
    "ExperienceEncodeError",
    "ExperienceError",
    "__version__",
    "deserialize_many",
    "from_hf_datasets",
    "gather_action_masks",
    "gather_attention_masks",
    "gather_multi_modal_inputs",
    "gather_response_attrs",
    "gather_token_ids",
    "group_by",
    "serialize_many",
    "split_dpo_experience_to_single_turn",
    "to_hf_datasets",
]
