"""Owns agentr's Gymnasium registrations: importing this module registers ``agentr/TextCraft-v0``
(TextCraft) and ``agentr/Env-v0`` (any env URI: ``gymnasium.make("agentr/Env-v0", uri="tau2:mock")``)
with Gymnasium. The wrapper itself is ``core.envs.gym_export.AgentrGymEnv``; the other
direction (a text Gymnasium environment inside agentr) is the ``gym:ID`` env URI.

    import gymnasium, agentr.gym
    env = gymnasium.make("agentr/TextCraft-v0")
    observation, info = env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step("inventory")
"""

from __future__ import annotations

from core.envs.gym_export import AgentrGymEnv
from core.envs.gymnasium_bridge import TextSpace, register_envs

__all__ = ["AgentrGymEnv", "TextSpace", "register_envs"]

register_envs()
