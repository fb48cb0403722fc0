"""The theory lab: Ke et al. 2024's two-layer setting under Langevin diffusion, simulated in about a second.

`Setting` holds the knobs; `curves(setting)` gives LP, FFT and LP-FFT over time (loss, the first layer's
alignment with z, a linear probe's accuracy on the hidden features, the head's alignment with the best
head), `utility(setting)` the final loss against the LP share p per ε; `langevin` maps (ε, δ) to the
diffusion's noise; `overlay` (`engine`) trains the same setting with dpviz's real DP-SGD step. numpy only: the
page redraws without importing torch.
"""

from dpviz.theory.lab import Curves, Utility, curves, utility  # noqa: F401
from dpviz.theory import readings  # noqa: F401
from dpviz.theory.engine import OVERLAYS, overlay  # noqa: F401  (torch only when called)
from dpviz.theory.simulate import METRICS, STRATEGIES  # noqa: F401
from dpviz.theory.setting import Setting  # noqa: F401

__all__ = ["Curves", "Utility", "curves", "utility", "readings", "OVERLAYS", "overlay", "METRICS", "STRATEGIES",
           "Setting"]
