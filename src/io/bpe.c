/* GPT-2's byte-level BPE tokenizer (include/mpcl/bpe.h): the vocabulary as
 * each id's bytes with a hash table from bytes to id, the merges as a hash
 * table from a pair of ids to its rank and result, the pre-tokenization
 * pattern matched by hand, and a cache of short words already encoded. */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "io/json.h"
#include "io/unicode_classes.h"
#include "mpcl/bpe.h"
#include "mpcl/number.h"
#include "runtime/fileio.h"

#define BYTE_CHARS 324 /* the byte characters lie below U+0144 */
#define NO_BYTE (-1)
#define CACHE_SLOTS 1024
#define CACHE_WORD_BYTES 32 /* longer words are not cached */
#define VERSION_LINE "#version"

/* One merge: the pair (key = first << 16 | second), its rank, its result.
 * A slot whose rank is 0 is empty: ranks are stored + 1. */
typedef struct pair_entry {
    uint32_t key, rank1;
    uint16_t merged;
} pair_entry;

/* A word already encoded: len bytes (0: empty slot) and its n ids. */
typedef struct cache_slot {
    uint8_t len, n;
    unsigned char bytes[CACHE_WORD_BYTES];
    uint16_t ids[CACHE_WORD_BYTES];
} cache_slot;

/* A candidate merge: the pair that starts at symbol pos, of rank rank1 - 1
 * when it was found (it may be gone when its turn comes). */
typedef struct candidate {
    size_t pos;
    uint32_t rank1;
} candidate;

/* The word being merged: its symbols as a list (next and prev; NONE at the
 * ends, DEAD for a symbol merged into the one before it), the candidates
 * by (rank, pos) in a binary heap, and those the current step makes. */
typedef struct word_scratch {
    uint16_t *sym;
    size_t *next, *prev;
    candidate *heap, *made;
    size_t cap; /* the longest word the arrays hold */
} word_scratch;

#define NONE SIZE_MAX
#define DEAD (SIZE_MAX - 1)

struct mpcl_bpe {
    char *vocab_path; /* for messages */
    size_t vocab, merge_count;
    unsigned char *bytes;  /* every token's bytes, in id order */
    size_t *start;         /* token id is bytes[start[id] .. start[id + 1]) */
    uint32_t *token_slots; /* open addressing on the bytes: id + 1, 0 empty */
    size_t token_mask;
    pair_entry *pairs;
    size_t pair_mask;
    uint16_t byte_token[256]; /* the token of each single byte */
    word_scratch word;        /* the word being merged */
    cache_slot *cache;
};

/* ---- GPT-2's byte characters ---- */

/* The bytes that stand for themselves: '!'..'~', 0xA1..0xAC, 0xAE..0xFF. */
static int byte_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
}

/* to_byte[cp]: the byte code point cp stands for, NO_BYTE if none; the other
 * 68 bytes stand for U+0100.. in byte order. */
static void byte_char_table(int16_t to_byte[BYTE_CHARS]) {
    for (size_t cp = 0; cp < BYTE_CHARS; cp++) to_byte[cp] = NO_BYTE;
    unsigned next = 256;
    for (unsigned b = 0; b < 256; b++) to_byte[byte_printable(b) ? b : next++] = (int16_t)b;
}

/* ---- hash tables ---- */

static uint64_t hash_bytes(const unsigned char *s, size_t n) {
    uint64_t h = 14695981039346656037u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211u;
    return h;
}

static uint64_t hash_pair(uint32_t key) {
    return (key * 0x9e3779b97f4a7c15u) >> 29;
}

/* A power of two at least twice n. */
static size_t table_size(size_t n) {
    size_t c = 16;
    while (c < 2 * n) c *= 2;
    return c;
}

static size_t token_len(const mpcl_bpe *b, size_t id) {
    return b->start[id + 1] - b->start[id];
}

/* The token's slot for the n bytes at s: its own, or the empty one where it
 * would go. */
static size_t token_slot(const mpcl_bpe *b, const unsigned char *s, size_t n) {
    size_t i = hash_bytes(s, n) & b->token_mask;
    for (;; i = (i + 1) & b->token_mask) {
        uint32_t e = b->token_slots[i];
        if (!e || (token_len(b, e - 1) == n && memcmp(b->bytes + b->start[e - 1], s, n) == 0))
            return i;
    }
}

static int find_token(const mpcl_bpe *b, const unsigned char *s, size_t n, uint16_t *id) {
    uint32_t e = b->token_slots[token_slot(b, s, n)];
    if (e) *id = (uint16_t)(e - 1);
    return e != 0;
}

static pair_entry *pair_slot(const mpcl_bpe *b, uint16_t first, uint16_t second) {
    uint32_t key = (uint32_t)first << 16 | second;
    size_t i = hash_pair(key) & b->pair_mask;
    while (b->pairs[i].rank1 && b->pairs[i].key != key) i = (i + 1) & b->pair_mask;
    return &b->pairs[i];
}

/* ---- messages ---- */

/* "'<path>': line L, column C: <what>" (column 0: no column). */
static mpcl_status place_error(const char *path, unsigned line, unsigned column, const char *fmt,
                               ...) MPCL_PRINTF(4, 5);
static mpcl_status place_error(const char *path, unsigned line, unsigned column, const char *fmt,
                               ...) {
    char what[512], where[48];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(where, sizeof where, column ? "line %u, column %u" : "line %u", line, column);
    return mpcl__format_error(path, __FILE__, __LINE__, "%s: %s", where, what);
}

/* At the member v of vocab.json. */
#define VOCAB_ERROR(path, v, ...) \
    place_error((path), mpcl__json_line(v), mpcl__json_column(v), __VA_ARGS__)
/* At a line of merges.txt. */
#define MERGES_ERROR(path, line, ...) place_error((path), (unsigned)(line), 0, __VA_ARGS__)

static mpcl_status no_memory(const char *path) {
    return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "'%s': the tokenizer's tables", path);
}

/* ---- byte characters to bytes ---- */

/* The bytes the n byte characters (UTF-8) at s stand for, into out (n bytes
 * always suffice); *bad the offset of the first that stands for none, with
 * its code point (UINT32_MAX for bytes that are not UTF-8). */
static int chars_to_bytes(const int16_t *to_byte, const unsigned char *s, size_t n,
                          unsigned char *out, size_t *len, size_t *bad, uint32_t *bad_cp) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp = UINT32_MAX;
        size_t step = mpcl__utf8_decode(s + i, n - i, &cp);
        if (!step || cp >= BYTE_CHARS || to_byte[cp] == NO_BYTE) {
            *bad = i;
            *bad_cp = step ? cp : UINT32_MAX;
            return 0;
        }
        out[k++] = (unsigned char)to_byte[cp];
        i += step;
    }
    *len = k;
    return 1;
}

/* "U+0020" or "a byte that is not UTF-8", for messages. */
static const char *char_name(uint32_t cp, char buf[40]) {
    if (cp == UINT32_MAX) return "a byte that is not UTF-8";
    snprintf(buf, 40, "U+%04X", (unsigned)cp);
    return buf;
}

/* ---- vocab.json ---- */

/* The id of member i, a whole number below the member count. */
static mpcl_status member_id(const char *path, const mpcl__json_value *v, const char *key, size_t n,
                             size_t *id) {
    if (mpcl__json_type_of(v) != MPCL__JSON_NUMBER)
        return VOCAB_ERROR(path, v, "token \"%.200s\": the id is %s, not a number", key,
                           mpcl__json_type_name(mpcl__json_type_of(v)));
    const char *text = mpcl__json_number_text(v);
    uint64_t value;
    mpcl_number_error e = mpcl_parse_uint(text, UINT64_MAX, &value);
    if (e != MPCL_NUMBER_OK)
        return VOCAB_ERROR(path, v, "token \"%.200s\": the id '%s' %s (ids are whole numbers)", key,
                           text, mpcl_number_error_text(e));
    if (value >= n)
        return VOCAB_ERROR(path, v,
                           "token \"%.200s\": id %s is not below the token count %zu (ids are "
                           "0..%zu, each once)",
                           key, text, n, n - 1);
    *id = (size_t)value;
    return MPCL_OK;
}

/* member_of[id]: the member that has each id, each id once. */
static mpcl_status vocab_ids(const char *path, const mpcl__json_value *root, size_t *member_of) {
    size_t n = mpcl__json_count(root);
    for (size_t id = 0; id < n; id++) member_of[id] = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        const mpcl__json_value *v = mpcl__json_at(root, i);
        const char *key = mpcl__json_key_at(root, i);
        size_t id = 0;
        TRY(member_id(path, v, key, n, &id));
        if (member_of[id] != SIZE_MAX) {
            const mpcl__json_value *first = mpcl__json_at(root, member_of[id]);
            return VOCAB_ERROR(path, v,
                               "token \"%.200s\": id %zu is already the id of \"%.200s\" (line "
                               "%u, column %u)",
                               key, id, mpcl__json_key_at(root, member_of[id]),
                               mpcl__json_line(first), mpcl__json_column(first));
        }
        member_of[id] = i;
    }
    return MPCL_OK;
}

/* Each token's bytes from its key, in id order, into b->bytes and b->start. */
static mpcl_status vocab_bytes(mpcl_bpe *b, const char *path, const mpcl__json_value *root,
                               const size_t *member_of, const int16_t *to_byte) {
    size_t used = 0;
    for (size_t id = 0; id < b->vocab; id++) {
        size_t i = member_of[id], len, bad;
        uint32_t cp;
        const mpcl__json_value *v = mpcl__json_at(root, i);
        const char *key = mpcl__json_key_at(root, i);
        size_t key_len = strlen(key);
        if (key_len == 0) return VOCAB_ERROR(path, v, "id %zu: the token is empty", id);
        b->start[id] = used;
        if (!chars_to_bytes(to_byte, (const unsigned char *)key, key_len, b->bytes + used, &len,
                            &bad, &cp)) {
            char buf[40];
            return VOCAB_ERROR(path, v,
                               "token \"%.200s\": the character at byte %zu, %s, is not one of "
                               "GPT-2's 256 byte characters",
                               key, bad, char_name(cp, buf));
        }
        used += len;
    }
    b->start[b->vocab] = used;
    return MPCL_OK;
}

/* The hash table of the tokens, and each byte's own token (every byte must
 * have one, or some text could not be encoded). */
static mpcl_status index_tokens(mpcl_bpe *b, const int16_t *to_byte) {
    size_t cap = table_size(b->vocab);
    b->token_slots = calloc(cap, sizeof *b->token_slots);
    if (!b->token_slots) return no_memory(b->vocab_path);
    b->token_mask = cap - 1;
    for (size_t id = 0; id < b->vocab; id++)
        b->token_slots[token_slot(b, b->bytes + b->start[id], token_len(b, id))] = (uint32_t)id + 1;
    uint32_t char_of[256];
    for (uint32_t cp = 0; cp < BYTE_CHARS; cp++)
        if (to_byte[cp] != NO_BYTE) char_of[to_byte[cp]] = cp;
    for (unsigned byte = 0; byte < 256; byte++) {
        unsigned char c = (unsigned char)byte;
        if (!find_token(b, &c, 1, &b->byte_token[byte])) {
            char utf8[4];
            size_t k = mpcl__utf8_put(utf8, char_of[byte]);
            return mpcl__format_error(b->vocab_path, __FILE__, __LINE__,
                                      "byte 0x%02x has no token (\"%.*s\", U+%04X): every "
                                      "byte needs one",
                                      byte, (int)k, utf8, (unsigned)char_of[byte]);
        }
    }
    return MPCL_OK;
}

static mpcl_status read_vocab(mpcl_bpe *b, const char *path, const int16_t *to_byte) {
    mpcl__json *doc;
    TRY(mpcl__json_read_file(path, MPCL_BPE_MAX_FILE_BYTES, &doc));
    const mpcl__json_value *root = mpcl__json_root(doc);
    size_t n = mpcl__json_count(root), key_bytes = 0;
    mpcl_status st = MPCL_OK;
    if (mpcl__json_type_of(root) != MPCL__JSON_OBJECT)
        st = mpcl__format_error(path, __FILE__, __LINE__,
                                "the file is %s, not an object of token -> id",
                                mpcl__json_type_name(mpcl__json_type_of(root)));
    else if (n == 0)
        st = mpcl__format_error(path, __FILE__, __LINE__, "the object holds no token");
    else if (n > MPCL_TOKENS_MAX_VOCAB)
        st = mpcl__format_error(path, __FILE__, __LINE__,
                                "%zu tokens, more than %d (ids are uint16)", n,
                                MPCL_TOKENS_MAX_VOCAB);
    for (size_t i = 0; st == MPCL_OK && i < n; i++) key_bytes += strlen(mpcl__json_key_at(root, i));
    size_t *member_of = NULL;
    if (st == MPCL_OK) {
        b->vocab = n;
        member_of = malloc(n * sizeof *member_of);
        b->start = malloc((n + 1) * sizeof *b->start);
        b->bytes = malloc(key_bytes);
        if (!member_of || !b->start || !b->bytes) st = no_memory(path);
    }
    if (st == MPCL_OK) st = vocab_ids(path, root, member_of);
    if (st == MPCL_OK) st = vocab_bytes(b, path, root, member_of, to_byte);
    if (st == MPCL_OK) st = index_tokens(b, to_byte);
    free(member_of);
    mpcl__json_free(doc);
    return st;
}

/* ---- merges.txt ---- */

/* The token of the n byte characters at s (part `which` of the line). */
static mpcl_status merge_token(const mpcl_bpe *b, const char *path, size_t line,
                               const int16_t *to_byte, const char *s, size_t n,
                               unsigned char *scratch, uint16_t *id) {
    size_t len, bad;
    uint32_t cp;
    if (!chars_to_bytes(to_byte, (const unsigned char *)s, n, scratch, &len, &bad, &cp)) {
        char buf[40];
        return MERGES_ERROR(path, line,
                            "\"%.*s\": the character at byte %zu, %s, is not one of GPT-2's 256 "
                            "byte characters%s",
                            (int)(n < 200 ? n : 200), s, bad, char_name(cp, buf),
                            cp == '\r' ? " (a line ending \"\\r\\n\"?)" : "");
    }
    if (!find_token(b, scratch, len, id))
        return MERGES_ERROR(path, line, "the token \"%.*s\" is not in the vocabulary '%s'",
                            (int)(n < 200 ? n : 200), s, b->vocab_path);
    return MPCL_OK;
}

/* One line "A B" of rank `rank`: both tokens known, their concatenation a
 * token, the pair not seen before. */
static mpcl_status add_merge(mpcl_bpe *b, const char *path, size_t line, size_t first_line,
                             const int16_t *to_byte, const char *s, size_t n,
                             unsigned char *scratch) {
    const char *space = memchr(s, ' ', n);
    if (!space || space == s || space == s + n - 1 ||
        memchr(space + 1, ' ', n - (size_t)(space + 1 - s)))
        return MERGES_ERROR(path, line, "\"%.*s\" is not two tokens with one space between them",
                            (int)(n < 200 ? n : 200), s);
    size_t left = (size_t)(space - s);
    uint16_t a, c, merged;
    TRY(merge_token(b, path, line, to_byte, s, left, scratch, &a));
    TRY(merge_token(b, path, line, to_byte, space + 1, n - left - 1, scratch, &c));
    size_t la = token_len(b, a), lc = token_len(b, c);
    memcpy(scratch, b->bytes + b->start[a], la);
    memcpy(scratch + la, b->bytes + b->start[c], lc);
    if (!find_token(b, scratch, la + lc, &merged))
        return MERGES_ERROR(
            path, line, "the merge makes \"%.*s%.*s\", which is not in the vocabulary '%s'",
            (int)(left < 200 ? left : 200), s, (int)(n - left - 1 < 200 ? n - left - 1 : 200),
            space + 1, b->vocab_path);
    pair_entry *p = pair_slot(b, a, c);
    if (p->rank1)
        return MERGES_ERROR(path, line, "\"%.*s\" repeats the merge of line %zu",
                            (int)(n < 200 ? n : 200), s, first_line + p->rank1 - 1);
    *p = (pair_entry){
        .key = (uint32_t)a << 16 | c, .rank1 = (uint32_t)++b->merge_count, .merged = merged};
    return MPCL_OK;
}

static mpcl_status parse_merges(mpcl_bpe *b, const char *path, const char *text, size_t size,
                                const int16_t *to_byte) {
    size_t lines = 1;
    for (size_t i = 0; i < size; i++) lines += text[i] == '\n';
    size_t cap = table_size(lines);
    b->pairs = calloc(cap, sizeof *b->pairs);
    size_t longest = 0; /* a line's token, or two tokens joined, fits the scratch */
    for (size_t id = 0; id < b->vocab; id++)
        if (token_len(b, id) > longest) longest = token_len(b, id);
    unsigned char *scratch = malloc(size + 2 * longest + 1);
    if (!b->pairs || !scratch) {
        free(scratch);
        return no_memory(path);
    }
    b->pair_mask = cap - 1;
    size_t at = 0, line = 1;
    if (size >= strlen(VERSION_LINE) && memcmp(text, VERSION_LINE, strlen(VERSION_LINE)) == 0) {
        const char *nl = memchr(text, '\n', size);
        at = nl ? (size_t)(nl - text) + 1 : size;
        line = 2;
    }
    size_t first_line = line;
    mpcl_status st = MPCL_OK;
    for (; st == MPCL_OK && at < size; line++) {
        const char *s = text + at, *nl = memchr(s, '\n', size - at);
        size_t n = nl ? (size_t)(nl - s) : size - at;
        if (n == 0)
            st = MERGES_ERROR(path, line,
                              "the line is empty (only the last line may lack "
                              "a merge, and only by being absent)");
        else
            st = add_merge(b, path, line, first_line, to_byte, s, n, scratch);
        at += n + 1;
    }
    free(scratch);
    return st;
}

static mpcl_status read_merges(mpcl_bpe *b, const char *path, const int16_t *to_byte) {
    char *text;
    size_t size;
    TRY(mpcl__read_regular(path, MPCL_BPE_MAX_FILE_BYTES, &text, &size));
    mpcl_status st = parse_merges(b, path, text, size, to_byte);
    free(text);
    return st;
}

/* ---- loading ---- */

void mpcl_bpe_destroy(mpcl_bpe *b) {
    if (!b) return;
    free(b->vocab_path);
    free(b->bytes);
    free(b->start);
    free(b->token_slots);
    free(b->pairs);
    free(b->word.sym);
    free(b->word.next);
    free(b->word.prev);
    free(b->word.heap);
    free(b->word.made);
    free(b->cache);
    free(b);
}

mpcl_status mpcl_bpe_load(const char *vocab_path, const char *merges_path, mpcl_bpe **out) {
    static const char op[] = "mpcl_bpe_load";
    if (!out) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%s: out is NULL", op);
    *out = NULL;
    if (!vocab_path || !merges_path)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%s: the %s path is NULL", op,
                          vocab_path ? "merges" : "vocabulary");
    mpcl_bpe *b = calloc(1, sizeof *b);
    if (b) b->vocab_path = strdup(vocab_path);
    if (b) b->cache = calloc(CACHE_SLOTS, sizeof *b->cache);
    if (!b || !b->vocab_path || !b->cache) {
        mpcl_bpe_destroy(b);
        return no_memory(vocab_path);
    }
    int16_t to_byte[BYTE_CHARS];
    byte_char_table(to_byte);
    mpcl_status st = read_vocab(b, vocab_path, to_byte);
    if (st == MPCL_OK) st = read_merges(b, merges_path, to_byte);
    if (st == MPCL_OK)
        *out = b;
    else
        mpcl_bpe_destroy(b);
    return st;
}

size_t mpcl_bpe_vocab(const mpcl_bpe *b) {
    return b->vocab;
}
size_t mpcl_bpe_merge_count(const mpcl_bpe *b) {
    return b->merge_count;
}

const unsigned char *mpcl_bpe_token_bytes(const mpcl_bpe *b, size_t id, size_t *len) {
    *len = id < b->vocab ? token_len(b, id) : 0;
    return id < b->vocab ? b->bytes + b->start[id] : NULL;
}

mpcl_status mpcl_bpe_token_id(const mpcl_bpe *b, const void *bytes, size_t len, uint16_t *id) {
    if (!b || !id || (!bytes && len))
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "mpcl_bpe_token_id: %s is NULL",
                          !b    ? "the tokenizer"
                          : !id ? "id"
                                : "bytes");
    if (!find_token(b, bytes, len, id))
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                          "mpcl_bpe_token_id: no token of '%s' is the %zu bytes \"%.*s\"",
                          b->vocab_path, len, (int)(len < 200 ? len : 200), (const char *)bytes);
    return MPCL_OK;
}

/* ---- pre-tokenization: GPT-2's pattern by hand ---- */

static mpcl__uc_class class_of(uint32_t cp) {
    size_t lo = 0, hi = sizeof MPCL__UC_RANGES / sizeof MPCL__UC_RANGES[0];
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp > MPCL__UC_RANGES[mid].last)
            lo = mid + 1;
        else if (cp < MPCL__UC_RANGES[mid].first)
            hi = mid;
        else
            return MPCL__UC_RANGES[mid].cls;
    }
    return MPCL__UC_OTHER;
}

/* One character of the text: its length in bytes and its class. A byte that
 * does not start valid UTF-8 is a character of its own, of class other. */
typedef struct text_char {
    size_t len;
    mpcl__uc_class cls;
} text_char;

static text_char char_at(const unsigned char *s, size_t n, size_t i) {
    uint32_t cp;
    size_t len = mpcl__utf8_decode(s + i, n - i, &cp);
    if (!len) return (text_char){1, MPCL__UC_OTHER};
    return (text_char){len, class_of(cp)};
}

/* Where the run of characters of class cls that starts at i ends. */
static size_t run_end(const unsigned char *s, size_t n, size_t i, mpcl__uc_class cls) {
    while (i < n) {
        text_char c = char_at(s, n, i);
        if (c.cls != cls) break;
        i += c.len;
    }
    return i;
}

/* 's|'t|'re|'ve|'m|'ll|'d at i: the length, or 0. */
static size_t contraction(const unsigned char *s, size_t n, size_t i) {
    if (s[i] != '\'' || i + 1 >= n) return 0;
    unsigned char c = s[i + 1];
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
    if (i + 2 >= n) return 0;
    unsigned char d = s[i + 2];
    return (c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l') ? 3 : 0;
}

/* \s+(?!\S)|\s+ at i, a space: the run of spaces, less its last character
 * when something other than a space follows, unless that leaves nothing
 * (then the second alternative takes the one space). */
static size_t spaces_length(const unsigned char *s, size_t n, size_t i) {
    size_t last = i, j = i;
    while (j < n) {
        text_char c = char_at(s, n, j);
        if (c.cls != MPCL__UC_SPACE) break;
        last = j;
        j += c.len;
    }
    return j < n && last > i ? last - i : j - i;
}

/* The length of the word at i < n: the first alternative of the pattern that
 * matches there. ` ?\p{L}+`, ` ?\p{N}+` and ` ?[^\s\p{L}\p{N}]+` are one
 * rule: an optional ' ' then a run of one class that is not space. */
static size_t word_length(const unsigned char *s, size_t n, size_t i) {
    size_t k = contraction(s, n, i);
    if (k) return k;
    if (s[i] == ' ' && i + 1 < n) {
        text_char next = char_at(s, n, i + 1);
        if (next.cls != MPCL__UC_SPACE) return run_end(s, n, i + 1, next.cls) - i;
    }
    text_char c = char_at(s, n, i);
    if (c.cls != MPCL__UC_SPACE) return run_end(s, n, i, c.cls) - i;
    return spaces_length(s, n, i);
}

/* ---- merging ---- */

static int comes_first(const candidate *x, const candidate *y) {
    return x->rank1 != y->rank1 ? x->rank1 < y->rank1 : x->pos < y->pos;
}

static void heap_push(candidate *h, size_t *n, candidate c) {
    size_t i = (*n)++;
    for (; i > 0 && comes_first(&c, &h[(i - 1) / 2]); i = (i - 1) / 2) h[i] = h[(i - 1) / 2];
    h[i] = c;
}

/* Places c at i or below it in the heap h of n candidates. */
static void sift_down(candidate *h, size_t n, size_t i, candidate c) {
    for (size_t child; (child = 2 * i + 1) < n; i = child) {
        if (child + 1 < n && comes_first(&h[child + 1], &h[child])) child++;
        if (!comes_first(&h[child], &c)) break;
        h[i] = h[child];
    }
    h[i] = c;
}

static candidate heap_pop(candidate *h, size_t *n) {
    candidate top = h[0];
    --*n;
    sift_down(h, *n, 0, h[*n]);
    return top;
}

/* The pair that starts at symbol i, if it has a merge, into `to`. */
static void add_candidate(const mpcl_bpe *b, size_t i, candidate *to, size_t *n) {
    const word_scratch *w = &b->word;
    if (i == NONE || w->next[i] == NONE) return;
    const pair_entry *p = pair_slot(b, w->sym[i], w->sym[w->next[i]]);
    if (p->rank1) to[(*n)++] = (candidate){.pos = i, .rank1 = p->rank1};
}

/* Merges the pair at c.pos if it is still the pair c was found for (its
 * rank names it) and records the pairs the merge makes. */
static void merge_at(mpcl_bpe *b, candidate c, size_t *made) {
    word_scratch *w = &b->word;
    size_t i = c.pos, j = w->next[i];
    if (j == NONE || j == DEAD) return;
    const pair_entry *p = pair_slot(b, w->sym[i], w->sym[j]);
    if (p->rank1 != c.rank1) return;
    w->sym[i] = p->merged;
    w->next[i] = w->next[j];
    if (w->next[j] != NONE) w->prev[w->next[j]] = i;
    w->next[j] = DEAD;
    add_candidate(b, w->prev[i], w->made, made);
    add_candidate(b, i, w->made, made);
}

/* The word's n bytes as tokens in b->word.sym, as GPT-2's bpe() merges
 * them: step by step, the pair of lowest rank, every occurrence of it left
 * to right (a merge never makes its own pair again, so one step is the
 * candidates of one rank in position order); the pairs a step makes wait
 * for the next step. The heap keeps a step to O(k log n) for k merges,
 * not a scan of the word. The count of tokens. */
static size_t merge_word(mpcl_bpe *b, const unsigned char *s, size_t n) {
    word_scratch *w = &b->word;
    for (size_t i = 0; i < n; i++) {
        w->sym[i] = b->byte_token[s[i]];
        w->next[i] = i + 1 < n ? i + 1 : NONE;
        w->prev[i] = i > 0 ? i - 1 : NONE;
    }
    size_t queued = 0;
    for (size_t i = 0; i + 1 < n; i++) add_candidate(b, i, w->heap, &queued);
    for (size_t i = queued / 2; i-- > 0;) sift_down(w->heap, queued, i, w->heap[i]); /* heapify */
    while (queued) {
        uint32_t rank1 = w->heap[0].rank1;
        size_t made = 0;
        while (queued && w->heap[0].rank1 == rank1) merge_at(b, heap_pop(w->heap, &queued), &made);
        for (size_t k = 0; k < made; k++) heap_push(w->heap, &queued, w->made[k]);
    }
    size_t count = 0;
    for (size_t i = 0; i != NONE; i = w->next[i]) w->sym[count++] = w->sym[i];
    return count;
}

/* Room in b->word for a word of n bytes. The heap holds at most the n - 1
 * first candidates and the two each of at most n - 1 merges makes; `made`
 * the two each merge of one step makes. */
static mpcl_status word_room(mpcl_bpe *b, size_t n) {
    word_scratch *w = &b->word;
    if (n <= w->cap) return MPCL_OK;
    uint16_t *sym = realloc(w->sym, n * sizeof *sym);
    if (sym) w->sym = sym;
    size_t *next = sym ? realloc(w->next, n * sizeof *next) : NULL;
    if (next) w->next = next;
    size_t *prev = next ? realloc(w->prev, n * sizeof *prev) : NULL;
    if (prev) w->prev = prev;
    candidate *heap =
        prev && n <= SIZE_MAX / 3 / sizeof *heap ? realloc(w->heap, 3 * n * sizeof *heap) : NULL;
    if (heap) w->heap = heap;
    candidate *made = heap ? realloc(w->made, 2 * n * sizeof *made) : NULL;
    if (made) w->made = made;
    if (!made)
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "mpcl_bpe_encode: a word of %zu bytes", n);
    w->cap = n;
    return MPCL_OK;
}

/* The tokens of the word's n bytes (*ids points into b: valid until the next
 * word), from the cache when it holds them. */
static mpcl_status encode_word(mpcl_bpe *b, const unsigned char *s, size_t n, const uint16_t **ids,
                               size_t *count) {
    cache_slot *slot = NULL;
    if (n <= CACHE_WORD_BYTES) {
        slot = &b->cache[hash_bytes(s, n) & (CACHE_SLOTS - 1)];
        if (slot->len == n && memcmp(slot->bytes, s, n) == 0) {
            *ids = slot->ids;
            *count = slot->n;
            return MPCL_OK;
        }
    }
    TRY(word_room(b, n));
    *count = merge_word(b, s, n);
    *ids = b->word.sym;
    if (slot) {
        slot->len = (uint8_t)n;
        slot->n = (uint8_t)*count;
        memcpy(slot->bytes, s, n);
        memcpy(slot->ids, b->word.sym, *count * sizeof *slot->ids);
    }
    return MPCL_OK;
}

mpcl_status mpcl_bpe_encode(mpcl_bpe *b, const void *text, size_t size, uint16_t *ids, size_t cap,
                            size_t *count) {
    static const char op[] = "mpcl_bpe_encode";
    if (!b || !count || (!text && size))
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%s: %s is NULL", op,
                          !b       ? "the tokenizer"
                          : !count ? "count"
                                   : "text");
    const unsigned char *s = text;
    size_t total = 0;
    for (size_t i = 0; i < size;) {
        size_t len = word_length(s, size, i), k = 0;
        const uint16_t *word = NULL;
        TRY(encode_word(b, s + i, len, &word, &k));
        if (ids && total < cap)
            memcpy(ids + total, word, (k < cap - total ? k : cap - total) * sizeof *ids);
        total += k;
        i += len;
    }
    *count = total;
    if (ids && total > cap)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                          "%s: the text's %zu bytes take %zu tokens, the buffer holds %zu", op,
                          size, total, cap);
    return MPCL_OK;
}

mpcl_status mpcl_bpe_decode(const mpcl_bpe *b, const uint16_t *ids, size_t count, void *out,
                            size_t cap, size_t *size) {
    static const char op[] = "mpcl_bpe_decode";
    if (!b || !size || (!ids && count))
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "%s: %s is NULL", op,
                          !b      ? "the tokenizer"
                          : !size ? "size"
                                  : "ids");
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        if (ids[i] >= b->vocab)
            return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                              "%s: id %u (position %zu of %zu) is not below the vocabulary "
                              "size %zu of '%s'",
                              op, (unsigned)ids[i], i, count, b->vocab, b->vocab_path);
        total += token_len(b, ids[i]);
    }
    *size = total;
    if (!out) return MPCL_OK;
    if (total > cap)
        return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG,
                          "%s: the %zu tokens take %zu bytes, the buffer holds %zu", op, count,
                          total, cap);
    unsigned char *o = out;
    for (size_t i = 0; i < count; i++) {
        memcpy(o, b->bytes + b->start[ids[i]], token_len(b, ids[i]));
        o += token_len(b, ids[i]);
    }
    return MPCL_OK;
}
