/* A plug-in whose split_sinkhorn returns an error code for cases whose first comb logit is positive
 * (about half of them), and that has no other entry point: the runs must fail those cases with
 * its message, skip the ops it lacks, and go on. Its table is a version 1 one, built as against
 * the version 1 header (it ends after `boundary`): the harness must read no further. */
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

struct v1_table { /* mhc_plugin as version 1 of the header declared it */
  uint32_t abi_version;
  const char *name, *description;
  mhc_memory memory;
  mhc_mixes_fn mixes;
  mhc_split_sinkhorn_fn split_sinkhorn;
  mhc_hc_pre_fn hc_pre;
  mhc_hc_post_fn hc_post;
  mhc_rmsnorm_fn rmsnorm;
  mhc_boundary_fn boundary;
};
static const struct v1_table table = {1,
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
  return (const mhc_plugin*)&table;
}
