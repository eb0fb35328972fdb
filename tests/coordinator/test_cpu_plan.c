/* test_cpu_plan.c — coordinator/cpu_plan.c: the cpu-moe-worker's threads and
 * the spin decision for the shapes that matter — the 16-core GPU host (spin,
 * 14 threads beside the CUDA gpu-worker's two host threads), the 2-core CI
 * machine (passive, as before), the CPU backend (15 of 16 threads, never
 * spins beside it), and the environment winning (OMP_NUM_THREADS,
 * OMP_WAIT_POLICY=passive). */
#include <criterion/criterion.h>

#include "coordinator/coord.h"

static struct coord_cpu_plan plan(int nproc, int threads, const char *num, const char *policy, bool cuda)
{
    struct coord_cpu_plan p;
    coord_cpu_plan(nproc, threads, num, policy, cuda, &p);
    cr_assert_eq(p.ring_spin_us, p.moe_spin ? COORD_RING_SPIN_US : 0u, "ring spin follows the OpenMP spin");
    return p;
}

Test(cpu_plan, gpu_host_leaves_the_host_threads_their_cores_and_spins)
{
    struct coord_cpu_plan p = plan(16, 0, NULL, NULL, true);
    cr_assert_eq(p.moe_threads, 14);
    cr_assert(p.moe_spin);
    p = plan(4, 0, NULL, NULL, true);
    cr_assert_eq(p.moe_threads, 2);
    cr_assert(p.moe_spin);
    p = plan(3, 0, NULL, NULL, true);
    cr_assert_eq(p.moe_threads, 2, "a team of two, not one thread");
    cr_assert_not(p.moe_spin, "2 + the two host threads do not fit 3 cores");
}

Test(cpu_plan, two_cores_stay_passive)
{
    struct coord_cpu_plan p = plan(2, 0, NULL, NULL, true);
    cr_assert_eq(p.moe_threads, 2, "no spare core on 2: every core computes");
    cr_assert_not(p.moe_spin);
    p = plan(1, 0, NULL, NULL, false);
    cr_assert_eq(p.moe_threads, 1);
    cr_assert_not(p.moe_spin);
    p = plan(2, 2, NULL, NULL, false); /* CI: --threads 2, the CPU backend */
    cr_assert_eq(p.moe_threads, 2);
    cr_assert_not(p.moe_spin);
}

Test(cpu_plan, cpu_backend_never_spins_beside_the_moe_worker)
{
    struct coord_cpu_plan p = plan(16, 0, NULL, NULL, false);
    cr_assert_eq(p.moe_threads, 15);
    cr_assert_not(p.moe_spin, "the CPU backend's team computes on every core between two requests");
    p = plan(16, 8, NULL, NULL, false); /* 8 + 8 fit */
    cr_assert_eq(p.moe_threads, 8);
    cr_assert(p.moe_spin);
}

Test(cpu_plan, threads_flag_and_environment_win)
{
    struct coord_cpu_plan p = plan(16, 15, NULL, NULL, true);
    cr_assert_eq(p.moe_threads, 15, "--threads is taken as given");
    cr_assert_not(p.moe_spin, "15 + the two host threads do not fit 16 cores");
    p = plan(16, 14, NULL, NULL, true);
    cr_assert(p.moe_spin);
    p = plan(16, 0, "14", NULL, true);
    cr_assert_eq(p.moe_threads, 0, "OMP_NUM_THREADS set: the worker's OpenMP reads it");
    cr_assert(p.moe_spin);
    p = plan(16, 0, "15", NULL, true);
    cr_assert_eq(p.moe_threads, 0);
    cr_assert_not(p.moe_spin);
    p = plan(16, 0, "junk", NULL, true); /* unreadable: counted as every core */
    cr_assert_eq(p.moe_threads, 0);
    cr_assert_not(p.moe_spin);
    p = plan(16, 0, NULL, "PASSIVE", true);
    cr_assert_eq(p.moe_threads, 14);
    cr_assert_not(p.moe_spin, "OMP_WAIT_POLICY=passive turns every spin off");
    p = plan(16, 0, NULL, "active", true);
    cr_assert(p.moe_spin);
}
