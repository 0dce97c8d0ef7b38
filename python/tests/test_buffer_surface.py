"""The buffer's typed surface (issue 43): dtype, shape and nbytes as NumPy names them; a freed
buffer is the caller's mistake, named, and NumPy refuses to view it."""

import numpy as np
import pytest

import offload


def test_dtype_shape_and_nbytes(host):
    b = host.zeros((3, 4), np.float64)
    assert (b.dtype, b.shape, b.nbytes) == (np.dtype(np.float64), (3, 4), 96)
    raw = host.alloc(10)
    assert (raw.dtype, raw.shape, raw.nbytes) == (np.dtype(np.uint8), (10,), 10)
    raw.view(np.uint16)
    assert (raw.dtype, raw.shape) == (np.dtype(np.uint16), (5,))


def test_a_freed_buffer_is_named_and_numpy_refuses_it(host):
    b = host.alloc(16)
    b.free()
    assert b.freed
    with pytest.raises(offload.InvalidArgumentError, match=r"Buffer.read: .*freed \(Buffer.free\)"):
        b.read()
    with pytest.raises(offload.InvalidArgumentError, match="freed"):
        np.asarray(b)
    with pytest.raises(offload.InvalidArgumentError, match="freed"):
        host.queue().fill(b, 0, 4, b"\x01")


def test_fill_takes_its_range_by_keyword(host):
    b = host.alloc(8)
    b.fill(7, offset=2, nbytes=4)
    assert b.read() == b"\x00\x00\x07\x07\x07\x07\x00\x00"
    with pytest.raises(TypeError):
        b.fill(7, 0, 8)  # the old positional order, refused rather than misread
