"""batch_or_each: the batched call, else each item alone; call errors raised, never retried."""
import pytest

from geocon_torch.errors import ConfigError
from geocon_torch.sections.isolation import batch_or_each


def _doubler(calls, bad=(), config_bad=()):
    def fn(items):
        calls.append(list(items))
        if any(i in config_bad for i in items):
            raise ConfigError("bad setting")
        if any(i in bad for i in items):
            raise RuntimeError(f"item {[i for i in items if i in bad][0]}")
        return [2 * i for i in items]
    return fn


def test_batch_result_when_nothing_raises():
    calls = []
    assert batch_or_each(_doubler(calls), [1, 2, 3]) == [2, 4, 6]
    assert calls == [[1, 2, 3]]


def test_only_the_item_at_fault_holds_its_exception():
    calls = []
    out = batch_or_each(_doubler(calls, bad={2}), [1, 2, 3])
    assert out[0] == 2 and out[2] == 6
    assert isinstance(out[1], RuntimeError) and str(out[1]) == "item 2"
    assert calls == [[1, 2, 3], [1], [2], [3]]


def test_a_batch_of_one_is_not_run_twice():
    calls = []
    out = batch_or_each(_doubler(calls, bad={5}), [5])
    assert isinstance(out[0], RuntimeError) and calls == [[5]]
    assert batch_or_each(_doubler(calls), []) == []


def test_reraise_types_escape_from_the_batch_and_from_a_retry():
    calls = []
    with pytest.raises(ConfigError, match="bad setting"):
        batch_or_each(_doubler(calls, config_bad={1}), [1, 2], reraise=(ConfigError,))
    assert calls == [[1, 2]]
    calls.clear()
    out = batch_or_each(_doubler(calls, config_bad={1}), [1, 2])  # not listed: the item's
    assert isinstance(out[0], ConfigError) and out[1] == 4
