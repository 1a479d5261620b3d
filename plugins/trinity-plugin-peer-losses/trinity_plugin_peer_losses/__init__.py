"""trinity-plugin-peer-losses: policy losses of peer libraries (verl) for trinity-core.

Components (entry points, kind ``policy_loss``):

* ``gpg``: :class:`~trinity_plugin_peer_losses.gpg.GPGPolicyLossFn` (GPG, arXiv:2504.02546);
* ``clip_cov``: :class:`~trinity_plugin_peer_losses.clip_cov.ClipCovPolicyLossFn` (arXiv:2505.22617);
* ``kl_cov``: :class:`~trinity_plugin_peer_losses.kl_cov.KLCovPolicyLossFn` (arXiv:2505.22617);
* ``dppo_tv``: :class:`~trinity_plugin_peer_losses.dppo_tv.DPPOTVPolicyLossFn` (arXiv:2602.04879);
* ``dppo_kl``: :class:`~trinity_plugin_peer_losses.dppo_kl.DPPOKLPolicyLossFn` (arXiv:2602.04879);
* ``dro``: :class:`~trinity_plugin_peer_losses.dro.DROPolicyLossFn` (arXiv:2405.19107).
"""

from trinity_plugin_peer_losses.clip_cov import ClipCovPolicyLossFn
from trinity_plugin_peer_losses.dppo_kl import DPPOKLPolicyLossFn
from trinity_plugin_peer_losses.dppo_tv import DPPOTVPolicyLossFn
from trinity_plugin_peer_losses.dro import DROPolicyLossFn
from trinity_plugin_peer_losses.gpg import GPGPolicyLossFn
from trinity_plugin_peer_losses.kl_cov import KLCovPolicyLossFn

__all__ = [
    "ClipCovPolicyLossFn",
    "DPPOKLPolicyLossFn",
    "DPPOTVPolicyLossFn",
    "DROPolicyLossFn",
    "GPGPolicyLossFn",
    "KLCovPolicyLossFn",
]
__version__ = "0.1.0"
