"""libmpcl through ctypes: finding the library, the C structs the package
uses (mirrors of include/mpcl/*.h, checked at import against the layout the
library reports through mpcl/abi.h), the function prototypes, the enum names
as the library gives them, and the one exception type."""

import ctypes
import ctypes.util
import math
import numbers
import os
import subprocess
import threading
from ctypes import (CFUNCTYPE, POINTER, Structure, c_bool, c_char, c_char_p, c_double, c_float,
                    c_int, c_size_t, c_uint, c_uint32, c_uint64, c_void_p)

# Array bounds of the headers; a wrong one shows as a size or offset
# mismatch at import (_check_layouts).
MAX_HIDDEN = 7
MAX_LAYERS = 64
MAX_INPUT_RANK = 3
LAYER_KIND_MAX = 24
MAX_RANK = 4
INFO_STR = 256
EXTENSIONS_STR = 16384
ST_MAX_DIMS = 8
MODEL_SPEC_MAX = 8192

# Enums whose names the library has no call for (include/mpcl/*.h order).
SLOT_MASTER, SLOT_M, SLOT_V = 0, 1, 2
LOSS_SCALING_PLAN, LOSS_SCALING_ON, LOSS_SCALING_OFF = 0, 1, 2
LOSS_SCALE_DYNAMIC, LOSS_SCALE_FIXED = 0, 1
ATTR_COUNT, ATTR_PAIR, ATTR_REAL, ATTR_BOOL, ATTR_ACTIVATION, ATTR_PADDING = range(6)


class MpclError(RuntimeError):
    """A libmpcl failure: `status` is the status name ("MPCL_ERR_FORMAT"),
    `message` the library's detail (the failing call, file, offset...)."""

    def __init__(self, status, message):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class LayerSpec(Structure):
    _fields_ = [("kind", c_char * LAYER_KIND_MAX), ("activation", c_int), ("units", c_size_t),
                ("filters", c_size_t), ("kernel_size", c_size_t * 2), ("pool_size", c_size_t * 2),
                ("strides", c_size_t * 2), ("padding", c_int), ("use_bias", c_bool),
                ("rate", c_double), ("momentum", c_double), ("epsilon", c_double),
                ("num_heads", c_size_t),
                ("vocabulary_size", c_size_t), ("sequence_length", c_size_t),
                ("embedding_dim", c_size_t), ("intermediate_dim", c_size_t)]


class OptimParams(Structure):
    _fields_ = [("kind", c_int), ("lr", c_float), ("beta1", c_float), ("beta2", c_float),
                ("eps", c_float), ("weight_decay", c_float), ("momentum", c_float),
                ("nesterov", c_int), ("clip_norm", c_float), ("decay_vectors", c_int)]


class LrSchedule(Structure):
    _fields_ = [("kind", c_int), ("warmup_steps", c_uint64), ("decay_steps", c_uint64),
                ("alpha", c_double), ("warmup_from", c_double)]


class LossScaleParams(Structure):
    _fields_ = [("mode", c_int), ("initial_scale", c_float), ("growth_interval", c_uint32),
                ("growth_factor", c_float), ("backoff_factor", c_float), ("min_scale", c_float),
                ("max_scale", c_float)]


class LossScaleState(Structure):
    _fields_ = [("scale", c_float), ("good_steps", c_uint32), ("skipped_steps", c_uint32),
                ("found_inf", c_int), ("last_found_inf", c_int)]


class ModelParams(Structure):
    _fields_ = [("inputs", c_size_t), ("input_shape", c_size_t * MAX_INPUT_RANK),
                ("input_rank", c_size_t), ("layers", LayerSpec * MAX_LAYERS),
                ("layer_count", c_size_t), ("hidden", c_size_t * MAX_HIDDEN),
                ("hidden_count", c_size_t), ("classes", c_size_t), ("activation", c_int), ("loss", c_int),
                ("policy", c_int), ("max_batch", c_size_t), ("seed", c_uint64),
                ("optim", OptimParams), ("lr_schedule", LrSchedule), ("loss_scaling", c_int),
                ("loss_scale", LossScaleParams)]


class CheckpointPosition(Structure):
    _fields_ = [("step", c_uint64), ("epoch", c_uint32), ("epoch_step", c_uint64),
                ("optimizer_step", c_uint32), ("seed", c_uint64), ("batch", c_size_t),
                ("train_samples", c_size_t), ("scaled", c_bool),
                ("loss_scale", LossScaleState), ("rng_counter", c_uint64),
                ("steps_per_epoch", c_uint64)]


class TrainReport(Structure):
    _fields_ = [("step", c_uint64), ("epoch", c_uint32), ("epoch_step", c_uint64),
                ("epoch_steps", c_uint64), ("loss", c_double), ("accuracy", c_double),
                ("loss_scale", c_float), ("skipped", c_uint32), ("grad_norm", c_double),
                ("samples_per_s", c_double), ("elapsed_s", c_double), ("epoch_end", c_bool),
                ("test_loss", c_double), ("test_accuracy", c_double), ("lr", c_double)]


REPORT_FN = CFUNCTYPE(None, c_void_p, POINTER(TrainReport))


class TrainParams(Structure):
    _fields_ = [("data_dir", c_char_p), ("train_limit", c_size_t), ("test_limit", c_size_t),
                ("epochs", c_uint32), ("batch", c_size_t), ("seed", c_uint64),
                ("report_every", c_uint32), ("model", ModelParams), ("on_report", REPORT_FN),
                ("user", c_void_p), ("stop", POINTER(c_int)), ("num_classes", c_int),
                ("keep_going_on_nan", c_bool), ("save_path", c_char_p),
                ("save_every_steps", c_uint64), ("save_every_epochs", c_uint32),
                ("resume_keeps_scale", c_bool), ("train_data", c_void_p),
                ("test_data", c_void_p), ("dist", c_void_p), ("replica_ctx", c_void_p),
                ("data_load", c_void_p), ("train_x", c_char_p), ("train_y", c_char_p),
                ("val_x", c_char_p), ("val_y", c_char_p), ("validation_split", c_double),
                ("shuffle", c_bool), ("tokens", c_void_p), ("steps", c_uint64),
                ("eval_every", c_uint64), ("eval_fraction", c_double),
                ("eval_batches", c_size_t), ("grad_accum", c_uint32)]


class Gpt2Config(Structure):
    """mpcl_gpt2_config (gpt2_folder.h)."""
    _fields_ = [("n_layer", c_size_t), ("n_head", c_size_t), ("n_embd", c_size_t),
                ("n_positions", c_size_t), ("vocab_size", c_size_t),
                ("layer_norm_epsilon", c_double)]


class Gpt2Weights(Structure):
    """mpcl_gpt2_weights (gpt2_folder.h); the package reads its config."""
    _fields_ = [("config", Gpt2Config), ("count", c_size_t), ("tensors", c_void_p),
                ("total", c_size_t), ("data", c_void_p)]


class SampleParams(Structure):
    """mpcl_sample_params (generate.h)."""
    _fields_ = [("temperature", c_double), ("top_k", c_size_t), ("seed", c_uint64)]


TOKEN_FN = CFUNCTYPE(c_int, c_void_p, c_size_t, ctypes.c_int32)


class ArrayView(Structure):
    """mpcl_array_view: an array in memory, C order (data.h)."""
    _fields_ = [("data", c_void_p), ("dtype", c_int), ("ndim", c_size_t),
                ("shape", POINTER(c_size_t))]


class NpyDataParams(Structure):
    _fields_ = [("float_targets", c_bool), ("num_classes", c_int)]


class TrainSummary(Structure):
    _fields_ = [("steps", c_uint64), ("epochs_done", c_uint32), ("stopped", c_bool),
                ("test_loss", c_double), ("test_accuracy", c_double),
                ("train_samples_per_s", c_double), ("seconds", c_double),
                ("skipped_steps", c_uint32), ("final_loss_scale", c_float),
                ("peak_device_bytes", c_size_t), ("diverged", c_bool),
                ("evaluated", c_bool), ("world_size", c_size_t),
                ("replica_samples_per_s", c_double), ("allreduce_bytes_per_step", c_size_t),
                ("allreduce_seconds", c_double), ("final_lr", c_double)]


class LossStats(Structure):
    _fields_ = [("loss", c_int), ("loss_sum", c_double), ("metric_sum", c_double),
                ("terms", c_uint64), ("samples", c_uint64), ("calls", c_uint64), ("bad", c_uint64),
                ("bad_call", ctypes.c_int64), ("bad_row", ctypes.c_int64),
                ("bad_col", ctypes.c_int64), ("bad_target", c_double)]


class LayerSummary(Structure):
    _fields_ = [("name", c_char * 32), ("out_rank", c_size_t),
                ("out_shape", c_size_t * MAX_INPUT_RANK), ("params", c_size_t),
                ("buffers", c_size_t)]


class Plan(Structure):
    _fields_ = [("policy", c_int), ("resolved", c_int), ("storage", c_int), ("gemm", c_int),
                ("loss_scaling", c_bool), ("usable", c_bool), ("reason", c_char * 256)]


class PlanOverrides(Structure):
    _fields_ = [("fp16", c_int), ("gemm_set", c_bool), ("gemm", c_int)]


class ContextParams(Structure):
    _fields_ = [("device", c_char_p), ("verify_fp16", c_bool)]


class FpConfig(Structure):
    _fields_ = [(n, c_bool) for n in (
        "present", "denorm", "inf_nan", "round_to_nearest", "round_to_zero", "round_to_inf",
        "fma", "correctly_rounded_divide_sqrt", "soft_float")]


class DeviceInfo(Structure):
    _fields_ = [("id", c_char * 24), ("platform_index", c_uint), ("device_index", c_uint)] + [
        (n, c_char * INFO_STR) for n in (
            "platform", "platform_version", "platform_vendor", "name", "vendor",
            "driver_version", "opencl_version", "opencl_c_version")] + [
        ("type", c_int), ("compute_units", c_uint32), ("max_clock_mhz", c_uint32),
        ("global_mem_bytes", c_uint64), ("local_mem_bytes", c_uint64),
        ("max_alloc_bytes", c_uint64), ("extensions", c_char * EXTENSIONS_STR),
        ("half_fp", FpConfig), ("single_fp", FpConfig), ("double_fp", FpConfig),
        ("preferred_vector_width_half", c_uint32), ("preferred_vector_width_float", c_uint32),
        ("native_vector_width_half", c_uint32), ("native_vector_width_float", c_uint32),
        ("max_subgroups", c_uint32), ("has_fp16_extension", c_bool), ("has_fp64", c_bool),
        ("intel_bfloat16_conversions", c_bool), ("integer_dot_product", c_bool),
        ("fp16_math", c_int), ("fp16_storage", c_int), ("fp16_detail", c_char * INFO_STR),
        ("bf16_storage", c_int), ("bf16_detail", c_char * INFO_STR),
        ("bf16_dot", c_int), ("bf16_dot_detail", c_char * INFO_STR),
        ("matrix_engine", c_int), ("matrix_engine_kind", c_char * 32),
        ("matrix_engine_detail", c_char * INFO_STR)]


class SkippedPlatform(Structure):
    _fields_ = [("platform_index", c_uint), ("name", c_char * INFO_STR),
                ("reason", c_char * INFO_STR)]


class ParamInfo(Structure):
    _fields_ = [("name", c_char * 48), ("rank", c_size_t), ("shape", c_size_t * MAX_RANK),
                ("offset", c_size_t), ("count", c_size_t)]


class StTensor(Structure):
    _fields_ = [("name", c_char_p), ("dtype", c_int), ("ndim", c_size_t),
                ("shape", c_size_t * ST_MAX_DIMS), ("data", c_void_p), ("bytes", c_size_t)]


P = c_void_p  # every opaque handle
_S = c_int  # mpcl_status

# name: (restype, argtypes). A restype of _S is checked by call().
_PROTOTYPES = {
    "mpcl_version": (c_char_p, []),
    "mpcl_abi_sizeof": (c_size_t, [c_char_p]),
    "mpcl_abi_offsetof": (c_size_t, [c_char_p, c_char_p]),
    "mpcl_loss_name": (c_char_p, [c_int]),
    "mpcl_loss_parse": (c_bool, [c_char_p, POINTER(c_int)]),
    "mpcl_loss_metric_name": (c_char_p, [c_int]),
    "mpcl_loss_sparse_targets": (c_bool, [c_int]),
    "mpcl_padding_name": (c_char_p, [c_int]),
    "mpcl_layer_kind_count": (c_size_t, []),
    "mpcl_layer_kind_name": (c_char_p, [c_size_t]),
    "mpcl_layer_kind_keras_name": (c_char_p, [c_char_p]),
    "mpcl_layer_kind_from_keras": (c_char_p, [c_char_p]),
    "mpcl_layer_kind_known": (c_bool, [c_char_p]),
    "mpcl_layer_attr_count": (c_size_t, [c_char_p]),
    "mpcl_layer_attr_name": (c_char_p, [c_char_p, c_size_t]),
    "mpcl_layer_attr_type": (c_int, [c_char_p, c_size_t]),
    "mpcl_layer_attr_default": (c_char_p, [c_char_p, c_size_t]),
    "mpcl_layer_spec_init": (_S, [P, c_char_p, POINTER(LayerSpec)]),
    "mpcl_layer_spec_set": (_S, [P, POINTER(LayerSpec), c_char_p, c_char_p]),
    "mpcl_layer_spec_get": (_S, [P, POINTER(LayerSpec), c_char_p, c_char_p, c_size_t]),
    "mpcl_layer_spec_check": (_S, [P, POINTER(LayerSpec)]),
    "mpcl_layer_spec_format": (_S, [P, POINTER(LayerSpec), c_char_p, c_size_t]),
    "mpcl_model_spec_format": (_S, [P, POINTER(ModelParams), c_char_p, c_size_t]),
    "mpcl_model_params_layers": (_S, [P, POINTER(ModelParams), POINTER(LayerSpec),
                                      POINTER(c_size_t)]),
    "mpcl_model_output_activation": (c_int, [POINTER(ModelParams)]),
    "mpcl_loss_output_activation": (c_int, [c_int]),
    "mpcl_model_params_input_shape": (None, [POINTER(ModelParams), POINTER(c_size_t),
                                             POINTER(c_size_t)]),
    "mpcl_model_summary": (_S, [P, POINTER(ModelParams), POINTER(LayerSummary),
                                POINTER(c_size_t)]),
    "mpcl_model_buffer_count": (c_size_t, [P]),
    "mpcl_model_buffer": (POINTER(ParamInfo), [P, c_size_t]),
    "mpcl_model_read_buffer": (_S, [P, c_size_t, c_void_p, c_size_t]),
    "mpcl_model_write_buffer": (_S, [P, c_size_t, c_void_p, c_size_t]),
    "mpcl_model_rng_counter": (c_uint64, [P]),
    "mpcl_model_set_rng_counter": (None, [P, c_uint64]),
    "mpcl_status_name": (c_char_p, [c_int]),
    "mpcl_status_str": (c_char_p, [c_int]),
    "mpcl_errmsg": (c_char_p, []),
    "mpcl_device_list_create": (_S, [c_uint, POINTER(P)]),
    "mpcl_device_list_destroy": (None, [P]),
    "mpcl_device_list_count": (c_size_t, [P]),
    "mpcl_device_list_get": (POINTER(DeviceInfo), [P, c_size_t]),
    "mpcl_device_list_verify_fp16": (_S, [P, c_size_t]),
    "mpcl_device_list_skipped_count": (c_size_t, [P]),
    "mpcl_device_list_skipped": (POINTER(SkippedPlatform), [P, c_size_t]),
    "mpcl_device_type_name": (c_char_p, [c_int]),
    "mpcl_fp16_math_name": (c_char_p, [c_int]),
    "mpcl_fp16_storage_name": (c_char_p, [c_int]),
    "mpcl_bf16_storage_name": (c_char_p, [c_int]),
    "mpcl_bf16_dot_name": (c_char_p, [c_int]),
    "mpcl_matrix_engine_name": (c_char_p, [c_int]),
    "mpcl_plan_overrides_from_env": (_S, [POINTER(PlanOverrides)]),
    "mpcl_plan_resolve": (Plan, [POINTER(DeviceInfo), c_int, POINTER(PlanOverrides)]),
    "mpcl_plan_fp16_math_usable": (c_bool, [POINTER(DeviceInfo), c_int]),
    "mpcl_plan_hgemm_usable": (c_bool, [POINTER(DeviceInfo), c_int]),
    "mpcl_policy_name": (c_char_p, [c_int]),
    "mpcl_policy_parse": (c_bool, [c_char_p, POINTER(c_int)]),
    "mpcl_dtype_name": (c_char_p, [c_int]),
    "mpcl_gemm_path_name": (c_char_p, [c_int]),
    "mpcl_activation_parse": (c_bool, [c_char_p, POINTER(c_int)]),
    "mpcl_activation_name": (c_char_p, [c_int]),
    "mpcl_optim_kind_count": (c_size_t, []),
    "mpcl_optim_kind_name": (c_char_p, [c_int]),
    "mpcl_optim_kind_keras_name": (c_char_p, [c_int]),
    "mpcl_optim_param_count": (c_size_t, [c_int]),
    "mpcl_optim_param_name": (c_char_p, [c_int, c_size_t]),
    "mpcl_optim_param_is_bool": (c_bool, [c_int, c_size_t]),
    "mpcl_optim_param_default": (c_char_p, [c_int, c_size_t]),
    "mpcl_optim_params_value": (c_double, [POINTER(OptimParams), c_size_t]),
    "mpcl_optim_params_set": (_S, [P, POINTER(OptimParams), c_char_p, c_char_p]),
    "mpcl_optim_kind_parse": (c_bool, [c_char_p, POINTER(c_int)]),
    "mpcl_optim_default_params": (OptimParams, [c_int]),
    "mpcl_optim_params_check": (_S, [P, POINTER(OptimParams)]),
    "mpcl_loss_scale_default_params": (LossScaleParams, []),
    "mpcl_lr_schedule_default": (LrSchedule, []),
    "mpcl_lr_schedule_check": (_S, [P, POINTER(LrSchedule)]),
    "mpcl_lr_schedule_kind_parse": (c_bool, [c_char_p, POINTER(c_int)]),
    "mpcl_lr_at": (c_float, [POINTER(LrSchedule), c_float, c_uint64]),
    "mpcl_context_default_params": (ContextParams, []),
    "mpcl_context_create": (_S, [POINTER(ContextParams), POINTER(P)]),
    "mpcl_context_destroy": (None, [P]),
    "mpcl_context_device": (POINTER(DeviceInfo), [P]),
    "mpcl_context_plan": (Plan, [P, c_int]),
    "mpcl_context_errmsg": (c_char_p, [P]),
    "mpcl_model_default_params": (ModelParams, []),
    "mpcl_model_create": (_S, [P, POINTER(ModelParams), POINTER(P)]),
    "mpcl_model_destroy": (None, [P]),
    "mpcl_model_plan": (POINTER(Plan), [P]),
    "mpcl_model_params_of": (POINTER(ModelParams), [P]),
    "mpcl_model_loss_scale": (P, [P]),
    "mpcl_model_eval_step": (_S, [P, P, P]),
    "mpcl_model_read_eval_stats": (_S, [P, POINTER(LossStats), c_bool]),
    "mpcl_model_read_logits": (_S, [P, c_void_p, c_size_t]),
    "mpcl_model_param_count": (c_size_t, [P]),
    "mpcl_model_param": (POINTER(ParamInfo), [P, c_size_t]),
    "mpcl_model_has_slot": (c_bool, [P, c_int]),
    "mpcl_model_read_param": (_S, [P, c_size_t, c_int, c_void_p, c_size_t]),
    "mpcl_model_write_param": (_S, [P, c_size_t, c_int, c_void_p, c_size_t]),
    "mpcl_model_read_step": (_S, [P, POINTER(c_uint32)]),
    "mpcl_model_write_step": (_S, [P, c_uint32]),
    "mpcl_loss_scale_read": (_S, [P, P, POINTER(LossScaleState)]),
    "mpcl_loss_scale_write_state": (_S, [P, P, POINTER(LossScaleState)]),
    "mpcl_tensor_create": (_S, [P, c_int, c_size_t, c_size_t, POINTER(P)]),
    "mpcl_tensor_destroy": (None, [P]),
    "mpcl_tensor_upload_f32": (_S, [P, c_void_p, c_size_t]),
    "mpcl_tensor_upload_i32": (_S, [P, c_void_p, c_size_t]),
    "mpcl_idx_load": (_S, [c_char_p, c_char_p, POINTER(P)]),
    "mpcl_dataset_from_memory": (_S, [c_void_p, c_void_p, c_size_t, c_size_t, c_size_t, c_int,
                                      POINTER(P)]),
    "mpcl_dataset_from_arrays": (_S, [POINTER(ArrayView), POINTER(ArrayView),
                                      POINTER(NpyDataParams), POINTER(P)]),
    "mpcl_dataset_split": (_S, [P, c_double, POINTER(P), POINTER(P)]),
    "mpcl_dataset_destroy": (None, [P]),
    "mpcl_dataset_count": (c_size_t, [P]),
    "mpcl_dataset_rows": (c_size_t, [P]),
    "mpcl_dataset_cols": (c_size_t, [P]),
    "mpcl_dataset_pixels": (c_void_p, [P]),
    "mpcl_dataset_labels": (c_void_p, [P]),
    "mpcl_dataset_features": (c_size_t, [P]),
    "mpcl_dataset_target_cols": (c_size_t, [P]),
    "mpcl_dataset_batch": (_S, [P, c_void_p, c_size_t, c_void_p, c_void_p]),
    "mpcl_dataset_batch_targets": (_S, [P, c_void_p, c_size_t, c_void_p]),
    "mpcl_npy_dtype_name": (c_char_p, [c_int]),
    "mpcl_train_default_params": (TrainParams, []),
    "mpcl_trainer_create": (_S, [P, POINTER(TrainParams), POINTER(P)]),
    "mpcl_trainer_destroy": (None, [P]),
    "mpcl_trainer_model": (P, [P]),
    "mpcl_trainer_fit": (_S, [P]),
    "mpcl_trainer_summary": (None, [P, POINTER(TrainSummary)]),
    "mpcl_trainer_save": (_S, [P, c_char_p]),
    "mpcl_checkpoint_read": (_S, [c_char_p, POINTER(P)]),
    "mpcl_checkpoint_destroy": (None, [P]),
    "mpcl_checkpoint_model_params": (POINTER(ModelParams), [P]),
    "mpcl_checkpoint_position_of": (POINTER(CheckpointPosition), [P]),
    "mpcl_checkpoint_apply": (_S, [P, P]),
    "mpcl_checkpoint_save_model": (_S, [P, P, c_char_p]),
    "mpcl_safetensors_read": (_S, [c_char_p, POINTER(P)]),
    "mpcl_safetensors_destroy": (None, [P]),
    "mpcl_safetensors_count": (c_size_t, [P]),
    "mpcl_safetensors_tensor": (POINTER(StTensor), [P, c_size_t]),
    "mpcl_safetensors_find": (POINTER(StTensor), [P, c_char_p]),
    "mpcl_safetensors_meta_get": (c_char_p, [P, c_char_p]),
    "mpcl_st_dtype_name": (c_char_p, [c_int]),
    "mpcl_run_record_create": (_S, [P, POINTER(P)]),
    "mpcl_run_record_destroy": (None, [P]),
    "mpcl_run_record_add": (_S, [P, POINTER(TrainReport)]),
    "mpcl_run_record_count": (c_size_t, [P]),
    "mpcl_run_record_write_svg": (_S, [P, c_char_p]),
    "mpcl_tokens_from_memory": (_S, [c_char_p, c_void_p, c_size_t, c_size_t, POINTER(P)]),
    "mpcl_tokens_destroy": (None, [P]),
    "mpcl_model_positions": (c_size_t, [P]),
    "mpcl_gpt2_config_check": (_S, [POINTER(Gpt2Config)]),
    "mpcl_gpt_model_params": (_S, [P, POINTER(Gpt2Config), c_size_t, POINTER(ModelParams)]),
    "mpcl_gpt_config_of": (_S, [POINTER(ModelParams), POINTER(Gpt2Config)]),
    "mpcl_gpt2_folder_read": (_S, [c_char_p, POINTER(POINTER(Gpt2Weights))]),
    "mpcl_gpt2_folder_write": (_S, [c_char_p, POINTER(Gpt2Weights)]),
    "mpcl_gpt2_weights_destroy": (None, [POINTER(Gpt2Weights)]),
    "mpcl_model_load_gpt2": (_S, [P, POINTER(Gpt2Weights)]),
    "mpcl_model_gpt2_weights": (_S, [P, POINTER(POINTER(Gpt2Weights))]),
    "mpcl_model_classes": (c_size_t, [P]),
    "mpcl_model_predict": (_S, [P, P]),
    "mpcl_model_read_position_logits": (_S, [P, c_size_t, c_size_t, c_void_p, c_size_t]),
    "mpcl_sample_default_params": (SampleParams, []),
    "mpcl_sample_check": (_S, [P, POINTER(SampleParams)]),
    "mpcl_generate": (_S, [P, c_void_p, c_size_t, c_size_t, POINTER(SampleParams), c_void_p,
                           TOKEN_FN, c_void_p]),
}


def _candidates():
    """Where libmpcl may be, in the order the README gives: MPCL_LIBRARY,
    pkg-config, the install prefix; then the build tree next to this source
    tree (running from a checkout) and the loader's own search."""
    env = os.environ.get("MPCL_LIBRARY")
    if env:
        yield env
        return
    try:
        libdir = subprocess.run(["pkg-config", "--variable=libdir", "mpcl"], capture_output=True,
                                text=True, timeout=10).stdout.strip()
        if libdir:
            yield os.path.join(libdir, "libmpcl.so.0")
    except (OSError, subprocess.SubprocessError):
        pass
    for prefix in ("/usr/local", "/usr"):
        for lib in ("lib", "lib64", "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu"):
            yield os.path.join(prefix, lib, "libmpcl.so.0")
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "..", "..", "build", "src", "libmpcl.so.0")
    found = ctypes.util.find_library("mpcl")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            if os.environ.get("MPCL_LIBRARY"):
                raise ImportError(f"MPCL_LIBRARY={path}: {e}") from e
            tried.append(f"{path} ({e})")
            continue
        for name, (res, args) in _PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype = res
            fn.argtypes = args
        return lib, path
    raise ImportError("libmpcl not found; set MPCL_LIBRARY to its path (tried: " +
                      ", ".join(tried) + ")")


lib, library_path = _load()

# Each mirror and the C struct it restates.
_MIRRORS = {
    LayerSpec: "mpcl_layer_spec", OptimParams: "mpcl_optim_params",
    LrSchedule: "mpcl_lr_schedule",
    LossScaleParams: "mpcl_loss_scale_params", LossScaleState: "mpcl_loss_scale_state",
    ModelParams: "mpcl_model_params", LayerSummary: "mpcl_layer_summary",
    ParamInfo: "mpcl_param_info", CheckpointPosition: "mpcl_checkpoint_position",
    TrainReport: "mpcl_train_report", TrainParams: "mpcl_train_params",
    TrainSummary: "mpcl_train_summary", LossStats: "mpcl_loss_stats", Plan: "mpcl_plan",
    PlanOverrides: "mpcl_plan_overrides", ContextParams: "mpcl_context_params",
    FpConfig: "mpcl_fp_config", DeviceInfo: "mpcl_device_info",
    SkippedPlatform: "mpcl_skipped_platform", StTensor: "mpcl_st_tensor",
    ArrayView: "mpcl_array_view", NpyDataParams: "mpcl_npy_data_params",
    Gpt2Config: "mpcl_gpt2_config", Gpt2Weights: "mpcl_gpt2_weights",
    SampleParams: "mpcl_sample_params",
}
_SIZE_MAX = ctypes.c_size_t(-1).value


def _check_layout(cls, c_name):
    """ImportError unless the ctypes Structure cls has the size of the C
    struct c_name and every field at the library's offset (the library is
    the truth: it was compiled from the headers). Names the struct and field."""
    size = lib.mpcl_abi_sizeof(c_name.encode())
    if size == _SIZE_MAX:
        raise ImportError(f"{c_name}: libmpcl ({library_path}) does not describe this struct")
    for field, _ in cls._fields_:
        have = getattr(cls, field).offset
        want = lib.mpcl_abi_offsetof(c_name.encode(), field.encode())
        if want == _SIZE_MAX:
            raise ImportError(f"{c_name}.{field}: no such field in libmpcl ({library_path})")
        if have != want:
            raise ImportError(f"{c_name}.{field}: offset {have} in Python, {want} in libmpcl")
    if ctypes.sizeof(cls) != size:
        raise ImportError(f"{c_name}: size {ctypes.sizeof(cls)} in Python, {size} in libmpcl")


for _cls, _c_name in _MIRRORS.items():
    _check_layout(_cls, _c_name)


def _names(fn):
    """An enum's names as the library gives them, in value order: fn(0),
    fn(1), ... until "unknown" or NULL."""
    out = []
    while True:
        name = fn(len(out))
        if name is None or name == b"unknown":
            return out
        out.append(name.decode())


ACTIVATIONS = _names(lib.mpcl_activation_name)
POLICIES = _names(lib.mpcl_policy_name)
DTYPES = _names(lib.mpcl_dtype_name)
LOSSES = _names(lib.mpcl_loss_name)
NPY_DTYPES = _names(lib.mpcl_npy_dtype_name)  # "u1", "f4", ...: NumPy's kind and size
OPTIMIZERS = _names(lib.mpcl_optim_kind_name)
PADDINGS = _names(lib.mpcl_padding_name)
OPTIM_SGD, OPTIM_ADAM, OPTIM_ADAMW = (OPTIMIZERS.index(k) for k in ("sgd", "adam", "adamw"))
LAYER_KINDS = [lib.mpcl_layer_kind_name(i).decode() for i in range(lib.mpcl_layer_kind_count())]


def text(b):
    return b.decode("utf-8", "replace") if b is not None else None


def activation_or_none(act):
    """An activation value's name, None for identity."""
    name = text(lib.mpcl_activation_name(act))
    return None if name == "identity" else name


def status_name(st):
    return text(lib.mpcl_status_name(st))


def call(fn, *args, ctx=None):
    """Calls a libmpcl function returning mpcl_status; raises MpclError with
    the status name and the detail (of the context when given, else of this
    thread) on failure."""
    st = fn(*args)
    if st != 0:
        msg = text(lib.mpcl_context_errmsg(ctx)) if ctx else text(lib.mpcl_errmsg())
        raise MpclError(status_name(st), msg or text(lib.mpcl_status_str(st)))


_ctx = None
_ctx_lock = threading.Lock()


def context():
    """The process's one context: the device $MPCL_DEVICE selects (else the
    library's default rule), created on first use and kept until exit."""
    global _ctx
    with _ctx_lock:
        if _ctx is None:
            p = lib.mpcl_context_default_params()
            h = P()
            call(lib.mpcl_context_create, ctypes.byref(p), ctypes.byref(h))
            _ctx = h.value
        return _ctx


def parse_enum(fn, name, what, choices):
    v = c_int()
    if not isinstance(name, str) or not fn(name.encode(), ctypes.byref(v)):
        raise ValueError(f"unknown {what} {name!r}; choose one of {', '.join(choices)}")
    return v.value


# The largest finite float32: the library's real-valued fields are float.
_FLOAT32_MAX = 3.4028234663852886e38


def check_int(name, value, lo, hi):
    """value as an int in [lo, hi], before it reaches a ctypes field (which
    would wrap it or truncate a float): TypeError for anything but an
    integer (a bool, a float, a string), ValueError outside the range; both
    name the argument."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, not {type(value).__name__} {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], not {value}")
    return int(value)


def check_real(name, value, lo=None, hi=None, lo_open=False, hi_open=False):
    """value as a float that stays finite as a float32, within lo/hi (open
    ends where said): TypeError for a non-number, ValueError otherwise, both
    naming the argument."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, not {type(value).__name__} {value!r}")
    v = float(value)
    low_ok = lo is None or (v > lo if lo_open else v >= lo)
    high_ok = hi is None or (v < hi if hi_open else v <= hi)
    if not (math.isfinite(v) and abs(v) <= _FLOAT32_MAX and low_ok and high_ok):
        span = (("(" if lo_open else "[") + ("-inf" if lo is None else f"{lo:g}") + ", " +
                ("inf" if hi is None else f"{hi:g}") + (")" if hi_open or hi is None else "]"))
        raise ValueError(f"{name} must be a finite number in {span}, not {value!r}")
    return v
