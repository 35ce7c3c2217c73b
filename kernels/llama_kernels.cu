// Kernels of the graphsmith-llama decoder (crates/graphsmith-llama). bf16 values are stored as
// unsigned short and converted with the helpers below (no CUDA headers needed); arithmetic is
// fp32. Rounding to bf16 happens where HF transformers rounds in bf16, so results track it.
//
// Every kernel reads positions from device memory: pos[r] < 0 marks an inactive (padded) row.

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

// out[r, :] = table[tokens[r], :]; one block per row. Ids outside the vocabulary read row 0.
extern "C" __global__ void ll_embed(const int* tokens, const unsigned short* table,
                                    unsigned short* out, int hidden, int vocab) {
    int r = blockIdx.x;
    int t = tokens[r];
    if (t < 0 || t >= vocab) t = 0;
    const unsigned short* src = table + (size_t)t * hidden;
    unsigned short* dst = out + (size_t)r * hidden;
    for (int i = threadIdx.x; i < hidden; i += blockDim.x) dst[i] = src[i];
}

// HF LlamaRMSNorm: out = w * bf16(x * rsqrt(mean(x^2) + eps)); one block per row.
extern "C" __global__ void ll_rmsnorm(const unsigned short* x, const unsigned short* w,
                                      unsigned short* out, int hidden, float eps) {
    __shared__ float scratch[32];
    const unsigned short* xr = x + (size_t)blockIdx.x * hidden;
    unsigned short* yr = out + (size_t)blockIdx.x * hidden;
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

// Decode attention fused with RoPE and the KV-cache append. Grid (rows, n_kv_heads); a block
// serves the query heads that share one key/value head, so it appends that head's K and V at
// pos[r] and then reads them back itself (no other block needs them). Cache layout per layer:
// [rows, n_kv, max_ctx, head_dim]. qkv row: [q heads | k heads | v heads] x head_dim.
// Dynamic shared memory: (group * head_dim + group * max_ctx + 32) floats.
extern "C" __global__ void ll_attention(const unsigned short* qkv, unsigned short* kcache,
                                        unsigned short* vcache, const int* pos,
                                        const float* cos_t, const float* sin_t,
                                        unsigned short* out, int nq, int nkv, int hd,
                                        int max_ctx, float scale) {
    extern __shared__ float smem[];
    int r = blockIdx.x, kvh = blockIdx.y;
    int group = nq / nkv;
    float* qs = smem;                        // group * hd
    float* scores = smem + group * hd;       // group * max_ctx
    float* scratch = scores + group * max_ctx;  // 32
    int p = pos[r];
    unsigned short* orow = out + (size_t)r * nq * hd + (size_t)kvh * group * hd;
    if (p < 0 || p >= max_ctx) {
        for (int i = threadIdx.x; i < group * hd; i += blockDim.x) orow[i] = 0;
        return;
    }
    int half = hd / 2;
    const float* c = cos_t + (size_t)p * half;
    const float* s = sin_t + (size_t)p * half;
    const unsigned short* row = qkv + (size_t)r * (nq + 2 * nkv) * hd;
    const unsigned short* k_new = row + (size_t)nq * hd + (size_t)kvh * hd;
    const unsigned short* v_new = row + (size_t)(nq + nkv) * hd + (size_t)kvh * hd;
    size_t base = ((size_t)r * nkv + kvh) * (size_t)max_ctx * hd;
    unsigned short* kc = kcache + base;
    unsigned short* vc = vcache + base;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        kc[(size_t)p * hd + i] = f2bf(rope_at(k_new, c, s, i, half));
        vc[(size_t)p * hd + i] = v_new[i];
    }
    for (int idx = threadIdx.x; idx < group * hd; idx += blockDim.x) {
        int j = idx / hd, i = idx % hd;
        qs[idx] = rope_at(row + (size_t)(kvh * group + j) * hd, c, s, i, half);
    }
    __syncthreads();
    int len = p + 1;
    for (int t = threadIdx.x; t < len; t += blockDim.x) {
        const uint4* k4 = (const uint4*)(kc + (size_t)t * hd);
        float acc[16];
        for (int j = 0; j < group; ++j) acc[j] = 0.0f;
        for (int v = 0; v < hd / 8; ++v) {
            uint4 packed = k4[v];
            unsigned int words[4] = {packed.x, packed.y, packed.z, packed.w};
            for (int w = 0; w < 4; ++w) {
                float k0 = __uint_as_float(words[w] << 16);
                float k1 = __uint_as_float(words[w] & 0xffff0000u);
                int i = v * 8 + w * 2;
                for (int j = 0; j < group; ++j) {
                    acc[j] += qs[j * hd + i] * k0 + qs[j * hd + i + 1] * k1;
                }
            }
        }
        for (int j = 0; j < group; ++j) scores[j * max_ctx + t] = acc[j] * scale;
    }
    __syncthreads();
    for (int j = 0; j < group; ++j) {
        float* sj = scores + j * max_ctx;
        float m = -3.402823466e38f;
        for (int t = threadIdx.x; t < len; t += blockDim.x) m = fmaxf(m, sj[t]);
        m = block_max(m, scratch);
        float sum = 0.0f;
        for (int t = threadIdx.x; t < len; t += blockDim.x) {
            float e = __expf(sj[t] - m);
            sj[t] = e;
            sum += e;
        }
        sum = block_sum(sum, scratch);
        float inv = 1.0f / sum;
        for (int t = threadIdx.x; t < len; t += blockDim.x) sj[t] *= inv;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < group * hd; idx += blockDim.x) {
        int j = idx / hd, i = idx % hd;
        const float* sj = scores + j * max_ctx;
        float acc = 0.0f;
        for (int t = 0; t < len; ++t) acc += sj[t] * bf2f(vc[(size_t)t * hd + i]);
        orow[idx] = f2bf(acc);
    }
}

// HF LlamaMLP activation: out = bf16(silu(gate)) * up, rounded to bf16. gu row: [gate | up].
extern "C" __global__ void ll_swiglu(const unsigned short* gu, unsigned short* out, int ffn,
                                     int total) {
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

// Rounds a row of logits to bf16 in place (HF's lm_head output is bf16) and writes the index of
// its largest value (the first one on ties, as torch.argmax); one block per row.
extern "C" __global__ void ll_argmax(float* logits, int* out, int vocab) {
    __shared__ float best_v[1024];
    __shared__ int best_i[1024];
    float* row = logits + (size_t)blockIdx.x * vocab;
    float bv = -3.402823466e38f;
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        float v = rbf(row[i]);
        row[i] = v;
        if (v > bv) {
            bv = v;
            bi = i;
        }
    }
    best_v[threadIdx.x] = bv;
    best_i[threadIdx.x] = bi;
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) {
            float ov = best_v[threadIdx.x + stride];
            int oi = best_i[threadIdx.x + stride];
            if (ov > best_v[threadIdx.x] || (ov == best_v[threadIdx.x] && oi < best_i[threadIdx.x])) {
                best_v[threadIdx.x] = ov;
                best_i[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = best_i[0] == 0x7fffffff ? 0 : best_i[0];
}

// Greedy advance on the device: each active row takes its argmax as the next token and moves
// one position on (a row reaching the context's end becomes inactive).
extern "C" __global__ void ll_advance(const int* next, int* tokens, int* pos, int rows,
                                      int max_ctx) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows || pos[r] < 0) return;
    tokens[r] = next[r];
    int p = pos[r] + 1;
    pos[r] = p < max_ctx ? p : -1;
}
