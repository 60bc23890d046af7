/* The struct layout table of mpcl/abi.h: one row per public struct (its
 * size) and per field (its offset), from the compiler's sizeof and
 * offsetof. Every struct a binding mirrors is listed with every field. */
#include "mpcl/abi.h"

#include <stdint.h>
#include <string.h>

#include "mpcl/checkpoint.h"
#include "mpcl/context.h"
#include "mpcl/data.h"
#include "mpcl/device.h"
#include "mpcl/generate.h"
#include "mpcl/gpt2_folder.h"
#include "mpcl/layer_spec.h"
#include "mpcl/loss_scale.h"
#include "mpcl/losses.h"
#include "mpcl/lr_schedule.h"
#include "mpcl/model.h"
#include "mpcl/ops.h"
#include "mpcl/optim.h"
#include "mpcl/plan.h"
#include "mpcl/safetensors.h"
#include "mpcl/train.h"

typedef struct abi_row {
    const char *type;
    const char *field; /* NULL: the row of the struct's size */
    size_t value;
} abi_row;

#define SIZE(T) \
    { #T, NULL, sizeof(T) }
#define FIELD(T, f) \
    { #T, #f, offsetof(T, f) }

static const abi_row rows[] = {
    SIZE(mpcl_layer_spec),
    FIELD(mpcl_layer_spec, kind),
    FIELD(mpcl_layer_spec, activation),
    FIELD(mpcl_layer_spec, units),
    FIELD(mpcl_layer_spec, filters),
    FIELD(mpcl_layer_spec, kernel_size),
    FIELD(mpcl_layer_spec, pool_size),
    FIELD(mpcl_layer_spec, strides),
    FIELD(mpcl_layer_spec, padding),
    FIELD(mpcl_layer_spec, use_bias),
    FIELD(mpcl_layer_spec, rate),
    FIELD(mpcl_layer_spec, momentum),
    FIELD(mpcl_layer_spec, epsilon),
    FIELD(mpcl_layer_spec, num_heads),
    FIELD(mpcl_layer_spec, vocabulary_size),
    FIELD(mpcl_layer_spec, sequence_length),
    FIELD(mpcl_layer_spec, embedding_dim),
    FIELD(mpcl_layer_spec, intermediate_dim),

    SIZE(mpcl_optim_params),
    FIELD(mpcl_optim_params, kind),
    FIELD(mpcl_optim_params, lr),
    FIELD(mpcl_optim_params, beta1),
    FIELD(mpcl_optim_params, beta2),
    FIELD(mpcl_optim_params, eps),
    FIELD(mpcl_optim_params, weight_decay),
    FIELD(mpcl_optim_params, momentum),
    FIELD(mpcl_optim_params, nesterov),
    FIELD(mpcl_optim_params, clip_norm),
    FIELD(mpcl_optim_params, decay_vectors),

    SIZE(mpcl_lr_schedule),
    FIELD(mpcl_lr_schedule, kind),
    FIELD(mpcl_lr_schedule, warmup_steps),
    FIELD(mpcl_lr_schedule, decay_steps),
    FIELD(mpcl_lr_schedule, alpha),
    FIELD(mpcl_lr_schedule, warmup_from),

    SIZE(mpcl_loss_scale_params),
    FIELD(mpcl_loss_scale_params, mode),
    FIELD(mpcl_loss_scale_params, initial_scale),
    FIELD(mpcl_loss_scale_params, growth_interval),
    FIELD(mpcl_loss_scale_params, growth_factor),
    FIELD(mpcl_loss_scale_params, backoff_factor),
    FIELD(mpcl_loss_scale_params, min_scale),
    FIELD(mpcl_loss_scale_params, max_scale),

    SIZE(mpcl_loss_scale_state),
    FIELD(mpcl_loss_scale_state, scale),
    FIELD(mpcl_loss_scale_state, good_steps),
    FIELD(mpcl_loss_scale_state, skipped_steps),
    FIELD(mpcl_loss_scale_state, found_inf),
    FIELD(mpcl_loss_scale_state, last_found_inf),

    SIZE(mpcl_model_params),
    FIELD(mpcl_model_params, inputs),
    FIELD(mpcl_model_params, input_shape),
    FIELD(mpcl_model_params, input_rank),
    FIELD(mpcl_model_params, layers),
    FIELD(mpcl_model_params, layer_count),
    FIELD(mpcl_model_params, hidden),
    FIELD(mpcl_model_params, hidden_count),
    FIELD(mpcl_model_params, classes),
    FIELD(mpcl_model_params, activation),
    FIELD(mpcl_model_params, loss),
    FIELD(mpcl_model_params, policy),
    FIELD(mpcl_model_params, max_batch),
    FIELD(mpcl_model_params, seed),
    FIELD(mpcl_model_params, optim),
    FIELD(mpcl_model_params, lr_schedule),
    FIELD(mpcl_model_params, loss_scaling),
    FIELD(mpcl_model_params, loss_scale),

    SIZE(mpcl_layer_summary),
    FIELD(mpcl_layer_summary, name),
    FIELD(mpcl_layer_summary, out_rank),
    FIELD(mpcl_layer_summary, out_shape),
    FIELD(mpcl_layer_summary, params),
    FIELD(mpcl_layer_summary, buffers),

    SIZE(mpcl_param_info),
    FIELD(mpcl_param_info, name),
    FIELD(mpcl_param_info, rank),
    FIELD(mpcl_param_info, shape),
    FIELD(mpcl_param_info, offset),
    FIELD(mpcl_param_info, count),

    SIZE(mpcl_checkpoint_position),
    FIELD(mpcl_checkpoint_position, step),
    FIELD(mpcl_checkpoint_position, epoch),
    FIELD(mpcl_checkpoint_position, epoch_step),
    FIELD(mpcl_checkpoint_position, optimizer_step),
    FIELD(mpcl_checkpoint_position, seed),
    FIELD(mpcl_checkpoint_position, batch),
    FIELD(mpcl_checkpoint_position, train_samples),
    FIELD(mpcl_checkpoint_position, scaled),
    FIELD(mpcl_checkpoint_position, loss_scale),
    FIELD(mpcl_checkpoint_position, rng_counter),
    FIELD(mpcl_checkpoint_position, steps_per_epoch),

    SIZE(mpcl_train_report),
    FIELD(mpcl_train_report, step),
    FIELD(mpcl_train_report, epoch),
    FIELD(mpcl_train_report, epoch_step),
    FIELD(mpcl_train_report, epoch_steps),
    FIELD(mpcl_train_report, loss),
    FIELD(mpcl_train_report, accuracy),
    FIELD(mpcl_train_report, loss_scale),
    FIELD(mpcl_train_report, skipped),
    FIELD(mpcl_train_report, grad_norm),
    FIELD(mpcl_train_report, samples_per_s),
    FIELD(mpcl_train_report, elapsed_s),
    FIELD(mpcl_train_report, epoch_end),
    FIELD(mpcl_train_report, test_loss),
    FIELD(mpcl_train_report, test_accuracy),
    FIELD(mpcl_train_report, lr),

    SIZE(mpcl_train_params),
    FIELD(mpcl_train_params, data_dir),
    FIELD(mpcl_train_params, train_limit),
    FIELD(mpcl_train_params, test_limit),
    FIELD(mpcl_train_params, epochs),
    FIELD(mpcl_train_params, batch),
    FIELD(mpcl_train_params, seed),
    FIELD(mpcl_train_params, report_every),
    FIELD(mpcl_train_params, model),
    FIELD(mpcl_train_params, on_report),
    FIELD(mpcl_train_params, user),
    FIELD(mpcl_train_params, stop),
    FIELD(mpcl_train_params, num_classes),
    FIELD(mpcl_train_params, keep_going_on_nan),
    FIELD(mpcl_train_params, save_path),
    FIELD(mpcl_train_params, save_every_steps),
    FIELD(mpcl_train_params, save_every_epochs),
    FIELD(mpcl_train_params, resume_keeps_scale),
    FIELD(mpcl_train_params, train_data),
    FIELD(mpcl_train_params, test_data),
    FIELD(mpcl_train_params, dist),
    FIELD(mpcl_train_params, replica_ctx),
    FIELD(mpcl_train_params, data_load),
    FIELD(mpcl_train_params, train_x),
    FIELD(mpcl_train_params, train_y),
    FIELD(mpcl_train_params, val_x),
    FIELD(mpcl_train_params, val_y),
    FIELD(mpcl_train_params, validation_split),
    FIELD(mpcl_train_params, shuffle),
    FIELD(mpcl_train_params, tokens),
    FIELD(mpcl_train_params, steps),
    FIELD(mpcl_train_params, eval_every),
    FIELD(mpcl_train_params, eval_fraction),
    FIELD(mpcl_train_params, eval_batches),
    FIELD(mpcl_train_params, grad_accum),

    SIZE(mpcl_npy_data_params),
    FIELD(mpcl_npy_data_params, float_targets),
    FIELD(mpcl_npy_data_params, num_classes),

    SIZE(mpcl_array_view),
    FIELD(mpcl_array_view, data),
    FIELD(mpcl_array_view, dtype),
    FIELD(mpcl_array_view, ndim),
    FIELD(mpcl_array_view, shape),

    SIZE(mpcl_gpt2_config),
    FIELD(mpcl_gpt2_config, n_layer),
    FIELD(mpcl_gpt2_config, n_head),
    FIELD(mpcl_gpt2_config, n_embd),
    FIELD(mpcl_gpt2_config, n_positions),
    FIELD(mpcl_gpt2_config, vocab_size),
    FIELD(mpcl_gpt2_config, layer_norm_epsilon),

    SIZE(mpcl_gpt2_weights),
    FIELD(mpcl_gpt2_weights, config),
    FIELD(mpcl_gpt2_weights, count),
    FIELD(mpcl_gpt2_weights, tensors),
    FIELD(mpcl_gpt2_weights, total),
    FIELD(mpcl_gpt2_weights, data),

    SIZE(mpcl_sample_params),
    FIELD(mpcl_sample_params, temperature),
    FIELD(mpcl_sample_params, top_k),
    FIELD(mpcl_sample_params, seed),

    SIZE(mpcl_train_summary),
    FIELD(mpcl_train_summary, steps),
    FIELD(mpcl_train_summary, epochs_done),
    FIELD(mpcl_train_summary, stopped),
    FIELD(mpcl_train_summary, test_loss),
    FIELD(mpcl_train_summary, test_accuracy),
    FIELD(mpcl_train_summary, train_samples_per_s),
    FIELD(mpcl_train_summary, seconds),
    FIELD(mpcl_train_summary, skipped_steps),
    FIELD(mpcl_train_summary, final_loss_scale),
    FIELD(mpcl_train_summary, peak_device_bytes),
    FIELD(mpcl_train_summary, diverged),
    FIELD(mpcl_train_summary, evaluated),
    FIELD(mpcl_train_summary, world_size),
    FIELD(mpcl_train_summary, replica_samples_per_s),
    FIELD(mpcl_train_summary, allreduce_bytes_per_step),
    FIELD(mpcl_train_summary, allreduce_seconds),
    FIELD(mpcl_train_summary, final_lr),

    SIZE(mpcl_loss_stats),
    FIELD(mpcl_loss_stats, loss),
    FIELD(mpcl_loss_stats, loss_sum),
    FIELD(mpcl_loss_stats, metric_sum),
    FIELD(mpcl_loss_stats, terms),
    FIELD(mpcl_loss_stats, samples),
    FIELD(mpcl_loss_stats, calls),
    FIELD(mpcl_loss_stats, bad),
    FIELD(mpcl_loss_stats, bad_call),
    FIELD(mpcl_loss_stats, bad_row),
    FIELD(mpcl_loss_stats, bad_col),
    FIELD(mpcl_loss_stats, bad_target),

    SIZE(mpcl_plan),
    FIELD(mpcl_plan, policy),
    FIELD(mpcl_plan, resolved),
    FIELD(mpcl_plan, storage),
    FIELD(mpcl_plan, gemm),
    FIELD(mpcl_plan, loss_scaling),
    FIELD(mpcl_plan, usable),
    FIELD(mpcl_plan, reason),

    SIZE(mpcl_plan_overrides),
    FIELD(mpcl_plan_overrides, fp16),
    FIELD(mpcl_plan_overrides, gemm_set),
    FIELD(mpcl_plan_overrides, gemm),

    SIZE(mpcl_context_params),
    FIELD(mpcl_context_params, device),
    FIELD(mpcl_context_params, verify_fp16),

    SIZE(mpcl_fp_config),
    FIELD(mpcl_fp_config, present),
    FIELD(mpcl_fp_config, denorm),
    FIELD(mpcl_fp_config, inf_nan),
    FIELD(mpcl_fp_config, round_to_nearest),
    FIELD(mpcl_fp_config, round_to_zero),
    FIELD(mpcl_fp_config, round_to_inf),
    FIELD(mpcl_fp_config, fma),
    FIELD(mpcl_fp_config, correctly_rounded_divide_sqrt),
    FIELD(mpcl_fp_config, soft_float),

    SIZE(mpcl_device_info),
    FIELD(mpcl_device_info, id),
    FIELD(mpcl_device_info, platform_index),
    FIELD(mpcl_device_info, device_index),
    FIELD(mpcl_device_info, platform),
    FIELD(mpcl_device_info, platform_version),
    FIELD(mpcl_device_info, platform_vendor),
    FIELD(mpcl_device_info, name),
    FIELD(mpcl_device_info, vendor),
    FIELD(mpcl_device_info, driver_version),
    FIELD(mpcl_device_info, opencl_version),
    FIELD(mpcl_device_info, opencl_c_version),
    FIELD(mpcl_device_info, type),
    FIELD(mpcl_device_info, compute_units),
    FIELD(mpcl_device_info, max_clock_mhz),
    FIELD(mpcl_device_info, global_mem_bytes),
    FIELD(mpcl_device_info, local_mem_bytes),
    FIELD(mpcl_device_info, max_alloc_bytes),
    FIELD(mpcl_device_info, extensions),
    FIELD(mpcl_device_info, half_fp),
    FIELD(mpcl_device_info, single_fp),
    FIELD(mpcl_device_info, double_fp),
    FIELD(mpcl_device_info, preferred_vector_width_half),
    FIELD(mpcl_device_info, preferred_vector_width_float),
    FIELD(mpcl_device_info, native_vector_width_half),
    FIELD(mpcl_device_info, native_vector_width_float),
    FIELD(mpcl_device_info, max_subgroups),
    FIELD(mpcl_device_info, has_fp16_extension),
    FIELD(mpcl_device_info, has_fp64),
    FIELD(mpcl_device_info, intel_bfloat16_conversions),
    FIELD(mpcl_device_info, integer_dot_product),
    FIELD(mpcl_device_info, fp16_math),
    FIELD(mpcl_device_info, fp16_storage),
    FIELD(mpcl_device_info, fp16_detail),
    FIELD(mpcl_device_info, bf16_storage),
    FIELD(mpcl_device_info, bf16_detail),
    FIELD(mpcl_device_info, bf16_dot),
    FIELD(mpcl_device_info, bf16_dot_detail),
    FIELD(mpcl_device_info, matrix_engine),
    FIELD(mpcl_device_info, matrix_engine_kind),
    FIELD(mpcl_device_info, matrix_engine_detail),

    SIZE(mpcl_skipped_platform),
    FIELD(mpcl_skipped_platform, platform_index),
    FIELD(mpcl_skipped_platform, name),
    FIELD(mpcl_skipped_platform, reason),

    SIZE(mpcl_st_tensor),
    FIELD(mpcl_st_tensor, name),
    FIELD(mpcl_st_tensor, dtype),
    FIELD(mpcl_st_tensor, ndim),
    FIELD(mpcl_st_tensor, shape),
    FIELD(mpcl_st_tensor, data),
    FIELD(mpcl_st_tensor, bytes),
};

static size_t lookup(const char *type, const char *field) {
    if (!type) return SIZE_MAX;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const abi_row *r = &rows[i];
        if (strcmp(r->type, type) != 0) continue;
        if (!field ? !r->field : r->field && strcmp(r->field, field) == 0) return r->value;
    }
    return SIZE_MAX;
}

size_t mpcl_abi_sizeof(const char *type) {
    return lookup(type, NULL);
}

size_t mpcl_abi_offsetof(const char *type, const char *field) {
    return field ? lookup(type, field) : SIZE_MAX;
}
