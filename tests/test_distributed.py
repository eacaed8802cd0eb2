import pytest

from nn_handler import World


def test_defaults_and_properties():
    w = World()
    assert (w.rank, w.world_size, w.local_rank) == (0, 1, 0)
    assert w.is_main
    assert not w.is_distributed
    assert World(3, 4, 1).is_distributed
    assert not World(3, 4, 1).is_main


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rank": 4, "world_size": 4}, r"rank must be in \[0, world_size=4\), got rank=4"),
        ({"rank": -1, "world_size": 2}, "rank must be in"),
        ({"world_size": 0}, "world_size must be >= 1, got 0"),
        ({"local_rank": -2}, "local_rank must be >= 0, got -2"),
    ],
)
def test_invalid_worlds(kwargs, message):
    with pytest.raises(ValueError, match=message):
        World(**kwargs)
    with pytest.raises(TypeError, match="rank must be an integer"):
        World(rank=1.0)  # type: ignore[arg-type]


def test_detect_single_process_logs_once():
    lines = []
    w = World.detect(log_fn=lines.append, environ={})
    assert w == World()
    assert len(lines) == 1
    assert "world size 1" in lines[0]


def test_detect_from_torchrun_environment():
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}
    assert World.detect(environ=env) == World(3, 4, 1)
    assert World.detect(environ={"RANK": "2", "WORLD_SIZE": "3"}) == World(2, 3, 2)


def test_arguments_override_detection():
    env = {"RANK": "3", "WORLD_SIZE": "4"}
    assert World.detect(rank=1, environ=env).rank == 1
    assert World.detect(rank=1, environ=env).world_size == 4
    assert World.detect(rank=0, world_size=2, environ={}) == World(0, 2, 0)
    with pytest.raises(ValueError, match="rank must be in"):
        World.detect(rank=5, environ=env)


def test_bad_environment_names_the_variable():
    with pytest.raises(
        ValueError, match="environment variable WORLD_SIZE='four' is not an integer"
    ):
        World.detect(environ={"RANK": "0", "WORLD_SIZE": "four"})


def test_detect_with_world_size_only_says_which_rank_it_assumes():
    lines = []
    w = World.detect(world_size=4, log_fn=lines.append, environ={})
    assert w == World(0, 4, 0)
    assert len(lines) == 1 and "using rank 0 of world_size=4" in lines[0]
    lines.clear()
    assert World.detect(rank=0, log_fn=lines.append, environ={}) == World()
    assert len(lines) == 1 and "world size 1" in lines[0]
    lines.clear()
    World.detect(rank=1, world_size=2, log_fn=lines.append, environ={})
    assert lines == []  # both given: nothing was guessed
