/* libFuzzer harness: the checks mpcl_trainer_load makes on a checkpoint's
 * metadata and tensors (mpcl__checkpoint_check), against a real trainer.
 *
 * Init: tiny train/t10k IDX files (8 images of 2 x 2), a context on
 * $MPCL_DEVICE (PoCL in scripts/fuzz.sh), a float32 trainer 4-3-10 with
 * batch 4, and one checkpoint saved by it: the template.
 * Input: a mode byte, then
 *   mode even: metadata edits, NUL-separated key, value pairs applied to the
 *     template's metadata (a new key is added; a key starting with '!'
 *     removes the rest of it); the harness writes the header JSON with the
 *     template's tensors, so every input reaches the metadata checks;
 *   mode odd: a whole safetensors file image.
 * The check must pass or fail with MPCL_ERR_FORMAT. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "train/train_internal.h"

#define MAX_META 64

static mpcl_context *ctx;
static mpcl_trainer *tr;
static mpcl_safetensors *tmpl;

static void die(const char *what) {
    fprintf(stderr, "fuzz_checkpoint: %s: %s\n", what, mpcl_errmsg());
    abort();
}

static void write_idx_pair(const char *prefix) {
    char name[64];
    uint8_t img[16 + 8 * 4] = {0, 0, 8, 3, 0, 0, 0, 8, 0, 0, 0, 2, 0, 0, 0, 2};
    uint8_t lab[8 + 8] = {0, 0, 8, 1, 0, 0, 0, 8};
    for (int i = 0; i < 32; i++) img[16 + i] = (uint8_t)(i * 37);
    for (int i = 0; i < 8; i++) lab[8 + i] = (uint8_t)(i % 10);
    snprintf(name, sizeof name, "%s-images-idx3-ubyte", prefix);
    fuzz_write(name, img, sizeof img);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte", prefix);
    fuzz_write(name, lab, sizeof lab);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    write_idx_pair("train");
    write_idx_pair("t10k");
    if (mpcl_context_create(NULL, &ctx) != MPCL_OK) die("mpcl_context_create");
    mpcl_train_params p = mpcl_train_default_params();
    p.data_dir = fuzz_dir();
    p.batch = 4;
    p.epochs = 1;
    p.report_every = 0;
    p.model.hidden[0] = 3;
    p.model.hidden_count = 1;
    p.model.policy = MPCL_POLICY_FLOAT32;
    if (mpcl_trainer_create(ctx, &p, &tr) != MPCL_OK) die("mpcl_trainer_create");
    char path[512];
    snprintf(path, sizeof path, "%s/template.safetensors", fuzz_dir());
    if (mpcl_trainer_save(tr, path) != MPCL_OK) die("mpcl_trainer_save");
    if (mpcl_safetensors_read(path, &tmpl) != MPCL_OK) die("mpcl_safetensors_read");
    /* The template itself must pass, or the harness tests nothing. */
    if (mpcl__checkpoint_check(tr, tmpl, path) != MPCL_OK) die("the template checkpoint");
    /* For making seeds: MPCL_FUZZ_TEMPLATE_OUT=file keeps a copy. */
    const char *keep = getenv("MPCL_FUZZ_TEMPLATE_OUT");
    if (keep) {
        FILE *in = fopen(path, "rb"), *out = fopen(keep, "wb");
        int c;
        while (in && out && (c = getc(in)) != EOF) putc(c, out);
        if (!in || !out || fclose(out) != 0) perror("fuzz_checkpoint: MPCL_FUZZ_TEMPLATE_OUT");
        if (in) fclose(in);
    }
    return 0;
}

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static void put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = 2 * (b->n + n + 1);
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static void put_str(sbuf *b, const char *s) {
    put(b, s, strlen(s));
}

/* A JSON string; every byte outside printable ASCII as \u00XX, so that any
 * input is valid JSON (read back as Latin-1). */
static void put_json(sbuf *b, const char *s) {
    put_str(b, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        char e[8];
        if (*c < 0x20 || *c >= 0x7f || *c == '"' || *c == '\\') {
            snprintf(e, sizeof e, "\\u%04x", *c);
            put_str(b, e);
        } else {
            put(b, (const char *)c, 1);
        }
    }
    put_str(b, "\"");
}

/* The template's tensors with the metadata list (keys[i], values[i]). */
static unsigned char *image(const char **keys, const char **values, size_t nmeta, size_t *out_n) {
    sbuf h = {0};
    char num[96];
    uint64_t at = 0;
    put_str(&h, "{\"__metadata__\":{");
    for (size_t i = 0; i < nmeta; i++) {
        if (i) put_str(&h, ",");
        put_json(&h, keys[i]);
        put_str(&h, ":");
        put_json(&h, values[i]);
    }
    put_str(&h, "}");
    for (size_t i = 0; i < mpcl_safetensors_count(tmpl); i++) {
        const mpcl_st_tensor *t = mpcl_safetensors_tensor(tmpl, i);
        put_str(&h, ",");
        put_json(&h, t->name);
        put_str(&h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (size_t d = 0; d < t->ndim; d++) {
            snprintf(num, sizeof num, "%s%zu", d ? "," : "", t->shape[d]);
            put_str(&h, num);
        }
        snprintf(num, sizeof num, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at,
                 (unsigned long long)(at + t->bytes));
        put_str(&h, num);
        at += t->bytes;
    }
    put_str(&h, "}");
    size_t n = 8 + h.n + (size_t)at;
    unsigned char *img = calloc(1, n);
    if (!img) abort();
    for (int i = 0; i < 8; i++) img[i] = (unsigned char)((uint64_t)h.n >> (8 * i));
    memcpy(img + 8, h.p, h.n);
    free(h.p);
    *out_n = n;
    return img;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned char *img = NULL;
    size_t n = size - 1;
    const void *file = data + 1;
    char *copy = NULL;
    if (!(data[0] & 1)) {
        /* Edits as NUL-terminated strings: key, value, key, value... */
        copy = malloc(size);
        if (!copy) return 0;
        memcpy(copy, data + 1, size - 1);
        copy[size - 1] = '\0';
        const char *keys[MAX_META], *values[MAX_META];
        size_t nmeta = 0;
        for (size_t i = 0; i < mpcl_safetensors_meta_count(tmpl) && nmeta < MAX_META; i++) {
            keys[nmeta] = mpcl_safetensors_meta(tmpl, i)->key;
            values[nmeta++] = mpcl_safetensors_meta(tmpl, i)->value;
        }
        for (size_t i = 0; i < size - 1;) {
            const char *k = copy + i;
            i += strlen(k) + 1;
            const char *v = i < size - 1 ? copy + i : "";
            i += strlen(v) + 1;
            size_t j = 0;
            const char *match = k[0] == '!' ? k + 1 : k;
            while (j < nmeta && strcmp(keys[j], match) != 0) j++;
            if (k[0] == '!') {
                if (j < nmeta) {
                    keys[j] = keys[nmeta - 1];
                    values[j] = values[--nmeta];
                }
            } else if (j < nmeta) {
                values[j] = v;
            } else if (nmeta < MAX_META) {
                keys[nmeta] = k;
                values[nmeta++] = v;
            }
        }
        img = image(keys, values, nmeta, &n);
        file = img;
    }
    mpcl_safetensors *st = NULL;
    mpcl_status s = mpcl__safetensors_parse("fuzz.safetensors", file, n, &st);
    if (s == MPCL_OK) {
        s = mpcl__checkpoint_check(tr, st, "fuzz.safetensors");
        if (s != MPCL_OK && s != MPCL_ERR_FORMAT) abort();
    } else if (s != MPCL_ERR_FORMAT) {
        abort();
    }
    mpcl_safetensors_destroy(st);
    free(img);
    free(copy);
    return 0;
}
