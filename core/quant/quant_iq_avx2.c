#include "core/quant/quant_impl.h"
const quant_vec_dot_fn quant_iq_avx2_vec_dot[QT_COUNT] = {0};
