"""Graders: the registry and the generic graders.

The registry's API is :mod:`.base`'s, re-exported as its ``__all__`` lists it. The generic
graders (:mod:`.generic`) are the harness's own; skill-specific ones (card-agent's, pkm-agent's,
recall's) register from skilldeck's built-in plugin like any installed plugin's (see
:mod:`skilldeck.plugins`).
"""

import skilldeck.evals.graders.base as base
import skilldeck.evals.graders.generic as generic
from skilldeck.evals.graders.base import *  # noqa: F403

__all__ = ["generic"]
__all__ += base.__all__
