/* cpu_plan.c — how the cpu-moe-worker and the gpu-worker share the CPU cores:
 * the cpu-moe-worker's thread count and whether the two spin while they wait.
 *
 * The key idea: spinning is what makes a decode token fast and what makes an
 * oversubscribed machine slow, so it is decided once, from the cores, here.
 * A decode token sends the cpu-moe-worker one request per layer with 50 µs–
 * 1 ms of GPU work between two of them.  With sleeping waits each request
 * begins with futex wake-ups of the whole OpenMP team and of the ring's
 * waiter, and ends with one for the gpu-worker; with spinning waits everyone
 * is still on its core.  But a spinner holds a core: on 2 cores with three
 * processes, libgomp's spinning wait measured 371 vs 1332 tok/s (passive)
 * all-RAM (docs/BENCHMARKS.md), and the ring bench's p99 grew from ~40 to
 * ~200 µs.  The rule:
 *
 *   threads  --threads when given; else OMP_NUM_THREADS's own (0 is sent:
 *            the worker's OpenMP reads it); else, when nproc > 2, nproc
 *            less the gpu-worker's host threads that wait while the experts
 *            are computed (at least 2) — an OpenMP thread sharing a core
 *            with one of them gets preempted and holds the team at the
 *            barrier for a scheduler slice; else nproc.  Host threads: the
 *            CUDA backend's two (the doorbell's remote thread spins on the
 *            mailbox, then on the moe ring; the main thread waits on the
 *            stream, yielding), the CPU backend's one (its ring wait).
 *   spin     when the cpu-moe-worker's threads plus the gpu-worker's busy
 *            threads fit in nproc: the CUDA backend's two host threads, the
 *            CPU backend's whole team (the two alternate, and a team that
 *            spins on the cores the other one computes on is the 2-core
 *            case above).  The ssd-pager is not counted: it waits for its
 *            reads in the kernel.  Spinning means: the cpu-moe-worker starts
 *            without OMP_WAIT_POLICY=passive (libgomp's default, a bounded
 *            spin of ~300k polls, then sleep), and both workers' ring waits
 *            spin COORD_RING_SPIN_US (configure's ring_spin_us) — the
 *            cpu-moe-worker's counted from its last request, so an idle
 *            worker sleeps.  Not spinning is the previous behaviour: passive
 *            OpenMP, the rings' 50 µs spin.
 *
 * An OMP_WAIT_POLICY or OMP_NUM_THREADS in the environment is passed on
 * untouched and the plan follows it: OMP_WAIT_POLICY=passive turns every
 * spin off. */
#include "coordinator/coord.h"

#include <stdlib.h>
#include <strings.h>

void coord_cpu_plan(int nproc, int threads, const char *omp_num_threads, const char *omp_wait_policy, bool gw_cuda,
                    struct coord_cpu_plan *p)
{
    if (nproc < 1) nproc = 1;
    const int host = gw_cuda ? 2 : 1; /* the gpu-worker's threads waiting for the experts */
    int moe = nproc; /* the threads the cpu-moe-worker will run */
    int env = omp_num_threads ? atoi(omp_num_threads) : 0;
    if (threads > 0) p->moe_threads = moe = threads;
    else if (omp_num_threads && *omp_num_threads) p->moe_threads = 0, moe = env > 0 ? env : nproc;
    else p->moe_threads = moe = nproc <= 2 ? nproc : nproc - host >= 2 ? nproc - host : 2;
    int gw_busy = gw_cuda ? host : threads > 0 ? threads : nproc;
    bool passive = omp_wait_policy && !strcasecmp(omp_wait_policy, "passive");
    p->moe_spin = !passive && moe + gw_busy <= nproc;
    p->ring_spin_us = p->moe_spin ? COORD_RING_SPIN_US : 0;
}
