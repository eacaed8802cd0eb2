"""The optimizer, scheduler and AMP scaler, and checkpoint states that arrived before them.

``load()`` may run before ``set_optimizer()`` (e.g. a script that loads, then configures): the
saved state waits here and is applied when its object is set, so the order of the calls does
not silently change what resumes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch

from .._validate import check_callable, check_choice
from .config import is_plateau

NAMES = ("optimizer", "scheduler", "scaler")


class Slots:
    """Holds ``optimizer``, ``scheduler`` (+ its ``interval``) and ``scaler``."""

    def __init__(self, scaler: torch.amp.GradScaler | None) -> None:
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler: Any = None
        self.interval = "epoch"
        self.scaler = scaler
        self._pending: dict[str, Any] = {}

    def set_optimizer(
        self, optimizer_class: Any, params: Iterable[Any], kwargs: Mapping[str, Any]
    ) -> None:
        """Build the optimizer; drops (with a warning) a scheduler bound to the previous one."""
        check_callable("optimizer_class", optimizer_class, optional=False)
        optimizer = optimizer_class(params, **kwargs)
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer_class built {optimizer!r}, not a torch.optim.Optimizer")
        if self.scheduler is not None:
            warnings.warn(
                "set_optimizer() drops the scheduler bound to the previous optimizer; call "
                "set_scheduler(...) again",
                UserWarning,
                stacklevel=3,
            )
            self.scheduler = None
        self.optimizer = optimizer
        self._apply("optimizer")

    def set_scheduler(
        self, scheduler_class: Callable[..., Any], interval: str, kwargs: Mapping[str, Any]
    ) -> None:
        """Build the scheduler on the optimizer."""
        if self.optimizer is None:
            raise RuntimeError("call set_optimizer(...) before set_scheduler(...)")
        check_callable("scheduler_class", scheduler_class, optional=False)
        check_choice("interval", interval, ("epoch", "step"))
        if interval == "step" and is_plateau(scheduler_class):
            raise ValueError("ReduceLROnPlateau steps with an epoch metric: use interval='epoch'")
        self.scheduler = scheduler_class(self.optimizer, **kwargs)
        self.interval = interval
        self._apply("scheduler")

    def state_dict(self) -> dict[str, Any]:
        """``{"optimizer", "scheduler", "scaler"}``: states, pending ones, or None."""
        return {
            name: self._pending.get(name) if obj is None else obj.state_dict()
            for name, obj in self._objects().items()
        }

    def load_state_dict(self, payload: Mapping[str, Any]) -> None:
        """Restore each saved state now, or when its object is set."""
        for name in NAMES:
            self._pending.pop(name, None)
            if payload.get(name) is not None:
                self._pending[name] = payload[name]
                self._apply(name)

    def _objects(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer, "scheduler": self.scheduler, "scaler": self.scaler}

    def _apply(self, name: str) -> None:
        obj = self._objects()[name]
        state = self._pending.get(name)
        if state is not None and obj is not None:
            obj.load_state_dict(state)
            del self._pending[name]
