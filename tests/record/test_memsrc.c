/*
 * test_memsrc.c - unit tests of the two memory sources.
 *
 * Process mode reads this very process through process_vm_readv (its own
 * pid is a valid target): whole reads, reads that run off the end of a
 * mapping (short count, must fail), batched reads in one system call, a
 * batch with one bad range, batches larger than the kernel's iovec limit,
 * a dead pid and, as root, an unprivileged reader. Image mode gets the same
 * contract checked on synthetic regions.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <grp.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memsrc.h"

static long page_size(void)
{
        return sysconf(_SC_PAGESIZE);
}

static void test_process_read_self(void **state)
{
        static const char secret[] = "the quick brown fox";
        char buf[sizeof(secret)] = {0};
        struct memsrc m;
        memsrc_init_process(&m, getpid());
        assert_int_equal(memsrc_read(&m, (uintptr_t)secret, buf, sizeof(buf)), 0);
        assert_memory_equal(buf, secret, sizeof(secret));
        assert_int_equal(m.n_calls, 1);
        assert_int_equal(memsrc_read(&m, (uintptr_t)secret, buf, 0), 0);
        /* Address 0 is never mapped. */
        assert_int_equal(memsrc_read(&m, 0, buf, 8), -EFAULT);
        /* Wrapping around the address space. */
        assert_int_equal(memsrc_read(&m, UINT64_MAX - 2, buf, 8), -EFAULT);
}

/* Two pages, the second unmapped: a read across the boundary is a short read, i.e. -EFAULT. */
static void test_process_short_read(void **state)
{
        long pg = page_size();
        char *p = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(p != MAP_FAILED);
        assert_int_equal(munmap(p + pg, pg), 0);
        memset(p, 'a', pg);
        char buf[64];
        struct memsrc m;
        memsrc_init_process(&m, getpid());
        assert_int_equal(memsrc_read(&m, (uintptr_t)(p + pg - 32), buf, 32), 0);
        assert_int_equal(memsrc_read(&m, (uintptr_t)(p + pg - 32), buf, 64), -EFAULT);
        assert_int_equal(memsrc_read(&m, (uintptr_t)(p + pg), buf, 8), -EFAULT);
        munmap(p, pg);
}

static void test_process_readv(void **state)
{
        long pg = page_size();
        char *p = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(p != MAP_FAILED);
        assert_int_equal(munmap(p + pg, pg), 0);
        for (long i = 0; i < pg; i++)
                p[i] = (char)i;
        char a[16], b[100], c[8];
        struct memsrc m;
        memsrc_init_process(&m, getpid());
        struct memsrc_iov iov[3] = {
            {(uintptr_t)p, a, sizeof(a)},
            {(uintptr_t)(p + 1000), b, sizeof(b)},
            {(uintptr_t)(p + pg - 8), c, sizeof(c)},
        };
        assert_int_equal(memsrc_readv(&m, iov, 3), 0);
        assert_int_equal(m.n_calls, 1); /* one system call for the batch */
        assert_memory_equal(a, p, sizeof(a));
        assert_memory_equal(b, p + 1000, sizeof(b));
        assert_memory_equal(c, p + pg - 8, sizeof(c));

        /* The middle range runs off the mapping: the whole batch fails. */
        iov[1].addr = (uintptr_t)(p + pg - 50);
        assert_int_equal(memsrc_readv(&m, iov, 3), -EFAULT);
        /* The last range is wholly unmapped: the first two were read, still a failure. */
        iov[1].addr = (uintptr_t)(p + 1000);
        iov[2].addr = (uintptr_t)(p + pg);
        assert_int_equal(memsrc_readv(&m, iov, 3), -EFAULT);
        /* The first range is unmapped. */
        iov[0].addr = 8;
        iov[2].addr = (uintptr_t)p;
        assert_int_equal(memsrc_readv(&m, iov, 3), -EFAULT);
        /* Zero-length ranges are fine anywhere; an empty batch does nothing. */
        iov[0].len = 0;
        assert_int_equal(memsrc_readv(&m, iov, 3), 0);
        uint64_t calls = m.n_calls;
        assert_int_equal(memsrc_readv(&m, iov, 0), 0);
        assert_int_equal(m.n_calls, calls);
        munmap(p, pg);
}

/* More ranges than one process_vm_readv accepts (1024): split, all read. */
static void test_process_readv_large_batch(void **state)
{
        enum { N = 2500 };
        static uint32_t src[N], dst[N];
        static struct memsrc_iov iov[N];
        for (int i = 0; i < N; i++) {
                src[i] = (uint32_t)i * 2654435761u;
                dst[i] = 0;
                iov[i] = (struct memsrc_iov){(uintptr_t)&src[N - 1 - i], &dst[i], sizeof(dst[i])};
        }
        struct memsrc m;
        memsrc_init_process(&m, getpid());
        assert_int_equal(memsrc_readv(&m, iov, N), 0);
        assert_int_equal(m.n_calls, 3);
        for (int i = 0; i < N; i++)
                assert_int_equal(dst[i], src[N - 1 - i]);
        iov[N - 1].addr = 16;
        assert_int_equal(memsrc_readv(&m, iov, N), -EFAULT);
}

static void test_process_gone(void **state)
{
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
                _exit(0);
        assert_int_equal(waitpid(pid, NULL, 0), pid);
        static const char x[8] = "1234567";
        char buf[8];
        struct memsrc m;
        memsrc_init_process(&m, pid);
        assert_int_equal(memsrc_read(&m, (uintptr_t)x, buf, 8), -ESRCH);
        struct memsrc_iov iov = {(uintptr_t)x, buf, 8};
        assert_int_equal(memsrc_readv(&m, &iov, 1), -ESRCH);
}

static void test_process_permission(void **state)
{
        if (geteuid() != 0) {
                print_message("    needs root to drop to another user, skipped\n");
                skip();
        }
        static const char x[8] = "1234567";
        pid_t parent = getpid();
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0)
                        _exit(100);
                char buf[8];
                struct memsrc m;
                memsrc_init_process(&m, parent);
                _exit(-memsrc_read(&m, (uintptr_t)x, buf, 8));
        }
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), EPERM);
}

/* --- Image mode --------------------------------------------------------------------------- */

static const char region_a[] = "0123456789abcdef"; /* at 0x1000, 16 bytes + NUL */
static const char region_b[] = "ABCDEFGHIJKLMNOP"; /* at 0x1011: adjacent to a's NUL */
static const char region_c[] = "far away";         /* at 0x9000 */

static void image_init(struct memsrc *m, struct memsrc_region *r)
{
        r[0] = (struct memsrc_region){0x1000, region_a, sizeof(region_a)};
        r[1] = (struct memsrc_region){0x1000 + sizeof(region_a), region_b, sizeof(region_b)};
        r[2] = (struct memsrc_region){0x9000, region_c, sizeof(region_c)};
        memsrc_init_image(m, r, 3);
}

static void test_image_read(void **state)
{
        struct memsrc_region r[3];
        struct memsrc m;
        image_init(&m, r);
        char buf[64];
        assert_int_equal(memsrc_read(&m, 0x1004, buf, 4), 0);
        assert_memory_equal(buf, "4567", 4);
        assert_int_equal(memsrc_read(&m, 0x9000, buf, sizeof(region_c)), 0);
        assert_string_equal(buf, "far away");
        /* Across the two adjacent regions, like across two adjacent mappings. */
        assert_int_equal(memsrc_read(&m, 0x100e, buf, 6), 0);
        assert_memory_equal(buf, "ef\0ABC", 6);
        /* Past the end of b, into the gap: fails, and leaves the buffer alone. */
        memset(buf, 'z', sizeof(buf));
        assert_int_equal(memsrc_read(&m, 0x1020, buf, 8), -EFAULT);
        assert_int_equal(buf[0], 'z');
        assert_int_equal(memsrc_read(&m, 0xfff, buf, 2), -EFAULT);
        assert_int_equal(memsrc_read(&m, 0x5000, buf, 1), -EFAULT);
        assert_int_equal(memsrc_read(&m, UINT64_MAX, buf, 2), -EFAULT);
        assert_int_equal(memsrc_read(&m, 0x5000, buf, 0), 0);
        assert_int_equal(m.n_calls, 8);
}

static void test_image_readv(void **state)
{
        struct memsrc_region r[3];
        struct memsrc m;
        image_init(&m, r);
        char a[4], b[3], c[5];
        struct memsrc_iov iov[3] = {
            {0x1000, a, sizeof(a)},
            {0x9000, b, sizeof(b)},
            {0x1011, c, sizeof(c)},
        };
        assert_int_equal(memsrc_readv(&m, iov, 3), 0);
        assert_int_equal(m.n_calls, 1);
        assert_memory_equal(a, "0123", 4);
        assert_memory_equal(b, "far", 3);
        assert_memory_equal(c, "ABCDE", 5);
        /* One failing range fails the batch. */
        iov[1].addr = 0x9005; /* 3 bytes from 0x9005: "way" + NUL fits... */
        assert_int_equal(memsrc_readv(&m, iov, 3), 0);
        iov[1].addr = 0x9007; /* ...but from 0x9007 it runs off the region */
        assert_int_equal(memsrc_readv(&m, iov, 3), -EFAULT);

        /* Without a readv, memsrc_readv falls back to one read per range. */
        m.readv = NULL;
        m.n_calls = 0;
        iov[1].addr = 0x9000;
        assert_int_equal(memsrc_readv(&m, iov, 3), 0);
        assert_int_equal(m.n_calls, 3);
        iov[2].addr = 0x2000;
        assert_int_equal(memsrc_readv(&m, iov, 3), -EFAULT);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_process_read_self),
            cmocka_unit_test(test_process_short_read),
            cmocka_unit_test(test_process_readv),
            cmocka_unit_test(test_process_readv_large_batch),
            cmocka_unit_test(test_process_gone),
            cmocka_unit_test(test_process_permission),
            cmocka_unit_test(test_image_read),
            cmocka_unit_test(test_image_readv),
        };
        return cmocka_run_group_tests_name("memsrc", tests, NULL, NULL);
}
