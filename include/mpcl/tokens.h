/* Token data for language models: a stream of token ids read from text
 * (one token per byte) or from llm.c's token files, held on the device, and
 * batches of random windows drawn from it on the device.
 *
 * Text: a file, or a folder whose regular files are read one after another
 * in the byte order of their names (strcmp), skipping names that end in
 * ".dat" (the index files of Debian's fortunes package) and everything that
 * is not a regular file by lstat: folders, FIFOs, devices, sockets and
 * symbolic links (the fortunes package's "NAME.u8" links to its files would
 * read every file twice). Nothing is recursed into. Every byte is a token,
 * 0..255 as it is, whether or not it is valid UTF-8: the vocabulary is 256
 * and no tokenizer is needed.
 *
 * llm.c token files (".bin"): a header of 256 little-endian int32, of which
 * [0] is the magic 20240520, [1] the version 1 and [2] the token count (the
 * rest is not read), then that many little-endian uint16 tokens, and nothing
 * after them. */
#ifndef MPCL_TOKENS_H
#define MPCL_TOKENS_H

#include <stddef.h>
#include <stdint.h>

#include "mpcl/context.h"
#include "mpcl/status.h"
#include "mpcl/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

/* Where Debian's `fortunes` package puts its text (about 2.5 MB of English
 * in 43 files): the default corpus. */
#define MPCL_TOKENS_DEFAULT_DIR "/usr/share/games/fortunes"
/* The vocabulary of byte-level tokens. */
#define MPCL_TOKENS_BYTE_VOCAB 256
/* The largest vocabulary a stream holds: its tokens are uint16. */
#define MPCL_TOKENS_MAX_VOCAB 65536
#define MPCL_TOKENS_BIN_MAGIC 20240520
#define MPCL_TOKENS_BIN_VERSION 1
#define MPCL_TOKENS_BIN_HEADER_BYTES 1024

/* A token stream in host memory: count ids, each below the vocabulary. */
typedef struct mpcl_tokens mpcl_tokens;

/* The bytes of the text file `path`, or of the files of the folder `path`
 * (taken as the top comment says), as tokens of vocabulary 256.
 * MPCL_ERR_IO naming the path for a path that cannot be opened or read, or a
 * FIFO or device given as the file (refused before anything waits on it);
 * MPCL_ERR_FORMAT for an empty file, a folder with no file to take or whose
 * files are all empty. *out is NULL after any failure. */
mpcl_status mpcl_tokens_read_text(const char *path, mpcl_tokens **out);

/* The tokens of the llm.c token file `path`, each checked to be below vocab
 * (1 to MPCL_TOKENS_MAX_VOCAB, MPCL_ERR_INVALID_ARG otherwise).
 * MPCL_ERR_IO as mpcl_tokens_read_text; MPCL_ERR_FORMAT naming the file and
 * what is wrong: a file shorter than the header, a wrong magic or version, a
 * count below 1, a body that is not the count's 2 bytes per token (truncated,
 * or bytes after the last token), a token at or above vocab (the first one,
 * with its position). The sizes are checked before anything is allocated.
 * *out is NULL after any failure. */
mpcl_status mpcl_tokens_read_bin(const char *path, size_t vocab, mpcl_tokens **out);

/* count ids from memory, copied, each checked to be below vocab (as
 * mpcl_tokens_read_bin); `name` (NULL: "tokens") names them in messages.
 * MPCL_ERR_INVALID_ARG for NULL ids, count 0 or a vocab out of range;
 * MPCL_ERR_FORMAT naming the first id out of range. */
mpcl_status mpcl_tokens_from_memory(const char *name, const uint16_t *ids, size_t count,
                                    size_t vocab, mpcl_tokens **out);

void mpcl_tokens_destroy(mpcl_tokens *t);
size_t mpcl_tokens_count(const mpcl_tokens *t);
size_t mpcl_tokens_vocab(const mpcl_tokens *t);
const uint16_t *mpcl_tokens_ids(const mpcl_tokens *t);
/* The path or name the tokens came from, for messages. */
const char *mpcl_tokens_name(const mpcl_tokens *t);
/* The files read, in order: the one file, or the folder's files taken (full
 * paths); none for tokens from memory. */
size_t mpcl_tokens_file_count(const mpcl_tokens *t);
const char *mpcl_tokens_file(const mpcl_tokens *t, size_t i);

/* A token stream on the device, split into a training part (its head) and
 * a held-out evaluation part (its tail), for windows of context + 1 tokens.
 * The ids are held as uint16 (2 bytes a token, little-endian, whatever the
 * device's byte order): half the memory of int32, for the one buffer that
 * grows with the corpus, and every vocabulary up to 65536 fits (bytes, and
 * GPT-2's 50257); the windows come out as int32. */
typedef struct mpcl_token_stream mpcl_token_stream;

typedef enum mpcl_token_part {
    MPCL_TOKENS_TRAIN, /* ids [0, count - eval_count) */
    MPCL_TOKENS_EVAL,  /* ids [count - eval_count, count) */
} mpcl_token_part;

/* Uploads t, split so that the evaluation part holds the last
 * floor(count * eval_fraction) ids (computed in double), eval_fraction in
 * [0, 1). MPCL_ERR_INVALID_ARG for a context of 0 or above 2^31 - 2, or an
 * eval_fraction out of range; MPCL_ERR_FORMAT naming t when a part (the
 * evaluation part only when eval_fraction > 0) holds fewer than context + 1
 * ids, one window; MPCL_ERR_OUT_OF_MEMORY when the stream does not fit the
 * device. *out is NULL after any failure. */
mpcl_status mpcl_token_stream_create(mpcl_context *ctx, const mpcl_tokens *t, size_t context,
                                     double eval_fraction, mpcl_token_stream **out);
void mpcl_token_stream_destroy(mpcl_token_stream *s);
size_t mpcl_token_stream_context(const mpcl_token_stream *s);
size_t mpcl_token_stream_vocab(const mpcl_token_stream *s);
/* The ids of a part (0 for an evaluation part of fraction 0), and where it
 * begins in the stream. */
size_t mpcl_token_stream_count(const mpcl_token_stream *s, mpcl_token_part part);
size_t mpcl_token_stream_first(const mpcl_token_stream *s, mpcl_token_part part);

/* Where window b of (seed, step) begins in a part with `starts` possible
 * beginnings (its count - context): with mix64 splitmix64's output function,
 * key = mix64(seed ^ mix64(step)), h = mix64(key + 0x9e3779b97f4a7c15 * (b +
 * 1)) (all mod 2^64, as the dropout masks of dropout.h), the start is the
 * high 64 bits of h * starts, in [0, starts): uniform but for a bias below
 * starts / 2^64. Plain integer arithmetic: every device draws the same
 * windows. starts > 0. */
uint64_t mpcl_token_window_start(uint64_t seed, uint64_t step, uint64_t b, uint64_t starts);

/* Enqueues B windows of context + 1 tokens from `part`: window b begins at
 * first + mpcl_token_window_start(seed, step, b, count - context) of the
 * part, and inputs[b, t] = its token t, targets[b, t] = its token t + 1, for
 * t < context. inputs and targets: [B, context] i32 (MPCL_ERR_DTYPE,
 * MPCL_ERR_SHAPE otherwise, B >= 1); MPCL_ERR_INVALID_ARG for the evaluation
 * part of a stream without one. A refused call enqueues nothing. An
 * evaluation that passes the same seed and steps each time measures the
 * same held-out windows. */
mpcl_status mpcl_token_stream_windows(mpcl_context *ctx, const mpcl_token_stream *s,
                                      mpcl_token_part part, uint64_t seed, uint64_t step,
                                      mpcl_tensor *inputs, mpcl_tensor *targets);
/* Windows first_window .. first_window + B - 1 of (seed, step) into rows
 * 0 .. B - 1: a data-parallel replica's slice of a global batch, so that
 * the replicas together draw the windows one device draws alone
 * (mpcl_token_stream_windows is first_window 0). */
mpcl_status mpcl_token_stream_windows_at(mpcl_context *ctx, const mpcl_token_stream *s,
                                         mpcl_token_part part, uint64_t seed, uint64_t step,
                                         uint64_t first_window, mpcl_tensor *inputs,
                                         mpcl_tensor *targets);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
