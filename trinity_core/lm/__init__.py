"""A causal language model at run time: sampling responses, a shared prompt's key-value cache, and what
a model's forward call accepts through the wrappers a run puts around it.

Used by the explorer (sampling), the learner (the log-prob pass) and the workflow engine
(:mod:`trinity_core.workflows`), so it sits below all three: it imports no other part of
``trinity_core`` (transformers is imported where a function needs it).
"""
