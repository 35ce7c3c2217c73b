/* A stand-in for CUDA and NVTX, for CPU tests of the injection library (tests/fake_host.rs):
 * loads the library the way the CUDA driver (CUDA_INJECTION64_PATH, InitializeInjection) and an
 * NVTX3 instance (NVTX_INJECTION64_PATH, InitializeInjectionNvtx2 with an export table) do, pushes
 * a range through the table the library filled, then exits with argv[2] or crashes.
 * `fake_host graph LIBCUDA CBID` first loads LIBCUDA (programs/fake_cuda.c, a stand-in for the
 * driver and CUPTI) and, once the library attached, instantiates that stand-in's graph.
 * `fake_host graphs LIBCUDA CBIDS` captures, instantiates, uploads and launches it instead
 * (fake_graphs in fake_cuda.c). */
#include <dlfcn.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*fnptr)(void);
static fnptr core[16];
static fnptr* core_table[16];

static int get_module(unsigned module, fnptr*** table, unsigned* size) {
  if (module != 1) return 0; /* only NVTX_CB_MODULE_CORE */
  for (int i = 0; i < 16; ++i) core_table[i] = &core[i];
  *table = core_table;
  *size = 16; /* NVTX_CBID_CORE_SIZE */
  return 1;
}

struct callbacks { size_t size; int (*get)(unsigned, fnptr***, unsigned*); };
static struct callbacks etbl = { sizeof(struct callbacks), get_module };
static const void* get_export_table(unsigned id) { return id == 1 ? &etbl : NULL; }

int main(int argc, char** argv) {
  const char* nvtx = getenv("NVTX_INJECTION64_PATH");
  if (nvtx) {
    void* h = dlopen(nvtx, RTLD_LAZY);
    int (*init2)(const void* (*)(unsigned)) = h ? (int (*)(const void* (*)(unsigned)))dlsym(h, "InitializeInjectionNvtx2") : NULL;
    printf("fake_host: nvtx init %d\n", init2 ? init2(get_export_table) : -1);
    int (*push)(const char*) = (int (*)(const char*))core[9]; /* NVTX_CBID_CORE_RangePushA */
    int (*pop)(void) = (int (*)(void))core[11];
    if (push && pop) {
      int a = push("outer"), b = push("inner"), c = pop();
      printf("fake_host: depths %d %d %d\n", a, b, c);
    }
  }
  int graphs = argc > 3 && !strcmp(argv[1], "graphs");
  int graph = graphs || (argc > 3 && !strcmp(argv[1], "graph"));
  void* driver = NULL;
  if (graph) {
    driver = dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL);
    if (!driver) printf("fake_host: %s\n", dlerror());
  }
  const char* cuda = getenv("CUDA_INJECTION64_PATH");
  if (cuda) {
    void* h = dlopen(cuda, RTLD_NOW);
    int (*init)(void) = h ? (int (*)(void))dlsym(h, "InitializeInjection") : NULL;
    printf("fake_host: cuda init %d\n", init ? init() : -1);
  }
  if (driver && graphs) {
    int (*run)(const char*) = (int (*)(const char*))dlsym(driver, "fake_graphs");
    printf("fake_host: graphs %d\n", run ? run(argv[3]) : -2);
  } else if (driver) {
    int (*instantiate)(unsigned) = (int (*)(unsigned))dlsym(driver, "fake_instantiate");
    printf("fake_host: instantiate %d\n", instantiate ? instantiate((unsigned)atoi(argv[3])) : -2);
  }
  fflush(stdout);
  if (graph) return 0;
  if (argc > 1 && !strcmp(argv[1], "crash")) raise(SIGSEGV);
  return argc > 2 ? atoi(argv[2]) : 0;
}
