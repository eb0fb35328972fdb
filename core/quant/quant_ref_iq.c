/* quant_ref_iq.c — the scalar reference of the IQ formats. */
#include "core/quant/quant_impl.h"

const quant_to_float_fn quant_iq_to_float[QT_COUNT] = {0};
const quant_vec_dot_fn quant_iq_vec_dot[QT_COUNT] = {0};
