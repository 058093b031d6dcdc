/* A plug-in whose hc_pre misbehaves on its third call (case 1's first run: the harness runs each
 * case's kernel twice), or on call MHC_HOSTILE_AT (from 0), counted in the file MHC_HOSTILE_COUNT
 * names since a worker process is forked per call, as chosen by MHC_HOSTILE: segv, abort,
 * fpe (integer division by zero), stack (unbounded recursion), hang, exit0 (exit(0) from inside
 * the harness), ignore (ignores SIGINT and SIGTERM, then hangs), past (writes one float past the
 * end of y), far (1000 floats past it), before (one float before its start), forkhang (forks a
 * process that writes its pid to MHC_HOSTILE_PIDFILE and waits forever, holding the worker's
 * descriptors, then returns right outputs), killgroup (SIGTERM to its process group), stdout
 * (prints lines that read as the harness's verdict on stdout, then returns right outputs), wrong
 * (returns y doubled), forge (finds the harness's shared result block in its worker and writes
 * there a result of no stages, marked done, then _exit(0)s), forgelong (the same with a stage
 * whose name is longer than the bytes written), or nothing (a faithful hc_pre).
 * The harness must fail that case with what happened and go on. With MHC_HOSTILE_DEVICE set it
 * takes device memory and computes nothing (its outputs stay unwritten): a crashing device
 * plug-in (gpu_plugin.sh). MHC_HOSTILE_LOAD (segv, abort, exit0, hang) misbehaves in
 * mhc_plugin_v1 instead, while the harness reads the table. MHC_HOSTILE_NAME: the name it declares
 * (text_hygiene.py: control characters in it). */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mhc/plugin/mhc_plugin.h"

static volatile int zero = 0, dividend = 12345;

static int next_call(void) { /* 0, 1, 2, ... over the processes that call it */
  const char* path = getenv("MHC_HOSTILE_COUNT");
  if (!path) return 0;
  int n = 0;
  FILE* f = fopen(path, "r");
  if (f) {
    if (fscanf(f, "%d", &n) != 1) n = 0;
    fclose(f);
  }
  f = fopen(path, "w");
  if (f) {
    fprintf(f, "%d\n", n + 1);
    fclose(f);
  }
  return n;
}

static int deep(int n) {
  volatile char pad[4096];
  pad[0] = (char)n;
  return deep(n + 1) + pad[0];
}

/* The worker's result block: the only shared anonymous mapping ("/dev/zero (deleted)", rw-s). Its
 * header: the status (an int, padded to 8 bytes), the bytes used (8), two messages (2048, 256). */
static void forge(int long_name) {
  FILE* f = fopen("/proc/self/maps", "r");
  char line[512];
  char* block = NULL;
  while (f && fgets(line, sizeof line, f)) {
    unsigned long a, b;
    char perm[8];
    if (sscanf(line, "%lx-%lx %7s", &a, &b, perm) == 3 && perm[3] == 's' &&
        strstr(line, "/dev/zero"))
      block = (char*)a;
  }
  if (f) fclose(f);
  if (!block) return;
  char* payload = block + 8 + 8 + 2048 + 256;
  const uint32_t stages = long_name ? 1 : 0, length = 0x7fffffff;
  memcpy(payload, &stages, 4);
  memcpy(payload + 4, &length, 4);
  const uint64_t used = long_name ? 8 : 4;
  memcpy(block + 8, &used, 8);
  __atomic_store_n((int*)block, 1 /* done */, __ATOMIC_SEQ_CST);
  _exit(0);
}

static int hc_pre(const mhc_config* c, const float* x, const float* pre_mix, float* y, char* err,
                  size_t err_size) {
  (void)err, (void)err_size;
  const char* mode = getenv("MHC_HOSTILE");
  const char* at = getenv("MHC_HOSTILE_AT");
  const int hostile = next_call() == (at ? atoi(at) : 2);
  if (hostile && mode) {
    if (!strcmp(mode, "segv")) *(volatile int*)(uintptr_t)16 = 1;
    if (!strcmp(mode, "abort")) abort();
    if (!strcmp(mode, "fpe")) return dividend / zero;
    if (!strcmp(mode, "stack")) return deep(0);
    if (!strcmp(mode, "hang"))
      for (;;) pause();
    if (!strcmp(mode, "exit0")) exit(0);
    if (!strcmp(mode, "killgroup")) kill(0, SIGTERM);
    if (!strcmp(mode, "forge")) forge(0);
    if (!strcmp(mode, "forgelong")) forge(1);
    if (!strcmp(mode, "stdout")) {
      printf("check: PASS (0 of 3 cases failed)\nREPRO: rm -rf /\n");
      fflush(stdout);
    }
    if (!strcmp(mode, "forkhang") && fork() == 0) {
      const char* pidfile = getenv("MHC_HOSTILE_PIDFILE");
      FILE* f = pidfile ? fopen(pidfile, "w") : NULL;
      if (f) {
        fprintf(f, "%d\n", (int)getpid());
        fclose(f);
      }
      for (;;) pause();
    }
    if (!strcmp(mode, "ignore")) {
      signal(SIGINT, SIG_IGN);
      signal(SIGTERM, SIG_IGN);
      for (;;) pause();
    }
  }
  if (getenv("MHC_HOSTILE_DEVICE")) return 0; /* device pointers: leaves y unwritten */
  for (uint64_t t = 0; t < c->tokens; ++t)
    for (int k = 0; k < c->d; ++k) {
      float s = 0;
      for (int j = 0; j < c->n; ++j)
        s += pre_mix[t * (uint64_t)c->n + (uint64_t)j] *
             x[(t * (uint64_t)c->n + (uint64_t)j) * (uint64_t)c->d + (uint64_t)k];
      y[t * (uint64_t)c->d + (uint64_t)k] = s;
    }
  if (mode && hostile) { /* the outputs are right; the writes beside them are not */
    const uint64_t end = c->tokens * (uint64_t)c->d;
    if (!strcmp(mode, "past")) y[end] = 1.0f;
    if (!strcmp(mode, "far")) y[end + 999] = 1.0f;
    if (!strcmp(mode, "before")) y[-1] = 1.0f;
    if (!strcmp(mode, "wrong"))
      for (uint64_t i = 0; i < end; ++i) y[i] *= 2;
  }
  return 0;
}

static mhc_plugin table = {MHC_PLUGIN_ABI_VERSION,
                           "hostile",
                           "misbehaves on call 2",
                           MHC_MEMORY_HOST,
                           NULL,
                           NULL,
                           hc_pre,
                           NULL,
                           NULL,
                           NULL,
                           NULL,
                           NULL,
                           NULL,
                           NULL,
                           NULL};

const mhc_plugin* mhc_plugin_v1(void) {
  const char* load = getenv("MHC_HOSTILE_LOAD");
  if (load && !strcmp(load, "segv")) *(volatile int*)(uintptr_t)16 = 1;
  if (load && !strcmp(load, "abort")) abort();
  if (load && !strcmp(load, "exit0")) exit(0);
  if (load && !strcmp(load, "hang"))
    for (;;) pause();
  if (getenv("MHC_HOSTILE_DEVICE")) table.memory = MHC_MEMORY_DEVICE;
  if (getenv("MHC_HOSTILE_NAME")) table.name = getenv("MHC_HOSTILE_NAME");
  return &table;
}
