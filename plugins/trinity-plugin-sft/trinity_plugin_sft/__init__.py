"""trinity-plugin-sft: supervised losses and presets for trinity-core.

Components (entry points):

* policy losses ``sft`` (:class:`SFTLossFn`), ``sft_is`` (:class:`SFTISLossFn`), ``sft_phi``
  (:class:`SFTPhiLossFn`);
* add strategy ``raft`` (:class:`RAFTAddStrategy`, the reward ranking of ``raft`` in mode ``both``);
* algorithms ``sft`` (:class:`SFTAlgorithm`), ``cpt`` (:class:`CPTAlgorithm`), ``raft``
  (:class:`RAFTAlgorithm`); they name KL ``none`` (trinity-plugin-kl) and entropy ``none``
  (trinity-plugin-entropy).
"""

from trinity_plugin_sft.cpt_algorithm import CPTAlgorithm
from trinity_plugin_sft.raft_algorithm import RAFTAlgorithm
from trinity_plugin_sft.raft_filter import RAFTAddStrategy
from trinity_plugin_sft.sft import SFTLossFn
from trinity_plugin_sft.sft_algorithm import SFTAlgorithm
from trinity_plugin_sft.sft_is import SFTISLossFn
from trinity_plugin_sft.sft_phi import SFTPhiArgs, SFTPhiLossFn, phi_function
from trinity_plugin_sft.token_loss import SFTTokenLoss, select_logprob

__all__ = [
    "CPTAlgorithm",
    "RAFTAddStrategy",
    "RAFTAlgorithm",
    "SFTAlgorithm",
    "SFTISLossFn",
    "SFTLossFn",
    "SFTPhiArgs",
    "SFTPhiLossFn",
    "SFTTokenLoss",
    "phi_function",
    "select_logprob",
]
__version__ = "0.1.0"
