// A feasibility measurement for the 1B config's last goal: one decode step (batch 1) of a
// Llama-3.2-1B-shaped decoder as ONE persistent kernel, against the same device code run as one
// kernel per operation (with and without programmatic dependent launch), in one process.
//
// The question it settles: graphsmith's step (one kernel per operation, PDL between them) runs
// at about 1.3x the floor (weight bytes over the copy rate); 2x PyTorch's lean loop needs about
// 1.15x. The design left is one kernel per step whose blocks load the next operation's weights
// while others finish the current one, synchronised by counters in memory instead of kernel
// boundaries. This program measures that design on the same shapes before it is built into the
// decoder. It is a plain CUDA C++ program (no graphsmith), with random weights and its own
// host reference; README.md beside it says how to run it.
//
// One step: for each of L layers, five operations (phases), then the head:
//   QKV  RMSNorm of h, then q/k/v = W_qkv x                  (3,072 rows of 2,048)
//   ATT  RoPE of q and k, k and v appended to the cache, attention over positions 0..=pos
//   O    h += W_o att                                          (2,048 rows of 2,048)
//   GU   RMSNorm of h, act = silu(W_gate x) * (W_up x)         (2 x 8,192 rows of 2,048)
//   DOWN h += W_down act                                       (2,048 rows of 8,192)
//   HEAD RMSNorm of h, logits = W_lm x                         (vocab rows of 2,048)
// bf16 storage, f32 arithmetic, bf16 rounding after each operation (as HF rounds).
//
// Work: a warp computes whole rows, two 2,048-element units per round (16 pieces of 16 bytes per
// lane, 8 KB per warp in flight). Warps are numbered warp-major (gw = warp * blocks + block), so a
// phase with fewer rows than warps still spreads over every multiprocessor. Every GEMV phase
// first loads the warp's first round of weights (weights are never written, so this may run
// before the phase's input exists), then waits for its input, then computes.
//
// Persistent mode: one block of 512 threads per multiprocessor (a cooperative launch, so all are
// resident), looping over every phase of the step. A block that finished phase N passes a block
// barrier, its thread 0 adds 1 to phase N's counter (a release add: it covers every thread's
// stores, through the barrier), then every warp loads its first round of phase N+1, and thread 0
// spins on phase N's counter until every participant has added (acquire) before a second
// barrier. (The add comes before the loads: its fence would otherwise wait for them.) Data other
// blocks wrote in this launch is read with ld.global.cg (from L2, where device memory is
// coherent), never through L1.
// Per-phase mode: the same device code, one launch per phase, with griddepcontrol instead of
// the counters (with PDL the next kernel may start early and load its weights). A launch may also
// cover a range of phases (O and gate/up, the `pdl, o+gu staged` variant): its first phase waits
// with griddepcontrol, the rest on counters. The attention's 8 blocks (blocks 0-7) take no q/k/v
// or O rows; the other blocks can stage gate/up rows into shared memory during the attention
// (Params::stage), and Params::early = 0 moves every phase's first loads after its wait.
#include "../../common.cuh"

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

constexpr int THREADS = 512;  // per block; one block per multiprocessor
constexpr int H = 2048, NH = 32, NKV = 8, HD = 64, GRP = NH / NKV, F = 8192;
constexpr int QKV = (NH + 2 * NKV) * HD;  // 3,072
constexpr int MAX_LAYERS = 16;
constexpr float EPS = 1e-5f, THETA = 500000.0f;
enum { PH_QKV, PH_ATT, PH_O, PH_GU, PH_DOWN, PHASES_PER_LAYER };

struct Layer {
  const uint4 *wqkv, *wo, *wgu, *wd;  // [3072][2048], [2048][2048], [2*8192][2048], [2048][8192]
  const unsigned short *norm_in, *norm_post;
  unsigned short *kc, *vc;  // [NKV][max_ctx][HD]
};

struct Params {
  Layer layers[MAX_LAYERS];
  int n_layers, vocab, max_ctx;
  const uint4* wlm;
  const unsigned short* norm_final;
  unsigned short *h, *qkv, *att, *act;
  float* logits;
  unsigned* cnt;           // one counter per phase, 0 at the start of every step
  const int* pos;          // the position being decoded
  const float* rope;       // [max_ctx][HD / 2][2]: cos and sin (bf16-rounded) per position and pair
  int stage;               // gate/up features staged in shared memory per non-attention block
  int early;               // 1: each GEMV phase loads its first round before its wait; 0: after
  unsigned long long* fine;    // [layer][16]: inside the attention (block 0) and O (last block)
  unsigned long long* stamps;  // [2][phases + 1]: when block 0 and the last block passed each
                               // wait, then their end
};

// ---- bf16 and memory helpers ----
__host__ __device__ inline float bf2f(unsigned short b) {
  unsigned u = ((unsigned)b) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
__host__ __device__ inline unsigned short f2bf(float f) {
  unsigned u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__host__ __device__ inline float rbf(float f) { return bf2f(f2bf(f)); }

// Weights: read-only, not kept in L1. asm volatile keeps the load where it is written (before a
// wait), so it is in flight while the block waits.
__device__ __forceinline__ uint4 ldw(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
// Data another block wrote in this launch: from L2.
__device__ __forceinline__ uint4 ldcg4(const void* p) {
  uint4 v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ unsigned short ldcg_u16(const unsigned short* p) {
  unsigned short v;
  asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(v) : "l"(p));
  return v;
}
__device__ __forceinline__ void signal_add(unsigned* c) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(c) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* c) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(c) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Sum over the block; every thread gets it. `red` holds 32 floats.
__device__ float block_sum(float v, float* red) {
  v = warp_sum(v);
  int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < (int)(blockDim.x >> 5) ? red[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float dot8(uint4 w, uint4 x, float a) {
  a = fmaf(lo(w.x), lo(x.x), a);
  a = fmaf(hi(w.x), hi(x.x), a);
  a = fmaf(lo(w.y), lo(x.y), a);
  a = fmaf(hi(w.y), hi(x.y), a);
  a = fmaf(lo(w.z), lo(x.z), a);
  a = fmaf(hi(w.z), hi(x.z), a);
  a = fmaf(lo(w.w), lo(x.w), a);
  a = fmaf(hi(w.w), hi(x.w), a);
  return a;
}

// A unit: 2,048 elements of a row, 256 pieces; lane takes pieces lane + 32 j (j < 8). A round is
// two units loaded together (16 pieces, 64 registers per lane: 8 KB per warp in flight).
constexpr int UNIT = 256;
__device__ __forceinline__ void load_round(uint4 (&w)[16], const uint4* a, const uint4* b, int lane) {
#pragma unroll
  for (int j = 0; j < 8; ++j) w[j] = ldw(a + lane + 32 * j);
#pragma unroll
  for (int j = 0; j < 8; ++j) w[8 + j] = b ? ldw(b + lane + 32 * j) : make_uint4(0, 0, 0, 0);
}
// The lane's part of unit `half` (0 or 1) of the round times the input's unit at xs.
__device__ __forceinline__ float dot_unit(const uint4 (&w)[16], int half, const uint4* xs, int lane) {
  float a = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) a = dot8(w[8 * half + j], xs[lane + 32 * j], a);
  return a;
}
// Both units of the round times the same input unit (two rows of one input).
__device__ __forceinline__ void dot_pair(const uint4 (&w)[16], const uint4* xs, int lane, float& a0, float& a1) {
  a0 = a1 = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    uint4 x = xs[lane + 32 * j];
    a0 = dot8(w[j], x, a0);
    a1 = dot8(w[8 + j], x, a1);
  }
}

// ---- synchronisation between phases ----
struct Ctx {
  const Params& P;
  bool persistent;
  int first;    // the launch's first phase: its input comes from the kernel before (griddepcontrol)
  int pending;  // the phase this block finished and has not yet counted, or -1
  uint4* xs;    // shared: the phase's input vector (up to 8,192 bf16)
  float* red;   // shared: 64 floats
  float* att;   // shared: the attention's scratch
  uint4* stage; // shared: staged gate rows [stage][UNIT], then up rows [stage][UNIT]
  unsigned long long* bar;  // shared: the staging's mbarrier
};

// ---- bulk copies into shared memory (sm_90), for the gate/up staging ----
__device__ __forceinline__ unsigned smem_u32(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(unsigned long long* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_u32(dst)),
               "l"(src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile(
        "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
}

__device__ __forceinline__ unsigned participants(int phase, int n_layers) {
  if (phase >= n_layers * PHASES_PER_LAYER) return gridDim.x;
  switch (phase % PHASES_PER_LAYER) {
    case PH_QKV:
    case PH_O: return gridDim.x - NKV;
    case PH_ATT: return NKV;
    default: return gridDim.x;
  }
}

// Counts the phase this block finished (a release add by thread 0 after a block barrier, so it
// covers every thread's stores). Before the next phase's weights are loaded: the release's fence
// would otherwise wait for thread 0's loads.
__device__ void count_done(Ctx& c) {
  if (!c.persistent) return;
  __syncthreads();
  if (threadIdx.x == 0 && c.pending >= 0) signal_add(c.P.cnt + c.pending);
  c.pending = -1;
}

// Waits until phase `ph - 1` (this phase's input) is complete.
__device__ void wait_input(Ctx& c, int ph) {
  if (c.persistent && ph > c.first) {
    if (threadIdx.x == 0) {
      unsigned target = participants(ph - 1, c.P.n_layers);
      while (ld_acquire(c.P.cnt + ph - 1) < target) {
      }
    }
    __syncthreads();
  } else {
    asm volatile("griddepcontrol.wait;" ::: "memory");
  }
  if (threadIdx.x == 0 && (blockIdx.x == 0 || blockIdx.x == gridDim.x - 1))
    c.P.stamps[(blockIdx.x == 0 ? 0 : c.P.n_layers * PHASES_PER_LAYER + 2) + ph] = globaltimer();
}

// A fine stamp: slot < 8 by block 0 (attention), slot >= 8 by the last block (O).
__device__ __forceinline__ void fine(const Ctx& c, int l, int slot) {
  if (threadIdx.x == 0 && blockIdx.x == (slot < 8 ? 0 : gridDim.x - 1)) c.P.fine[l * 16 + slot] = globaltimer();
}

// xs = bf16(w * bf16(h * rsqrt(mean(h^2) + eps))) over H = 2,048 (256 pieces).
__device__ void norm_to_smem(Ctx& c, const unsigned short* w) {
  int t = threadIdx.x;
  uint4 hv = make_uint4(0, 0, 0, 0), wv = make_uint4(0, 0, 0, 0);
  float ss = 0.0f;
  if (t < 256) {
    hv = ldcg4(c.P.h + 8 * t);
    wv = ldw(reinterpret_cast<const uint4*>(w) + t);
    const unsigned hw[4] = {hv.x, hv.y, hv.z, hv.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) ss += lo(hw[i]) * lo(hw[i]) + hi(hw[i]) * hi(hw[i]);
  }
  float inv = rsqrtf(block_sum(ss, c.red) / H + EPS);
  if (t < 256) {
    const unsigned hw[4] = {hv.x, hv.y, hv.z, hv.w}, ww[4] = {wv.x, wv.y, wv.z, wv.w};
    unsigned out[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      unsigned short a = f2bf(lo(ww[i]) * rbf(lo(hw[i]) * inv));
      unsigned short b = f2bf(hi(ww[i]) * rbf(hi(hw[i]) * inv));
      out[i] = (unsigned)a | ((unsigned)b << 16);
    }
    c.xs[t] = make_uint4(out[0], out[1], out[2], out[3]);
  }
  __syncthreads();
}

__device__ void copy_to_smem(Ctx& c, const unsigned short* src, int n8) {
  for (int i = threadIdx.x; i < n8; i += blockDim.x) c.xs[i] = ldcg4(src + 8 * i);
  __syncthreads();
}

__device__ __forceinline__ int global_warp() { return (threadIdx.x >> 5) * gridDim.x + blockIdx.x; }
__device__ __forceinline__ int n_warps() { return gridDim.x * (blockDim.x >> 5); }

// ---- phases ----
// Gate/up staging: non-attention block b (b >= NKV) copies the gate and up rows of features
// (b - NKV) * stage .. + stage into shared memory, issued by thread 0 during the O phase (while the
// attention runs), completing on the block's mbarrier (one phase per layer). The barrier before
// (count_done's) means no warp still reads the previous layer's copy; the proxy fence orders
// those reads before the bulk copy's writes.
__device__ void stage_gate_up(Ctx& c, const uint4* W) {
  if (!c.persistent || c.P.stage == 0 || blockIdx.x < NKV || threadIdx.x != 0) return;
  const int S = c.P.stage;
  const size_t f0 = (size_t)(blockIdx.x - NKV) * S;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  mbar_expect(c.bar, 2u * S * UNIT * 16);
  bulk_copy(c.stage, W + f0 * UNIT, S * UNIT * 16, c.bar);
  bulk_copy(c.stage + S * UNIT, W + (F + f0) * UNIT, S * UNIT * 16, c.bar);
}

enum { OUT_QKV, OUT_RESIDUAL, OUT_LOGITS };

// Rows of 2,048 elements (QKV, O and HEAD), two rows per round: warp gw takes rows gw + 2 k nw
// and gw + (2 k + 1) nw.
// Blocks first_block.. take part (O leaves the attention's blocks out: they finish last).
template <int OUT>
__device__ void gemv_rows(Ctx& c, int ph, const uint4* W, int rows, const unsigned short* normw,
                          const unsigned short* in, int first_block, const uint4* stage_from = nullptr) {
  const int nb = gridDim.x - first_block, b = blockIdx.x - first_block;
  const int gw = b >= 0 ? (threadIdx.x >> 5) * nb + b : rows, nw = nb * (blockDim.x >> 5), lane = threadIdx.x & 31;
  uint4 w[16];
  const int lf = ph / PHASES_PER_LAYER;
  count_done(c);
  if (OUT == OUT_RESIDUAL) fine(c, lf, 8);
  auto issue = [&](int r0) {
    int r1 = r0 + nw;
    load_round(w, W + (size_t)r0 * UNIT, r1 < rows ? W + (size_t)r1 * UNIT : nullptr, lane);
  };
  if (c.P.early && gw < rows) issue(gw);
  // When O's input comes through the counters, h's rows are final here (this block passed q/k/v's
  // wait), so O reads them early; after a kernel boundary they may not be.
  float h0 = 0.0f, h1 = 0.0f;
  const bool early_h = OUT == OUT_RESIDUAL && c.persistent && ph > c.first && lane == 0 && gw < rows;
  if (early_h) {
    h0 = bf2f(ldcg_u16(c.P.h + gw));
    h1 = gw + nw < rows ? bf2f(ldcg_u16(c.P.h + gw + nw)) : 0.0f;
  }
  if (stage_from) stage_gate_up(c, stage_from);
  wait_input(c, ph);
  if (OUT == OUT_RESIDUAL) fine(c, lf, 9);
  if (normw)
    norm_to_smem(c, normw);
  else
    copy_to_smem(c, in, H / 8);
  if (OUT == OUT_RESIDUAL) fine(c, lf, 10);
  for (int r0 = gw; r0 < rows; r0 += 2 * nw) {
    if (r0 != gw || !c.P.early) issue(r0);
    const int r1 = r0 + nw;
    float a0, a1;
    dot_pair(w, c.xs, lane, a0, a1);  // a1 is 0 past the rows: the round's second half is then zeros
    a0 = warp_sum(a0);
    a1 = warp_sum(a1);
    if (lane == 0) {
      for (int k = 0; k < 2; ++k) {
        int r = k ? r1 : r0;
        float a = k ? a1 : a0;
        if (r >= rows) break;
        if (OUT == OUT_QKV) c.P.qkv[r] = f2bf(a);
        if (OUT == OUT_RESIDUAL) {
          const float hv = early_h && r0 == gw ? (k ? h1 : h0) : bf2f(ldcg_u16(c.P.h + r));
          c.P.h[r] = f2bf(hv + rbf(a));
        }
        if (OUT == OUT_LOGITS) c.P.logits[r] = a;
      }
    }
  }
  c.pending = ph;
  if (OUT == OUT_RESIDUAL) {
    __syncthreads();
    fine(c, lf, 11);
  }
}

// Gate/up: feature f reads rows f (gate) and F + f (up) in one round; act[f] = bf16(silu(g) u).
// With staging (persistent, stage > 0), features below (blocks - NKV) * stage come from the
// staging blocks' shared memory; the rest stream through registers over every warp.
__device__ void gemv_gate_up(Ctx& c, int ph, int l, const uint4* W, const unsigned short* normw) {
  const int S = c.persistent ? c.P.stage : 0, staged = (gridDim.x - NKV) * S;
  const int gw = staged + global_warp(), nw = n_warps(), lane = threadIdx.x & 31;
  uint4 w[16];
  count_done(c);
  if (c.P.early && gw < F) load_round(w, W + (size_t)gw * UNIT, W + (size_t)(F + gw) * UNIT, lane);
  fine(c, l, 12);
  wait_input(c, ph);
  fine(c, l, 13);
  norm_to_smem(c, normw);
  fine(c, l, 14);
  if (S > 0 && blockIdx.x >= NKV) {
    const int warp = threadIdx.x >> 5, f0 = (blockIdx.x - NKV) * S;
    mbar_wait(c.bar, (l - c.first / PHASES_PER_LAYER) & 1);  // one phase per layer of this launch
    for (int k = warp; k < S; k += blockDim.x >> 5) {
      uint4 v[16];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        v[j] = c.stage[k * UNIT + lane + 32 * j];
        v[8 + j] = c.stage[(S + k) * UNIT + lane + 32 * j];
      }
      float g, u;
      dot_pair(v, c.xs, lane, g, u);
      g = rbf(warp_sum(g));
      u = rbf(warp_sum(u));
      if (lane == 0) c.P.act[f0 + k] = f2bf(rbf(g / (1.0f + __expf(-g))) * u);
    }
  }
  for (int f = gw; f < F; f += nw) {
    if (f != gw || !c.P.early) load_round(w, W + (size_t)f * UNIT, W + (size_t)(F + f) * UNIT, lane);
    float g, u;
    dot_pair(w, c.xs, lane, g, u);
    g = rbf(warp_sum(g));
    u = rbf(warp_sum(u));
    if (lane == 0) c.P.act[f] = f2bf(rbf(g / (1.0f + __expf(-g))) * u);
  }
  c.pending = ph;
}

// Down: rows of 8,192 (four units), one warp per row, two rounds.
__device__ void gemv_down(Ctx& c, int ph, const uint4* W) {
  const int gw = global_warp(), nw = n_warps(), lane = threadIdx.x & 31;
  uint4 w[16];
  count_done(c);
  if (c.P.early && gw < H) load_round(w, W + (size_t)gw * 4 * UNIT, W + (size_t)gw * 4 * UNIT + UNIT, lane);
  wait_input(c, ph);
  copy_to_smem(c, c.P.act, F / 8);
  for (int r = gw; r < H; r += nw) {
    const uint4* base = W + (size_t)r * 4 * UNIT;
    if (r != gw || !c.P.early) load_round(w, base, base + UNIT, lane);
    float a = dot_unit(w, 1, c.xs + UNIT, lane) + dot_unit(w, 0, c.xs, lane);
    load_round(w, base + 2 * UNIT, base + 3 * UNIT, lane);
    a = dot_unit(w, 1, c.xs + 3 * UNIT, lane) + (dot_unit(w, 0, c.xs + 2 * UNIT, lane) + a);
    a = warp_sum(a);
    if (lane == 0) c.P.h[r] = f2bf(bf2f(ldcg_u16(c.P.h + r)) + rbf(a));
  }
  c.pending = ph;
}

// Attention for KV head g = blockIdx.x (< NKV): its GRP query heads over positions 0..=pos, all
// in shared memory. The cache's earlier positions are copied in (16-byte cp.async, rows padded to
// KST elements so that a warp's 16-byte reads of eight rows fall in different banks) before the
// q/k/v projection is complete; after it, the new key and value are roped and appended (to the
// cache and to the shared copy). Then: each position's scores for every head by one thread; each
// head's softmax by one warp; each output element by two threads (half the positions each). The
// block counts its phase at once (the O blocks wait for it).
constexpr int KST = HD + 8;
static_assert(THREADS == 2 * GRP * HD, "the attention's output step takes two threads per element");
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
__device__ void attention(Ctx& c, int ph, int l, int pos) {
  count_done(c);  // the q/k/v blocks count their rows; the attention's blocks the previous down
  if (blockIdx.x >= NKV) return;
  const int g = blockIdx.x, t = threadIdx.x, lane = t & 31, warp = t >> 5, mc = c.P.max_ctx;
  const Layer& L = c.P.layers[l];
  unsigned short* Ks = reinterpret_cast<unsigned short*>(c.stage);  // [mc][KST]
  unsigned short* Vs = Ks + (size_t)mc * KST;                       // [mc][KST]
  float* S = reinterpret_cast<float*>(Vs + (size_t)mc * KST);       // [GRP][mc]: scores, then weights
  float* q = c.att;                                                 // [GRP][HD], roped
  float* op = q + GRP * HD;                                         // [2][GRP * HD]: two halves
  float* lsum = op + 2 * GRP * HD;                                  // [GRP]
  const size_t kv_off = (size_t)g * mc * HD;
  for (int i = t; i < 2 * pos * (HD / 8); i += blockDim.x) {
    const int v = i >= pos * (HD / 8), j = v ? i - pos * (HD / 8) : i, r = j / (HD / 8), c16 = j % (HD / 8);
    cp_async16((v ? Vs : Ks) + r * KST + 8 * c16, (v ? L.vc : L.kc) + kv_off + (size_t)r * HD + 8 * c16);
  }
  asm volatile("cp.async.commit_group;" ::: "memory");
  const int which = t / HD, d = t % HD;
  float cs = 0.0f, sn = 0.0f;
  if (which <= GRP) {  // the rotation of this thread's pair (a table: read before the wait)
    const float* r = c.P.rope + ((size_t)pos * (HD / 2) + d % (HD / 2)) * 2;
    cs = r[0];
    sn = r[1];
  }
  wait_input(c, ph);
  fine(c, l, 0);
  if (which < GRP + 2) {
    int col = which < GRP ? (g * GRP + which) * HD : which == GRP ? NH * HD + g * HD : (NH + NKV) * HD + g * HD;
    float x = bf2f(ldcg_u16(c.P.qkv + col + d));
    if (which <= GRP) {
      float xo = bf2f(ldcg_u16(c.P.qkv + col + (d < HD / 2 ? d + HD / 2 : d - HD / 2)));
      x = rbf(rbf(x * cs) + rbf((d < HD / 2 ? -xo : xo) * sn));
    }
    if (which < GRP) {
      q[which * HD + d] = x;
    } else if (which == GRP) {
      Ks[pos * KST + d] = L.kc[kv_off + (size_t)pos * HD + d] = f2bf(x);
    } else {
      Vs[pos * KST + d] = L.vc[kv_off + (size_t)pos * HD + d] = f2bf(x);
    }
  }
  fine(c, l, 1);
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  fine(c, l, 2);
  for (int tt = t; tt <= pos; tt += blockDim.x) {
    const uint4* kr = reinterpret_cast<const uint4*>(Ks + tt * KST);
    float a[GRP] = {};
#pragma unroll
    for (int j = 0; j < HD / 8; ++j) {
      const uint4 kw = kr[j];
      const float k8[8] = {lo(kw.x), hi(kw.x), lo(kw.y), hi(kw.y), lo(kw.z), hi(kw.z), lo(kw.w), hi(kw.w)};
#pragma unroll
      for (int h = 0; h < GRP; ++h) {
        const float4 qa = *reinterpret_cast<const float4*>(q + h * HD + 8 * j);
        const float4 qb = *reinterpret_cast<const float4*>(q + h * HD + 8 * j + 4);
        a[h] = fmaf(qa.x, k8[0], a[h]);
        a[h] = fmaf(qa.y, k8[1], a[h]);
        a[h] = fmaf(qa.z, k8[2], a[h]);
        a[h] = fmaf(qa.w, k8[3], a[h]);
        a[h] = fmaf(qb.x, k8[4], a[h]);
        a[h] = fmaf(qb.y, k8[5], a[h]);
        a[h] = fmaf(qb.z, k8[6], a[h]);
        a[h] = fmaf(qb.w, k8[7], a[h]);
      }
    }
#pragma unroll
    for (int h = 0; h < GRP; ++h) S[h * mc + tt] = a[h] * 0.125f;
  }
  __syncthreads();
  fine(c, l, 3);
  if (warp < GRP) {
    float* sh = S + warp * mc;
    float m = -INFINITY;
    for (int tt = lane; tt <= pos; tt += 32) m = fmaxf(m, sh[tt]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = 0.0f;
    for (int tt = lane; tt <= pos; tt += 32) {
      const float p = __expf(sh[tt] - m);
      sh[tt] = p;
      sum += p;
    }
    sum = warp_sum(sum);
    if (lane == 0) lsum[warp] = sum;
  }
  __syncthreads();
  fine(c, l, 4);
  {
    const int e = t % (GRP * HD), half = t / (GRP * HD), h = e / HD, dd = e % HD, mid = (pos + 1) / 2;
    const float* w = S + h * mc;
    const int end = half ? pos + 1 : mid;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    int tt = half ? mid : 0;
    for (; tt + 4 <= end; tt += 4) {
      a0 = fmaf(w[tt], bf2f(Vs[tt * KST + dd]), a0);
      a1 = fmaf(w[tt + 1], bf2f(Vs[(tt + 1) * KST + dd]), a1);
      a2 = fmaf(w[tt + 2], bf2f(Vs[(tt + 2) * KST + dd]), a2);
      a3 = fmaf(w[tt + 3], bf2f(Vs[(tt + 3) * KST + dd]), a3);
    }
    for (; tt < end; ++tt) a0 = fmaf(w[tt], bf2f(Vs[tt * KST + dd]), a0);
    op[half * GRP * HD + e] = (a0 + a1) + (a2 + a3);
  }
  __syncthreads();
  fine(c, l, 5);
  if (t < GRP * HD) c.P.att[(g * GRP) * HD + t] = f2bf((op[t] + op[GRP * HD + t]) / lsum[t / HD]);
  c.pending = ph;
  count_done(c);
  fine(c, l, 6);
}

// The attention's shared floats beside the cache copy: q [GRP][HD], the output's two halves, the
// sums per head (and padding to 16 bytes).
constexpr int ATT_SMEM_FLOATS = 3 * GRP * HD + GRP + 4;

// Phases first..=last of one step (persistent: 0..=5 L; per-phase: one).
__global__ void __launch_bounds__(THREADS, 1) step(Params P, int first, int last, int persistent) {
  extern __shared__ uint4 smem[];
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  float* red = reinterpret_cast<float*>(smem + F / 8);
  float* att = red + 64;
  unsigned long long* bar = reinterpret_cast<unsigned long long*>(att + ATT_SMEM_FLOATS);
  uint4* stage = reinterpret_cast<uint4*>(bar + 2);
  Ctx c{P, persistent != 0, first, -1, smem, red, att, stage, bar};
  if (threadIdx.x == 0) mbar_init(bar);
  __syncthreads();
  const int pos = P.pos[0];
  const int head = P.n_layers * PHASES_PER_LAYER;
  for (int ph = first; ph <= last; ++ph) {
    if (ph == head) {
      gemv_rows<OUT_LOGITS>(c, ph, P.wlm, P.vocab, P.norm_final, nullptr, 0);
      continue;
    }
    const int l = ph / PHASES_PER_LAYER;
    const Layer& L = P.layers[l];
    switch (ph % PHASES_PER_LAYER) {
      case PH_QKV:  // the attention's blocks skip it (they load their cache meanwhile)
        if (blockIdx.x >= NKV) gemv_rows<OUT_QKV>(c, ph, L.wqkv, QKV, L.norm_in, nullptr, NKV);
        break;
      case PH_ATT: attention(c, ph, l, pos); break;
      case PH_O:  // the attention's blocks skip it (they finish last)
        if (blockIdx.x >= NKV) gemv_rows<OUT_RESIDUAL>(c, ph, L.wo, H, nullptr, P.att, NKV, L.wgu);
        break;
      case PH_GU: gemv_gate_up(c, ph, l, L.wgu, L.norm_post); break;
      case PH_DOWN: gemv_down(c, ph, L.wd); break;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && (blockIdx.x == 0 || blockIdx.x == gridDim.x - 1))
    P.stamps[(blockIdx.x == 0 ? 0 : head + 2) + head + 1] = globaltimer();
}

// Uniform values in [off - scale, off + scale) from a hash of (seed, i), as bf16.
__global__ void fill(unsigned short* p, size_t n, unsigned seed, float scale, float off) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned long long x = (i + 1) * 0x9E3779B97F4A7C15ull ^ ((unsigned long long)seed << 32);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    float u = (float)(x >> 40) / (float)(1ull << 24);  // [0, 1)
    p[i] = f2bf(off + scale * (2.0f * u - 1.0f));
  }
}

// ---- host ----
static void fill_dev(unsigned short* p, size_t n, unsigned seed, float scale, float off) {
  fill<<<1024, 256>>>(p, n, seed, scale, off);
  CK(cudaGetLastError());
}

static std::vector<unsigned short> to_host(const void* d, size_t n) {
  std::vector<unsigned short> v(n);
  CK(cudaMemcpy(v.data(), d, n * 2, cudaMemcpyDeviceToHost));
  return v;
}

// cos and sin of position t times theta^(-2i / HD), rounded to bf16: [max_ctx][HD / 2][2].
static std::vector<float> rope_table(int max_ctx) {
  std::vector<float> r((size_t)max_ctx * HD);
  for (int t = 0; t < max_ctx; ++t)
    for (int i = 0; i < HD / 2; ++i) {
      float ang = (float)t * std::pow(THETA, -(2.0f * i) / HD);
      r[((size_t)t * (HD / 2) + i) * 2] = rbf(std::cos(ang));
      r[((size_t)t * (HD / 2) + i) * 2 + 1] = rbf(std::sin(ang));
    }
  return r;
}

static void parallel_rows(int rows, const std::function<void(int)>& f) {
  int nt = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<std::thread> ts;
  for (int k = 0; k < nt; ++k)
    ts.emplace_back([&, k] {
      for (int r = k; r < rows; r += nt) f(r);
    });
  for (auto& t : ts) t.join();
}

static void host_gemv(const std::vector<unsigned short>& W, const std::vector<float>& x, int rows, int cols,
                      std::vector<float>& y, size_t row0 = 0) {
  y.assign(rows, 0.0f);
  parallel_rows(rows, [&](int r) {
    const unsigned short* w = W.data() + (row0 + r) * (size_t)cols;
    double a = 0.0;
    for (int k = 0; k < cols; ++k) a += (double)bf2f(w[k]) * x[k];
    y[r] = (float)a;
  });
}

static std::vector<float> host_norm(const std::vector<float>& h, const std::vector<unsigned short>& w) {
  double ss = 0.0;
  for (float v : h) ss += (double)v * v;
  float inv = 1.0f / std::sqrt((float)(ss / H) + EPS);
  std::vector<float> out(H);
  for (int i = 0; i < H; ++i) out[i] = rbf(bf2f(w[i]) * rbf(h[i] * inv));
  return out;
}

struct HostLayer {
  std::vector<unsigned short> wqkv, wo, wgu, wd, nin, npost, kc, vc;
};

// One step on the host from h0 and the caches (positions < pos), as the device computes it.
static std::vector<float> host_step(std::vector<HostLayer>& layers, const std::vector<unsigned short>& wlm,
                                    const std::vector<unsigned short>& nfinal, const std::vector<unsigned short>& h0,
                                    int vocab, int pos, int max_ctx) {
  const std::vector<float> rt = rope_table(max_ctx);
  std::vector<float> h(H), y;
  for (int i = 0; i < H; ++i) h[i] = bf2f(h0[i]);
  for (auto& L : layers) {
    host_gemv(L.wqkv, host_norm(h, L.nin), QKV, H, y);
    std::vector<float> qkv(QKV);
    for (int i = 0; i < QKV; ++i) qkv[i] = rbf(y[i]);
    auto rope = [&](int col, int d) {
      float x = qkv[col + d], xo = qkv[col + (d < HD / 2 ? d + HD / 2 : d - HD / 2)];
      float rh = d < HD / 2 ? -xo : xo;
      const float* cs = &rt[((size_t)pos * (HD / 2) + d % (HD / 2)) * 2];
      return rbf(rbf(x * cs[0]) + rbf(rh * cs[1]));
    };
    std::vector<float> att(NH * HD);
    for (int g = 0; g < NKV; ++g) {
      for (int d = 0; d < HD; ++d) {
        L.kc[((size_t)g * max_ctx + pos) * HD + d] = f2bf(rope(NH * HD + g * HD, d));
        L.vc[((size_t)g * max_ctx + pos) * HD + d] = f2bf(qkv[(NH + NKV) * HD + g * HD + d]);
      }
      for (int hq = 0; hq < GRP; ++hq) {
        int head = g * GRP + hq;
        std::vector<float> q(HD), s(pos + 1);
        for (int d = 0; d < HD; ++d) q[d] = rope(head * HD, d);
        float mx = -INFINITY;
        for (int t = 0; t <= pos; ++t) {
          double a = 0.0;
          for (int d = 0; d < HD; ++d) a += (double)q[d] * bf2f(L.kc[((size_t)g * max_ctx + t) * HD + d]);
          s[t] = (float)a * 0.125f;
          mx = std::max(mx, s[t]);
        }
        double den = 0.0;
        for (int t = 0; t <= pos; ++t) den += std::exp((double)s[t] - mx);
        for (int d = 0; d < HD; ++d) {
          double num = 0.0;
          for (int t = 0; t <= pos; ++t) num += std::exp((double)s[t] - mx) * bf2f(L.vc[((size_t)g * max_ctx + t) * HD + d]);
          att[head * HD + d] = rbf((float)(num / den));
        }
      }
    }
    host_gemv(L.wo, att, H, H, y);
    for (int i = 0; i < H; ++i) h[i] = rbf(h[i] + rbf(y[i]));
    auto xn = host_norm(h, L.npost);
    std::vector<float> gt, up, act(F);
    host_gemv(L.wgu, xn, F, H, gt, 0);
    host_gemv(L.wgu, xn, F, H, up, F);
    for (int f = 0; f < F; ++f) {
      float g = rbf(gt[f]), u = rbf(up[f]);
      act[f] = rbf(rbf(g / (1.0f + std::exp(-g))) * u);
    }
    host_gemv(L.wd, act, H, F, y);
    for (int i = 0; i < H; ++i) h[i] = rbf(h[i] + rbf(y[i]));
  }
  host_gemv(wlm, host_norm(h, nfinal), vocab, H, y);
  return y;
}

struct Variant {
  std::string name;
  cudaGraphExec_t exec;
};

int main(int argc, char** argv) {
  int n_layers = 16, vocab = 128256, pos = 192, rounds = 12, reps = 50, stage_arg = -1;
  bool late = false;
  bool check = true;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--layers") n_layers = next();
    else if (a == "--vocab") vocab = next();
    else if (a == "--pos") pos = next();
    else if (a == "--rounds") rounds = next();
    else if (a == "--reps") reps = next();
    else if (a == "--no-check") check = false;
    else if (a == "--stage") stage_arg = next();
    else if (a == "--late") late = true;
    else {
      std::fprintf(stderr, "usage: %s [--layers N<=16] [--vocab V] [--pos P] [--rounds R] [--reps N] [--stage S] [--late] [--no-check]\n", argv[0]);
      return 2;
    }
  }
  if (n_layers < 1 || n_layers > MAX_LAYERS || vocab < 1 || pos < 1) {
    std::fprintf(stderr, "bad arguments\n");
    return 2;
  }
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  const int blocks = sms, threads = THREADS;
  const int max_ctx = pos + 1;
  const int n_phases = n_layers * PHASES_PER_LAYER + 1;

  // Weights, random: uniform with the variance of 1/fan-in; norms near 1.
  Params P{};
  P.n_layers = n_layers;
  P.vocab = vocab;
  P.max_ctx = max_ctx;
  size_t weight_bytes = 0;
  std::vector<void*> allocs;
  auto dalloc = [&](size_t elems) {
    void* p = nullptr;
    CK(cudaMalloc(&p, elems * 2));
    allocs.push_back(p);
    return (unsigned short*)p;
  };
  unsigned seed = 1;
  const float s2048 = std::sqrt(3.0f / 2048), s8192 = std::sqrt(3.0f / 8192);
  for (int l = 0; l < n_layers; ++l) {
    Layer& L = P.layers[l];
    unsigned short *wqkv = dalloc((size_t)QKV * H), *wo = dalloc((size_t)H * H), *wgu = dalloc((size_t)2 * F * H),
                   *wd = dalloc((size_t)H * F), *nin = dalloc(H), *npost = dalloc(H);
    fill_dev(wqkv, (size_t)QKV * H, seed++, s2048, 0);
    fill_dev(wo, (size_t)H * H, seed++, s2048, 0);
    fill_dev(wgu, (size_t)2 * F * H, seed++, s2048, 0);
    fill_dev(wd, (size_t)H * F, seed++, s8192, 0);
    fill_dev(nin, H, seed++, 0.1f, 1.0f);
    fill_dev(npost, H, seed++, 0.1f, 1.0f);
    L.kc = dalloc((size_t)NKV * max_ctx * HD);
    L.vc = dalloc((size_t)NKV * max_ctx * HD);
    fill_dev(L.kc, (size_t)NKV * max_ctx * HD, seed++, 1.0f, 0);
    fill_dev(L.vc, (size_t)NKV * max_ctx * HD, seed++, 1.0f, 0);
    L.wqkv = (const uint4*)wqkv;
    L.wo = (const uint4*)wo;
    L.wgu = (const uint4*)wgu;
    L.wd = (const uint4*)wd;
    L.norm_in = nin;
    L.norm_post = npost;
    weight_bytes += 2 * ((size_t)QKV * H + (size_t)H * H + (size_t)3 * F * H + 2 * H);
  }
  unsigned short* wlm = dalloc((size_t)vocab * H);
  unsigned short* nfinal = dalloc(H);
  fill_dev(wlm, (size_t)vocab * H, seed++, s2048, 0);
  fill_dev(nfinal, H, seed++, 0.1f, 1.0f);
  weight_bytes += 2 * ((size_t)vocab * H + H);
  P.wlm = (const uint4*)wlm;
  P.norm_final = nfinal;
  unsigned short* h0 = dalloc(H);
  fill_dev(h0, H, seed++, 1.0f, 0);
  P.h = dalloc(H);
  P.qkv = dalloc(QKV);
  P.att = dalloc(NH * HD);
  P.act = dalloc(F);
  CK(cudaMalloc(&P.logits, (size_t)vocab * 4));
  {
    std::vector<float> rt = rope_table(max_ctx);
    float* d;
    CK(cudaMalloc(&d, rt.size() * 4));
    CK(cudaMemcpy(d, rt.data(), rt.size() * 4, cudaMemcpyHostToDevice));
    P.rope = d;
  }
  CK(cudaMalloc(&P.cnt, n_phases * 4));
  int* dpos;
  CK(cudaMalloc(&dpos, 4));
  CK(cudaMemcpy(dpos, &pos, 4, cudaMemcpyHostToDevice));
  P.pos = dpos;
  CK(cudaMalloc(&P.stamps, (size_t)(n_phases + 1) * 2 * 8));
  CK(cudaMalloc(&P.fine, (size_t)n_layers * 16 * 8));
  CK(cudaDeviceSynchronize());

  const size_t smem_base = (size_t)F * 2 + 64 * 4 + (size_t)ATT_SMEM_FLOATS * 4 + 16;
  // Staging: as many features (8 KB each) as fit beside the rest, up to 227 KB per block.
  const int stage = stage_arg >= 0 ? stage_arg : (int)((prop.sharedMemPerBlockOptin - smem_base) / (2 * UNIT * 16));
  const size_t kv_bytes = (size_t)max_ctx * (2 * KST * 2 + GRP * 4);  // the attention's copy, scores
  const size_t smem_plain = smem_base + kv_bytes;                         // the variants without staging
  const size_t smem = smem_base + std::max((size_t)stage * 2 * UNIT * 16, kv_bytes);
  if (smem > prop.sharedMemPerBlockOptin) {
    std::fprintf(stderr, "position %d needs %zu B of shared memory, more than %zu\n", pos, smem, prop.sharedMemPerBlockOptin);
    return 2;
  }
  auto kern = step;
  CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  cudaFuncAttributes fa;
  CK(cudaFuncGetAttributes(&fa, kern));
  int per_sm = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, threads, smem));
  std::printf("device: %s, %d SMs; step kernel: %d threads x %d blocks, %d registers, %zu B shared (%d gate/up "
              "features staged per block, %d of %d), %d blocks/SM fit\n",
              prop.name, sms, threads, blocks, fa.numRegs, smem, stage, stage * (blocks - NKV), F, per_sm);
  if (stage * (blocks - NKV) > F) {
    std::fprintf(stderr, "--stage %d stages more than the %d features\n", stage, F);
    return 2;
  }
  if (per_sm * sms < blocks) {
    std::fprintf(stderr, "the persistent grid does not fit at once\n");
    return 1;
  }

  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  // mode 0: persistent; 3: persistent with gate/up staging; 1: per phase with PDL; 2: per phase;
  // 4: per phase with PDL, O and gate/up in one launch with staging; 5: persistent, each phase's
  // first weights loaded after its wait (what the counters' hand-off costs with nothing queued).
  auto build = [&](int mode) {
    Params Pm = P;
    Pm.stage = mode == 3 || mode == 4 ? stage : 0;
    Pm.early = mode == 5 ? 0 : 1;
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    CK(cudaMemsetAsync(P.cnt, 0, n_phases * 4, st));
    CK(cudaMemcpyAsync(P.h, h0, H * 2, cudaMemcpyDeviceToDevice, st));
    auto launch = [&](int first, int last, int persistent, bool pdl) {
      cudaLaunchAttribute attr[1] = {};
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(blocks);
      cfg.blockDim = dim3(threads);
      cfg.dynamicSmemBytes = mode == 3 || mode == 4 ? smem : std::min(smem, smem_plain);
      cfg.stream = st;
      cfg.attrs = attr;
      if (persistent && !pdl) {
        attr[0].id = cudaLaunchAttributeCooperative;
        attr[0].val.cooperative = 1;
        cfg.numAttrs = 1;
      } else if (pdl) {
        attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[0].val.programmaticStreamSerializationAllowed = 1;
        cfg.numAttrs = 1;
      }
      CK(cudaLaunchKernelEx(&cfg, kern, Pm, first, last, persistent));
    };
    if (mode == 0 || mode == 3 || mode == 5) {
      launch(0, n_phases - 1, 1, false);
    } else if (mode == 4) {  // per phase with PDL, but O and gate/up in one launch, counters between
      for (int ph = 0; ph < n_phases; ++ph) {
        if (ph < n_layers * PHASES_PER_LAYER && ph % PHASES_PER_LAYER == PH_O) {
          launch(ph, ph + 1, 1, true);
          ++ph;
        } else {
          launch(ph, ph, 0, ph > 0);
        }
      }
    } else
      for (int ph = 0; ph < n_phases; ++ph) launch(ph, ph, 0, mode == 1 && ph > 0);
    CK(cudaStreamEndCapture(st, &g));
    cudaGraphExec_t e;
    CK(cudaGraphInstantiate(&e, g, 0));
    CK(cudaGraphDestroy(g));
    return e;
  };
  std::vector<Variant> vs = {{"persistent", build(0)}, {"per-phase+pdl", build(1)}, {"per-phase", build(2)}};
  if (stage > 0) {
    vs.push_back({"persistent+stage", build(3)});
    vs.push_back({"pdl, o+gu staged", build(4)});
  }
  if (late) vs.push_back({"persistent, late", build(5)});

  // Correctness: every variant's logits against the first's (bitwise: the same arithmetic), and
  // the first's against the host reference.
  bool ok = true;
  std::vector<std::vector<float>> logits;
  for (auto& v : vs) {
    CK(cudaMemset(P.logits, 0xff, (size_t)vocab * 4));  // NaN: poisoned
    CK(cudaGraphLaunch(v.exec, st));
    CK(cudaStreamSynchronize(st));
    std::vector<float> lg(vocab);
    CK(cudaMemcpy(lg.data(), P.logits, (size_t)vocab * 4, cudaMemcpyDeviceToHost));
    logits.push_back(lg);
  }
  for (size_t i = 1; i < vs.size(); ++i) {
    bool same = std::memcmp(logits[0].data(), logits[i].data(), (size_t)vocab * 4) == 0;
    std::printf("logits of %s %s those of %s\n", vs[i].name.c_str(), same ? "equal" : "DIFFER FROM", vs[0].name.c_str());
    ok = ok && same;
  }
  if (check) {
    std::vector<HostLayer> hl(n_layers);
    for (int l = 0; l < n_layers; ++l) {
      const Layer& L = P.layers[l];
      hl[l].wqkv = to_host(L.wqkv, (size_t)QKV * H);
      hl[l].wo = to_host(L.wo, (size_t)H * H);
      hl[l].wgu = to_host(L.wgu, (size_t)2 * F * H);
      hl[l].wd = to_host(L.wd, (size_t)H * F);
      hl[l].nin = to_host(L.norm_in, H);
      hl[l].npost = to_host(L.norm_post, H);
      hl[l].kc = to_host(L.kc, (size_t)NKV * max_ctx * HD);
      hl[l].vc = to_host(L.vc, (size_t)NKV * max_ctx * HD);
    }
    double t0 = now_us();
    auto ref = host_step(hl, to_host(wlm, (size_t)vocab * H), to_host(nfinal, H), to_host(h0, H), vocab, pos, max_ctx);
    double num = 0, den = 0, maxd = 0, maxr = 0;
    size_t am_dev = 0, am_ref = 0;
    bool finite = true;
    for (int i = 0; i < vocab; ++i) {
      float d = logits[0][i], r = ref[i];
      finite = finite && std::isfinite(d);
      num += (double)(d - r) * (d - r);
      den += (double)r * r;
      maxd = std::max(maxd, (double)std::fabs(d - r));
      maxr = std::max(maxr, (double)std::fabs(r));
      if (d > logits[0][am_dev]) am_dev = i;
      if (r > ref[am_ref]) am_ref = i;
    }
    double rel = std::sqrt(num / den);
    bool good = finite && rel < 0.05;
    std::printf("host reference (%.1f s): relative L2 difference %.4f, largest |difference| %.4f of largest |logit| %.4f, "
                "argmax %zu (device) %zu (host): %s\n",
                (now_us() - t0) / 1e6, rel, maxd, maxr, am_dev, am_ref, good ? "ok" : "WRONG");
    ok = ok && good;
  }

  // Copy bandwidth for the floor: 1 GiB device to device, median of 10.
  double copy_tb_s = 0;
  {
    size_t n = (size_t)1 << 30;
    void *a, *b;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&b, n));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<double> ts;
    for (int i = 0; i < 11; ++i) {
      CK(cudaEventRecord(e0, st));
      CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, st));
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (i) ts.push_back(ms);
    }
    copy_tb_s = 2.0 * n / (median(ts) * 1e-3) / 1e12;
    CK(cudaFree(a));
    CK(cudaFree(b));
  }
  double floor_ms = weight_bytes / (copy_tb_s * 1e12) * 1e3;

  // Timing: the variants turn by turn, `reps` replays each per round, events around each block.
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<std::vector<double>> per(vs.size());
  for (int r = -2; r < rounds; ++r)
    for (size_t i = 0; i < vs.size(); ++i) {
      CK(cudaEventRecord(e0, st));
      for (int k = 0; k < reps; ++k) CK(cudaGraphLaunch(vs[i].exec, st));
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= 0) per[i].push_back(ms / reps);
    }
  std::printf("weights %.3f GB, copy %.3f TB/s, floor %.4f ms; %d layers, vocab %d, position %d\n", weight_bytes / 1e9,
              copy_tb_s, floor_ms, n_layers, vocab, pos);
  std::printf("%-17s %10s %10s %10s %8s\n", "variant", "ms/step", "min", "max", "xfloor");
  for (size_t i = 0; i < vs.size(); ++i) {
    double md = median(per[i]);
    std::printf("%-17s %10.4f %10.4f %10.4f %8.3f\n", vs[i].name.c_str(), md,
                *std::min_element(per[i].begin(), per[i].end()), *std::max_element(per[i].begin(), per[i].end()),
                md / floor_ms);
  }

  // Phase timeline of one replay of each variant: when block 0 (an attention block) and the last
  // block (not one) passed each phase's wait; means per layer over layers 1.., and the head to
  // each block's end. The last block has no attention phase: its q/k/v interval runs to O.
  for (size_t i = 0; i < vs.size(); ++i) {
    CK(cudaMemset(P.stamps, 0, (size_t)(n_phases + 1) * 2 * 8));
    CK(cudaGraphLaunch(vs[i].exec, st));
    CK(cudaStreamSynchronize(st));
    std::vector<unsigned long long> s((size_t)(n_phases + 1) * 2);
    CK(cudaMemcpy(s.data(), P.stamps, s.size() * 8, cudaMemcpyDeviceToHost));
    for (int row = 0; row < 2; ++row) {
      const unsigned long long* t = s.data() + row * (n_phases + 1);
      double gap[PHASES_PER_LAYER] = {};
      int cnt = 0;
      for (int l = 1; l < n_layers; ++l, ++cnt)
        for (int k = 0; k < PHASES_PER_LAYER; ++k) {
          int ph = l * PHASES_PER_LAYER + k;
          if (row == 1 && k == PH_ATT) continue;
          int next = ph + 1 + (row == 1 && k == PH_QKV ? 1 : 0);
          gap[k] += (double)(t[next] - t[ph]) / 1e3;
        }
      std::printf("%-17s %s us per layer: ", vs[i].name.c_str(), row ? "last block " : "block 0    ");
      const char* names[] = {row ? "qkv+att" : "qkv", "att", "o", "gate/up", "down"};
      double tot = 0;
      for (int k = 0; k < PHASES_PER_LAYER; ++k) {
        if (row == 1 && k == PH_ATT) continue;
        std::printf("%s %.2f  ", names[k], cnt ? gap[k] / cnt : 0.0);
        tot += cnt ? gap[k] / cnt : 0.0;
      }
      std::printf("= %.2f; head %.2f\n", tot, (double)(t[n_phases] - t[n_phases - 1]) / 1e3);
    }
    // Inside the attention (block 0) and O and gate/up's start (last block), means over layers 1..
    std::vector<unsigned long long> f((size_t)n_layers * 16);
    CK(cudaMemcpy(f.data(), P.fine, f.size() * 8, cudaMemcpyDeviceToHost));
    auto fm = [&](int a, int b) {
      double x = 0;
      for (int l = 1; l < n_layers; ++l) x += (double)(f[l * 16 + b] - f[l * 16 + a]) / 1e3;
      return n_layers > 1 ? x / (n_layers - 1) : 0.0;
    };
    std::printf("%-17s attention: q/k/v in and roped %.2f, cache copy waited %.2f, scores %.2f, softmax %.2f, "
                "weighted sum %.2f, stored %.2f, to O's wait passed %.2f | O: count to wait passed %.2f, input %.2f, rows %.2f | "
                "O end to gate/up's wait %.2f (its weights issued at %.2f), norm %.2f\n",
                vs[i].name.c_str(), fm(0, 1), fm(1, 2), fm(2, 3), fm(3, 4), fm(4, 5), fm(5, 6), fm(6, 9), fm(8, 9), fm(9, 10),
                fm(10, 11), fm(11, 13), fm(11, 12), fm(13, 14));
  }
  std::printf("{\"persistent_ms\":%.4f,\"persistent_stage_ms\":%.4f,\"stage\":%d,\"per_phase_pdl_ms\":%.4f,\"per_phase_ms\":%.4f,\"floor_ms\":%.4f,\"copy_tb_s\":%.3f,"
              "\"weight_bytes\":%zu,\"layers\":%d,\"vocab\":%d,\"pos\":%d,\"correct\":%s}\n",
              median(per[0]), vs.size() > 3 ? median(per[3]) : 0.0, stage, median(per[1]), median(per[2]), floor_ms, copy_tb_s, weight_bytes, n_layers, vocab, pos,
              ok ? "true" : "false");
  for (auto& v : vs) CK(cudaGraphExecDestroy(v.exec));
  for (void* p : allocs) CK(cudaFree(p));
  return ok ? 0 : 1;
}
