/* The program-binary cache on its own (no device): SHA-256 against known
 * digests, entries whose bodies were swapped between keys (with their own
 * tags, or with a checksum of the body alone recomputed), torn and truncated
 * entries, and several processes writing and reading one key at once. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/runtime.h"
#include "testutil.h"

#define HEADER 80 /* "MPCLBIN2" | key 32 | size 8 | tag 32 */

static char dir[64];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/mpcl-cache-unit-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

/* Counts the files in the folder, failing on a temp file left behind. */
static int entries(void) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        if (strstr(e->d_name, ".tmp-")) fail_msg("temp file left behind: %s", e->d_name);
        n++;
    }
    closedir(d);
    return n;
}

static int teardown(void **state) {
    (void)state;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char p[512];
        if (e->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    return rmdir(dir);
}

static mpcl__cache_key key_of(const char *text) {
    const char *parts[] = {text, "-cl-std=CL1.2"};
    return mpcl__cache_key_make(parts, 2);
}

static void spit(const char *p, const void *b, size_t n) {
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Reading key must be a rejection: NULL with *rejected set. */
static void expect_rejected(mpcl__cache_key key, const char *what) {
    size_t n = 0;
    int rejected = 0;
    unsigned char *b = mpcl__cache_read(dir, key, &n, &rejected);
    if (b || !rejected) fail_msg("%s: entry was %s", what, b ? "accepted" : "not even seen");
}

static void expect_body(mpcl__cache_key key, const unsigned char *want, size_t want_n) {
    size_t n = 0;
    int rejected = 1;
    unsigned char *b = mpcl__cache_read(dir, key, &n, &rejected);
    assert_non_null(b);
    assert_int_equal(rejected, 0);
    assert_int_equal(n, want_n);
    assert_memory_equal(b, want, n);
    free(b);
}

static void sha256_known_digests(void **state) {
    (void)state;
    static const struct {
        size_t n;
        const char *hex;
    } cases[] = {
        {0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"},
        {56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"},
        {63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"},
        {64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"},
        {65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"},
        {1000, "1e9bc38cbf860b9ec31918b065f9b52476c549a782e0e7990bed8ce3868d2371"},
    };
    /* "abc" for 3 bytes (FIPS 180-4's example), else bytes (7i + 3) mod 256:
     * the padding's edge cases at 55, 56, 63, 64 and 65 bytes. */
    unsigned char pat[1000];
    for (int i = 0; i < 1000; i++) pat[i] = (unsigned char)(i * 7 + 3);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        unsigned char d[32];
        char hex[65];
        mpcl__sha256(cases[c].n == 3 ? (const void *)"abc" : pat, cases[c].n, d);
        for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", d[i]);
        assert_string_equal(hex, cases[c].hex);
    }
}

/* Entries A and B; then B's file with A's body: moved with A's own tag, with
 * a tag of the body alone, and A's whole file under B's name. Each is
 * rejected, nothing is accepted, and B written again reads back. */
static void swapped_bodies_are_rejected(void **state) {
    (void)state;
    mpcl__cache_key ka = key_of("a"), kb = key_of("b");
    unsigned char body_a[300], body_b[200];
    for (int i = 0; i < 300; i++) body_a[i] = (unsigned char)(i * 13);
    for (int i = 0; i < 200; i++) body_b[i] = (unsigned char)(i * 31 + 1);
    mpcl__cache_write(dir, ka, body_a, sizeof body_a);
    mpcl__cache_write(dir, kb, body_b, sizeof body_b);
    assert_int_equal(entries(), 2);
    expect_body(ka, body_a, sizeof body_a);
    expect_body(kb, body_b, sizeof body_b);
    char pa[4200], pb[4200];
    mpcl__cache_entry_path(pa, sizeof pa, dir, ka);
    mpcl__cache_entry_path(pb, sizeof pb, dir, kb);
    size_t na, nb;
    unsigned char *fa = tu_slurp(pa, &na), *fb = tu_slurp(pb, &nb);
    assert_int_equal(na, HEADER + sizeof body_a);
    assert_int_equal(nb, HEADER + sizeof body_b);

    /* B's magic and key; A's size, tag and body. */
    unsigned char *swap = malloc(na);
    assert_non_null(swap);
    memcpy(swap, fb, 40);
    memcpy(swap + 40, fa + 40, na - 40);
    spit(pb, swap, na);
    expect_rejected(kb, "A's body and tag under B's key");
    /* The same with the tag recomputed over the body alone. */
    mpcl__sha256(body_a, sizeof body_a, swap + 48);
    spit(pb, swap, na);
    expect_rejected(kb, "A's body under B's key with a body-only checksum");
    /* A's whole entry under B's name. */
    spit(pb, fa, na);
    expect_rejected(kb, "A's entry under B's name");
    expect_body(ka, body_a, sizeof body_a); /* A itself is untouched */

    mpcl__cache_write(dir, kb, body_b, sizeof body_b); /* the rebuild */
    expect_body(kb, body_b, sizeof body_b);
    assert_int_equal(entries(), 2);
    free(swap);
    free(fa);
    free(fb);
}

/* Every proper prefix of an entry (a torn write), one byte more, and each
 * single-bit flip of the header and the body's ends is rejected. */
static void torn_and_damaged_entries_are_rejected(void **state) {
    (void)state;
    mpcl__cache_key k = key_of("torn");
    unsigned char body[150];
    for (int i = 0; i < 150; i++) body[i] = (unsigned char)(i ^ 0x5a);
    mpcl__cache_write(dir, k, body, sizeof body);
    char p[4200];
    mpcl__cache_entry_path(p, sizeof p, dir, k);
    size_t n;
    unsigned char *whole = tu_slurp(p, &n);
    for (size_t len = 0; len < n; len++) {
        spit(p, whole, len);
        char what[64];
        snprintf(what, sizeof what, "prefix of %zu bytes", len);
        expect_rejected(k, what);
    }
    unsigned char *longer = malloc(n + 1);
    assert_non_null(longer);
    memcpy(longer, whole, n);
    longer[n] = 0;
    spit(p, longer, n + 1);
    expect_rejected(k, "one byte appended");
    for (size_t at = 0; at < n; at = at < HEADER + 8 ? at + 1 : (at < n - 8 ? n - 8 : at + 1)) {
        memcpy(longer, whole, n);
        longer[at] ^= (unsigned char)(1u << (at % 8));
        spit(p, longer, n);
        char what[64];
        snprintf(what, sizeof what, "bit flip at byte %zu", at);
        expect_rejected(k, what);
    }
    spit(p, whole, n);
    expect_body(k, body, sizeof body);
    free(longer);
    free(whole);
}

#define WRITERS 4
#define ROUNDS 40
#define BIG (256 * 1024)

/* One writer: writes its own body (every byte its id) under the shared key
 * and reads the key back, ROUNDS times. Whatever it reads must be one
 * writer's whole body; a rejection means a reader saw a torn entry. */
static int writer(int id) {
    mpcl__cache_key k = key_of("shared");
    unsigned char *body = malloc(BIG);
    if (!body) return 2;
    memset(body, id + 1, BIG);
    for (int r = 0; r < ROUNDS; r++) {
        mpcl__cache_write(dir, k, body, BIG);
        size_t n = 0;
        int rejected = 0;
        unsigned char *got = mpcl__cache_read(dir, k, &n, &rejected);
        if (!got) return rejected ? 3 : 4;
        if (n != BIG) return 5;
        for (size_t i = 1; i < n; i++)
            if (got[i] != got[0] || got[0] < 1 || got[0] > WRITERS) return 6;
        free(got);
    }
    free(body);
    return 0;
}

static void concurrent_writers_and_readers(void **state) {
    (void)state;
    pid_t pids[WRITERS];
    fflush(NULL);
    for (int i = 0; i < WRITERS; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) _exit(writer(i));
    }
    for (int i = 0; i < WRITERS; i++) {
        int ws;
        assert_int_equal(waitpid(pids[i], &ws, 0), pids[i]);
        if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
            fail_msg("writer %d: %s %d (3: torn entry rejected, 6: mixed bodies)", i,
                     WIFEXITED(ws) ? "exit" : "signal",
                     WIFEXITED(ws) ? WEXITSTATUS(ws) : WTERMSIG(ws));
    }
    assert_int_equal(entries(), 1); /* one entry, no temp file left */
}

/* A FIFO under an entry's name is a rejected entry: read without waiting
 * on it (alarm() turns a blocking open into a failure instead of a hang),
 * and a write leaves it as it is. */
static void a_fifo_entry_is_rejected_never_waited_on(void **state) {
    (void)state;
    mpcl__cache_key k = key_of("fifo");
    char path[4200];
    mpcl__cache_entry_path(path, sizeof path, dir, k);
    assert_int_equal(mkfifo(path, 0600), 0);
    unsigned char body[100] = {1, 2, 3};
    alarm(10);
    expect_rejected(k, "a FIFO");
    mpcl__cache_write(dir, k, body, sizeof body);
    expect_rejected(k, "a FIFO after a write");
    alarm(0);
    struct stat sb;
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    assert_int_equal(entries(), 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sha256_known_digests),
        cmocka_unit_test_setup_teardown(swapped_bodies_are_rejected, setup, teardown),
        cmocka_unit_test_setup_teardown(torn_and_damaged_entries_are_rejected, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrent_writers_and_readers, setup, teardown),
        cmocka_unit_test_setup_teardown(a_fifo_entry_is_rejected_never_waited_on, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
