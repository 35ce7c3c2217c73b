/* A stand-in for libcuda.so.1 and libcupti in one shared object, for the CPU test of
 * `graphsmith trace --hazards` (tests/fake_host.rs, built with -Wl,-soname,libcuda.so.1):
 * CUPTI's subscribe call keeps the tracer's callback; fake_instantiate() calls it around a
 * pretend cuGraphInstantiateWithFlags, as the driver would; the graph functions the tracer reads
 * the graph back with answer for one fixed graph, with the C layouts of cuda.h (CUDA 12.3+):
 *
 *   n0 inc(BUF)  ->  n1 inc(BUF)    ->  n3 memset(BUF)  ->  n4 memcpy(BUF -> OTHER)
 *                \-> n2 scale(BUF) -/
 *
 * n1 and n2 both write BUF and no edge orders them: the one hazard. n0 and n1 pass their
 * arguments as kernelParams; n2 as an `extra` buffer, through a library kernel (CUkernel).
 * Each graph call first reports a failing nested API call to the callback, as CUPTI reports the
 * tracer's own calls: the tracer must ignore it. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef unsigned long long u64;
typedef void (*callback_t)(void* user, int domain, unsigned cbid, const void* data);

static callback_t g_callback;
static void* g_user;

/* CUpti_CallbackData */
struct callback_data {
  int site; /* 0 enter, 1 exit */
  const char* function_name;
  const void* function_params;
  void* function_return_value;
  const char* symbol_name;
  void* context;
  uint32_t context_uid;
  u64* correlation_data;
  uint32_t correlation_id;
};

static void call(unsigned cbid, const char* name, const void* params, int* result) {
  struct callback_data d = {0, name, params, result, NULL, (void*)0x7000, 1, NULL, 0};
  if (!g_callback) return;
  g_callback(g_user, 1, cbid, &d);
  d.site = 1;
  g_callback(g_user, 1, cbid, &d);
}

/* A failing call made "inside" the driver while the tracer's callback runs. */
static void nested(void) {
  int failed = 1; /* CUDA_ERROR_INVALID_VALUE */
  call(5, "cuNestedProbe", NULL, &failed);
}

int cuptiSubscribe(void** subscriber, callback_t callback, void* user) {
  g_callback = callback;
  g_user = user;
  *subscriber = (void*)1;
  return 0;
}
int cuptiEnableDomain(unsigned enable, void* subscriber, int domain) { return 0; }
int cuptiGetVersion(unsigned* version) { *version = 130001; return 0; }
int cuptiGetResultString(int result, const char** text) { *text = "CUPTI_FAKE"; return 0; }

int cuGetErrorName(int code, const char** name) {
  *name = code == 1 ? "CUDA_ERROR_INVALID_VALUE" : "CUDA_ERROR_FAKE";
  return 0;
}

#define GRAPH 0x9000ULL
#define NODE0 0x100ULL
#define BUF 0x7f0000000000ULL
#define BUF_BYTES 262144ULL
#define OTHER 0x7f0010000000ULL
#define OTHER_BYTES 4096ULL
#define F_INC 0xf1ULL
#define F_SCALE 0xf2ULL
#define K_SCALE 0xc2ULL

static const int node_types[5] = {0, 0, 0, 2, 1}; /* kernel x3, memset, memcpy */
static const int edges[5][2] = {{0, 1}, {0, 2}, {1, 3}, {2, 3}, {3, 4}};

static int node_index(u64 node) {
  return node >= NODE0 && node < NODE0 + 5 ? (int)(node - NODE0) : -1;
}

int cuGraphGetNodes(u64 graph, u64* nodes, size_t* count) {
  nested();
  if (graph != GRAPH) return 400; /* CUDA_ERROR_INVALID_HANDLE */
  if (!nodes) { *count = 5; return 0; }
  size_t n = *count < 5 ? *count : 5;
  for (size_t i = 0; i < n; ++i) nodes[i] = NODE0 + i;
  *count = n;
  return 0;
}

int cuGraphNodeGetType(u64 node, int* type) {
  int i = node_index(node);
  if (i < 0) return 400;
  *type = node_types[i];
  return 0;
}

/* CUgraphEdgeData */
struct edge_data { unsigned char from_port, to_port, type, reserved[5]; };

int cuGraphGetEdges_v2(u64 graph, u64* from, u64* to, struct edge_data* data, size_t* count) {
  nested();
  if (graph != GRAPH) return 400;
  if (!from || !to) { *count = 5; return 0; }
  size_t n = *count < 5 ? *count : 5;
  for (size_t i = 0; i < n; ++i) {
    from[i] = NODE0 + edges[i][0];
    to[i] = NODE0 + edges[i][1];
    if (data) memset(&data[i], 0, sizeof data[i]);
  }
  *count = n;
  return 0;
}

/* CUDA_KERNEL_NODE_PARAMS_v2 */
struct kernel_params {
  u64 func;
  unsigned grid[3], block[3], shared_mem;
  void** kernel_params;
  void** extra;
  u64 kern;
  void* ctx;
};

static u64 buf_arg = BUF;
static int n_arg = 65536;
static void* inc_args[2] = {&buf_arg, &n_arg};
static unsigned char scale_buffer[16]; /* (float*, int) packed: pointer at 0, int at 8 */
static size_t scale_size = 12;
static void* scale_extra[5] = {(void*)1, scale_buffer, (void*)2, &scale_size, (void*)0};

int cuGraphKernelNodeGetParams_v2(u64 node, struct kernel_params* p) {
  int i = node_index(node);
  if (i < 0 || node_types[i] != 0) return 400;
  memset(p, 0, sizeof *p);
  p->grid[0] = 256; p->grid[1] = p->grid[2] = 1;
  p->block[0] = 256; p->block[1] = p->block[2] = 1;
  if (i == 2) {
    u64 ptr = BUF;
    memcpy(scale_buffer, &ptr, 8);
    memcpy(scale_buffer + 8, &n_arg, 4);
    p->kern = K_SCALE;
    p->extra = scale_extra;
  } else {
    p->func = F_INC;
    p->kernel_params = inc_args;
  }
  return 0;
}

int cuKernelGetFunction(u64* func, u64 kernel) {
  if (kernel != K_SCALE) return 400;
  *func = F_SCALE;
  return 0;
}

int cuFuncGetName(const char** name, u64 func) {
  if (func == F_INC) *name = "_Z3incPfi";
  else if (func == F_SCALE) *name = "_Z5scalePfi";
  else return 400;
  return 0;
}

int cuFuncGetParamInfo(u64 func, size_t index, size_t* offset, size_t* size) {
  if (func != F_INC && func != F_SCALE) return 400;
  if (index >= 2) return 1; /* past the last parameter */
  *offset = index * 8;
  *size = index == 0 ? 8 : 4;
  return 0;
}

/* CUDA_MEMSET_NODE_PARAMS */
struct memset_params { u64 dst; size_t pitch; unsigned value, element_size; size_t width, height; };

int cuGraphMemsetNodeGetParams(u64 node, struct memset_params* p) {
  if (node_index(node) != 3) return 400;
  memset(p, 0, sizeof *p);
  p->dst = BUF;
  p->element_size = 4;
  p->width = BUF_BYTES / 4;
  p->height = 1;
  return 0;
}

/* CUDA_MEMCPY3D */
struct memcpy3d {
  size_t srcXInBytes, srcY, srcZ, srcLOD;
  int srcMemoryType;
  const void* srcHost;
  u64 srcDevice;
  void* srcArray;
  void* reserved0;
  size_t srcPitch, srcHeight;
  size_t dstXInBytes, dstY, dstZ, dstLOD;
  int dstMemoryType;
  void* dstHost;
  u64 dstDevice;
  void* dstArray;
  void* reserved1;
  size_t dstPitch, dstHeight;
  size_t WidthInBytes, Height, Depth;
};

int cuGraphMemcpyNodeGetParams(u64 node, struct memcpy3d* p) {
  if (node_index(node) != 4) return 400;
  memset(p, 0, sizeof *p);
  p->srcMemoryType = 2; /* CU_MEMORYTYPE_DEVICE */
  p->srcDevice = BUF;
  p->dstMemoryType = 2;
  p->dstDevice = OTHER;
  p->WidthInBytes = 1024;
  p->Height = 1;
  p->Depth = 1;
  return 0;
}

int cuGraphChildGraphNodeGetGraph(u64 node, u64* graph) { return 400; }

int cuMemGetAddressRange_v2(u64* base, size_t* size, u64 ptr) {
  if (ptr >= BUF && ptr < BUF + BUF_BYTES) { *base = BUF; *size = BUF_BYTES; return 0; }
  if (ptr >= OTHER && ptr < OTHER + OTHER_BYTES) { *base = OTHER; *size = OTHER_BYTES; return 0; }
  return 1;
}

int fake_instantiate_as(unsigned cbid, u64 exec_handle);

/* The pretend cuGraphInstantiateWithFlags(&exec, GRAPH, 0), reported to the callback under
 * `cbid` (CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags, passed in by the test). */
int fake_instantiate(unsigned cbid) { return fake_instantiate_as(cbid, 0xe000); }

/* A pretend cuStreamBeginCapture_v2(STREAM, global mode), reported to the callback under `cbid`
 * (CUPTI_DRIVER_TRACE_CBID_cuStreamBeginCapture_v2, passed in by the test), for the Python
 * frames test: called from Python through ctypes, with the GIL released or held. */
int fake_begin(unsigned cbid) {
  struct { u64 stream; int mode; } params = {0x5000, 0};
  int result = 0;
  if (!g_callback) return -1;
  call(cbid, "cuStreamBeginCapture_v2", &params, &result);
  return 0;
}

/* `--freed` (tests/fake_host.rs): a pretend allocation of `size` bytes at `ptr`
 * (cuMemAlloc_v2's parameters: the out-pointer, the size), a pretend free of `ptr`
 * (cuMemFree_v2), and a pretend launch of `exec` (cuGraphLaunch: the executable, the stream),
 * each reported to the callback under the `cbid` the test passes in. */
int fake_alloc(unsigned cbid, u64 ptr, size_t size) {
  u64 out = ptr;
  struct { u64* dptr; size_t bytesize; } params = {&out, size};
  int result = 0;
  if (!g_callback) return -1;
  call(cbid, "cuMemAlloc_v2", &params, &result);
  return 0;
}

int fake_free(unsigned cbid, u64 ptr) {
  struct { u64 dptr; } params = {ptr};
  int result = 0;
  if (!g_callback) return -1;
  call(cbid, "cuMemFree_v2", &params, &result);
  return 0;
}

int fake_launch(unsigned cbid, u64 exec) {
  struct { u64 exec; u64 stream; } params = {exec, 0x5000};
  int result = 0;
  if (!g_callback) return -1;
  call(cbid, "cuGraphLaunch", &params, &result);
  return 0;
}

/* `--graphs` (tests/fake_host.rs): a pretend capture on STREAM, with the capture info the
 * tracer asks the driver for while it runs. */
#define STREAM 0x5000ULL
#define CAPTURE_ID 77ULL
static int g_capturing;

int cuStreamGetCaptureInfo_v3(u64 stream, int* status, u64* id, void* graph, void* deps,
                              void* edge_data, size_t* count) {
  int active = g_capturing && stream == STREAM;
  *status = active; /* CU_STREAM_CAPTURE_STATUS_ACTIVE or _NONE */
  if (id) *id = active ? CAPTURE_ID : 0;
  return 0;
}

/* Captures GRAPH with one cuMemAlloc_v2 (1 MiB) inside, instantiates it, uploads it and
 * launches it three times, each call reported to the callback under the callback ids given as
 * "begin_v2,alloc_v2,end,instantiate_with_flags,upload,launch" (passed in by the test). */
int fake_graphs(const char* cbids) {
  unsigned id[6];
  if (!g_callback || sscanf(cbids, "%u,%u,%u,%u,%u,%u", &id[0], &id[1], &id[2], &id[3], &id[4],
                            &id[5]) != 6)
    return -1;
  int result = 0;
  struct callback_data d = {0, "cuStreamBeginCapture_v2", NULL, &result, NULL, (void*)0x7000, 1,
                            NULL, 0};
  struct { u64 stream; int mode; } begin = {STREAM, 0};
  d.function_params = &begin;
  g_callback(g_user, 1, id[0], &d);
  g_capturing = 1;
  d.site = 1;
  g_callback(g_user, 1, id[0], &d);

  u64 ptr = 0;
  struct { u64* dptr; size_t bytes; } alloc = {&ptr, 1 << 20};
  ptr = 0x7f0000100000ULL;
  call(id[1], "cuMemAlloc_v2", &alloc, &result);

  u64 graph = 0;
  struct { u64 stream; u64* graph; } end = {STREAM, &graph};
  d = (struct callback_data){0, "cuStreamEndCapture", &end, &result, NULL, (void*)0x7000, 1,
                             NULL, 0};
  g_callback(g_user, 1, id[2], &d);
  g_capturing = 0;
  graph = GRAPH;
  d.site = 1;
  g_callback(g_user, 1, id[2], &d);

  if (fake_instantiate(id[3]) != 0) return -1;
  struct { u64 exec; u64 stream; } launch = {0xe000, STREAM};
  call(id[4], "cuGraphUpload", &launch, &result);
  for (int i = 0; i < 3; ++i) call(id[5], "cuGraphLaunch", &launch, &result);
  return 0;
}

/* Races across graphs (`--hazards`, tests/fake_host.rs): the pretend instantiation into the
 * executable `exec_handle`, a launch of `exec` on `stream` (cuGraphLaunch), a record of `event`
 * on `stream` (cuEventRecord) and a wait of `stream` on `event` (cuStreamWaitEvent), each
 * reported to the callback under the `cbid` the test passes in. */
int fake_instantiate_as(unsigned cbid, u64 exec_handle) {
  u64 exec = 0;
  struct { u64* exec; u64 graph; u64 flags; } params = {&exec, GRAPH, 0};
  int result = 0;
  struct callback_data d = {0, "cuGraphInstantiateWithFlags", &params, &result, NULL,
                            (void*)0x7000, 1, NULL, 0};
  if (!g_callback) return -1;
  g_callback(g_user, 1, cbid, &d);
  exec = exec_handle;
  d.site = 1;
  g_callback(g_user, 1, cbid, &d);
  return 0;
}

int fake_launch_on(unsigned cbid, u64 exec, u64 stream) {
  struct { u64 exec; u64 stream; } params = {exec, stream};
  int result = 0;
  if (!g_callback) return -1;
  call(cbid, "cuGraphLaunch", &params, &result);
  return 0;
}

int fake_record(unsigned cbid, u64 event, u64 stream) {
  struct { u64 event; u64 stream; } params = {event, stream};
  int result = 0;
  if (!g_callback) return -1;
  call(cbid, "cuEventRecord", &params, &result);
  return 0;
}

int fake_wait(unsigned cbid, u64 stream, u64 event) {
  struct { u64 stream; u64 event; unsigned flags; } params = {stream, event, 0};
  int result = 0;
  if (!g_callback) return -1;
  call(cbid, "cuStreamWaitEvent", &params, &result);
  return 0;
}
