/* mpcl-generate: text from a GPT (generate.h), from an mpcl checkpoint of
 * byte tokens or a GPT-2 Hugging Face folder, streamed to stdout. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "mpcl/mpcl.h"

enum { EXIT_OK = 0, EXIT_ERROR = 1, EXIT_NO_DEVICE = 2 };

static const char usage[] =
    "usage: mpcl-generate --model CKPT.safetensors|GPT2_FOLDER --prompt TEXT [--tokens N]\n"
    "                     [--temperature T] [--top-k K] [--seed S] [--device SEL]\n"
    "                     [--precision POLICY]\n"
    "\n"
    "Continues TEXT with N tokens drawn from a GPT, written to stdout as they come\n"
    "(the continuation only, its bytes as they are).\n"
    "\n"
    "  --model PATH         an mpcl checkpoint (mpcl-train --save) of a model whose\n"
    "                       first layer is token_pos_embedding over byte tokens\n"
    "                       (vocabulary 256: the prompt's bytes are its tokens), or a\n"
    "                       GPT-2 Hugging Face folder (config.json, model.safetensors;\n"
    "                       with vocab.json and merges.txt, GPT-2's BPE tokens, else\n"
    "                       byte tokens when its vocabulary is 256)\n"
    "  --prompt TEXT        the text to continue: 1 token at least, at most the\n"
    "                       model's context\n"
    "  --tokens N           tokens to generate (default 100); past the context the\n"
    "                       model sees the last context-many tokens\n"
    "  --temperature T      softmax temperature, >= 0 (default 1.0; 0 is greedy)\n"
    "  --top-k K            draw among the K most likely tokens only (default 0: all)\n"
    "  --seed S             the draws' seed (default 42): the same seed, model and\n"
    "                       prompt give the same text on every device\n"
    "  --device SEL         an id P:D, cpu, gpu, accelerator, or part of the device\n"
    "                       or platform name (default: $MPCL_DEVICE, else the default\n"
    "                       rule)\n"
    "  --precision POLICY   float32 (default), mixed_float16, mixed_bfloat16, auto\n"
    "  --help               this text\n"
    "\n"
    "Exit status: 0 success, 2 no OpenCL platform or device, 1 any other error.\n";

typedef struct args {
    const char *model, *prompt, *device;
    uint64_t tokens;
    mpcl_sample_params sample;
    mpcl_policy policy;
} args;

/* Prints "mpcl-generate: <message>" to stderr; returns false. */
static bool fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("mpcl-generate: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return false;
}

static bool parse_count(const char *flag, const char *v, uint64_t max, uint64_t *out) {
    mpcl_number_error e = mpcl_parse_uint(v, max, out);
    return e == MPCL_NUMBER_OK || fail("%s: '%s' %s (0 to %llu)", flag, v,
                                       mpcl_number_error_text(e), (unsigned long long)max);
}

static bool parse_flag(args *a, const char *f, const char *v) {
    uint64_t u = 0;
    if (strcmp(f, "--model") == 0) {
        a->model = v;
    } else if (strcmp(f, "--prompt") == 0) {
        a->prompt = v;
    } else if (strcmp(f, "--device") == 0) {
        a->device = v;
    } else if (strcmp(f, "--tokens") == 0) {
        return parse_count(f, v, 1u << 24, &a->tokens);
    } else if (strcmp(f, "--top-k") == 0) {
        if (!parse_count(f, v, 1u << 24, &u)) return false;
        a->sample.top_k = (size_t)u;
    } else if (strcmp(f, "--seed") == 0) {
        return parse_count(f, v, UINT64_MAX, &a->sample.seed);
    } else if (strcmp(f, "--temperature") == 0) {
        mpcl_number_error e = mpcl_parse_real(v, &a->sample.temperature);
        if (e != MPCL_NUMBER_OK) return fail("%s: '%s' %s", f, v, mpcl_number_error_text(e));
        if (a->sample.temperature < 0.0) return fail("%s: '%s' is negative", f, v);
    } else if (strcmp(f, "--precision") == 0) {
        if (!mpcl_policy_parse(v, &a->policy))
            return fail("%s: unknown policy '%s' (float32, mixed_float16, mixed_bfloat16, auto)", f,
                        v);
    } else {
        return fail("unknown option '%s' (--help lists them)", f);
    }
    return true;
}

/* 0 to go on, else the exit status. */
static int parse_args(int argc, char **argv, args *a) {
    *a = (args){
        .tokens = 100, .sample = mpcl_sample_default_params(), .policy = MPCL_POLICY_FLOAT32};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            exit(EXIT_OK);
        }
        const char *eq = strchr(argv[i], '='), *v = NULL;
        char flag[32];
        if (strncmp(argv[i], "--", 2) == 0 && eq && (size_t)(eq - argv[i]) < sizeof flag) {
            snprintf(flag, sizeof flag, "%.*s", (int)(eq - argv[i]), argv[i]);
            v = eq + 1;
        } else if (i + 1 < argc) {
            snprintf(flag, sizeof flag, "%s", argv[i]);
            v = argv[++i];
        } else {
            fail("option '%s' without its value (--help lists the options)", argv[i]);
            return EXIT_ERROR;
        }
        if (!parse_flag(a, flag, v)) return EXIT_ERROR;
    }
    bool ok = (a->model || fail("--model is required (--help for usage)")) &&
              (a->prompt || fail("--prompt is required (--help for usage)")) &&
              (*a->prompt || fail("--prompt is empty: give one token at least"));
    return ok ? 0 : EXIT_ERROR;
}

/* ---- the model and its tokens ---- */

typedef struct generator {
    mpcl_context *ctx;
    mpcl_model *model;
    mpcl_bpe *bpe;   /* GPT-2's tokens; NULL: byte tokens */
    int32_t *prompt; /* the prompt's tokens */
    size_t prompt_len;
    bool reported;  /* write_token printed why it stopped */
    size_t written; /* tokens written */
} generator;

static bool is_folder(const char *path) {
    struct stat s;
    return stat(path, &s) == 0 && S_ISDIR(s.st_mode);
}

/* A model of params on ctx, one sample at a time, in the chosen policy. */
static mpcl_status create_model(generator *g, const mpcl_model_params *params, mpcl_policy policy) {
    mpcl_model_params p = *params;
    p.max_batch = 1;
    p.policy = policy;
    return mpcl_model_create(g->ctx, &p, &g->model);
}

static mpcl_status load_checkpoint(generator *g, const char *path, mpcl_policy policy) {
    mpcl_checkpoint *c = NULL;
    mpcl_status st = mpcl_checkpoint_read(path, &c);
    if (st == MPCL_OK) st = create_model(g, mpcl_checkpoint_model_params(c), policy);
    if (st == MPCL_OK) st = mpcl_checkpoint_apply(c, g->model);
    mpcl_checkpoint_destroy(c);
    return st;
}

/* GPT-2's tokenizer when the folder has vocab.json and merges.txt (one of
 * them alone is refused); else byte tokens. Prints what is wrong and
 * returns false. */
static bool load_tokenizer(generator *g, const char *folder) {
    char vocab[4096], merges[4096];
    snprintf(vocab, sizeof vocab, "%s/vocab.json", folder);
    snprintf(merges, sizeof merges, "%s/merges.txt", folder);
    struct stat s;
    if (stat(vocab, &s) != 0 && stat(merges, &s) != 0) return true;
    if (mpcl_bpe_load(vocab, merges, &g->bpe) != MPCL_OK)
        return fail("--model %s: its tokenizer: %s", folder, mpcl_errmsg());
    size_t classes = mpcl_model_classes(g->model);
    return mpcl_bpe_vocab(g->bpe) <= classes ||
           fail("--model %s: vocab.json has %zu tokens; the model has %zu logits", folder,
                mpcl_bpe_vocab(g->bpe), classes);
}

/* A GPT-2 Hugging Face folder: the GPT of its config over its whole
 * context, its weights, its tokenizer. SGD: a model for inference needs no
 * optimizer state. Prints what is wrong and returns false. */
static bool load_folder(generator *g, const char *folder, mpcl_policy policy) {
    mpcl_gpt2_weights *w = NULL;
    mpcl_model_params p = mpcl_model_default_params();
    p.optim = mpcl_optim_default_params(MPCL_OPTIM_SGD);
    bool ok = mpcl_gpt2_folder_read(folder, &w) == MPCL_OK &&
              mpcl_gpt_model_params(NULL, &w->config, w->config.n_positions, &p) == MPCL_OK &&
              create_model(g, &p, policy) == MPCL_OK &&
              mpcl_model_load_gpt2(g->model, w) == MPCL_OK;
    if (!ok) fail("--model %s: %s", folder, mpcl_errmsg());
    mpcl_gpt2_weights_destroy(w);
    return ok && load_tokenizer(g, folder);
}

/* The prompt's tokens: GPT-2's BPE, or its bytes. Prints what is wrong
 * and returns false. */
static bool encode_prompt(generator *g, const char *text) {
    size_t size = strlen(text);
    g->prompt = malloc(size * sizeof *g->prompt);
    uint16_t *ids = malloc(size * sizeof *ids);
    bool ok = g->prompt && ids;
    if (!ok) {
        fail("--prompt: out of memory for %zu bytes", size);
    } else if (g->bpe) {
        ok = mpcl_bpe_encode(g->bpe, text, size, ids, size, &g->prompt_len) == MPCL_OK ||
             fail("--prompt: %s", mpcl_errmsg());
        for (size_t i = 0; ok && i < g->prompt_len; i++) g->prompt[i] = ids[i];
    } else {
        /* 0 when the first layer is no embedding: mpcl_generate refuses
         * such a model. */
        size_t vocab = mpcl_model_layer(g->model, 0)->vocabulary_size;
        for (size_t i = 0; ok && i < size; i++) {
            g->prompt[i] = (unsigned char)text[i];
            ok = vocab == 0 || (size_t)g->prompt[i] < vocab ||
                 fail("--prompt: byte %zu is %d; the model's vocabulary is 0..%zu", i,
                      (int)g->prompt[i], vocab - 1);
        }
        g->prompt_len = size;
    }
    free(ids);
    return ok;
}

/* Byte tokens: the model's logits must be bytes. */
static bool check_byte_tokens(const generator *g, const char *path) {
    size_t classes = mpcl_model_classes(g->model);
    return classes <= 256 ||
           fail(
               "--model %s: the model gives %zu logits per position; byte tokens are 256 (a "
               "GPT-2 folder needs vocab.json and merges.txt for its tokens)",
               path, classes);
}

/* Writes each token's bytes to stdout as it comes; a failure is printed
 * here (the callback's status carries no message). */
static mpcl_status write_token(void *user, size_t index, int32_t token) {
    (void)index;
    generator *g = user;
    g->reported = true; /* until it succeeds */
    unsigned char byte = (unsigned char)token;
    size_t len = 1;
    const unsigned char *bytes = g->bpe ? mpcl_bpe_token_bytes(g->bpe, (size_t)token, &len) : &byte;
    if (!bytes) {
        fail("token %d has no text in the vocabulary", (int)token);
        return MPCL_ERR_INVALID_ARG;
    }
    if (fwrite(bytes, 1, len, stdout) != len || fflush(stdout) != 0) {
        fail("writing to stdout: %s", strerror(errno));
        return MPCL_ERR_IO;
    }
    g->reported = false;
    g->written++;
    return MPCL_OK;
}

static int run(generator *g, const args *a) {
    mpcl_context_params cp = mpcl_context_default_params();
    cp.device = a->device;
    mpcl_status st = mpcl_context_create(&cp, &g->ctx);
    if (st != MPCL_OK) {
        fail("%s", mpcl_errmsg());
        const char *env = getenv("MPCL_DEVICE");
        bool selected = a->device || (env && *env);
        return st == MPCL_ERR_NO_PLATFORM || (st == MPCL_ERR_NO_DEVICE && !selected)
                   ? EXIT_NO_DEVICE
                   : EXIT_ERROR;
    }
    bool loaded = is_folder(a->model) ? load_folder(g, a->model, a->policy)
                                      : load_checkpoint(g, a->model, a->policy) == MPCL_OK ||
                                            fail("--model %s: %s", a->model, mpcl_errmsg());
    if (!loaded || (!g->bpe && !check_byte_tokens(g, a->model)) || !encode_prompt(g, a->prompt))
        return EXIT_ERROR;
    size_t context = mpcl_model_positions(g->model);
    if (g->prompt_len > context) {
        fail("--prompt: %zu tokens; the model's context is %zu", g->prompt_len, context);
        return EXIT_ERROR;
    }
    st = mpcl_generate(g->model, g->prompt, g->prompt_len, (size_t)a->tokens, &a->sample, NULL,
                       write_token, g);
    if (st == MPCL_OK) return EXIT_OK;
    if (g->written) fputc('\n', stdout); /* the message on a line of its own */
    if (!g->reported) fail("%s", mpcl_errmsg());
    return EXIT_ERROR;
}

int main(int argc, char **argv) {
    args a;
    int rc = parse_args(argc, argv, &a);
    if (rc != 0) return rc;
    generator g = {0};
    rc = run(&g, &a);
    free(g.prompt);
    mpcl_bpe_destroy(g.bpe);
    mpcl_model_destroy(g.model);
    mpcl_context_destroy(g.ctx);
    return rc;
}
