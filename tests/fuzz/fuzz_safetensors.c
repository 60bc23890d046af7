/* libFuzzer harness: a whole safetensors file image (FUZZ_ST_HEADER
 * undefined) or only its JSON header (FUZZ_ST_HEADER defined: the harness
 * adds the length and a 64-byte data section, so that every input reaches
 * the parser). Through the same checks as mpcl_safetensors_read; on success
 * every tensor's bytes and every metadata string are read back, so that
 * ASan sees any pointer the reader hands out that is out of bounds. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "io/io.h"

#define DATA_BYTES 64

static volatile unsigned sink;

static void use(const mpcl_safetensors *st) {
    unsigned h = 0;
    for (size_t i = 0; i < mpcl_safetensors_count(st); i++) {
        const mpcl_st_tensor *t = mpcl_safetensors_tensor(st, i);
        const unsigned char *d = t->data;
        for (size_t k = 0; k < t->bytes; k++) h += d[k];
        h += (unsigned)strlen(t->name) + (unsigned)t->ndim;
        if (mpcl_safetensors_find(st, t->name) != t) abort(); /* names are unique */
    }
    for (size_t i = 0; i < mpcl_safetensors_meta_count(st); i++) {
        const mpcl_st_meta *m = mpcl_safetensors_meta(st, i);
        h += (unsigned)strlen(m->key) + (unsigned)strlen(m->value);
        if (mpcl_safetensors_meta_get(st, m->key) != m->value) abort();
    }
    sink = h;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const void *image = data;
    size_t n = size;
    unsigned char *buf = NULL;
#ifdef FUZZ_ST_HEADER
    n = 8 + size + DATA_BYTES;
    buf = malloc(n);
    if (!buf) return 0;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)size >> (8 * i));
    if (size) memcpy(buf + 8, data, size);
    for (int i = 0; i < DATA_BYTES; i++) buf[8 + size + i] = (unsigned char)i;
    image = buf;
#endif
    mpcl_safetensors *st = NULL;
    mpcl_status s = mpcl__safetensors_parse("fuzz.safetensors", image, n, &st);
    if (s == MPCL_OK) {
        use(st);
    } else if (st || (s != MPCL_ERR_FORMAT && s != MPCL_ERR_OUT_OF_MEMORY)) {
        abort(); /* a failure is a format error (or no memory) and hands out nothing */
    }
    mpcl_safetensors_destroy(st);
    free(buf);
    return 0;
}
