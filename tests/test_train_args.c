/* mpcl-train's flag parsing: defaults, both spellings of a value, every
 * accepted form, and every rejected one with the flag named in the message. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mpcl/files.h"
#include "testutil.h"
#include "train_args.h"

#define MAX_ARGV 32

/* Parses a NULL-terminated list of arguments (argv[0] added). */
static bool parse(train_args *a, char *err, size_t size, ...) {
    char *argv[MAX_ARGV] = {"mpcl-train"};
    int argc = 1;
    va_list ap;
    va_start(ap, size);
    for (char *s; (s = va_arg(ap, char *)) != NULL;) {
        assert_true(argc < MAX_ARGV);
        argv[argc++] = s;
    }
    va_end(ap);
    err[0] = '\0';
    return train_args_parse(a, argc, argv, err, size);
}

static void defaults(void **state) {
    (void)state;
    train_args a;
    char err[512];
    assert_true(parse(&a, err, sizeof err, NULL));
    assert_int_equal(a.epochs, 10);
    assert_int_equal(a.batch, 128);
    assert_false(a.lr_set);
    assert_int_equal(a.hidden_count, 1);
    assert_int_equal(a.hidden[0], 128);
    assert_int_equal(a.activation, MPCL_ACT_RELU);
    assert_int_equal(a.optimizer, MPCL_OPTIM_ADAM);
    assert_int_equal(a.policy, MPCL_POLICY_AUTO);
    assert_int_equal(a.loss_scale, MPCL_LOSS_SCALE_DYNAMIC);
    assert_true(a.initial_scale == 32768.0f);
    assert_int_equal(a.seed, 42);
    assert_int_equal(a.report_every, 50);
    assert_null(a.data_dir);
    assert_null(a.device);
    assert_null(a.save);
    assert_false(a.json || a.quiet || a.help || a.version);

    mpcl_train_params p = train_args_to_params(&a);
    assert_null(p.data_dir);
    assert_int_equal(p.epochs, 10);
    assert_int_equal(p.batch, 128);
    assert_int_equal(p.model.max_batch, 128);
    assert_int_equal(p.model.optim.kind, MPCL_OPTIM_ADAM);
    assert_true(p.model.optim.lr == 1e-3f);
    assert_int_equal(p.model.loss_scale.mode, MPCL_LOSS_SCALE_DYNAMIC);
    assert_true(p.model.loss_scale.initial_scale == 32768.0f);
}

static void every_flag_both_spellings(void **state) {
    (void)state;
    train_args a;
    char err[512];
    assert_true(parse(&a, err, sizeof err, "--data", "/d", "--epochs=3", "--batch", "64",
                      "--lr=0.5", "--hidden", "32,16,8", "--activation=gelu", "--optimizer", "sgd",
                      "--precision=mixed_float16", "--seed", "0", "--json", NULL));
    assert_string_equal(a.data_dir, "/d");
    assert_int_equal(a.epochs, 3);
    assert_int_equal(a.batch, 64);
    assert_true(a.lr_set && a.lr == 0.5f);
    assert_int_equal(a.hidden_count, 3);
    assert_int_equal(a.hidden[0], 32);
    assert_int_equal(a.hidden[1], 16);
    assert_int_equal(a.hidden[2], 8);
    assert_int_equal(a.activation, MPCL_ACT_GELU);
    assert_int_equal(a.optimizer, MPCL_OPTIM_SGD);
    assert_int_equal(a.policy, MPCL_POLICY_MIXED_FLOAT16);
    assert_int_equal(a.seed, 0);
    assert_true(a.json);

    /* mixed_bfloat16 by name, both spellings; the message for an unknown
     * policy lists it. */
    assert_true(parse(&a, err, sizeof err, "--precision", "mixed_bfloat16", NULL));
    assert_int_equal(a.policy, MPCL_POLICY_MIXED_BFLOAT16);
    assert_true(parse(&a, err, sizeof err, "--precision=mixed_bfloat16", NULL));
    assert_int_equal(a.policy, MPCL_POLICY_MIXED_BFLOAT16);
    assert_false(parse(&a, err, sizeof err, "--precision", "bfloat16", NULL));
    assert_non_null(strstr(err, "mixed_bfloat16"));

    assert_true(parse(&a, err, sizeof err, "--loss-scale", "128", "--device=cpu", "--save", "x.st",
                      "--resume=y.st", "--metrics", "m.csv", "--report-every=7", "--train-limit",
                      "512", "--test-limit=0", "--quiet", "--seed", "18446744073709551615",
                      "--optimizer=adamw", NULL));
    assert_int_equal(a.loss_scale, MPCL_LOSS_SCALE_FIXED);
    assert_true(a.fixed_scale == 128.0f);
    assert_string_equal(a.device, "cpu");
    assert_string_equal(a.save, "x.st");
    assert_string_equal(a.resume, "y.st");
    assert_string_equal(a.metrics, "m.csv");
    assert_null(a.plot);
    assert_true(parse(&a, err, sizeof err, "--plot", "run.svg", NULL));
    assert_string_equal(a.plot, "run.svg");
    assert_true(parse(&a, err, sizeof err, "--plot=r.svg", NULL));
    assert_string_equal(a.plot, "r.svg");
    assert_false(parse(&a, err, sizeof err, "--plot=", NULL));
    assert_non_null(strstr(err, "--plot"));
    assert_true(parse(&a, err, sizeof err, "--loss-scale", "128", "--device=cpu", "--save", "x.st",
                      "--resume=y.st", "--metrics", "m.csv", "--report-every=7", "--train-limit",
                      "512", "--test-limit=0", "--quiet", "--seed", "18446744073709551615",
                      "--optimizer=adamw", NULL));
    assert_int_equal(a.report_every, 7);
    assert_int_equal(a.train_limit, 512);
    assert_int_equal(a.test_limit, 0);
    assert_true(a.quiet);
    assert_true(a.seed == UINT64_MAX);
    mpcl_train_params p = train_args_to_params(&a);
    assert_int_equal(p.model.loss_scale.mode, MPCL_LOSS_SCALE_FIXED);
    assert_true(p.model.loss_scale.initial_scale == 128.0f);
    /* AdamW keeps its own default lr and decay when --lr is not given. */
    assert_int_equal(p.model.optim.kind, MPCL_OPTIM_ADAMW);
    mpcl_optim_params d = mpcl_optim_default_params(MPCL_OPTIM_ADAMW);
    assert_true(p.model.optim.lr == d.lr && p.model.optim.weight_decay == d.weight_decay);

    /* A fixed scale outside the dynamic bounds widens them rather than being
     * refused later by the library. */
    assert_true(parse(&a, err, sizeof err, "--loss-scale", "0.25", NULL));
    p = train_args_to_params(&a);
    assert_true(p.model.loss_scale.min_scale <= 0.25f);
    assert_true(parse(&a, err, sizeof err, "--initial-loss-scale", "1e9", NULL));
    p = train_args_to_params(&a);
    assert_true(p.model.loss_scale.initial_scale == 1e9f && p.model.loss_scale.max_scale >= 1e9f);
    assert_true(parse(&a, err, sizeof err, "--help", NULL) && a.help);
    assert_true(parse(&a, err, sizeof err, "-h", NULL) && a.help);
    assert_true(parse(&a, err, sizeof err, "--version", NULL) && a.version);
    /* The training-core flags: clipping, SGD's momentum, loss scaling on or
     * off whatever the plan says. */
    assert_true(parse(&a, err, sizeof err, "--optimizer", "sgd", "--momentum=0.5", "--nesterov",
                      "--clip-norm", "1.5", "--loss-scale", "off", NULL));
    p = train_args_to_params(&a);
    assert_true(p.model.optim.momentum == 0.5f && p.model.optim.nesterov);
    assert_true(p.model.optim.clip_norm == 1.5f);
    assert_int_equal(p.model.loss_scaling, MPCL_LOSS_SCALING_OFF);
    assert_true(parse(&a, err, sizeof err, NULL));
    p = train_args_to_params(&a);
    assert_int_equal(p.model.loss_scaling, MPCL_LOSS_SCALING_PLAN);
    assert_true(p.model.optim.clip_norm == 0.0f);
    assert_true(parse(&a, err, sizeof err, "--loss-scale=dynamic", NULL));
    assert_int_equal(train_args_to_params(&a).model.loss_scaling, MPCL_LOSS_SCALING_ON);
    assert_true(parse(&a, err, sizeof err, "--initial-loss-scale", "256", NULL));
    assert_int_equal(train_args_to_params(&a).model.loss_scaling, MPCL_LOSS_SCALING_ON);
    /* Seven hidden layers is the model's limit, and allowed. */
    assert_true(parse(&a, err, sizeof err, "--hidden", "1,2,3,4,5,6,7", NULL));
    assert_int_equal(a.hidden_count, 7);
    /* Data parallel: the device list is kept as typed (train_dist.c reads it). */
    assert_null(a.devices);
    assert_int_equal(a.grad_compression, MPCL_GRAD_COMPRESSION_NONE);
    assert_true(
        parse(&a, err, sizeof err, "--devices", "0:0,0:1", "--grad-compression=bf16", NULL));
    assert_string_equal(a.devices, "0:0,0:1");
    assert_int_equal(a.grad_compression, MPCL_GRAD_COMPRESSION_BF16);
    /* The MPI timeout: 300 s unless given; 0 is no limit. */
    assert_int_equal(a.dist_timeout, 300);
    assert_false(a.dist_timeout_set);
    assert_true(parse(&a, err, sizeof err, "--dist-timeout", "0", NULL));
    assert_int_equal(a.dist_timeout, 0);
    assert_true(a.dist_timeout_set);
}

/* Each rejected (flag, value): the message must name the flag and, where
 * there is one, the value. */
static void rejects(void **state) {
    (void)state;
    static const char *const bad[][2] = {
        {"--batch", "0"},
        {"--grad-compression", "fp8"},
        {"--dist-timeout", "-1"},
        {"--dist-timeout", "1.5"},
        {"--devices", ""},
        {"--batch", "-1"},
        {"--batch", "12abc"},
        {"--batch", ""},
        {"--batch", " 12"},
        {"--batch", "+12"},
        {"--batch", "1.5"},
        {"--batch", "99999999999999999999999"},
        {"--batch", "2000000"},
        {"--epochs", "0"},
        {"--epochs", "4294967296"},
        {"--report-every", "0"},
        {"--train-limit", "-5"},
        {"--seed", "18446744073709551616"},
        {"--seed", "-1"},
        {"--lr", "-1"},
        {"--lr", "nan"},
        {"--lr", "inf"},
        {"--lr", "-inf"},
        {"--lr", "1e39"},
        {"--lr", "1e-50"},
        {"--lr", "0.1x"},
        {"--lr", ""},
        {"--hidden", "128,,64"},
        {"--hidden", "0"},
        {"--hidden", ""},
        {"--hidden", "128,"},
        {"--hidden", ",128"},
        {"--hidden", "64,-1"},
        {"--hidden", "1,2,3,4,5,6,7,8"},
        {"--activation", "swish"},
        {"--lr-schedule", "step"},
        {"--lr-schedule", "Cosine"},
        {"--warmup-steps", "-1"},
        {"--warmup-steps", "9007199254740993"},
        {"--decay-steps", "0"},
        {"--decay-steps", "-10"},
        {"--lr-min-ratio", "1.5"},
        {"--lr-min-ratio", "-0.1"},
        {"--lr-min-ratio", "nan"},
        {"--activation", "identity"},
        {"--optimizer", "lamb"},
        {"--clip-norm", "0"},
        {"--clip-norm", "-1"},
        {"--clip-norm", "inf"},
        {"--momentum", "1.5"},
        {"--momentum", "-0.1"},
        {"--precision", "half"},
        {"--precision", "bf16"},
        {"--loss-scale", "banana"},
        {"--loss-scale", "0"},
        {"--loss-scale", "-8"},
        {"--loss-scale", "nan"},
        {"--initial-loss-scale", "0"},
        {"--initial-loss-scale", "inf"},
        {"--data", ""},
        {"--save", ""},
        {"--device", ""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        for (int form = 0; form < 2; form++) {
            train_args a;
            char err[512], joined[128];
            bool ok;
            if (form == 0) {
                ok = parse(&a, err, sizeof err, bad[i][0], bad[i][1], NULL);
            } else {
                snprintf(joined, sizeof joined, "%s=%s", bad[i][0], bad[i][1]);
                ok = parse(&a, err, sizeof err, joined, NULL);
            }
            if (ok || !strstr(err, bad[i][0]) || (bad[i][1][0] && !strstr(err, bad[i][1])))
                fail_msg("%s '%s' (form %d): ok=%d, message '%s'", bad[i][0], bad[i][1], form, ok,
                         err);
        }
    }
}

/* Every numeric flag reads numbers as plain decimal only: a '+', hex (also
 * hex floats), blanks, an exponent in a whole number, and "inf"/"nan" are
 * refused with the reason, never read as some other number. */
static void numbers_are_plain_decimal(void **state) {
    (void)state;
    static const char *const whole_flags[] = {
        "--epochs",  "--batch",      "--report-every", "--train-limit",  "--test-limit", "--seed",
        "--classes", "--save-every", "--hidden",       "--warmup-steps", "--decay-steps"};
    static const char *const real_flags[] = {
        "--lr",         "--momentum",           "--clip-norm",
        "--loss-scale", "--initial-loss-scale", "--lr-min-ratio"};
    static const char *const not_whole[] = {"+1", "0x10", "1e3", " 5", "5 ", "0x1p3", "inf", "1.0"};
    static const char *const not_real[] = {"+1",  "0x10", " 5",  "5 ", "0x1p3",
                                           "inf", "+inf", "nan", "1e", "0.5.1"};
    for (int kind = 0; kind < 2; kind++) {
        const char *const *flags = kind == 0 ? whole_flags : real_flags;
        size_t nflags = kind == 0 ? sizeof whole_flags / sizeof *whole_flags
                                  : sizeof real_flags / sizeof *real_flags;
        const char *const *values = kind == 0 ? not_whole : not_real;
        size_t nvalues =
            kind == 0 ? sizeof not_whole / sizeof *not_whole : sizeof not_real / sizeof *not_real;
        for (size_t f = 0; f < nflags; f++)
            for (size_t v = 0; v < nvalues; v++) {
                train_args a;
                char err[512];
                bool ok = parse(&a, err, sizeof err, "--optimizer", "sgd", "--save", "c.st",
                                flags[f], values[v], NULL);
                if (ok || !strstr(err, flags[f]) || !strstr(err, values[v]) ||
                    !strstr(err, "is not a plain decimal number"))
                    fail_msg("%s '%s': ok=%d, message '%s'", flags[f], values[v], ok, err);
            }
    }
    /* What stays accepted: plain decimal in every form the grammar allows. */
    train_args a;
    char err[512];
    assert_true(parse(&a, err, sizeof err, "--lr", "1e-3", "--clip-norm", ".5", "--loss-scale",
                      "1E3", "--batch", "007", NULL));
    assert_true(a.lr == 1e-3f && a.clip_norm == 0.5f && a.fixed_scale == 1000.0f);
    assert_int_equal(a.batch, 7);
}

/* The lr schedule's flags: constant by default; cosine with its steps and
 * ratio into the model params (decay steps 0 until given: the run's rest);
 * a decay flag without a decaying schedule is refused, naming it. */
static void schedule_flags(void **state) {
    (void)state;
    train_args a;
    char err[512];
    assert_true(parse(&a, err, sizeof err, NULL));
    mpcl_train_params p = train_args_to_params(&a);
    assert_int_equal(p.model.lr_schedule.kind, MPCL_LR_CONSTANT);
    assert_int_equal(p.model.lr_schedule.warmup_steps, 0);
    assert_int_equal(p.model.lr_schedule.decay_steps, 0);

    assert_true(parse(&a, err, sizeof err, "--lr-schedule", "cosine", "--warmup-steps=10",
                      "--lr-min-ratio", "0.1", NULL));
    p = train_args_to_params(&a);
    assert_int_equal(p.model.lr_schedule.kind, MPCL_LR_COSINE);
    assert_int_equal(p.model.lr_schedule.warmup_steps, 10);
    assert_int_equal(p.model.lr_schedule.decay_steps, 0);
    assert_true(p.model.lr_schedule.alpha == 0.1);
    assert_true(p.model.lr_schedule.warmup_from == 0.0);
    assert_true(parse(&a, err, sizeof err, "--lr-schedule", "cosine", "--decay-steps", "500",
                      "--lr-min-ratio", "1", NULL));
    p = train_args_to_params(&a);
    assert_int_equal(p.model.lr_schedule.decay_steps, 500);
    assert_true(p.model.lr_schedule.alpha == 1.0);
    /* Warm-up alone is a constant schedule's too. */
    assert_true(parse(&a, err, sizeof err, "--warmup-steps", "5", NULL));
    assert_int_equal(train_args_to_params(&a).model.lr_schedule.warmup_steps, 5);

    static const char *const decay_only[][2] = {{"--decay-steps", "100"},
                                                {"--lr-min-ratio", "0.5"}};
    for (size_t i = 0; i < 2; i++) {
        bool ok = parse(&a, err, sizeof err, decay_only[i][0], decay_only[i][1], NULL);
        if (ok || !strstr(err, decay_only[i][0]) || !strstr(err, decay_only[i][1]) ||
            !strstr(err, "--lr-schedule"))
            fail_msg("%s %s without cosine: ok=%d, message '%s'", decay_only[i][0],
                     decay_only[i][1], ok, err);
    }
}

/* --opt NAME=VALUE sets any hyperparameter the chosen kind declares, in any
 * order with --optimizer; --momentum and --nesterov are its spellings of
 * SGD's; the tool's SGD keeps momentum 0.9. Errors name the flag, the value,
 * the optimizer and what it takes. */
static void optimizer_settings_by_name(void **state) {
    (void)state;
    train_args a;
    char err[512];
    assert_true(parse(&a, err, sizeof err, "--opt", "beta_1=0.8", "--opt=epsilon=1e-8",
                      "--optimizer", "adam", "--lr", "0.5", NULL));
    mpcl_optim_params o = train_args_to_params(&a).model.optim;
    assert_true(o.beta1 == 0.8f && o.eps == 1e-8f && o.lr == 0.5f && o.beta2 == 0.999f);
    assert_true(parse(&a, err, sizeof err, "--optimizer", "sgd", NULL));
    o = train_args_to_params(&a).model.optim;
    assert_true(o.momentum == 0.9f && o.nesterov == 0);
    /* The last setting wins, whatever its spelling. */
    assert_true(parse(&a, err, sizeof err, "--optimizer", "sgd", "--momentum", "0.5", "--opt",
                      "momentum=0.25", "--opt", "nesterov=true", NULL));
    o = train_args_to_params(&a).model.optim;
    assert_true(o.momentum == 0.25f && o.nesterov == 1);
    /* decay_vectors: true unless set (every parameter decays, as Keras). */
    assert_true(parse(&a, err, sizeof err, "--optimizer", "adamw", NULL));
    assert_int_equal(train_args_to_params(&a).model.optim.decay_vectors, 1);
    assert_true(
        parse(&a, err, sizeof err, "--optimizer", "adamw", "--opt", "decay_vectors=false", NULL));
    assert_int_equal(train_args_to_params(&a).model.optim.decay_vectors, 0);

    const struct {
        const char *kind, *setting, *words[3];
    } bad[] = {
        {"sgd", "rho=0.5", {"--opt rho=0.5", "no hyperparameter 'rho'", "momentum, nesterov"}},
        {"sgd", "momentum=2", {"--opt momentum=2", "optimizer sgd", "[0, 1]"}},
        {"adam", "beta_2=1", {"--opt beta_2=1", "beta_2", "[0, 1)"}},
        {"adam", "epsilon=0x1", {"--opt epsilon=0x1", "plain decimal", "epsilon"}},
        {"adam", "nesterov=true", {"--opt nesterov=true", "adam", "--optimizer sgd"}},
        {"adam", "beta_1", {"--opt", "'beta_1'", "NAME=VALUE"}},
        {"adam", "=0.5", {"--opt", "'=0.5'", "NAME=VALUE"}},
        {"adamw", "decay_vectors=0", {"--opt decay_vectors=0", "'0'", "true or false"}},
        {"rmsprop",
         "decay_vectors=false",
         {"no hyperparameter 'decay_vectors'", "rmsprop", "--optimizer sgd, adam or adamw"}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bool ok =
            parse(&a, err, sizeof err, "--optimizer", bad[i].kind, "--opt", bad[i].setting, NULL);
        for (int w = 0; w < 3; w++)
            if (ok || !strstr(err, bad[i].words[w]))
                fail_msg("%s %s: ok=%d, '%s' lacks '%s'", bad[i].kind, bad[i].setting, ok, err,
                         bad[i].words[w]);
    }
}

static void rejects_structure(void **state) {
    (void)state;
    train_args a;
    char err[512];
    assert_false(parse(&a, err, sizeof err, "--frobnicate", NULL));
    assert_non_null(strstr(err, "--frobnicate"));
    assert_false(parse(&a, err, sizeof err, "--batchsize=3", NULL));
    assert_non_null(strstr(err, "--batchsize"));
    assert_false(parse(&a, err, sizeof err, "positional", NULL));
    assert_non_null(strstr(err, "positional"));
    assert_false(parse(&a, err, sizeof err, "--batch", NULL));
    assert_non_null(strstr(err, "--batch"));
    assert_false(parse(&a, err, sizeof err, "--json=yes", NULL));
    assert_non_null(strstr(err, "--json"));
    assert_false(
        parse(&a, err, sizeof err, "--loss-scale", "64", "--initial-loss-scale", "8", NULL));
    assert_non_null(strstr(err, "--initial-loss-scale"));
    assert_false(
        parse(&a, err, sizeof err, "--loss-scale", "off", "--initial-loss-scale", "8", NULL));
    assert_non_null(strstr(err, "--loss-scale off"));
    assert_false(parse(&a, err, sizeof err, "--momentum", "0.5", NULL));
    assert_non_null(strstr(err, "--optimizer sgd"));
    assert_false(parse(&a, err, sizeof err, "--nesterov", "--optimizer", "adamw", NULL));
    assert_non_null(strstr(err, "--nesterov"));
}

/* Names the writer cannot take are refused before training, naming the flag
 * and the limit: one byte beyond room for the temporary name (within the
 * file system's NAME_MAX) and one beyond NAME_MAX; the longest is taken. */
static void long_names(const char *dir) {
    long fs_limit = pathconf(dir, _PC_NAME_MAX);
    size_t longest = (size_t)fs_limit - MPCL_TEMP_SUFFIX_MAX;
    char name[1024], path[1200], err[512], limit[32];
    snprintf(limit, sizeof limit, "is %zu", longest);
    const size_t too_long[] = {longest + 1, (size_t)fs_limit + 1};
    for (size_t i = 0; i < 2; i++) {
        memset(name, 'p', too_long[i]);
        name[too_long[i]] = '\0';
        snprintf(path, sizeof path, "%s/%s", dir, name);
        assert_false(train_args_check_output_path("--plot", path, false, err, sizeof err));
        assert_non_null(strstr(err, "--plot"));
        assert_non_null(strstr(err, limit));
    }
    name[longest] = '\0';
    snprintf(path, sizeof path, "%s/%s", dir, name);
    assert_true(train_args_check_output_path("--plot", path, false, err, sizeof err));
}

static void output_paths(void **state) {
    (void)state;
    char dir[] = "/tmp/mpcl-train-args-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    assert_true(train_args_check_output_path("--save", path, false, err, sizeof err));
    assert_true(
        train_args_check_output_path("--save", "relative.safetensors", false, err, sizeof err));
    snprintf(path, sizeof path, "%s/missing/ck.safetensors", dir);
    assert_false(train_args_check_output_path("--save", path, false, err, sizeof err));
    assert_non_null(strstr(err, "--save"));
    assert_non_null(strstr(err, "missing"));
    /* The path itself a folder. */
    assert_false(train_args_check_output_path("--metrics", dir, false, err, sizeof err));
    assert_non_null(strstr(err, "--metrics"));
    /* A file where the folder should be. */
    snprintf(path, sizeof path, "%s/file", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(path, sizeof path, "%s/file/ck.safetensors", dir);
    assert_false(train_args_check_output_path("--save", path, false, err, sizeof err));
    long_names(dir);
    /* Nothing was created by any of the checks. */
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof path, "%s/file", dir);
    unlink(path);
    assert_int_equal(rmdir(dir), 0);
}

/* --classes, --save-every, --keep-going-on-nan, and which typed loss-scale
 * flags win over a resumed checkpoint. */
static void hardening_flags(void **state) {
    (void)state;
    train_args a;
    char err[512];
    assert_true(parse(&a, err, sizeof err, "--classes", "10", "--save", "c.st", "--save-every",
                      "25", "--keep-going-on-nan", NULL));
    mpcl_train_params p = train_args_to_params(&a);
    assert_int_equal(p.num_classes, 10);
    assert_true(p.keep_going_on_nan);
    assert_string_equal(p.save_path, "c.st");
    assert_int_equal(p.save_every_steps, 25);
    assert_int_equal(p.save_every_epochs, 0);
    assert_true(parse(&a, err, sizeof err, "--save=c.st", "--save-every=3e", NULL));
    p = train_args_to_params(&a);
    assert_int_equal(p.save_every_steps, 0);
    assert_int_equal(p.save_every_epochs, 3);
    assert_int_equal(p.num_classes, 0);
    assert_false(p.keep_going_on_nan);
    /* Without --save-every the library saves nothing during the run. */
    assert_true(parse(&a, err, sizeof err, "--save", "c.st", NULL));
    assert_null(train_args_to_params(&a).save_path);

    const char *bad[][2] = {{"--classes", "1"},    {"--classes", "257"},  {"--classes", "-3"},
                            {"--save-every", "0"}, {"--save-every", "e"}, {"--save-every", "2x"},
                            {"--save-every", "0e"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_false(parse(&a, err, sizeof err, "--save", "c.st", bad[i][0], bad[i][1], NULL));
        if (!strstr(err, bad[i][0]) || !strstr(err, bad[i][1]))
            fail_msg("%s %s: '%s' names neither", bad[i][0], bad[i][1], err);
    }
    assert_false(parse(&a, err, sizeof err, "--save-every", "5", NULL));
    assert_non_null(strstr(err, "--save-every needs --save"));

    /* Typed scales are kept over the checkpoint's; a typed mode alone is not a scale. */
    assert_true(parse(&a, err, sizeof err, "--loss-scale", "128", NULL));
    assert_true(train_args_to_params(&a).resume_keeps_scale);
    assert_true(parse(&a, err, sizeof err, "--initial-loss-scale", "64", NULL));
    assert_true(train_args_to_params(&a).resume_keeps_scale);
    assert_true(parse(&a, err, sizeof err, "--loss-scale", "dynamic", NULL));
    assert_false(train_args_to_params(&a).resume_keeps_scale);
    assert_true(parse(&a, err, sizeof err, NULL));
    assert_false(train_args_to_params(&a).resume_keeps_scale);
}

/* Non-regular paths are called what they are; aliases among the files are
 * refused, --save == --resume allowed; nothing is created. */
static void special_paths(void **state) {
    (void)state;
    char dir[] = "/tmp/mpcl-train-args-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char fifo[256], file[256], link[256], err[512];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(file, sizeof file, "%s/file.csv", dir);
    snprintf(link, sizeof link, "%s/link.csv", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    FILE *f = fopen(file, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(symlink(file, link), 0);

    assert_false(train_args_check_output_path("--save", fifo, false, err, sizeof err));
    assert_non_null(strstr(err, "is a FIFO, not a regular file"));
    assert_false(train_args_check_output_path("--metrics", link, true, err, sizeof err));
    assert_non_null(strstr(err, "is a symbolic link"));
    assert_true(train_args_check_output_path("--metrics", file, true, err, sizeof err));
    assert_false(train_args_check_input_path("--resume", fifo, err, sizeof err));
    assert_non_null(strstr(err, "--resume"));
    assert_non_null(strstr(err, "is a FIFO, not a regular file"));
    assert_false(train_args_check_input_path("--resume", dir, err, sizeof err));
    assert_non_null(strstr(err, "is a folder"));
    char absent[256];
    snprintf(absent, sizeof absent, "%s/absent", dir);
    assert_false(train_args_check_input_path("--resume", absent, err, sizeof err));
    assert_non_null(strstr(err, "No such file"));
    /* /proc/self takes no new files, even for root. */
    assert_false(train_args_check_output_path("--save", "/proc/self/ck.safetensors", false, err,
                                              sizeof err));
    assert_non_null(strstr(err, "cannot create files in folder '/proc/self'"));

    train_args a;
    train_args_defaults(&a);
    char rel[300];
    /* The same file through another spelling (existing: st_dev/st_ino). */
    snprintf(rel, sizeof rel, "%s/./file.csv", dir);
    a.metrics = file;
    a.resume = rel;
    assert_false(train_args_check_aliases(&a, err, sizeof err));
    assert_non_null(strstr(err, "--metrics"));
    assert_non_null(strstr(err, "--resume"));
    /* A file that does not exist yet: by resolved path. */
    char nf1[300], nf2[300];
    snprintf(nf1, sizeof nf1, "%s/new.csv", dir);
    snprintf(nf2, sizeof nf2, "%s/../%s/new.csv", dir, strrchr(dir, '/') + 1);
    a.resume = NULL;
    a.metrics = nf1;
    a.save = nf2;
    assert_false(train_args_check_aliases(&a, err, sizeof err));
    assert_non_null(strstr(err, "--save"));
    /* --save onto --resume: continuing in place is allowed. */
    a.metrics = NULL;
    a.save = file;
    a.resume = rel;
    assert_true(train_args_check_aliases(&a, err, sizeof err));

    assert_int_equal(access(nf1, F_OK), -1);
    unlink(link);
    unlink(file);
    unlink(fifo);
    assert_int_equal(rmdir(dir), 0);
}

/* The data flags reach the params: NPY files, the split, the loss. */
static void data_flags(void **state) {
    (void)state;
    train_args a;
    char err[512];
    assert_true(parse(&a, err, sizeof err, NULL));
    mpcl_train_params p = train_args_to_params(&a);
    assert_null(p.train_x);
    assert_true(p.validation_split == 0.0);
    assert_int_equal(p.model.loss, MPCL_LOSS_SPARSE_CATEGORICAL_CROSSENTROPY);
    assert_true(parse(&a, err, sizeof err, "--train-x", "x.npy", "--train-y=y.npy", "--val-x",
                      "vx.npy", "--val-y", "vy.npy", "--loss", "mse", NULL));
    p = train_args_to_params(&a);
    assert_string_equal(p.train_x, "x.npy");
    assert_string_equal(p.train_y, "y.npy");
    assert_string_equal(p.val_x, "vx.npy");
    assert_string_equal(p.val_y, "vy.npy");
    assert_int_equal(p.model.loss, MPCL_LOSS_MSE);
    assert_true(parse(&a, err, sizeof err, "--validation-split", "0.2", NULL));
    assert_true(train_args_to_params(&a).validation_split == 0.2);
    assert_false(parse(&a, err, sizeof err, "--validation-split", "nan", NULL));
    assert_non_null(strstr(err, "--validation-split: 'nan'"));
    assert_false(parse(&a, err, sizeof err, "--validation-split", "-0.1", NULL));
    assert_non_null(strstr(err, "must be between 0 and 1"));
    assert_false(parse(&a, err, sizeof err, "--val-y", "y.npy", NULL));
    assert_non_null(strstr(err, "--val-y needs --val-x"));
    assert_false(parse(&a, err, sizeof err, "--train-x", "", NULL));
    assert_non_null(strstr(err, "--train-x: empty value"));
}

static void gpt_flags(void **state) {
    (void)state;
    train_args a;
    char err[512];
    /* The GPT defaults where nothing is said. */
    assert_true(parse(&a, err, sizeof err, "--model", "gpt", NULL));
    assert_true(a.gpt);
    assert_null(a.model_file);
    mpcl_train_params p = train_args_to_params(&a);
    assert_int_equal(p.batch, 32);
    assert_int_equal(p.steps, 3000);
    assert_int_equal(p.eval_every, 250);
    assert_int_equal(p.eval_batches, 20);
    assert_int_equal(p.grad_accum, 1);
    assert_int_equal(a.gpt_vocab, 256);
    assert_int_equal(p.model.optim.kind, MPCL_OPTIM_ADAMW);
    assert_true(p.model.optim.weight_decay == 0.1f);
    assert_true(p.model.optim.beta2 == 0.95f);
    assert_false(p.model.optim.decay_vectors);
    assert_int_equal(p.model.lr_schedule.kind, MPCL_LR_COSINE);
    assert_int_equal(p.model.lr_schedule.warmup_steps, 100);
    assert_true(p.model.lr_schedule.alpha == 0.1);
    /* Flags given win over the defaults; a short run warms up a tenth. */
    assert_true(parse(&a, err, sizeof err, "--model=gpt", "--layers", "2", "--heads", "2", "--embd",
                      "32", "--context", "16", "--tokens", "t.bin", "--steps", "50", "--eval-every",
                      "10", "--eval-batches", "3", "--grad-accum", "4", "--batch", "8", "--opt",
                      "weight_decay=0.01", NULL));
    p = train_args_to_params(&a);
    assert_int_equal(a.gpt_layers, 2);
    assert_int_equal(a.gpt_heads, 2);
    assert_int_equal(a.gpt_embd, 32);
    assert_int_equal(a.gpt_context, 16);
    assert_int_equal(a.gpt_vocab, 50257);
    assert_string_equal(a.tokens_bin, "t.bin");
    assert_int_equal(p.batch, 8);
    assert_int_equal(p.steps, 50);
    assert_int_equal(p.eval_every, 10);
    assert_int_equal(p.eval_batches, 3);
    assert_int_equal(p.grad_accum, 4);
    assert_true(p.model.optim.weight_decay == 0.01f);
    assert_int_equal(p.model.lr_schedule.warmup_steps, 5);
    assert_true(parse(&a, err, sizeof err, "--model", "gpt", "--optimizer", "adam", "--lr-schedule",
                      "constant", NULL));
    p = train_args_to_params(&a);
    assert_int_equal(p.model.optim.kind, MPCL_OPTIM_ADAM);
    assert_int_equal(p.model.lr_schedule.kind, MPCL_LR_CONSTANT);
    /* Refusals, each naming the flag. */
    static const char *const bad[][4] = {
        {"--layers", "2", NULL, "--layers applies to --model gpt"},
        {"--model", "gpt", "--epochs", "--epochs does not apply to --model gpt"},
        {"--model", "gpt", "--hidden", "--hidden does not apply"},
        {"--model", "gpt", "--data", "--data does not apply"},
        {"--model", "gpt", "--heads=3", "--heads 3 does not divide --embd 128"},
        {"--model", "gpt", "--context=0", "--context"},
        {"--model", "gpt", "--steps=0", "--steps"},
        {"--model", "gpt", "--vocab=65537", "--vocab"},
        {"--model", "gpt", "--grad-accum=0", "--grad-accum"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *argv[6] = {
            "mpcl-train", (char *)bad[i][0], (char *)bad[i][1], (char *)bad[i][2], NULL, NULL};
        int argc = bad[i][2] ? 4 : 3;
        /* Flags that need a value get one. */
        if (bad[i][2] && !strchr(bad[i][2], '=')) argv[argc++] = "1";
        assert_false(train_args_parse(&a, argc, argv, err, sizeof err));
        if (!strstr(err, bad[i][3])) fail_msg("case %zu: '%s' lacks '%s'", i, err, bad[i][3]);
    }
    assert_false(
        parse(&a, err, sizeof err, "--model", "gpt", "--text", "a", "--tokens", "b", NULL));
    assert_non_null(strstr(err, "--tokens contradicts --text"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpt_flags),
        cmocka_unit_test(defaults),
        cmocka_unit_test(every_flag_both_spellings),
        cmocka_unit_test(rejects),
        cmocka_unit_test(rejects_structure),
        cmocka_unit_test(schedule_flags),
        cmocka_unit_test(optimizer_settings_by_name),
        cmocka_unit_test(numbers_are_plain_decimal),
        cmocka_unit_test(output_paths),
        cmocka_unit_test(hardening_flags),
        cmocka_unit_test(special_paths),
        cmocka_unit_test(data_flags),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
