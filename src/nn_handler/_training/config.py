"""Checks of NNHandler's arguments, and building the model from its class."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from .._validate import check_callable, check_count


def check_flag(name: str, value: Any, *, optional: bool = False) -> None:
    """Raise ``TypeError`` unless ``value`` is a bool (or None when ``optional``)."""
    if optional and value is None:
        return
    if not isinstance(value, bool):
        allowed = "True, False or None" if optional else "True or False"
        raise TypeError(f"{name} must be {allowed}, got {value!r}")


def check_clip(value: Any) -> float | None:
    """``grad_clip_norm``: a positive number or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"grad_clip_norm must be a positive number or None, got {value!r}")
    return float(value)


def build_model(model_class: Any, model_kwargs: Any) -> nn.Module:
    """``model_class(**model_kwargs)``, or ``model_class`` itself when it is a built module.

    Raises:
        RuntimeError: the constructor raised (the original exception is chained).
        TypeError: the arguments or the result have the wrong type.
    """
    if model_kwargs is not None and not isinstance(model_kwargs, Mapping):
        raise TypeError(f"model_kwargs must be a mapping or None, got {model_kwargs!r}")
    kwargs = dict(model_kwargs or {})
    if isinstance(model_class, nn.Module):
        if kwargs:
            raise TypeError(
                f"model_kwargs={kwargs!r} cannot apply to an already built "
                f"{type(model_class).__name__}; pass its class as model_class instead"
            )
        return model_class
    check_callable("model_class", model_class, optional=False)
    try:
        model = model_class(**kwargs)
    except Exception as exc:
        raise RuntimeError(
            f"model_class={model_class!r} failed to build with model_kwargs={kwargs!r} "
            f"({type(exc).__name__}: {exc}); fix the model's arguments or its __init__"
        ) from exc
    if not isinstance(model, nn.Module):
        raise TypeError(f"model_class={model_class!r} returned {model!r}, not an nn.Module")
    return model


def note_torchrun(log: Callable[[str], None], environ: Mapping[str, str] | None = None) -> None:
    """Say so when a torchrun job runs the handler without DDP (each process trains alone)."""
    env = os.environ if environ is None else environ
    if env.get("WORLD_SIZE", "1") not in ("", "0", "1"):
        log(
            f"nn_handler: WORLD_SIZE={env['WORLD_SIZE']} (a torchrun job) but "
            "use_distributed=False: each process trains its own model; pass "
            "use_distributed=True for DDP"
        )


def is_plateau(scheduler_class: Any) -> bool:
    """True for ``ReduceLROnPlateau`` (and subclasses), which steps with a metric."""
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau
    return isinstance(scheduler_class, type) and issubclass(scheduler_class, plateau)


def check_train_args(
    epochs: Any, max_steps: Any, path: Any, every: Any
) -> tuple[int, int | None, int | None]:
    """Validate ``train()``'s arguments; returns ``(epochs, max_steps, every)``."""
    epochs = check_count("epochs", epochs)
    max_steps = None if max_steps is None else check_count("max_steps", max_steps, minimum=1)
    every = None if every is None else check_count("checkpoint_every_steps", every, minimum=1)
    if every is not None and path is None:
        raise ValueError(f"checkpoint_every_steps={every!r} needs checkpoint_path= (where to save)")
    return epochs, max_steps, every


def check_metrics(metrics: Any, reserved: tuple[str, ...]) -> dict[str, Any]:
    """``{name: callable}`` with names that are non-empty strings other than ``reserved``."""
    if not isinstance(metrics, Mapping):
        raise TypeError(f"metrics must be a mapping of name -> callable, got {metrics!r}")
    for name, fn in metrics.items():
        if not isinstance(name, str) or not name or name in reserved:
            raise ValueError(
                f"metric name {name!r} must be a non-empty string other than "
                f"{', '.join(map(repr, reserved))}"
            )
        check_callable(f"metric {name!r}", fn, optional=False)
    return dict(metrics)
