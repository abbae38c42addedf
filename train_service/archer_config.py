"""Owns nothing of its own any more: ``ArcherConfig`` (every setting of one ArCHer run, checked; the
defaults and where each comes from are in ``train_service.archer``'s docstring) is declared with the
other trainers' configs in ``core.domain.trainer_config`` and re-exported here for the schedule
(``train_service.archer``) and the updates (``train_service.archer_updates``)."""

from __future__ import annotations

from core.domain.trainer_config import ArcherConfig

__all__ = ["ArcherConfig"]
