/* The trainer on a token stream (train.h: params.tokens): a language
 * model's steps on random windows drawn on the device, its evaluation on
 * the held-out tail, and the step count mapped onto the trainer's epochs,
 * one evaluation interval each. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nn/nn.h"
#include "train/train_internal.h"

/* The model's first layer must take token ids; its vocabulary bounds the
 * stream's ids (the embedding reads its rows unchecked). */
static mpcl_status token_model(mpcl_context *ctx, const mpcl_model_params *mp, const mpcl_tokens *t,
                               size_t *context, size_t *vocab) {
    const mpcl__layer_kind *first = mp->layer_count ? mpcl__spec_kind(&mp->layers[0]) : NULL;
    if (!first || !first->takes_tokens)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "training on tokens (%s) needs a model whose first layer takes token "
                          "ids (token_pos_embedding); this one starts with %s",
                          mpcl_tokens_name(t), mp->layer_count ? mp->layers[0].kind : "no layer");
    *context = mp->input_rank == 1 ? mp->input_shape[0] : mp->inputs;
    *vocab = mp->layers[0].vocabulary_size;
    if (mpcl_tokens_vocab(t) > *vocab)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "the tokens of %s have a vocabulary of %zu; the model's embedding holds "
                          "%zu",
                          mpcl_tokens_name(t), mpcl_tokens_vocab(t), *vocab);
    return MPCL_OK;
}

mpcl_status mpcl__train_tokens_setup(mpcl_trainer *tr, const mpcl_train_params *p) {
    mpcl_context *ctx = tr->ctx;
    if (p->steps == 0)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "training on tokens needs steps >= 1");
    if (p->eval_batches == 0 && p->eval_fraction > 0)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "eval_batches is 0 with a held-out fraction of %g: evaluate at least "
                          "one batch, or hold nothing out",
                          p->eval_fraction);
    size_t context = 0, vocab = 0;
    mpcl_model_params mp = p->model;
    TRY(token_model(ctx, &mp, p->tokens, &context, &vocab));
    mpcl_status st =
        mpcl_token_stream_create(ctx, p->tokens, context, p->eval_fraction, &tr->stream);
    if (st != MPCL_OK) return mpcl__train_adopt_error(ctx, st);

    uint64_t every = p->eval_every && p->eval_every < p->steps ? p->eval_every : p->steps;
    if ((p->steps + every - 1) / every > UINT32_MAX)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG,
                          "%llu steps evaluated every %llu: more than 2^32 - 1 evaluations",
                          (unsigned long long)p->steps, (unsigned long long)every);
    tr->steps_per_epoch = every;
    tr->total_steps = p->steps;
    tr->params.epochs = (uint32_t)((p->steps + every - 1) / every);
    tr->accum = p->grad_accum ? p->grad_accum : 1;
    tr->train_count = tr->train_available = mpcl_token_stream_count(tr->stream, MPCL_TOKENS_TRAIN);
    tr->test_count =
        mpcl_token_stream_count(tr->stream, MPCL_TOKENS_EVAL) ? p->eval_batches * p->batch : 0;
    tr->input_shape[0] = context;
    tr->input_rank = 1;

    mp.inputs = context;
    mp.classes = vocab;
    mp.max_batch = p->batch;
    mp.seed = p->seed;
    mpcl_lr_schedule *s = &mp.lr_schedule;
    if (mpcl_lr_schedule_kind_decays(s->kind) && !s->decay_steps)
        s->decay_steps = p->steps > s->warmup_steps ? p->steps - s->warmup_steps : 1;
    tr->params.model = mp;
    tr->lr = mp.optim.lr;
    if ((st = mpcl__train_setup_replicas(tr, p)) != MPCL_OK ||
        (st = mpcl__train_create_models(tr, &mp)) != MPCL_OK)
        return st;
    tr->params.model = mp; /* the plan the replicas agreed on */
    /* Each replica its own copy of the stream and its batch buffers, for a
     * slice of at most the whole batch. */
    tr->rep[0].stream = tr->stream;
    for (size_t r = 0; r < tr->replicas; r++) {
        mpcl__replica *R = &tr->rep[r];
        if (r > 0 && (st = mpcl_token_stream_create(R->ctx, p->tokens, context, p->eval_fraction,
                                                    &R->stream)) != MPCL_OK)
            return mpcl__train_adopt_error(ctx, st);
        if ((st = mpcl_tensor_create(R->ctx, MPCL_DTYPE_I32, p->batch, context, &R->x)) !=
                MPCL_OK ||
            (st = mpcl_tensor_create(R->ctx, MPCL_DTYPE_I32, p->batch, context, &R->labels)) !=
                MPCL_OK)
            return st;
    }
    tr->x = tr->rep[0].x;
    tr->labels = tr->rep[0].labels;
    return MPCL_OK;
}

/* Micro-batch `micro` of the step draws its windows with the key
 * step * accum + micro: each micro-batch its own windows, and a run with one
 * micro-batch a step draws what it always did. Data parallel: replica r
 * draws its slice of them (mpcl_dist_slice), divides its loss gradient by
 * the global rows, and the replicas' sums (stash included) are all-reduced
 * before every replica applies the same gradient. */
mpcl_status mpcl__train_tokens_step(mpcl_trainer *tr) {
    size_t B = tr->params.batch;
    size_t base = tr->dist ? mpcl_dist_first_replica(tr->dist) : 0;
    mpcl_status st = MPCL_OK;
    for (uint32_t micro = 0; micro < tr->accum && st == MPCL_OK; micro++) {
        uint64_t key = tr->step * tr->accum + micro;
        bool last = micro + 1 == tr->accum;
        for (size_t r = 0; r < tr->replicas && st == MPCL_OK; r++) {
            mpcl__replica *R = &tr->rep[r];
            size_t off = 0, rows = B;
            if (tr->dist) mpcl_dist_slice(tr->dist, base + r, B, &off, &rows);
            mpcl_tensor x = mpcl__tensor_rows(R->x, rows), y = mpcl__tensor_rows(R->labels, rows);
            st = mpcl_token_stream_windows_at(R->ctx, R->stream, MPCL_TOKENS_TRAIN, tr->params.seed,
                                              key, off, &x, &y);
            if (st == MPCL_OK) st = mpcl_model_forward_slice(R->model, &x, &y, B * tr->accum);
            if (st == MPCL_OK) st = mpcl_model_backward(R->model);
            if (st == MPCL_OK && !last) st = mpcl_model_stash_grads(R->model);
            if (st == MPCL_OK && last && tr->dist) st = mpcl_model_unstash_grads(R->model);
            if (tr->dist) tr->local_samples += rows;
        }
    }
    if (st == MPCL_OK && tr->dist) st = mpcl_dist_allreduce_grads(tr->dist, tr->models);
    for (size_t r = 0; r < tr->replicas && st == MPCL_OK; r++) st = mpcl_model_apply(tr->models[r]);
    return st;
}

/* The evaluation draws batch b of its eval_batches with the key b, from
 * a seed of its own: the same held-out windows every time. */
mpcl_status mpcl__train_tokens_evaluate(mpcl_trainer *tr) {
    uint64_t seed = tr->params.seed ^ 0x6576616c756174ull; /* "evaluat" */
    mpcl_status st = MPCL_OK;
    for (size_t b = 0; b < tr->params.eval_batches && st == MPCL_OK; b++) {
        st = mpcl_token_stream_windows(tr->ctx, tr->stream, MPCL_TOKENS_EVAL, seed, b, tr->x,
                                       tr->labels);
        if (st == MPCL_OK) st = mpcl_model_eval_step(tr->model, tr->x, tr->labels);
    }
    return st;
}
