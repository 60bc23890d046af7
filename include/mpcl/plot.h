/* Pictures of a run: a record of the trainer's reports, written as one
 * self-contained SVG (loss, accuracy, the loss scale with skipped steps, and
 * samples/s against the step). mpcl-train --plot and Python's
 * History.plot both write it through these calls. */
#ifndef MPCL_PLOT_H
#define MPCL_PLOT_H

#include <stddef.h>

#include "mpcl/status.h"
#include "mpcl/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from libmpcl, which hides every other symbol. */
#pragma GCC visibility push(default)

typedef struct mpcl_run_record mpcl_run_record;

/* An empty record whose title names the trainer's device and plan (policy,
 * resolved precision, storage, GEMM path, loss scaling, batch). */
mpcl_status mpcl_run_record_create(const mpcl_trainer *tr, mpcl_run_record **out);
void mpcl_run_record_destroy(mpcl_run_record *rec);

/* Appends a copy of one report (call it from the trainer's on_report). */
mpcl_status mpcl_run_record_add(mpcl_run_record *rec, const mpcl_train_report *report);
size_t mpcl_run_record_count(const mpcl_run_record *rec);

/* Writes the SVG to path (replaced if it exists): four panels, each with
 * axes, tick labels and a legend -- loss and accuracy (training per report,
 * test per epoch end), the loss scale on a log2 axis with every report that
 * saw new skipped steps marked, and samples/s -- under the title. No
 * external references: it opens in any browser. MPCL_ERR_IO naming the file
 * when it cannot be written. A record without reports gives empty panels. */
mpcl_status mpcl_run_record_write_svg(const mpcl_run_record *rec, const char *path);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
