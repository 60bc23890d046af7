/* libFuzzer harness: the BPE tokenizer's loader (mpcl_bpe_load) on a
 * vocab.json and a merges.txt written from the input: two bytes, the length
 * of the vocab.json part (little-endian, cut to what is there), that part,
 * then merges.txt. A refusal is MPCL_ERR_FORMAT (or no memory) and hands out
 * nothing. A tokenizer it accepts encodes the whole input, and what it
 * encodes must decode back to those bytes, every id below the vocabulary,
 * no more ids than bytes, and a buffer one id short refused with the same
 * count, so that ASan sees the tables the loader built in use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "mpcl/bpe.h"

static void check_tokenizer(mpcl_bpe *b, const uint8_t *data, size_t size) {
    size_t vocab = mpcl_bpe_vocab(b), count = 0, back_size = 0;
    if (vocab < 256) abort(); /* every byte has a token */
    uint16_t *ids = malloc((size ? size : 1) * sizeof *ids);
    uint8_t *back = malloc(size ? size : 1);
    if (!ids || !back) abort();
    if (mpcl_bpe_encode(b, data, size, ids, size, &count) != MPCL_OK || count > size) abort();
    for (size_t i = 0; i < count; i++)
        if (ids[i] >= vocab) abort();
    if (mpcl_bpe_decode(b, ids, count, back, size, &back_size) != MPCL_OK || back_size != size ||
        memcmp(back, data, size) != 0)
        abort();
    size_t short_count = 0;
    if (count > 0 &&
        (mpcl_bpe_encode(b, data, size, ids, count - 1, &short_count) != MPCL_ERR_INVALID_ARG ||
         short_count != count))
        abort();
    free(ids);
    free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t vocab_len = (size_t)(data[0] | data[1] << 8);
    if (vocab_len > size - 2) vocab_len = size - 2;
    fuzz_write("vocab.json", data + 2, vocab_len);
    fuzz_write("merges.txt", data + 2 + vocab_len, size - 2 - vocab_len);
    char vocab[512], merges[512];
    snprintf(vocab, sizeof vocab, "%s/vocab.json", fuzz_dir());
    snprintf(merges, sizeof merges, "%s/merges.txt", fuzz_dir());
    mpcl_bpe *b = NULL;
    mpcl_status s = mpcl_bpe_load(vocab, merges, &b);
    if (s == MPCL_OK)
        check_tokenizer(b, data, size);
    else if (b || (s != MPCL_ERR_FORMAT && s != MPCL_ERR_OUT_OF_MEMORY))
        abort();
    mpcl_bpe_destroy(b);
    return 0;
}
