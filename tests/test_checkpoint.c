/* Checkpoints: a round trip restores every parameter, moment, counter and the
 * loss-scale state; an independent reader (Python, stdlib only) finds the
 * names, shapes, values and metadata; every bad file is refused with its
 * exact status and leaves the trainer as it was; a failed save leaves an
 * earlier file byte-identical. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "testutil.h"

static volatile sig_atomic_t stop_flag;
static mpcl_context *g_ctx; /* for snap */
static uint64_t stop_at;

static void on_report(void *user, const mpcl_train_report *r) {
    (void)user;
    if (r->step == stop_at) stop_flag = 1;
}

/* 256 samples in batches of 64, stopped after 2 steps so that moments and
 * counters are non-zero and the position is mid-epoch; layers, when given,
 * in place of the MLP of one hidden layer. */
static mpcl_trainer *trained_model(mpcl_context *ctx, mpcl_policy policy, size_t hidden,
                                   const char *layers, bool train) {
    mpcl_train_params p = mpcl_train_default_params();
    p.train_limit = 256;
    p.test_limit = 64;
    p.batch = 64;
    p.epochs = 1;
    p.report_every = 1;
    p.model.hidden[0] = hidden;
    p.model.policy = policy;
    p.on_report = on_report;
    p.stop = &stop_flag;
    if (layers) TU_ASSERT_OK(mpcl_model_spec_parse(NULL, layers, &p.model));
    mpcl_trainer *tr = NULL;
    TU_ASSERT_OK(mpcl_trainer_create(ctx, &p, &tr));
    if (train) {
        stop_flag = 0;
        stop_at = 2;
        TU_ASSERT_OK(mpcl_trainer_fit(tr));
        stop_flag = 0;
    }
    return tr;
}

static mpcl_trainer *trained(mpcl_context *ctx, mpcl_policy policy, size_t hidden, bool train) {
    return trained_model(ctx, policy, hidden, NULL, train);
}

/* Everything load may write, as bytes. */
typedef struct snapshot {
    float *data;
    size_t n;
    uint32_t opt_step;
    mpcl_loss_scale_state ls;
    mpcl_train_summary sum;
} snapshot;

static void snap(mpcl_trainer *tr, snapshot *s) {
    mpcl_model *m = mpcl_trainer_model(tr);
    s->data = tu_model_state(m, &s->n);
    TU_ASSERT_OK(mpcl_model_read_step(m, &s->opt_step));
    memset(&s->ls, 0, sizeof s->ls);
    if (mpcl_model_loss_scale(m))
        TU_ASSERT_OK(mpcl_loss_scale_read(g_ctx, mpcl_model_loss_scale(m), &s->ls));
    mpcl_trainer_summary(tr, &s->sum);
}

static void same(const snapshot *a, const snapshot *b) {
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->data, b->data, a->n * sizeof(float));
    assert_int_equal(a->opt_step, b->opt_step);
    assert_memory_equal(&a->ls.scale, &b->ls.scale, sizeof(float));
    assert_int_equal(a->ls.good_steps, b->ls.good_steps);
    assert_int_equal(a->ls.skipped_steps, b->ls.skipped_steps);
    assert_int_equal(a->sum.steps, b->sum.steps);
    assert_int_equal(a->sum.epochs_done, b->sum.epochs_done);
}

static void unsnap(snapshot *s) {
    free(s->data);
}

typedef struct tmpdir {
    char path[64];
} tmpdir;

static void tmp_make(tmpdir *d) {
    snprintf(d->path, sizeof d->path, "/tmp/mpcl-test-ckpt-XXXXXX");
    assert_non_null(mkdtemp(d->path));
}

static void tmp_remove(tmpdir *d) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d->path);
    assert_int_equal(system(cmd), 0);
}

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

static void spit(const char *path, const void *b, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

static void round_trip(mpcl_policy policy) {
    mpcl_context *ctx = tu_context();
    g_ctx = ctx;
    tmpdir d;
    tmp_make(&d);
    char file[128];
    snprintf(file, sizeof file, "%s/a.safetensors", d.path);
    mpcl_trainer *a = trained(ctx, policy, 16, true);
    TU_ASSERT_OK(mpcl_trainer_save(a, file));
    snapshot sa, sb, sfresh;
    snap(a, &sa);
    assert_int_equal(sa.opt_step, 2);
    assert_int_equal(sa.sum.steps, 2);
    mpcl_trainer *b = trained(ctx, policy, 16, false);
    snap(b, &sfresh);
    assert_memory_not_equal(sa.data, sfresh.data, sa.n * sizeof(float));
    TU_ASSERT_OK(mpcl_trainer_load(b, file));
    snap(b, &sb);
    same(&sa, &sb);
    /* Both continue identically to the end of the epoch. */
    TU_ASSERT_OK(mpcl_trainer_fit(a));
    TU_ASSERT_OK(mpcl_trainer_fit(b));
    unsnap(&sa);
    unsnap(&sb);
    snap(a, &sa);
    snap(b, &sb);
    assert_int_equal(sa.sum.steps, 4);
    same(&sa, &sb);
    unsnap(&sa);
    unsnap(&sb);
    unsnap(&sfresh);
    mpcl_trainer_destroy(a);
    mpcl_trainer_destroy(b);
    tmp_remove(&d);
    mpcl_context_destroy(ctx);
}

static void test_round_trip_float32(void **state) {
    (void)state;
    round_trip(MPCL_POLICY_FLOAT32);
}

static void test_round_trip_mixed(void **state) {
    (void)state;
    round_trip(MPCL_POLICY_MIXED_FLOAT16);
}

static void test_round_trip_bfloat16(void **state) {
    (void)state;
    round_trip(MPCL_POLICY_MIXED_BFLOAT16);
}

/* An independent reader: Python's struct + json over the raw bytes. It checks
 * every tensor's name, dtype and shape, the metadata this test knows, and
 * the values of dense_1.bias against what the model holds. */
static void test_independent_reader(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    g_ctx = ctx;
    tmpdir d;
    tmp_make(&d);
    char file[128], script[128], cmd[512];
    snprintf(file, sizeof file, "%s/a.safetensors", d.path);
    snprintf(script, sizeof script, "%s/check.py", d.path);
    mpcl_trainer *tr = trained(ctx, MPCL_POLICY_MIXED_FLOAT16, 16, true);
    TU_ASSERT_OK(mpcl_trainer_save(tr, file));
    float bias[10];
    TU_ASSERT_OK(
        mpcl_model_read_param(mpcl_trainer_model(tr), 3, MPCL_OPTIM_SLOT_MASTER, bias, 10));
    FILE *f = fopen(script, "w");
    assert_non_null(f);
    fprintf(f,
            "import json, struct, sys\n"
            "b = open(sys.argv[1], 'rb').read()\n"
            "n = struct.unpack('<Q', b[:8])[0]\n"
            "h = json.loads(b[8:8 + n])\n"
            "data = b[8 + n:]\n"
            "meta = h.pop('__metadata__')\n"
            "want = {}\n"
            "for p, s in (('dense_0.kernel', [784, 16]), ('dense_0.bias', [16]),\n"
            "             ('dense_1.kernel', [16, 10]), ('dense_1.bias', [10])):\n"
            "    for suffix in ('', '.m', '.v'):\n"
            "        want[p + suffix] = s\n"
            "got = {k: v['shape'] for k, v in h.items()}\n"
            "assert got == want, got\n"
            "assert all(v['dtype'] == 'F32' for v in h.values())\n"
            "for k, v in {'format': 'mpcl-checkpoint', 'format_version': '1', 'layers': "
            "'input_shape=784; dense units=16 activation=relu use_bias=true; dense units=10 "
            "activation=linear use_bias=true', 'loss': 'sparse_categorical_crossentropy',\n"
            "             'rng_counter': '2', 'step': '2', 'optimizer_step': '2', 'epoch': '0', "
            "'epoch_step': '2',\n"
            "             'seed': '42', 'batch': '64', 'optimizer': 'adam', 'policy': "
            "'mixed_float16', 'storage': 'f16', 'loss_scale_mode': 'dynamic',\n"
            "             'loss_scale': '32768', 'loss_scale_good_steps': '2', "
            "'loss_scale_skipped': '0'}.items():\n"
            "    assert meta.get(k) == v, (k, meta.get(k))\n"
            "for k in ('mpcl_version', 'policy_resolved', 'gemm', 'lr', 'beta1', 'beta2', "
            "'eps'):\n"
            "    assert k in meta, k\n"
            "a, e = h['dense_1.bias']['data_offsets']\n"
            "vals = struct.unpack('<10f', data[a:e])\n"
            "want = [float.fromhex(x) for x in sys.argv[2:]]\n"
            "assert list(vals) == want, (vals, want)\n");
    fclose(f);
    int k = snprintf(cmd, sizeof cmd, "python3 '%s' '%s'", script, file);
    for (int i = 0; i < 10; i++)
        k += snprintf(cmd + k, sizeof cmd - (size_t)k, " %a", (double)bias[i]);
    assert_int_equal(system(cmd), 0);
    /* The checker can fail. */
    bias[3] += 1.0f;
    k = snprintf(cmd, sizeof cmd, "python3 '%s' '%s'", script, file);
    for (int i = 0; i < 10; i++)
        k += snprintf(cmd + k, sizeof cmd - (size_t)k, " %a", (double)bias[i]);
    assert_int_not_equal(system(cmd), 0);
    mpcl_trainer_destroy(tr);
    tmp_remove(&d);
    mpcl_context_destroy(ctx);
}

/* Rewrites src into dst through the library's writer, with one change:
 * tensor `drop` left out, tensor `f16` stored as F16, an extra tensor, a
 * metadata value replaced or a metadata key left out (as a file from before
 * that key). */
typedef struct mutation {
    const char *drop, *f16, *extra;
    const char *meta_key, *meta_value;
    const char *meta_drop;
    const char *poke; /* this tensor's element poke_index becomes poke_value */
    size_t poke_index;
    float poke_value;
} mutation;

static void rewrite(const char *src, const char *dst, const mutation *mu) {
    mpcl_safetensors *st = NULL;
    TU_ASSERT_OK(mpcl_safetensors_read(src, &st));
    size_t n = mpcl_safetensors_count(st), k = 0, nm = mpcl_safetensors_meta_count(st);
    mpcl_st_tensor *t = calloc(n + 1, sizeof *t);
    static uint16_t half[1 << 16];
    static float extra[4];
    for (size_t i = 0; i < n; i++) {
        const mpcl_st_tensor *x = mpcl_safetensors_tensor(st, i);
        if (mu->drop && strcmp(x->name, mu->drop) == 0) continue;
        t[k] = *x;
        static float poked[1 << 16];
        if (mu->poke && strcmp(x->name, mu->poke) == 0) {
            assert_true(x->bytes <= sizeof poked && mu->poke_index < x->bytes / 4);
            memcpy(poked, x->data, x->bytes);
            poked[mu->poke_index] = mu->poke_value;
            t[k].data = poked;
        }
        if (mu->f16 && strcmp(x->name, mu->f16) == 0) {
            t[k].dtype = MPCL_ST_F16;
            memset(half, 0x3c, x->bytes / 2);
            t[k].data = half;
        }
        k++;
    }
    if (mu->extra) {
        t[k].name = mu->extra;
        t[k].dtype = MPCL_ST_F32;
        t[k].ndim = 1;
        t[k].shape[0] = 4;
        t[k].data = extra;
        k++;
    }
    mpcl_st_meta *m = calloc(nm, sizeof *m);
    size_t km = 0;
    for (size_t i = 0; i < nm; i++) {
        m[km] = *mpcl_safetensors_meta(st, i);
        if (mu->meta_drop && strcmp(m[km].key, mu->meta_drop) == 0) continue;
        if (mu->meta_key && strcmp(m[km].key, mu->meta_key) == 0) m[km].value = mu->meta_value;
        km++;
    }
    assert_true(!mu->meta_drop || km == nm - 1);
    TU_ASSERT_OK(mpcl_safetensors_write(dst, t, k, m, km));
    free(t);
    free(m);
    mpcl_safetensors_destroy(st);
}

/* Values no run produces, in a well-formed file. */
static const struct {
    mutation mu;
    const char *says;
} POKES[] = {
    {{.poke = "dense_0.kernel", .poke_index = 3, .poke_value = NAN},
     "tensor dense_0.kernel holds nan at index 3"},
    {{.poke = "dense_1.bias.m", .poke_index = 0, .poke_value = INFINITY},
     "tensor dense_1.bias.m holds inf at index 0"},
    {{.poke = "dense_0.kernel.v", .poke_index = 5, .poke_value = -0.25f},
     "dense_0.kernel.v holds -0.25 at index 5"},
};

static void refused(mpcl_trainer *tr, const snapshot *before, const char *path, mpcl_status want,
                    const char *says) {
    mpcl_status st = mpcl_trainer_load(tr, path);
    if (st != want)
        fail_msg("%s: %s, want %s (%s)", path, mpcl_status_name(st), mpcl_status_name(want),
                 mpcl_errmsg());
    if (says && !strstr(mpcl_errmsg(), says))
        fail_msg("%s: message \"%s\" does not say \"%s\"", path, mpcl_errmsg(), says);
    snapshot after;
    snap(tr, &after);
    same(before, &after);
    unsnap(&after);
}

static void test_bad_checkpoints(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    g_ctx = ctx;
    tmpdir d;
    tmp_make(&d);
    char good[128], bad[128];
    snprintf(good, sizeof good, "%s/good.safetensors", d.path);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", d.path);
    mpcl_trainer *src = trained(ctx, MPCL_POLICY_FLOAT32, 16, true);
    TU_ASSERT_OK(mpcl_trainer_save(src, good));
    mpcl_trainer_destroy(src);

    /* The victim has trained differently (1 step), so a partial load shows. */
    stop_at = 1;
    mpcl_trainer *tr = trained(ctx, MPCL_POLICY_FLOAT32, 16, false);
    stop_flag = 0;
    TU_ASSERT_OK(mpcl_trainer_fit(tr));
    stop_flag = 0;
    snapshot before;
    snap(tr, &before);

    size_t n;
    unsigned char *bytes = slurp(good, &n);
    refused(tr, &before, "/nonexistent-mpcl/ckpt.safetensors", MPCL_ERR_IO, "nonexistent-mpcl");
    spit(bad, bytes, n / 2);
    refused(tr, &before, bad, MPCL_ERR_FORMAT, NULL); /* truncated */
    spit(bad, "this is not a safetensors file at all", 37);
    refused(tr, &before, bad, MPCL_ERR_FORMAT, NULL);
    {
        /* The data section's last offset moved past its end (same digit
         * count, so the header length stays right). */
        uint64_t hlen = 0;
        memcpy(&hlen, bytes, 8);
        char end[32];
        snprintf(end, sizeof end, ",%zu]", n - 8 - (size_t)hlen);
        unsigned char *copy = malloc(n);
        memcpy(copy, bytes, n);
        char *hdr = (char *)copy + 8, *hit = NULL;
        for (size_t i = 0; i + strlen(end) <= hlen && !hit; i++)
            if (memcmp(hdr + i, end, strlen(end)) == 0) hit = hdr + i;
        assert_non_null(hit);
        for (size_t i = 1; i + 1 < strlen(end); i++) hit[i] = '9';
        spit(bad, copy, n);
        free(copy);
        refused(tr, &before, bad, MPCL_ERR_FORMAT, NULL);
    }
    mutation mu;
    memset(&mu, 0, sizeof mu);
    mu.f16 = "dense_0.bias";
    rewrite(good, bad, &mu);
    refused(tr, &before, bad, MPCL_ERR_FORMAT, "F16");
    memset(&mu, 0, sizeof mu);
    mu.drop = "dense_1.kernel.v";
    rewrite(good, bad, &mu);
    refused(tr, &before, bad, MPCL_ERR_FORMAT, "dense_1.kernel.v");
    memset(&mu, 0, sizeof mu);
    mu.extra = "dense_9.kernel";
    rewrite(good, bad, &mu);
    refused(tr, &before, bad, MPCL_ERR_FORMAT, "dense_9.kernel");
    const char *bad_ints[] = {"12abc", "-1", "+2", " 2", "", "99999999999999999999999", "2.0"};
    for (size_t i = 0; i < sizeof bad_ints / sizeof *bad_ints; i++) {
        memset(&mu, 0, sizeof mu);
        mu.meta_key = "step";
        mu.meta_value = bad_ints[i];
        rewrite(good, bad, &mu);
        refused(tr, &before, bad, MPCL_ERR_FORMAT, "step");
    }
    /* One metadata value replaced: key, value, what the message must say. */
    const char *metas[][3] = {
        {"optimizer_step", "4294967296", "optimizer_step"}, /* 2^32: overflows the u32 counter */
        {"seed", "7", "--seed 7"},
        {"format", "something-else", "something-else"},
        {"epoch_step", "3", "inconsistent"}, /* step says 2 */
        {"loss_scale", "inf", "loss_scale"},
        /* Two steps, two applied: no room for a skipped one; a float32
         * run's scaler state is none, so good steps stay 0. */
        {"loss_scale_skipped", "1", "counters that cannot belong to one run"},
        {"loss_scale_good_steps", "1", "loss_scale_good_steps 1"},
        /* Another optimizer is named as such, before any tensor is compared. */
        {"optimizer", "sgd", "trained with optimizer sgd, this run uses adam"},
        /* Hyperparameters under mpcl_optim_params_check's rules. */
        {"lr", "-1", "lr -1"},
        {"beta1", "1.5", "beta1 1.5"},
        {"eps", "0", "eps 0"},
        {"weight_decay", "0x10", "weight_decay = \"0x10\""},
    };
    for (size_t i = 0; i < sizeof metas / sizeof *metas; i++) {
        memset(&mu, 0, sizeof mu);
        mu.meta_key = metas[i][0];
        mu.meta_value = metas[i][1];
        rewrite(good, bad, &mu);
        refused(tr, &before, bad, MPCL_ERR_FORMAT, metas[i][2]);
    }

    for (size_t i = 0; i < sizeof POKES / sizeof *POKES; i++) {
        mu = POKES[i].mu;
        rewrite(good, bad, &mu);
        refused(tr, &before, bad, MPCL_ERR_FORMAT, POKES[i].says);
    }
    /* A hidden-16 checkpoint into a hidden-32 model. */
    mpcl_trainer *wide = trained(ctx, MPCL_POLICY_FLOAT32, 32, false);
    snapshot wbefore;
    snap(wide, &wbefore);
    refused(wide, &wbefore, good, MPCL_ERR_FORMAT,
            "holds another model: input_shape=784; dense units=16");
    assert_non_null(strstr(mpcl_errmsg(), "this run's is input_shape=784; dense units=32"));
    assert_non_null(strstr(mpcl_errmsg(), "--hidden 16"));
    assert_non_null(strstr(mpcl_context_errmsg(ctx), "--hidden 16"));
    unsnap(&wbefore);
    mpcl_trainer_destroy(wide);

    /* The good file still loads into the victim. */
    TU_ASSERT_OK(mpcl_trainer_load(tr, good));

    /* A state with a non-finite weight is not saved over a good file. */
    size_t count = mpcl_model_param(mpcl_trainer_model(tr), 0)->count;
    float *w = malloc(count * sizeof *w);
    assert_non_null(w);
    TU_ASSERT_OK(
        mpcl_model_read_param(mpcl_trainer_model(tr), 0, MPCL_OPTIM_SLOT_MASTER, w, count));
    w[count - 1] = NAN;
    TU_ASSERT_OK(
        mpcl_model_write_param(mpcl_trainer_model(tr), 0, MPCL_OPTIM_SLOT_MASTER, w, count));
    free(w);
    assert_int_equal(mpcl_trainer_save(tr, good), MPCL_ERR_INVALID_ARG);
    assert_non_null(strstr(mpcl_errmsg(), "not saved: tensor dense_0.kernel holds nan"));
    size_t n2;
    unsigned char *after = slurp(good, &n2);
    assert_int_equal(n2, n);
    assert_memory_equal(after, bytes, n);
    free(after);
    unsnap(&before);
    free(bytes);
    mpcl_trainer_destroy(tr);
    tmp_remove(&d);
    mpcl_context_destroy(ctx);
}

/* A save into a missing folder is MPCL_ERR_IO naming it; a save that fails
 * while writing (file size limit) leaves the file it would replace
 * byte-identical. Runs as root too: RLIMIT_FSIZE binds root as well. */
static void test_failed_save(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    g_ctx = ctx;
    tmpdir d;
    tmp_make(&d);
    char file[128], missing[160];
    snprintf(file, sizeof file, "%s/a.safetensors", d.path);
    snprintf(missing, sizeof missing, "%s/no-such-folder/a.safetensors", d.path);
    mpcl_trainer *tr = trained(ctx, MPCL_POLICY_FLOAT32, 16, true);
    TU_ASSERT_OK(mpcl_trainer_save(tr, file));
    size_t n0, n1;
    unsigned char *b0 = slurp(file, &n0);
    assert_int_equal(mpcl_trainer_save(tr, missing), MPCL_ERR_IO);
    assert_non_null(strstr(mpcl_context_errmsg(ctx), "no-such-folder"));
    unsigned char *b1 = slurp(file, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(b0, b1, n0);
    free(b1);

    /* Train on so that a new save would differ, then fail it. */
    TU_ASSERT_OK(mpcl_trainer_fit(tr));
    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = 4096;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    mpcl_status st = mpcl_trainer_save(tr, file);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, prev);
    assert_int_equal(st, MPCL_ERR_IO);
    b1 = slurp(file, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(b0, b1, n0);
    /* No temp file left behind: the folder holds only a.safetensors. */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "test \"$(ls -A '%s')\" = a.safetensors", d.path);
    assert_int_equal(system(cmd), 0);
    free(b0);
    free(b1);
    mpcl_trainer_destroy(tr);
    tmp_remove(&d);
    mpcl_context_destroy(ctx);
}

/* mpcl_checkpoint_read alone: a good file gives the model to build and its
 * position, applies to that model and saves it again to the same bytes; each
 * bad file is refused, naming its key or tensor. */
static void read_refuses(const char *path, const char *says) {
    mpcl_checkpoint *c = (mpcl_checkpoint *)1;
    mpcl_status st = mpcl_checkpoint_read(path, &c);
    if (st != MPCL_ERR_FORMAT)
        fail_msg("%s (%s): %s, want MPCL_ERR_FORMAT (%s)", path, says, mpcl_status_name(st),
                 mpcl_errmsg());
    assert_null(c);
    if (!strstr(mpcl_errmsg(), says))
        fail_msg("message \"%s\" does not say \"%s\"", mpcl_errmsg(), says);
}

/* A model of c's params with c applied: its state is want's. */
static mpcl_model *applied(mpcl_context *ctx, const mpcl_checkpoint *c, const snapshot *want) {
    mpcl_model *m = NULL;
    TU_ASSERT_OK(mpcl_model_create(ctx, mpcl_checkpoint_model_params(c), &m));
    TU_ASSERT_OK(mpcl_checkpoint_apply(c, m));
    size_t n;
    float *data = tu_model_state(m, &n);
    assert_int_equal(n, want->n);
    assert_memory_equal(data, want->data, n * sizeof(float));
    free(data);
    return m;
}

static void test_checkpoint_reader(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    g_ctx = ctx;
    tmpdir d;
    tmp_make(&d);
    char good[128], bad[128], again[128];
    snprintf(good, sizeof good, "%s/good.safetensors", d.path);
    snprintf(bad, sizeof bad, "%s/bad.safetensors", d.path);
    snprintf(again, sizeof again, "%s/again.safetensors", d.path);
    mpcl_trainer *src = trained(ctx, MPCL_POLICY_MIXED_FLOAT16, 16, true);
    TU_ASSERT_OK(mpcl_trainer_save(src, good));
    snapshot ssrc;
    snap(src, &ssrc);

    mpcl_checkpoint *c = NULL;
    TU_ASSERT_OK(mpcl_checkpoint_read(good, &c));
    const mpcl_model_params *mp = mpcl_checkpoint_model_params(c);
    const mpcl_checkpoint_position *pos = mpcl_checkpoint_position_of(c);
    assert_int_equal(mp->inputs, 784);
    assert_int_equal(mp->layer_count, 2);
    assert_string_equal(mp->layers[0].kind, "dense");
    assert_int_equal(mp->layers[0].units, 16);
    assert_int_equal(mp->layers[0].activation, MPCL_ACT_RELU);
    assert_int_equal(mp->layers[1].units, 10);
    assert_int_equal(mp->layers[1].activation, MPCL_ACT_IDENTITY);
    assert_int_equal(mp->classes, 10);
    assert_int_equal(mp->max_batch, 64);
    assert_int_equal(mp->optim.kind, MPCL_OPTIM_ADAM);
    assert_int_equal(mp->optim.decay_vectors, 1);
    assert_int_equal(mp->policy, MPCL_POLICY_MIXED_FLOAT16);
    assert_int_equal(mp->loss_scaling, MPCL_LOSS_SCALING_ON);
    assert_int_equal(pos->step, 2);
    assert_int_equal(pos->optimizer_step, 2);
    assert_int_equal(pos->epoch_step, 2);
    assert_int_equal(pos->train_samples, 256);
    assert_true(pos->scaled);
    assert_true(pos->loss_scale.scale == ssrc.ls.scale);
    mpcl_model *m = applied(ctx, c, &ssrc);
    TU_ASSERT_OK(mpcl_checkpoint_save_model(c, m, again));
    size_t n1, n2;
    unsigned char *b1 = slurp(good, &n1), *b2 = slurp(again, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    free(b2);
    /* A state whose counters a load would refuse is not written. */
    TU_ASSERT_OK(mpcl_model_write_step(m, 3));
    assert_int_equal(mpcl_checkpoint_save_model(c, m, again), MPCL_ERR_INVALID_ARG);
    assert_non_null(strstr(mpcl_errmsg(), "optimizer_step 3"));
    b2 = slurp(again, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    free(b1);
    free(b2);
    mpcl_model_destroy(m);
    /* A model of another shape is not one to apply it to. */
    mpcl_model_params other = *mp;
    other.layers[0].units = 8;
    TU_ASSERT_OK(mpcl_model_create(ctx, &other, &m));
    assert_int_equal(mpcl_checkpoint_apply(c, m), MPCL_ERR_INVALID_ARG);
    assert_non_null(strstr(mpcl_errmsg(), "dense units=16"));
    assert_int_equal(mpcl_checkpoint_save_model(c, m, again), MPCL_ERR_INVALID_ARG);
    assert_int_equal(mpcl_checkpoint_apply(NULL, m), MPCL_ERR_INVALID_ARG);
    assert_int_equal(mpcl_checkpoint_save_model(c, NULL, again), MPCL_ERR_INVALID_ARG);
    mpcl_checkpoint *none = NULL;
    assert_int_equal(mpcl_checkpoint_read(NULL, &none), MPCL_ERR_INVALID_ARG);
    assert_null(none);
    mpcl_model_destroy(m);
    mpcl_checkpoint_destroy(c);

    const char *metas[][3] = {
        {"lr", "-1", "lr -1"},
        {"beta1", "1.5", "beta1 1.5"},
        {"eps", "0", "eps 0"},
        {"lr", "1e999", "lr = \"1e999\""},
        {"step", "+1", "step = \"+1\""},
        {"optimizer_step", "0x10", "optimizer_step = \"0x10\""},
        {"loss_scale", "+2", "loss_scale"},
        {"loss_scale_mode", "bogus", "loss_scale_mode \"bogus\""},
        {"loss_scale", "1e30", "loss_scale 1e+30 is outside"},
        {"epoch_step", "3", "inconsistent"},
        {"optimizer_step", "3", "inconsistent"},
        {"loss_scale_skipped", "1", "counters that cannot belong to one run"},
        {"batch", "0", "batch = \"0\""},
        {"layers",
         "input_shape=784; dense units=16 activation=swish use_bias=true; dense units=10 "
         "activation=linear use_bias=true",
         "activation=\"swish\""},
        {"layers",
         "input_shape=784; conv9 units=16 activation=relu use_bias=true; dense units=10 "
         "activation=linear use_bias=true",
         "unknown layer kind \"conv9\""},
        {"layers",
         "input_shape=784; dense units=16 units=3 activation=relu use_bias=true; dense units=10 "
         "activation=linear use_bias=true",
         "units given twice"},
        {"layers",
         "input_shape=28,28,1; dense units=16 activation=relu use_bias=true; dense units=10 "
         "activation=linear use_bias=true",
         "dense_0 takes a flat"},
        /* Dense per position, a label per position: classes is the last
         * dimension of (28, 10), and the tensors are not this model's. */
        {"layers",
         "input_shape=28,28; dense units=16 activation=relu use_bias=true; dense units=10 "
         "activation=linear use_bias=true",
         "dense_0.kernel has shape [784, 16]"},
        {"loss", "hinge", "loss = \"hinge\""},
        {"rng_counter", "-1", "rng_counter = \"-1\""},
        {"policy", "float64", "policy = \"float64\""},
        {"optimizer", "lion", "optimizer = \"lion\""},
        {"layers",
         "input_shape=784; dense units=+16 activation=relu use_bias=true; dense units=10 "
         "activation=linear use_bias=true",
         "units=\"+16\""},
        {"layers",
         "input_shape=784; dense units=17 activation=relu use_bias=true; dense units=10 "
         "activation=linear use_bias=true",
         "dense_0.kernel has shape [784, 16]"},
        {"layers",
         "input_shape=784; dense units=16 activation=softmax use_bias=true; dense units=10 "
         "activation=linear use_bias=true",
         "softmax is an output activation: only the last layer"},
        {"format", "other", "other"},
    };
    mutation mu;
    for (size_t i = 0; i < sizeof metas / sizeof *metas; i++) {
        memset(&mu, 0, sizeof mu);
        mu.meta_key = metas[i][0];
        mu.meta_value = metas[i][1];
        rewrite(good, bad, &mu);
        read_refuses(bad, metas[i][2]);
    }
    for (size_t i = 0; i < sizeof POKES / sizeof *POKES; i++) {
        mu = POKES[i].mu;
        rewrite(good, bad, &mu);
        read_refuses(bad, POKES[i].says);
    }
    memset(&mu, 0, sizeof mu);
    mu.drop = "dense_1.bias.v";
    rewrite(good, bad, &mu);
    read_refuses(bad, "no tensor dense_1.bias.v");
    memset(&mu, 0, sizeof mu);
    mu.extra = "dense_5.bias";
    rewrite(good, bad, &mu);
    read_refuses(bad, "holds tensor dense_5.bias");

    /* decay_vectors as written: 1, the default (checked above). A file from
     * before the key, or before clip_norm, has the defaults; 0 reads back as
     * 0; any other value is refused naming it. */
    const mutation read_as[] = {{.meta_drop = "decay_vectors"},
                                {.meta_drop = "clip_norm"},
                                {.meta_key = "decay_vectors", .meta_value = "0"}};
    const int want_decay_vectors[] = {1, 1, 0};
    for (size_t i = 0; i < sizeof read_as / sizeof *read_as; i++) {
        rewrite(good, bad, &read_as[i]);
        TU_ASSERT_OK(mpcl_checkpoint_read(bad, &c));
        assert_int_equal(mpcl_checkpoint_model_params(c)->optim.decay_vectors,
                         want_decay_vectors[i]);
        assert_true(mpcl_checkpoint_model_params(c)->optim.clip_norm == 0.0f);
        mpcl_checkpoint_destroy(c);
    }
    memset(&mu, 0, sizeof mu);
    mu.meta_key = "decay_vectors";
    mu.meta_value = "2";
    rewrite(good, bad, &mu);
    read_refuses(bad, "decay_vectors = \"2\"");

    unsnap(&ssrc);
    mpcl_trainer_destroy(src);
    tmp_remove(&d);
    mpcl_context_destroy(ctx);
}

/* The output activation the loss applies (softmax with the cross-entropy)
 * is recorded as declared and read back so; the model that trains is the
 * same as with a linear output, so each resumes from the other's file (a
 * file from before output activations were recorded has the linear one). */
static void test_output_activation_recorded(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    g_ctx = ctx;
    tmpdir d;
    tmp_make(&d);
    char softmax[128], linear[128];
    snprintf(softmax, sizeof softmax, "%s/softmax.safetensors", d.path);
    snprintf(linear, sizeof linear, "%s/linear.safetensors", d.path);
    mpcl_trainer *src = trained_model(
        ctx, MPCL_POLICY_FLOAT32, 16,
        "input_shape=784; dense units=16 activation=relu; dense units=10 activation=softmax", true);
    TU_ASSERT_OK(mpcl_trainer_save(src, softmax));
    snapshot ssrc;
    snap(src, &ssrc);

    mpcl_checkpoint *c = NULL;
    TU_ASSERT_OK(mpcl_checkpoint_read(softmax, &c));
    const mpcl_model_params *mp = mpcl_checkpoint_model_params(c);
    assert_int_equal(mp->layer_count, 2);
    assert_int_equal(mp->layers[1].activation, MPCL_ACT_SOFTMAX);
    assert_int_equal(mpcl_model_output_activation(mp), MPCL_ACT_SOFTMAX);
    mpcl_model_destroy(applied(ctx, c, &ssrc));
    mpcl_checkpoint_destroy(c);
    /* The loss decides whether the layers may end in softmax. */
    mutation mu = {.meta_key = "loss", .meta_value = "mse"};
    rewrite(softmax, linear, &mu);
    read_refuses(linear, "loss mse does not read a softmax output");

    /* A run that declares the output linear resumes from it, and the other
     * way round. */
    mpcl_trainer *lin = trained(ctx, MPCL_POLICY_FLOAT32, 16, false);
    TU_ASSERT_OK(mpcl_trainer_load(lin, softmax));
    snapshot slin;
    snap(lin, &slin);
    same(&ssrc, &slin);
    TU_ASSERT_OK(mpcl_trainer_save(lin, linear));
    TU_ASSERT_OK(mpcl_trainer_load(src, linear));
    unsnap(&slin);
    unsnap(&ssrc);
    mpcl_trainer_destroy(lin);
    mpcl_trainer_destroy(src);
    tmp_remove(&d);
    mpcl_context_destroy(ctx);
}

/* A model of MPCL_MAX_LAYERS (64) dense layers, 128 rows (more than the
 * 64 rows and 32 layers the limits once were): it builds, trains two steps
 * and its checkpoint resumes bit for bit. A 65th layer is refused by name. */
static void test_many_layers_round_trip(void **state) {
    (void)state;
    mpcl_context *ctx = tu_context();
    g_ctx = ctx;
    tmpdir d;
    tmp_make(&d);
    char file[128], text[MPCL_MODEL_SPEC_MAX];
    snprintf(file, sizeof file, "%s/deep.safetensors", d.path);
    size_t n = (size_t)snprintf(text, sizeof text, "input_shape=784");
    for (int l = 0; l + 1 < MPCL_MAX_LAYERS; l++)
        n += (size_t)snprintf(text + n, sizeof text - n, "; dense units=8 activation=tanh");
    snprintf(text + n, sizeof text - n, "; dense units=10");
    mpcl_trainer *a = trained_model(ctx, MPCL_POLICY_FLOAT32, 16, text, true);
    mpcl_model *m = mpcl_trainer_model(a);
    assert_int_equal(mpcl_model_layer_count(m), 64);
    assert_int_equal(mpcl_model_param_count(m), 128);
    assert_string_equal(mpcl_model_param_name(m, 127), "dense_63.bias");
    TU_ASSERT_OK(mpcl_trainer_save(a, file));
    snapshot sa, sb;
    snap(a, &sa);
    assert_int_equal(sa.opt_step, 2);
    mpcl_trainer *b = trained_model(ctx, MPCL_POLICY_FLOAT32, 16, text, false);
    TU_ASSERT_OK(mpcl_trainer_load(b, file));
    snap(b, &sb);
    same(&sa, &sb);
    unsnap(&sa);
    unsnap(&sb);
    mpcl_trainer_destroy(a);
    mpcl_trainer_destroy(b);

    mpcl_model_params p = mpcl_model_default_params();
    snprintf(text + n, sizeof text - n, "; dense units=8; dense units=10");
    tu_expect_error(mpcl_model_spec_parse(NULL, text, &p), MPCL_ERR_INVALID_ARG,
                    "model spec: more than 64 layers");
    tmp_remove(&d);
    mpcl_context_destroy(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_float32),
        cmocka_unit_test(test_round_trip_mixed),
        cmocka_unit_test(test_independent_reader),
        cmocka_unit_test(test_bad_checkpoints),
        cmocka_unit_test(test_failed_save),
        cmocka_unit_test(test_round_trip_bfloat16),
        cmocka_unit_test(test_checkpoint_reader),
        cmocka_unit_test(test_output_activation_recorded),
        cmocka_unit_test(test_many_layers_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
