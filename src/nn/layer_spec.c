/* Layer specs as plain data: every reader and writer of a spec goes through
 * the attributes its kind declares (nn.h's mpcl__attr), so a kind states
 * its attributes once. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpcl/number.h"
#include "nn/nn.h"

const mpcl__layer_kind *mpcl__spec_kind(const mpcl_layer_spec *spec) {
    if (!memchr(spec->kind, 0, sizeof spec->kind)) return NULL;
    return mpcl__layer_kind_find(spec->kind);
}

static const mpcl__attr *find_attr(const mpcl__layer_kind *k, const char *name) {
    for (size_t i = 0; name && i < k->attr_count; i++)
        if (strcmp(k->attrs[i].name, name) == 0) return &k->attrs[i];
    return NULL;
}

static const mpcl__attr *attr_at(const char *kind, size_t index) {
    const mpcl__layer_kind *k = mpcl__layer_kind_find(kind);
    return k && index < k->attr_count ? &k->attrs[index] : NULL;
}

size_t mpcl_layer_attr_count(const char *kind) {
    const mpcl__layer_kind *k = mpcl__layer_kind_find(kind);
    return k ? k->attr_count : 0;
}
const char *mpcl_layer_attr_name(const char *kind, size_t index) {
    const mpcl__attr *a = attr_at(kind, index);
    return a ? a->name : NULL;
}
mpcl_attr_type mpcl_layer_attr_type(const char *kind, size_t index) {
    const mpcl__attr *a = attr_at(kind, index);
    return a ? a->type : MPCL_ATTR_COUNT;
}
const char *mpcl_layer_attr_default(const char *kind, size_t index) {
    const mpcl__attr *a = attr_at(kind, index);
    return a ? a->default_value : NULL;
}
const char *mpcl_layer_kind_keras_name(const char *kind) {
    const mpcl__layer_kind *k = mpcl__layer_kind_find(kind);
    return k ? k->keras_name : NULL;
}
const char *mpcl_layer_kind_from_keras(const char *class_name) {
    for (size_t i = 0; class_name && i < mpcl_layer_kind_count(); i++) {
        const mpcl__layer_kind *k = mpcl__layer_kind_find(mpcl_layer_kind_name(i));
        if (strcmp(k->keras_name, class_name) == 0) return k->name;
    }
    return NULL;
}

/* ---- one attribute's value: text to field and back ---- */

static void *field(mpcl_layer_spec *s, const mpcl__attr *a) {
    return (char *)s + a->offset;
}
static const void *cfield(const mpcl_layer_spec *s, const mpcl__attr *a) {
    return (const char *)s + a->offset;
}

static bool in_range(const mpcl__attr *a, double v) {
    return v >= a->lo && (a->hi_open ? v < a->hi : v <= a->hi);
}

/* "the attribute's range": [1, 65536] or [0, 1) */
static void range_str(const mpcl__attr *a, char *buf, size_t size) {
    snprintf(buf, size, "[%.9g, %.9g%c", a->lo, a->hi, a->hi_open ? ')' : ']');
}

static bool parse_count(const mpcl__attr *a, const char *text, size_t *out) {
    uint64_t v;
    if (mpcl_parse_uint(text, (uint64_t)a->hi, &v) != MPCL_NUMBER_OK || !in_range(a, (double)v))
        return false;
    *out = (size_t)v;
    return true;
}

/* Parses text into a scratch copy of the field; false when it is not a
 * value of the attribute's type and range. */
static bool parse_value(const mpcl__attr *a, const char *text, mpcl_layer_spec *s) {
    void *f = field(s, a);
    switch (a->type) {
    case MPCL_ATTR_COUNT: return parse_count(a, text, f);
    case MPCL_ATTR_PAIR: {
        size_t *pair = f;
        const char *comma = strchr(text, ',');
        if (!comma) return parse_count(a, text, &pair[0]) && parse_count(a, text, &pair[1]);
        char first[32];
        size_t len = (size_t)(comma - text);
        if (len >= sizeof first) return false;
        memcpy(first, text, len);
        first[len] = '\0';
        return parse_count(a, first, &pair[0]) && parse_count(a, comma + 1, &pair[1]);
    }
    case MPCL_ATTR_REAL: {
        double v;
        if (mpcl_parse_real(text, &v) != MPCL_NUMBER_OK || !in_range(a, v)) return false;
        *(double *)f = v;
        return true;
    }
    case MPCL_ATTR_BOOL:
        if (strcmp(text, "true") != 0 && strcmp(text, "false") != 0) return false;
        *(bool *)f = text[0] == 't';
        return true;
    case MPCL_ATTR_ACTIVATION:
        if (strcmp(text, "linear") == 0 || strcmp(text, "softmax") == 0) {
            *(mpcl_activation *)f = text[0] == 'l' ? MPCL_ACT_IDENTITY : MPCL_ACT_SOFTMAX;
            return true;
        }
        return mpcl_activation_parse(text, f);
    case MPCL_ATTR_PADDING: return mpcl_padding_parse(text, f);
    }
    return false;
}

/* What a value of the attribute looks like, for messages. */
static void expected_str(const mpcl__attr *a, char *buf, size_t size) {
    char range[64];
    range_str(a, range, sizeof range);
    switch (a->type) {
    case MPCL_ATTR_COUNT: snprintf(buf, size, "a whole number in %s", range); break;
    case MPCL_ATTR_PAIR:
        snprintf(buf, size, "one or two whole numbers in %s (\"3\" or \"3,3\")", range);
        break;
    case MPCL_ATTR_REAL: snprintf(buf, size, "a number in %s", range); break;
    case MPCL_ATTR_BOOL: snprintf(buf, size, "true or false"); break;
    case MPCL_ATTR_ACTIVATION:
        snprintf(buf, size, "an activation: linear (identity), %s, softmax (an output layer's)",
                 mpcl_activation_names());
        break;
    case MPCL_ATTR_PADDING: snprintf(buf, size, "valid or same"); break;
    }
}

static int format_value(const mpcl__attr *a, const mpcl_layer_spec *s, char *buf, size_t size) {
    const void *f = cfield(s, a);
    switch (a->type) {
    case MPCL_ATTR_COUNT: return snprintf(buf, size, "%zu", *(const size_t *)f);
    case MPCL_ATTR_PAIR: {
        const size_t *p = f;
        return snprintf(buf, size, "%zu,%zu", p[0], p[1]);
    }
    /* %.17g gives back the same double when parsed. */
    case MPCL_ATTR_REAL: return snprintf(buf, size, "%.17g", *(const double *)f);
    case MPCL_ATTR_BOOL: return snprintf(buf, size, "%s", *(const bool *)f ? "true" : "false");
    case MPCL_ATTR_ACTIVATION: {
        mpcl_activation act = *(const mpcl_activation *)f;
        return snprintf(buf, size, "%s",
                        act == MPCL_ACT_IDENTITY ? "linear" : mpcl_activation_name(act));
    }
    case MPCL_ATTR_PADDING:
        return snprintf(buf, size, "%s", mpcl_padding_name(*(const mpcl_padding *)f));
    }
    return -1;
}

/* A required attribute is unset while its field is all zero. */
static bool is_unset(const mpcl__attr *a, const mpcl_layer_spec *s) {
    if (a->type == MPCL_ATTR_PAIR) {
        const size_t *p = cfield(s, a);
        return p[0] == 0 && p[1] == 0;
    }
    return a->type == MPCL_ATTR_COUNT && *(const size_t *)cfield(s, a) == 0;
}

/* ---- specs ---- */

static mpcl_status unknown_kind(mpcl_context *ctx, const char *kind) {
    char known[256] = "";
    for (size_t i = 0; i < mpcl_layer_kind_count(); i++) {
        size_t len = strlen(known);
        snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", mpcl_layer_kind_name(i));
    }
    return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "unknown layer kind \"%.*s\" (known: %s)",
                      MPCL_LAYER_KIND_MAX, kind ? kind : "(null)", known);
}

mpcl_status mpcl_layer_spec_init(mpcl_context *ctx, const char *kind, mpcl_layer_spec *out) {
    const mpcl__layer_kind *k = mpcl__layer_kind_find(kind);
    if (!k) return unknown_kind(ctx, kind);
    memset(out, 0, sizeof *out);
    snprintf(out->kind, sizeof out->kind, "%s", k->name);
    for (size_t i = 0; i < k->attr_count; i++) {
        const mpcl__attr *a = &k->attrs[i];
        /* The declarations' defaults are values of their own type. */
        if (a->default_value && !parse_value(a, a->default_value, out))
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: bad default %s=%s", k->name, a->name,
                              a->default_value);
    }
    return MPCL_OK;
}

mpcl_status mpcl_layer_spec_set(mpcl_context *ctx, mpcl_layer_spec *spec, const char *attr,
                                const char *value) {
    const mpcl__layer_kind *k = mpcl__spec_kind(spec);
    if (!k) return unknown_kind(ctx, spec->kind);
    const mpcl__attr *a = find_attr(k, attr);
    if (!a) {
        char names[256] = "";
        for (size_t i = 0; i < k->attr_count; i++) {
            size_t len = strlen(names);
            snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", k->attrs[i].name);
        }
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s has no attribute \"%s\" (it has: %s)",
                          k->name, attr ? attr : "(null)", k->attr_count ? names : "none");
    }
    mpcl_layer_spec scratch = *spec;
    if (!value || !parse_value(a, value, &scratch)) {
        char want[160];
        expected_str(a, want, sizeof want);
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s %s=\"%s\": want %s", k->name, a->name,
                          value ? value : "(null)", want);
    }
    *spec = scratch;
    return MPCL_OK;
}

mpcl_status mpcl_layer_spec_get(mpcl_context *ctx, const mpcl_layer_spec *spec, const char *attr,
                                char *buf, size_t size) {
    const mpcl__layer_kind *k = mpcl__spec_kind(spec);
    if (!k) return unknown_kind(ctx, spec->kind);
    const mpcl__attr *a = find_attr(k, attr);
    if (!a)
        return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s has no attribute \"%s\"", k->name,
                          attr ? attr : "(null)");
    int n = format_value(a, spec, buf, size);
    if (n < 0 || (size_t)n >= size)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE, "%s.%s: a buffer of %zu bytes is too short", k->name,
                          a->name, size);
    return MPCL_OK;
}

mpcl_status mpcl_layer_spec_check(mpcl_context *ctx, const mpcl_layer_spec *spec) {
    const mpcl__layer_kind *k = mpcl__spec_kind(spec);
    if (!k) return unknown_kind(ctx, spec->kind);
    for (size_t i = 0; i < k->attr_count; i++) {
        const mpcl__attr *a = &k->attrs[i];
        if (!a->default_value && is_unset(a, spec))
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s needs %s", k->name, a->name);
        /* A value set in the struct directly goes through the same check
         * as its text. */
        char text[64];
        mpcl_layer_spec scratch = *spec;
        int n = format_value(a, spec, text, sizeof text);
        if (n < 0 || (size_t)n >= sizeof text || !parse_value(a, text, &scratch)) {
            char want[160];
            expected_str(a, want, sizeof want);
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s %s=%s: want %s", k->name, a->name,
                              n > 0 ? text : "?", want);
        }
    }
    return MPCL_OK;
}

mpcl_status mpcl_layer_spec_format(mpcl_context *ctx, const mpcl_layer_spec *spec, char *buf,
                                   size_t size) {
    const mpcl__layer_kind *k = mpcl__spec_kind(spec);
    if (!k) return unknown_kind(ctx, spec->kind);
    size_t len = (size_t)snprintf(buf, size, "%s", k->name);
    for (size_t i = 0; i < k->attr_count && len < size; i++) {
        len += (size_t)snprintf(buf + len, size - len, " %s=", k->attrs[i].name);
        if (len >= size) break;
        int n = format_value(&k->attrs[i], spec, buf + len, size - len);
        len += n > 0 ? (size_t)n : 0;
    }
    if (len >= size)
        return MPCL_ERROR(ctx, MPCL_ERR_SHAPE, "%s spec: a buffer of %zu bytes is too short",
                          k->name, size);
    return MPCL_OK;
}

mpcl_status mpcl_layer_spec_parse(mpcl_context *ctx, const char *text, mpcl_layer_spec *out) {
    char word[256];
    const char *p = text ? text : "";
    size_t len = strcspn(p, " ");
    if (len >= sizeof word) len = sizeof word - 1;
    memcpy(word, p, len);
    word[len] = '\0';
    mpcl_layer_spec s;
    mpcl_status st = mpcl_layer_spec_init(ctx, word, &s);
    if (st != MPCL_OK) return st;
    const mpcl__layer_kind *k = mpcl__spec_kind(&s);
    bool seen[32] = {0};
    for (p += len; *p;) {
        p += strspn(p, " ");
        len = strcspn(p, " ");
        if (len == 0) break;
        if (len >= sizeof word)
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: an attribute of %zu characters",
                              k->name, len);
        memcpy(word, p, len);
        word[len] = '\0';
        p += len;
        char *eq = strchr(word, '=');
        if (!eq)
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: \"%s\" is not name=value", k->name,
                              word);
        *eq = '\0';
        const mpcl__attr *a = find_attr(k, word);
        if (a && seen[a - k->attrs])
            return MPCL_ERROR(ctx, MPCL_ERR_INVALID_ARG, "%s: %s given twice", k->name, word);
        if ((st = mpcl_layer_spec_set(ctx, &s, word, eq + 1)) != MPCL_OK) return st;
        seen[a - k->attrs] = true;
    }
    if ((st = mpcl_layer_spec_check(ctx, &s)) != MPCL_OK) return st;
    *out = s;
    return MPCL_OK;
}
