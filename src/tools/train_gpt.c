/* mpcl-train --model gpt (train_gpt.h). */
#include "train_gpt.h"

#include <math.h>
#include <string.h>

#include "mpcl/gpt.h"

bool train_gpt_setup(const train_args *a, mpcl_train_params *p, mpcl_tokens **tokens, char *err,
                     size_t size) {
    *tokens = NULL;
    const char *flag = a->tokens_bin ? "--tokens" : "--text";
    const char *path = a->tokens_bin ? a->tokens_bin : a->text ? a->text : MPCL_TOKENS_DEFAULT_DIR;
    mpcl_status st = a->tokens_bin ? mpcl_tokens_read_bin(path, a->gpt_vocab, tokens)
                                   : mpcl_tokens_read_text(path, tokens);
    if (st == MPCL_OK && mpcl_tokens_vocab(*tokens) > a->gpt_vocab) {
        snprintf(
            err, size,
            "--vocab %zu is smaller than the %zu byte values of --text: give --vocab 256 or more",
            a->gpt_vocab, mpcl_tokens_vocab(*tokens));
        mpcl_tokens_destroy(*tokens);
        *tokens = NULL;
        return false;
    }
    if (st != MPCL_OK) {
        snprintf(err, size, "%s %s: %s%s", flag, path, mpcl_errmsg(),
                 !a->text && !a->tokens_bin && st == MPCL_ERR_IO
                     ? " (the default corpus is Debian's fortunes package: scripts/setup.sh "
                       "installs it, or give --text FILE|DIR)"
                     : "");
        return false;
    }
    mpcl_gpt2_config config = {.n_layer = a->gpt_layers,
                               .n_head = a->gpt_heads,
                               .n_embd = a->gpt_embd,
                               .n_positions = a->gpt_context,
                               .vocab_size = a->gpt_vocab,
                               .layer_norm_epsilon = 1e-5};
    if (mpcl_gpt_model_params(NULL, &config, a->gpt_context, &p->model) != MPCL_OK) {
        snprintf(err, size, "--model gpt: %s", mpcl_errmsg());
        mpcl_tokens_destroy(*tokens);
        *tokens = NULL;
        return false;
    }
    p->tokens = *tokens;
    return true;
}

void train_gpt_print_data(FILE *h, const train_args *a, const mpcl_tokens *t,
                          const mpcl_train_data_info *di) {
    size_t files = mpcl_tokens_file_count(t);
    fprintf(h, "data      %s", mpcl_tokens_name(t));
    if (files > 1) fprintf(h, " (%zu files)", files);
    fprintf(h, ": %zu tokens of vocabulary %zu, %s; %zu for training, %zu held out\n",
            mpcl_tokens_count(t), a->gpt_vocab, a->tokens_bin ? "llm.c token file" : "bytes",
            di->train_samples, mpcl_tokens_count(t) - di->train_samples);
    fprintf(h, "steps     %llu of %zu windows x %zu tokens", (unsigned long long)a->steps,
            di->batch, a->gpt_context);
    if (a->grad_accum > 1) fprintf(h, " x %u micro-batches", a->grad_accum);
    fprintf(h, "; evaluation every %llu steps on %zu held-out batches\n",
            (unsigned long long)(a->eval_every < a->steps ? a->eval_every : a->steps),
            a->eval_batches);
    fflush(h);
}

void train_gpt_json(jsonw *w, const train_args *a, const mpcl_tokens *t,
                    const mpcl_train_summary *s) {
    jsonw_key(w, "gpt");
    jsonw_object_begin(w);
    jsonw_kv_uint(w, "layers", a->gpt_layers);
    jsonw_kv_uint(w, "heads", a->gpt_heads);
    jsonw_kv_uint(w, "embd", a->gpt_embd);
    jsonw_kv_uint(w, "context", a->gpt_context);
    jsonw_kv_uint(w, "vocab", a->gpt_vocab);
    jsonw_kv_string(w, "corpus", mpcl_tokens_name(t));
    jsonw_kv_uint(w, "corpus_tokens", mpcl_tokens_count(t));
    jsonw_kv_uint(w, "grad_accum", a->grad_accum);
    jsonw_kv_number(w, "tokens_per_s", s->train_samples_per_s * (double)a->gpt_context);
    jsonw_object_end(w);
    jsonw_key(w, "eval_loss");
    if (s->evaluated && isfinite(s->test_loss))
        jsonw_number(w, s->test_loss);
    else if (s->evaluated)
        jsonw_string(w, "nan");
    else
        jsonw_null(w);
}
