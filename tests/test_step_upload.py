"""A step's arrays in one buffer (engine.step_upload): fresh layouts and the graphs' static one."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.step_upload import Layout, StaticInputs, upload
from engine.sync import HostSyncCounter


def test_upload_views_each_array_back_with_its_dtype_and_shape():
    arrays = {"ids": np.arange(5, dtype=np.int64), "lens": np.array([3, 1, 4], np.int32),
              "table": np.arange(12, dtype=np.int32).reshape(3, 4), "temp": np.array([0.5, 1.0], np.float32)}
    views = upload(arrays, torch.device("cpu"))
    for name, a in arrays.items():
        assert views[name].numpy().dtype == a.dtype and np.array_equal(views[name].numpy(), a), name
    # Every slot starts 16-byte aligned, in the order given.
    offsets = Layout({n: (a.dtype, a.shape) for n, a in arrays.items()}).offsets
    assert offsets == {"ids": 0, "lens": 48, "table": 64, "temp": 112}


def static() -> StaticInputs:
    return StaticInputs({"ids": (np.int64, (8,)), "lens": (np.int32, (4,)), "table": (np.int32, (4, 6))},
                        torch.device("cpu"), HostSyncCounter())


def test_static_upload_fills_leading_corners_and_keeps_the_slot_row_stride():
    inputs = static()
    inputs.views["table"].fill_(-7)
    dev = inputs.upload({"ids": np.arange(3, dtype=np.int64), "lens": np.array([9, 8], np.int32),
                         "table": np.array([[1, 2], [3, 4]], np.int32), "ignored": np.zeros(2)})
    assert set(dev) == {"ids", "lens", "table"}
    assert dev["ids"].tolist() == [0, 1, 2] and dev["lens"].tolist() == [9, 8]
    # The block table keeps the slot's width (a graph reads that stride); only the rows used
    # travel, and the columns past the step's width are whatever the copy brought.
    assert dev["table"].shape == (2, 6) and dev["table"][:, :2].tolist() == [[1, 2], [3, 4]]
    assert inputs.views["table"][2:].eq(-7).all()
    # The views are the buffer's: what a captured graph reads.
    assert dev["ids"].data_ptr() == inputs.views["ids"].data_ptr()


def test_an_array_a_step_does_not_have_is_left_out():
    dev = static().upload({"ids": np.arange(2, dtype=np.int64), "lens": None, "table": np.zeros((1, 6), np.int32)})
    assert set(dev) == {"ids", "table"} and dev["ids"].tolist() == [0, 1]
    assert set(upload({"ids": np.arange(2, dtype=np.int64), "lens": None}, torch.device("cpu"))) == {"ids"}


def test_static_upload_copies_only_through_the_last_row_used():
    inputs = static()
    inputs.buffer.fill_(0xAB)
    inputs.upload({"ids": np.arange(8, dtype=np.int64), "lens": np.zeros(4, np.int32),
                   "table": np.ones((1, 6), np.int32)})
    end = inputs.layout.offsets["table"] + 6 * 4
    assert (inputs.buffer[end:] == 0xAB).all() and not (inputs.buffer[:end] == 0xAB).all()


@pytest.mark.parametrize("bad", [np.arange(9, dtype=np.int64), np.arange(3, dtype=np.int32)])
def test_an_array_that_does_not_fit_its_slot_is_refused(bad):
    inputs = static()
    with pytest.raises(ValueError, match="ids"):
        inputs.upload({"ids": bad, "lens": np.zeros(1, np.int32), "table": np.zeros((1, 1), np.int32)})


def test_a_step_does_not_overwrite_the_host_buffer_the_step_before_copies_from():
    """On the GPU the copy is asynchronous: the next step must fill the other host buffer,
    leaving the one still being copied from as it was."""
    inputs = static()
    first = {"ids": np.full(8, 1, np.int64), "lens": np.full(4, 1, np.int32), "table": np.full((4, 6), 1, np.int32)}
    second = {name: a * 2 for name, a in first.items()}
    inputs.upload(first)
    staged = [s.clone() for s in inputs._staging]
    inputs.upload(second)
    assert sum(torch.equal(before, after) for before, after in zip(staged, inputs._staging)) == 1
    assert inputs.views["ids"].tolist() == [2] * 8
    inputs.upload(first)          # the third step takes the first buffer again
    assert inputs.views["lens"].tolist() == [1] * 4


def test_arrays_built_in_the_host_slots_are_copied_as_built():
    """host_slots() is the buffer the next upload copies from: arrays built in its leading
    corners travel with in_place=True, and the upload after takes the other buffer."""
    inputs = static()
    slots = inputs.host_slots()
    built = {"ids": slots["ids"][:5], "lens": slots["lens"][:2], "table": slots["table"][:2, :3]}
    built["ids"][:] = np.arange(5) * 3
    built["lens"][:] = [4, 2]
    built["table"][:] = [[1, 2, 3], [4, 5, 6]]
    dev = inputs.upload(built, in_place=True)
    assert dev["ids"].tolist() == [0, 3, 6, 9, 12] and dev["lens"].tolist() == [4, 2]
    assert dev["table"][:, :3].tolist() == [[1, 2, 3], [4, 5, 6]]
    assert inputs.host_slots()["ids"].ctypes.data != slots["ids"].ctypes.data
