/* GPT-2's byte-level BPE tokenizer: a vocabulary and merges loaded from the
 * two files GPT-2 ships (and Hugging Face's GPT2Tokenizer reads), text bytes
 * encoded to token ids and ids decoded back to the bytes.
 *
 * vocab.json: one JSON object, token -> id. A token is written in GPT-2's
 * byte characters: each byte stands for one of 256 printable code points
 * (bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF for themselves, the 68 others
 * for U+0100..U+0143 in byte order: ' ' is "Ġ", '\n' is "Ċ"). The ids are
 * 0..n-1, each once, n at most MPCL_TOKENS_MAX_VOCAB (ids are uint16, as in
 * token streams), and every single byte has its token.
 *
 * merges.txt: an optional first line starting "#version", then one merge a
 * line, "A B": two tokens of the vocabulary, one space between them, whose
 * concatenation is a token too; the line order is the merge's rank (first
 * line first). A last line may lack its newline; no other line may be empty.
 *
 * Encoding, as GPT-2 and GPT2Tokenizer: the text is cut into words by GPT-2's
 * pattern 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|
 * \s+(?!\S)|\s+ (matched here without a regex library; \p{L} and \p{N} are
 * the Unicode general categories L and N, \s the White_Space property, from
 * tables of Unicode 14.0: src/io/unicode_classes.h), then each word's bytes,
 * one token each, are merged: the adjacent pair of lowest rank, every
 * occurrence of it left to right, until no pair has a merge. Bytes that are
 * not valid UTF-8 are each a character of their own of class "other" (as a
 * lone surrogate of Python's errors="surrogateescape"), so any bytes encode,
 * and decoding gives them back exactly. Special tokens such as
 * "<|endoftext|>" are not looked for in the text (tiktoken's
 * encode_ordinary): their characters encode as any others; put their ids in
 * with mpcl_bpe_token_id. */
#ifndef MPCL_BPE_H
#define MPCL_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "mpcl/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

/* The largest vocab.json or merges.txt read (GPT-2's are 1.0 and 0.5 MB). */
#define MPCL_BPE_MAX_FILE_BYTES (64u << 20)

typedef struct mpcl_bpe mpcl_bpe;

/* Loads the tokenizer of vocab_path and merges_path. MPCL_ERR_IO naming the
 * path for a file that cannot be opened or read (a FIFO or device is refused
 * before anything waits on it); MPCL_ERR_FORMAT naming the file, where
 * (vocab.json: line and column; merges.txt: line) and what is wrong: a file
 * over MPCL_BPE_MAX_FILE_BYTES, JSON that is not valid or not an object of
 * numbers, a repeated token, an id that is not a whole number below the
 * token count or is given twice, a token with a character that is not a
 * byte character, a byte without its token, too many tokens; a merge line
 * that is not two tokens with one space between, names a token the
 * vocabulary lacks, makes one it lacks, or repeats an earlier line. *out is
 * NULL after any failure. */
mpcl_status mpcl_bpe_load(const char *vocab_path, const char *merges_path, mpcl_bpe **out);
void mpcl_bpe_destroy(mpcl_bpe *b);

/* The number of tokens (ids are below it) and of merges. */
size_t mpcl_bpe_vocab(const mpcl_bpe *b);
size_t mpcl_bpe_merge_count(const mpcl_bpe *b);

/* The bytes of token id (*len of them, not NUL-terminated), NULL (and *len
 * 0) for an id at or above the vocabulary. */
const unsigned char *mpcl_bpe_token_bytes(const mpcl_bpe *b, size_t id, size_t *len);
/* The id of the token whose bytes are the len bytes at `bytes` (for special
 * tokens: "<|endoftext|>"); MPCL_ERR_INVALID_ARG when no token has them. */
mpcl_status mpcl_bpe_token_id(const mpcl_bpe *b, const void *bytes, size_t len, uint16_t *id);

/* Encodes the size bytes at text (any bytes). The ids go to ids[0..cap);
 * *count is how many the text takes, at most size (each token covers at
 * least one byte): a buffer of size ids always suffices. ids may be NULL
 * to count them only. MPCL_ERR_INVALID_ARG, with *count set, when they do
 * not fit in cap. Words are cached in b, so one b encodes on one thread at
 * a time. */
mpcl_status mpcl_bpe_encode(mpcl_bpe *b, const void *text, size_t size, uint16_t *ids, size_t cap,
                            size_t *count);
/* Decodes count ids to their bytes, concatenated, into out[0..cap); *size is
 * how many bytes they take (out may be NULL to measure them only).
 * MPCL_ERR_INVALID_ARG naming the first id at or above the vocabulary and
 * its position (nothing is written), or, with *size set, when the bytes do
 * not fit in cap. */
mpcl_status mpcl_bpe_decode(const mpcl_bpe *b, const uint16_t *ids, size_t count, void *out,
                            size_t cap, size_t *size);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
