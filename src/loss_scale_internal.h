/* What the optimizer needs from the loss scaler: its device state. Private to
 * src/ (belongs in internal.h once the areas settle). */
#ifndef MPCL_LOSS_SCALE_INTERNAL_H
#define MPCL_LOSS_SCALE_INTERNAL_H

#include "internal.h"

/* The uint [4] state buffer: good_steps, found_inf, skipped_steps,
 * last_found_inf (cl/loss_scale.cl names the indices). */
enum {
    MPCL__LS_GOOD,
    MPCL__LS_FOUND_INF,
    MPCL__LS_SKIPPED,
    MPCL__LS_LAST_FOUND_INF,
    MPCL__LS_STATE_LEN
};
cl_mem mpcl__loss_scale_state_mem(const mpcl_loss_scale *ls);
cl_mem mpcl__loss_scale_scale_mem(const mpcl_loss_scale *ls);

#endif
