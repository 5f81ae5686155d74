"""The gpu dialect: distributed and shared-memory layouts, and the ops that use them."""
from .layouts import *  # noqa: F401,F403
