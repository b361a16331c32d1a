"""``cfg_program._row_classes`` (the split labels of the lazy refinement and of the local
digests) is ``np.unique(rows, axis=0, return_inverse=True)``'s inverse exactly: the class
numbers in the rows' value order, for rows of one 8-byte word (one sort: the first word's
classes are used as they are) and of several, with many duplicates."""

from __future__ import annotations

import numpy as np
import pytest

from formcast.index.cfg_program import _row_classes


@pytest.mark.parametrize("width", [1, 3, 8, 9, 17])
def test_row_classes_are_numpy_unique_inverse(width: int) -> None:
    rng = np.random.default_rng(width)
    for _ in range(30):
        rows = rng.integers(0, 3, size=(int(rng.integers(1, 300)), width)).astype(np.uint8)
        want = np.unique(rows, axis=0, return_inverse=True)[1].reshape(-1)
        assert np.array_equal(_row_classes(rows), want)
    assert _row_classes(np.zeros((0, width), dtype=np.uint8)).size == 0
