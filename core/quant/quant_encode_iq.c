/* quant_encode_iq.c — weight quantizers of the IQ formats. */
#include "core/quant/quant_impl.h"

const quant_from_float_fn quant_iq_from_float[QT_COUNT] = {0};
