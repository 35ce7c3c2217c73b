// graphsmith test/benchmark kernels.
//
// Compiled to PTX (compute_90) by kernels/build_ptx.py with NVRTC; the
// resulting graphsmith_kernels.ptx is committed so that Rust builds need no
// CUDA toolkit. Keep this file self-contained: NVRTC is run without any
// include paths.
//
// Element-wise kernels use a grid-stride loop, so any launch shape covers all
// n elements (one element per thread with enough blocks, fewer blocks also ok).
//
// Multiply-then-add expressions use __fmul_rn/__fadd_rn so NVRTC cannot
// contract them into FMA (its default is --fmad=true): results are then
// bit-identical to a plain host reference `a * x + y` (Rust/C, no FMA), summed
// in the same order.

// ---------------------------------------------------------------------------
// extern "C" kernels: unmangled names.
// ---------------------------------------------------------------------------

#define GS_GRID_STRIDE_LOOP(i, n)                                              \
    for (unsigned int i = blockIdx.x * blockDim.x + threadIdx.x; i < (n);      \
         i += blockDim.x * gridDim.x)

extern "C" __global__ void gs_fill_f32(float* out, float value, unsigned int n)
{
    GS_GRID_STRIDE_LOOP(i, n) { out[i] = value; }
}

extern "C" __global__ void gs_add_scalar_f32(float* x, float a, unsigned int n)
{
    GS_GRID_STRIDE_LOOP(i, n) { x[i] += a; }
}

extern "C" __global__ void gs_scale_f32(float* x, float a, unsigned int n)
{
    GS_GRID_STRIDE_LOOP(i, n) { x[i] *= a; }
}

extern "C" __global__ void gs_axpy_f32(const float* x, float* y, float a, unsigned int n)
{
    GS_GRID_STRIDE_LOOP(i, n) { y[i] = __fadd_rn(__fmul_rn(a, x[i]), y[i]); }
}

extern "C" __global__ void gs_add_f32(const float* a, const float* b, float* out, unsigned int n)
{
    GS_GRID_STRIDE_LOOP(i, n) { out[i] = a[i] + b[i]; }
}

extern "C" __global__ void gs_copy_f32(const float* src, float* dst, unsigned int n)
{
    GS_GRID_STRIDE_LOOP(i, n) { dst[i] = src[i]; }
}

// Busy-waits for roughly `cycles` SM clock cycles. Only thread 0 of block 0
// spins; nothing is written to memory. Launch as <<<1, 1>>>.
extern "C" __global__ void gs_spin(unsigned long long cycles)
{
    if (blockIdx.x != 0 || threadIdx.x != 0) {
        return;
    }
    const long long start = clock64();
    while ((unsigned long long)(clock64() - start) < cycles) {
        // spin
    }
}

// Does nothing: for launch-overhead benchmarks.
extern "C" __global__ void gs_empty() {}

// Programmatic dependent launch (compute capability 9.0+; load with Kernel::programmatic).
// Each kernel lets its dependents start early (launch_dependents) and waits for the kernel
// before it (wait) before it touches memory; both are no-ops in an ordinary launch.
#define GS_PDL_TRIGGER() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define GS_PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")

extern "C" __global__ void gs_pdl_add_scalar_f32(float* x, float a, unsigned int n)
{
    GS_PDL_TRIGGER();
    GS_PDL_WAIT();
    GS_GRID_STRIDE_LOOP(i, n) { x[i] += a; }
}

extern "C" __global__ void gs_pdl_add_f32(const float* a, const float* b, float* out,
                                          unsigned int n)
{
    GS_PDL_TRIGGER();
    GS_PDL_WAIT();
    GS_GRID_STRIDE_LOOP(i, n) { out[i] = a[i] + b[i]; }
}

// Spins for about `cycles` clock cycles, then sets x[i] = value. It lets its dependents start
// at once, so a dependent that reads x before its wait reads the old values.
extern "C" __global__ void gs_pdl_spin_fill_f32(float* x, float value, unsigned int n,
                                                unsigned long long cycles)
{
    GS_PDL_TRIGGER();
    GS_PDL_WAIT();
    const long long start = clock64();
    while ((unsigned long long)(clock64() - start) < cycles) {
        // spin
    }
    GS_GRID_STRIDE_LOOP(i, n) { x[i] = value; }
}

// dst[i] = src[i], with src read BEFORE the wait: a deliberate bug, the race a programmatic
// edge allows (it orders the producer only before what this kernel does after its wait).
// One element per thread: launch at least n threads.
extern "C" __global__ void gs_pdl_copy_early_f32(const float* src, float* dst, unsigned int n)
{
    GS_PDL_TRIGGER();
    const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
    const float v = i < n ? src[i] : 0.0f;
    GS_PDL_WAIT();
    if (i < n) {
        dst[i] = v;
    }
}

// dst[i] = src[i], read after the wait: the correct twin of gs_pdl_copy_early_f32.
extern "C" __global__ void gs_pdl_copy_f32(const float* src, float* dst, unsigned int n)
{
    GS_PDL_TRIGGER();
    GS_PDL_WAIT();
    GS_GRID_STRIDE_LOOP(i, n) { dst[i] = src[i]; }
}

// ---------------------------------------------------------------------------
// Conditional nodes: kernels that set a condition handle. cudaGraphSetConditional
// is provided by the driver, not by a library: the PTX calls an `.extern .func`
// that the driver's JIT (ptxas) knows and the module loader resolves, so no
// device runtime library (cudadevrt) is linked. NVRTC declares it only for
// relocatable device code, so it is declared here (the handle is the
// `unsigned long long` of cudaGraphConditionalHandle).
// ---------------------------------------------------------------------------

extern "C" __device__ void cudaGraphSetConditional(unsigned long long handle, unsigned int value);

// Sets the condition to `*value` (read from device memory, so the GPU decides).
extern "C" __global__ void gs_set_condition(unsigned long long handle, const unsigned int* value)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        cudaGraphSetConditional(handle, *value);
    }
}

// One WHILE iteration's bookkeeping: decrements *counter (when positive) and
// sets the condition to (*counter > 0), so a loop entered with *counter = n
// runs its body n times.
extern "C" __global__ void gs_while_countdown(unsigned int* counter, unsigned long long handle)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned int c = *counter;
        if (c > 0) {
            c -= 1;
            *counter = c;
        }
        cudaGraphSetConditional(handle, c > 0 ? 1u : 0u);
    }
}

// Sets a SWITCH node's condition to *sel.
extern "C" __global__ void gs_switch_select(const unsigned int* sel, unsigned long long handle)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        cudaGraphSetConditional(handle, *sel);
    }
}

// ---------------------------------------------------------------------------
// C++-linkage kernels (global scope, NOT extern "C"): their symbol names are
// Itanium-mangled and encode the parameter types, which tests use for
// signature-based read/write detection (const T* = read, T* = written).
// The mangled names are recorded in kernels/mangled_names.txt.
// ---------------------------------------------------------------------------

// Matrix-vector product: out[r] = sum_c w[r*cols + c] * x[c], one thread per row,
// summed in order c = 0, 1, ..., cols-1.
__global__ void proj(const float* x, const float* w, float* out, int rows, int cols)
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) {
        float acc = 0.0f;
        for (int c = 0; c < cols; ++c) {
            acc = __fadd_rn(acc, __fmul_rn(w[(long long)r * cols + c], x[c]));
        }
        out[r] = acc;
    }
}

// Element-wise stand-in for attention: out[i] = q[i] * k[i] + v[i].
__global__ void attention(const float* q, const float* k, const float* v, float* out, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = __fadd_rn(__fmul_rn(q[i], k[i]), v[i]);
    }
}
