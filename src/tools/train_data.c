/* See train_data.h. */
#include "train_data.h"

/* Where a data set's batches come from, in the words of MPCL_DATA. */
static const char *placement_name(bool streamed) {
    return streamed ? "stream" : "device";
}

/* The same, in the banner's words. */
static const char *placement_words(bool streamed) {
    return streamed ? "streamed from the host" : "on the device";
}

void train_data_placement_json(jsonw *w, const mpcl_train_data_info *d) {
    jsonw_key(w, "placement");
    jsonw_object_begin(w);
    jsonw_kv_string(w, "train", placement_name(d->train_streamed));
    if (d->test_samples) jsonw_kv_string(w, "test", placement_name(d->test_streamed));
    jsonw_object_end(w);
}

void train_data_print(FILE *h, const mpcl_train_data_info *d) {
    if (d->float_targets)
        fprintf(h, "targets   %d float columns per sample\n", d->classes);
    else if (d->classes_inferred)
        fprintf(h,
                "classes   %d, inferred from the largest training label %d (use --classes N to "
                "declare)\n",
                d->classes, d->classes - 1);
    else
        fprintf(h, "classes   %d, declared\n", d->classes);
    fprintf(h, "batches   training set %s, test set %s\n", placement_words(d->train_streamed),
            d->test_samples ? placement_words(d->test_streamed) : "none");
    if (d->batch < d->batch_requested)
        fprintf(h,
                "batch     %zu: --batch %zu is more than the %zu training samples, so each epoch "
                "is one batch of all of them\n",
                d->batch, d->batch_requested, d->train_samples);
    fflush(h);
}

/* The first class of the run of rare classes that ends at the largest
 * label, or -1: the labels --classes would refuse as stray. */
static int stray_from(const mpcl_train_data_info *d) {
    if (!d->classes_inferred || d->rare_count == 0 || d->rare[d->rare_count - 1] != d->classes - 1)
        return -1;
    size_t i = d->rare_count - 1;
    while (i > 0 && d->rare[i - 1] == d->rare[i] - 1) i--;
    return d->rare[i] > 0 ? d->rare[i] : -1;
}

void train_data_warn(const mpcl_train_data_info *d) {
    double mean = (double)d->train_samples / d->classes;
    int stray = stray_from(d);
    for (size_t i = 0; i < d->rare_count; i++) {
        int c = d->rare[i];
        size_t n = d->class_examples[c];
        fprintf(stderr,
                "mpcl-train: warning: class %d has %zu training example%s of %zu (under 1%% of "
                "the mean, %.1f per class)",
                c, n, n == 1 ? "" : "s", d->train_samples, mean);
        if (stray >= 0 && c >= stray)
            fprintf(stderr,
                    "; the %d classes were inferred from the largest training label %d: if "
                    "label %d is stray, --classes %d refuses it\n",
                    d->classes, d->classes - 1, c, stray);
        else
            fprintf(stderr, "; --classes N declares the class count\n");
    }
}

void train_data_json(jsonw *w, const mpcl_train_data_info *d, bool classes) {
    jsonw_kv_uint(w, "batch", d->batch);
    jsonw_kv_uint(w, "batch_requested", d->batch_requested);
    if (!classes) return;
    jsonw_key(w, "input_shape");
    jsonw_array_begin(w);
    for (size_t i = 0; i < d->input_rank; i++) jsonw_uint(w, d->input_shape[i]);
    jsonw_array_end(w);
    jsonw_key(w, "classes");
    jsonw_object_begin(w);
    jsonw_kv_int(w, "count", d->classes);
    jsonw_kv_string(w, "source",
                    d->float_targets      ? "target columns"
                    : d->classes_inferred ? "largest training label"
                                          : "--classes");
    /* Labels are bytes: class_examples counts 256 classes at most (float
     * target columns may be more, and have none). */
    int largest = (d->classes < 256 ? d->classes : 256) - 1;
    while (largest > 0 && d->class_examples[largest] == 0) largest--;
    jsonw_kv_int(w, "largest_label", largest);
    jsonw_key(w, "rare");
    jsonw_array_begin(w);
    for (size_t i = 0; i < d->rare_count; i++) {
        jsonw_object_begin(w);
        jsonw_kv_int(w, "class", d->rare[i]);
        jsonw_kv_uint(w, "examples", d->class_examples[d->rare[i]]);
        jsonw_object_end(w);
    }
    jsonw_array_end(w);
    jsonw_object_end(w);
}
