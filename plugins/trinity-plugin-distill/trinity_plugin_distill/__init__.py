"""trinity-plugin-distill: on-policy distillation for trinity-core.

Components (entry points):

* advantage function ``on_policy_distill``:
  :class:`~trinity_plugin_distill.on_policy_distill.OnPolicyDistillAdvantage`;
* advantage function ``jsd``: :class:`~trinity_plugin_distill.jsd.JSDAdvantage`;
* algorithms ``on_policy_distill`` and ``jsd``: :mod:`trinity_plugin_distill.algorithm`.

Both advantage functions run in the trainer and read the teacher's log-probs of the sampled tokens
(``Experience.teacher_logprobs``, the batch column ``teacher_logprobs``).
"""

from trinity_plugin_distill.algorithm import JSDAlgorithm, OnPolicyDistillAlgorithm
from trinity_plugin_distill.jsd import JSDAdvantage
from trinity_plugin_distill.on_policy_distill import OnPolicyDistillAdvantage

__all__ = ["JSDAdvantage", "JSDAlgorithm", "OnPolicyDistillAdvantage", "OnPolicyDistillAlgorithm"]
__version__ = "0.1.0"
