/* model_priv.h — what model.c and model_tensors.c share and nobody else sees. */
#ifndef NB_MODEL_PRIV_H
#define NB_MODEL_PRIV_H

#include <stddef.h>

struct model;

/* Binds and validates every tensor of m (hyperparameters and layer kinds
 * already read).  Returns 0 or a negative NB_E* naming the tensor. */
int model_bind_tensors(struct model *m, char *err, size_t errlen);

#endif
