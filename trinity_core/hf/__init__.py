"""Experiences as Hugging Face datasets: :func:`to_hf_datasets` and :func:`from_hf_datasets`.

Every field round-trips exactly. Layout (one row per experience):

==============================  =========================================================================
column                          content
==============================  =========================================================================
``eid_batch``, ``eid_task``     the id component as text; ``eid_batch_int`` / ``eid_task_int`` (bool)
                                say it was an ``int`` (so ``3`` and ``"3"`` stay apart)
``eid_run``, ``eid_step``       int64
``eid_suffix``                  text
``experience_type``             ``single_turn`` / ``multi_turn`` / ``dpo``
``prompt_length``               int64
``reward``                      float64, null for None
``truncate_status``,            text or null
``prompt_text``,
``response_text``
tensor fields (``tokens``,      ``large_list<T>`` of the flattened tensor, null for None. ``T`` is the
``logprobs``, ``action_mask``,  arrow type of the tensor dtype (bool, (u)int8-64, float16/32/64). A
``advantages``, ``returns``,    bfloat16 field is stored as its raw bits, ``large_list<uint16>``, in a
``token_level_reward``,         column named ``<field>__bfloat16``. A field with a tensor that is not
``teacher_logprobs``,           1-D gets a ``<field>__shape`` column (``list<int64>``, the shape).
``chosen``, ``rejected``
``info``, ``metrics``,          JSON text written with :mod:`trinity_core.jsonvalue` (tagged values
``messages``, ``tools``,        restore tuples, tensors, non-string keys ...), null for None. Text, not
``chosen_messages``,            arrow structs, so rows with different keys stay as they were (arrow would
``rejected_messages``,          unify the keys and fill missing ones with None).
``multi_modal_inputs``
``custom_fields``               JSON list of ``[source_field, destination_field, dtype_name]``
==============================  =========================================================================

The schema metadata (inside the ``huggingface`` entry, the only one ``datasets`` keeps) records the
format name, its version and each tensor field's dtype. Dtype names are looked up in an allow-list
(:data:`trinity_core.jsonvalue.TORCH_DTYPES`), never with ``getattr``. ``datasets`` drops schema metadata
in ``map``, ``save_to_disk`` and parquet files; the dtypes then come from the arrow types and column
names, which carry the same information. All tensors of one field must share a dtype (an arrow column
has one type); cast them first otherwise.

:func:`from_hf_datasets` also reads *plain* datasets written by other tools: columns named like the
:class:`~trinity_core.experience.Experience` constructor keywords (``tokens``, ``prompt_length``,
``reward``, ``logprobs``, ``eid`` as a dict, ...), converted by the constructor.
"""

from trinity_core.hf.layout import FORMAT_NAME, FORMAT_VERSION
from trinity_core.hf.read import from_hf_datasets
from trinity_core.hf.write import to_hf_datasets

__all__ = ["FORMAT_NAME", "FORMAT_VERSION", "from_hf_datasets", "to_hf_datasets"]
