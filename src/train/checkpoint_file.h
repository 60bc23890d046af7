/* Checkpoint files inside the train area: what checkpoint_file.c (reading
 * and checking a file on its own) shares with checkpoint.c (writing, and
 * loading into a model or a trainer). Nothing here is installed. */
#ifndef MPCL_TRAIN_CHECKPOINT_FILE_H
#define MPCL_TRAIN_CHECKPOINT_FILE_H

#include "mpcl/checkpoint.h"
#include "train/train_internal.h"

#define MPCL__CKPT_FORMAT "mpcl-checkpoint"
#define MPCL__CKPT_FORMAT_VERSION "1"
#define MPCL__CKPT_MAX_WIDTHS (MPCL_MAX_HIDDEN + 2)

struct mpcl_checkpoint {
    char *path;
    mpcl_safetensors *file;
    bool owns_file; /* false for a file the caller holds (the fuzz harness) */
    mpcl_model_params params;
    mpcl_checkpoint_position pos;
};

/* One tensor a model keeps: parameter `param` in optimizer slot `slot`, or
 * (buffer) buffer `param`. */
typedef struct mpcl__ckpt_expected {
    char name[64];
    size_t param;
    bool buffer;
    mpcl_optim_slot slot;
    size_t ndim, shape[MPCL_MAX_RANK], count;
} mpcl__ckpt_expected;

/* A file being read: where errors go, its name, its tensors. */
typedef struct mpcl__ckpt_loader {
    mpcl_context *ctx; /* NULL outside a trainer: the thread's message only */
    const char *path;
    const mpcl_safetensors *st;
} mpcl__ckpt_loader;

const char *mpcl__ckpt_optim_name(mpcl_optim_kind k);
/* Every tensor a model of these params keeps, named and shaped as the file
 * stores it: each parameter in each slot its optimizer keeps, then each
 * buffer. From the layers' own declarations, without a device. *e is
 * malloc'ed (the caller frees it; NULL on failure), *n tensors. */
mpcl_status mpcl__ckpt_expected_tensors(mpcl_context *ctx, const mpcl_model_params *p,
                                        mpcl__ckpt_expected **e, size_t *n);
/* The first tensor of st that is not in e[0..n), or NULL. */
const char *mpcl__ckpt_unexpected_tensor(const mpcl_safetensors *st, const mpcl__ckpt_expected *e,
                                         size_t n);
/* "[784, 128]". */
void mpcl__ckpt_shape_str(char *buf, size_t size, size_t ndim, const size_t *shape);
/* Values no run produces (a non-finite weight or moment, a negative second
 * moment) as `status`, with `what` saying whose values they are. */
mpcl_status mpcl__ckpt_check_values(mpcl_context *ctx, mpcl_status status, const char *what,
                                    const mpcl__ckpt_expected *e, const void *data, size_t count);
/* A metadata value that must be there. */
mpcl_status mpcl__ckpt_meta_str(const mpcl__ckpt_loader *L, const char *key, const char **out);
/* Is it an mpcl checkpoint of a version this code reads. */
mpcl_status mpcl__ckpt_check_format(const mpcl__ckpt_loader *L);
/* Everything the file says, checked on its own, into c: the dynamic scale
 * against the bounds b unless !check_range (a scale the user typed replaces
 * the saved one). */
mpcl_status mpcl__ckpt_check_file(const mpcl__ckpt_loader *L, mpcl_checkpoint *c,
                                  const mpcl_loss_scale_params *b, bool check_range);
/* Reads the file (safetensors only, no checks) into a new c. */
mpcl_status mpcl__ckpt_open(const char *path, mpcl_checkpoint **out);

#endif
