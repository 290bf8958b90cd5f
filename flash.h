/*
 * flash.h -- libflash, exact IO-aware attention behind a stable C ABI.
 *
 *   O = softmax(softmax_scale * Q K^T + mask) V
 *
 * computed the FlashAttention way (tiles of Q, K, V through on-chip memory, an online softmax, no N x N
 * matrix in device memory). This is the only public header. It is C99 and C++ clean and has no
 * dependency beyond <stddef.h> and <stdint.h>; it can be dlopen'ed from any language.
 *
 * ---------------------------------------------------------------------------------------------------
 * ABI RULES (read before changing anything in this file)
 *
 *  Major version (FLASH_VERSION_MAJOR, and the SONAME libflash.so.<major>) changes when, and only when,
 *  something a compiled caller relies on changes:
 *    - a function is removed, renamed, or its parameters or return type change;
 *    - a struct field is removed, reordered, retyped, or its meaning or unit changes;
 *    - a status code, dtype, device, algorithm or flag value changes meaning or is reused;
 *    - the default written by a flash_*_init() function changes the result of a call.
 *  Minor version changes when something is only added:
 *    - a new function, a new constant (status, dtype, algorithm, mask kind, flag);
 *    - a new field APPENDED at the end of a struct. Callers built against an older header pass a smaller
 *      struct_size; the library treats every field past it as holding its default. Never insert a field,
 *      and never end a struct in padding (a later field could fill it without changing sizeof, and an older
 *      library could not see that it was set): pad with a reserved field that must be 0.
 *  Patch version: no ABI change at all (bug fixes, speed).
 *
 * CONVENTIONS
 *  - Every function returns an int32_t status (FLASH_OK == 0) unless it is a pure query. On failure a
 *    thread-local message naming the exact problem is available from flash_last_error_message().
 *  - The library never prints, never exits, never aborts, and never writes memory other than the outputs
 *    (and workspace) the caller named.
 *  - Argument structs are passed by pointer, start with size_t struct_size, hold fixed-width fields only
 *    (no C enum types), and have an init function that fills in struct_size and the defaults. Always call
 *    the init function first, then set the fields you need. The init functions take the caller's
 *    sizeof (flash_X_init_sized(p, sizeof *p); the flash_X_init(p) macros pass it for C and C++; FFI
 *    callers call the _sized function with their own struct size) and write only that many bytes, so a
 *    caller built against an older header is safe with a newer library: fields it lacks read as their
 *    defaults. A struct larger than the library knows (caller newer than library) is refused with
 *    FLASH_ERROR_STRUCT_SIZE rather than having its new fields silently ignored.
 *  - A struct that skipped its init function is refused, not guessed at: a zero-filled flash_fwd_args or
 *    flash_bwd_args with only struct_size set would otherwise mean window (0, 0) -- the diagonal only --
 *    and return O = V. The init functions write algorithm_used = -1, and a call writes there the
 *    algorithm that ran (never 0), so algorithm_used == 0 on entry is FLASH_ERROR_INVALID_ARGUMENT
 *    ("the struct was not initialised"). Likewise a flash_block_mask with block_m == block_n == 0.
 *        flash_fwd_args a;                          NOT: flash_fwd_args a = {0};
 *        flash_fwd_args_init(&a);                         a.struct_size = sizeof a;
 *        a.q = ...;                                       a.q = ...;   (refused)
 *  - No array a call writes (o, lse, dq, dk, dv, the workspace) may overlap, in memory, any array the
 *    call reads (q, k, v, o and d_o and lse for the backward, the block mask's kv_num_blocks and
 *    kv_indices, the varlen index arrays cu_seqlens_q, cu_seqlens_k and seqused_k) or another array it
 *    writes: FLASH_ERROR_INVALID_ARGUMENT names the pair.
 *  - Fields written by the library are marked "out".
 *  - GPU calls are asynchronous on the stream the caller gives (NULL = the legacy default stream) and never
 *    synchronise the device. Loading the library makes no CUDA call.
 *  - Thread safety: every entry point may be called concurrently from several threads. The last-error
 *    message is per thread.
 * ---------------------------------------------------------------------------------------------------
 */
#ifndef FLASH_H_
#define FLASH_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#  if defined(FLASH_BUILDING_LIBRARY)
#    define FLASH_API __declspec(dllexport)
#  else
#    define FLASH_API __declspec(dllimport)
#  endif
#elif defined(__GNUC__) || defined(__clang__)
#  define FLASH_API __attribute__((visibility("default")))
#else
#  define FLASH_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version ------------------------------------------------------------------------------------ */
#define FLASH_VERSION_MAJOR 1
#define FLASH_VERSION_MINOR 3
#define FLASH_VERSION_PATCH 0
#define FLASH_VERSION_NUMBER (FLASH_VERSION_MAJOR * 10000 + FLASH_VERSION_MINOR * 100 + FLASH_VERSION_PATCH)

FLASH_API uint32_t flash_version_number(void); /* MAJOR*10000 + MINOR*100 + PATCH of the loaded library */
FLASH_API uint32_t flash_version_major(void);
FLASH_API uint32_t flash_version_minor(void);
FLASH_API uint32_t flash_version_patch(void);
FLASH_API const char* flash_version_string(void); /* "1.3.0", static storage */
FLASH_API const char* flash_build_info(void);     /* compiler, CUDA, GPU targets, CPU kernels' level; static storage */

/* ---- Status codes (int32_t, pinned, with gaps; a value is never reused) --------------------------- */
#define FLASH_OK 0
/* 100..199: the arguments are wrong */
#define FLASH_ERROR_INVALID_ARGUMENT 100  /* an argument value is out of its range */
#define FLASH_ERROR_NULL_POINTER 101      /* a required pointer is NULL */
#define FLASH_ERROR_STRUCT_SIZE 102       /* struct_size is smaller than the first version of the struct */
#define FLASH_ERROR_BAD_SHAPE 110         /* a shape is zero, negative, overflowing or inconsistent */
#define FLASH_ERROR_BAD_STRIDE 111        /* a stride is invalid (last dimension not contiguous, ...) */
#define FLASH_ERROR_DTYPE_MISMATCH 120    /* tensors that must share a dtype do not */
#define FLASH_ERROR_UNSUPPORTED_DTYPE 121 /* this dtype is not supported here (fp32 on a GPU, ...) */
#define FLASH_ERROR_DEVICE_MISMATCH 130   /* tensors live on different devices */
#define FLASH_ERROR_UNSUPPORTED_HEAD_DIM 140 /* head_dim is not a multiple of 8 in [8, 256] */
#define FLASH_ERROR_BAD_MASK 150          /* window or block mask is invalid */
/* 200..299: the request is valid but cannot be served on this machine */
#define FLASH_ERROR_NO_CUDA_DEVICE 200    /* a CUDA tensor was given and there is no usable CUDA device/driver */
#define FLASH_ERROR_ALGORITHM_UNAVAILABLE 210 /* the named algorithm is not built in or not usable here */
#define FLASH_ERROR_UNSUPPORTED 220       /* the algorithm does not support this combination of options */
/* 300..399: resources */
#define FLASH_ERROR_OUT_OF_MEMORY 300     /* a host or device allocation failed (naive's S at long lengths) */
#define FLASH_ERROR_WORKSPACE_TOO_SMALL 310 /* the caller's workspace is smaller than the size query said */
/* 400..499: the CUDA runtime or a library below us failed */
#define FLASH_ERROR_CUDA 400              /* a CUDA call or kernel launch failed; the message has its text */
#define FLASH_ERROR_CUBLAS 410            /* a cuBLAS call failed (algorithm naive) */
/* 900: a bug in libflash */
#define FLASH_ERROR_INTERNAL 900

FLASH_API const char* flash_status_string(int32_t status); /* "FLASH_ERROR_BAD_SHAPE", static storage */
/* Message of the last failed call on this thread ("" if none). Valid until the next call on this thread. */
FLASH_API const char* flash_last_error_message(void);

/* ---- Data types and devices (values follow DLPack's device codes) ----------------------------------- */
#define FLASH_DTYPE_FP32 1 /* CPU only */
#define FLASH_DTYPE_FP16 2
#define FLASH_DTYPE_BF16 3

#define FLASH_DEVICE_CPU 1
#define FLASH_DEVICE_CUDA 2

/* ---- Algorithms -------------------------------------------------------------------------------------- */
#define FLASH_ALGO_AUTO 0  /* the fastest available for the device and options */
#define FLASH_ALGO_CPU 1   /* FlashAttention (Algorithm 1) on the host, fp32 accumulation, threaded */
#define FLASH_ALGO_NAIVE 2 /* materialised S and P (cuBLAS on the GPU); the baseline, O(N^2) memory */
#define FLASH_ALGO_SM80 3  /* fused mma.sync tensor-core kernel, sm_80 and newer */
#define FLASH_ALGO_SM90 4  /* warp-specialised wgmma + TMA kernel, sm_90a */
#define FLASH_ALGO_COUNT 5 /* one past the largest value; grows with new algorithms */

FLASH_API const char* flash_algorithm_name(int32_t algorithm); /* "sm80"; NULL for an unknown value */
FLASH_API int32_t flash_algorithm_from_name(const char* name); /* FLASH_ALGO_*, or -1 */

/* ---- Mask constants ----------------------------------------------------------------------------------- */
/* Where the causal diagonal (and window) sits when seqlen_q != seqlen_k.
 *   BOTTOM_RIGHT (FlashAttention-2): query i sees key j iff j <= i + seqlen_k - seqlen_q.
 *   TOP_LEFT (PyTorch is_causal):    query i sees key j iff j <= i. */
#define FLASH_ALIGN_BOTTOM_RIGHT 0
#define FLASH_ALIGN_TOP_LEFT 1

/* ---- Tensor descriptor (DLPack-like) -------------------------------------------------------------- */
/* Q, K, V, O are [batch, seqlen, heads, head_dim] (ndim 4); LSE is [batch, heads, seqlen_q] (ndim 3).
 * In a packed variable-length batch (cu_seqlens_q set, since 1.3) Q, K, V, O are [total, heads, head_dim]
 * (ndim 3) and LSE is [heads, total_q] (ndim 2): see "Packed variable-length batches" below.
 * Strides are in ELEMENTS (not bytes), may be any non-negative value, but the last dimension of
 * Q, K, V and O must be contiguous (stride 1). Unused trailing shape/stride entries are ignored. */
typedef struct flash_tensor {
  void* data;          /* host pointer (device_type CPU) or device pointer (CUDA), aligned to the dtype's size */
  int32_t dtype;       /* FLASH_DTYPE_* */
  int32_t device_type; /* FLASH_DEVICE_* */
  int32_t device_id;   /* CUDA ordinal; 0 for the CPU (any other id on the CPU is refused) */
  int32_t ndim;        /* 4 for q/k/v/o, 3 for lse (varlen: 3 and 2) */
  int64_t shape[4];
  int64_t strides[4];  /* in elements */
} flash_tensor;

/* Fills a descriptor for a densely packed (row-major) tensor. Returns the descriptor by value: it is a
 * plain C struct, never extended (a new layout would be a new type). */
FLASH_API flash_tensor flash_tensor_contiguous(void* data, int32_t dtype, int32_t device_type,
                                               int32_t device_id, int32_t ndim, const int64_t* shape);

/* ---- Block-sparse mask (compact form, as FlexAttention's BlockMask) --------------------------------- */
/* For query block qb (rows [qb*block_m, (qb+1)*block_m)) of batch b and head h, the key blocks kept are
 *   kv_indices[b, h, qb, 0 .. kv_num_blocks[b, h, qb] - 1]   (key rows [kb*block_n, (kb+1)*block_n)).
 * Arrays are int32 (4-byte aligned), live on the same device as Q, and are indexed with the element strides
 * below; a stride of 0 broadcasts over batch or heads. Indices need not be sorted but must not repeat. */
typedef struct flash_block_mask {
  size_t struct_size;
  int32_t block_m;             /* query rows per block: 64 or 128 */
  int32_t block_n;             /* key rows per block: 64 or 128 */
  int32_t num_q_blocks;        /* must equal ceil(seqlen_q / block_m) */
  int32_t max_kv_blocks;       /* length of the last dimension of kv_indices */
  const int32_t* kv_num_blocks; /* [batch, heads, num_q_blocks] */
  const int32_t* kv_indices;    /* [batch, heads, num_q_blocks, max_kv_blocks] */
  int64_t kv_num_blocks_strides[3];
  int64_t kv_indices_strides[4];
} flash_block_mask;

FLASH_API int32_t flash_block_mask_init_sized(flash_block_mask* mask, size_t struct_size);
#define flash_block_mask_init(mask) flash_block_mask_init_sized((mask), sizeof(*(mask)))

/* ---- Packed variable-length batches (since 1.3) -------------------------------------------------------
 * flash_fwd_args and flash_bwd_args take a batch of sequences of different lengths packed end to end, without
 * padding (FlashAttention's flash_attn_varlen_func layout), when cu_seqlens_q is not NULL:
 *   q, o (and d_o, dq)  [total_q, heads_q, head_dim]   ndim 3; total_q = q.shape[0]
 *   k, v (and dk, dv)   [total_k, heads_kv, head_dim]  ndim 3; total_k = k.shape[0]
 *   lse                 fp32 [heads_q, total_q]         ndim 2 (lse.strides[0] steps heads, [1] rows)
 *   cu_seqlens_q, cu_seqlens_k  int32 [varlen_batch + 1], on the tensors' device (host memory for CPU
 *                       tensors, device memory for CUDA ones), 4-byte aligned, contiguous: sequence i owns query
 *                       rows cu_seqlens_q[i] .. cu_seqlens_q[i+1] - 1 and the key slot of rows
 *                       cu_seqlens_k[i] .. cu_seqlens_k[i+1] - 1.
 *   seqused_k           optional int32 [varlen_batch], same device: sequence i uses only the first seqused_k[i]
 *                       keys of its slot (a key cache with room to grow). NULL: every key of the slot.
 *   max_seqlen_q, max_seqlen_k  at least the longest seqlen_q_i and seqlen_k_i below (sizes grids and scratch;
 *                       a larger bound is allowed but costs memory in the naive algorithm).
 * For sequence i: seqlen_q_i = cu_seqlens_q[i+1] - cu_seqlens_q[i], seqlen_k_i = seqused_k ? seqused_k[i] :
 * cu_seqlens_k[i+1] - cu_seqlens_k[i]; each is its own attention problem: its queries see only its keys, and
 * causal (both alignments), the sliding window and the -inf / zero-row rules apply with its own lengths, exactly
 * as a dense call of batch 1 with seqlen_q_i and seqlen_k_i would. Zero-length sequences are allowed (no query
 * rows: nothing written; no keys: its rows get O = 0, LSE = -inf, dq = 0). Rows past cu_seqlens_q[varlen_batch]
 * (of o, lse, dq) and past cu_seqlens_k[varlen_batch] (of dk, dv) are not written. The backward writes dk = dv = 0
 * in the rows of a slot past seqused_k[i] (keys no query sees).
 * Host-resident arrays (CPU tensors) are checked element by element before anything is written, with
 * FLASH_ERROR_INVALID_ARGUMENT: cu_seqlens_*[0] == 0, non-decreasing, cu_seqlens_q[varlen_batch] <= total_q,
 * cu_seqlens_k[varlen_batch] <= total_k, 0 <= seqused_k[i] <= the slot's keys, max_seqlen_* >= every length.
 * Whatever the device: cu_seqlens_q and cu_seqlens_k go together (one NULL: FLASH_ERROR_NULL_POINTER), and with
 * them varlen_batch >= 1 and max_seqlen_* >= 0; without them seqused_k, varlen_batch and max_seqlen_* must be
 * NULL/0 (FLASH_ERROR_INVALID_ARGUMENT). Device-resident arrays (CUDA tensors) are not read by the host: they must
 * be device memory on the tensors' device (FLASH_ERROR_DEVICE_MISMATCH) and may not overlap an output or the
 * workspace, but their values are the caller's promise: values that break the rules above give unspecified results,
 * never an access outside the tensors (the kernels clamp every offset and length they read into them).
 * Not with a block-sparse mask (block_mask must be NULL: FLASH_ERROR_UNSUPPORTED). Algorithms: cpu and naive on
 * the CPU; sm80 and naive on CUDA (AUTO picks sm80, on sm_90 too; naive copies the offsets to the host once,
 * synchronising the stream); sm90 refuses varlen for now (FLASH_ERROR_UNSUPPORTED: "varlen runs on the sm80
 * kernels ..."). All varlen fields are 0/NULL after flash_*_args_init (and for callers built against flash.h 1.0-1.2,
 * whose smaller struct_size leaves them at those defaults): a dense call. */

/* ---- Forward ------------------------------------------------------------------------------------------ */
#define FLASH_FLAG_DETERMINISTIC 1u /* bitwise-reproducible results run to run (backward; forward always is) */

typedef struct flash_fwd_args {
  size_t struct_size;          /* = sizeof(flash_fwd_args), set by flash_fwd_args_init (always call it: a
                                  struct it never saw is refused, see CONVENTIONS) */
  flash_tensor q;              /* [batch, seqlen_q, heads_q, head_dim] */
  flash_tensor k;              /* [batch, seqlen_k, heads_kv, head_dim]; heads_q % heads_kv == 0 (GQA/MQA) */
  flash_tensor v;              /* [batch, seqlen_k, heads_kv, head_dim] */
  flash_tensor o;              /* out: [batch, seqlen_q, heads_q, head_dim], dtype of q */
  flash_tensor lse;            /* out, optional (data == NULL: not written): fp32 [batch, heads_q, seqlen_q],
                                  natural-log log-sum-exp of the scaled, masked scores; -inf for a row that
                                  sees no key */
  float softmax_scale;         /* 0 (default) means 1/sqrt(head_dim). Finite, |softmax_scale| <= 65536 (2^16),
                                  else FLASH_ERROR_INVALID_ARGUMENT: the gradients grow with the scale and
                                  leave fp16's range beyond it, and the kernels' fp32 scores would near
                                  overflow (practical scales, 1/sqrt(d) or temperatures to ~100, are far
                                  inside) */
  int32_t causal;              /* 0 or 1; the same as window_right = 0 */
  int32_t causal_alignment;    /* FLASH_ALIGN_BOTTOM_RIGHT (default) or FLASH_ALIGN_TOP_LEFT; also places
                                  the sliding window */
  int32_t window_left;         /* keys more than window_left before the diagonal are masked; -1 = unbounded */
  int32_t window_right;        /* keys more than window_right after the diagonal are masked; -1 = unbounded */
  int32_t algorithm;           /* FLASH_ALGO_*; default FLASH_ALGO_AUTO */
  uint32_t flags;              /* FLASH_FLAG_*; default 0 */
  int32_t algorithm_used;      /* out: the algorithm that ran (useful with AUTO); -1 from flash_fwd_args_init.
                                  Leave it alone: 0 here marks a struct that was never initialised */
  const flash_block_mask* block_mask; /* optional block-sparse mask, NULL = dense; not with
                                  cu_seqlens_q (FLASH_ERROR_UNSUPPORTED) */
  void* stream;                /* cudaStream_t for CUDA tensors; NULL = legacy default stream */
  void* workspace;             /* optional device (or host) scratch; NULL = the library allocates. Must not
                                  overlap any tensor or mask array of the call */
  size_t workspace_size;       /* bytes at workspace */
  /* since 1.3: a packed variable-length batch (see "Packed variable-length batches" above); all 0/NULL: dense */
  const int32_t* cu_seqlens_q; /* NULL (default): dense. Else int32 [varlen_batch + 1] query offsets */
  const int32_t* cu_seqlens_k; /* int32 [varlen_batch + 1] key offsets; required with cu_seqlens_q */
  int32_t max_seqlen_q;        /* >= every seqlen_q_i (0 without cu_seqlens_q) */
  int32_t max_seqlen_k;        /* >= every seqlen_k_i (0 without cu_seqlens_q) */
  const int32_t* seqused_k;    /* optional int32 [varlen_batch]: keys used in each sequence's slot */
  int32_t varlen_batch;        /* sequences (>= 1 with cu_seqlens_q; 0 without) */
  int32_t reserved_1_3;        /* must be 0 (keeps the struct free of trailing padding) */
} flash_fwd_args;

FLASH_API int32_t flash_fwd_args_init_sized(flash_fwd_args* args, size_t struct_size);
#define flash_fwd_args_init(args) flash_fwd_args_init_sized((args), sizeof(*(args)))
/* Bytes of workspace flash_fwd would use for these arguments with the algorithm they name (after AUTO is
 * resolved); 0 when none is needed. */
FLASH_API int32_t flash_fwd_workspace_size(const flash_fwd_args* args, size_t* bytes /* out */);
/* O (and LSE) for the arguments; asynchronous on args->stream for CUDA tensors. */
FLASH_API int32_t flash_fwd(flash_fwd_args* args);

/* ---- Capability query --------------------------------------------------------------------------------- */
typedef struct flash_device_info {
  size_t struct_size;
  int32_t device_type;         /* FLASH_DEVICE_* */
  int32_t device_id;
  char name[256];              /* "NVIDIA H100 80GB HBM3", or the CPU's model name */
  int32_t cc_major;            /* compute capability (0 for the CPU) */
  int32_t cc_minor;
  int32_t multiprocessors;     /* SMs, or hardware threads on the CPU */
  int32_t clock_khz;           /* SM clock (0 if unknown) */
  int32_t memory_clock_khz;
  int32_t memory_bus_width_bits;
  int64_t shared_mem_per_sm;   /* bytes; M in the IO analysis */
  int64_t shared_mem_per_block_optin; /* bytes a CTA may opt into */
  int64_t l2_cache_bytes;
  int64_t total_memory_bytes;
  uint32_t algorithms;         /* bit (1u << FLASH_ALGO_x) set for each algorithm usable on this device */
} flash_device_info;

FLASH_API int32_t flash_device_info_init_sized(flash_device_info* info, size_t struct_size);
#define flash_device_info_init(info) flash_device_info_init_sized((info), sizeof(*(info)))
/* Number of devices of a type: 1 for the CPU; CUDA devices (0 without a driver, never an error). */
FLASH_API int32_t flash_device_count(int32_t device_type, int32_t* count /* out */);
FLASH_API int32_t flash_get_device_info(int32_t device_type, int32_t device_id, flash_device_info* info /* out */);
/* Algorithms built into this library (bit 1u << FLASH_ALGO_x), whatever the hardware. */
FLASH_API uint32_t flash_compiled_algorithms(void);

/* ---- Layout check for bindings ------------------------------------------------------------------------ */
#define FLASH_STRUCT_TENSOR 1
#define FLASH_STRUCT_FWD_ARGS 2
#define FLASH_STRUCT_BLOCK_MASK 3
#define FLASH_STRUCT_DEVICE_INFO 4
/* sizeof() of a public struct as this library was compiled; 0 for an unknown id. */
FLASH_API size_t flash_struct_size(int32_t which);

/* ---- Backward (since 1.1) ------------------------------------------------------------------------------ */
/* Gradients of O = softmax(softmax_scale * Q K^T + mask) V with respect to Q, K and V, given dO, the
 * forward's O and its LSE. Nothing N x N is stored: P is recomputed tile by tile from Q, K and LSE
 * (FlashAttention's backward). The mask options must be those of the forward that produced O and LSE.
 * GQA/MQA: dk and dv are [batch, seqlen_k, heads_kv, head_dim], each the sum of the gradients of the
 * heads_q / heads_kv query heads that share that key/value head. A query row that sees no key
 * (LSE = -inf) contributes nothing and gets dq = 0; keys no query sees get dk = dv = 0. */
typedef struct flash_bwd_args {
  size_t struct_size;          /* = sizeof(flash_bwd_args), set by flash_bwd_args_init (always call it) */
  flash_tensor q;              /* [batch, seqlen_q, heads_q, head_dim] */
  flash_tensor k;              /* [batch, seqlen_k, heads_kv, head_dim]; heads_q % heads_kv == 0 (GQA/MQA) */
  flash_tensor v;              /* [batch, seqlen_k, heads_kv, head_dim] */
  flash_tensor o;              /* the forward's output: [batch, seqlen_q, heads_q, head_dim], dtype of q */
  flash_tensor d_o;            /* dL/dO: [batch, seqlen_q, heads_q, head_dim], dtype of q */
  flash_tensor lse;            /* required: the forward's fp32 [batch, heads_q, seqlen_q] log-sum-exp */
  flash_tensor dq;             /* out: dL/dQ, shape and dtype of q (any strides, contiguous last dim) */
  flash_tensor dk;             /* out: dL/dK, shape and dtype of k */
  flash_tensor dv;             /* out: dL/dV, shape and dtype of v */
  float softmax_scale;         /* as flash_fwd_args (0 = 1/sqrt(head_dim); |softmax_scale| <= 65536) */
  int32_t causal;              /* as flash_fwd_args */
  int32_t causal_alignment;    /* as flash_fwd_args */
  int32_t window_left;         /* as flash_fwd_args */
  int32_t window_right;        /* as flash_fwd_args */
  int32_t algorithm;           /* FLASH_ALGO_*; default FLASH_ALGO_AUTO (the first with a backward) */
  uint32_t flags;              /* FLASH_FLAG_DETERMINISTIC: dq, dk, dv bitwise identical run to run */
  int32_t algorithm_used;      /* out: the algorithm that ran */
  const flash_block_mask* block_mask; /* as flash_fwd_args */
  void* stream;                /* cudaStream_t for CUDA tensors; NULL = legacy default stream */
  void* workspace;             /* optional scratch on the tensors' device; NULL = the library allocates */
  size_t workspace_size;       /* bytes at workspace */
  /* since 1.3: a packed variable-length batch, as flash_fwd_args (the forward's arrays and lengths); with it
     q, o, d_o, dq are [total_q, heads_q, head_dim], k, v, dk, dv [total_k, heads_kv, head_dim], lse
     [heads_q, total_q] */
  const int32_t* cu_seqlens_q; /* as flash_fwd_args */
  const int32_t* cu_seqlens_k; /* as flash_fwd_args */
  int32_t max_seqlen_q;        /* as flash_fwd_args */
  int32_t max_seqlen_k;        /* as flash_fwd_args */
  const int32_t* seqused_k;    /* as flash_fwd_args */
  int32_t varlen_batch;        /* as flash_fwd_args */
  int32_t reserved_1_3;        /* must be 0 */
} flash_bwd_args;

FLASH_API int32_t flash_bwd_args_init_sized(flash_bwd_args* args, size_t struct_size);
#define flash_bwd_args_init(args) flash_bwd_args_init_sized((args), sizeof(*(args)))
/* Bytes of workspace flash_bwd would use for these arguments (after AUTO is resolved); 0 if none. */
FLASH_API int32_t flash_bwd_workspace_size(const flash_bwd_args* args, size_t* bytes /* out */);
/* dQ, dK, dV for the arguments; asynchronous on args->stream for CUDA tensors. */
FLASH_API int32_t flash_bwd(flash_bwd_args* args);

#define FLASH_STRUCT_BWD_ARGS 5 /* for flash_struct_size (since 1.1) */

/* ---- KV-cache attention (inference decode and chunked prefill; since 1.2) ----------------------------- */
/* Attention of seqlen_new new query tokens per sequence over a key/value cache, with the new tokens' K and V
 * optionally appended to the cache in place first (FlashAttention-2's flash_attn_with_kvcache semantics).
 *
 * The cache is one of:
 *   contiguous: k_cache, v_cache [batch_cache, max_len, heads_kv, head_dim]; sequence i lives in cache row
 *               cache_batch_idx[i] (or row i when cache_batch_idx is NULL; then batch_cache >= batch);
 *   paged:      k_cache, v_cache [num_pages, page_size, heads_kv, head_dim] (any page_size >= 1) and
 *               block_table [batch, max_pages_per_seq] int32: key position t of sequence i is row
 *               t % page_size of page block_table[i, t / page_size].
 * For sequence i, with n_i = cache_seqlens[i] (keys in the cache before the call):
 *   1. if k_new/v_new are given, their seqlen_new rows are written into the cache at positions
 *      n_i .. n_i + seqlen_new - 1 (nothing else in the cache is written);
 *   2. the queries attend to the first L_i = n_i + seqlen_new keys (n_i when no k_new is given).
 * Causal and windows are bottom-right aligned per sequence: query row r (0-based among the new tokens) sits
 * at position L_i - seqlen_new + r and sees key j iff j <= that position (causal) and the window allows it,
 * exactly flash_fwd's rule with seqlen_k = L_i. A row that sees no key gets O = 0 and LSE = -inf.
 * Index arrays (cache_seqlens, cache_batch_idx, block_table) live on q's device. Host-resident arrays are
 * checked element by element before anything is written: every position appended or read must fit
 * (n_i >= 0, L_i <= max_len or max_pages_per_seq * page_size), every page used must be in [0, num_pages),
 * every cache_batch_idx in [0, batch_cache), and no sequence may append to a cache row another sequence of
 * the call appends to or reads.
 * On CUDA tensors the index arrays are device memory and cannot be checked on the host: the kernels clamp every
 * value they read (cache_seqlens into [0, capacity - appended keys], pages and cache rows into the cache), so no
 * contents can make a kernel access memory outside the tensors named here -- but out-of-range or overlapping
 * values give unspecified results (and racing appends). The choice of num_splits = 0, the workspace size and a
 * CUDA graph captured with a caller workspace depend on shapes only, never on the arrays' contents: a captured
 * decode step may be replayed with new cache_seqlens and block_table contents.
 * num_splits > 1 splits each sequence's keys into that many chunks computed separately and merged with
 * flash_combine's arithmetic (split-KV, for long caches and small batches); 0 lets the library choose.
 * Devices: the cpu algorithm (fp32, fp16, bf16); on CUDA (fp16, bf16; sm_80 and newer) the sm80 KV-cache kernel,
 * algorithm AUTO or FLASH_ALGO_SM80. */
typedef struct flash_kvcache_args {
  size_t struct_size;          /* = sizeof(flash_kvcache_args), set by flash_kvcache_args_init */
  flash_tensor q;              /* [batch, seqlen_new, heads_q, head_dim]; seqlen_new >= 1 */
  flash_tensor k_cache;        /* in/out (written when k_new is given): contiguous or paged, see above;
                                  dtype of q, heads_q % heads_kv == 0 (GQA/MQA) */
  flash_tensor v_cache;        /* in/out: shape of k_cache */
  flash_tensor k_new;          /* optional (data == NULL: no append): [batch, seqlen_new, heads_kv, head_dim] */
  flash_tensor v_new;          /* given iff k_new is: shape of k_new */
  flash_tensor o;              /* out: shape of q, dtype of q */
  flash_tensor lse;            /* out, optional: fp32 [batch, heads_q, seqlen_new], natural log, as flash_fwd's */
  const int32_t* cache_seqlens;   /* required: [batch], keys in the cache before this call */
  const int32_t* cache_batch_idx; /* optional (contiguous cache only): [batch], cache row of each sequence */
  const int32_t* block_table;     /* optional: non-NULL selects the paged cache; [batch, max_pages_per_seq] */
  int64_t block_table_stride;     /* elements between rows of block_table; 0 (default) = max_pages_per_seq */
  int32_t max_pages_per_seq;      /* columns of block_table (paged cache) */
  float softmax_scale;         /* 0 (default) means 1/sqrt(head_dim) */
  int32_t causal;              /* 0 or 1, bottom-right aligned per sequence; the same as window_right = 0 */
  int32_t window_left;         /* -1 = unbounded (default); as flash_fwd_args, bottom-right aligned */
  int32_t window_right;        /* -1 = unbounded (default) */
  int32_t num_splits;          /* splits of each sequence's keys: 0 (default) = choose, 1 = none, up to 256 */
  int32_t algorithm;           /* FLASH_ALGO_AUTO (default), FLASH_ALGO_CPU (CPU tensors) or FLASH_ALGO_SM80 (CUDA) */
  uint32_t flags;              /* none defined yet; must be 0 */
  int32_t algorithm_used;      /* out: the algorithm that ran */
  int32_t num_splits_used;     /* out: the splits the call used */
  void* stream;                /* cudaStream_t for CUDA tensors; NULL = legacy default stream */
  void* workspace;             /* optional scratch on q's device (8-byte aligned); NULL = the library allocates */
  size_t workspace_size;       /* bytes at workspace */
} flash_kvcache_args;

FLASH_API int32_t flash_kvcache_args_init_sized(flash_kvcache_args* args, size_t struct_size);
#define flash_kvcache_args_init(args) flash_kvcache_args_init_sized((args), sizeof(*(args)))
/* Bytes of workspace flash_fwd_kvcache would use for these arguments (after num_splits = 0 is resolved);
 * 0 when none is needed. Reads the host-resident index arrays, as flash_fwd_kvcache does. */
FLASH_API int32_t flash_fwd_kvcache_workspace_size(const flash_kvcache_args* args, size_t* bytes /* out */);
/* Appends k_new/v_new (if given) and writes O (and LSE) for the arguments. */
FLASH_API int32_t flash_fwd_kvcache(flash_kvcache_args* args);

/* ---- Combining partial attention results (since 1.2) ------------------------------------------------- */
/* Given num_parts results (O_p, LSE_p) of the same queries over disjoint sets of keys (LSE in the NATURAL
 * log, as flash_fwd and flash_fwd_kvcache write it; FlashInfer's merge_state uses base 2: multiply its LSE
 * by ln 2 first), writes the result over the union of the keys:
 *   M = max_p LSE_p,  w_p = exp(LSE_p - M),  O = sum_p w_p O_p / sum_p w_p,  LSE = M + log(sum_p w_p).
 * A part with LSE = -inf (it saw no key) contributes nothing; a row where every part is -inf gets O = 0 and
 * LSE = -inf. Computed in double on the CPU, in fp32 on CUDA tensors; 16-bit outputs are rounded through fp32.
 * Devices: CPU; CUDA (at most 256 parts a call, head_dim up to 256). */
typedef struct flash_combine_args {
  size_t struct_size;          /* = sizeof(flash_combine_args), set by flash_combine_args_init */
  int32_t num_parts;           /* >= 1 */
  const flash_tensor* o_parts;   /* [num_parts] descriptors, each [batch, seqlen, heads, head_dim], one dtype
                                    for all parts (fp32, fp16 or bf16; fp32 partials keep the most accuracy) */
  const flash_tensor* lse_parts; /* [num_parts] descriptors, each fp32 [batch, heads, seqlen] */
  flash_tensor o;              /* out: [batch, seqlen, heads, head_dim], any supported dtype */
  flash_tensor lse;            /* out, optional (data == NULL: not written): fp32 [batch, heads, seqlen] */
  void* stream;                /* cudaStream_t for CUDA tensors; NULL = legacy default stream */
} flash_combine_args;

FLASH_API int32_t flash_combine_args_init_sized(flash_combine_args* args, size_t struct_size);
#define flash_combine_args_init(args) flash_combine_args_init_sized((args), sizeof(*(args)))
FLASH_API int32_t flash_combine(flash_combine_args* args);

#define FLASH_STRUCT_KVCACHE_ARGS 6 /* for flash_struct_size (since 1.2) */
#define FLASH_STRUCT_COMBINE_ARGS 7 /* for flash_struct_size (since 1.2) */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASH_H_ */
