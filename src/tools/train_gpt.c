/* mpcl-train --model gpt (train_gpt.h). */
#define _POSIX_C_SOURCE 200809L
#include "train_gpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mpcl/bpe.h"
#include "mpcl/gpt.h"

static bool fail(char *err, size_t size, const char *flag, const char *path, const char *why) {
    snprintf(err, size, "%s %s: %s", flag, path, why);
    return false;
}

/* <dir>/<name> exists (as anything). */
static bool has_file(const char *dir, const char *name, char *path, size_t size) {
    struct stat st;
    snprintf(path, size, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

/* The bytes of the text as GPT-2's BPE ids, into a new stream; false with
 * the reason in err. */
static bool bpe_tokens(const char *dir, const mpcl_tokens *bytes, size_t vocab, mpcl_tokens **out,
                       char *err, size_t size) {
    char vpath[4096], mpath[4096];
    has_file(dir, "vocab.json", vpath, sizeof vpath);
    has_file(dir, "merges.txt", mpath, sizeof mpath);
    mpcl_bpe *b = NULL;
    size_t n = mpcl_tokens_count(bytes), count = 0;
    const uint16_t *ids = mpcl_tokens_ids(bytes);
    unsigned char *text = malloc(n);
    uint16_t *enc = malloc(n * sizeof *enc);
    bool ok = text && enc;
    if (!ok) snprintf(err, size, "out of memory for the text's %zu bytes", n);
    for (size_t i = 0; ok && i < n; i++) text[i] = (unsigned char)ids[i];
    ok = ok && mpcl_bpe_load(vpath, mpath, &b) == MPCL_OK &&
         mpcl_bpe_encode(b, text, n, enc, n, &count) == MPCL_OK &&
         mpcl_tokens_from_memory(mpcl_tokens_name(bytes), enc, count, vocab, out) == MPCL_OK;
    if (!ok && text && enc) snprintf(err, size, "%s", mpcl_errmsg());
    free(text);
    free(enc);
    mpcl_bpe_destroy(b);
    return ok;
}

/* The corpus as the model's tokens. */
static bool read_corpus(const train_args *a, train_gpt *g, char *err, size_t size) {
    const char *flag = a->tokens_bin ? "--tokens" : "--text";
    const char *path = a->tokens_bin ? a->tokens_bin : a->text ? a->text : MPCL_TOKENS_DEFAULT_DIR;
    size_t vocab = g->config.vocab_size;
    if (a->tokens_bin) {
        if (mpcl_tokens_read_bin(path, vocab, &g->tokens) == MPCL_OK) return true;
        return fail(err, size, flag, path, mpcl_errmsg());
    }
    mpcl_tokens *bytes = NULL;
    if (mpcl_tokens_read_text(path, &bytes) != MPCL_OK) {
        snprintf(err, size, "%s %s: %s%s", flag, path, mpcl_errmsg(),
                 !a->text ? " (the default corpus is Debian's fortunes package: "
                            "scripts/setup.sh installs it, or give --text FILE|DIR)"
                          : "");
        return false;
    }
    char vpath[4096], mpath[4096];
    g->bpe = a->init_from && has_file(a->init_from, "vocab.json", vpath, sizeof vpath) &&
             has_file(a->init_from, "merges.txt", mpath, sizeof mpath);
    if (g->bpe) {
        char why[1024];
        bool ok = bpe_tokens(a->init_from, bytes, vocab, &g->tokens, why, sizeof why);
        mpcl_tokens_destroy(bytes);
        if (!ok)
            snprintf(err, size, "--text %s through --init-from %s's BPE: %s", path, a->init_from,
                     why);
        return ok;
    }
    if (vocab < MPCL_TOKENS_BYTE_VOCAB) {
        mpcl_tokens_destroy(bytes);
        snprintf(err, size,
                 "--text %s gives byte tokens (256 values), more than the vocabulary of %zu%s",
                 path, vocab,
                 a->init_from ? " of --init-from, which has no vocab.json and merges.txt for "
                                "GPT-2's BPE"
                              : ": give --vocab 256 or more");
        return false;
    }
    g->tokens = bytes;
    return true;
}

bool train_gpt_setup(const train_args *a, train_gpt *g, mpcl_train_params *p, char *err,
                     size_t size) {
    memset(g, 0, sizeof *g);
    /* A path the folder writer would refuse is refused before training. */
    struct stat st;
    if (a->save_hf && lstat(a->save_hf, &st) == 0 && !S_ISDIR(st.st_mode))
        return fail(err, size, "--save-hf", a->save_hf,
                    "exists and is not a folder; give a new or a GPT-2 folder");
    g->config = (mpcl_gpt2_config){.n_layer = a->gpt_layers,
                                   .n_head = a->gpt_heads,
                                   .n_embd = a->gpt_embd,
                                   .n_positions = a->gpt_context,
                                   .vocab_size = a->gpt_vocab,
                                   .layer_norm_epsilon = 1e-5};
    g->context = a->gpt_context;
    if (a->init_from) {
        if (mpcl_gpt2_config_read(a->init_from, &g->config) != MPCL_OK)
            return fail(err, size, "--init-from", a->init_from, mpcl_errmsg());
        if (!a->gpt_context_set && g->config.n_positions < g->context)
            g->context = g->config.n_positions;
    }
    if (!read_corpus(a, g, err, size)) return false;
    if (mpcl_gpt_model_params(NULL, &g->config, g->context, &p->model) != MPCL_OK) {
        snprintf(err, size, "--model gpt: %s", mpcl_errmsg());
        train_gpt_free(g);
        return false;
    }
    p->tokens = g->tokens;
    return true;
}

void train_gpt_free(train_gpt *g) {
    mpcl_tokens_destroy(g->tokens);
    g->tokens = NULL;
}

bool train_gpt_init_weights(const train_args *a, mpcl_trainer *tr, char *err, size_t size) {
    if (!a->init_from) return true;
    mpcl_gpt2_weights *w = NULL;
    if (mpcl_gpt2_folder_read(a->init_from, &w) != MPCL_OK)
        return fail(err, size, "--init-from", a->init_from, mpcl_errmsg());
    mpcl_model *m;
    bool ok = true;
    for (size_t r = 0; ok && (m = mpcl_trainer_replica_model(tr, r)) != NULL; r++)
        if (mpcl_model_load_gpt2(m, w) != MPCL_OK)
            ok = fail(err, size, "--init-from", a->init_from, mpcl_errmsg());
    mpcl_gpt2_weights_destroy(w);
    return ok;
}

bool train_gpt_save_hf(const train_args *a, mpcl_trainer *tr, char *err, size_t size) {
    if (!a->save_hf) return true;
    mpcl_gpt2_weights *w = NULL;
    bool ok = mpcl_model_gpt2_weights(mpcl_trainer_model(tr), &w) == MPCL_OK &&
              mpcl_gpt2_folder_write(a->save_hf, w) == MPCL_OK;
    if (!ok) fail(err, size, "--save-hf", a->save_hf, mpcl_errmsg());
    mpcl_gpt2_weights_destroy(w);
    return ok;
}

void train_gpt_print_data(FILE *h, const train_args *a, const train_gpt *g,
                          const mpcl_train_data_info *di) {
    const mpcl_tokens *t = g->tokens;
    size_t files = mpcl_tokens_file_count(t);
    if (a->init_from) fprintf(h, "init      %s (GPT-2 folder)\n", a->init_from);
    fprintf(h, "data      %s", mpcl_tokens_name(t));
    if (files > 1) fprintf(h, " (%zu files)", files);
    fprintf(h, ": %zu tokens of vocabulary %zu, %s; %zu for training, %zu held out\n",
            mpcl_tokens_count(t), g->config.vocab_size,
            a->tokens_bin ? "llm.c token file"
            : g->bpe      ? "GPT-2 BPE"
                          : "bytes",
            di->train_samples, mpcl_tokens_count(t) - di->train_samples);
    fprintf(h, "steps     %llu of %zu windows x %zu tokens", (unsigned long long)a->steps,
            di->batch, g->context);
    if (a->grad_accum > 1) fprintf(h, " x %u micro-batches", a->grad_accum);
    fprintf(h, "; evaluation every %llu steps on %zu held-out batches\n",
            (unsigned long long)(a->eval_every < a->steps ? a->eval_every : a->steps),
            a->eval_batches);
    fflush(h);
}

void train_gpt_json(jsonw *w, const train_args *a, const train_gpt *g,
                    const mpcl_train_summary *s) {
    jsonw_key(w, "gpt");
    jsonw_object_begin(w);
    jsonw_kv_uint(w, "layers", g->config.n_layer);
    jsonw_kv_uint(w, "heads", g->config.n_head);
    jsonw_kv_uint(w, "embd", g->config.n_embd);
    jsonw_kv_uint(w, "context", g->context);
    jsonw_kv_uint(w, "vocab", g->config.vocab_size);
    jsonw_kv_string(w, "corpus", mpcl_tokens_name(g->tokens));
    jsonw_kv_uint(w, "corpus_tokens", mpcl_tokens_count(g->tokens));
    jsonw_kv_string(w, "tokenizer", a->tokens_bin ? "token file" : g->bpe ? "gpt2 bpe" : "bytes");
    jsonw_kv_uint(w, "grad_accum", a->grad_accum);
    jsonw_kv_number(w, "tokens_per_s", s->train_samples_per_s * (double)g->context);
    jsonw_key(w, "init_from");
    if (a->init_from)
        jsonw_string(w, a->init_from);
    else
        jsonw_null(w);
    jsonw_key(w, "saved_hf");
    if (a->save_hf)
        jsonw_string(w, a->save_hf);
    else
        jsonw_null(w);
    jsonw_object_end(w);
    jsonw_key(w, "eval_loss");
    if (s->evaluated && isfinite(s->test_loss))
        jsonw_number(w, s->test_loss);
    else if (s->evaluated)
        jsonw_string(w, "nan");
    else
        jsonw_null(w);
}
