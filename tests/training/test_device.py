"""Device parsing and mixed-precision setup."""

import re

import pytest
import torch

from nn_handler._training.device import (
    Precision,
    bind_local_device,
    parse_device,
    resolve_precision,
)

CPU = torch.device("cpu")


def test_parse_device():
    assert parse_device("cpu") == CPU
    assert parse_device(CPU) == CPU
    with pytest.raises(ValueError, match=re.escape("device='tpu:x' is not a device name")):
        parse_device("tpu:x")


def test_cuda_checks(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert parse_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(
        RuntimeError, match=re.escape("device='cuda:2' but only 2 CUDA device(s) are visible")
    ):
        parse_device("cuda:2")


def test_bind_local_device_keeps_cpu():
    assert bind_local_device(CPU, 3) == CPU


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_bind_local_device_picks_the_local_gpu():
    assert bind_local_device(torch.device("cuda"), 0) == torch.device("cuda", 0)
    assert torch.cuda.current_device() == 0


@pytest.mark.parametrize(
    ("value", "device", "dtype", "scaler"),
    [
        (False, "cpu", None, False),
        (True, "cpu", torch.bfloat16, False),
        ("bf16", "cpu", torch.bfloat16, False),
        ("bfloat16", "cuda", torch.bfloat16, False),
        (True, "cuda", torch.float16, True),
        ("fp16", "cuda", torch.float16, True),
        ("float16", "cuda", torch.float16, True),
    ],
)
def test_precision_matrix(value, device, dtype, scaler):
    precision = resolve_precision(value, torch.device(device))
    assert (precision.dtype, precision.uses_scaler) == (dtype, scaler)


@pytest.mark.parametrize("value", ["fp8", 1, None, 0.5])
def test_unknown_precision(value):
    with pytest.raises(
        ValueError,
        match=re.escape(
            "mixed_precision must be one of False, True, 'fp16', 'float16', 'bf16', "
            f"'bfloat16'; got {value!r}"
        ),
    ):
        resolve_precision(value, CPU)


def test_autocast_runs_matmuls_in_bf16_on_cpu():
    a = torch.ones(2, 2)
    with Precision("cpu", torch.bfloat16).autocast():
        assert (a @ a).dtype == torch.bfloat16
    with Precision("cpu").autocast():
        assert (a @ a).dtype == torch.float32
    assert Precision("cpu").make_scaler() is None
    assert str(Precision("cpu")) == "fp32"
