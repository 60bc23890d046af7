/* GPT-2 Hugging Face folders (mpcl/gpt2_folder.h): the folder transformers
 * itself wrote (tests/data/gpt2-tiny, made by bench/make_gpt2_fixture.py)
 * against PyTorch's reference values, write -> read bit for bit, F16 and
 * BF16 weights, names with and without the prefix, every bad folder with the
 * tensor or key its message must name, and the writer's folder rules.
 * MPCL_GPT2_WRITE_TO=FOLDER keeps the fixture as mpcl writes it there, for
 * `bench/make_gpt2_fixture.py check FOLDER`. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "testutil.h"
#include "io/io.h"
#include "io/json.h"

static char tmp[64];

static int group_setup(void **state) {
    (void)state;
    return tu_tmpdir_make(tmp, "gpt2");
}

static int group_teardown(void **state) {
    (void)state;
    return tu_tmpdir_remove(tmp);
}

/* "<tmp>/<name>" (a fresh name per call site). */
static const char *tmp_path(char buf[256], const char *name) {
    snprintf(buf, 256, "%s/%s", tmp, name);
    return buf;
}

static void spit(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

static bool exists(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0;
}

/* Entries of a folder other than . and .. */
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* ---- a tiny model, and folders made from it with edits ---- */

static const mpcl_gpt2_config TINY = {2, 2, 8, 16, 32, 1e-5};

/* Exactly representable in F16 and BF16 (at most 7 significant bits). */
static float tiny_value(size_t i) {
    return (float)((int)((i * 37) % 101) - 50) / 64.0f;
}

static mpcl_gpt2_weights *tiny_weights(void) {
    mpcl_gpt2_weights *w = NULL;
    TU_ASSERT_OK(mpcl_gpt2_weights_new(&TINY, &w));
    for (size_t i = 0; i < w->total; i++) w->data[i] = tiny_value(i);
    return w;
}

static const char TINY_CONFIG[] =
    "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_head\": 2, "
    "\"n_embd\": 8, \"n_positions\": 16, \"n_ctx\": 16, "
    "\"vocab_size\": 32, \"activation_function\": \"gelu_new\"}";

/* Edits to the tiny folder, for the cases below. */
typedef struct edits {
    const char *config;      /* config.json's text; NULL: TINY_CONFIG */
    bool bare;               /* names without "transformer." */
    int half;                /* parameters stored as 0 F32, 1 F16, 2 BF16 */
    const char *drop;        /* canonical name left out */
    const char *unprefix;    /* canonical name written without the prefix */
    const char *transpose;   /* canonical name written with its dims swapped */
    const char *as_i32;      /* canonical name written as I32 */
    mpcl_st_tensor extra[3]; /* written as given */
} edits;

/* The tiny weights as a folder `name` under tmp, with the edits; its path
 * into folder. */
static void make_folder(char folder[256], const char *name, const mpcl_gpt2_weights *w,
                        const edits *e) {
    tmp_path(folder, name);
    assert_true(mkdir(folder, 0777) == 0 || errno == EEXIST);
    char path[320];
    snprintf(path, sizeof path, "%s/config.json", folder);
    spit(path, e->config ? e->config : TINY_CONFIG);
    mpcl_st_tensor ts[64];
    char names[64][64];
    uint16_t *halves = malloc(w->total * sizeof *halves);
    assert_non_null(halves);
    size_t n = 0;
    for (size_t i = 0; i < w->count; i++) {
        const mpcl_gpt2_tensor *t = &w->tensors[i];
        if (e->drop && strcmp(e->drop, t->name) == 0) continue;
        bool bare = e->bare || (e->unprefix && strcmp(e->unprefix, t->name) == 0);
        snprintf(names[n], sizeof names[n], "%s%s", bare ? "" : "transformer.", t->name);
        mpcl_st_tensor *s = &ts[n++];
        *s = (mpcl_st_tensor){.name = names[n - 1],
                              .dtype = MPCL_ST_F32,
                              .ndim = t->ndim,
                              .shape = {t->shape[0], t->shape[1]},
                              .data = t->data};
        if (e->half) {
            for (size_t k = 0; k < t->count; k++)
                halves[t->offset + k] =
                    e->half == 1 ? mpcl_f32_to_f16(t->data[k]) : mpcl_f32_to_bf16(t->data[k]);
            s->dtype = e->half == 1 ? MPCL_ST_F16 : MPCL_ST_BF16;
            s->data = halves + t->offset;
        }
        if (e->transpose && strcmp(e->transpose, t->name) == 0) {
            s->shape[0] = t->shape[1];
            s->shape[1] = t->shape[0];
        }
        if (e->as_i32 && strcmp(e->as_i32, t->name) == 0) s->dtype = MPCL_ST_I32;
    }
    for (size_t i = 0; i < 3 && e->extra[i].name; i++) ts[n++] = e->extra[i];
    snprintf(path, sizeof path, "%s/model.safetensors", folder);
    mpcl_st_meta meta = {"format", "pt"};
    TU_ASSERT_OK(mpcl_safetensors_write(path, ts, n, &meta, 1));
    free(halves);
}

static void expect_same(const mpcl_gpt2_weights *a, const mpcl_gpt2_weights *b) {
    assert_memory_equal(&a->config, &b->config, sizeof a->config);
    assert_int_equal(a->count, b->count);
    assert_int_equal(a->total, b->total);
    for (size_t i = 0; i < a->count; i++) {
        assert_string_equal(a->tensors[i].name, b->tensors[i].name);
        assert_int_equal(a->tensors[i].offset, b->tensors[i].offset);
    }
    assert_memory_equal(a->data, b->data, a->total * sizeof(float));
}

/* Reads the folder and expects it to fail with status and needle. */
static void expect_read_fail(const char *folder, mpcl_status want, const char *needle) {
    mpcl_gpt2_weights *w = (mpcl_gpt2_weights *)1;
    tu_expect_error(mpcl_gpt2_folder_read(folder, &w), want, needle);
    assert_null(w);
}

/* ---- the folder transformers wrote ---- */

static const char *source_root(void) {
    const char *root = getenv("MPCL_SOURCE_ROOT");
    if (!root) fail_msg("MPCL_SOURCE_ROOT is not set (meson test sets it)");
    return root;
}

/* Every tensor of tests/data/gpt2-tiny against PyTorch's shape, sum and
 * elements (tests/data/gpt2-tiny.reference.json), in canonical order. */
static void reads_transformers_folder(void **state) {
    (void)state;
    char folder[512], ref[512];
    snprintf(folder, sizeof folder, "%s/tests/data/gpt2-tiny", source_root());
    snprintf(ref, sizeof ref, "%s/tests/data/gpt2-tiny.reference.json", source_root());
    mpcl_gpt2_weights *w = NULL;
    TU_ASSERT_OK(mpcl_gpt2_folder_read(folder, &w));
    mpcl__json *doc = NULL;
    TU_ASSERT_OK(mpcl__json_read_file(ref, 1 << 20, &doc));
    const mpcl__json_value *cfg = mpcl__json_member(mpcl__json_root(doc), "config");
    assert_int_equal(w->config.n_layer, mpcl__json_number(mpcl__json_member(cfg, "n_layer")));
    assert_int_equal(w->config.n_head, mpcl__json_number(mpcl__json_member(cfg, "n_head")));
    assert_int_equal(w->config.n_embd, mpcl__json_number(mpcl__json_member(cfg, "n_embd")));
    assert_int_equal(w->config.n_positions,
                     mpcl__json_number(mpcl__json_member(cfg, "n_positions")));
    assert_int_equal(w->config.vocab_size, mpcl__json_number(mpcl__json_member(cfg, "vocab_size")));
    assert_true(w->config.layer_norm_epsilon ==
                mpcl__json_number(mpcl__json_member(cfg, "layer_norm_epsilon")));
    const mpcl__json_value *tensors = mpcl__json_member(mpcl__json_root(doc), "tensors");
    assert_int_equal(mpcl__json_count(tensors), w->count);
    for (size_t i = 0; i < w->count; i++) {
        const mpcl_gpt2_tensor *t = &w->tensors[i];
        /* PyTorch's state_dict order is the canonical order. */
        assert_string_equal(mpcl__json_key_at(tensors, i), t->name);
        const mpcl__json_value *r = mpcl__json_at(tensors, i);
        const mpcl__json_value *shape = mpcl__json_member(r, "shape");
        assert_int_equal(mpcl__json_count(shape), t->ndim);
        for (size_t d = 0; d < t->ndim; d++)
            assert_int_equal(mpcl__json_number(mpcl__json_at(shape, d)), t->shape[d]);
        double sum = 0, mag = 0;
        for (size_t k = 0; k < t->count; k++) {
            sum += (double)t->data[k];
            mag += fabs((double)t->data[k]);
        }
        double want = mpcl__json_number(mpcl__json_member(r, "sum"));
        if (fabs(sum - want) > 1e-12 * mag)
            fail_msg("%s: sum %.17g, PyTorch %.17g", t->name, sum, want);
        const mpcl__json_value *el = mpcl__json_member(r, "elements");
        for (size_t k = 0; k < mpcl__json_count(el); k++) {
            const mpcl__json_value *pair = mpcl__json_at(el, k);
            size_t at = (size_t)mpcl__json_number(mpcl__json_at(pair, 0));
            assert_true(at < t->count);
            if ((double)t->data[at] != mpcl__json_number(mpcl__json_at(pair, 1)))
                fail_msg("%s[%zu] is %.9g; PyTorch has %.9g", t->name, at, (double)t->data[at],
                         mpcl__json_number(mpcl__json_at(pair, 1)));
        }
        assert_ptr_equal(mpcl_gpt2_weights_find(w, t->name), t);
    }
    mpcl__json_free(doc);

    /* Written back (MPCL_GPT2_WRITE_TO keeps it for the transformers check)
     * and read again: the same. */
    const char *keep = getenv("MPCL_GPT2_WRITE_TO");
    char out[256];
    if (!keep) keep = tmp_path(out, "fixture-back");
    TU_ASSERT_OK(mpcl_gpt2_folder_write(keep, w));
    mpcl_gpt2_weights *back = NULL;
    TU_ASSERT_OK(mpcl_gpt2_folder_read(keep, &back));
    expect_same(w, back);
    mpcl_gpt2_weights_destroy(back);
    mpcl_gpt2_weights_destroy(w);
}

/* ---- round trips ---- */

static void writes_and_reads_back_bit_for_bit(void **state) {
    (void)state;
    mpcl_gpt2_config c = {3, 4, 12, 10, 7, 3.0e-6};
    mpcl_gpt2_weights *w = NULL;
    TU_ASSERT_OK(mpcl_gpt2_weights_new(&c, &w));
    assert_int_equal(w->count, 4 + 12 * 3);
    tu_rng r = tu_rng_make(tu_seed(__func__));
    for (size_t i = 0; i < w->total; i++) {
        uint32_t bits = (uint32_t)(tu_uniform(&r, 0, 4294967295.0));
        if ((bits & 0x7f800000u) == 0x7f800000u) bits ^= 0x40000000u; /* no NaN or inf */
        memcpy(&w->data[i], &bits, 4);
    }
    char folder[256];
    TU_ASSERT_OK(mpcl_gpt2_folder_write(tmp_path(folder, "roundtrip"), w));
    mpcl_gpt2_weights *back = NULL;
    TU_ASSERT_OK(mpcl_gpt2_folder_read(folder, &back));
    expect_same(w, back);
    assert_true(back->config.layer_norm_epsilon == 3.0e-6);

    /* What transformers needs, in the files themselves. */
    char path[320];
    snprintf(path, sizeof path, "%s/config.json", folder);
    mpcl__json *doc = NULL;
    TU_ASSERT_OK(mpcl__json_read_file(path, 1 << 20, &doc));
    const mpcl__json_value *root = mpcl__json_root(doc);
    assert_string_equal(
        mpcl__json_string(mpcl__json_at(mpcl__json_member(root, "architectures"), 0), NULL),
        "GPT2LMHeadModel");
    assert_string_equal(mpcl__json_string(mpcl__json_member(root, "model_type"), NULL), "gpt2");
    assert_string_equal(mpcl__json_string(mpcl__json_member(root, "activation_function"), NULL),
                        "gelu_new");
    assert_string_equal(mpcl__json_number_text(mpcl__json_member(root, "n_ctx")), "10");
    assert_string_equal(mpcl__json_number_text(mpcl__json_member(root, "layer_norm_epsilon")),
                        "3e-06");
    assert_true(mpcl__json_number(mpcl__json_member(root, "attn_pdrop")) == 0.1);
    mpcl__json_free(doc);
    snprintf(path, sizeof path, "%s/model.safetensors", folder);
    mpcl_safetensors *st = NULL;
    TU_ASSERT_OK(mpcl_safetensors_read(path, &st));
    assert_string_equal(mpcl_safetensors_meta_get(st, "format"), "pt");
    assert_int_equal(mpcl_safetensors_count(st), w->count);
    const mpcl_st_tensor *t = mpcl_safetensors_find(st, "transformer.h.2.mlp.c_proj.weight");
    assert_non_null(t);
    assert_int_equal(t->dtype, MPCL_ST_F32);
    assert_int_equal(t->shape[0], 48);
    assert_int_equal(t->shape[1], 12);
    mpcl_safetensors_destroy(st);
    mpcl_gpt2_weights_destroy(back);
    mpcl_gpt2_weights_destroy(w);
}

static void reads_f16_bf16_and_bare_names(void **state) {
    (void)state;
    mpcl_gpt2_weights *w = tiny_weights();
    char folder[256];
    for (int half = 0; half <= 2; half++)
        for (int bare = 0; bare <= 1; bare++) {
            char name[32];
            snprintf(name, sizeof name, "half%d-bare%d", half, bare);
            make_folder(folder, name, w, &(edits){.half = half, .bare = bare});
            mpcl_gpt2_weights *back = NULL;
            TU_ASSERT_OK(mpcl_gpt2_folder_read(folder, &back));
            expect_same(w, back);
            mpcl_gpt2_weights_destroy(back);
        }
    /* Values known by their bits: 1, -2, the smallest subnormal, the largest
     * finite (F16); 1, -pi rounded, the smallest subnormal (BF16). */
    const uint16_t f16[] = {0x3c00, 0xc000, 0x0001, 0x7bff};
    const float f16_want[] = {1.0f, -2.0f, 0x1p-24f, 65504.0f};
    const uint16_t bf16[] = {0x3f80, 0xc049, 0x0001};
    const float bf16_want[] = {1.0f, -3.140625f, 0x1p-133f};
    const uint16_t *bits[] = {f16, bf16};
    const float *want[] = {f16_want, bf16_want};
    size_t n[] = {4, 3};
    for (int k = 0; k < 2; k++) {
        uint16_t ln_f[8] = {0};
        memcpy(ln_f, bits[k], n[k] * sizeof *ln_f);
        edits e = {.drop = "ln_f.weight"};
        e.extra[0] = (mpcl_st_tensor){.name = "transformer.ln_f.weight",
                                      .dtype = k ? MPCL_ST_BF16 : MPCL_ST_F16,
                                      .ndim = 1,
                                      .shape = {8},
                                      .data = ln_f};
        make_folder(folder, k ? "bf16-bits" : "f16-bits", w, &e);
        mpcl_gpt2_weights *back = NULL;
        TU_ASSERT_OK(mpcl_gpt2_folder_read(folder, &back));
        const float *got = mpcl_gpt2_weights_find(back, "ln_f.weight")->data;
        for (size_t i = 0; i < n[k]; i++) assert_true(got[i] == want[k][i]);
        mpcl_gpt2_weights_destroy(back);
    }
    mpcl_gpt2_weights_destroy(w);
}

/* The mask buffers older transformers saved are ignored; lm_head.weight is
 * accepted only as wte's copy. */
static void buffers_and_lm_head(void **state) {
    (void)state;
    mpcl_gpt2_weights *w = tiny_weights();
    const mpcl_gpt2_tensor *wte = mpcl_gpt2_weights_find(w, "wte.weight");
    uint8_t mask[16 * 16] = {1};
    float masked = -1e4f;
    edits e = {0};
    e.extra[0] = (mpcl_st_tensor){.name = "transformer.h.0.attn.bias",
                                  .dtype = MPCL_ST_U8,
                                  .ndim = 4,
                                  .shape = {1, 1, 16, 16},
                                  .data = mask};
    e.extra[1] = (mpcl_st_tensor){.name = "transformer.h.1.attn.masked_bias",
                                  .dtype = MPCL_ST_F32,
                                  .ndim = 0,
                                  .data = &masked};
    e.extra[2] = (mpcl_st_tensor){.name = "lm_head.weight",
                                  .dtype = MPCL_ST_F32,
                                  .ndim = 2,
                                  .shape = {32, 8},
                                  .data = wte->data};
    char folder[256];
    make_folder(folder, "buffers", w, &e);
    mpcl_gpt2_weights *back = NULL;
    TU_ASSERT_OK(mpcl_gpt2_folder_read(folder, &back));
    expect_same(w, back);
    mpcl_gpt2_weights_destroy(back);

    /* A buffer of a layer the config does not have is unknown. */
    e.extra[0].name = "transformer.h.2.attn.bias";
    make_folder(folder, "buffer-layer2", w, &e);
    expect_read_fail(folder, MPCL_ERR_FORMAT, "'transformer.h.2.attn.bias' is not a parameter");

    /* An untied head: one element differs. */
    float head[32 * 8];
    memcpy(head, wte->data, sizeof head);
    head[77] += 1.0f;
    e.extra[0].name = "transformer.h.0.attn.bias";
    e.extra[2].data = head;
    make_folder(folder, "untied", w, &e);
    expect_read_fail(folder, MPCL_ERR_FORMAT,
                     "'lm_head.weight' differs from wte.weight at element 77");
    e.extra[2].shape[0] = 31;
    make_folder(folder, "head-shape", w, &e);
    expect_read_fail(folder, MPCL_ERR_FORMAT, "'lm_head.weight' has shape [31, 8]");
    mpcl_gpt2_weights_destroy(w);
}

/* ---- bad folders ---- */

static void refuses_bad_tensors(void **state) {
    (void)state;
    mpcl_gpt2_weights *w = tiny_weights();
    char folder[256];
    float one = 1.0f;
    const struct {
        const char *name;
        edits e;
        const char *needle;
    } cases[] = {
        {"missing",
         {.drop = "h.1.mlp.c_fc.bias"},
         "'transformer.h.1.mlp.c_fc.bias' is missing (config.json: n_layer 2)"},
        {"missing-bare", {.bare = true, .drop = "wpe.weight"}, "'wpe.weight' is missing"},
        {"transposed",
         {.transpose = "h.0.attn.c_attn.weight"},
         "'transformer.h.0.attn.c_attn.weight' has shape [24, 8]; config.json's sizes (n_embd 8, "
         "vocab_size 32, n_positions 16) make it [8, 24]"},
        {"mixed",
         {.unprefix = "h.1.ln_2.bias"},
         "'h.1.ln_2.bias' is named without the 'transformer.' prefix, the tensors before it "
         "with it"},
        {"i32", {.as_i32 = "ln_f.bias"}, "'transformer.ln_f.bias' is I32; mpcl reads F32, F16"},
        {"extra",
         {.extra = {{.name = "transformer.h.0.attn.c_attn.lora",
                     .dtype = MPCL_ST_F32,
                     .ndim = 1,
                     .shape = {1},
                     .data = &one}}},
         "'transformer.h.0.attn.c_attn.lora' is not a parameter of GPT-2"},
        {"leading-zero",
         {.extra = {{.name = "transformer.h.01.ln_1.weight",
                     .dtype = MPCL_ST_F32,
                     .ndim = 1,
                     .shape = {1},
                     .data = &one}}},
         "'transformer.h.01.ln_1.weight' is not a parameter"},
        /* The config says 3 layers, the file has 2: the first missing. */
        {"config-layers",
         {.config = "{\"n_layer\": 3, \"n_head\": 2, \"n_embd\": 8, \"n_positions\": 16, "
                    "\"vocab_size\": 32}"},
         "'transformer.h.2.ln_1.weight' is missing (config.json: n_layer 3)"},
        {"config-layers-fewer",
         {.config = "{\"n_layer\": 1, \"n_head\": 2, \"n_embd\": 8, \"n_positions\": 16, "
                    "\"vocab_size\": 32}"},
         "'transformer.h.1.ln_1.weight' is not a parameter of GPT-2 with config.json's sizes "
         "(n_layer 1)"},
        {"config-vocab",
         {.config = "{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8, \"n_positions\": 16, "
                    "\"vocab_size\": 33}"},
         "'transformer.wte.weight' has shape [32, 8]; config.json's sizes (n_embd 8, vocab_size "
         "33, n_positions 16) make it [33, 8]"},
        {"config-embd",
         {.config = "{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 4, \"n_positions\": 16, "
                    "\"vocab_size\": 32}"},
         "'transformer.wte.weight' has shape [32, 8]"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        make_folder(folder, cases[i].name, w, &cases[i].e);
        expect_read_fail(folder, MPCL_ERR_FORMAT, cases[i].needle);
        /* Every message names the file. */
        char file[320];
        snprintf(file, sizeof file, "'%s/model.safetensors'", folder);
        expect_read_fail(folder, MPCL_ERR_FORMAT, file);
    }
    mpcl_gpt2_weights_destroy(w);
}

/* The child of checks_before_allocating: 0 when the read fails for the
 * missing tensor (not for memory). */
static int read_huge_config(void *folder) {
    mpcl_gpt2_weights *w = NULL;
    mpcl_status st = mpcl_gpt2_folder_read(folder, &w);
    if (st != MPCL_ERR_FORMAT ||
        !strstr(mpcl_errmsg(), "'transformer.h.2.ln_1.weight' is missing")) {
        fprintf(stderr, "got %s: %s\n", mpcl_status_name(st), mpcl_errmsg());
        return 1;
    }
    return 0;
}

/* A config of 16777215 layers (58 GB of weights) beside a file of two: the
 * file is checked against the config before anything of the config's size
 * is allocated, so the read fails for the missing layer within 64 MiB. */
static void checks_before_allocating(void **state) {
    (void)state;
    mpcl_gpt2_weights *w = tiny_weights();
    char folder[256];
    make_folder(folder, "huge-config", w,
                &(edits){.config = "{\"n_layer\": 16777215, \"n_head\": 2, \"n_embd\": 8, "
                                   "\"n_positions\": 16, \"vocab_size\": 32}"});
    bool limited;
    assert_int_equal(tu_run_memory_limited((size_t)64 << 20, read_huge_config, folder, &limited),
                     0);
    mpcl_gpt2_weights_destroy(w);
}

static void refuses_missing_files(void **state) {
    (void)state;
    char folder[256], path[320];
    tmp_path(folder, "no-files");
    assert_int_equal(mkdir(folder, 0777), 0);
    snprintf(path, sizeof path, "%s/config.json", folder);
    expect_read_fail(folder, MPCL_ERR_IO, path);
    spit(path, TINY_CONFIG);
    snprintf(path, sizeof path, "%s/model.safetensors", folder);
    expect_read_fail(folder, MPCL_ERR_IO, path);
}

/* config.json: each case fails naming the key. */
static void refuses_bad_configs(void **state) {
    (void)state;
#define SIZES "\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8, \"n_positions\": 16"
    const struct {
        const char *text, *needle;
    } cases[] = {
        {"[1]", "the config is an array, not an object"},
        {"{\"n_head\": 2, \"n_embd\": 8, \"n_positions\": 16, \"vocab_size\": 32}",
         "n_layer is missing"},
        {"{" SIZES "}", "vocab_size is missing"},
        {"{" SIZES ", \"vocab_size\": 0}", "vocab_size is 0; it must be a whole number from 1"},
        {"{\"n_layer\": 0, \"n_head\": 2, \"n_embd\": 8, \"n_positions\": 16, \"vocab_size\": 3}",
         "line 1, column 2: n_layer is 0"},
        {"{\"n_layer\": \"2\", \"n_head\": 2, \"n_embd\": 8, \"n_positions\": 16, "
         "\"vocab_size\": 3}",
         "n_layer is a string"},
        {"{\"n_layer\": 2.5, \"n_head\": 2, \"n_embd\": 8, \"n_positions\": 16, "
         "\"vocab_size\": 3}",
         "n_layer is 2.5"},
        {"{\"n_layer\": -1, \"n_head\": 2, \"n_embd\": 8, \"n_positions\": 16, "
         "\"vocab_size\": 3}",
         "n_layer is -1"},
        {"{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8, \"n_positions\": 16777217, "
         "\"vocab_size\": 3}",
         "n_positions is 16777217"},
        {"{\"n_layer\": 2, \"n_head\": 3, \"n_embd\": 8, \"n_positions\": 16, \"vocab_size\": 3}",
         "'cfg.json': n_embd 8 is not a multiple of n_head 3"},
        {"{" SIZES ", \"vocab_size\": 3, \"model_type\": \"llama\"}",
         "model_type is \"llama\"; mpcl's GPT-2 needs \"gpt2\""},
        {"{" SIZES ", \"vocab_size\": 3, \"n_ctx\": 8}",
         "n_ctx is 8 but n_positions is 16; they must agree"},
        {"{" SIZES ", \"vocab_size\": 3, \"activation_function\": \"relu\"}",
         "activation_function is \"relu\"; mpcl's GPT-2 needs \"gelu_new\" or "
         "\"gelu_pytorch_tanh\""},
        {"{" SIZES ", \"vocab_size\": 3, \"activation_function\": null}",
         "activation_function is null"},
        {"{" SIZES ", \"vocab_size\": 3, \"n_inner\": 16}",
         "n_inner is 16; mpcl's GPT-2 needs null or 4 n_embd (32)"},
        {"{" SIZES ", \"vocab_size\": 3, \"tie_word_embeddings\": false}",
         "tie_word_embeddings is false; mpcl's GPT-2 needs true"},
        {"{" SIZES ", \"vocab_size\": 3, \"scale_attn_by_inverse_layer_idx\": true}",
         "scale_attn_by_inverse_layer_idx is true"},
        {"{" SIZES ", \"vocab_size\": 3, \"layer_norm_epsilon\": 0}", "layer_norm_epsilon is 0"},
        {"{" SIZES ", \"vocab_size\": 3, \"layer_norm_epsilon\": \"1e-5\"}",
         "layer_norm_epsilon is a string"},
        {"{\"n_layer\": 16777216, \"n_head\": 1, \"n_embd\": 16777216, \"n_positions\": 1, "
         "\"vocab_size\": 1}",
         "'cfg.json': the weights (5.67e+22 floats) do not fit in memory"},
        {"{" SIZES ", \"vocab_size\": 3,}", "line 1, column"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mpcl_gpt2_config c = {0};
        mpcl_status st =
            mpcl__gpt2_config_parse("cfg.json", cases[i].text, strlen(cases[i].text), &c);
        tu_expect_error(st, MPCL_ERR_FORMAT, cases[i].needle);
        tu_expect_error(st, MPCL_ERR_FORMAT, "'cfg.json'");
        assert_int_equal(c.n_layer, 0);
    }
    /* Accepted: unknown keys, the other name of the activation, defaults. */
    const char ok[] = "{" SIZES
                      ", \"vocab_size\": 3, \"activation_function\": "
                      "\"gelu_pytorch_tanh\", \"n_inner\": null, \"use_cache\": true, "
                      "\"n_ctx\": 16, \"future\": {\"x\": [1]}}";
    mpcl_gpt2_config c;
    TU_ASSERT_OK(mpcl__gpt2_config_parse("cfg.json", ok, strlen(ok), &c));
    assert_int_equal(c.n_layer, 2);
    assert_int_equal(c.n_head, 2);
    assert_int_equal(c.n_embd, 8);
    assert_int_equal(c.n_positions, 16);
    assert_int_equal(c.vocab_size, 3);
    assert_true(c.layer_norm_epsilon == 1e-5);
#undef SIZES
}

static void checks_configs_and_names(void **state) {
    (void)state;
    mpcl_gpt2_config c = TINY;
    TU_ASSERT_OK(mpcl_gpt2_config_check(&c));
    c.n_head = 3;
    tu_expect_error(mpcl_gpt2_config_check(&c), MPCL_ERR_INVALID_ARG,
                    "n_embd 8 is not a multiple of n_head 3");
    c = TINY;
    c.n_layer = 0;
    tu_expect_error(mpcl_gpt2_config_check(&c), MPCL_ERR_INVALID_ARG, "n_layer is 0");
    c = TINY;
    c.layer_norm_epsilon = NAN;
    tu_expect_error(mpcl_gpt2_config_check(&c), MPCL_ERR_INVALID_ARG, "layer_norm_epsilon");
    mpcl_gpt2_weights *w = (mpcl_gpt2_weights *)1;
    tu_expect_error(mpcl_gpt2_weights_new(&c, &w), MPCL_ERR_INVALID_ARG, "layer_norm_epsilon");
    assert_null(w);

    w = tiny_weights();
    assert_int_equal(w->count, 28);
    assert_int_equal(w->total, 32 * 8 + 16 * 8 + 2 * (12 * 8 * 8 + 13 * 8) + 2 * 8);
    const char *names[] = {"wte.weight",
                           "wpe.weight",
                           "h.0.ln_1.weight",
                           "h.0.ln_1.bias",
                           "h.0.attn.c_attn.weight",
                           "h.0.attn.c_attn.bias",
                           "h.0.attn.c_proj.weight",
                           "h.0.attn.c_proj.bias",
                           "h.0.ln_2.weight",
                           "h.0.ln_2.bias",
                           "h.0.mlp.c_fc.weight",
                           "h.0.mlp.c_fc.bias",
                           "h.0.mlp.c_proj.weight",
                           "h.0.mlp.c_proj.bias"};
    const size_t shapes[][2] = {{32, 8}, {16, 8}, {8, 1}, {8, 1},  {8, 24}, {24, 1}, {8, 8},
                                {8, 1},  {8, 1},  {8, 1}, {8, 32}, {32, 1}, {32, 8}, {8, 1}};
    size_t offset = 0;
    for (size_t i = 0; i < 14; i++) {
        const mpcl_gpt2_tensor *t = &w->tensors[i];
        assert_string_equal(t->name, names[i]);
        assert_int_equal(t->shape[0], shapes[i][0]);
        assert_int_equal(t->shape[1], shapes[i][1]);
        assert_int_equal(t->ndim, shapes[i][1] == 1 ? 1 : 2);
        assert_int_equal(t->offset, offset);
        assert_ptr_equal(t->data, w->data + offset);
        assert_ptr_equal(mpcl_gpt2_weights_find(w, names[i]), t);
        offset += t->count;
    }
    assert_string_equal(w->tensors[14].name, "h.1.ln_1.weight");
    assert_string_equal(w->tensors[27].name, "ln_f.bias");
    assert_ptr_equal(mpcl_gpt2_weights_find(w, "ln_f.weight"), &w->tensors[26]);
    assert_null(mpcl_gpt2_weights_find(w, "h.2.ln_1.weight"));
    assert_null(mpcl_gpt2_weights_find(w, "h.01.ln_1.weight"));
    assert_null(mpcl_gpt2_weights_find(w, "transformer.wte.weight"));
    assert_null(mpcl_gpt2_weights_find(w, "h.0.attn.bias"));
    mpcl_gpt2_weights_destroy(w);
}

/* ---- the writer's folder rules ---- */

static void writer_folder_rules(void **state) {
    (void)state;
    mpcl_gpt2_weights *w = tiny_weights();
    char folder[256], path[320];
    int before;

    /* An empty folder is filled; a missing parent is refused, leaving nothing. */
    tmp_path(folder, "empty");
    assert_int_equal(mkdir(folder, 0777), 0);
    TU_ASSERT_OK(mpcl_gpt2_folder_write(folder, w));
    assert_int_equal(count_entries(folder), 2);
    tmp_path(folder, "no-parent/out");
    tu_expect_error(mpcl_gpt2_folder_write(folder, w), MPCL_ERR_IO, "no-parent");
    assert_false(exists(tmp_path(path, "no-parent")));

    /* "out/" is the folder out, made whole beside it like any other. */
    before = count_entries(tmp);
    TU_ASSERT_OK(mpcl_gpt2_folder_write(tmp_path(folder, "slash/"), w));
    assert_int_equal(count_entries(tmp_path(path, "slash")), 2);
    assert_int_equal(count_entries(tmp), before + 1);
    mpcl_gpt2_weights *back = NULL;
    TU_ASSERT_OK(mpcl_gpt2_folder_read(folder, &back));
    expect_same(w, back);
    mpcl_gpt2_weights_destroy(back);

    /* A folder with anything else, or a file, is refused and left as it was. */
    tmp_path(folder, "notes");
    assert_int_equal(mkdir(folder, 0777), 0);
    snprintf(path, sizeof path, "%s/notes.txt", folder);
    spit(path, "mine");
    tu_expect_error(mpcl_gpt2_folder_write(folder, w), MPCL_ERR_IO, "it exists and is not empty");
    assert_int_equal(count_entries(folder), 1);
    snprintf(path, sizeof path, "%s/config.json", folder);
    spit(path, "{\"model_type\": \"bert\"}");
    tu_expect_error(mpcl_gpt2_folder_write(folder, w), MPCL_ERR_IO, folder);
    assert_int_equal(count_entries(folder), 2);
    tu_expect_error(mpcl_gpt2_folder_write(path, w), MPCL_ERR_IO, "a regular file");

    /* A GPT-2 folder: its two files replaced, the tokenizer beside them kept. */
    make_folder(folder, "existing", w, &(edits){.bare = true});
    snprintf(path, sizeof path, "%s/tokenizer.json", folder);
    spit(path, "{}");
    w->data[5] = 42.0f;
    TU_ASSERT_OK(mpcl_gpt2_folder_write(folder, w));
    assert_int_equal(count_entries(folder), 3);
    TU_ASSERT_OK(mpcl_gpt2_folder_read(folder, &back));
    expect_same(w, back);
    mpcl_gpt2_weights_destroy(back);

    /* A killed writer's temporary folder goes at the next write; no temporary
     * folder stays behind a finished one. */
    before = count_entries(tmp);
    tmp_path(path, "fresh.tmp-2147483646-1");
    assert_int_equal(mkdir(path, 0777), 0);
    char inner[400];
    snprintf(inner, sizeof inner, "%s/model.safetensors", path);
    spit(inner, "partial");
    assert_int_equal(kill(2147483646, 0), -1);
    TU_ASSERT_OK(mpcl_gpt2_folder_write(tmp_path(folder, "fresh"), w));
    assert_false(exists(path));
    assert_int_equal(count_entries(tmp), before + 1);

    /* Weights that are not their config's are refused before anything. */
    w->tensors[3].shape[0] = 7;
    tu_expect_error(mpcl_gpt2_folder_write(tmp_path(folder, "bad-weights"), w),
                    MPCL_ERR_INVALID_ARG, "tensor 3 is 'h.0.ln_1.bias' [7]");
    assert_false(exists(folder));
    mpcl_gpt2_weights_destroy(w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(reads_transformers_folder),
        cmocka_unit_test(writes_and_reads_back_bit_for_bit),
        cmocka_unit_test(reads_f16_bf16_and_bare_names),
        cmocka_unit_test(buffers_and_lm_head),
        cmocka_unit_test(refuses_bad_tensors),
        cmocka_unit_test(checks_before_allocating),
        cmocka_unit_test(refuses_missing_files),
        cmocka_unit_test(refuses_bad_configs),
        cmocka_unit_test(checks_configs_and_names),
        cmocka_unit_test(writer_folder_rules),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
