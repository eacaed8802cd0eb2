"""NNHandler on one process: learning, epochs, exact resume, options and errors."""

import re

import h5py
import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler

from nn_handler import NNHandler
from nn_handler.dataloaders import (
    CombinedHDF5Dataset,
    DistributedEpochSampler,
    EpochShuffleSampler,
    H5LazyDataset,
    h5_worker_init_fn,
)

from helpers.handler import FEATURES, Recorder, TinyNet, accuracy, blobs, strip_index, write_blobs


def _handler(path=None, *, batch_size=16, loader=None, **kwargs):
    kwargs.setdefault("batch_fn", strip_index)
    kwargs.setdefault("progress", False)
    kwargs.setdefault("log_fn", None)
    handler = NNHandler(TinyNet, **kwargs)
    if path is not None:
        handler.set_train_loader(
            H5LazyDataset(path, "x", "y"), batch_size=batch_size, **(loader or {})
        )
    handler.set_optimizer(torch.optim.SGD, lr=0.1, momentum=0.9)
    handler.set_loss_fn(nn.CrossEntropyLoss())
    return handler


def _params(handler):
    return [p.detach().clone() for p in handler.model.parameters()]


def _assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)


@pytest.fixture
def blobs_path(tmp_path):
    return write_blobs(tmp_path / "blobs.h5", 240, chunks=(32, FEATURES + 1))


# -- learning -------------------------------------------------------------------------------


@pytest.mark.slow
def test_learns_through_h5_lazy_dataset_with_two_workers(tmp_path):
    path = write_blobs(tmp_path / "train.h5", 1200, chunks=(64, FEATURES + 1), compression="gzip")
    val = write_blobs(tmp_path / "val.h5", 300, seed=1)
    torch.manual_seed(0)
    lines = []
    handler = NNHandler(TinyNet, batch_fn=strip_index, progress=False, log_fn=lines.append)
    handler.set_train_loader(
        H5LazyDataset(path, "x", "y"), batch_size=32, shuffle=True, num_workers=2,
        worker_init_fn=h5_worker_init_fn, persistent_workers=True,
    )  # fmt: skip
    handler.set_val_loader(H5LazyDataset(val, "x", "y"), batch_size=100, num_workers=2)
    handler.set_optimizer(torch.optim.Adam, lr=1e-2)
    handler.set_loss_fn(nn.CrossEntropyLoss())
    handler.set_metrics({"acc": accuracy})
    before = handler.evaluate()
    history = handler.train(3)
    assert [r["epoch"] for r in history] == [0, 1, 2]
    assert history[-1]["val_loss"] < 0.5 * before["loss"]
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert history[-1]["val_acc"] > 0.8  # chance is 1/3
    assert all(r["samples_per_s"] > 0 and r["steps"] == 38 for r in history)
    assert handler.history == history
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert len(epochs) == 3
    assert len(lines) <= 4  # and at most one line on why the loop waited (tests/training/..._wait)
    assert re.match(
        r"epoch 3/3: train_loss \S+ train_acc \S+ val_loss \S+ val_acc \S+ \| ", epochs[2]
    )


def test_dict_batches_use_input_and_target_keys():
    class Fields(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            x = torch.full((FEATURES,), float(i % 3))
            return {"signal": x, "label": torch.tensor(i % 3), "id": i}

    handler = NNHandler(
        TinyNet, input_key="signal", target_key="label", progress=False, log_fn=None
    )
    handler.set_train_loader(Fields(), batch_size=8)
    handler.set_optimizer(torch.optim.Adam, lr=1e-2)
    handler.set_loss_fn(nn.CrossEntropyLoss())
    history = handler.train(4)
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    for kwargs, error in (
        ({}, "keys 'id', 'label', 'signal'"),
        ({"input_key": "x", "target_key": "label"}, "input_key='x' is not in the batch"),
    ):
        bad = NNHandler(TinyNet, progress=False, log_fn=None, **kwargs)
        bad.set_train_loader(Fields(), batch_size=8)
        bad.set_optimizer(torch.optim.SGD, lr=0.1)
        bad.set_loss_fn(nn.CrossEntropyLoss())
        with pytest.raises((ValueError, KeyError), match=re.escape(error)):
            bad.train(1)


# -- epochs and samplers ----------------------------------------------------------------------


class CountingSampler(Sampler[int]):
    def __init__(self, n):
        self.n, self.calls = n, []

    def set_epoch(self, epoch):
        self.calls.append(epoch)

    def __iter__(self):
        epoch = self.calls[-1] if self.calls else 0
        return iter(np.random.default_rng(epoch).permutation(self.n).tolist())

    def __len__(self):
        return self.n


@pytest.mark.parametrize("batched", [True, False], ids=["batched", "collate"])
def test_set_epoch_is_called_once_per_epoch(blobs_path, batched):
    sampler = CountingSampler(240)
    recorder = Recorder()
    handler = _handler(batch_fn=recorder)
    extra = {} if batched else {"collate_fn": torch.utils.data.default_collate}
    handler.set_train_loader(
        H5LazyDataset(blobs_path, "x", "y"), batch_size=16, sampler=sampler, **extra
    )
    handler.train(3)
    assert sampler.calls == [0, 1, 2]
    epochs = [recorder.seen[i * 240 : (i + 1) * 240] for i in range(3)]
    for epoch, order in enumerate(epochs):
        assert order == np.random.default_rng(epoch).permutation(240).tolist()


def test_default_sampler_reshuffles_every_epoch_and_covers_all(blobs_path):
    recorder = Recorder()
    handler = _handler(batch_fn=recorder)
    handler.set_train_loader(H5LazyDataset(blobs_path, "x", "y"), batch_size=16)
    # a world of one: the order of EpochShuffleSampler, a state that resumes on any world
    assert isinstance(handler.train_loader.sampler, DistributedEpochSampler)
    alike = DistributedEpochSampler(240, rank=0, world_size=1)
    assert list(alike) == list(EpochShuffleSampler(240))
    handler.train(3)
    epochs = [recorder.seen[i * 240 : (i + 1) * 240] for i in range(3)]
    assert all(sorted(e) == list(range(240)) for e in epochs)
    assert len({tuple(e) for e in epochs}) == 3
    plain = _handler(batch_fn=(rec := Recorder()))
    plain.set_train_loader(H5LazyDataset(blobs_path, "x", "y"), batch_size=16, shuffle=False)
    plain.train(1)
    assert rec.seen == list(range(240))


# -- exact resume -----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_resume_from_mid_epoch_checkpoint_matches_straight_run(blobs_path, tmp_path, workers):
    def make():
        torch.manual_seed(0)
        return _handler(blobs_path, loader={"num_workers": workers})

    straight = make()
    straight.train(2)
    stopped = make()
    assert stopped.train(2, max_steps=20) == stopped.history  # epoch 0 only (15 steps)
    assert (stopped.epoch, stopped.global_step) == (1, 20)
    stopped.save(tmp_path / "mid.pt")
    resumed = make()
    resumed.load(tmp_path / "mid.pt")
    assert (resumed.epoch, resumed.global_step, resumed.history) == (1, 20, stopped.history)
    resumed.train(2)
    _assert_same(_params(straight), _params(resumed))
    assert [r["train_loss"] for r in resumed.history] == [r["train_loss"] for r in straight.history]
    moments = [s["momentum_buffer"] for s in resumed.optimizer.state_dict()["state"].values()]
    _assert_same(
        moments, [s["momentum_buffer"] for s in straight.optimizer.state_dict()["state"].values()]
    )


@pytest.mark.slow
def test_periodic_checkpoints_resume_exactly_and_continuing_in_memory_too(blobs_path, tmp_path):
    def make(**loader):
        torch.manual_seed(0)
        handler = _handler(blobs_path, loader=loader)
        handler.set_val_loader(H5LazyDataset(blobs_path, "x", "y"), batch_size=64, num_workers=1)
        handler.set_metrics({"acc": accuracy})
        return handler

    straight = make()
    straight.train(3)
    crashed = make()
    crashed.train(3, max_steps=26, checkpoint_path=tmp_path / "c.pt", checkpoint_every_steps=4)
    resumed = make()
    resumed.load(tmp_path / "c.pt")  # saved at step 24 (epoch 1, step 9 of 15)
    assert resumed.global_step == 24
    resumed.train(3)
    _assert_same(_params(straight), _params(resumed))
    for key in ("train_loss", "train_acc", "val_loss", "val_acc"):
        assert [r[key] for r in resumed.history] == [r[key] for r in straight.history]
    # persistent workers draw the workers' seed from torch's RNG once, not every epoch, so the
    # RNG stream (dropout) differs from num_workers=0: compare with the same loader settings
    workers = {"num_workers": 2, "persistent_workers": True}
    straight = make(**workers)
    straight.train(3)
    paused = make(**workers)
    for stop in (7, 15, 16, 33):
        paused.train(3, max_steps=stop)
    paused.train(3)
    _assert_same(_params(straight), _params(paused))
    assert [r["val_loss"] for r in paused.history] == [r["val_loss"] for r in straight.history]


def test_stateless_sampler_resumes_by_fast_forwarding(blobs_path, tmp_path):
    def make(lines):
        torch.manual_seed(0)
        handler = _handler(log_fn=lines.append)
        handler.set_train_loader(
            DataLoader(H5LazyDataset(blobs_path, "x", "y"), batch_size=16, shuffle=True)
        )
        return handler

    straight = make([])
    straight.train(2)
    stopped = make([])
    stopped.train(2, max_steps=19)
    stopped.save(tmp_path / "c.pt")
    lines = []
    resumed = make(lines)
    resumed.load(tmp_path / "c.pt")
    resumed.train(2)
    _assert_same(_params(straight), _params(resumed))
    assert any(
        "RandomSampler keeps no position" in line and "first 4 batches" in line for line in lines
    )


def test_optimizer_and_scheduler_set_after_load_get_their_state(blobs_path, tmp_path):
    handler = _handler(blobs_path)
    handler.set_scheduler(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.5)
    handler.train(2)
    handler.save(tmp_path / "c.pt")
    fresh = NNHandler(TinyNet, batch_fn=strip_index, progress=False, log_fn=None)
    fresh.load(tmp_path / "c.pt")
    fresh.set_optimizer(torch.optim.SGD, lr=0.1, momentum=0.9)
    fresh.set_scheduler(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.5)
    assert fresh.optimizer.param_groups[0]["lr"] == pytest.approx(0.025)
    assert fresh.scheduler.last_epoch == 2
    state = fresh.optimizer.state_dict()["state"]
    _assert_same(
        [s["momentum_buffer"] for s in state.values()],
        [s["momentum_buffer"] for s in handler.optimizer.state_dict()["state"].values()],
    )
    _assert_same(_params(handler), _params(fresh))
    assert torch.load(tmp_path / "c.pt", weights_only=True)["format"] == "nn_handler.checkpoint"


# -- options ----------------------------------------------------------------------------------


class Linear(nn.Module):
    """No dropout, no randomness: gradients depend on the data only."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.fc = nn.Linear(FEATURES, 3)

    def forward(self, x):
        return self.fc(x)


def _linear(path, batch_size, **kwargs):
    handler = NNHandler(Linear, batch_fn=strip_index, progress=False, log_fn=None, **kwargs)
    handler.set_train_loader(H5LazyDataset(path, "x", "y"), batch_size=batch_size, shuffle=False)
    handler.set_optimizer(torch.optim.SGD, lr=0.5)
    handler.set_loss_fn(nn.CrossEntropyLoss())
    return handler


def test_gradient_accumulation_equals_the_bigger_batch(tmp_path):
    path = write_blobs(tmp_path / "d.h5", 40)
    big = _linear(path, 24)  # batches of 24 and 16
    big.train(2)
    small = _linear(path, 8, grad_accum_steps=3)  # groups of 3 and 2 batches of 8
    small.train(2)
    assert small.global_step == big.global_step == 4
    for a, b in zip(_params(big), _params(small), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert small.history[-1]["train_loss"] == pytest.approx(big.history[-1]["train_loss"], rel=1e-5)


def test_gradient_clipping_bounds_the_step(tmp_path):
    path = write_blobs(tmp_path / "d.h5", 16)
    moves = {}
    for clip in (None, 1e-3):
        handler = _linear(path, 16, grad_clip_norm=clip)
        before = torch.cat([p.flatten() for p in _params(handler)])
        handler.train(1)
        moves[clip] = float((torch.cat([p.flatten() for p in _params(handler)]) - before).norm())
    assert moves[1e-3] == pytest.approx(0.5 * 1e-3, rel=1e-3)  # lr * clipped norm
    assert moves[None] > 10 * moves[1e-3]


def test_bf16_autocast_on_cpu(blobs_path):
    dtypes = set()

    def spy(outputs, targets):
        dtypes.add(outputs.dtype)
        return accuracy(outputs, targets)

    torch.manual_seed(0)
    handler = _handler(blobs_path, mixed_precision=True)
    handler.set_metrics({"acc": spy})
    history = handler.train(3)
    assert str(handler.precision) == "bfloat16"
    assert dtypes == {torch.bfloat16}
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert handler._slots.scaler is None


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fp16_with_grad_scaler_on_cuda(blobs_path, tmp_path):
    handler = _handler(blobs_path, device="cuda", mixed_precision="fp16", grad_clip_norm=1.0)
    history = handler.train(3)
    assert handler.device.type == "cuda"
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    handler.save(tmp_path / "c.pt")
    assert torch.load(tmp_path / "c.pt", weights_only=True)["scaler"]["scale"] > 0


def test_schedulers_step_per_epoch_per_step_and_on_plateau(blobs_path):
    per_epoch = _handler(blobs_path)
    per_epoch.set_scheduler(torch.optim.lr_scheduler.StepLR, step_size=1, gamma=0.5)
    assert [r["lr"] for r in per_epoch.train(3)] == pytest.approx([0.1, 0.05, 0.025])
    per_step = _handler(blobs_path)
    per_step.set_scheduler(
        torch.optim.lr_scheduler.LambdaLR, interval="step", lr_lambda=lambda s: 1 / (1 + s)
    )
    per_step.train(1)
    assert per_step.optimizer.param_groups[0]["lr"] == pytest.approx(0.1 / 16)
    plateau = _handler(blobs_path)
    plateau.set_val_loader(H5LazyDataset(blobs_path, "x", "y"), batch_size=64)
    plateau.set_scheduler(
        torch.optim.lr_scheduler.ReduceLROnPlateau, factor=0.5, patience=0, threshold=10
    )
    assert [r["lr"] for r in plateau.train(3)] == pytest.approx([0.1, 0.05, 0.025])
    with pytest.raises(ValueError, match="use interval='epoch'"):
        plateau.set_scheduler(torch.optim.lr_scheduler.ReduceLROnPlateau, interval="step")


def test_progress_bar_only_when_asked_or_on_a_terminal(blobs_path, capsys):
    _handler(blobs_path, progress=True).train(1)
    assert "epoch 1" in capsys.readouterr().err
    _handler(blobs_path).train(1)  # progress=False
    _handler(blobs_path, progress=None).train(1)  # stderr is not a terminal under pytest
    assert capsys.readouterr().err == ""


def test_iterable_dataset_without_length_finishes_the_last_group():
    class Stream(IterableDataset):
        def __iter__(self):
            for i in range(10):
                yield torch.full((FEATURES,), float(i % 3)), torch.tensor(i % 3)

    handler = NNHandler(Linear, progress=False, log_fn=None, grad_accum_steps=2)
    handler.set_train_loader(Stream(), batch_size=4)  # 3 batches: groups of 2 and 1
    handler.set_optimizer(torch.optim.SGD, lr=0.1)
    handler.set_loss_fn(nn.CrossEntropyLoss())
    handler.train(2)
    assert handler.global_step == 4


def test_built_module_and_ready_loader_are_accepted(blobs_path):
    model = TinyNet()
    handler = NNHandler(model, batch_fn=strip_index, progress=False, log_fn=None)
    assert handler.model is model
    loader = DataLoader(H5LazyDataset(blobs_path, "x", "y"), batch_size=32)
    assert handler.set_train_loader(loader) is loader
    assert "NNHandler(model=TinyNet, device='cpu', world=0/1, precision=fp32" in repr(handler)


def test_torchrun_environment_without_ddp_is_mentioned(monkeypatch):
    lines = []
    monkeypatch.setenv("WORLD_SIZE", "4")
    NNHandler(TinyNet, log_fn=lines.append)
    assert len(lines) == 1
    assert "WORLD_SIZE=4" in lines[0]
    assert "use_distributed=True" in lines[0]


# -- errors -----------------------------------------------------------------------------------


class Broken(nn.Module):
    def __init__(self, width):
        super().__init__()
        raise ValueError(f"width {width} is odd")


def test_model_that_fails_to_build_names_the_class_and_chains_the_cause():
    with pytest.raises(
        RuntimeError,
        match=r"model_class=.*Broken.* failed to build with model_kwargs=\{'width': 3\}",
    ) as info:
        NNHandler(Broken, {"width": 3})
    assert isinstance(info.value.__cause__, ValueError)
    assert "width 3 is odd" in str(info.value)
    with pytest.raises(TypeError, match=re.escape("returned 3, not an nn.Module")):
        NNHandler(lambda: 3)
    with pytest.raises(TypeError, match="cannot apply to an already built TinyNet"):
        NNHandler(TinyNet(), {"features": 3})


def test_cuda_without_cuda_names_the_fix(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(
        RuntimeError, match=re.escape("device='cuda' but CUDA is not available")
    ) as info:
        NNHandler(TinyNet, device="cuda")
    assert "'cuda' if torch.cuda.is_available() else 'cpu'" in str(info.value)


def test_missing_pieces_name_the_call_that_adds_them(blobs_path, tmp_path):
    handler = NNHandler(TinyNet, batch_fn=strip_index, progress=False, log_fn=None)
    with pytest.raises(RuntimeError, match=re.escape("no loss function: call set_loss_fn(fn)")):
        handler.train(1)
    handler.set_loss_fn(nn.CrossEntropyLoss())
    with pytest.raises(
        RuntimeError, match=re.escape("no training data: call set_train_loader(dataset, ...)")
    ):
        handler.train(1)
    with pytest.raises(RuntimeError, match=re.escape("no validation data: call set_val_loader(")):
        handler.evaluate()
    handler.set_train_loader(H5LazyDataset(blobs_path, "x", "y"))
    with pytest.raises(RuntimeError, match=re.escape("no optimizer: call set_optimizer(")):
        handler.train(1)
    with pytest.raises(
        RuntimeError, match=re.escape("call set_optimizer(...) before set_scheduler(...)")
    ):
        handler.set_scheduler(torch.optim.lr_scheduler.StepLR, step_size=1)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"bogus": 1}, TypeError, "unexpected keyword argument 'bogus'"),
        ({"device": "gpu"}, ValueError, "device='gpu' is not a device name"),
        ({"device": 0}, TypeError, "device must be a string or torch.device, got 0"),
        (
            {"mixed_precision": "fp8"},
            ValueError,
            "mixed_precision must be one of False, True, 'fp16'",
        ),
        ({"mixed_precision": "fp16"}, ValueError, "needs a CUDA device, but device is 'cpu'"),
        ({"grad_accum_steps": 0}, ValueError, "grad_accum_steps must be >= 1, got 0"),
        (
            {"grad_clip_norm": -1.0},
            ValueError,
            "grad_clip_norm must be a positive number or None, got -1.0",
        ),
        ({"use_distributed": "yes"}, TypeError, "use_distributed must be True or False, got 'yes'"),
        ({"progress": 1}, TypeError, "progress must be True, False or None, got 1"),
        ({"input_key": 3}, TypeError, "input_key must be a string or None, got 3"),
        ({"log_fn": "print"}, TypeError, "log_fn must be callable or None, got 'print'"),
        ({"model_kwargs": [1]}, TypeError, "model_kwargs must be a mapping or None, got [1]"),
    ],
)
def test_bad_constructor_arguments(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        NNHandler(TinyNet, **kwargs)


def test_bad_loader_training_and_metric_arguments(blobs_path, tmp_path):
    handler = _handler(blobs_path)
    dataset = H5LazyDataset(blobs_path, "x", "y")
    with pytest.raises(
        TypeError,
        match=re.escape(
            "unknown DataLoader keyword(s) 'batchsize'; valid keywords are 'batch_sampler'"
        ),
    ):
        handler.set_train_loader(dataset, batchsize=4)
    with pytest.raises(
        TypeError, match="a ready DataLoader takes no loader keywords; got 'batch_size'"
    ):
        handler.set_train_loader(DataLoader(dataset), batch_size=4)
    with pytest.raises(ValueError, match="mutually exclusive"):
        handler.set_train_loader(dataset, sampler=EpochShuffleSampler(len(dataset)), shuffle=True)
    for args, message in (
        ((-1,), "epochs must be >= 0, got -1"),
        ((1,), "max_steps must be >= 1, got 0"),
    ):
        with pytest.raises(ValueError, match=re.escape(message)):
            handler.train(*args, max_steps=0 if args == (1,) else None)
    with pytest.raises(
        ValueError, match=re.escape("checkpoint_every_steps=5 needs checkpoint_path=")
    ):
        handler.train(1, checkpoint_every_steps=5)
    with pytest.raises(
        ValueError,
        match="metric name 'loss' must be a non-empty string other than 'loss', 'samples'",
    ):
        handler.set_metrics({"loss": accuracy})
    with pytest.raises(TypeError, match="metric 'acc' must be callable, got 3"):
        handler.set_metrics({"acc": 3})
    with pytest.raises(ValueError, match="interval must be one of 'epoch', 'step'; got 'batch'"):
        handler.set_scheduler(torch.optim.lr_scheduler.StepLR, interval="batch", step_size=1)


def test_bad_batches_and_losses_say_what_to_pass(blobs_path):
    handler = _handler(batch_fn=lambda batch: (batch[0][:, 1:], batch[1], batch[0]))
    handler.set_train_loader(H5LazyDataset(blobs_path, "x", "y"), batch_size=8)
    with pytest.raises(
        TypeError, match=re.escape("batch_fn must return (inputs, targets), got tuple")
    ):
        handler.train(1)
    x_only = NNHandler(TinyNet, progress=False, log_fn=None)
    x_only.set_train_loader(H5LazyDataset(blobs_path, "x"), batch_size=8)
    x_only.set_optimizer(torch.optim.SGD, lr=0.1)
    x_only.set_loss_fn(nn.CrossEntropyLoss())
    with pytest.raises(ValueError, match=r"has no targets .*batch_fn=lambda x: \(x, x\)"):
        x_only.train(1)
    per_sample = _handler(blobs_path)
    per_sample.set_loss_fn(nn.CrossEntropyLoss(reduction="none"))
    with pytest.raises(
        TypeError,
        match=re.escape("loss_fn must return a one-element tensor (the batch mean), got (16,)"),
    ):
        per_sample.train(1)


def test_bad_checkpoints(tmp_path):
    handler = NNHandler(TinyNet, log_fn=None)
    with pytest.raises(FileNotFoundError, match="no checkpoint at path="):
        handler.load(tmp_path / "missing.pt")
    torch.save({"state_dict": {}}, tmp_path / "other.pt")
    with pytest.raises(
        ValueError, match=r"is not an NNHandler checkpoint .* it holds 'state_dict'"
    ):
        handler.load(tmp_path / "other.pt")
    handler.save(tmp_path / "c.pt")
    other = NNHandler(TinyNet, {"hidden": 5}, log_fn=None)
    with pytest.raises(RuntimeError, match="size mismatch"):
        other.load(tmp_path / "c.pt")
    with h5py.File(tmp_path / "x.h5", "w"):
        pass
    with pytest.raises(ValueError, match=r"checkpoint .*x\.h5.* is truncated or not a checkpoint"):
        handler.load(tmp_path / "x.h5")


def test_dict_batches_from_combined_hdf5_dataset(tmp_path):
    paths = []
    for k in range(3):
        x, y = blobs(60, seed=k)
        paths.append(tmp_path / f"rec{k}.h5")
        with h5py.File(paths[-1], "w") as f:
            f["fhr_st"] = x[:, 1:].reshape(60, 2, FEATURES // 2)
            f["target"] = np.eye(3, dtype=np.float32)[y]  # one-hot, as the recordings store it
            f["guid"] = np.array([f"p{k}-{i}".encode() for i in range(60)])
    dataset = CombinedHDF5Dataset(paths, ["fhr_st", "target", "guid"], pin_memory=False)
    sizes = []

    def loss(outputs, targets):
        return nn.functional.cross_entropy(outputs, targets.argmax(1))

    def model():
        return nn.Sequential(nn.Flatten(), TinyNet())

    torch.manual_seed(0)
    handler = NNHandler(model, input_key="fhr_st", target_key="target", progress=False, log_fn=None)
    handler.set_train_loader(dataset, batch_size=16)
    handler.set_optimizer(torch.optim.Adam, lr=1e-2)
    handler.set_loss_fn(loss)
    handler.set_metrics({"n": lambda out, t: sizes.append(len(t)) or 0.0})  # guid is a list
    history = handler.train(4)
    assert history[-1]["train_loss"] < 0.5 * history[0]["train_loss"]
    assert sum(sizes) == 4 * 180  # every sample once per epoch
