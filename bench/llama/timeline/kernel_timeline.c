// A CUDA injection library that records every kernel's start and end on the GPU through CUPTI's
// activity API and writes them, one line each, to $KERNEL_TIMELINE_OUT (default
// kernel_timeline.tsv) when the process exits:
//   name <TAB> start_ns <TAB> end_ns <TAB> graph_id <TAB> graph_node_id <TAB> correlation_id
// Load it into any CUDA program with CUDA_INJECTION64_PATH=/path/to/libkernel_timeline.so.
// Build (bench/llama/timeline/run.sh does): the newest kernel record of the installed
// cupti_activity.h is passed as KREC (CUpti_ActivityKernelN).
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef KREC
#error "define KREC as the newest CUpti_ActivityKernelN of cupti_activity.h"
#endif

static FILE* out = NULL;
static unsigned long long records = 0, dropped = 0;

static void check(CUptiResult r, const char* what) {
    if (r != CUPTI_SUCCESS) {
        const char* s = "?";
        cuptiGetResultString(r, &s);
        fprintf(stderr, "kernel_timeline: %s failed: %s\n", what, s);
    }
}

static void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *size = 16u << 20;
    *buffer = (uint8_t*)aligned_alloc(8, *size);
    *max_records = 0;
}

static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size,
                               size_t valid) {
    (void)ctx;
    (void)stream;
    (void)size;
    CUpti_Activity* rec = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
            rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const KREC* k = (const KREC*)rec;
        if (out != NULL)
            fprintf(out, "%s\t%llu\t%llu\t%u\t%llu\t%u\t%d,%d,%d\t%d,%d,%d\t%d\t%u,%u,%u\n",
                    k->name, (unsigned long long)k->start, (unsigned long long)k->end,
                    k->graphId, (unsigned long long)k->graphNodeId, k->correlationId, k->gridX,
                    k->gridY, k->gridZ, k->blockX, k->blockY, k->blockZ,
                    k->dynamicSharedMemory, k->clusterX, k->clusterY, k->clusterZ);
        records++;
    }
    size_t d = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream, &d) == CUPTI_SUCCESS) dropped += d;
    free(buffer);
}

static void at_exit(void) {
    check(cuptiActivityFlushAll(1), "cuptiActivityFlushAll");
    if (out != NULL) fclose(out);
    fprintf(stderr, "kernel_timeline: %llu kernel records, %llu dropped\n", records, dropped);
}

int InitializeInjection(void) {
    const char* path = getenv("KERNEL_TIMELINE_OUT");
    out = fopen(path ? path : "kernel_timeline.tsv", "w");
    if (out == NULL) {
        perror("kernel_timeline: cannot open the output");
        return 0;
    }
    check(cuptiActivityRegisterCallbacks(requested, completed), "cuptiActivityRegisterCallbacks");
    check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
          "cuptiActivityEnable(CONCURRENT_KERNEL)");
    atexit(at_exit);
    return 1;
}
