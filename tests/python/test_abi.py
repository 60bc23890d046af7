"""The ctypes mirrors are checked against the layout libmpcl reports
(mpcl/abi.h) at import, and a wrong mirror is named."""
import ctypes
from ctypes import Structure, c_char, c_int, c_size_t

import pytest

from mpcl import _lib

SIZE_MAX = ctypes.c_size_t(-1).value


def test_every_mirror_matches_the_library():
    for cls, c_name in _lib._MIRRORS.items():
        _lib._check_layout(cls, c_name)  # raises on any difference
        assert _lib.lib.mpcl_abi_sizeof(c_name.encode()) == ctypes.sizeof(cls)


def test_a_field_at_the_wrong_offset_is_named():
    class OldLayerSpec(Structure):  # the 0.1.0 layout: kind[16], units, activation
        _fields_ = [("kind", c_char * 16), ("units", c_size_t), ("activation", c_int)]

    have = OldLayerSpec.units.offset
    want = _lib.lib.mpcl_abi_offsetof(b"mpcl_layer_spec", b"units")
    assert have != want
    with pytest.raises(ImportError,
                       match=fr"^mpcl_layer_spec\.units: offset {have} in Python, {want} in libmpcl$"):
        _lib._check_layout(OldLayerSpec, "mpcl_layer_spec")


def test_a_short_struct_and_unknown_names_are_named():
    fields = [(n, t) for n, t in _lib.LossScaleState._fields_][:-1]
    Short = type("Short", (Structure,), {"_fields_": fields})
    with pytest.raises(ImportError, match=r"^mpcl_loss_scale_state: size \d+ in Python, "
                                          fr"{ctypes.sizeof(_lib.LossScaleState)} in libmpcl$"):
        _lib._check_layout(Short, "mpcl_loss_scale_state")
    Extra = type("Extra", (Structure,), {"_fields_": [("scale", ctypes.c_float),
                                                     ("no_such_field", c_int)]})
    with pytest.raises(ImportError, match=r"mpcl_loss_scale_state\.no_such_field: no such field"):
        _lib._check_layout(Extra, "mpcl_loss_scale_state")
    with pytest.raises(ImportError, match="mpcl_nothing: libmpcl .* does not describe"):
        _lib._check_layout(Extra, "mpcl_nothing")
    assert _lib.lib.mpcl_abi_sizeof(b"mpcl_nothing") == SIZE_MAX
    assert _lib.lib.mpcl_abi_offsetof(b"mpcl_model_params", b"nothing") == SIZE_MAX
    assert _lib.lib.mpcl_abi_offsetof(b"mpcl_model_params", None) == SIZE_MAX
    assert _lib.lib.mpcl_abi_sizeof(None) == SIZE_MAX


def test_enum_names_come_from_the_library():
    lib = _lib.lib
    for names, fn in ((_lib.ACTIVATIONS, lib.mpcl_activation_name),
                      (_lib.POLICIES, lib.mpcl_policy_name), (_lib.DTYPES, lib.mpcl_dtype_name),
                      (_lib.LOSSES, lib.mpcl_loss_name), (_lib.PADDINGS, lib.mpcl_padding_name),
                      (_lib.OPTIMIZERS, lib.mpcl_optim_kind_name)):
        assert names and all(fn(i).decode() == n for i, n in enumerate(names))
        assert fn(len(names)) in (None, b"unknown")
    assert "dense" in _lib.LAYER_KINDS and "flatten" in _lib.LAYER_KINDS
