"""One clip's failure stays that clip's: the batched section calls' fallback to clip by clip."""
from __future__ import annotations

from typing import Callable, List, Sequence, Tuple, Type, TypeVar, Union

from .._precision import compile_failure

T = TypeVar("T")
R = TypeVar("R")


def batch_or_each(fn: Callable[[List[T]], Sequence[R]], items: Sequence[T],
                  reraise: Tuple[Type[BaseException], ...] = ()
                  ) -> List[Union[R, BaseException]]:
    """``fn(items)`` (one result per item, in order); when that batched call raises, ``fn`` of
    each item alone, so only the item at fault holds its exception (its slot in the list; a
    batch of one is not run again). A section whose result per item does not depend on the
    batch gives the same list either way.

    The items are retried after the batch's exception is released (its traceback holds the
    failed batch's tensors), so an out-of-memory error can be retried item by item.
    ``reraise``: exception types that are the call's, not an item's (a configuration
    problem): raised, never retried; so are KeyboardInterrupt and SystemExit, and
    ``torch.compile``'s own failures (:func:`~geocon_torch._precision.compile_failure`: a
    tracing error is the call's, never an item's)."""
    items = list(items)
    if not items:
        return []
    try:
        return list(fn(items))
    except reraise:
        raise
    except Exception as exc:  # noqa: BLE001 - find the item at fault: each item alone
        if compile_failure(exc):  # torch.compile's, not a clip's
            raise
        if len(items) == 1:
            return [exc]
    out: List[Union[R, BaseException]] = []
    for item in items:
        try:
            out.append(fn([item])[0])
        except reraise:
            raise
        except Exception as exc:  # noqa: BLE001 - this item's error only
            if compile_failure(exc):  # torch.compile's, not a clip's
                raise
            out.append(exc)
    return out
