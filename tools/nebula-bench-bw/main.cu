/* nebula-bench-bw — the three bandwidths a decode token's time is bounded by
 * (docs/BENCHMARKS.md, roofline): GPU device-memory read, pinned host →
 * device copy over PCIe, and host RAM read with N threads.
 *
 * Each is the best of a few repetitions over a buffer far larger than any
 * cache (GPU: a read kernel whose sum is kept, so nothing is optimised away,
 * and a device-to-device copy; PCIe: cudaMemcpyAsync from cudaMallocHost
 * memory; RAM: N pthreads each summing its slice with 64-bit loads).  Prints
 * one JSON object.  Without a CUDA device it says "SKIP: …" on stderr and
 * the JSON has "gpu": null (the RAM figure is still measured): the CPU-backend
 * runs of tools/bench/bench-cuda.sh use it.  C-style host code, no STL. */
#include <cuda_runtime.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct opts {
    size_t gpu_bytes, h2d_bytes, ram_bytes;
    int threads, reps;
    bool ram_only;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: nebula-bench-bw [--threads N] [--reps N] [--gpu-mib M] [--h2d-mib M] [--ram-mib M] [--ram-only]\n"
            "\n"
            "Measures GPU device-memory read bandwidth (and device-to-device copy), pinned host-to-device\n"
            "PCIe bandwidth and host RAM read bandwidth with N threads; prints one JSON object (GB/s =\n"
            "1e9 bytes/s).  Without a CUDA device: SKIP on stderr, \"gpu\": null, RAM still measured.\n"
            "\n"
            "  --threads N   RAM-read threads (default: online CPUs)\n"
            "  --reps N      repetitions, best kept (default 5)\n"
            "  --gpu-mib M   device buffer (default 2048, capped at a quarter of free VRAM)\n"
            "  --h2d-mib M   pinned host buffer (default 1024)\n"
            "  --ram-mib M   host RAM buffer (default 2048)\n"
            "  --ram-only    no CUDA call at all\n");
}

static int parse_size(const char *opt, const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "nebula-bench-bw: %s wants an integer in [%ld, %ld], got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* ---- GPU ---- */

/* Each thread sums 16-byte words with a grid stride; one atomic per block
 * keeps the result live. */
__global__ void read_kernel(const uint4 *p, size_t n, unsigned long long *sink)
{
    __shared__ unsigned int part[256];
    unsigned int acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint4 v = p[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] ^= part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(sink, (unsigned long long)part[0]);
}

#define CU(call, what)                                                                                             \
    do {                                                                                                           \
        cudaError_t e_ = (call);                                                                                   \
        if (e_ != cudaSuccess) {                                                                                   \
            snprintf(err, errlen, "%s: %s", what, cudaGetErrorString(e_));                                         \
            goto fail;                                                                                             \
        }                                                                                                          \
    } while (0)

struct gpu_result {
    char name[256];
    double read_gbs, copy_gbs, h2d_gbs;
    size_t read_bytes, h2d_bytes;
};

static int measure_gpu(const struct opts *o, struct gpu_result *r, char *err, size_t errlen)
{
    uint4 *a = NULL, *b = NULL;
    void *host = NULL;
    unsigned long long *sink = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    cudaStream_t st = NULL;
    struct cudaDeviceProp prop;
    size_t free_b = 0, total_b = 0, bytes = o->gpu_bytes;
    int sms = 0;
    float ms;
    CU(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    snprintf(r->name, sizeof r->name, "%s", prop.name);
    sms = prop.multiProcessorCount;
    CU(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    if (bytes > free_b / 4) bytes = free_b / 4;
    bytes &= ~(size_t)((1u << 20) - 1);
    if (bytes < (64u << 20)) {
        snprintf(err, errlen, "only %zu MiB of VRAM free", free_b >> 20);
        return -1;
    }
    CU(cudaMalloc((void **)&a, bytes), "cudaMalloc");
    CU(cudaMalloc((void **)&b, bytes), "cudaMalloc");
    CU(cudaMalloc((void **)&sink, sizeof *sink), "cudaMalloc");
    CU(cudaMemset(a, 1, bytes), "cudaMemset");
    CU(cudaEventCreate(&e0), "cudaEventCreate");
    CU(cudaEventCreate(&e1), "cudaEventCreate");
    CU(cudaStreamCreate(&st), "cudaStreamCreate");
    r->read_bytes = bytes;
    r->read_gbs = r->copy_gbs = r->h2d_gbs = 0;
    for (int rep = 0; rep <= o->reps; rep++) { /* rep 0 warms up */
        CU(cudaEventRecord(e0, st), "cudaEventRecord");
        read_kernel<<<sms * 8, 256, 0, st>>>(a, bytes / sizeof *a, sink);
        CU(cudaGetLastError(), "read kernel launch");
        CU(cudaEventRecord(e1, st), "cudaEventRecord");
        CU(cudaEventSynchronize(e1), "read kernel");
        CU(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
        if (rep && bytes / (ms * 1e6) > r->read_gbs) r->read_gbs = (double)bytes / (ms * 1e6);
        CU(cudaEventRecord(e0, st), "cudaEventRecord");
        CU(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st), "device copy");
        CU(cudaEventRecord(e1, st), "cudaEventRecord");
        CU(cudaEventSynchronize(e1), "device copy");
        CU(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
        /* a copy reads and writes every byte: 2 × bytes of traffic */
        if (rep && 2.0 * bytes / (ms * 1e6) > r->copy_gbs) r->copy_gbs = 2.0 * (double)bytes / (ms * 1e6);
    }
    r->h2d_bytes = o->h2d_bytes < bytes ? o->h2d_bytes : bytes;
    CU(cudaMallocHost(&host, r->h2d_bytes), "cudaMallocHost");
    memset(host, 1, r->h2d_bytes);
    for (int rep = 0; rep <= o->reps; rep++) {
        CU(cudaEventRecord(e0, st), "cudaEventRecord");
        CU(cudaMemcpyAsync(a, host, r->h2d_bytes, cudaMemcpyHostToDevice, st), "host-to-device copy");
        CU(cudaEventRecord(e1, st), "cudaEventRecord");
        CU(cudaEventSynchronize(e1), "host-to-device copy");
        CU(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
        if (rep && r->h2d_bytes / (ms * 1e6) > r->h2d_gbs) r->h2d_gbs = (double)r->h2d_bytes / (ms * 1e6);
    }
    cudaFreeHost(host);
    cudaFree(a);
    cudaFree(b);
    cudaFree(sink);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaStreamDestroy(st);
    return 0;
fail:
    if (host) cudaFreeHost(host);
    if (a) cudaFree(a);
    if (b) cudaFree(b);
    if (sink) cudaFree(sink);
    return -1;
}

/* ---- host RAM ---- */

struct ram_job {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
};

static void *ram_read(void *arg)
{
    struct ram_job *j = (struct ram_job *)arg;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    size_t i = 0;
    for (; i + 4 <= j->n; i += 4) {
        s0 += j->p[i];
        s1 += j->p[i + 1];
        s2 += j->p[i + 2];
        s3 += j->p[i + 3];
    }
    for (; i < j->n; i++) s0 += j->p[i];
    j->sum = s0 + s1 + s2 + s3;
    return NULL;
}

static int measure_ram(const struct opts *o, double *gbs, uint64_t *checksum, char *err, size_t errlen)
{
    size_t n = o->ram_bytes / sizeof(uint64_t);
    uint64_t *buf = NULL;
    if (posix_memalign((void **)&buf, 4096, n * sizeof *buf)) {
        snprintf(err, errlen, "cannot allocate %zu MiB of RAM", o->ram_bytes >> 20);
        return -1;
    }
    for (size_t i = 0; i < n; i++) buf[i] = i; /* touch every page before timing */
    pthread_t *th = (pthread_t *)calloc((size_t)o->threads, sizeof *th);
    struct ram_job *jobs = (struct ram_job *)calloc((size_t)o->threads, sizeof *jobs);
    if (!th || !jobs) {
        free(buf), free(th), free(jobs);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    *gbs = 0;
    for (int rep = 0; rep <= o->reps; rep++) {
        double t0 = now_s();
        int started = 0;
        for (int t = 0; t < o->threads; t++) {
            size_t a = n * (size_t)t / (size_t)o->threads, b = n * (size_t)(t + 1) / (size_t)o->threads;
            jobs[t] = (struct ram_job){buf + a, b - a, 0};
            if (pthread_create(&th[t], NULL, ram_read, &jobs[t])) break;
            started++;
        }
        for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
        double dt = now_s() - t0;
        if (started < o->threads) {
            free(buf), free(th), free(jobs);
            snprintf(err, errlen, "cannot start %d threads", o->threads);
            return -1;
        }
        *checksum = 0;
        for (int t = 0; t < o->threads; t++) *checksum += jobs[t].sum;
        if (rep && (double)(n * sizeof *buf) / (dt * 1e9) > *gbs) *gbs = (double)(n * sizeof *buf) / (dt * 1e9);
    }
    free(buf), free(th), free(jobs);
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {(size_t)2048 << 20, (size_t)1024 << 20, (size_t)2048 << 20, (int)sysconf(_SC_NPROCESSORS_ONLN), 5, false};
    for (int i = 1; i < argc; i++) {
        long v;
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--ram-only")) {
            o.ram_only = true;
        } else if (has_val && !strcmp(a, "--threads")) {
            if (parse_size(a, argv[++i], 1, 4096, &v)) return 2;
            o.threads = (int)v;
        } else if (has_val && !strcmp(a, "--reps")) {
            if (parse_size(a, argv[++i], 1, 1000, &v)) return 2;
            o.reps = (int)v;
        } else if (has_val && (!strcmp(a, "--gpu-mib") || !strcmp(a, "--h2d-mib") || !strcmp(a, "--ram-mib"))) {
            if (parse_size(a, argv[++i], 16, 1 << 20, &v)) return 2;
            size_t b = (size_t)v << 20;
            if (a[2] == 'g') o.gpu_bytes = b;
            else if (a[2] == 'h') o.h2d_bytes = b;
            else o.ram_bytes = b;
        } else {
            fprintf(stderr, "nebula-bench-bw: unknown or incomplete option '%s' (nebula-bench-bw --help)\n", a);
            return 2;
        }
    }
    char err[512] = "";
    struct gpu_result g;
    bool have_gpu = false;
    int n_dev = 0;
    if (!o.ram_only) {
        cudaError_t e = cudaGetDeviceCount(&n_dev);
        if (e != cudaSuccess || n_dev == 0) {
            fprintf(stderr, "SKIP: no CUDA device (%s): GPU and PCIe bandwidths not measured\n",
                    e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        } else if (measure_gpu(&o, &g, err, sizeof err)) {
            fprintf(stderr, "nebula-bench-bw: GPU: %s\n", err);
            return 1;
        } else {
            have_gpu = true;
        }
    }
    double ram_gbs;
    uint64_t checksum;
    if (measure_ram(&o, &ram_gbs, &checksum, err, sizeof err)) {
        fprintf(stderr, "nebula-bench-bw: RAM: %s\n", err);
        return 1;
    }
    printf("{\"gpu\": ");
    if (have_gpu)
        printf("{\"name\": \"%s\", \"read_gbs\": %.2f, \"copy_gbs\": %.2f, \"h2d_pinned_gbs\": %.2f, \"read_bytes\": %zu, "
               "\"h2d_bytes\": %zu}",
               g.name, g.read_gbs, g.copy_gbs, g.h2d_gbs, g.read_bytes, g.h2d_bytes);
    else
        printf("null");
    printf(", \"ram\": {\"read_gbs\": %.2f, \"threads\": %d, \"bytes\": %zu, \"checksum\": %llu}, \"reps\": %d}\n", ram_gbs,
           o.threads, o.ram_bytes, (unsigned long long)checksum, o.reps);
    return 0;
}
