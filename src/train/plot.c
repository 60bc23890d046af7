/* The run record and its SVG: four panels on a 2x2 grid under a title, each
 * drawn by one function from the same axis helpers. See plot.h. */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpcl/plot.h"
#include "runtime/fileio.h"
#include "train/train_internal.h"

struct mpcl_run_record {
    char title[512];
    mpcl_train_report *reports;
    size_t count, capacity;
};

mpcl_status mpcl_run_record_create(const mpcl_trainer *tr, mpcl_run_record **out) {
    *out = NULL;
    mpcl_run_record *rec = calloc(1, sizeof *rec);
    if (!rec) return MPCL_ERROR(tr->ctx, MPCL_ERR_OUT_OF_MEMORY, "allocating a run record");
    const mpcl_plan *plan = mpcl_model_plan(tr->model);
    const mpcl_loss_scale *ls = mpcl_model_loss_scale(tr->model);
    const char *scaling = !ls ? "off"
                          : mpcl_loss_scale_get_params(ls).mode == MPCL_LOSS_SCALE_FIXED
                              ? "fixed"
                              : "dynamic";
    snprintf(rec->title, sizeof rec->title,
             "%s \xe2\x80\x94 %s \xe2\x86\x92 %s: storage %s, GEMM %s, loss scaling %s, batch %zu",
             mpcl_context_device(tr->ctx)->name, mpcl_policy_name(plan->policy),
             mpcl_policy_name(plan->resolved), mpcl_dtype_name(plan->storage),
             mpcl_gemm_path_name(plan->gemm), scaling, tr->params.batch);
    *out = rec;
    return MPCL_OK;
}

void mpcl_run_record_destroy(mpcl_run_record *rec) {
    if (!rec) return;
    free(rec->reports);
    free(rec);
}

mpcl_status mpcl_run_record_add(mpcl_run_record *rec, const mpcl_train_report *report) {
    if (rec->count == rec->capacity) {
        size_t cap = rec->capacity ? 2 * rec->capacity : 64;
        mpcl_train_report *r = realloc(rec->reports, cap * sizeof *r);
        if (!r) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "run record of %zu reports", cap);
        rec->reports = r;
        rec->capacity = cap;
    }
    rec->reports[rec->count++] = *report;
    return MPCL_OK;
}

size_t mpcl_run_record_count(const mpcl_run_record *rec) {
    return rec->count;
}

/* ---- SVG ---- */

#define WIDTH 1000
#define HEIGHT 700
#define TRAIN_COLOR "#1f77b4"
#define TEST_COLOR "#d62728"
#define SKIP_COLOR "#ff7f0e"

/* One series: y of report i, or NaN where it has no point. */
typedef double (*series_fn)(const mpcl_train_report *r);

static double s_loss(const mpcl_train_report *r) {
    return r->loss;
}
static double s_accuracy(const mpcl_train_report *r) {
    return 100 * r->accuracy;
}
static double s_test_loss(const mpcl_train_report *r) {
    return r->epoch_end ? r->test_loss : (double)NAN;
}
static double s_test_accuracy(const mpcl_train_report *r) {
    return r->epoch_end ? 100 * r->test_accuracy : (double)NAN;
}
static double s_log2_scale(const mpcl_train_report *r) {
    return r->loss_scale > 0 ? log2((double)r->loss_scale) : (double)NAN;
}
static double s_samples(const mpcl_train_report *r) {
    return r->samples_per_s > 0 ? r->samples_per_s : (double)NAN;
}

/* A panel's plot area in pixels and the data range it shows. */
typedef struct panel {
    double x, y, w, h;
    double xlo, xhi, ylo, yhi;
} panel;

static double px(const panel *p, double x) {
    return p->x + (x - p->xlo) / (p->xhi - p->xlo) * p->w;
}
static double py(const panel *p, double y) {
    return p->y + p->h - (y - p->ylo) / (p->yhi - p->ylo) * p->h;
}

/* A 1, 2 or 5 times a power of ten near (hi - lo) / 5: about five ticks. */
static double tick_step(double lo, double hi) {
    double raw = (hi - lo) / 5, mag = pow(10, floor(log10(raw))), norm = raw / mag;
    return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}

/* The range of the given series over the record, widened to whole ticks (or
 * to [integer] steps for log2 axes) and never empty. */
static void data_range(const mpcl_run_record *rec, const series_fn *fns, size_t nfns, bool integer,
                       double *lo, double *hi) {
    *lo = INFINITY;
    *hi = -INFINITY;
    for (size_t i = 0; i < rec->count; i++)
        for (size_t f = 0; f < nfns; f++) {
            double v = fns[f](&rec->reports[i]);
            if (!isfinite(v)) continue;
            *lo = fmin(*lo, v);
            *hi = fmax(*hi, v);
        }
    if (!(*lo <= *hi)) *lo = *hi = 0;
    if (*hi - *lo < (integer ? 1 : 1e-9 * fmax(1, fabs(*hi)))) {
        *lo -= integer ? 1 : fmax(0.5, 0.05 * fabs(*lo));
        *hi += integer ? 1 : fmax(0.5, 0.05 * fabs(*hi));
    }
    if (integer) {
        *lo = floor(*lo);
        *hi = ceil(*hi);
    } else {
        double s = tick_step(*lo, *hi);
        *lo = floor(*lo / s) * s;
        *hi = ceil(*hi / s) * s;
    }
}

/* XML text: &, < and > escaped (the title holds the driver's device name). */
static void put_text(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else
            fputc(*s, f);
    }
}

/* The frame, the grid, tick labels on both axes (log2 axes label 2^k), the
 * axis titles and the panel's title. */
static void axes(FILE *f, const panel *p, const char *title, const char *ylabel, bool log2_axis) {
    fprintf(f,
            "<g class=\"panel\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
            "fill=\"#fafafa\" stroke=\"#444\"/>\n",
            p->x, p->y, p->w, p->h);
    double xs = tick_step(p->xlo, p->xhi);
    for (double t = ceil(p->xlo / xs) * xs; t <= p->xhi + 1e-9 * xs; t += xs) {
        double x = px(p, t);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>", x,
                p->y, x, p->y + p->h);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", x,
                p->y + p->h + 14, t);
    }
    double ys = log2_axis ? fmax(1, ceil((p->yhi - p->ylo) / 6)) : tick_step(p->ylo, p->yhi);
    for (double t = ceil(p->ylo / ys) * ys; t <= p->yhi + 1e-9 * ys; t += ys) {
        double y = py(p, t);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>", p->x,
                y, p->x + p->w, y);
        if (log2_axis)
            fprintf(f,
                    "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">2<tspan dy=\"-5\" "
                    "font-size=\"8\">%g</tspan></text>\n",
                    p->x - 10, y + 4, t);
        else
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", p->x - 4,
                    y + 4, t);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">step</text>\n", p->x + p->w / 2,
            p->y + p->h + 30);
    fprintf(f,
            "<text transform=\"translate(%.1f,%.1f) rotate(-90)\" "
            "text-anchor=\"middle\">%s</text>\n",
            p->x - 50, p->y + p->h / 2, ylabel);
    fprintf(f,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-weight=\"bold\">%s</text>"
            "</g>\n",
            p->x + p->w / 2, p->y - 8, title);
}

/* A polyline through the finite points of one series, with a dot on each
 * (a series with a single point still shows). */
static void line(FILE *f, const panel *p, const mpcl_run_record *rec, series_fn fn,
                 const char *color) {
    fprintf(f,
            "<g class=\"series\"><polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
            "points=\"",
            color);
    for (size_t i = 0; i < rec->count; i++) {
        double v = fn(&rec->reports[i]);
        if (isfinite(v)) fprintf(f, "%.1f,%.1f ", px(p, (double)rec->reports[i].step), py(p, v));
    }
    fputs("\"/>\n", f);
    for (size_t i = 0; i < rec->count; i++) {
        double v = fn(&rec->reports[i]);
        if (isfinite(v))
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2\" fill=\"%s\"/>",
                    px(p, (double)rec->reports[i].step), py(p, v), color);
    }
    fputs("</g>\n", f);
}

/* A rectangle in pixels. */
typedef struct box {
    double x, y, w, h;
} box;

/* Whether the segment from (x0, y0) to (x1, y1) meets b (Liang-Barsky
 * clipping; a segment of length 0 is a point). */
static bool segment_meets(const box *b, double x0, double y0, double x1, double y1) {
    const double d[4] = {-(x1 - x0), x1 - x0, -(y1 - y0), y1 - y0};
    const double q[4] = {x0 - b->x, b->x + b->w - x0, y0 - b->y, b->y + b->h - y0};
    double t0 = 0, t1 = 1;
    for (int i = 0; i < 4; i++) {
        if (d[i] == 0) {
            if (q[i] < 0) return false; /* parallel to this edge and outside it */
            continue;
        }
        double t = q[i] / d[i];
        if (d[i] < 0)
            t0 = fmax(t0, t);
        else
            t1 = fmin(t1, t);
        if (t0 > t1) return false;
    }
    return true;
}

/* How many of the drawn segments (and lone points) of the series meet b. */
static size_t hits(const panel *p, const mpcl_run_record *rec, const series_fn *fns, size_t n,
                   const box *b) {
    size_t count = 0;
    for (size_t f = 0; f < n; f++) {
        double x0 = NAN, y0 = NAN;
        for (size_t i = 0; i < rec->count; i++) {
            double v = fns[f](&rec->reports[i]);
            if (!isfinite(v)) continue;
            double x = px(p, (double)rec->reports[i].step), y = py(p, v);
            /* The first point is a segment of length 0. */
            count += segment_meets(b, isnan(x0) ? x : x0, isnan(x0) ? y : y0, x, y);
            x0 = x;
            y0 = y;
        }
    }
    return count;
}

/* The legend's box for `entries` entries: of the four corners of the plot
 * area, the one whose box (widened by the dots' radius) the data cross
 * least, how many times in *crossed; top right first when several are
 * free. */
static box legend_box(const panel *p, const mpcl_run_record *rec, const series_fn *fns, size_t n,
                      size_t entries, size_t *crossed) {
    const double w = 126, h = 16 * (double)entries + 6, inset = 4, dot = 2;
    const double left = p->x + inset, right = p->x + p->w - inset - w;
    const double top = p->y + inset, bottom = p->y + p->h - inset - h;
    const box corners[4] = {
        {right, top, w, h}, {left, top, w, h}, {right, bottom, w, h}, {left, bottom, w, h}};
    size_t best = 0, best_hits = SIZE_MAX;
    for (size_t c = 0; c < 4; c++) {
        box wide = {corners[c].x - dot, corners[c].y - dot, w + 2 * dot, h + 2 * dot};
        size_t k = hits(p, rec, fns, n, &wide);
        if (k < best_hits) {
            best = c;
            best_hits = k;
        }
    }
    *crossed = best_hits;
    return corners[best];
}

/* The legend's box, with the top of the y range raised by whole ticks (log2
 * axes: by one) while the data cross every corner: headroom above the data
 * frees the top corners. (A run whose throughput zig-zags from corner to
 * corner had a dot under its legend.) */
static box legend_room(panel *p, const mpcl_run_record *rec, const series_fn *fns, size_t n,
                       size_t entries, bool log2_axis) {
    size_t crossed;
    box b = legend_box(p, rec, fns, n, entries, &crossed);
    for (int i = 0; crossed && i < 16; i++) {
        p->yhi += log2_axis ? 1 : tick_step(p->ylo, p->yhi);
        b = legend_box(p, rec, fns, n, entries, &crossed);
    }
    return b;
}

/* Legend entries in box b. */
static void legend(FILE *f, const box *b, size_t n, const char *const *labels,
                   const char *const *colors) {
    fprintf(f,
            "<rect class=\"legend\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
            "fill=\"white\" fill-opacity=\"0.85\" stroke=\"#bbb\"/>\n",
            b->x, b->y, b->w, b->h);
    for (size_t i = 0; i < n; i++) {
        double x = b->x + 8, y = b->y + 10 + 16 * (double)i;
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"4\" fill=\"%s\"/>"
                "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                x, y - 4, colors[i], x + 20, y + 1, labels[i]);
    }
}

/* One panel: axes, lines, legend. The loss-scale panel also marks every
 * report at which the skipped-step count grew. */
static void draw_panel(FILE *f, const mpcl_run_record *rec, panel p, const char *title,
                       const char *ylabel, const series_fn *fns, const char *const *labels,
                       const char *const *colors, size_t n, bool log2_axis) {
    data_range(rec, fns, n, log2_axis, &p.ylo, &p.yhi);
    /* The scale panel's legend has a second entry once a step was skipped
     * (the counts only grow: the last report's says). */
    bool skips = log2_axis && rec->count && rec->reports[rec->count - 1].skipped;
    size_t entries = log2_axis ? (skips ? 2 : 1) : n;
    box b = legend_room(&p, rec, fns, n, entries, log2_axis);
    axes(f, &p, title, ylabel, log2_axis);
    for (size_t i = 0; i < n; i++) line(f, &p, rec, fns[i], colors[i]);
    if (!log2_axis) {
        legend(f, &b, n, labels, colors);
        return;
    }
    uint32_t before = 0;
    fputs("<g class=\"skipped\">", f);
    for (size_t i = 0; i < rec->count; i++) {
        const mpcl_train_report *r = &rec->reports[i];
        double v = s_log2_scale(r);
        if (r->skipped > before && isfinite(v)) {
            double x = px(&p, (double)r->step), y = py(&p, v);
            fprintf(f,
                    "<path d=\"M%.1f %.1fl5 9h-10z\" fill=\"%s\"><title>%u skipped by step "
                    "%llu</title></path>",
                    x, y + 3, SKIP_COLOR, r->skipped - before, (unsigned long long)r->step);
        }
        before = r->skipped;
    }
    fputs("</g>\n", f);
    char skip_label[64];
    snprintf(skip_label, sizeof skip_label, "skipped steps (%u)", before);
    const char *l2[] = {labels[0], skip_label};
    const char *c2[] = {colors[0], SKIP_COLOR};
    legend(f, &b, entries, l2, c2);
}

static void write_svg(FILE *f, const mpcl_run_record *rec) {
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            "<text x=\"%d\" y=\"24\" text-anchor=\"middle\" font-size=\"14\">",
            WIDTH, HEIGHT, WIDTH, HEIGHT, WIDTH / 2);
    put_text(f, rec->title);
    fputs("</text>\n", f);
    double xlo = 0, xhi = 1;
    if (rec->count) {
        xlo = (double)rec->reports[0].step;
        xhi = (double)rec->reports[rec->count - 1].step;
        if (rec->count == 1 || xhi <= xlo) xlo = 0;
        if (xhi <= xlo) xhi = xlo + 1;
    }
    /* Plot areas: two columns of two, room left of each for tick labels. */
    panel g[4];
    for (int i = 0; i < 4; i++) {
        g[i].x = 80 + (i % 2) * 490;
        g[i].y = 70 + (i / 2) * 320;
        g[i].w = 400;
        g[i].h = 240;
        g[i].xlo = xlo;
        g[i].xhi = xhi;
    }
    static const char *const pair[] = {"train", "test"};
    static const char *const pair_colors[] = {TRAIN_COLOR, TEST_COLOR};
    const series_fn loss[] = {s_loss, s_test_loss}, acc[] = {s_accuracy, s_test_accuracy};
    const series_fn scale[] = {s_log2_scale}, speed[] = {s_samples};
    static const char *const scale_label[] = {"loss scale"}, *const speed_label[] = {"samples/s"};
    static const char *const one_color[] = {TRAIN_COLOR};
    draw_panel(f, rec, g[0], "Loss", "loss", loss, pair, pair_colors, 2, false);
    draw_panel(f, rec, g[1], "Accuracy", "accuracy (%)", acc, pair, pair_colors, 2, false);
    draw_panel(f, rec, g[2], "Loss scale", "loss scale (log2)", scale, scale_label, one_color, 1,
               true);
    draw_panel(f, rec, g[3], "Throughput", "samples/s", speed, speed_label, one_color, 1, false);
    fputs("</svg>\n", f);
}

mpcl_status mpcl_run_record_write_svg(const mpcl_run_record *rec, const char *path) {
    if (!rec || !path) return MPCL_ERROR(NULL, MPCL_ERR_INVALID_ARG, "plot: NULL record or path");
    /* Drawn in memory, then through the atomic writer: a reader never sees
     * half a picture, and a FIFO or a device at path is refused, never
     * waited on. */
    char *svg = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&svg, &size);
    if (!f) return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "plot: drawing '%s'", path);
    write_svg(f, rec);
    bool failed = ferror(f) != 0;
    if (fclose(f) != 0 || failed) {
        free(svg);
        return MPCL_ERROR(NULL, MPCL_ERR_OUT_OF_MEMORY, "plot: drawing '%s'", path);
    }
    mpcl__atomic_file af;
    mpcl_status st = mpcl__atomic_begin(&af, path);
    if (st == MPCL_OK) st = mpcl__atomic_write(&af, svg, size);
    if (st == MPCL_OK)
        st = mpcl__atomic_commit(&af);
    else
        mpcl__atomic_abort(&af); /* closed already when begin failed */
    free(svg);
    return st;
}
