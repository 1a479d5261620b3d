"""The policy and its relatives as objects: any transformers causal LM or the tiny embedded default
(:mod:`.policy`), LoRA adapters through PEFT (:mod:`.lora`), the dtype of the weights (:mod:`.dtype`).

Imports: :mod:`trinity_core.lm` and the core only; every other package of ``train`` may import it.
"""
