"""What a run learns from: task sets (:mod:`.tasks`, a plugin kind, and the ``dataset`` task of
:mod:`.dataset_task` over :mod:`.dataset_io`), prompt rendering (:mod:`.prompts`), reward functions
(:mod:`.rewards`, :mod:`.reward_model`), and the stored experiences of mode ``train`` (:mod:`.stored`).

Imports: :mod:`trinity_core.train.models` (a reward model is a model) and the core. The data flows one
way from here: data -> explorer -> buffer -> learner.
"""
