/* mpcl-train's flag parsing. Every number goes through the library's one
 * strict parser (mpcl/number.h): plain decimal, whole, no overflow, no NaN or
 * infinity, so a typo is an error naming the flag rather than a silently
 * different run. */
#define _GNU_SOURCE /* O_TMPFILE */
#include "train_args.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mpcl/files.h"
#include "mpcl/number.h"
#include "mpcl/train.h"

void train_args_defaults(train_args *a) {
    memset(a, 0, sizeof *a);
    a->epochs = 10;
    a->batch = 128;
    a->hidden[0] = 128;
    a->hidden_count = 1;
    a->activation = MPCL_ACT_RELU;
    a->loss = MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    a->optimizer = MPCL_OPTIM_ADAM;
    a->schedule = mpcl_lr_schedule_default();
    a->policy = MPCL_POLICY_AUTO;
    a->loss_scale = MPCL_LOSS_SCALE_DYNAMIC;
    a->initial_scale = 32768.0f;
    a->seed = 42;
    a->report_every = 50;
    a->dist_timeout = (uint32_t)MPCL_DIST_DEFAULT_TIMEOUT;
    a->gpt_layers = 4;
    a->gpt_heads = 4;
    a->gpt_embd = 128;
    a->gpt_context = 64;
    a->steps = 3000;
    a->eval_every = 250;
    a->eval_batches = 20;
    a->grad_accum = 1;
}

static bool fail(char *err, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return false;
}

/* A whole number in [min, max], read by the library's one strict parser:
 * digits only, so "+1", " 5", "0x10" and "1e3" are refused, not reinterpreted. */
static bool parse_uint(const char *flag, const char *s, uint64_t min, uint64_t max, uint64_t *out,
                       char *err, size_t size) {
    uint64_t v = 0;
    mpcl_number_error e = mpcl_parse_uint(s, max, &v);
    if (e == MPCL_NUMBER_RANGE)
        return fail(err, size, "%s: '%s' is too large (at most %llu)", flag, s,
                    (unsigned long long)max);
    if (e == MPCL_NUMBER_NEGATIVE && min > 0)
        return fail(err, size, "%s: '%s' is negative; it must be at least %llu", flag, s,
                    (unsigned long long)min);
    if (e != MPCL_NUMBER_OK)
        return fail(err, size, "%s: '%s' %s (expected a whole number)", flag, s,
                    mpcl_number_error_text(e));
    if (v < min)
        return fail(err, size, "%s: '%s' is too small (at least %llu)", flag, s,
                    (unsigned long long)min);
    *out = v;
    return true;
}

/* Whether decimal text names a value other than zero (a non-zero digit
 * before any exponent), whatever it rounds to. */
static bool names_nonzero(const char *s) {
    for (; *s && *s != 'e' && *s != 'E'; s++)
        if (*s >= '1' && *s <= '9') return true;
    return false;
}

/* A plain decimal number (no '+', hex, blanks, "inf" or "nan") that fits a
 * float, > 0 (or >= 0 when zero_ok). */
static bool parse_positive_float(const char *flag, const char *s, bool zero_ok, float *out,
                                 char *err, size_t size) {
    double v = 0;
    mpcl_number_error e = mpcl_parse_real(s, &v);
    if (e == MPCL_NUMBER_RANGE || (e == MPCL_NUMBER_OK && fabs(v) > (double)FLT_MAX))
        return fail(err, size, "%s: '%s' is too large for single precision", flag, s);
    if (e != MPCL_NUMBER_OK)
        return fail(err, size, "%s: '%s' %s (expected a number)", flag, s,
                    mpcl_number_error_text(e));
    bool nonzero = names_nonzero(s);
    if (*s == '-' || (!zero_ok && !nonzero))
        return fail(err, size, "%s: '%s' must be %s", flag, s, zero_ok ? ">= 0" : "> 0");
    if (nonzero && (float)v == 0.0f)
        return fail(err, size, "%s: '%s' is too small for single precision", flag, s);
    *out = (float)v;
    return true;
}

/* A fraction strictly between 0 and 1. */
static bool parse_fraction(const char *flag, const char *s, double *out, char *err, size_t size) {
    mpcl_number_error e = mpcl_parse_real(s, out);
    if (e != MPCL_NUMBER_OK)
        return fail(err, size, "%s: '%s' %s (expected a fraction between 0 and 1)", flag, s,
                    mpcl_number_error_text(e));
    if (!(*out > 0.0 && *out < 1.0))
        return fail(err, size,
                    "%s: '%s' must be between 0 and 1, both excluded (the fraction of the "
                    "training rows kept for validation)",
                    flag, s);
    return true;
}

static bool parse_hidden(train_args *a, const char *flag, const char *s, char *err, size_t size) {
    if (!*s) return fail(err, size, "%s: empty value (expected widths like 128,64)", flag);
    size_t count = 0;
    size_t widths[MPCL_MAX_HIDDEN];
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (n == 0) return fail(err, size, "%s: '%s' has an empty width", flag, s);
        if (n >= sizeof item) return fail(err, size, "%s: '%s': a width is too long", flag, s);
        if (count == MPCL_MAX_HIDDEN)
            return fail(err, size, "%s: '%s' has more than %d hidden layers", flag, s,
                        MPCL_MAX_HIDDEN);
        memcpy(item, p, n);
        item[n] = '\0';
        uint64_t v;
        char sub[256];
        if (!parse_uint(flag, item, 1, TRAIN_ARGS_MAX_WIDTH, &v, sub, sizeof sub))
            return fail(err, size, "%s (in '%s')", sub, s);
        widths[count++] = (size_t)v;
        if (!comma) break;
        p = comma + 1;
    }
    memcpy(a->hidden, widths, count * sizeof widths[0]);
    a->hidden_count = count;
    return true;
}

/* The schedule's steps: 2^53 at most, the largest count lr_schedule.h takes. */
#define SCHEDULE_MAX_STEPS ((uint64_t)1 << 53)

/* The lr schedule's flags (lr_schedule.h); false when f is none of them. */
static bool apply_schedule(train_args *a, const char *f, const char *v, bool *ok, char *err,
                           size_t size) {
    mpcl_lr_schedule *s = &a->schedule;
    *ok = true;
    if (strcmp(f, "--lr-schedule") == 0) {
        if (!mpcl_lr_schedule_kind_parse(v, &s->kind))
            *ok = fail(err, size, "%s: unknown schedule '%s' (%s)", f, v,
                       mpcl_lr_schedule_kind_names());
    } else if (strcmp(f, "--warmup-steps") == 0) {
        *ok = parse_uint(f, v, 0, SCHEDULE_MAX_STEPS, &s->warmup_steps, err, size);
    } else if (strcmp(f, "--decay-steps") == 0) {
        *ok = parse_uint(f, v, 1, SCHEDULE_MAX_STEPS, &s->decay_steps, err, size);
        a->decay_flag = f;
        a->decay_value = v;
    } else if (strcmp(f, "--lr-min-ratio") == 0) {
        mpcl_number_error e = mpcl_parse_real(v, &s->alpha);
        if (e != MPCL_NUMBER_OK)
            *ok = fail(err, size, "%s: '%s' %s (expected a fraction in [0, 1])", f, v,
                       mpcl_number_error_text(e));
        else if (!(s->alpha >= 0.0 && s->alpha <= 1.0))
            *ok = fail(err, size,
                       "%s: '%s' must be in [0, 1] (the final lr as a fraction of --lr, Keras' "
                       "alpha)",
                       f, v);
        a->decay_flag = f;
        a->decay_value = v;
    } else {
        return false;
    }
    return true;
}

typedef enum flag_kind { FLAG_BOOL, FLAG_VALUE } flag_kind;

static const struct {
    const char *name;
    flag_kind kind;
} flags[] = {
    {"--data", FLAG_VALUE},
    {"--train-x", FLAG_VALUE},
    {"--train-y", FLAG_VALUE},
    {"--val-x", FLAG_VALUE},
    {"--val-y", FLAG_VALUE},
    {"--validation-split", FLAG_VALUE},
    {"--loss", FLAG_VALUE},
    {"--epochs", FLAG_VALUE},
    {"--batch", FLAG_VALUE},
    {"--lr", FLAG_VALUE},
    {"--hidden", FLAG_VALUE},
    {"--activation", FLAG_VALUE},
    {"--model", FLAG_VALUE},
    {"--optimizer", FLAG_VALUE},
    {"--precision", FLAG_VALUE},
    {"--loss-scale", FLAG_VALUE},
    {"--initial-loss-scale", FLAG_VALUE},
    {"--device", FLAG_VALUE},
    {"--seed", FLAG_VALUE},
    {"--save", FLAG_VALUE},
    {"--resume", FLAG_VALUE},
    {"--metrics", FLAG_VALUE},
    {"--report-every", FLAG_VALUE},
    {"--train-limit", FLAG_VALUE},
    {"--test-limit", FLAG_VALUE},
    {"--clip-norm", FLAG_VALUE},
    {"--lr-schedule", FLAG_VALUE},
    {"--warmup-steps", FLAG_VALUE},
    {"--decay-steps", FLAG_VALUE},
    {"--lr-min-ratio", FLAG_VALUE},
    {"--momentum", FLAG_VALUE},
    {"--nesterov", FLAG_BOOL},
    {"--opt", FLAG_VALUE},
    {"--json", FLAG_BOOL},
    {"--quiet", FLAG_BOOL},
    {"--help", FLAG_BOOL},
    {"--version", FLAG_BOOL},
    {"--classes", FLAG_VALUE},
    {"--save-every", FLAG_VALUE},
    {"--keep-going-on-nan", FLAG_BOOL},
    {"--plot", FLAG_VALUE},
    {"--devices", FLAG_VALUE},
    {"--grad-compression", FLAG_VALUE},
    {"--dist-timeout", FLAG_VALUE},
    {"--layers", FLAG_VALUE},
    {"--heads", FLAG_VALUE},
    {"--embd", FLAG_VALUE},
    {"--context", FLAG_VALUE},
    {"--vocab", FLAG_VALUE},
    {"--text", FLAG_VALUE},
    {"--tokens", FLAG_VALUE},
    {"--steps", FLAG_VALUE},
    {"--eval-every", FLAG_VALUE},
    {"--eval-batches", FLAG_VALUE},
    {"--grad-accum", FLAG_VALUE},
    {"--init-from", FLAG_VALUE},
    {"--save-hf", FLAG_VALUE},
};

/* Records an optimizer setting; it is checked against the kind's declaration
 * once every flag is read (--optimizer may come later). */
static bool add_opt(train_args *a, const char *flag, const char *name, size_t name_len,
                    const char *value, char *err, size_t size) {
    if (a->opt_count == TRAIN_ARGS_MAX_OPT)
        return fail(err, size, "%s: more than %d optimizer settings", flag, TRAIN_ARGS_MAX_OPT);
    if (name_len >= sizeof a->opt[0].name)
        return fail(err, size, "%s: hyperparameter name '%.*s' is too long", flag, (int)name_len,
                    name);
    a->opt[a->opt_count].flag = flag;
    memcpy(a->opt[a->opt_count].name, name, name_len);
    a->opt[a->opt_count].name[name_len] = '\0';
    a->opt[a->opt_count++].value = value;
    return true;
}

/* "sgd or rmsprop": the kinds that declare hyperparameter name. */
static void kinds_with(const char *name, char *buf, size_t size) {
    size_t used = 0, found = 0, total = 0;
    for (size_t k = 0; k < mpcl_optim_kind_count(); k++)
        for (size_t i = 0; i < mpcl_optim_param_count((mpcl_optim_kind)k); i++)
            if (strcmp(mpcl_optim_param_name((mpcl_optim_kind)k, i), name) == 0) total++;
    buf[0] = '\0';
    for (size_t k = 0; k < mpcl_optim_kind_count() && used < size; k++)
        for (size_t i = 0; i < mpcl_optim_param_count((mpcl_optim_kind)k); i++)
            if (strcmp(mpcl_optim_param_name((mpcl_optim_kind)k, i), name) == 0 && used < size) {
                found++;
                used += (size_t)snprintf(buf + used, size - used, "%s%s",
                                         found == 1       ? ""
                                         : found == total ? " or "
                                                          : ", ",
                                         mpcl_optim_kind_name((mpcl_optim_kind)k));
            }
}

/* The library's last message without its status name and source location:
 * "optimizer sgd: momentum 3 is not in [0, 1]". */
static void bare_message(char *buf, size_t size) {
    const char *m = mpcl_errmsg();
    if (strncmp(m, "MPCL_ERR_", 9) == 0 && strstr(m, ": ")) m = strstr(m, ": ") + 2;
    snprintf(buf, size, "%s", m);
    char *at = strrchr(buf, '(');
    if (at && at > buf && at[-1] == ' ' && strstr(at, ".c:") && at[strlen(at) - 1] == ')')
        at[-1] = '\0';
}

mpcl_optim_params train_args_optim_defaults(mpcl_optim_kind kind) {
    mpcl_optim_params p = mpcl_optim_default_params(kind);
    if (kind == MPCL_OPTIM_SGD) p.momentum = 0.9f;
    return p;
}

/* The chosen kind's defaults, --lr and --clip-norm, then each setting by
 * name, each checked by the kind's declaration. */
static bool build_optim(train_args *a, char *err, size_t size) {
    a->optim = train_args_optim_defaults(a->optimizer);
    if (a->lr_set) a->optim.lr = a->lr;
    a->optim.clip_norm = a->clip_norm;
    for (size_t i = 0; i < a->opt_count; i++) {
        const char *flag = a->opt[i].flag, *name = a->opt[i].name, *value = a->opt[i].value;
        if (mpcl_optim_params_set(NULL, &a->optim, name, value) == MPCL_OK) continue;
        char kinds[128], why[512];
        kinds_with(name, kinds, sizeof kinds);
        bool elsewhere = kinds[0] && strstr(mpcl_errmsg(), "has no hyperparameter");
        bare_message(why, sizeof why);
        bool opt = strcmp(flag, "--opt") == 0, typed = strcmp(flag, "--nesterov") != 0;
        return fail(err, size, "%s%s%s%s%s: %s%s%s", flag, typed ? " " : "", opt ? name : "",
                    opt ? "=" : "", typed ? value : "", why,
                    elsewhere ? "; it belongs to --optimizer " : "", elsewhere ? kinds : "");
    }
    return true;
}

/* The largest GPT dimension a flag takes: far above what a device holds,
 * low enough that products of two cannot overflow. */
#define GPT_MAX_DIM ((uint64_t)1 << 24)

/* --model gpt's own flags. Returns whether f is one; *ok says how it went. */
static bool apply_gpt(train_args *a, const char *f, const char *v, bool *ok, char *err,
                      size_t size) {
    static const struct {
        const char *flag;
        size_t offset; /* a size_t field of train_args */
        uint64_t min, max;
    } dims[] = {
        {"--layers", offsetof(train_args, gpt_layers), 1, 1024},
        {"--heads", offsetof(train_args, gpt_heads), 1, 4096},
        {"--embd", offsetof(train_args, gpt_embd), 1, GPT_MAX_DIM},
        {"--context", offsetof(train_args, gpt_context), 1, GPT_MAX_DIM},
        {"--vocab", offsetof(train_args, gpt_vocab), 1, MPCL_TOKENS_MAX_VOCAB},
        {"--eval-batches", offsetof(train_args, eval_batches), 1, GPT_MAX_DIM},
    };
    uint64_t u = 0;
    *ok = true;
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        if (strcmp(f, dims[i].flag) == 0) {
            *ok = parse_uint(f, v, dims[i].min, dims[i].max, &u, err, size);
            *(size_t *)((char *)a + dims[i].offset) = (size_t)u;
            if (!a->gpt_flag) a->gpt_flag = f;
            if (strcmp(f, "--context") == 0) a->gpt_context_set = true;
            bool shape = strcmp(f, "--context") != 0 && strcmp(f, "--eval-batches") != 0;
            if (shape && !a->shape_flag) a->shape_flag = f;
            return true;
        }
    if (strcmp(f, "--steps") == 0) {
        *ok = parse_uint(f, v, 1, SCHEDULE_MAX_STEPS, &a->steps, err, size);
    } else if (strcmp(f, "--eval-every") == 0) {
        *ok = parse_uint(f, v, 1, SCHEDULE_MAX_STEPS, &a->eval_every, err, size);
    } else if (strcmp(f, "--grad-accum") == 0) {
        *ok = parse_uint(f, v, 1, 1 << 16, &u, err, size);
        a->grad_accum = (uint32_t)u;
    } else if (strcmp(f, "--init-from") == 0 || strcmp(f, "--save-hf") == 0) {
        if (!*v) *ok = fail(err, size, "%s: empty path", f);
        if (strcmp(f, "--init-from") == 0)
            a->init_from = v;
        else
            a->save_hf = v;
    } else if (strcmp(f, "--text") == 0 || strcmp(f, "--tokens") == 0) {
        if (!*v) *ok = fail(err, size, "%s: empty path", f);
        if (a->text || a->tokens_bin)
            *ok = fail(err, size, "%s contradicts %s: give one corpus", f,
                       a->text ? "--text" : "--tokens");
        if (strcmp(f, "--text") == 0)
            a->text = v;
        else
            a->tokens_bin = v;
    } else {
        return false;
    }
    if (!a->gpt_flag) a->gpt_flag = f;
    return true;
}

/* The flags --model gpt has no use for: it reads tokens, not the IDX or NPY
 * data, and runs steps, not epochs. */
static bool not_for_gpt(const char *f) {
    static const char *const mlp_data[] = {
        "--data",       "--train-x",          "--train-y",     "--val-x",
        "--val-y",      "--validation-split", "--loss",        "--epochs",
        "--hidden",     "--classes",          "--train-limit", "--test-limit",
        "--activation",
    };
    for (size_t i = 0; i < sizeof mlp_data / sizeof mlp_data[0]; i++)
        if (strcmp(f, mlp_data[i]) == 0) return true;
    return false;
}

static bool apply(train_args *a, const char *f, const char *v, char *err, size_t size) {
    uint64_t u;
    bool ok;
    if (not_for_gpt(f) && !a->not_gpt_flag) a->not_gpt_flag = f;
    if (strcmp(f, "--batch") == 0) a->batch_set = true;
    if (strcmp(f, "--optimizer") == 0) a->optimizer_set = true;
    if (strcmp(f, "--lr-schedule") == 0) a->schedule_set = true;
    if (apply_gpt(a, f, v, &ok, err, size)) return ok;
    if (apply_schedule(a, f, v, &ok, err, size)) return ok;
    if (strcmp(f, "--json") == 0) {
        a->json = true;
    } else if (strcmp(f, "--quiet") == 0) {
        a->quiet = true;
    } else if (strcmp(f, "--help") == 0) {
        a->help = true;
    } else if (strcmp(f, "--version") == 0) {
        a->version = true;
    } else if (strcmp(f, "--keep-going-on-nan") == 0) {
        a->keep_going_on_nan = true;
    } else if (strcmp(f, "--classes") == 0) {
        /* Labels are bytes: 256 classes at most; one class cannot be learned. */
        if (!parse_uint(f, v, 2, 256, &u, err, size)) return false;
        a->classes = (int)u;
    } else if (strcmp(f, "--save-every") == 0) {
        /* N steps, or Ne epochs. */
        size_t n = strlen(v);
        bool epochs = n > 0 && v[n - 1] == 'e';
        char num[32];
        if (n >= sizeof num) return fail(err, size, "%s: '%s' is too long", f, v);
        memcpy(num, v, n + 1);
        if (epochs) num[n - 1] = '\0';
        char sub[256];
        if (!parse_uint(f, num, 1, epochs ? UINT32_MAX : UINT64_MAX, &u, sub, sizeof sub))
            return fail(err, size,
                        "%s (%s takes N steps or Ne epochs, N >= 1, like 500 or 2e; got '%s')", sub,
                        f, v);
        a->save_every = epochs ? 0 : u;
        a->save_every_epochs = epochs ? (uint32_t)u : 0;
    } else if (strcmp(f, "--epochs") == 0) {
        if (!parse_uint(f, v, 1, UINT32_MAX, &u, err, size)) return false;
        a->epochs = (uint32_t)u;
    } else if (strcmp(f, "--batch") == 0) {
        if (!parse_uint(f, v, 1, TRAIN_ARGS_MAX_BATCH, &u, err, size)) return false;
        a->batch = (size_t)u;
    } else if (strcmp(f, "--report-every") == 0) {
        if (!parse_uint(f, v, 1, UINT32_MAX, &u, err, size)) return false;
        a->report_every = (uint32_t)u;
    } else if (strcmp(f, "--train-limit") == 0 || strcmp(f, "--test-limit") == 0) {
        if (!parse_uint(f, v, 0, SIZE_MAX, &u, err, size)) return false;
        if (strcmp(f, "--train-limit") == 0)
            a->train_limit = (size_t)u;
        else
            a->test_limit = (size_t)u;
    } else if (strcmp(f, "--seed") == 0) {
        if (!parse_uint(f, v, 0, UINT64_MAX, &u, err, size)) return false;
        a->seed = u;
    } else if (strcmp(f, "--lr") == 0) {
        if (!parse_positive_float(f, v, true, &a->lr, err, size)) return false;
        a->lr_set = true;
    } else if (strcmp(f, "--hidden") == 0) {
        a->mlp_flag = f;
        return parse_hidden(a, f, v, err, size);
    } else if (strcmp(f, "--model") == 0) {
        if (!*v) return fail(err, size, "%s: empty path", f);
        a->gpt = strcmp(v, "gpt") == 0;
        a->model_file = a->gpt ? NULL : v;
    } else if (strcmp(f, "--activation") == 0) {
        mpcl_activation act;
        /* Identity hidden layers would collapse the MLP into one linear map. */
        if (!mpcl_activation_parse(v, &act) || act == MPCL_ACT_IDENTITY)
            return fail(err, size, "%s: unknown activation '%s' (%s; not identity)", f, v,
                        mpcl_activation_names());
        a->activation = act;
        a->mlp_flag = f;
    } else if (strcmp(f, "--nesterov") == 0) {
        return add_opt(a, f, "nesterov", strlen("nesterov"), "true", err, size);
    } else if (strcmp(f, "--opt") == 0) {
        const char *eq = strchr(v, '=');
        if (!eq || eq == v)
            return fail(err, size, "%s: '%s' is not NAME=VALUE (a hyperparameter of --optimizer)",
                        f, v);
        return add_opt(a, f, v, (size_t)(eq - v), eq + 1, err, size);
    } else if (strcmp(f, "--optimizer") == 0) {
        if (!mpcl_optim_kind_parse(v, &a->optimizer))
            return fail(err, size, "%s: unknown optimizer '%s' (%s)", f, v,
                        mpcl_optim_kind_names());
    } else if (strcmp(f, "--clip-norm") == 0) {
        if (!parse_positive_float(f, v, false, &a->clip_norm, err, size)) return false;
    } else if (strcmp(f, "--momentum") == 0) {
        float momentum;
        if (!parse_positive_float(f, v, true, &momentum, err, size)) return false;
        return add_opt(a, f, "momentum", strlen("momentum"), v, err, size);
    } else if (strcmp(f, "--dist-timeout") == 0) {
        if (!parse_uint(f, v, 0, UINT32_MAX, &u, err, size)) return false;
        a->dist_timeout = (uint32_t)u;
        a->dist_timeout_set = true;
    } else if (strcmp(f, "--grad-compression") == 0) {
        if (!mpcl_grad_compression_parse(v, &a->grad_compression))
            return fail(err, size, "%s: unknown compression '%s' (none, fp16, bf16)", f, v);
    } else if (strcmp(f, "--precision") == 0) {
        if (!mpcl_policy_parse(v, &a->policy))
            return fail(err, size,
                        "%s: unknown policy '%s' (auto, float32, mixed_float16, mixed_bfloat16)", f,
                        v);
    } else if (strcmp(f, "--loss-scale") == 0) {
        /* Given at all, it applies whatever the plan's default: loss scaling
         * on (dynamic or fixed) or off. */
        if (strcmp(v, "off") == 0) {
            a->loss_scaling = MPCL_LOSS_SCALING_OFF;
            return true;
        }
        a->loss_scaling = MPCL_LOSS_SCALING_ON;
        if (strcmp(v, "dynamic") == 0) {
            a->loss_scale = MPCL_LOSS_SCALE_DYNAMIC;
        } else {
            char sub[256];
            if (!parse_positive_float(f, v, false, &a->fixed_scale, sub, sizeof sub))
                return fail(err, size, "%s (expected 'dynamic', 'off' or a fixed scale > 0)", sub);
            a->loss_scale = MPCL_LOSS_SCALE_FIXED;
        }
    } else if (strcmp(f, "--validation-split") == 0) {
        return parse_fraction(f, v, &a->validation_split, err, size);
    } else if (strcmp(f, "--loss") == 0) {
        if (!mpcl_loss_parse(v, &a->loss))
            return fail(err, size,
                        "%s: unknown loss '%s' (sparse_categorical_crossentropy, "
                        "binary_crossentropy, mse)",
                        f, v);
    } else if (strcmp(f, "--initial-loss-scale") == 0) {
        if (!parse_positive_float(f, v, false, &a->initial_scale, err, size)) return false;
        a->initial_scale_set = true;
    } else {
        /* The string flags: an empty path or selector is always a mistake. */
        if (!*v) return fail(err, size, "%s: empty value", f);
        if (strcmp(f, "--data") == 0)
            a->data_dir = v;
        else if (strcmp(f, "--train-x") == 0)
            a->train_x = v;
        else if (strcmp(f, "--train-y") == 0)
            a->train_y = v;
        else if (strcmp(f, "--val-x") == 0)
            a->val_x = v;
        else if (strcmp(f, "--val-y") == 0)
            a->val_y = v;
        else if (strcmp(f, "--device") == 0)
            a->device = v;
        else if (strcmp(f, "--devices") == 0)
            a->devices = v;
        else if (strcmp(f, "--save") == 0)
            a->save = v;
        else if (strcmp(f, "--resume") == 0)
            a->resume = v;
        else if (strcmp(f, "--metrics") == 0)
            a->metrics = v;
        else if (strcmp(f, "--plot") == 0)
            a->plot = v;
    }
    return true;
}

/* The data flags that contradict each other or go in pairs. */
static bool check_data_flags(const train_args *a, char *err, size_t size) {
    static const char *const pair_why[2] = {"the labels or targets of its rows",
                                            "the rows those labels or targets belong to"};
    if (!a->train_x != !a->train_y)
        return fail(err, size, "%s needs %s (%s)", a->train_x ? "--train-x" : "--train-y",
                    a->train_x ? "--train-y" : "--train-x", pair_why[a->train_x ? 0 : 1]);
    if (!a->val_x != !a->val_y)
        return fail(err, size, "%s needs %s (%s)", a->val_x ? "--val-x" : "--val-y",
                    a->val_x ? "--val-y" : "--val-x", pair_why[a->val_x ? 0 : 1]);
    if (a->data_dir && a->train_x)
        return fail(err, size,
                    "--data contradicts --train-x/--train-y: the training data come from the "
                    "IDX folder or from NPY files, not both");
    if (a->val_x && a->validation_split > 0.0)
        return fail(err, size,
                    "--val-x/--val-y contradict --validation-split: both name the validation "
                    "data; give one");
    bool dense = a->loss != MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY;
    if (dense && !a->train_x)
        return fail(err, size,
                    "--loss %s takes float targets, and the IDX files hold class labels: give "
                    "the data as --train-x FILE.npy --train-y FILE.npy",
                    mpcl_loss_name(a->loss));
    if (dense && a->classes)
        return fail(err, size,
                    "--classes applies to class labels (--loss "
                    "sparse_categorical_crossentropy); with --loss %s the outputs are the "
                    "target columns",
                    mpcl_loss_name(a->loss));
    return true;
}

/* --model gpt's checks, and its defaults where the user set nothing: the
 * GPT settings go before the user's --opt, which override them. */
static bool gpt_defaults(train_args *a, char *err, size_t size) {
    if (!a->gpt) {
        if (a->gpt_flag)
            return fail(err, size, "%s applies to --model gpt (a GPT trained on text or tokens)",
                        a->gpt_flag);
        return true;
    }
    if (a->not_gpt_flag)
        return fail(err, size,
                    "%s does not apply to --model gpt, which trains on --text or --tokens for "
                    "--steps",
                    a->not_gpt_flag);
    if (a->init_from && a->shape_flag)
        return fail(err, size,
                    "%s contradicts --init-from %s: the folder's config.json gives the shape",
                    a->shape_flag, a->init_from);
    if (a->gpt_embd % a->gpt_heads != 0)
        return fail(err, size, "--heads %zu does not divide --embd %zu", a->gpt_heads, a->gpt_embd);
    if (!a->gpt_vocab) a->gpt_vocab = a->tokens_bin ? 50257 : MPCL_TOKENS_BYTE_VOCAB;
    if (!a->batch_set) a->batch = 32;
    if (!a->schedule_set && !a->decay_flag) {
        a->schedule.kind = MPCL_LR_COSINE;
        a->schedule.alpha = 0.1;
        /* 100 steps, or a tenth of a shorter run. */
        if (a->schedule.warmup_steps == 0)
            a->schedule.warmup_steps = a->steps < 1000 ? a->steps / 10 : 100;
    }
    if (a->optimizer_set) return true;
    static const char *const adamw[][2] = {
        {"beta_2", "0.95"}, {"weight_decay", "0.1"}, {"decay_vectors", "false"}};
    size_t n = sizeof adamw / sizeof adamw[0];
    if (a->opt_count + n > TRAIN_ARGS_MAX_OPT)
        return fail(err, size, "more than %d optimizer settings", TRAIN_ARGS_MAX_OPT - (int)n);
    memmove(a->opt + n, a->opt, a->opt_count * sizeof a->opt[0]);
    for (size_t i = 0; i < n; i++) {
        a->opt[i].flag = "--model gpt";
        snprintf(a->opt[i].name, sizeof a->opt[i].name, "%s", adamw[i][0]);
        a->opt[i].value = adamw[i][1];
    }
    a->opt_count += n;
    a->optimizer = MPCL_OPTIM_ADAMW;
    return true;
}

bool train_args_parse(train_args *a, int argc, char **argv, char *err, size_t err_size) {
    train_args_defaults(a);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0) arg = "--help";
        const char *eq = strncmp(arg, "--", 2) == 0 ? strchr(arg, '=') : NULL;
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        size_t k = 0, n = sizeof flags / sizeof flags[0];
        while (k < n &&
               !(strlen(flags[k].name) == name_len && strncmp(flags[k].name, arg, name_len) == 0))
            k++;
        if (k == n) return fail(err, err_size, "unknown option '%s'", arg);
        const char *name = flags[k].name, *value = NULL;
        if (flags[k].kind == FLAG_BOOL) {
            if (eq) return fail(err, err_size, "%s takes no value (got '%s')", name, arg);
        } else if (eq) {
            value = eq + 1;
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            return fail(err, err_size, "%s needs a value", name);
        }
        if (!apply(a, name, value, err, err_size)) return false;
    }
    if (a->initial_scale_set && a->loss_scale == MPCL_LOSS_SCALE_FIXED)
        return fail(err, err_size,
                    "--initial-loss-scale applies to --loss-scale dynamic only (a fixed scale "
                    "is its own initial value)");
    if (a->initial_scale_set && a->loss_scaling == MPCL_LOSS_SCALING_OFF)
        return fail(err, err_size, "--initial-loss-scale contradicts --loss-scale off");
    /* A dynamic scale's start was asked for: scale, whatever the plan says. */
    if (a->initial_scale_set) a->loss_scaling = MPCL_LOSS_SCALING_ON;
    if (a->decay_flag && !mpcl_lr_schedule_kind_decays(a->schedule.kind))
        return fail(err, err_size, "%s %s applies to a decaying --lr-schedule (cosine), not %s",
                    a->decay_flag, a->decay_value, mpcl_lr_schedule_kind_name(a->schedule.kind));
    if (!gpt_defaults(a, err, err_size) || !build_optim(a, err, err_size)) return false;
    if ((a->save_every || a->save_every_epochs) && !a->save)
        return fail(err, err_size, "--save-every needs --save PATH (where to write)");
    if (a->model_file && a->mlp_flag)
        return fail(err, err_size,
                    "%s shapes the MLP that --model %s replaces: give one or the other",
                    a->mlp_flag, a->model_file);
    return check_data_flags(a, err, err_size);
}

/* "a FIFO", "a folder"... */
static const char *kind_of(mode_t m) {
    if (S_ISREG(m)) return "a regular file";
    if (S_ISDIR(m)) return "a folder";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISLNK(m)) return "a symbolic link";
    return "not a regular file";
}

/* The folder of path, "." for a bare name; NULL when out of memory. */
static char *folder_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return strdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    return strndup(path, n);
}

/* Whether a new file can be created in dir: an unnamed file that vanishes on
 * close, where the file system has them; access(2) otherwise. */
static bool folder_takes_files(const char *dir, int *err_no) {
    int fd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
    if (fd >= 0) {
        close(fd);
        return true;
    }
    *err_no = errno;
    if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) return false;
    if (access(dir, W_OK | X_OK) == 0) return true;
    *err_no = errno;
    return false;
}

/* The writer's own rule (mpcl_output_name_max): a name that the file system
 * takes but its temporary name would not fails only after training. */
static bool name_fits(const char *flag, const char *path, const char *dir, char *err,
                      size_t err_size) {
    const char *slash = strrchr(path, '/');
    size_t len = strlen(slash ? slash + 1 : path), longest = mpcl_output_name_max(dir);
    if (len <= longest) return true;
    return fail(err, err_size,
                "%s: the file name in '%s' is %zu bytes; the longest mpcl-train can write in '%s' "
                "is %zu (the file system's limit less %d for the temporary name)",
                flag, path, len, dir, longest, MPCL_TEMP_SUFFIX_MAX);
}

bool train_args_check_output_path(const char *flag, const char *path, bool append, char *err,
                                  size_t err_size) {
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return fail(err, err_size, "%s: '%s' is a folder; give a file name", flag, path);
        if (!S_ISREG(st.st_mode))
            return fail(err, err_size,
                        "%s: '%s' is %s, not a regular file; mpcl-train replaces or appends to "
                        "regular files only",
                        flag, path, kind_of(st.st_mode));
        if (append) {
            int fd = open(path, O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC);
            if (fd < 0)
                return fail(err, err_size, "%s: cannot write '%s': %s", flag, path,
                            strerror(errno));
            close(fd);
        }
    }
    char *dir = folder_of(path);
    if (!dir) return fail(err, err_size, "%s: out of memory", flag);
    bool ok = true;
    int e = 0;
    if (stat(dir, &st) != 0) {
        ok = fail(err, err_size, "%s: folder '%s' %s (for '%s')", flag, dir,
                  errno == ENOENT ? "does not exist" : strerror(errno), path);
    } else if (!S_ISDIR(st.st_mode)) {
        ok = fail(err, err_size, "%s: '%s' is %s, not a folder (for '%s')", flag, dir,
                  kind_of(st.st_mode), path);
    } else if (!folder_takes_files(dir, &e)) {
        ok = fail(err, err_size, "%s: cannot create files in folder '%s' (for '%s'): %s", flag, dir,
                  path, strerror(e));
    } else if (!name_fits(flag, path, dir, err, err_size)) {
        ok = false;
    }
    free(dir);
    return ok;
}

bool train_args_check_input_path(const char *flag, const char *path, char *err, size_t err_size) {
    struct stat st;
    if (stat(path, &st) != 0)
        return fail(err, err_size, "%s: cannot read '%s': %s", flag, path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return fail(err, err_size, "%s: '%s' is %s, not a regular file", flag, path,
                    kind_of(st.st_mode));
    if (access(path, R_OK) != 0)
        return fail(err, err_size, "%s: cannot read '%s': %s", flag, path, strerror(errno));
    return true;
}

/* One file's identity: st_dev/st_ino when it exists, else its resolved path
 * (the folder resolved, the name kept). */
typedef struct file_id {
    bool exists;
    dev_t dev;
    ino_t ino;
    char resolved[PATH_MAX + 256];
} file_id;

static void identify(const char *path, file_id *id) {
    memset(id, 0, sizeof *id);
    struct stat st;
    if (stat(path, &st) == 0) {
        id->exists = true;
        id->dev = st.st_dev;
        id->ino = st.st_ino;
        return;
    }
    char *dir = folder_of(path);
    const char *slash = strrchr(path, '/');
    char real[PATH_MAX];
    if (dir && realpath(dir, real))
        snprintf(id->resolved, sizeof id->resolved, "%s/%s", real, slash ? slash + 1 : path);
    else
        snprintf(id->resolved, sizeof id->resolved, "%s", path);
    free(dir);
}

static bool same_file(const file_id *x, const file_id *y) {
    if (x->exists != y->exists) return false;
    if (x->exists) return x->dev == y->dev && x->ino == y->ino;
    return strcmp(x->resolved, y->resolved) == 0;
}

bool train_args_check_aliases(const train_args *a, char *err, size_t err_size) {
    /* Every output, and the checkpoint read: no two may be one file, except
     * --save onto --resume (continuing in place, documented). */
    const char *path[4] = {a->save, a->resume, a->metrics, a->plot};
    static const char *const name[4] = {"--save", "--resume", "--metrics", "--plot"};
    file_id id[4];
    for (int i = 0; i < 4; i++)
        if (path[i]) identify(path[i], &id[i]);
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++) {
            if (!path[i] || !path[j] || (i == 0 && j == 1)) continue;
            if (same_file(&id[i], &id[j]))
                return fail(err, err_size,
                            "%s '%s' and %s '%s' are the same file; one would overwrite the "
                            "other",
                            name[j], path[j], name[i], path[i]);
        }
    return true;
}

mpcl_train_params train_args_to_params(const train_args *a) {
    mpcl_train_params p = mpcl_train_default_params();
    p.data_dir = a->data_dir;
    p.train_x = a->train_x;
    p.train_y = a->train_y;
    p.val_x = a->val_x;
    p.val_y = a->val_y;
    p.validation_split = a->validation_split;
    p.train_limit = a->train_limit;
    p.test_limit = a->test_limit;
    p.epochs = a->epochs;
    p.batch = a->batch;
    p.seed = a->seed;
    p.report_every = a->report_every;
    mpcl_model_params *m = &p.model;
    memcpy(m->hidden, a->hidden, sizeof m->hidden);
    m->hidden_count = a->hidden_count;
    m->activation = a->activation;
    m->loss = a->loss;
    m->policy = a->policy;
    m->max_batch = a->batch;
    m->seed = a->seed;
    m->optim = a->optim;
    m->lr_schedule = a->schedule;
    p.num_classes = a->classes;
    p.keep_going_on_nan = a->keep_going_on_nan;
    p.save_path = a->save_every || a->save_every_epochs ? a->save : NULL;
    p.save_every_steps = a->save_every;
    p.save_every_epochs = a->save_every_epochs;
    /* A scale the user typed applies on resume too, over the checkpoint's. */
    p.resume_keeps_scale = a->loss_scaling == MPCL_LOSS_SCALING_ON &&
                           (a->loss_scale == MPCL_LOSS_SCALE_FIXED || a->initial_scale_set);
    m->loss_scaling = a->loss_scaling;
    mpcl_loss_scale_params *ls = &m->loss_scale;
    ls->mode = a->loss_scale;
    ls->initial_scale = a->loss_scale == MPCL_LOSS_SCALE_FIXED ? a->fixed_scale : a->initial_scale;
    /* Widen the bounds to take in a scale the user asked for explicitly: the
     * library refuses an initial scale outside [min_scale, max_scale]. */
    if (ls->initial_scale < ls->min_scale) ls->min_scale = ls->initial_scale;
    if (ls->initial_scale > ls->max_scale) ls->max_scale = ls->initial_scale;
    if (a->gpt) {
        p.steps = a->steps;
        p.eval_every = a->eval_every;
        p.eval_batches = a->eval_batches;
        p.grad_accum = a->grad_accum;
    }
    return p;
}
