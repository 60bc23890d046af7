/* libFuzzer harness: a whole config.json text, through
 * mpcl__gpt2_config_parse (the checks of mpcl_gpt2_config_read after the
 * read). A success must be a config mpcl_gpt2_config_check accepts and whose
 * weights' size fits; a failure is a format error (or no memory) and leaves
 * the output as it was. */
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "io/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mpcl_gpt2_config c, untouched;
    memset(&c, 0xa5, sizeof c);
    memcpy(&untouched, &c, sizeof c);
    mpcl_status s = mpcl__gpt2_config_parse("config.json", (const char *)data, size, &c);
    if (s == MPCL_OK) {
        if (mpcl_gpt2_config_check(&c) != MPCL_OK) abort();
        if (c.n_embd % c.n_head != 0 || c.n_layer > MPCL_GPT2_MAX_SIZE) abort();
    } else if ((s != MPCL_ERR_FORMAT && s != MPCL_ERR_OUT_OF_MEMORY) ||
               memcmp(&c, &untouched, sizeof c) != 0) {
        abort();
    }
    return 0;
}
