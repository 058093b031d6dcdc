/* A plug-in whose split_sinkhorn returns an error code for cases whose first comb logit is positive
 * (about half of them), and that has no other entry point: the runs must fail those cases with
 * its message, skip the ops it lacks, and go on. */
#include <stdio.h>

#include "mhc/plugin/mhc_plugin.h"

static int split_sinkhorn(const mhc_config* c, const float* mixes, const float* hc_scale,
                          const float* hc_base, float* pre, float* post, float* comb, char* err,
                          size_t err_size) {
  (void)hc_scale, (void)hc_base;
  if (mixes[2 * c->n] > 0) { /* the first comb logit */
    snprintf(err, err_size, "workspace exhausted (test plug-in, first logit %g)",
             (double)mixes[2 * c->n]);
    return 3;
  }
  for (int t = 0; t < (int)c->tokens; ++t)
    for (int j = 0; j < c->n; ++j) {
      pre[t * c->n + j] = 0.5f;
      post[t * c->n + j] = 1.0f;
      for (int k = 0; k < c->n; ++k) comb[(t * c->n + j) * c->n + k] = j == k ? 1.0f : 0.0f;
    }
  return 0;
}

static const mhc_plugin table = {MHC_PLUGIN_ABI_VERSION,
                                 "error-test",
                                 "error codes on every other call",
                                 MHC_MEMORY_HOST,
                                 NULL,
                                 split_sinkhorn,
                                 NULL,
                                 NULL,
                                 NULL,
                                 NULL};

const mhc_plugin* mhc_plugin_v1(void) {
  return &table;
}
