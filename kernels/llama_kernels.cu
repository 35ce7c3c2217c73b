// Kernels of the graphsmith-llama decoder (crates/graphsmith-llama). bf16 values are stored as
// unsigned short and converted with the helpers below (no CUDA headers needed); arithmetic is
// fp32. Rounding to bf16 happens where HF transformers rounds in bf16, so results track it.
//
// Every kernel reads positions from device memory: pos[r] < 0 marks an inactive (padded) row.
//
// Programmatic dependent launch: every kernel waits for the kernel before it (pdl_wait) before it
// reads or writes anything that kernel or earlier work touches. Every kernel but the loop's last
// (ll_loop_advance, whose successor is the next iteration) lets its dependents start early
// (pdl_trigger): before its wait, except the q/k/v projection (ll_gemv_norm, ll_gemv_async_norm),
// which triggers after it. Before the wait, the GEMVs and ll_rmsnorm read weights (which no
// kernel of a step writes), and the attention prefetches weights into L2 (see Prefetch) and
// reads positions and its cache's earlier positions: when it follows that projection, the only
// kernel that can still
// run then is that projection, which writes neither (its late trigger means everything before
// it has finished); when it follows a
// cuBLAS GEMM (batches above one row), graphsmith launches it without the programmatic
// attribute (after a library call a launch is ordinary), so it starts after all earlier work.
// Both are no-ops when the launch was not programmatic, so the same kernels run with and
// without it (the decoder's --pdl).

__device__ __forceinline__ float bf2f(unsigned short b) {
    return __uint_as_float(((unsigned int)b) << 16);
}

// Round to nearest even; NaN stays NaN.
__device__ __forceinline__ unsigned short f2bf(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (unsigned short)((u >> 16) | 0x40u);
    }
    unsigned int r = 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)((u + r) >> 16);
}

__device__ __forceinline__ float rbf(float f) { return bf2f(f2bf(f)); }

__device__ __forceinline__ void pdl_trigger() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// Sum over the block (blockDim.x a multiple of 32, at most 1024); `scratch` holds 32 floats.
__device__ float block_sum(float v, float* scratch) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    int warps = blockDim.x >> 5;
    v = lane < warps ? scratch[lane] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ float block_max(float v, float* scratch) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    int warps = blockDim.x >> 5;
    v = lane < warps ? scratch[lane] : -3.402823466e38f;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// A 16-byte read-only load when `ok`, zeros otherwise: predicated in PTX (no branch), so the
// loads of a round issue back to back.
__device__ __forceinline__ uint4 ldg_if(const uint4* p, bool ok) {
    uint4 v;
    asm("{\n\t.reg .pred q;\n\t"
        "setp.ne.b32 q, %5, 0;\n\t"
        "mov.u32 %0, 0;\n\tmov.u32 %1, 0;\n\tmov.u32 %2, 0;\n\tmov.u32 %3, 0;\n\t"
        "@q ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n\t}"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p), "r"((int)ok));
    return v;
}

// The prologue's 16-byte pieces per thread: rows of up to GEMV_XC * blockDim.x * 8 elements
// (8,192 with 256 threads) are loaded in one round trip, every piece issued before any is used;
// longer rows, or rows not in whole 16-byte pieces, take the element loop.
#define GEMV_XC 4

// A 16-byte load of data an earlier kernel wrote (plain global load), zeros when !ok.
__device__ __forceinline__ uint4 ld_if(const uint4* p, bool ok) {
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (ok) v = *p;
    return v;
}

// This thread's pieces c = threadIdx.x + j * blockDim.x (j < GEMV_XC) of a row of k8 16-byte
// pieces, zeros past the row: read-only loads (weights, before a programmatic wait) or, with
// `written`, plain loads (data an earlier kernel wrote, after it).
template <bool WRITTEN>
__device__ __forceinline__ void load_pieces(uint4 (&v)[GEMV_XC], const uint4* row, int k8) {
#pragma unroll
    for (int j = 0; j < GEMV_XC; ++j) {
        int c = threadIdx.x + j * blockDim.x;
        v[j] = WRITTEN ? ld_if(row + c, c < k8) : ldg_if(row + c, c < k8);
    }
}

// Stores this thread's pieces (as load_pieces took them) into a row of k8 pieces.
__device__ __forceinline__ void store_pieces(uint4* row, const uint4 (&v)[GEMV_XC], int k8) {
#pragma unroll
    for (int j = 0; j < GEMV_XC; ++j) {
        int c = threadIdx.x + j * blockDim.x;
        if (c < k8) row[c] = v[j];
    }
}

// The programmatic wait, with the dependents let start before it or (LATE) after it: with LATE,
// when they start everything before this kernel has finished (the attention after the q/k/v
// projection reads positions and its cache before its own wait).
template <bool LATE>
__device__ __forceinline__ void pdl_wait_trigger() {
    if (!LATE) pdl_trigger();
    pdl_wait();
    if (LATE) pdl_trigger();
}

// The 8 bf16 of a piece as floats.
__device__ __forceinline__ void unpack8(uint4 v, float* f) {
    unsigned int u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        f[2 * q] = __uint_as_float(u[q] << 16);
        f[2 * q + 1] = __uint_as_float(u[q] & 0xffff0000u);
    }
}

__device__ __forceinline__ uint4 pack8(const float* f) {
    unsigned int u[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
        u[q] = (unsigned int)f2bf(f[2 * q]) | ((unsigned int)f2bf(f[2 * q + 1]) << 16);
    return make_uint4(u[0], u[1], u[2], u[3]);
}

// a += the dot product of 8 bf16 weights and 8 bf16 inputs (16-byte pieces as 4 words each,
// ww and xx), in f32, the products added one by one in element order. A macro: as an inline
// function ptxas allocates the one-row gate/up GEMV's registers differently and spills at its
// 64-register cap.
#define DOT8_ACC(a, ww, xx)                                                                    \
    _Pragma("unroll") for (int q_ = 0; q_ < 4; ++q_) {                                         \
        a += __uint_as_float((ww)[q_] << 16) * __uint_as_float((xx)[q_] << 16);                \
        a += __uint_as_float((ww)[q_] & 0xffff0000u) * __uint_as_float((xx)[q_] & 0xffff0000u); \
    }

// One output of a GEMV with a bf16 result (see gemv's EPI): 0 the sum, 1 the residual `res`
// plus the sum, 3 SwiGLU of the gate and up sums, each rounded where HF rounds.
template <int EPI>
__device__ __forceinline__ void store_bf16_out(unsigned short* y, size_t at, float a0, float a1,
                                               float res) {
    if (EPI == 0) {
        y[at] = f2bf(a0);
    } else if (EPI == 1) {
        y[at] = f2bf(res + rbf(a0));
    } else {
        // As ll_swiglu on the bf16 gate and up HF would have stored.
        float gt = rbf(a0);
        float silu = rbf(gt / (1.0f + __expf(-gt)));
        y[at] = f2bf(silu * rbf(a1));
    }
}

// HF RMSNorm of one row held in 16-byte pieces (xv, up to GEMV_XC per thread, piece c =
// threadIdx.x + j * blockDim.x of n8) with its weights' pieces (wv): the sum of squares in f32
// (8 neighbours per thread, then the block), then per element bf16(w * bf16(x * inv)) into out.
// Every thread of the block must call it (block_sum synchronises).
__device__ __forceinline__ void norm_pieces(const uint4* xv, const uint4* wv, int n8, int n,
                                            float eps, float* scratch, uint4* out) {
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < GEMV_XC; ++j) {
        float f[8];
        unpack8(xv[j], f);
#pragma unroll
        for (int e = 0; e < 8; ++e) ss += f[e] * f[e];
    }
    ss = block_sum(ss, scratch);
    float inv = rsqrtf(ss / (float)n + eps);
#pragma unroll
    for (int j = 0; j < GEMV_XC; ++j) {
        int c = threadIdx.x + j * blockDim.x;
        if (c < n8) {
            float f[8], g[8];
            unpack8(xv[j], f);
            unpack8(wv[j], g);
#pragma unroll
            for (int e = 0; e < 8; ++e) f[e] = g[e] * rbf(f[e] * inv);
            out[c] = pack8(f);
        }
    }
}

// out[r, :] = table[tokens[r], :]; one block per row. Ids outside the vocabulary read row 0.
// Rows in whole 16-byte pieces (up to GEMV_XC per thread) are copied in one round trip.
extern "C" __global__ void ll_embed(const int* tokens, const unsigned short* table,
                                    unsigned short* out, int hidden, int vocab) {
    pdl_trigger();
    pdl_wait();
    int r = blockIdx.x;
    int t = tokens[r];
    if (t < 0 || t >= vocab) t = 0;
    const unsigned short* src = table + (size_t)t * hidden;
    unsigned short* dst = out + (size_t)r * hidden;
    int h8 = hidden >> 3;
    if ((hidden & 7) == 0 && h8 <= GEMV_XC * (int)blockDim.x &&
        ((((unsigned long long)table) | ((unsigned long long)out)) & 15ull) == 0ull) {
        uint4 v[GEMV_XC];
#pragma unroll
        for (int j = 0; j < GEMV_XC; ++j) {
            int c = threadIdx.x + j * blockDim.x;
            v[j] = ldg_if((const uint4*)src + c, c < h8);
        }
#pragma unroll
        for (int j = 0; j < GEMV_XC; ++j) {
            int c = threadIdx.x + j * blockDim.x;
            if (c < h8) ((uint4*)dst)[c] = v[j];
        }
        return;
    }
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = src[i];
}

// HF LlamaRMSNorm: out = w * bf16(x * rsqrt(mean(x^2) + eps)); one block per row. Rows in whole
// 16-byte pieces (up to GEMV_XC per thread) are read in one round trip, the weights before the
// wait; the sum of squares adds 8 neighbours per thread, then the block.
extern "C" __global__ void ll_rmsnorm(const unsigned short* x, const unsigned short* w,
                                      unsigned short* out, int hidden, float eps) {
    __shared__ float scratch[32];
    int h8 = hidden >> 3;
    bool pieces = (hidden & 7) == 0 && h8 <= GEMV_XC * (int)blockDim.x &&
                  ((((unsigned long long)x) | ((unsigned long long)w) |
                    ((unsigned long long)out)) & 15ull) == 0ull;
    uint4 wv[GEMV_XC];
    if (pieces) {
#pragma unroll
        for (int j = 0; j < GEMV_XC; ++j) {
            int c = threadIdx.x + j * blockDim.x;
            wv[j] = ldg_if((const uint4*)w + c, c < h8);
        }
    }
    pdl_trigger();
    pdl_wait();
    const unsigned short* xr = x + (size_t)blockIdx.x * hidden;
    unsigned short* yr = out + (size_t)blockIdx.x * hidden;
    if (pieces) {
        uint4 xv[GEMV_XC];
#pragma unroll
        for (int j = 0; j < GEMV_XC; ++j) {
            int c = threadIdx.x + j * blockDim.x;
            xv[j] = ld_if((const uint4*)xr + c, c < h8);
        }
        norm_pieces(xv, wv, h8, hidden, eps, scratch, (uint4*)yr);
        return;
    }
    float ss = 0.0f;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        float v = bf2f(xr[i]);
        ss += v * v;
    }
    ss = block_sum(ss, scratch);
    float inv = rsqrtf(ss / (float)hidden + eps);
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
        yr[i] = f2bf(bf2f(w[i]) * rbf(bf2f(xr[i]) * inv));
    }
}

// HF apply_rotary_pos_emb on one head (bf16 arithmetic as in HF): element i of x.
__device__ __forceinline__ float rope_at(const unsigned short* x, const float* c, const float* s,
                                         int i, int half) {
    if (i < half) {
        return rbf(rbf(bf2f(x[i]) * c[i]) + rbf(-bf2f(x[i + half]) * s[i]));
    }
    int j = i - half;
    return rbf(rbf(bf2f(x[i]) * c[j]) + rbf(bf2f(x[j]) * s[j]));
}

// Decode attention fused with RoPE and the KV-cache append, split over blocks (flash-decoding).
// Grid (rows, n_kv_heads, splits), blockDim a multiple of 32 (W warps); a block serves the
// `group` query heads that share one key/value head (group <= ATT_GMAX) over one contiguous chunk
// of the row's positions 0..=pos[r]. The chunk length comes from the device-side position, so the
// split count (gridDim.z) can stay fixed in a captured graph: chunk = max(ceil(len / splits),
// ATT_MIN_CHUNK), and the `active` = ceil(len / chunk) first blocks have positions (the others
// return at once). The block whose chunk ends at pos[r] appends that head's K and V there and
// uses them from shared memory (no block reads position pos[r] from the cache); every block
// ropes the queries. Under programmatic launch the position and the first round of cached K and
// V (positions before pos[r]) are loaded before the wait, overlapping the q/k/v projection: that
// kernel (ll_gemv_norm) lets its dependents start only after its own wait, so everything that
// wrote them (the advance, earlier steps' attention) has finished.
// Positions are spread over the warps, four at a time: warp w takes t = t0 + w + W * (4i + u),
// u < 4, and issues the four positions' K and V loads together (one memory round trip per four
// positions). Within a warp the lanes split head_dim (lane holds elements lane + 32e, e < E, so
// head_dim <= 32E), scores are warp reductions, and each warp keeps an online softmax (running
// max m, sum l, weighted V sum) per query head for all the group's heads in one pass (up to 4
// heads' scores reduced together, warp_sum_many); the W
// partial results are combined in shared memory (one warp per head finds the block's max and
// each warp's weight). With one active block that is the output;
// otherwise each block writes its (m, l, acc[head_dim]) per query head to `part`, and the last
// block to finish for (row, KV head) (an atomic count in `counters`, which that block resets to 0
// for the next launch) combines the active blocks' partials into the output.
// Cache layout per layer: [rows, n_kv, max_ctx, head_dim]. qkv row: [q heads | k heads | v heads]
// x head_dim. part: [rows, n_kv, splits, group, head_dim + 2] floats (acc, then m and l per head);
// counters: [rows, n_kv], 0 between launches. Any split count works (the decoder caps it at 64).
// Dynamic shared memory: (group * head_dim * (W + 1) + 2 * W * group + (splits + 1) * group +
// 2 * head_dim + 2 * group) floats, and CL * (ceil(group * head_dim / CL) + 2 * group) more in
// the cluster variants below (crates/graphsmith-llama/src/kernels/geometry.rs, attention_smem).
// A bf16 load (as f32) when `ok`, 0 otherwise: predicated in PTX, so the loads of a round issue
// back to back. A plain load (the cache's positions before p, which no kernel still running
// writes).
__device__ __forceinline__ float ld_bf_if(const unsigned short* p, bool ok) {
    unsigned int v;
    asm("{\n\t.reg .pred q;\n\t"
        "setp.ne.b32 q, %2, 0;\n\t"
        "mov.u32 %0, 0;\n\t"
        "@q ld.global.u16 %0, [%1];\n\t}"
        : "=r"(v)
        : "l"(p), "r"((int)ok)
        : "memory");
    return __uint_as_float(v << 16);
}

// A load from L2 (not L1): the partials other blocks of this launch wrote.
__device__ __forceinline__ float ld_cg(const float* p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p) : "memory");
    return v;
}

// Asks L2 to fetch this block's share of bytes [off, off + n) of p (p + off 16-byte aligned, n a
// multiple of 16; sm_90 bulk prefetch, 16 KB per instruction, no registers, nothing waits for
// it). The grid shares the range out evenly. Weights only: no kernel of a step writes them, so
// the prefetch may run before the wait and no value read later can be stale.
#define L2_PREFETCH_CHUNK 16384ull
__device__ __forceinline__ void l2_prefetch_share(const unsigned char* p, unsigned long long off,
                                                  unsigned long long n) {
    if (n == 0) return;
    unsigned long long blocks = (unsigned long long)gridDim.x * gridDim.y * gridDim.z;
    unsigned long long b = blockIdx.x + (unsigned long long)gridDim.x *
                                            (blockIdx.y + (unsigned long long)gridDim.y * blockIdx.z);
    unsigned long long share = ((n + blocks - 1) / blocks + 15ull) & ~15ull;
    unsigned long long begin = b * share, end = min(n, begin + share);
    for (unsigned long long at = begin + threadIdx.x * L2_PREFETCH_CHUNK; at < end;
         at += blockDim.x * L2_PREFETCH_CHUNK) {
        unsigned int size = (unsigned int)min(L2_PREFETCH_CHUNK, end - at);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off + at), "r"(size)
                     : "memory");
    }
}

// Up to three ranges of weights to bring into L2 (a null pointer or n = 0: none).
struct Prefetch {
    const unsigned char* p[3];
    unsigned long long off[3], n[3];
};

__device__ __forceinline__ void l2_prefetch(const Prefetch& f) {
#pragma unroll
    for (int i = 0; i < 3; ++i)
        if (f.p[i] != nullptr) l2_prefetch_share(f.p[i], f.off[i], f.n[i]);
}

// Thread block clusters (sm_90): this block's rank in its cluster.
__device__ __forceinline__ unsigned int cluster_rank() {
    unsigned int r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// The 32-bit shared-memory address of p (a pointer into this block's shared memory).
__device__ __forceinline__ unsigned int smem_u32(const void* p) {
    return (unsigned int)__cvta_generic_to_shared(p);
}

// Makes `bar` an mbarrier whose phase 0 completes when one arrival and `bytes` bytes of
// asynchronous stores (st_async below) have come, and makes that visible to the cluster's
// other blocks by their next cluster barrier wait. One thread, before the cluster's arrival.
__device__ __forceinline__ void mbar_init_expect(unsigned long long* bar, unsigned int bytes) {
    asm volatile(
        "mbarrier.init.shared::cta.b64 [%0], 1;\n\t"
        "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n\t"
        "fence.mbarrier_init.release.cluster;" ::"r"(smem_u32(bar)),
        "r"(bytes)
        : "memory");
}

// Waits for phase 0 of `bar`: every byte it expects has been stored into this block, and
// (acquire, cluster scope) the stores are visible to the thread.
__device__ __forceinline__ void mbar_wait0(unsigned long long* bar) {
    unsigned int a = smem_u32(bar), done = 0;
    while (!done) {
        asm volatile(
            "{\n\t.reg .pred q;\n\t"
            "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 q, [%1], 0;\n\t"
            "selp.u32 %0, 1, 0, q;\n\t}"
            : "=r"(done)
            : "r"(a)
            : "memory");
    }
}

// A store of v to the shared memory of block `rank` of the cluster, at the place `p` has in
// this block's, that counts its 4 bytes on that block's mbarrier `bar` (distributed shared
// memory; the receiver waits on its barrier, nobody waits for the sender).
__device__ __forceinline__ void st_async(float* p, unsigned long long* bar, unsigned int rank,
                                         float v) {
    asm volatile(
        "{\n\t.reg .u32 d, b;\n\t"
        "mapa.shared::cluster.u32 d, %0, %2;\n\t"
        "mapa.shared::cluster.u32 b, %1, %2;\n\t"
        "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [d], %3, [b];\n\t}" ::"r"(
            smem_u32(p)),
        "r"(smem_u32(bar)), "r"(rank), "r"(__float_as_uint(v))
        : "memory");
}

#define ATT_U 4
// Fewest positions per block (two per warp); the decoder's split rule
// (crates/graphsmith-llama/src/kernels/geometry.rs, ATTENTION_MIN_CHUNK) uses the same number.
#define ATT_MIN_CHUNK 16

// Sums N values over the warp's 32 lanes at once (N a power of two, at most 32): at each step
// a lane keeps half of its values and sends the other half to the lane O away, which keeps
// the opposite half, so each step halves the values and the shuffles of a step are
// independent (N - 1 + log2(32 / N) shuffles in five steps, instead of five steps for each
// value). After it v[0] of lane `lane` holds the sum of value lane / (32 / N).
template <int N, int O = 16>
__device__ __forceinline__ void warp_sum_many(float (&v)[N], int lane) {
    if constexpr (N > 1) {
        bool upper = (lane & O) != 0;
#pragma unroll
        for (int i = 0; i < N / 2; ++i) {
            float send = upper ? v[i] : v[i + N / 2];
            float keep = upper ? v[i + N / 2] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, O);
        }
        warp_sum_many<N / 2, O / 2>(reinterpret_cast<float (&)[N / 2]>(v), lane);
    } else {
#pragma unroll
        for (int o = O; o > 0; o >>= 1) v[0] += __shfl_xor_sync(0xffffffffu, v[0], o);
    }
}

// The share of n outputs each of the CL blocks of a cluster combines (block b: [b * share,
// (b + 1) * share)).
template <int CL>
__device__ __forceinline__ int cluster_share(int n) {
    return (n + CL - 1) / (CL > 0 ? CL : 1);
}

template <int E, int ATT_GMAX, int CL>
__device__ __forceinline__ void attention(const unsigned short* qkv, unsigned short* kcache,
                                          unsigned short* vcache, const int* pos,
                                          const float* cos_t, const float* sin_t,
                                          unsigned short* out, int nq, int nkv, int hd,
                                          int max_ctx, float scale, float* part,
                                          unsigned int* counters, const Prefetch& pf) {
    extern __shared__ float smem[];
    __shared__ int is_last;
    const float NEG_INF = __int_as_float(0xff800000);
    int r = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z, splits = gridDim.z;
    int group = nq / nkv;
    int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float* qs = smem;                          // group * hd
    float* pacc = qs + group * hd;             // nw * group * hd
    float* pm = pacc + nw * group * hd;        // nw * group: each warp's max, then its weight
    float* pl = pm + nw * group;               // nw * group: each warp's sum
    float* bw = pl + nw * group;               // (splits + 1) * group: the combine's weights
    float* kn = bw + (splits + 1) * group;     // hd: position p's roped K (bf16-rounded)
    float* vn = kn + hd;                       // hd: position p's V
    float* hst = vn + hd;                      // 2 * group: the block's max and sum per head
    // In a cluster, CL * (per + 2 * group) with per = ceil(group * hd / CL): the share of the
    // output this block combines, from every block of the cluster (CL * per), then every
    // block's max and sum per head (CL * 2 * group); the other blocks write them here.
    float* cpart = hst + 2 * group;
    // Before the wait: the position, and the first round of this block's cached K and V
    // (positions before p). Only the q/k/v GEMV before this kernel can still be running (it
    // triggers its dependents after its own wait, so everything earlier has finished), and it
    // writes none of these: the advance wrote pos, earlier steps wrote the cache.
    int p = 0, len = 0, chunk = 0, active = 0, t_begin = 0, t_end = 0;
    bool live = false;
    size_t base = ((size_t)r * nkv + kvh) * (size_t)max_ctx * hd;
    unsigned short* kc = kcache + base;
    unsigned short* vc = vcache + base;
    float kf[ATT_U][E], vf[ATT_U][E];
    // The cached K and V of the round that starts at t0 (positions before p only: p's come
    // from shared memory).
    auto load_round = [&](int t0) {
#pragma unroll
        for (int u = 0; u < ATT_U; ++u) {
            int t = t0 + u * nw;
#pragma unroll
            for (int e = 0; e < E; ++e) {
                int i = lane + 32 * e;
                bool ok = t < t_end && t < p && i < hd;
                kf[u][e] = ld_bf_if(kc + (size_t)t * hd + i, ok);
                vf[u][e] = ld_bf_if(vc + (size_t)t * hd + i, ok);
            }
        }
    };
    auto first_round = [&]() {
        p = pos[r];
        live = p >= 0 && p < max_ctx;
        len = live ? p + 1 : 0;
        chunk = max((len + splits - 1) / splits, ATT_MIN_CHUNK);
        active = (len + chunk - 1) / chunk;
        t_begin = split * chunk;
        t_end = min(len, t_begin + chunk);
        load_round(t_begin + warp);
    };
    __shared__ unsigned long long cl_bar;
    if constexpr (CL > 0) {
        // The blocks of a cluster write into each other's shared memory below, which they may
        // only do once every block runs and has made its barrier: arrive here, and wait just
        // before the first such write (by then the wait does not block). Each block's barrier
        // expects what the others store into it: its share of every block's partial and every
        // block's max and sum per head.
        if (threadIdx.x == 0) {
            int per = cluster_share<CL>(group * hd);
            int mine = min(per, max(0, group * hd - (int)cluster_rank() * per));
            mbar_init_expect(&cl_bar, (unsigned int)(CL * (mine + 2 * group) * 4));
        }
        asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory");
    }
    // The layer's next weights into L2 (see Prefetch), while this latency-bound kernel leaves
    // the memory idle; then the first loads, and the next kernel (the o projection, which loads
    // its weights before its own wait) may start.
    l2_prefetch(pf);
    first_round();
    pdl_trigger();
    pdl_wait();
    unsigned short* orow = out + (size_t)r * nq * hd + (size_t)kvh * group * hd;
    if (!live) {
        if (split == 0) {
            for (int i = threadIdx.x; i < group * hd; i += blockDim.x) orow[i] = 0;
        }
        return;
    }
    // Blocks without positions leave, except in a cluster combining several blocks: there
    // they offer an empty partial (no position, so l = 0) and join its barrier.
    if (split >= active && (CL == 0 || active == 1)) return;
    int half = hd / 2;
    const float* c = cos_t + (size_t)p * half;
    const float* s = sin_t + (size_t)p * half;
    const unsigned short* row = qkv + (size_t)r * (nq + 2 * nkv) * hd;
    if (t_end == len && split < active) {
        // This block's chunk ends at p: it appends p's K and V, and reads them from shared
        // memory (the cache is not read back at p).
        const unsigned short* k_new = row + (size_t)nq * hd + (size_t)kvh * hd;
        const unsigned short* v_new = row + (size_t)(nq + nkv) * hd + (size_t)kvh * hd;
        for (int i = threadIdx.x; i < hd; i += blockDim.x) {
            unsigned short kb = f2bf(rope_at(k_new, c, s, i, half));
            unsigned short vb = v_new[i];
            kc[(size_t)p * hd + i] = kb;
            vc[(size_t)p * hd + i] = vb;
            kn[i] = bf2f(kb);
            vn[i] = bf2f(vb);
        }
    }
    for (int idx = threadIdx.x; idx < group * hd; idx += blockDim.x) {
        int j = idx / hd, i = idx % hd;
        qs[idx] = rope_at(row + (size_t)(kvh * group + j) * hd, c, s, i, half);
    }
    // The roped queries and p's K and V (shared) are visible to the whole block.
    __syncthreads();
    float q[ATT_GMAX][E], acc[ATT_GMAX][E], m[ATT_GMAX], l[ATT_GMAX];
#pragma unroll
    for (int j = 0; j < ATT_GMAX; ++j) {
#pragma unroll
        for (int e = 0; e < E; ++e) {
            int i = lane + 32 * e;
            q[j][e] = (j < group && i < hd) ? qs[j * hd + i] : 0.0f;
            acc[j][e] = 0.0f;
        }
        m[j] = NEG_INF;
        l[j] = 0.0f;
    }
    for (int t0 = t_begin + warp; t0 < t_end; t0 += ATT_U * nw) {
        // The first round is loaded already (first_round); p comes from shared memory.
        if (t0 != t_begin + warp) load_round(t0);
#pragma unroll
        for (int u = 0; u < ATT_U; ++u) {
            int t = t0 + u * nw;
            if (t >= t_end) break;  // warp-uniform
            if (t == p) {
#pragma unroll
                for (int e = 0; e < E; ++e) {
                    int i = lane + 32 * e;
                    kf[u][e] = i < hd ? kn[i] : 0.0f;
                    vf[u][e] = i < hd ? vn[i] : 0.0f;
                }
            }
            // Head j's score d (the same in every lane) into its online softmax.
            auto take = [&](int j, float d) {
                d *= scale;
                float mn = fmaxf(m[j], d);
                float corr = __expf(m[j] - mn);
                float pe = __expf(d - mn);
                l[j] = l[j] * corr + pe;
#pragma unroll
                for (int e = 0; e < E; ++e) acc[j][e] = acc[j][e] * corr + pe * vf[u][e];
                m[j] = mn;
            };
            if constexpr (ATT_GMAX <= 4) {
                // Up to 4 heads' scores are summed together (warp_sum_many: their shuffles
                // issue side by side; a head past the group, whose query is zero, adds no
                // shuffle of its own), then shared out to every lane: fewer shuffles in a
                // dependent chain than a warp reduction per head, one after another.
                float d[ATT_GMAX];
#pragma unroll
                for (int j = 0; j < ATT_GMAX; ++j) {
                    d[j] = 0.0f;
#pragma unroll
                    for (int e = 0; e < E; ++e) d[j] += q[j][e] * kf[u][e];
                }
                warp_sum_many<ATT_GMAX>(d, lane);
                // Every head's sum to every lane, with no condition around a shuffle (one
                // would make each a branch of its own).
                float sum = d[0];
#pragma unroll
                for (int j = 0; j < ATT_GMAX; ++j)
                    d[j] = __shfl_sync(0xffffffffu, sum, j * (32 / ATT_GMAX));
#pragma unroll
                for (int j = 0; j < ATT_GMAX; ++j) {
                    if (j >= group) break;
                    take(j, d[j]);
                }
            } else {
#pragma unroll
                for (int j = 0; j < ATT_GMAX; ++j) {
                    if (j >= group) break;
                    float d = 0.0f;
#pragma unroll
                    for (int e = 0; e < E; ++e) d += q[j][e] * kf[u][e];
                    for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
                    take(j, d);
                }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < ATT_GMAX; ++j) {
        if (j >= group) break;
        if (lane == 0) {
            pm[warp * group + j] = m[j];
            pl[warp * group + j] = l[j];
        }
#pragma unroll
        for (int e = 0; e < E; ++e) {
            int i = lane + 32 * e;
            if (i < hd) pacc[(size_t)(warp * group + j) * hd + i] = acc[j][e];
        }
    }
    __syncthreads();
    // The block's partial per query head j, one warp per head (lane w reads warp w's max and
    // sum; W <= 32): the block's max M (a warp reduction), each warp's weight exp(m_w - M)
    // (written over pm) and the block's sum L = sum of l_w * exp(m_w - M) (hst). Warp 0 always
    // has a position except in a cluster's empty block, whose partial is then (M = -inf, L = 0).
    // Warp reductions instead of each thread looping over the warps for M and then for L.
    for (int j = warp; j < group; j += nw) {
        float mw = NEG_INF, lw = 0.0f;
        if (lane < nw) {
            mw = pm[lane * group + j];
            lw = pl[lane * group + j];
        }
        bool ok = lw > 0.0f;
        float mx = ok ? mw : NEG_INF;
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float sc = ok ? __expf(mw - mx) : 0.0f;
        float sum = lw * sc;
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane < nw) pm[lane * group + j] = sc;
        if (lane == 0) {
            hst[2 * j] = mx;
            hst[2 * j + 1] = sum;
        }
    }
    __syncthreads();
    size_t stride = (size_t)group * (hd + 2);
    float* slots = part + ((size_t)r * nkv + kvh) * splits * stride;
    float* mine = slots + (size_t)split * stride;
    int per = cluster_share<CL>(group * hd);
    unsigned int rank = 0;
    if constexpr (CL > 0) {
        rank = cluster_rank();
        // The arrival at the top: every block of the cluster runs.
        if (active > 1) asm volatile("barrier.cluster.wait;" ::: "memory");
    }
    for (int idx = threadIdx.x; idx < group * hd; idx += blockDim.x) {
        int j = idx / hd, i = idx % hd;
        float o = 0.0f;
        for (int w = 0; w < nw; ++w) o += pacc[(size_t)(w * group + j) * hd + i] * pm[w * group + j];
        if (active == 1) {
            orow[idx] = f2bf(o / hst[2 * j + 1]);
        } else if (CL > 0) {
            // To the block of the cluster that combines element idx, into its slot for this
            // block.
            int owner = idx / per;
            st_async(cpart + rank * per + (idx - owner * per), &cl_bar, (unsigned int)owner, o);
        } else {
            mine[idx] = o;
            if (i == 0) {
                mine[group * hd + 2 * j] = hst[2 * j];
                mine[group * hd + 2 * j + 1] = hst[2 * j + 1];
            }
        }
    }
    if (active == 1) return;
    if constexpr (CL > 0) {
        // The CL blocks of (row, KV head) form a cluster (gridDim.z == CL). Each has pushed
        // its partial of output [b * per, (b + 1) * per) into block b's shared memory (above)
        // and pushes its max and sum per head to every block, each store counted on the
        // receiving block's mbarrier (cl_bar); block b waits on its own barrier until all it
        // expects has come, then combines its share from its own shared memory. No global
        // memory, no count, no cluster-wide barrier: a block waits only for what it reads,
        // and nothing reads another block's memory, so no block waits for another to leave
        // (cheaper than a cluster-wide barrier after the pushes).
        float* cml = cpart + CL * per;
        for (int k = threadIdx.x; k < CL * group; k += blockDim.x) {
            int dst = k / group, j = k % group;
            st_async(cml + rank * 2 * group + 2 * j, &cl_bar, (unsigned int)dst, hst[2 * j]);
            st_async(cml + rank * 2 * group + 2 * j + 1, &cl_bar, (unsigned int)dst,
                     hst[2 * j + 1]);
        }
        mbar_wait0(&cl_bar);
        for (int t = threadIdx.x; t < per; t += blockDim.x) {
            int idx = (int)rank * per + t;
            if (idx >= group * hd) break;
            int j = idx / hd;
            float mc[CL], lc[CL], ac[CL];
#pragma unroll
            for (int b = 0; b < CL; ++b) {
                mc[b] = cml[b * 2 * group + 2 * j];
                lc[b] = cml[b * 2 * group + 2 * j + 1];
                ac[b] = cpart[b * per + t];
            }
            float mx = NEG_INF;
#pragma unroll
            for (int b = 0; b < CL; ++b)
                if (lc[b] > 0.0f) mx = fmaxf(mx, mc[b]);
            float sum = 0.0f, o = 0.0f;
#pragma unroll
            for (int b = 0; b < CL; ++b) {
                if (lc[b] > 0.0f) {
                    float sc = __expf(mc[b] - mx);
                    sum += lc[b] * sc;
                    o += ac[b] * sc;
                }
            }
            orow[idx] = f2bf(o / sum);
        }
        return;
    }
    // Publish the partial; the last of the active blocks to count itself combines them all.
    // Thread 0 counts with an acquire-release add after a block barrier: its release orders
    // every write of its block before the add, and the last block's acquire (with the barrier
    // after it) orders every read of that block after the others' adds, so after their writes.
    // No full fence is needed (a split-K semaphore's pattern).
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int* cnt = counters + (size_t)r * nkv + kvh;
        unsigned int done;
        asm volatile("atom.add.acq_rel.gpu.u32 %0, [%1], 1;" : "=r"(done) : "l"(cnt) : "memory");
        is_last = done == (unsigned int)(active - 1);
        if (is_last) atomicExch(cnt, 0u);
    }
    __syncthreads();
    if (!is_last) return;
    // Per query head j (a warp each): M = max of the blocks' maxima, the weight exp(m_b - M) of
    // each block b (bw[b * group + j]) and L = sum of l_b * exp(m_b - M) (bw[active * group + j]).
    for (int j = warp; j < group; j += nw) {
        float mx = NEG_INF;
        for (int b = lane; b < active; b += 32) {
            float mb = ld_cg(slots + (size_t)b * stride + group * hd + 2 * j);
            bw[b * group + j] = mb;
            mx = fmaxf(mx, mb);
        }
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float sum = 0.0f;
        for (int b = lane; b < active; b += 32) {
            float lb = ld_cg(slots + (size_t)b * stride + group * hd + 2 * j + 1);
            float sc = __expf(bw[b * group + j] - mx);
            bw[b * group + j] = sc;
            sum += lb * sc;
        }
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (lane == 0) bw[active * group + j] = sum;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < group * hd; idx += blockDim.x) {
        int j = idx / hd;
        float o = 0.0f;
        for (int b = 0; b < active; ++b) {
            o += ld_cg(slots + (size_t)b * stride + idx) * bw[b * group + j];
        }
        orow[idx] = f2bf(o / bw[active * group + j]);
    }
}

// The instantiations by elements per lane: ll_attention_1 (head_dim <= 32), _2 (<= 64),
// _4 (<= 128), _8 (<= 256), for groups of up to 16 query heads; the _g4 ones for groups of up
// to 4 (fewer registers: more blocks per SM at large batches); same arguments. The last nine are
// the Prefetch: three (pointer, byte offset, bytes) ranges.
#define LL_ATTENTION(NAME, E, G)                                                                \
    extern "C" __global__ void NAME(                                                            \
        const unsigned short* qkv, unsigned short* kcache, unsigned short* vcache,              \
        const int* pos, const float* cos_t, const float* sin_t, unsigned short* out, int nq,   \
        int nkv, int hd, int max_ctx, float scale, float* part, unsigned int* counters,        \
        const unsigned char* pf0, unsigned long long off0, unsigned long long n0,              \
        const unsigned char* pf1, unsigned long long off1, unsigned long long n1,              \
        const unsigned char* pf2, unsigned long long off2, unsigned long long n2) {            \
        Prefetch pf = {{pf0, pf1, pf2}, {off0, off1, off2}, {n0, n1, n2}};                     \
        attention<E, G, 0>(qkv, kcache, vcache, pos, cos_t, sin_t, out, nq, nkv, hd, max_ctx,  \
                           scale, part, counters, pf);                                          \
    }
LL_ATTENTION(ll_attention_1, 1, 16)
LL_ATTENTION(ll_attention_2, 2, 16)
LL_ATTENTION(ll_attention_4, 4, 16)
LL_ATTENTION(ll_attention_8, 8, 16)
LL_ATTENTION(ll_attention_1_g4, 1, 4)
LL_ATTENTION(ll_attention_2_g4, 2, 4)
LL_ATTENTION(ll_attention_4_g4, 4, 4)
LL_ATTENTION(ll_attention_8_g4, 8, 4)

// The cluster variants (sm_90): grid (rows, n_kv_heads, CL), clusters of the CL blocks of one
// (row, KV head), which combine their partials through distributed shared memory instead of
// `part` and `counters` (unused; same arguments): each block pushes its partial to the blocks
// that combine it and waits for its own share. For groups of up to 4 query heads and head_dim
// up to 128. `_c8`: clusters of 8 blocks of 512 threads (16 warps), one block per
// multiprocessor (at most 128 registers), for models with few KV heads; `_c4`: clusters of 4
// blocks of 256 threads (8 warps), up to two per multiprocessor, for models with many (32 KV
// heads: 128 blocks at one row). The dynamic shared memory is that of the block's warps and CL
// splits (`AttentionLaunch::smem`).
#define LL_ATTENTION_CLUSTER(NAME, E, CL, THREADS, MIN_BLOCKS)                                  \
    extern "C" __global__ void __cluster_dims__(1, 1, CL) __launch_bounds__(THREADS, MIN_BLOCKS) \
        NAME(const unsigned short* qkv, unsigned short* kcache, unsigned short* vcache,         \
             const int* pos, const float* cos_t, const float* sin_t, unsigned short* out,      \
             int nq, int nkv, int hd, int max_ctx, float scale, float* part,                   \
             unsigned int* counters, const unsigned char* pf0, unsigned long long off0,        \
             unsigned long long n0, const unsigned char* pf1, unsigned long long off1,          \
             unsigned long long n1, const unsigned char* pf2, unsigned long long off2,          \
             unsigned long long n2) {                                                           \
        Prefetch pf = {{pf0, pf1, pf2}, {off0, off1, off2}, {n0, n1, n2}};                     \
        attention<E, 4, CL>(qkv, kcache, vcache, pos, cos_t, sin_t, out, nq, nkv, hd, max_ctx, \
                            scale, part, counters, pf);                                         \
    }
LL_ATTENTION_CLUSTER(ll_attention_1_c8, 1, 8, 512, 1)
LL_ATTENTION_CLUSTER(ll_attention_2_c8, 2, 8, 512, 1)
LL_ATTENTION_CLUSTER(ll_attention_4_c8, 4, 8, 512, 1)
LL_ATTENTION_CLUSTER(ll_attention_1_c4, 1, 4, 256, 2)
LL_ATTENTION_CLUSTER(ll_attention_2_c4, 2, 4, 256, 2)
LL_ATTENTION_CLUSTER(ll_attention_4_c4, 4, 4, 256, 2)

// HF LlamaMLP activation: out = bf16(silu(gate)) * up, rounded to bf16. gu row: [gate | up].
extern "C" __global__ void ll_swiglu(const unsigned short* gu, unsigned short* out, int ffn,
                                     int total) {
    pdl_trigger();
    pdl_wait();
    for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < total;
         idx += gridDim.x * blockDim.x) {
        int r = idx / ffn, c = idx % ffn;
        const unsigned short* row = gu + (size_t)r * 2 * ffn;
        float g = bf2f(row[c]);
        float u = bf2f(row[ffn + c]);
        float silu = rbf(g / (1.0f + __expf(-g)));
        out[idx] = f2bf(silu * u);
    }
}

// Order-preserving key of a float (larger float, larger key), packed with the complement of the
// index so that the 64-bit maximum is the largest value and, among equal values, the first index.
__device__ __forceinline__ unsigned long long argmax_key(float v, int i) {
    unsigned int u = __float_as_uint(v);
    unsigned int key = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ((unsigned long long)key << 32) | (unsigned long long)(0xffffffffu - (unsigned int)i);
}

// Rounds logits to bf16 in place (HF's lm_head output is bf16) and folds each row's largest
// value (first index on ties, as torch.argmax) into best[r] with one 64-bit atomicMax per warp.
// Grid (chunks, rows): the vocabulary is spread over the chunks. best[r] must be 0 before the
// step (it starts at 0 and ll_advance resets it after reading).
extern "C" __global__ void ll_argmax(float* logits, unsigned long long* best, int vocab) {
    pdl_trigger();
    pdl_wait();
    float* row = logits + (size_t)blockIdx.y * vocab;
    unsigned long long b = 0ull;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < vocab; i += gridDim.x * blockDim.x) {
        float v = rbf(row[i]);
        row[i] = v;
        unsigned long long k = argmax_key(v, i);
        b = k > b ? k : b;
    }
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long other = __shfl_xor_sync(0xffffffffu, b, o);
        b = other > b ? other : b;
    }
    if ((threadIdx.x & 31) == 0 && b != 0ull) atomicMax(&best[blockIdx.y], b);
}

// Greedy advance on the device: each row's argmax is decoded from best[r] into next[r] (and
// best[r] reset to 0 for the next step); each active row takes it as the next token and moves
// one position on (a row reaching the context's end becomes inactive); a padding row's next
// is -1.
extern "C" __global__ void ll_advance(unsigned long long* best, int* next, int* tokens, int* pos,
                                      int rows, int max_ctx) {
    pdl_trigger();
    pdl_wait();
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    unsigned long long b = best[r];
    best[r] = 0ull;
    if (pos[r] < 0) {
        // Padding: no token (the device-side loop tells a row that had already stopped by it).
        next[r] = -1;
        return;
    }
    int n = b == 0ull ? 0 : (int)(0xffffffffu - (unsigned int)(b & 0xffffffffull));
    next[r] = n;
    tokens[r] = n;
    int p = pos[r] + 1;
    pos[r] = p < max_ctx ? p : -1;
}

// ---- The device-side decode loop: a WHILE node whose body is one decode step ending in
// ll_loop_advance, so one graph launch runs up to K steps with no host round trip.
//
// cudaGraphSetConditional comes from the driver (an `.extern .func` the module loader resolves;
// see graphsmith_kernels.cu), declared here because NVRTC declares it only for relocatable code.
extern "C" __device__ void cudaGraphSetConditional(unsigned long long handle, unsigned int value);

// The step's ll_advance and one iteration's bookkeeping in one kernel, the last of the loop's
// body (so an iteration has as many kernels as a step graph). Per row, first what ll_advance
// does (next[r] from best[r], best[r] reset; an active row takes it as its token and moves one
// position on, becoming padding at the context's end; a padding row's next is -1); then, with
// state written by the host before each launch ([0] steps left, [1] steps done, [2]
// end-of-sequence id (< 0: none), [3 + r] 1 while row r decodes): each decoding row's token of
// this step goes to history[done * rows + r] (-1 for a row that no longer decodes); a row that
// produced the end-of-sequence id, or reached the context's end, stops and becomes padding; a
// row that was padding when the step ran had stopped before the loop. The loop goes on while
// steps are left and some row decodes. One block; it loops over the rows.
extern "C" __global__ void ll_loop_advance(unsigned long long* best, int* next, int* tokens,
                                           int* pos, int* history, int* state, int rows,
                                           int max_ctx, int history_steps,
                                           unsigned long long handle) {
    pdl_wait();
    int done = state[1];
    int eos = state[2];
    int* live = state + 3;
    int any = 0;
    for (int r = threadIdx.x; r < rows; r += blockDim.x) {
        unsigned long long b = best[r];
        best[r] = 0ull;
        int p = pos[r];
        int n = -1;
        if (p >= 0) {
            n = b == 0ull ? 0 : (int)(0xffffffffu - (unsigned int)(b & 0xffffffffull));
            tokens[r] = n;
            p = p + 1 < max_ctx ? p + 1 : -1;
        }
        next[r] = n;
        int t = -1;
        if (live[r]) {
            t = n;
            if (t < 0) {
                live[r] = 0;
            } else if ((eos >= 0 && t == eos) || p < 0) {
                live[r] = 0;
                p = -1;
            } else {
                any = 1;
            }
        }
        pos[r] = p;
        if (done < history_steps) history[(size_t)done * rows + r] = t;
    }
    any = __syncthreads_or(any);
    if (threadIdx.x == 0) {
        int left = state[0] - 1;
        state[0] = left;
        state[1] = done + 1;
        cudaGraphSetConditional(handle, (left > 0 && any && done + 1 < history_steps) ? 1u : 0u);
    }
}

// ---- GEMV for small batches: y[r, n] = sum_k x'[r, k] * w[n, k], weights [N, K] row-major bf16.
//
// x' is the input after an optional prologue, computed by every block for its R rows into shared
// memory as bf16 (exactly the bf16 values the unfused kernels would have written):
//   PRO 0: x' = x                     (x: [rows, K])
//   PRO 1: x' = HF RMSNorm(x) * nw    (x: [rows, K], nw: [K], as ll_rmsnorm)
//   PRO 2: x' = bf16(silu(g)) * u     (x: [rows, 2K] = [gate | up], as ll_swiglu)
// The epilogue writes, for rows row0 .. row0 + rows (rows <= R):
//   EPI 0: y = bf16(acc)              (bf16 out)
//   EPI 1: y = bf16(y + bf16(acc))    (bf16 out, residual add in place as HF: residual + proj)
//   EPI 2: y = float(bf16(acc))       (f32 out, logits; with `best`, each row's argmax too)
//   EPI 3: y = bf16(silu(bf16(acc_gate)) ) * bf16(acc_up), rounded (gate/up with SwiGLU)
// A group of `wpc` warps (1, 2, 4 or 8, dividing the block's warps) per output column n
// (grid-stride over n): the group's warps share out the column's 16-byte weight vectors (warp
// `sub` takes vectors c0 + (u * wpc + sub) * 32 + lane, so every load of a warp reads 512
// consecutive bytes), their sums meet in shared memory. More warps per column keep the GPU busy
// when there are few columns (an o or down projection of a small model). 16-byte weight loads
// when K % 8 == 0 and w is 16-byte aligned (scalar loads otherwise, one warp per column's
// share), fp32 accumulation, warp-shuffle reductions. Weights stream in rounds of GEMV_U loads
// per lane, the next round (the rest of the column, or the group's next column) issued before
// the current one is used, so a warp always has a round in flight. The first round is loaded
// before pdl_wait: weights are read-only.
// Dynamic shared memory: R * ((K + 7) & ~7) * 2 bytes.
#define GEMV_U 4

template <int R, int PRO, int EPI, bool LATE>
__device__ __forceinline__ void gemv(const unsigned short* x, const unsigned short* nw,
                                     const unsigned short* w, void* y, int row0, int rows,
                                     int n, int k, float eps, int wpc,
                                     unsigned long long* best) {
    // EPI 3 takes two weight rows per output column (gate o and up n + o).
    constexpr int P = EPI == 3 ? 2 : 1;
    extern __shared__ __align__(16) unsigned short xs[];
    __shared__ float scratch[32];
    __shared__ float part[32 * R * P];  // per warp: its share of its column, per part and row
    __shared__ unsigned long long sbest[R];  // EPI 2 with best: the block's argmax key per row
    int warps = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int groups = warps / wpc, g = warp / wpc, sub = warp % wpc;
    bool vec = (k & 7) == 0 && (((unsigned long long)w) & 15ull) == 0ull;
    int k8 = k >> 3, stride = gridDim.x * groups, step = 32 * GEMV_U * wpc;
    const uint4* w4 = (const uint4*)w;
    // Round c0 of part p (weight row o + p * n) of column o, this warp's share, into wv.
    auto load_round = [&](uint4* wv, int o, int p, int c0) {
#pragma unroll
        for (int u = 0; u < GEMV_U; ++u) {
            int cidx = c0 + (u * wpc + sub) * 32 + lane;
            wv[u] = ldg_if(w4 + (size_t)(o + p * n) * k8 + cidx, o < n && cidx < k8);
        }
    };
    uint4 wv[GEMV_U];
    int base0 = blockIdx.x * groups;
    if (vec) load_round(wv, base0 + g, 0, 0);
    if (threadIdx.x < R) sbest[threadIdx.x] = 0ull;
    unsigned long long bk[R];
#pragma unroll
    for (int r = 0; r < R; ++r) bk[r] = 0ull;
    // The whole row in 16-byte pieces, one round trip (see GEMV_XC): x and, for the norm, its
    // weights (read-only: loaded before the wait) must be 16-byte aligned, K a multiple of 8.
    bool pieces = PRO != 2 && (k & 7) == 0 && k8 <= GEMV_XC * (int)blockDim.x &&
                  (((unsigned long long)x) & 15ull) == 0ull &&
                  (PRO != 1 || (((unsigned long long)nw) & 15ull) == 0ull);
    uint4 nv[GEMV_XC];
    if (PRO == 1 && pieces) load_pieces<false>(nv, (const uint4*)nw, k8);
    pdl_wait_trigger<LATE>();
    int kpad = (k + 7) & ~7;
    int xstride = PRO == 2 ? 2 * k : k;
    for (int r = 0; r < R; ++r) {
        unsigned short* dst = xs + (size_t)r * kpad;
        if (r < rows && pieces) {
            const uint4* xr4 = (const uint4*)(x + (size_t)(row0 + r) * xstride);
            uint4* dst4 = (uint4*)dst;
            uint4 xv[GEMV_XC];
            load_pieces<true>(xv, xr4, k8);
            if (PRO == 1) {
                // HF RMSNorm as ll_rmsnorm (the same helper).
                norm_pieces(xv, nv, k8, k, eps, scratch, dst4);
            } else {
                store_pieces(dst4, xv, k8);
            }
        } else if (r < rows) {
            const unsigned short* xr = x + (size_t)(row0 + r) * xstride;
            if (PRO == 1) {
                float ss = 0.0f;
                for (int i = threadIdx.x; i < k; i += blockDim.x) {
                    float v = bf2f(xr[i]);
                    ss += v * v;
                }
                ss = block_sum(ss, scratch);
                float inv = rsqrtf(ss / (float)k + eps);
                for (int i = threadIdx.x; i < k; i += blockDim.x) {
                    dst[i] = f2bf(bf2f(nw[i]) * rbf(bf2f(xr[i]) * inv));
                }
            } else if (PRO == 2) {
                for (int i = threadIdx.x; i < k; i += blockDim.x) {
                    float g = bf2f(xr[i]);
                    float u = bf2f(xr[k + i]);
                    float silu = rbf(g / (1.0f + __expf(-g)));
                    dst[i] = f2bf(silu * u);
                }
            } else {
                for (int i = threadIdx.x; i < k; i += blockDim.x) dst[i] = xr[i];
            }
            for (int i = k + threadIdx.x; i < kpad; i += blockDim.x) dst[i] = 0;
        } else {
            for (int i = threadIdx.x; i < kpad; i += blockDim.x) dst[i] = 0;
        }
    }
    __syncthreads();
    // The loop runs alike in every warp of the block (base is block-uniform): the barriers
    // inside are safe; a group whose column is past n computes zeros and writes nothing.
    for (int base = base0; base < n; base += stride) {
        int o = base + g;
        // The residual this column adds to (EPI 1), read now so its round trip overlaps the
        // weights' arithmetic rather than following it.
        float res[R];
#pragma unroll
        for (int r = 0; r < R; ++r) res[r] = 0.0f;
        if (EPI == 1 && lane == 0 && sub == 0 && o < n) {
#pragma unroll
            for (int r = 0; r < R; ++r)
                if (r < rows) res[r] = bf2f(((const unsigned short*)y)[(size_t)(row0 + r) * n + o]);
        }
        float acc[P][R];
#pragma unroll
        for (int p = 0; p < P; ++p)
#pragma unroll
            for (int r = 0; r < R; ++r) acc[p][r] = 0.0f;
#pragma unroll
        for (int p = 0; p < P; ++p) {
            if (vec) {
                // wv holds round c0 of part p of column o; the next round (of this part, the
                // next part, or the group's next column) is issued before it is used.
                for (int c0 = 0; c0 < k8; c0 += step) {
                    uint4 nx[GEMV_U];
                    if (c0 + step < k8) {
                        load_round(nx, o, p, c0 + step);
                    } else if (p + 1 < P) {
                        load_round(nx, o, p + 1, 0);
                    } else {
                        load_round(nx, o + stride, 0, 0);
                    }
#pragma unroll
                    for (int u = 0; u < GEMV_U; ++u) {
                        int cidx = c0 + (u * wpc + sub) * 32 + lane;
                        if (cidx >= k8) break;
                        unsigned int ww[4] = {wv[u].x, wv[u].y, wv[u].z, wv[u].w};
#pragma unroll
                        for (int r = 0; r < R; ++r) {
                            uint4 xv = ((const uint4*)(xs + (size_t)r * kpad))[cidx];
                            unsigned int xx[4] = {xv.x, xv.y, xv.z, xv.w};
                            float a = acc[p][r];
                            DOT8_ACC(a, ww, xx)
                            acc[p][r] = a;
                        }
                    }
#pragma unroll
                    for (int u = 0; u < GEMV_U; ++u) wv[u] = nx[u];
                }
            } else if (o < n) {
                const unsigned short* wr = w + (size_t)(o + p * n) * k;
                for (int i = sub * 32 + lane; i < k; i += 32 * wpc) {
                    float wf = bf2f(wr[i]);
#pragma unroll
                    for (int r = 0; r < R; ++r)
                        acc[p][r] += wf * bf2f(xs[(size_t)r * kpad + i]);
                }
            }
        }
#pragma unroll
        for (int p = 0; p < P; ++p)
#pragma unroll
            for (int r = 0; r < R; ++r) {
                for (int off = 16; off > 0; off >>= 1)
                    acc[p][r] += __shfl_xor_sync(0xffffffffu, acc[p][r], off);
            }
        if (wpc > 1) {
            if (lane == 0) {
#pragma unroll
                for (int p = 0; p < P; ++p)
#pragma unroll
                    for (int r = 0; r < R; ++r) part[(warp * P + p) * R + r] = acc[p][r];
            }
            __syncthreads();
            if (sub == 0) {
#pragma unroll
                for (int p = 0; p < P; ++p)
#pragma unroll
                    for (int r = 0; r < R; ++r) {
                        float t = 0.0f;
                        for (int j = 0; j < wpc; ++j) t += part[((warp + j) * P + p) * R + r];
                        acc[p][r] = t;
                    }
            }
            __syncthreads();
        }
        if (lane == 0 && sub == 0 && o < n) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (r < rows) {
                    size_t at = (size_t)(row0 + r) * n + o;
                    if (EPI == 2) {
                        float v = rbf(acc[0][r]);
                        ((float*)y)[at] = v;
                        unsigned long long key = argmax_key(v, o);
                        bk[r] = key > bk[r] ? key : bk[r];
                    } else {
                        store_bf16_out<EPI>((unsigned short*)y, at, acc[0][r], acc[P - 1][r],
                                            res[r]);
                    }
                }
            }
        }
    }
    if (EPI == 2 && best != nullptr) {
        // The block's largest logit per row (first index on ties), then one atomicMax per block
        // and row into best (see ll_argmax and ll_advance).
        if (lane == 0 && sub == 0) {
#pragma unroll
            for (int r = 0; r < R; ++r)
                if (bk[r] != 0ull) atomicMax(&sbest[r], bk[r]);
        }
        __syncthreads();
        if (threadIdx.x < rows && sbest[threadIdx.x] != 0ull)
            atomicMax(&best[row0 + threadIdx.x], sbest[threadIdx.x]);
    }
}

// The instantiations the decoder uses, by (prologue, epilogue), each for R = 1, 2, 4, 8:
//   ll_gemv_norm_R       (PRO 1, EPI 0): q/k/v projection with the RMSNorm fused
//   ll_gemv_norm_swiglu_R(PRO 1, EPI 3): gate/up with the RMSNorm, SwiGLU as epilogue:
//                                        y[r, o] = bf16(silu(gate_o) * up_o), gate_o from weight
//                                        row o, up_o from row n + o (weights [2n, K])
//   ll_gemv_res_R        (PRO 0, EPI 1): o and down projections with the residual add
//   ll_gemv_swiglu_res_R (PRO 2, EPI 1): down with SwiGLU as prologue (when gate/up ran apart)
//   ll_gemv_norm_f32_R   (PRO 1, EPI 2): lm_head with the final norm, f32 logits
//   ll_gemv_head_R       (PRO 1, EPI 2): the same, and each row's argmax folded into best[r] as
//                                        ll_argmax does (one atomicMax per block and row)
// Arguments: (x, nw, w, y, row0, rows, n, k, eps, wpc) and, for ll_gemv_head, best; nw is
// ignored without the norm; wpc (warps per column) is 1, 2, 4 or 8.
// One row: at most 64 registers, so four 256-thread blocks fit per multiprocessor (the
// grid the decoder launches, kernels/launch.rs `launch_gemv`, is one wave of four per multiprocessor).
#define GEMV_MIN_BLOCKS(R) ((R) == 1 ? 4 : 1)
#define LL_GEMV(NAME, R, PRO, EPI, LATE)                                                        \
    extern "C" __global__ void __launch_bounds__(256, GEMV_MIN_BLOCKS(R)) NAME(const unsigned short* x, const unsigned short* nw,         \
                                    const unsigned short* w, void* y, int row0, int rows,      \
                                    int n, int k, float eps, int wpc) {                        \
        gemv<R, PRO, EPI, LATE>(x, nw, w, y, row0, rows, n, k, eps, wpc, nullptr);             \
    }
#define LL_GEMV_HEAD(NAME, R)                                                                   \
    extern "C" __global__ void __launch_bounds__(256, GEMV_MIN_BLOCKS(R)) NAME(const unsigned short* x, const unsigned short* nw,         \
                                    const unsigned short* w, void* y, int row0, int rows,      \
                                    int n, int k, float eps, int wpc,                          \
                                    unsigned long long* best) {                                \
        gemv<R, 1, 2, false>(x, nw, w, y, row0, rows, n, k, eps, wpc, best);                   \
    }
#define LL_GEMV_ALL(NAME, PRO, EPI, LATE)                                                       \
    LL_GEMV(NAME##_1, 1, PRO, EPI, LATE)                                                        \
    LL_GEMV(NAME##_2, 2, PRO, EPI, LATE)                                                        \
    LL_GEMV(NAME##_4, 4, PRO, EPI, LATE)                                                        \
    LL_GEMV(NAME##_8, 8, PRO, EPI, LATE)
// The q/k/v projection triggers late: the attention after it reads before its wait.
LL_GEMV_ALL(ll_gemv_norm, 1, 0, true)
LL_GEMV_ALL(ll_gemv_norm_swiglu, 1, 3, false)
LL_GEMV_ALL(ll_gemv_res, 0, 1, false)
LL_GEMV_ALL(ll_gemv_swiglu_res, 2, 1, false)
LL_GEMV_ALL(ll_gemv_norm_f32, 1, 2, false)
LL_GEMV_HEAD(ll_gemv_head_1, 1)
LL_GEMV_HEAD(ll_gemv_head_2, 2)
LL_GEMV_HEAD(ll_gemv_head_4, 4)
LL_GEMV_HEAD(ll_gemv_head_8, 8)

// ---- One-row GEMV whose weights stream through a ring in shared memory, per warp (cp.async).
//
// The same rounds as gemv above (GEMV_U 16-byte pieces per lane, columns in a grid stride,
// `wpc` warps per column), but each lane copies its pieces with cp.async into its own slots of
// a ring of RING rounds in shared memory and reads back only what it copied itself (no barrier
// between warps: a lane's groups complete in order). The first RING rounds are requested
// before the programmatic wait, and no register holds a weight: the kernel takes 46 to 67
// registers at up to two blocks per multiprocessor, where gemv fills the register file with
// four, so the blocks of the kernels after it start beside it and load before their own waits.
// When a layer's projections are small enough to be requested whole before their waits (a
// launch-bound model), that chain of early starts is what a step is made of
// (crates/graphsmith-llama/src/kernels/geometry.rs, ring_gemv_rule).
// Dynamic shared memory: warps * RING * GEMV_U * 512 bytes (the rings), then K * 2 (the row).
// Needs K % 8 == 0 and K <= 8,192, x and nw 16-byte aligned (the decoder checks).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_u32(dst)), "l"(src),
                 "r"(ok ? 16 : 0)
                 : "memory");
}

template <int PRO, int EPI, bool LATE, int RING>
__device__ __forceinline__ void gemv_async(const unsigned short* x, const unsigned short* nw,
                                           const unsigned short* w, void* y, int row0, int n,
                                           int k, float eps, int wpc) {
    constexpr int P = EPI == 3 ? 2 : 1;
    extern __shared__ __align__(16) uint4 aring[];
    __shared__ float scratch[32];
    __shared__ float part[32 * P];
    int warps = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int groups = warps / wpc, g = warp / wpc, sub = warp % wpc;
    int k8 = k >> 3, stride = gridDim.x * groups, step = 32 * GEMV_U * wpc;
    int nr = (k8 + step - 1) / step, rpc = P * nr;
    int base0 = blockIdx.x * groups;
    // Rounds of every warp of the block (the loop below is block-uniform).
    int total = base0 < n ? ((n - base0 + stride - 1) / stride) * rpc : 0;
    uint4* ring = aring + (size_t)warp * RING * GEMV_U * 32;
    unsigned short* xs = (unsigned short*)(aring + (size_t)warps * RING * GEMV_U * 32);
    const uint4* w4 = (const uint4*)w;
    // Round j of this warp into slot j % RING, then a group (empty past the last round).
    auto issue = [&](int j) {
        if (j < total) {
            int ci = j / rpc, rem = j - ci * rpc, p = rem / nr, c0 = (rem - p * nr) * step;
            int o = base0 + g + ci * stride;
            uint4* slot = ring + (j % RING) * GEMV_U * 32;
#pragma unroll
            for (int u = 0; u < GEMV_U; ++u) {
                int cidx = c0 + (u * wpc + sub) * 32 + lane;
                bool ok = o < n && cidx < k8;
                cp_async16(slot + u * 32 + lane, ok ? w4 + (size_t)(o + p * n) * k8 + cidx : w4,
                           ok);
            }
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
#pragma unroll
    for (int j = 0; j < RING; ++j) issue(j);
    uint4 nv[GEMV_XC];
    if (PRO == 1) load_pieces<false>(nv, (const uint4*)nw, k8);
    pdl_wait_trigger<LATE>();
    {
        const uint4* xr4 = (const uint4*)(x + (size_t)row0 * k);
        uint4 xv[GEMV_XC];
        load_pieces<true>(xv, xr4, k8);
        if (PRO == 1) {
            norm_pieces(xv, nv, k8, k, eps, scratch, (uint4*)xs);
        } else {
            store_pieces((uint4*)xs, xv, k8);
        }
    }
    __syncthreads();
    const uint4* xs4 = (const uint4*)xs;
    int j = 0;
    for (int base = base0; base < n; base += stride) {
        int o = base + g;
        float res = 0.0f;
        if (EPI == 1 && lane == 0 && sub == 0 && o < n)
            res = bf2f(((const unsigned short*)y)[(size_t)row0 * n + o]);
        float acc[P];
#pragma unroll
        for (int p = 0; p < P; ++p) {
            acc[p] = 0.0f;
            for (int c0 = 0; c0 < k8; c0 += step, ++j) {
                asm volatile("cp.async.wait_group %0;" ::"n"(RING - 1) : "memory");
                const uint4* slot = ring + (j % RING) * GEMV_U * 32;
                float a = acc[p];
#pragma unroll
                for (int u = 0; u < GEMV_U; ++u) {
                    int cidx = c0 + (u * wpc + sub) * 32 + lane;
                    if (cidx < k8) {
                        uint4 wv = slot[u * 32 + lane], xv = xs4[cidx];
                        unsigned int ww[4] = {wv.x, wv.y, wv.z, wv.w};
                        unsigned int xx[4] = {xv.x, xv.y, xv.z, xv.w};
                        DOT8_ACC(a, ww, xx)
                    }
                }
                acc[p] = a;
                issue(j + RING);
            }
        }
#pragma unroll
        for (int p = 0; p < P; ++p)
            for (int off = 16; off > 0; off >>= 1)
                acc[p] += __shfl_xor_sync(0xffffffffu, acc[p], off);
        if (wpc > 1) {
            if (lane == 0) {
#pragma unroll
                for (int p = 0; p < P; ++p) part[warp * P + p] = acc[p];
            }
            __syncthreads();
            if (sub == 0) {
#pragma unroll
                for (int p = 0; p < P; ++p) {
                    float t = 0.0f;
                    for (int i = 0; i < wpc; ++i) t += part[(warp + i) * P + p];
                    acc[p] = t;
                }
            }
            __syncthreads();
        }
        if (lane == 0 && sub == 0 && o < n) {
            store_bf16_out<EPI>((unsigned short*)y, (size_t)row0 * n + o, acc[0], acc[P - 1],
                                res);
        }
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
}

// The instantiations (one row; arguments x, nw, w, y, row0, n, k, eps, wpc; nw is ignored
// without the norm), rings of 4 rounds: ll_gemv_async_norm (q/k/v, triggering after its wait
// as ll_gemv_norm), ll_gemv_async_norm_swiglu (gate/up), ll_gemv_async_res (o and down).
#define LL_GEMV_ASYNC(NAME, PRO, EPI, LATE, RING)                                              \
    extern "C" __global__ void __launch_bounds__(256, 2)                                        \
        NAME(const unsigned short* x, const unsigned short* nw, const unsigned short* w,       \
             void* y, int row0, int n, int k, float eps, int wpc) {                            \
        gemv_async<PRO, EPI, LATE, RING>(x, nw, w, y, row0, n, k, eps, wpc);                   \
    }
#define GEMV_RING 4
LL_GEMV_ASYNC(ll_gemv_async_norm, 1, 0, true, GEMV_RING)
LL_GEMV_ASYNC(ll_gemv_async_norm_swiglu, 1, 3, false, GEMV_RING)
LL_GEMV_ASYNC(ll_gemv_async_res, 0, 1, false, GEMV_RING)

// ---- Prefill: the prompt's rows in chunks, one forward per chunk (cuBLAS GEMMs over the
// chunk's rows between these kernels).
//
// Row r of a chunk belongs to a sequence: pos[r] is its position (< 0: padding) and slot[r] the
// row of the decode batch whose KV cache the sequence fills (its cache slot). A chunk may hold
// rows of several sequences. ll_prefill_rope ropes every row's queries in place and writes its
// roped K and V into the cache at (slot, pos); then ll_prefill_attention computes each row's
// causal attention over positions 0..=pos of its slot, every one of which is in the cache by
// then (earlier chunks, or this chunk's ll_prefill_rope). The decode attention cannot serve
// here: its blocks take their cache from the grid row (one cache per row), and each appends its
// own position within the launch, where the chunk's later rows would read it.
//
// Both wait for the kernel before them at once (programmatic dependent launch): they read only
// what earlier work wrote.

// Grid (rows), blockDim a multiple of 32. qkv rows: [q heads | k heads | v heads] x hd; cache
// per layer: [slots, n_kv, max_ctx, hd]. Each thread ropes pairs (i, i + hd / 2) of a head from
// the values before roping (as rope_at, HF's bf16 arithmetic), so the queries are roped in
// place without a race; the roped values are bf16 exactly.
extern "C" __global__ void ll_prefill_rope(unsigned short* qkv, unsigned short* kcache,
                                           unsigned short* vcache, const int* pos,
                                           const int* slot, const float* cos_t,
                                           const float* sin_t, int nq, int nkv, int hd,
                                           int max_ctx, int slots) {
    pdl_trigger();
    pdl_wait();
    int r = blockIdx.x;
    int p = pos[r], sl = slot[r];
    if (p < 0 || p >= max_ctx || sl < 0 || sl >= slots) return;
    int half = hd / 2;
    const float* c = cos_t + (size_t)p * half;
    const float* s = sin_t + (size_t)p * half;
    unsigned short* row = qkv + (size_t)r * (nq + 2 * nkv) * hd;
    for (int idx = threadIdx.x; idx < (nq + nkv) * half; idx += blockDim.x) {
        int h = idx / half, i = idx % half;
        unsigned short* x = row + (size_t)h * hd;
        float a = bf2f(x[i]), b = bf2f(x[i + half]);
        unsigned short lo = f2bf(rbf(rbf(a * c[i]) + rbf(-b * s[i])));
        unsigned short hi = f2bf(rbf(rbf(b * c[i]) + rbf(a * s[i])));
        if (h < nq) {
            x[i] = lo;
            x[i + half] = hi;
        } else {
            size_t at = (((size_t)sl * nkv + (h - nq)) * max_ctx + p) * hd;
            kcache[at + i] = lo;
            kcache[at + i + half] = hi;
        }
    }
    const unsigned short* v = row + (size_t)(nq + nkv) * hd;
    for (int idx = threadIdx.x; idx < nkv * hd; idx += blockDim.x) {
        int h = idx / hd, i = idx % hd;
        vcache[(((size_t)sl * nkv + h) * max_ctx + p) * hd + i] = v[idx];
    }
}

// Grid (rows, n_kv_heads), W warps. Block (r, kvh) serves the `group` query heads of key/value
// head kvh for row r (queries roped by ll_prefill_rope) over positions 0..=pos[r] of slot[r]'s
// cache: warp w takes positions w + W * (ATT_U * i + u), u < ATT_U, their K and V loads issued
// together; the lanes split head_dim (lane holds elements lane + 32e, e < E); each warp keeps an
// online softmax (max m, sum l, weighted V sum) per query head; the warps' partials are combined
// in shared memory into the output row, bf16. A padding row's output is zeros.
// Dynamic shared memory: (W * group * hd + 2 * W * group) floats
// (crates/graphsmith-llama/src/kernels/prefill.rs, prefill_attention_smem).
template <int E, int G>
__device__ __forceinline__ void prefill_attention(const unsigned short* qkv,
                                                  const unsigned short* kcache,
                                                  const unsigned short* vcache, const int* pos,
                                                  const int* slot, unsigned short* out, int nq,
                                                  int nkv, int hd, int max_ctx, int slots,
                                                  float scale, int rows) {
    extern __shared__ float smem[];
    const float NEG_INF = __int_as_float(0xff800000);
    pdl_trigger();
    pdl_wait();
    int r = blockIdx.x, kvh = blockIdx.y;
    if (r >= rows) return;
    int group = nq / nkv;
    int nw = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float* pacc = smem;                   // nw * group * hd
    float* pm = pacc + nw * group * hd;   // nw * group: each warp's max
    float* pl = pm + nw * group;          // nw * group: each warp's sum
    unsigned short* orow = out + (size_t)r * nq * hd + (size_t)kvh * group * hd;
    int p = pos[r], sl = slot[r];
    if (p < 0 || p >= max_ctx || sl < 0 || sl >= slots) {
        for (int i = threadIdx.x; i < group * hd; i += blockDim.x) orow[i] = 0;
        return;
    }
    int len = p + 1;
    size_t base = ((size_t)sl * nkv + kvh) * (size_t)max_ctx * hd;
    const unsigned short* kc = kcache + base;
    const unsigned short* vc = vcache + base;
    const unsigned short* qrow = qkv + (size_t)r * (nq + 2 * nkv) * hd + (size_t)kvh * group * hd;
    float q[G][E], acc[G][E], m[G], l[G];
#pragma unroll
    for (int j = 0; j < G; ++j) {
#pragma unroll
        for (int e = 0; e < E; ++e) {
            int i = lane + 32 * e;
            q[j][e] = (j < group && i < hd) ? bf2f(qrow[(size_t)j * hd + i]) : 0.0f;
            acc[j][e] = 0.0f;
        }
        m[j] = NEG_INF;
        l[j] = 0.0f;
    }
    float kf[ATT_U][E], vf[ATT_U][E];
    for (int t0 = warp; t0 < len; t0 += ATT_U * nw) {
#pragma unroll
        for (int u = 0; u < ATT_U; ++u) {
            int t = t0 + u * nw;
#pragma unroll
            for (int e = 0; e < E; ++e) {
                int i = lane + 32 * e;
                bool ok = t < len && i < hd;
                kf[u][e] = ld_bf_if(kc + (size_t)t * hd + i, ok);
                vf[u][e] = ld_bf_if(vc + (size_t)t * hd + i, ok);
            }
        }
#pragma unroll
        for (int u = 0; u < ATT_U; ++u) {
            if (t0 + u * nw >= len) break;  // warp-uniform
            // Head j's score d (the same in every lane) into its online softmax.
            auto take = [&](int j, float d) {
                d *= scale;
                float mn = fmaxf(m[j], d);
                float corr = __expf(m[j] - mn);
                float pe = __expf(d - mn);
                l[j] = l[j] * corr + pe;
#pragma unroll
                for (int e = 0; e < E; ++e) acc[j][e] = acc[j][e] * corr + pe * vf[u][e];
                m[j] = mn;
            };
            if constexpr (G <= 4) {
                // The heads' scores summed together (warp_sum_many), then shared out to every
                // lane, as the decode attention does; a head past the group has a zero query.
                float d[G];
#pragma unroll
                for (int j = 0; j < G; ++j) {
                    d[j] = 0.0f;
#pragma unroll
                    for (int e = 0; e < E; ++e) d[j] += q[j][e] * kf[u][e];
                }
                warp_sum_many<G>(d, lane);
                float sum = d[0];
#pragma unroll
                for (int j = 0; j < G; ++j) d[j] = __shfl_sync(0xffffffffu, sum, j * (32 / G));
#pragma unroll
                for (int j = 0; j < G; ++j) {
                    if (j >= group) break;
                    take(j, d[j]);
                }
            } else {
#pragma unroll
                for (int j = 0; j < G; ++j) {
                    if (j >= group) break;
                    float d = 0.0f;
#pragma unroll
                    for (int e = 0; e < E; ++e) d += q[j][e] * kf[u][e];
                    for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
                    take(j, d);
                }
            }
        }
    }
#pragma unroll
    for (int j = 0; j < G; ++j) {
        if (j >= group) break;
        if (lane == 0) {
            pm[warp * group + j] = m[j];
            pl[warp * group + j] = l[j];
        }
#pragma unroll
        for (int e = 0; e < E; ++e) {
            int i = lane + 32 * e;
            if (i < hd) pacc[(size_t)(warp * group + j) * hd + i] = acc[j][e];
        }
    }
    __syncthreads();
    // Per output element: the largest max M over the warps that saw a position (warp 0 always
    // does: position 0), each such warp's weight exp(m_w - M), the sum L and the weighted sum.
    for (int idx = threadIdx.x; idx < group * hd; idx += blockDim.x) {
        int j = idx / hd;
        float mx = NEG_INF;
        for (int w = 0; w < nw; ++w)
            if (pl[w * group + j] > 0.0f) mx = fmaxf(mx, pm[w * group + j]);
        float sum = 0.0f, o = 0.0f;
        for (int w = 0; w < nw; ++w) {
            float lw = pl[w * group + j];
            if (lw > 0.0f) {
                float sc = __expf(pm[w * group + j] - mx);
                sum += lw * sc;
                o += pacc[(size_t)(w * group + j) * hd + (idx - j * hd)] * sc;
            }
        }
        orow[idx] = f2bf(o / sum);
    }
}

// The instantiations by elements per lane (head_dim up to 32, 64, 128, 256) for groups of up to
// 16 query heads, and the _g4 ones for groups of up to 4 (fewer registers); same arguments, the
// same as ll_prefill_flash_* below (rows: the chunk's rows, the grid's x; a block past it
// returns).
#define LL_PREFILL_ATTENTION(NAME, E, G)                                                        \
    extern "C" __global__ void NAME(const unsigned short* qkv, const unsigned short* kcache,    \
                                    const unsigned short* vcache, const int* pos,               \
                                    const int* slot, unsigned short* out, int nq, int nkv,      \
                                    int hd, int max_ctx, int slots, float scale, int rows) {    \
        prefill_attention<E, G>(qkv, kcache, vcache, pos, slot, out, nq, nkv, hd, max_ctx,      \
                                slots, scale, rows);                                            \
    }
LL_PREFILL_ATTENTION(ll_prefill_attention_1, 1, 16)
LL_PREFILL_ATTENTION(ll_prefill_attention_2, 2, 16)
LL_PREFILL_ATTENTION(ll_prefill_attention_4, 4, 16)
LL_PREFILL_ATTENTION(ll_prefill_attention_8, 8, 16)
LL_PREFILL_ATTENTION(ll_prefill_attention_1_g4, 1, 4)
LL_PREFILL_ATTENTION(ll_prefill_attention_2_g4, 2, 4)
LL_PREFILL_ATTENTION(ll_prefill_attention_4_g4, 4, 4)
LL_PREFILL_ATTENTION(ll_prefill_attention_8_g4, 8, 4)

// ---- The prefill's attention on tensor cores (FlashAttention-2 style), for head_dim 64 and 128
// (other head_dims take ll_prefill_attention_* above; crates/graphsmith-llama/src/kernels/
// prefill.rs, PrefillAttentionLaunch, chooses).
//
// Grid (ceil(rows / FA_BM), nq), FA_WARPS warps. Block (x, h) serves query head h (its KV head
// h / group) for the FA_BM chunk rows from r0 = (gridDim.x - 1 - x) * FA_BM (the tiles of later
// rows, which see more positions, start first); warp w takes rows r0 + 16w .. r0 + 16w + 15 as
// the M of m16n8k16 MMAs. One block per query head rather than per KV head with the group's
// heads as rows: a tile's rows are then consecutive positions (when the chunk is one sequence's),
// so the causal bound skips whole key tiles, any group size works, and the group's heads read
// the same K/V tiles from L2.
//
// A tile's rows may belong to several sequences (cache slots): the block runs one pass per slot
// found in the tile (rows in order), over that slot's positions 0..=max pos of its rows in the
// tile; the other rows are masked in that pass. Per pass, FA_BN positions of K and V at a time
// are copied into shared memory (cp.async, two buffers: the next tile's copy overlaps this
// tile's math; positions past the pass's end are zeros), S = Q K^T on tensor cores (bf16 in,
// f32 accumulation), scores scaled by scale * log2(e) and masked (position > the row's: -inf),
// the online softmax per row in registers (max m, sum l, exp2), then P rounded to bf16 (as
// FlashAttention does) and O += P V on tensor cores. A warp skips the math of a key tile past
// all of its rows' positions. The output row is O / l in bf16, in ll_prefill_attention's layout;
// a padding row's output is zeros. Reads and writes what ll_prefill_attention does, after the
// programmatic wait.
//
// Fragments (PTX ISA, mma.m16n8k16 with .bf16): g = lane / 4, c = lane % 4; A (16x16, row):
// a0 = (g, 2c..2c+1), a1 = (g + 8, 2c..), a2 = (g, 2c + 8..), a3 = (g + 8, 2c + 8..); B (16x8,
// col): b0 = (k 2c..2c+1, n g), b1 = (k 2c + 8.., n g); C: c0, c1 = (g, 2c..2c+1), c2, c3 =
// (g + 8, 2c..). A and B come from shared memory with ldmatrix (.trans for V, stored [key][dim]),
// rows padded by 16 bytes so the 8 row addresses of a matrix fall in distinct banks.
//
// Dynamic shared memory: 3 * FA_BM ints (rows' positions, slots, pass ends), then Q (FA_BM rows)
// and two buffers each of K and V (FA_BN rows), rows of (HD + 8) bf16:
// 3 * FA_BM * 4 + (FA_BM + 4 * FA_BN) * (HD + 8) * 2 bytes (prefill.rs, flash_smem).
#define FA_BM 64
#define FA_BN 64
#define FA_WARPS 4

__device__ __forceinline__ void fa_mma(float (&d)[4], const unsigned int (&a)[4],
                                       unsigned int b0, unsigned int b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 bf16 matrices from shared memory; lane i gives the address of row i % 8 of matrix
// i / 8; register j holds lane's piece of matrix j (row lane / 4, columns 2 * (lane % 4)..+1; with
// TRANS of the transposed matrix).
template <bool TRANS>
__device__ __forceinline__ void fa_ldmatrix4(unsigned int (&r)[4], unsigned int addr) {
    if constexpr (TRANS) {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr)
                     : "memory");
    } else {
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr)
                     : "memory");
    }
}

// Two floats as bf16 (round to nearest even), lo in the low half.
__device__ __forceinline__ unsigned int fa_pack(float lo, float hi) {
    unsigned int u;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(u) : "f"(hi), "f"(lo));
    return u;
}

// 2^x (ex2.approx: 2 ulp; 2^-inf = +0).
__device__ __forceinline__ float fa_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// Rows t0 .. t0 + FA_BN of `src` (rows of HD bf16) into `dst` (rows of HD + 8), zeros for rows
// at or past `end`; every thread issues its 16-byte pieces with cp.async.
template <int HD>
__device__ __forceinline__ void fa_copy_tile(unsigned short* dst, const unsigned short* src,
                                             int t0, int end) {
    constexpr int P = HD / 8;
#pragma unroll
    for (int i = threadIdx.x; i < FA_BN * P; i += FA_WARPS * 32) {
        int row = i / P, c = i % P;
        bool ok = t0 + row < end;
        cp_async16(dst + row * (HD + 8) + c * 8, ok ? src + (size_t)(t0 + row) * HD + c * 8 : src,
                   ok);
    }
}

template <int HD>
__device__ __forceinline__ void prefill_flash(const unsigned short* qkv,
                                              const unsigned short* kcache,
                                              const unsigned short* vcache, const int* pos,
                                              const int* slot, unsigned short* out, int nq,
                                              int nkv, int max_ctx, int slots, float scale,
                                              int rows) {
    constexpr int LD = HD + 8;  // a shared row, in bf16
    constexpr int KT = HD / 16;  // k steps of S = Q K^T
    constexpr int NS = FA_BN / 8;  // n tiles of S
    constexpr int NO = HD / 8;  // n tiles of O
    extern __shared__ __align__(16) unsigned char fa_smem[];
    int* tpos = (int*)fa_smem;
    int* tslot = tpos + FA_BM;
    int* tend = tslot + FA_BM;
    unsigned short* qs = (unsigned short*)(tend + FA_BM);
    unsigned short* ks = qs + FA_BM * LD;  // two buffers of FA_BN rows
    unsigned short* vs = ks + 2 * FA_BN * LD;
    const float NEG_INF = __int_as_float(0xff800000);
    pdl_trigger();
    pdl_wait();
    int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    int g = lane >> 2, c4 = lane & 3;
    int r0 = (gridDim.x - 1 - blockIdx.x) * FA_BM;
    int h = blockIdx.y;
    int group = nq / nkv;
    int kvh = h / group;
    int qkv_row = (nq + 2 * nkv) * HD;

    // Each tile row's position and slot (-1, -1: padding or past the chunk).
    if (tid < FA_BM) {
        int r = r0 + tid, p = -1, s = -1;
        if (r < rows) {
            p = pos[r];
            s = slot[r];
            if (p < 0 || p >= max_ctx || s < 0 || s >= slots) p = s = -1;
        }
        tpos[tid] = p;
        tslot[tid] = s;
    }
    __syncthreads();
    // The passes: a row that is the tile's first of its slot holds that slot's end (max
    // position + 1 over the tile's rows of the slot); other rows 0.
    if (tid < FA_BM) {
        int s = tslot[tid], end = 0;
        bool first = s >= 0;
        for (int j = 0; j < tid && first; ++j) first = tslot[j] != s;
        if (first)
            for (int j = 0; j < FA_BM; ++j)
                if (tslot[j] == s) end = max(end, tpos[j] + 1);
        tend[tid] = end;
    }
    // Q of the tile's rows (zeros for padding).
    for (int i = tid; i < FA_BM * (HD / 8); i += FA_WARPS * 32) {
        int row = i / (HD / 8), c = i % (HD / 8);
        bool ok = tslot[row] >= 0;
        const unsigned short* src = qkv + (size_t)(r0 + row) * qkv_row + (size_t)h * HD + c * 8;
        cp_async16(qs + row * LD + c * 8, ok ? src : qkv, ok);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    // This warp's Q as A fragments, for the whole kernel.
    unsigned int qa[KT][4];
    {
        int mi = lane >> 3, ri = lane & 7;
        const unsigned short* base = qs + (warp * 16 + (mi & 1) * 8 + ri) * LD + (mi >> 1) * 8;
#pragma unroll
        for (int kk = 0; kk < KT; ++kk) fa_ldmatrix4<false>(qa[kk], smem_u32(base + kk * 16));
    }
    // This thread's two rows (g and g + 8 of the warp's 16).
    int prow[2], srow[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        prow[i] = tpos[warp * 16 + g + 8 * i];
        srow[i] = tslot[warp * 16 + g + 8 * i];
    }
    const float sl2 = scale * 1.4426950408889634f;
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};
    float o[NO][4];
#pragma unroll
    for (int n = 0; n < NO; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

    for (int pass = 0; pass < FA_BM; ++pass) {
        int end = tend[pass];  // the same in every thread
        if (end == 0) continue;
        int s = tslot[pass];
        int lim[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) lim[i] = srow[i] == s ? prow[i] : -1;
        int wlim = max(lim[0], lim[1]);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            wlim = max(wlim, __shfl_xor_sync(0xffffffffu, wlim, off));
        size_t base = ((size_t)s * nkv + kvh) * (size_t)max_ctx * HD;
        const unsigned short* kc = kcache + base;
        const unsigned short* vc = vcache + base;
        int tiles = (end + FA_BN - 1) / FA_BN;
        __syncthreads();  // every warp is done with the buffers of the last pass
        fa_copy_tile<HD>(ks, kc, 0, end);
        fa_copy_tile<HD>(vs, vc, 0, end);
        asm volatile("cp.async.commit_group;" ::: "memory");
        for (int j = 0; j < tiles; ++j) {
            int b = j & 1;
            if (j + 1 < tiles) {
                fa_copy_tile<HD>(ks + (b ^ 1) * FA_BN * LD, kc, (j + 1) * FA_BN, end);
                fa_copy_tile<HD>(vs + (b ^ 1) * FA_BN * LD, vc, (j + 1) * FA_BN, end);
                asm volatile("cp.async.commit_group;" ::: "memory");
                asm volatile("cp.async.wait_group 1;" ::: "memory");
            } else {
                asm volatile("cp.async.wait_group 0;" ::: "memory");
            }
            __syncthreads();
            int t0 = j * FA_BN;
            if (t0 <= wlim) {  // warp-uniform
                const unsigned short* kb = ks + b * FA_BN * LD;
                const unsigned short* vb = vs + b * FA_BN * LD;
                // S = Q K^T: ldmatrix x4 gives b0, b1 of n tiles 2n2 and 2n2 + 1.
                float sc[NS][4];
#pragma unroll
                for (int n = 0; n < NS; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
                int mi = lane >> 3, ri = lane & 7;
#pragma unroll
                for (int kk = 0; kk < KT; ++kk) {
#pragma unroll
                    for (int n2 = 0; n2 < NS / 2; ++n2) {
                        unsigned int kb4[4];
                        const unsigned short* a =
                            kb + (n2 * 16 + (mi >> 1) * 8 + ri) * LD + kk * 16 + (mi & 1) * 8;
                        fa_ldmatrix4<false>(kb4, smem_u32(a));
                        fa_mma(sc[2 * n2], qa[kk], kb4[0], kb4[1]);
                        fa_mma(sc[2 * n2 + 1], qa[kk], kb4[2], kb4[3]);
                    }
                }
                // Scale, mask, the rows' new maxima (the 4 lanes of a quad share a row).
                float mx[2] = {NEG_INF, NEG_INF};
#pragma unroll
                for (int n = 0; n < NS; ++n) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        int t = t0 + n * 8 + 2 * c4 + (e & 1);
                        float v = t <= lim[e >> 1] ? sc[n][e] * sl2 : NEG_INF;
                        sc[n][e] = v;
                        mx[e >> 1] = fmaxf(mx[e >> 1], v);
                    }
                }
                float corr[2], mu[2];
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
                    mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
                    float mn = fmaxf(m[i], mx[i]);
                    // A row with nothing yet (all -inf) keeps 0 as its reference: no NaN.
                    mu[i] = mn == NEG_INF ? 0.0f : mn;
                    corr[i] = fa_exp2(m[i] - mu[i]);
                    m[i] = mn;
                }
                float ls[2] = {0.0f, 0.0f};
#pragma unroll
                for (int n = 0; n < NS; ++n) {
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        float p = fa_exp2(sc[n][e] - mu[e >> 1]);
                        sc[n][e] = p;
                        ls[e >> 1] += p;
                    }
                }
                // l stays this thread's part of the row sum (the quad's are added at the end).
#pragma unroll
                for (int i = 0; i < 2; ++i) l[i] = l[i] * corr[i] + ls[i];
#pragma unroll
                for (int n = 0; n < NO; ++n) {
                    o[n][0] *= corr[0];
                    o[n][1] *= corr[0];
                    o[n][2] *= corr[1];
                    o[n][3] *= corr[1];
                }
                // O += P V: P's C fragments of n tiles 2kk, 2kk + 1 are the A fragment of k step
                // kk (rounded to bf16); ldmatrix.trans of V [key][dim] gives b0, b1 of O's n
                // tiles 2n2 and 2n2 + 1.
#pragma unroll
                for (int kk = 0; kk < FA_BN / 16; ++kk) {
                    unsigned int pa[4] = {fa_pack(sc[2 * kk][0], sc[2 * kk][1]),
                                          fa_pack(sc[2 * kk][2], sc[2 * kk][3]),
                                          fa_pack(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                                          fa_pack(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
                    for (int n2 = 0; n2 < NO / 2; ++n2) {
                        unsigned int vb4[4];
                        const unsigned short* a =
                            vb + (kk * 16 + (mi & 1) * 8 + ri) * LD + n2 * 16 + (mi >> 1) * 8;
                        fa_ldmatrix4<true>(vb4, smem_u32(a));
                        fa_mma(o[2 * n2], pa, vb4[0], vb4[1]);
                        fa_mma(o[2 * n2 + 1], pa, vb4[2], vb4[3]);
                    }
                }
            }
            __syncthreads();  // every warp is done with buffer b before it is refilled
        }
    }
    // The quad's parts of each row's sum; O / l into the output row (zeros where l = 0: a
    // padding row); rows past the chunk are not written.
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
        l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        int r = r0 + warp * 16 + g + 8 * i;
        if (r >= rows) continue;
        unsigned short* orow = out + (size_t)r * nq * HD + (size_t)h * HD;
        bool any = l[i] > 0.0f;
#pragma unroll
        for (int n = 0; n < NO; ++n) {
            float x = any ? o[n][2 * i] / l[i] : 0.0f;
            float y = any ? o[n][2 * i + 1] / l[i] : 0.0f;
            *(unsigned int*)(orow + n * 8 + 2 * c4) = fa_pack(x, y);
        }
    }
}

// The instantiations by head_dim: ll_prefill_flash_64, ll_prefill_flash_128, with
// ll_prefill_attention_*'s arguments (hd is the instantiation's HD: the launch chooses the
// kernel by it; rows: the chunk's rows, grid x is ceil(rows / FA_BM)). Two blocks per
// multiprocessor at head_dim 128 (shared memory).
#define LL_PREFILL_FLASH(HD)                                                                    \
    extern "C" __global__ void __launch_bounds__(FA_WARPS * 32) ll_prefill_flash_##HD(         \
        const unsigned short* qkv, const unsigned short* kcache, const unsigned short* vcache,  \
        const int* pos, const int* slot, unsigned short* out, int nq, int nkv, int hd,          \
        int max_ctx, int slots, float scale, int rows) {                                        \
        (void)hd;                                                                               \
        prefill_flash<HD>(qkv, kcache, vcache, pos, slot, out, nq, nkv, max_ctx, slots, scale,  \
                          rows);                                                                \
    }
LL_PREFILL_FLASH(64)
LL_PREFILL_FLASH(128)

// dst[s, :] = src[idx[s], :] for each s with idx[s] >= 0 (the chunk row holding the last prompt
// token of slot s's sequence); other rows of dst keep what they hold. Grid (slots), one block a
// row.
extern "C" __global__ void ll_gather_rows(const unsigned short* src, unsigned short* dst,
                                          const int* idx, int hidden) {
    pdl_trigger();
    pdl_wait();
    int s = blockIdx.x;
    int i = idx[s];
    if (i < 0) return;
    const unsigned short* from = src + (size_t)i * hidden;
    unsigned short* to = dst + (size_t)s * hidden;
    for (int k = threadIdx.x; k < hidden; k += blockDim.x) to[k] = from[k];
}
