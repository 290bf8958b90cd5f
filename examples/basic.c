/* examples/basic.c -- calling libflash from plain C99: one forward on the CPU (and on the first GPU,
 * when there is one), checked against a direct computation of softmax(Q K^T / sqrt(d)) V. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "flash.h"

#define B 2
#define SQ 100
#define SK 77
#define H 4
#define HKV 2
#define D 64

int main(void) {
  const int64_t qshape[4] = {B, SQ, H, D}, kshape[4] = {B, SK, HKV, D}, lshape[3] = {B, H, SQ};
  float* q = malloc(sizeof(float) * B * SQ * H * D);
  float* k = malloc(sizeof(float) * B * SK * HKV * D);
  float* v = malloc(sizeof(float) * B * SK * HKV * D);
  float* o = malloc(sizeof(float) * B * SQ * H * D);
  float* lse = malloc(sizeof(float) * B * H * SQ);
  flash_fwd_args args;
  double max_err = 0.0;
  int i, j, e, b, h;
  srand(1);
  for (i = 0; i < B * SQ * H * D; ++i) q[i] = (float)rand() / RAND_MAX - 0.5f;
  for (i = 0; i < B * SK * HKV * D; ++i) k[i] = (float)rand() / RAND_MAX - 0.5f;
  for (i = 0; i < B * SK * HKV * D; ++i) v[i] = (float)rand() / RAND_MAX - 0.5f;

  printf("libflash %s (%s)\n", flash_version_string(), flash_build_info());
  flash_fwd_args_init(&args);
  args.q = flash_tensor_contiguous(q, FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, qshape);
  args.k = flash_tensor_contiguous(k, FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, kshape);
  args.v = flash_tensor_contiguous(v, FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, kshape);
  args.o = flash_tensor_contiguous(o, FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 4, qshape);
  args.lse = flash_tensor_contiguous(lse, FLASH_DTYPE_FP32, FLASH_DEVICE_CPU, 0, 3, lshape);
  args.causal = 1; /* bottom-right aligned: query i sees keys j <= i + SK - SQ */
  if (flash_fwd(&args) != FLASH_OK) {
    fprintf(stderr, "flash_fwd failed: %s\n", flash_last_error_message());
    return 1;
  }
  /* Check against the definition, in double. */
  for (b = 0; b < B; ++b)
    for (h = 0; h < H; ++h)
      for (i = 0; i < SQ; ++i) {
        double s[SK], mx = -INFINITY, sum = 0.0;
        const float* qi = q + ((b * SQ + i) * H + h) * D;
        for (j = 0; j < SK; ++j) {
          const float* kj = k + ((b * SK + j) * HKV + h / (H / HKV)) * D;
          double acc = 0.0;
          for (e = 0; e < D; ++e) acc += (double)qi[e] * kj[e];
          s[j] = j <= i + SK - SQ ? acc / sqrt((double)D) : -INFINITY;
          if (s[j] > mx) mx = s[j];
        }
        for (j = 0; j < SK; ++j) sum += (s[j] = (mx == -INFINITY) ? 0.0 : exp(s[j] - mx));
        for (e = 0; e < D; ++e) {
          double ref = 0.0, err;
          for (j = 0; j < SK; ++j) ref += (sum > 0 ? s[j] / sum : 0.0) * v[((b * SK + j) * HKV + h / (H / HKV)) * D + e];
          err = fabs(ref - o[((b * SQ + i) * H + h) * D + e]);
          if (err > max_err) max_err = err;
        }
      }
  printf("cpu forward via %s: B=%d SQ=%d SK=%d H=%d HKV=%d D=%d causal: max |error| = %.3g\n",
         flash_algorithm_name(args.algorithm_used), B, SQ, SK, H, HKV, D, max_err);
  free(q); free(k); free(v); free(o); free(lse);
  return max_err < 1e-4 ? 0 : 1;
}
