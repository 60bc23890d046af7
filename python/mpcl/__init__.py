"""mpcl: the Keras flow on libmpcl (mixed-precision training on OpenCL).

    import mpcl
    mpcl.mixed_precision.set_global_policy("mixed_float16")
    model = mpcl.Sequential([mpcl.layers.Dense(128, activation="relu", input_shape=(784,)),
                             mpcl.layers.Dense(10)])
    model.compile(optimizer=mpcl.optimizers.Adam(1e-3),
                  loss=mpcl.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    history = model.fit(x, y, epochs=10, batch_size=128, validation_data=(x_test, y_test))

Pure Python over libmpcl through ctypes; the library is found through
MPCL_LIBRARY, then pkg-config, then the install prefix, then a build tree
next to this source tree."""

import ctypes

from . import callbacks, datasets, layers, losses, mixed_precision, models, optimizers
from ._lib import MpclError, library_path
from ._lib import lib as _clib
from ._lib import text as _text
from .model import History, Sequential

__all__ = ["MpclError", "Sequential", "History", "devices", "layers", "losses", "optimizers",
           "mixed_precision", "models", "datasets", "callbacks", "library_path", "__version__"]

__version__ = _text(_clib.mpcl_version())


def _fp(c):
    if not c.present:
        return None
    return {k: bool(getattr(c, k)) for k, _ in c._fields_[1:]}


def _verdict(d, overrides):
    # As mpcl-probe words it (src/tools/mpcl-probe.c).
    if d.fp16_storage != 0:
        return "float32 only: f16 storage failed verification"
    if _clib.mpcl_plan_hgemm_usable(ctypes.byref(d), overrides.fp16):
        return "full mixed precision: f16 storage and f16 GEMM (HGEMM), f32 master weights"
    if _clib.mpcl_plan_fp16_math_usable(ctypes.byref(d), overrides.fp16):
        return ("mixed_float16 runs as f16 storage with f32 math: MPCL_FP16=force cannot bring "
                "HGEMM here (CLBlast needs cl_khr_fp16 declared); auto measures which is faster")
    return ("mixed_float16 runs as f16 storage with f32 math (halves memory traffic); "
            "auto measures which is faster")


def devices():
    """Every OpenCL device, as mpcl-probe --json reports it (its "devices"
    list: capabilities, fp16/bf16 verified by running kernels, the plan of
    every policy, the verdict), one dict per device."""
    from . import _lib
    lst = _lib.P()
    _lib.call(_clib.mpcl_device_list_create, 0, ctypes.byref(lst))
    try:
        o = _lib.PlanOverrides()
        _lib.call(_clib.mpcl_plan_overrides_from_env, ctypes.byref(o))
        out = []
        for i in range(_clib.mpcl_device_list_count(lst)):
            _clib.mpcl_device_list_verify_fp16(lst, i)  # as the probe: a failure shows in the info
            d = _clib.mpcl_device_list_get(lst, i).contents
            s = {k: _text(getattr(d, k)) for k in (
                "id", "platform", "platform_version", "name", "vendor", "driver_version",
                "opencl_version", "opencl_c_version")}
            s["type"] = _text(_clib.mpcl_device_type_name(d.type))
            for k in ("compute_units", "max_clock_mhz", "global_mem_bytes", "local_mem_bytes",
                      "max_alloc_bytes"):
                s[k] = int(getattr(d, k))
            s["extensions"] = _text(d.extensions).split()
            s["fp16_math"] = _text(_clib.mpcl_fp16_math_name(d.fp16_math))
            s["fp16_storage"] = _text(_clib.mpcl_fp16_storage_name(d.fp16_storage))
            s["fp16_detail"] = _text(d.fp16_detail)
            s["bf16_storage"] = _text(_clib.mpcl_bf16_storage_name(d.bf16_storage))
            s["bf16_detail"] = _text(d.bf16_detail)
            s["bf16_dot"] = _text(_clib.mpcl_bf16_dot_name(d.bf16_dot))
            s["bf16_dot_detail"] = _text(d.bf16_dot_detail)
            s["matrix_engine"] = _text(_clib.mpcl_matrix_engine_name(d.matrix_engine))
            s["matrix_engine_kind"] = _text(d.matrix_engine_kind)
            s["matrix_engine_detail"] = _text(d.matrix_engine_detail)
            s["fp64"] = bool(d.has_fp64)
            s["fp_config"] = {"half": _fp(d.half_fp), "single": _fp(d.single_fp),
                              "double": _fp(d.double_fp)}
            s["vector_width"] = {"preferred_half": d.preferred_vector_width_half,
                                 "preferred_float": d.preferred_vector_width_float,
                                 "native_half": d.native_vector_width_half,
                                 "native_float": d.native_vector_width_float}
            s["max_subgroups"] = int(d.max_subgroups)
            s["intel_bfloat16_conversions"] = bool(d.intel_bfloat16_conversions)
            s["integer_dot_product"] = bool(d.integer_dot_product)
            s["plans"] = {}
            for pol in range(len(_lib.POLICIES)):
                p = _clib.mpcl_plan_resolve(ctypes.byref(d), pol, ctypes.byref(o))
                s["plans"][_text(_clib.mpcl_policy_name(p.policy))] = {
                    "resolved": _text(_clib.mpcl_policy_name(p.resolved)),
                    "storage": _text(_clib.mpcl_dtype_name(p.storage)),
                    "gemm": _text(_clib.mpcl_gemm_path_name(p.gemm)),
                    "loss_scaling": bool(p.loss_scaling), "usable": bool(p.usable),
                    "reason": _text(p.reason)}
            s["verdict"] = _verdict(d, o)
            out.append(s)
        return out
    finally:
        _clib.mpcl_device_list_destroy(lst)
