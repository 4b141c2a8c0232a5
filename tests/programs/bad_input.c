/* bad_input: error handling of cudaMalloc / cudaFree / cudaMemGetInfo on bad arguments.
 *
 * Every step prints one line, deterministically (no addresses, no memory sizes):
 *     step <name>: ret=<cudaError name> peek=<cudaPeekAtLastError> last=<cudaGetLastError> ...
 * peek is read first, then last (which clears the error), so a test can run the program with
 * and without tessera and require identical output. Steps: cudaMalloc(NULL, 1 MiB);
 * cudaMalloc(&p, 0); cudaMalloc(&p, SIZE_MAX); cudaMalloc(&p, SIZE_MAX/2); a failed then a
 * successful cudaMalloc followed by the last error; double free; free of an interior pointer
 * (p + 512); free of a stack address; cudaFree(NULL); cudaMemGetInfo with NULL arguments; and
 * finally a normal allocate/write/verify/free cycle, which must work.
 *
 * Exit: 0 the final cycle worked, 3 it read back wrong data, 1 it failed.
 * RESULT: status steps.
 */
#include "common.h"

static int steps;

static void report(const char *step, cudaError_t ret, const char *extra) {
  cudaError_t peek = cudaPeekAtLastError();
  cudaError_t last = cudaGetLastError();
  steps++;
  printf("step %s: ret=%s peek=%s last=%s%s%s\n", step, cudaGetErrorName(ret),
         cudaGetErrorName(peek), cudaGetErrorName(last), extra && *extra ? " " : "",
         extra ? extra : "");
}

/* How a cudaMalloc left its output pointer (it starts as `sentinel`). */
static const char *ptr_state(const void *p, const void *sentinel) {
  if (p == NULL) return "ptr=null";
  if (p == sentinel) return "ptr=unchanged";
  return "ptr=set";
}

int main(int argc, char **argv) {
  static char sentinel_obj;
  void *const sentinel = &sentinel_obj;
  void *p, *q = NULL, *r = NULL;
  int on_stack = 0;
  size_t fr = 0, total = 0, free_before = 0, free_after = 0;
  cudaError_t e;
  char extra[128];
  block_t blk;

  prog_init();
  if (argc > 1 && strcmp(argv[1], "--help") == 0) show_help(argv[0], "(no options)");
  if (argc != 1) bad_usage(argv[0], "(no options)");

  /* Make sure the context exists so that every step below sees the same state. */
  e = cudaFree(NULL);
  report("init_cudaFree_NULL", e, NULL);

  e = cudaMalloc(NULL, 1 * MiB);
  report("malloc_null_out_pointer", e, NULL);

  p = sentinel;
  e = cudaMalloc(&p, 0);
  report("malloc_zero_bytes", e, ptr_state(p, sentinel));
  if (e == cudaSuccess && p != NULL && p != sentinel) report("free_zero_bytes", cudaFree(p), NULL);

  p = sentinel;
  e = cudaMalloc(&p, SIZE_MAX);
  report("malloc_size_max", e, ptr_state(p, sentinel));

  p = sentinel;
  e = cudaMalloc(&p, SIZE_MAX / 2);
  report("malloc_half_size_max", e, ptr_state(p, sentinel));

  /* A failure followed by a success: does the last error survive the successful call? */
  p = sentinel;
  e = cudaMalloc(&p, SIZE_MAX);
  printf("step failed_then_ok: first ret=%s\n", cudaGetErrorName(e));
  e = cudaMalloc(&q, 1 * MiB);
  report("failed_then_ok", e, NULL);
  report("last_error_after_clear", cudaSuccess, NULL);
  if (e != cudaSuccess) q = NULL;

  if (q) {
    e = cudaFree(q);
    report("free", e, NULL);
    e = cudaFree(q);
    report("double_free", e, NULL);
  }

  e = cudaMalloc(&r, 1 * MiB);
  report("malloc_for_interior", e, NULL);
  if (e == cudaSuccess) {
    e = cudaFree((char *)r + 512);
    report("free_interior_pointer", e, NULL);
    e = cudaFree(r);
    report("free_after_interior", e, NULL);
  }

  e = cudaFree(&on_stack);
  report("free_stack_address", e, NULL);

  e = cudaFree(NULL);
  report("free_null", e, NULL);

  total = 0;
  e = cudaMemGetInfo(NULL, &total);
  snprintf(extra, sizeof extra, "total=%s", total ? "set" : "zero");
  report("meminfo_null_free", e, extra);
  fr = 0;
  e = cudaMemGetInfo(&fr, NULL);
  snprintf(extra, sizeof extra, "free=%s", fr ? "set" : "zero");
  report("meminfo_null_total", e, extra);
  e = cudaMemGetInfo(NULL, NULL);
  report("meminfo_null_both", e, NULL);

  /* Everything still works. */
  CHECK(cudaMemGetInfo(&free_before, &total));
  memset(&blk, 0, sizeof blk);
  CHECK(cudaMalloc(&blk.ptr, 3 * MiB + 123));
  blk.size = 3 * MiB + 123;
  blk.tag = 0xBAD1ULL;
  blk.live = 1;
  CHECK(cudaMemGetInfo(&free_after, &total));
  fill_pattern(blk.ptr, blk.size, blk.tag);
  snprintf(extra, sizeof extra, "aligned256=%s free_after<=free_before=%s free<=total=%s",
           ((uintptr_t)blk.ptr & 255) == 0 ? "yes" : "no", free_after <= free_before ? "yes" : "no",
           free_before <= total ? "yes" : "no");
  report("normal_malloc", cudaSuccess, extra);
  if (verify_pattern(blk.ptr, blk.size, blk.tag, "normal allocation")) {
    report("normal_verify", cudaSuccess, "data=WRONG");
    die_corrupt("normal_allocation");
  }
  report("normal_verify", cudaSuccess, "data=ok");
  e = cudaFree(blk.ptr);
  report("normal_free", e, NULL);
  if (e != cudaSuccess) die_cuda("cudaFree(normal)", e, __FILE__, __LINE__);

  printf("RESULT status=ok steps=%d\n", steps);
  return EXIT_WORKLOAD_OK;
}
