/* libFuzzer harness: the llm.c token-file reader. The first two bytes give
 * the vocabulary (their little-endian value + 1, so 1..65536), the rest is a
 * whole file image, through mpcl__tokens_bin_parse and, written to a file,
 * through mpcl_tokens_read_bin: both must give the same status and tokens.
 * A success is checked against the image (size, count, every token below
 * the vocabulary and equal to its two bytes), so that ASan sees every id
 * the reader hands out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "io/io.h"

#define NAME "fuzz.bin"

/* Fails unless t is the image's tokens, every one below vocab. */
static void check(const mpcl_tokens *t, const uint8_t *img, size_t size, size_t vocab) {
    size_t n = mpcl_tokens_count(t);
    const uint16_t *ids = mpcl_tokens_ids(t);
    if (n < 1 || size != MPCL_TOKENS_BIN_HEADER_BYTES + 2 * n || mpcl_tokens_vocab(t) != vocab)
        abort();
    const uint8_t *body = img + MPCL_TOKENS_BIN_HEADER_BYTES;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= vocab || ids[i] != (body[2 * i] | body[2 * i + 1] << 8)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    size_t vocab = (size_t)(data[0] | data[1] << 8) + 1;
    const uint8_t *img = data + 2;
    size -= 2;
    mpcl_tokens *mem = NULL, *file = NULL;
    mpcl_status s = mpcl__tokens_bin_parse(NAME, img, size, vocab, &mem);
    if (s == MPCL_OK)
        check(mem, img, size, vocab);
    else if (mem || (s != MPCL_ERR_FORMAT && s != MPCL_ERR_OUT_OF_MEMORY))
        abort(); /* a failure is a format error (or no memory) and hands out nothing */
    char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), NAME);
    fuzz_write(NAME, img, size);
    mpcl_status f = mpcl_tokens_read_bin(path, vocab, &file);
    if (f != s || (file == NULL) != (mem == NULL)) abort(); /* the file reads as the image */
    if (file && memcmp(mpcl_tokens_ids(file), mpcl_tokens_ids(mem),
                       mpcl_tokens_count(mem) * sizeof(uint16_t)) != 0)
        abort();
    mpcl_tokens_destroy(mem);
    mpcl_tokens_destroy(file);
    return 0;
}
