"""trinity-core: reinforcement fine-tuning of language models as a plugin framework."""

from trinity_core.experience import (
    EID,
    CustomField,
    Experience,
    group_by,
    split_dpo_experience_to_single_turn,
)

__version__ = "0.1.0"

__all__ = [
    "EID",
    "CustomField",
    "Experience",
    "__version__",
    "group_by",
    "split_dpo_experience_to_single_turn",
]
