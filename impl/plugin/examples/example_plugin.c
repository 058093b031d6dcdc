/* An example plug-in: the mHC pieces in plain C99 on host memory, one token at a time, as a user
 * would first write them. Built twice (impl/plugin/CMakeLists.txt): faithful, and with
 * -DMHC_PLANTED_BUG, which puts the softmax's eps inside its division, the bug that a
 * tolerance of 1e-5 cannot see at hc_eps = 1e-6 and that the gate's suite must catch. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "mhc/plugin/mhc_plugin.h"

#define MHC_EXPORT __attribute__((visibility("default")))

static int mix_count(const mhc_config* c) {
  return (2 + c->n) * c->n;
}

/* bf16 storage of a stream value: round to nearest, ties to even. */
static float stored(const mhc_config* c, float v) {
  if (!c->bf16_streams || isnan(v)) return v;
  uint32_t u;
  memcpy(&u, &v, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  memcpy(&v, &u, 4);
  return v;
}

static int check_config(const mhc_config* c, char* err, size_t err_size) {
  if (c->n < 1 || c->d < 1 || c->iters < 1 || c->n > 64) {
    snprintf(err, err_size, "unsupported configuration n=%d d=%d iters=%d", (int)c->n, (int)c->d,
             (int)c->iters);
    return 1;
  }
  return 0;
}

static int mixes(const mhc_config* c, const float* x, const float* hc_fn, float* out, char* err,
                 size_t err_size) {
  if (check_config(c, err, err_size)) return 1;
  const size_t nd = (size_t)c->n * (size_t)c->d;
  const int M = mix_count(c);
  for (uint64_t t = 0; t < c->tokens; ++t) {
    const float* xt = x + t * nd;
    float ss = 0;
    for (size_t i = 0; i < nd; ++i) ss += xt[i] * xt[i];
    const float r = 1.0f / sqrtf(ss / (float)nd + c->norm_eps);
    for (int a = 0; a < M; ++a) {
      float acc = 0;
      for (size_t i = 0; i < nd; ++i) acc += hc_fn[(size_t)a * nd + i] * xt[i];
      out[t * (uint64_t)M + (uint64_t)a] = acc * r;
    }
  }
  return 0;
}

static float sigmoidf(float z) {
  return 1.0f / (1.0f + expf(-z));
}

static int split_sinkhorn(const mhc_config* c, const float* mixes_in, const float* scale,
                          const float* base, float* pre, float* post, float* comb, char* err,
                          size_t err_size) {
  if (check_config(c, err, err_size)) return 1;
  const int n = c->n, M = mix_count(c);
  const float eps = c->hc_eps;
  float C[64 * 64];
  for (uint64_t t = 0; t < c->tokens; ++t) {
    const float* m = mixes_in + t * (uint64_t)M;
    for (int j = 0; j < n; ++j) {
      pre[t * (uint64_t)n + (uint64_t)j] = sigmoidf(m[j] * scale[0] + base[j]) + eps;
      post[t * (uint64_t)n + (uint64_t)j] = 2.0f * sigmoidf(m[n + j] * scale[1] + base[n + j]);
    }
    for (int j = 0; j < n; ++j) { /* row softmax, max-subtracted; eps after the division */
      float mx = -INFINITY, s = 0;
      for (int k = 0; k < n; ++k) {
        C[j * n + k] = m[2 * n + j * n + k] * scale[2] + base[2 * n + j * n + k];
        if (C[j * n + k] > mx) mx = C[j * n + k];
      }
      for (int k = 0; k < n; ++k) s += (C[j * n + k] = expf(C[j * n + k] - mx));
      for (int k = 0; k < n; ++k)
#ifdef MHC_PLANTED_BUG
        C[j * n + k] = C[j * n + k] / (s + eps); /* the planted bug: eps inside the division */
#else
        C[j * n + k] = C[j * n + k] / s + eps;
#endif
    }
    for (int it = 0; it < c->iters; ++it) {
      if (it > 0)
        for (int j = 0; j < n; ++j) {
          float s = 0;
          for (int k = 0; k < n; ++k) s += C[j * n + k];
          for (int k = 0; k < n; ++k) C[j * n + k] /= s + eps;
        }
      for (int k = 0; k < n; ++k) {
        float s = 0;
        for (int j = 0; j < n; ++j) s += C[j * n + k];
        for (int j = 0; j < n; ++j) C[j * n + k] /= s + eps;
      }
    }
    memcpy(comb + t * (uint64_t)(n * n), C, sizeof(float) * (size_t)(n * n));
  }
  return 0;
}

static int hc_pre(const mhc_config* c, const float* x, const float* p, float* y, char* err,
                  size_t err_size) {
  if (check_config(c, err, err_size)) return 1;
  const size_t n = (size_t)c->n, d = (size_t)c->d;
  for (uint64_t t = 0; t < c->tokens; ++t)
    for (size_t i = 0; i < d; ++i) {
      float acc = 0;
      for (size_t j = 0; j < n; ++j) acc += p[t * n + j] * x[(t * n + j) * d + i];
      y[t * d + i] = stored(c, acc);
    }
  return 0;
}

static int hc_post(const mhc_config* c, const float* f, const float* residual, const float* post,
                   const float* comb, float* y, char* err, size_t err_size) {
  if (check_config(c, err, err_size)) return 1;
  const size_t n = (size_t)c->n, d = (size_t)c->d;
  for (uint64_t t = 0; t < c->tokens; ++t)
    for (size_t k = 0; k < n; ++k)
      for (size_t i = 0; i < d; ++i) {
        float acc = post[t * n + k] * f[t * d + i];
        for (size_t j = 0; j < n; ++j) /* comb[j, k] carries stream j into stream k */
          acc += comb[(t * n + j) * n + k] * residual[(t * n + j) * d + i];
        y[(t * n + k) * d + i] = stored(c, acc);
      }
  return 0;
}

static int rmsnorm(const mhc_config* c, const float* x, const float* g, float* y, char* err,
                   size_t err_size) {
  if (check_config(c, err, err_size)) return 1;
  const size_t d = (size_t)c->d;
  for (uint64_t t = 0; t < c->tokens; ++t) {
    float ss = 0;
    for (size_t i = 0; i < d; ++i) ss += x[t * d + i] * x[t * d + i];
    const float r = 1.0f / sqrtf(ss / (float)d + c->norm_eps);
    for (size_t i = 0; i < d; ++i) y[t * d + i] = g[i] * (x[t * d + i] * r);
  }
  return 0;
}

/* The boundary from the pieces: the unfused form, which is what a first plug-in would do. */
static int boundary(const mhc_config* c, const mhc_boundary_in* in, const mhc_boundary_out* out,
                    char* err, size_t err_size) {
  if (hc_post(c, in->f, in->residual, in->post, in->comb, out->x, err, err_size)) return 1;
  if (mixes(c, out->x, in->hc_fn, out->mixes, err, err_size)) return 1;
  if (split_sinkhorn(c, out->mixes, in->hc_scale, in->hc_base, out->pre, out->post, out->comb, err,
                     err_size))
    return 1;
  return hc_pre(c, out->x, in->pre_mix, out->y, err, err_size);
}

/* Backward (ABI version 2) of the pieces without a Sinkhorn: closed forms, parameter gradients
 * summed over the tokens in order. */
static int hc_pre_backward(const mhc_config* c, const float* x, const float* p, const float* g,
                           float* dx, float* dp, char* err, size_t err_size) {
  if (check_config(c, err, err_size)) return 1;
  const size_t n = (size_t)c->n, d = (size_t)c->d;
  for (uint64_t t = 0; t < c->tokens; ++t)
    for (size_t j = 0; j < n; ++j) {
      float acc = 0;
      for (size_t i = 0; i < d; ++i) {
        dx[(t * n + j) * d + i] = p[t * n + j] * g[t * d + i];
        acc += g[t * d + i] * x[(t * n + j) * d + i];
      }
      dp[t * n + j] = acc;
    }
  return 0;
}

static int hc_post_backward(const mhc_config* c, const float* f, const float* residual,
                            const float* post, const float* comb, const float* g, float* df,
                            float* dr, float* dpost, float* dcomb, char* err, size_t err_size) {
  if (check_config(c, err, err_size)) return 1;
  const size_t n = (size_t)c->n, d = (size_t)c->d;
  for (uint64_t t = 0; t < c->tokens; ++t) {
    const float* gt = g + t * n * d;
    for (size_t i = 0; i < d; ++i) {
      float acc = 0;
      for (size_t k = 0; k < n; ++k) acc += post[t * n + k] * gt[k * d + i];
      df[t * d + i] = acc;
    }
    for (size_t k = 0; k < n; ++k) {
      float acc = 0;
      for (size_t i = 0; i < d; ++i) acc += gt[k * d + i] * f[t * d + i];
      dpost[t * n + k] = acc;
    }
    for (size_t j = 0; j < n; ++j) {
      for (size_t i = 0; i < d; ++i) {
        float acc = 0;
        for (size_t k = 0; k < n; ++k) acc += comb[(t * n + j) * n + k] * gt[k * d + i];
        dr[(t * n + j) * d + i] = acc;
      }
      for (size_t k = 0; k < n; ++k) {
        float acc = 0;
        for (size_t i = 0; i < d; ++i) acc += gt[k * d + i] * residual[(t * n + j) * d + i];
        dcomb[(t * n + j) * n + k] = acc;
      }
    }
  }
  return 0;
}

static int rmsnorm_backward(const mhc_config* c, const float* x, const float* w, const float* g,
                            float* dx, float* dw, char* err, size_t err_size) {
  if (check_config(c, err, err_size)) return 1;
  const size_t d = (size_t)c->d;
  for (size_t i = 0; i < d; ++i) dw[i] = 0;
  for (uint64_t t = 0; t < c->tokens; ++t) {
    const float* xt = x + t * d;
    const float* gt = g + t * d;
    float ss = 0, gwx = 0;
    for (size_t i = 0; i < d; ++i) ss += xt[i] * xt[i];
    const float r = 1.0f / sqrtf(ss / (float)d + c->norm_eps);
    for (size_t i = 0; i < d; ++i) gwx += gt[i] * w[i] * xt[i];
    for (size_t i = 0; i < d; ++i) {
      dx[t * d + i] = r * w[i] * gt[i] - r * r * r / (float)d * xt[i] * gwx;
      dw[i] += gt[i] * xt[i] * r;
    }
  }
  return 0;
}

#ifdef MHC_PLANTED_BUG
#define EXAMPLE_NAME "example-planted-bug"
#define EXAMPLE_DESCRIPTION "the example plug-in with eps inside the softmax division"
#else
#define EXAMPLE_NAME "example"
#define EXAMPLE_DESCRIPTION "the mHC pieces in plain C99, host memory"
#endif

MHC_EXPORT const mhc_plugin* mhc_plugin_v1(void) {
  static const mhc_plugin table = {MHC_PLUGIN_ABI_VERSION,
                                   EXAMPLE_NAME,
                                   EXAMPLE_DESCRIPTION,
                                   MHC_MEMORY_HOST,
                                   mixes,
                                   split_sinkhorn,
                                   hc_pre,
                                   hc_post,
                                   rmsnorm,
                                   boundary,
                                   NULL, /* mixes_backward */
                                   NULL, /* split_sinkhorn_backward */
                                   hc_pre_backward,
                                   hc_post_backward,
                                   rmsnorm_backward};
  return &table;
}
