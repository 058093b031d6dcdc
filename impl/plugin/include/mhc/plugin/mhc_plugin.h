/* The plug-in ABI of mhc-verify, version 2: how a user's kernels join the harness.
 *
 * A plug-in is a shared library exporting one C function, `mhc_plugin_v1`, that returns a table:
 * its name, whether it takes host or device memory, and an fp32 entry point per op (NULL for an
 * op it does not implement). `mhc-verify check --kernel plugin:PATH.so` loads it with dlopen and
 * judges it like any built-in kernel: outputs are poisoned (a NaN payload) before each call, so
 * an element the plug-in never writes fails.
 *
 * Layouts are row-major fp32 (fixtures/README.md): streams [T, n, d], mixes [T, M] with
 * M = (2 + n) * n, weights [T, n], comb [T, n, n] with comb[t, j, k] carrying stream j into
 * stream k, hc_fn [M, n*d], hc_scale [3], hc_base [M], rmsnorm weight [d].
 *
 * Memory: with MHC_MEMORY_HOST every pointer is host memory; with MHC_MEMORY_DEVICE every
 * pointer is CUDA device memory of device 0 (the harness copies inputs there and outputs back),
 * and the entry point returns after its work is complete (synchronise before returning).
 *
 * Errors: an entry point returns 0 on success; anything else is a failure, with a NUL-terminated
 * message of at most err_size bytes written to err. The harness fails that case with the
 * message and goes on with the next one.
 *
 * Compatibility: fields are only ever added at the end, under a new version. Version 2 added the
 * backward entry points; the harness reads a version 1 table (abi_version 1: a plug-in built
 * against the version 1 header) as it always did, with no backward, and refuses other versions.
 * Thread-safety: the harness calls one entry point at a time. Isolation: a host-memory plug-in is
 * called in a worker process forked for each case, so no state of the plug-in survives from one
 * call to the next, and whatever it does to its process (a crash, a hang, exit()) fails that case
 * only. */
#ifndef MHC_PLUGIN_H
#define MHC_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MHC_PLUGIN_ABI_VERSION 2

typedef enum mhc_memory { MHC_MEMORY_HOST = 0, MHC_MEMORY_DEVICE = 1 } mhc_memory;

/* The configuration of one call (docs/semantics.md, "Configuration"), and what the harness
 * declares of it ("Precision models"). */
typedef struct mhc_config {
  int32_t n;      /* parallel streams (hc_mult) */
  int32_t d;      /* hidden width */
  int32_t iters;  /* Sinkhorn rounds: iters column divisions, iters - 1 row divisions */
  float hc_eps;   /* eps of pre and of the Sinkhorn divisions */
  float norm_eps; /* eps of the RMS statistics */
  int32_t tf32;   /* 1: the mixes projection may round its operands to tf32 */
  int32_t
      bf16_streams; /* 1: stream tensors are bf16 values; outputs x and y may be rounded to bf16 */
  uint64_t tokens;  /* T */
} mhc_config;

/* The sublayer boundary: hc_post of sublayer k, then mixes + split_sinkhorn of the new streams
 * and hc_pre with the reading weights pre_mix computed earlier. */
typedef struct mhc_boundary_in {
  const float *f, *residual, *post, *comb, *pre_mix, *hc_fn, *hc_scale, *hc_base;
} mhc_boundary_in;
typedef struct mhc_boundary_out {
  float *x, *y, *mixes, *pre, *post, *comb;
} mhc_boundary_out;

typedef int (*mhc_mixes_fn)(const mhc_config* c, const float* x, const float* hc_fn, float* mixes,
                            char* err, size_t err_size);
typedef int (*mhc_split_sinkhorn_fn)(const mhc_config* c, const float* mixes, const float* hc_scale,
                                     const float* hc_base, float* pre, float* post, float* comb,
                                     char* err, size_t err_size);
typedef int (*mhc_hc_pre_fn)(const mhc_config* c, const float* x, const float* pre_mix, float* y,
                             char* err, size_t err_size);
typedef int (*mhc_hc_post_fn)(const mhc_config* c, const float* f, const float* residual,
                              const float* post, const float* comb, float* y, char* err,
                              size_t err_size);
typedef int (*mhc_rmsnorm_fn)(const mhc_config* c, const float* x, const float* weight, float* y,
                              char* err, size_t err_size);
typedef int (*mhc_boundary_fn)(const mhc_config* c, const mhc_boundary_in* in,
                               const mhc_boundary_out* out, char* err, size_t err_size);

/* Version 2: backward entry points (docs/semantics.md, "The backward pass"). Given a piece's
 * inputs and the upstream gradients g_* of its outputs (the outputs' layouts), write the gradients
 * d_* of its inputs (the inputs' layouts, per token) and of its parameters (their layouts, summed
 * over the T tokens, overwritten). mixes_backward is the projection alone (mixes = hc_fn x /
 * rms(x)); the harness composes the mixes op's backward and the boundary's from the pieces'. */
typedef int (*mhc_mixes_backward_fn)(const mhc_config* c, const float* x, const float* hc_fn,
                                     const float* g_mixes, float* d_x, float* d_hc_fn, char* err,
                                     size_t err_size);
typedef int (*mhc_split_sinkhorn_backward_fn)(const mhc_config* c, const float* mixes,
                                              const float* hc_scale, const float* hc_base,
                                              const float* g_pre, const float* g_post,
                                              const float* g_comb, float* d_mixes,
                                              float* d_hc_scale, float* d_hc_base, char* err,
                                              size_t err_size);
typedef int (*mhc_hc_pre_backward_fn)(const mhc_config* c, const float* x, const float* pre_mix,
                                      const float* g_y, float* d_x, float* d_pre_mix, char* err,
                                      size_t err_size);
typedef int (*mhc_hc_post_backward_fn)(const mhc_config* c, const float* f, const float* residual,
                                       const float* post, const float* comb, const float* g_y,
                                       float* d_f, float* d_residual, float* d_post, float* d_comb,
                                       char* err, size_t err_size);
typedef int (*mhc_rmsnorm_backward_fn)(const mhc_config* c, const float* x, const float* weight,
                                       const float* g_y, float* d_x, float* d_weight, char* err,
                                       size_t err_size);

typedef struct mhc_plugin {
  uint32_t abi_version; /* MHC_PLUGIN_ABI_VERSION */
  const char* name;     /* shown in reports, e.g. "mylib-fused" */
  const char* description;
  mhc_memory memory;
  mhc_mixes_fn mixes;
  mhc_split_sinkhorn_fn split_sinkhorn;
  mhc_hc_pre_fn hc_pre;
  mhc_hc_post_fn hc_post;
  mhc_rmsnorm_fn rmsnorm;
  mhc_boundary_fn boundary;
  /* version 2 */
  mhc_mixes_backward_fn mixes_backward;
  mhc_split_sinkhorn_backward_fn split_sinkhorn_backward;
  mhc_hc_pre_backward_fn hc_pre_backward;
  mhc_hc_post_backward_fn hc_post_backward;
  mhc_rmsnorm_backward_fn rmsnorm_backward;
} mhc_plugin;

/* The one symbol a plug-in exports. */
const mhc_plugin* mhc_plugin_v1(void);

#ifdef __cplusplus
}
#endif

#endif /* MHC_PLUGIN_H */
