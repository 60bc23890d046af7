/* mpcl-train's report of what the trainer made of the data: the batch a
 * run takes, the class count and where it came from, and the classes with
 * almost no training example (mpcl_trainer_data_info). */
#ifndef MPCL_TOOLS_TRAIN_DATA_H
#define MPCL_TOOLS_TRAIN_DATA_H

#include <stdio.h>

#include "jsonw.h"
#include "mpcl/train.h"

/* The banner lines: the classes, where the batches come from, and the
 * batch when --batch was cut to the training samples. */
void train_data_print(FILE *h, const mpcl_train_data_info *d);
/* One warning line on stderr per class with almost no example, with what
 * --classes would do about it. */
void train_data_warn(const mpcl_train_data_info *d);
/* "batch", "batch_requested" and, with `classes`, "input_shape" and
 * "classes" in the JSON summary (a token run has no classes). */
void train_data_json(jsonw *w, const mpcl_train_data_info *d, bool classes);
/* "placement": {"train", "test" (with test data)}: "device" or "stream",
 * inside the JSON summary's "data". */
void train_data_placement_json(jsonw *w, const mpcl_train_data_info *d);

#endif
