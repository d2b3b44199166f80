/*
 * bpfwalk.bpf.c - pyflame-record --bpf: sample Python stacks inside the
 * kernel, with no wake-up of the recorder per sample and no stop of the
 * target.
 *
 * Each CPU has a BPF timer, pinned to it, that fires once per sampling
 * period at an instant drawn uniformly within the period (the stratified
 * schedule of the user-space sampler, schedule.h: every instant equally
 * likely, so no periodic program can alias with it). It fires in the timer
 * interrupt's soft part on that CPU, in the context of the task it
 * interrupted. When that task is a thread of a recorded process, its thread
 * state is found (the entry the recorder made for it, or, for a thread too
 * new to have one, the GIL's holder when that is this very thread), its
 * frame chain copied (bpfwalk_chain.h: code object, instruction position,
 * owner, per frame) and sent through a ring buffer. The thread is not
 * running while it is read: its stack cannot change under the walk. The
 * recorder decodes code objects and lines and writes the samples.
 *
 * The timers are armed by `arm` (sys_enter, for the recorder's own thread
 * pinned to each CPU in turn) and re-arm themselves; the recorder detaches
 * `arm` once every CPU runs, and stopping is freeing the maps.
 */
#include <linux/bpf.h>
#include <linux/time.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "bpfwalk_shared.h"

/* Code objects the recorder has decoded (bpfwalk_shared.h), written by it. */
struct {
        __uint(type, BPF_MAP_TYPE_ARRAY);
        __uint(max_entries, BPFW_KNOWN_SETS);
        __type(key, __u32);
        __type(value, struct bpfw_known_set);
} known SEC(".maps");

static __always_inline int code_known(__u64 code, __u64 ident)
{
        __u32 i = bpfw_known_index(code);
        const struct bpfw_known_set *set = bpf_map_lookup_elem(&known, &i);
        return !set || bpfw_known_has(set, code, ident);
}

static __always_inline __u64 code_lasting(__u64 code)
{
        __u32 i = bpfw_known_index(code);
        const struct bpfw_known_set *set = bpf_map_lookup_elem(&known, &i);
        return set ? bpfw_known_lasting(set, code) : 0;
}

#define BPFW_CODE_KNOWN(code, ident) code_known((code), (ident))
#define BPFW_CODE_LASTING(code)      code_lasting(code)
#define BPFW_READ(dst, len, addr)    bpf_probe_read_user((dst), (len), (const void *)(addr))
#define BPFW_INLINE                  static __always_inline
#define BPFW_STEP_ATTR               static __noinline
#define BPFW_LOOP(n, fn, ctx)        bpf_loop((n), (fn), (ctx), 0)
#include "bpfwalk_chain.h"

char LICENSE[] SEC("license") = "GPL";

#ifndef BPF_F_TIMER_CPU_PIN
#define BPF_F_TIMER_CPU_PIN (1ULL << 1)
#endif

/* Set by the recorder before loading. */
volatile const __u32 native_bytes = 0;       /* --native: stack bytes to copy, 0: none */
volatile const __u64 ns_dev = 0, ns_ino = 0; /* its PID namespace */
volatile const __u32 arm_tgid = 0;           /* its own process (host PID), for `arm` */
volatile const __u64 period_ns = 10000000;
volatile const __u64 start_ns = 0; /* the schedule's origin */
/* Written by the recorder while running. */
volatile __u32 stopping = 0;

struct {
        __uint(type, BPF_MAP_TYPE_ARRAY);
        __uint(max_entries, BPFW_MAX_CPUS);
        __type(key, __u32);
        __type(value, struct bpfw_cpu);
} cpus SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_HASH);
        __uint(max_entries, BPFW_MAX_PROCS);
        __type(key, __u32);
        __type(value, struct bpfw_proc);
} procs SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_HASH);
        __uint(max_entries, BPFW_MAX_THREADS);
        __type(key, __u32);
        __type(value, struct bpfw_thread);
} threads SEC(".maps");

/* Where an event is built (larger than a BPF stack), and a frame's window. */
struct scratch {
        struct bpfw_event e;
        __u8 buf[BPFW_SCRATCH];
        __u8 cobuf[BPFW_CO_SCRATCH];
};

struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, struct scratch);
} scratch SEC(".maps");

/* --native: where a capture is built, one per CPU (the recorder sizes it). */
struct {
        __uint(type, BPF_MAP_TYPE_ARRAY);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, struct bpfw_native);
} nscratch SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_RINGBUF);
        __uint(max_entries, 8 << 20);
} events SEC(".maps");

#define PF_EXITING 0x4 /* include/linux/sched.h: the task is in do_exit() */

#if defined(__TARGET_ARCH_x86)
/* pthread_self() is the thread's FS base on x86-64 (glibc and musl). */
struct thread_struct___pf {
        unsigned long fsbase;
} __attribute__((preserve_access_index));
struct task_struct___pf {
        unsigned int flags;
        struct thread_struct___pf thread;
} __attribute__((preserve_access_index));

static __always_inline __u64 current_pthread(void)
{
        struct task_struct___pf *t = (void *)bpf_get_current_task();
        return BPF_CORE_READ(t, thread.fsbase);
}
#else
struct task_struct___pf {
        unsigned int flags;
} __attribute__((preserve_access_index));

static __always_inline __u64 current_pthread(void)
{
        return 0;
}
#endif

/*
 * The thread is ending, in the kernel (its memory may be gone already, so
 * nothing of it reads): its Python ended before, this is not Python's time.
 */
static __always_inline int current_exiting(void)
{
        struct task_struct___pf *t = (void *)bpf_get_current_task();
        return BPF_CORE_READ(t, flags) & PF_EXITING;
}

#if defined(__TARGET_ARCH_x86)
struct pt_regs___pf {
        unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di, ip, sp;
} __attribute__((preserve_access_index));

/*
 * --native: the interrupted thread's user registers (saved where it
 * entered the kernel: the interrupt itself, or the system call it is in)
 * and its stack from SP up, page by page until a page cannot be read (the
 * end of the stack, or one not resident), sent ahead of its sample.
 */
static __always_inline void native_send(__u32 pid, __u32 tid, __u16 flags, struct bpfw_cpu *c)
{
        if (!native_bytes)
                return;
        __u32 cpu = bpf_get_smp_processor_id();
        struct bpfw_native *nv = bpf_map_lookup_elem(&nscratch, &cpu);
        if (!nv)
                return;
        /* (A BTF pointer: its fields are loaded directly, each relocated by CO-RE.) */
        struct pt_regs___pf *r = (void *)bpf_task_pt_regs(bpf_get_current_task_btf());
        if (!r)
                return;
        nv->time_ns = bpf_ktime_get_ns();
        nv->pid = pid;
        nv->tid = tid;
        nv->flags = BPFW_F_NATIVE | flags;
        nv->status = BPFW_OK;
        nv->regs[0] = r->ax;
        nv->regs[1] = r->dx;
        nv->regs[2] = r->cx;
        nv->regs[3] = r->bx;
        nv->regs[4] = r->si;
        nv->regs[5] = r->di;
        nv->regs[6] = r->bp;
        nv->regs[7] = r->sp;
        nv->regs[8] = r->r8;
        nv->regs[9] = r->r9;
        nv->regs[10] = r->r10;
        nv->regs[11] = r->r11;
        nv->regs[12] = r->r12;
        nv->regs[13] = r->r13;
        nv->regs[14] = r->r14;
        nv->regs[15] = r->r15;
        nv->regs[16] = r->ip;
        __u64 sp = nv->regs[7];
        __u32 want = native_bytes < BPFW_NATIVE_MAX ? native_bytes : BPFW_NATIVE_MAX;
        __u32 got = 0;
        for (int i = 0; i < BPFW_NATIVE_MAX / BPFW_NATIVE_PAGE + 1; i++) {
                if (got >= want)
                        break;
                __u64 a = sp + got;
                /* To the end of this page, 1 to a page of bytes. */
                __u32 size = BPFW_NATIVE_PAGE - (__u32)(a & (BPFW_NATIVE_PAGE - 1));
                if (size > want - got)
                        size = want - got;
                /*
                 * Bounded again where the call is, in a form the verifier
                 * follows (the compiler would otherwise fold it away).
                 */
                __u32 off = got;
                asm volatile("" : "+r"(size), "+r"(off));
                size = ((size - 1) & (BPFW_NATIVE_PAGE - 1)) + 1;
                off &= BPFW_NATIVE_MAX - 1;
                if (bpf_probe_read_user(nv->stack + off, size, (const void *)a) < 0)
                        break;
                got += size;
        }
        nv->len = got;
        if (!got)
                nv->status = BPFW_FAULT;
        __u64 size = BPFW_NATIVE_HEAD + (__u64)got;
        if (size > sizeof(*nv))
                size = sizeof(*nv);
        /* Never a wake-up of its own: the sample that follows decides (sample()). */
        if (bpf_ringbuf_output(&events, nv, size, BPF_RB_NO_WAKEUP) < 0)
                c->lost++;
}
#else
static __always_inline void native_send(__u32 pid, __u32 tid, __u16 flags, struct bpfw_cpu *c)
{
}
#endif

/* Whether the GIL is held, and by whom (0: unknown or not held). */
static __always_inline __u64 gil_holder(const struct bpfw_proc *p, __u16 *flags)
{
        __u64 holder = 0;
        __s32 locked = 1;
        if (!p->gil_holder_addr || (p->flags & BPFW_P_NO_GIL))
                return 0;
        if (bpf_probe_read_user(&holder, 8, (const void *)p->gil_holder_addr) < 0)
                return 0;
        if (p->gil_locked_addr &&
            bpf_probe_read_user(&locked, 4, (const void *)p->gil_locked_addr) < 0)
                return 0;
        *flags |= BPFW_F_GIL_KNOWN;
        return locked ? holder : 0;
}

static __always_inline void sample(struct bpfw_cpu *c)
{
        struct bpf_pidns_info ns;
        if (bpf_get_ns_current_pid_tgid(ns_dev, ns_ino, &ns, sizeof(ns)))
                return;
        __u32 pid = ns.tgid, tid = ns.pid;
        const struct bpfw_proc *p = bpf_map_lookup_elem(&procs, &pid);
        if (!p)
                return;
        if (current_exiting()) {
                c->not_python++;
                return;
        }
        __u32 zero = 0;
        struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
        if (!s)
                return;
        struct bpfw_event *e = &s->e;
        e->time_ns = bpf_ktime_get_ns();
        e->pid = pid;
        e->tid = tid;
        e->flags = 0;
        e->depth = 0;
        e->tstate = 0;
        e->thread_id = 0;
        e->status = BPFW_OK;
        __u64 holder = gil_holder(p, &e->flags);
        const struct bpfw_thread *th = bpf_map_lookup_elem(&threads, &tid);
        __u64 tstate = th ? th->tstate : 0, thread_id = 0;
        if (tstate && bpf_probe_read_user(&thread_id, 8,
                                          (const void *)(tstate + (__s64)p->L.ts_thread_id)) < 0)
                thread_id = th->thread_id; /* not resident: the walk will say so */
        else if (tstate && thread_id != th->thread_id)
                tstate = 0; /* the entry is stale: the state went to another thread */
        __u64 self = 0;
        if (!tstate && holder) {
                /* A thread the recorder has not seen yet: it is the holder if ids agree. */
                self = current_pthread();
                if (self &&
                    bpf_probe_read_user(&thread_id, 8,
                                        (const void *)(holder + (__s64)p->L.ts_thread_id)) == 0 &&
                    thread_id == self) {
                        tstate = holder;
                        e->flags |= BPFW_F_BY_GIL;
                }
        }
        if (!tstate) {
                /* Not the holder either: its interpreter's list says which state is its own. */
                if (!self)
                        self = current_pthread();
                int found = bpfw_find_thread(p, self, &tstate);
                if (found == 0) {
                        c->not_python++; /* no Python state: not Python's time */
                        native_send(pid, tid, BPFW_F_NO_PYTHON, c); /* but C's, under --native */
                        return;
                }
                if (found > 0) {
                        thread_id = self;
                        e->flags |= BPFW_F_BY_LIST;
                }
        }
        c->samples++;
        native_send(pid, tid, 0, c);
        if (!tstate) {
                e->status = th ? BPFW_STALE : BPFW_NO_THREAD;
        } else {
                e->tstate = tstate;
                e->thread_id = thread_id;
                if (holder == tstate)
                        e->flags |= BPFW_F_GIL_HELD;
                bpfw_walk(&p->L, tstate, e, s->buf, s->cobuf);
        }
        __u32 depth = e->depth;
        if (depth > BPFW_MAX_DEPTH)
                depth = BPFW_MAX_DEPTH;
        __u64 size = BPFW_EVENT_HEAD + (__u64)depth * sizeof(struct bpfw_frame);
        if (size > sizeof(*e))
                size = sizeof(*e);
        /*
         * The recorder is woken only once the ring is a quarter full: else it
         * takes the events at its own pace (bpfwalk_wait()), and a sample
         * costs no wake-up.
         */
        __u64 fill = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
        __u64 flags = fill > bpf_ringbuf_query(&events, BPF_RB_RING_SIZE) / 4 ? BPF_RB_FORCE_WAKEUP
                                                                              : BPF_RB_NO_WAKEUP;
        /*
         * Or at once when the walk met a code object the recorder does not
         * know yet, which may be freed in a few milliseconds (a module's
         * body); at most once a millisecond per CPU.
         */
        if ((e->flags & BPFW_F_NEW_CODE) && e->time_ns - c->woke_ns >= BPFW_WAKE_GAP_NS) {
                flags = BPF_RB_FORCE_WAKEUP;
                c->woke_ns = e->time_ns;
                c->wakeups++;
        }
        if (bpf_ringbuf_output(&events, e, size, flags) < 0)
                c->lost++;
}

/*
 * One sample, then the next instant: uniform within the next slot (slots of
 * period_ns from start_ns); a slot already passed is counted late, not
 * sampled.
 */
static int on_timer(void *map, __u32 *key, struct bpfw_cpu *c)
{
        __u64 t0 = bpf_ktime_get_ns();
        if (stopping)
                return 0;
        c->fires++;
        __u64 found = c->samples;
        sample(c);
        __u64 now = bpf_ktime_get_ns();
        if (c->samples != found)
                c->sample_ns += now - t0;
        __u64 period = period_ns ? period_ns : 1;
        __u64 next = c->slot + period;
        if (now >= next + period) {
                __u64 skip = (now - next) / period;
                c->late += skip;
                next += skip * period;
        }
        c->slot = next;
        __u64 due = next + (bpf_get_prandom_u32() * period >> 32);
        bpf_timer_start(&c->timer, due > now ? due - now : 0, c->pin_flags);
        c->run_ns += bpf_ktime_get_ns() - t0;
        return 0;
}

SEC("tp_btf/sys_enter")
int arm(__u64 *ctx)
{
        if ((__u32)(bpf_get_current_pid_tgid() >> 32) != arm_tgid)
                return 0;
        __u32 cpu = bpf_get_smp_processor_id();
        struct bpfw_cpu *c = bpf_map_lookup_elem(&cpus, &cpu);
        if (!c || c->armed)
                return 0;
        if (bpf_timer_init(&c->timer, &cpus, CLOCK_MONOTONIC) < 0)
                return 0;
        bpf_timer_set_callback(&c->timer, on_timer);
        __u64 now = bpf_ktime_get_ns(), period = period_ns ? period_ns : 1;
        __u64 origin = start_ns && start_ns <= now ? start_ns : now;
        c->slot = origin + (now - origin) / period * period;
        __u64 due = c->slot + (bpf_get_prandom_u32() * period >> 32);
        __u64 delay = due > now ? due - now : 0;
        /* Pinned to this CPU where the kernel can (6.7+): else it may move when idle. */
        c->pin_flags = BPF_F_TIMER_CPU_PIN;
        if (bpf_timer_start(&c->timer, delay, c->pin_flags) < 0) {
                c->pin_flags = 0;
                if (bpf_timer_start(&c->timer, delay, 0) < 0)
                        return 0;
        }
        c->armed = cpu + 1;
        return 0;
}
