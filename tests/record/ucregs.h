/*
 * ucregs.h - the registers getcontext() saved, in the order native.h's
 * captures take them (x86-64 DWARF numbers 0-16), for the tests and the
 * fuzzer that unwind their own stacks (test_native_self.c, fuzz_native.c).
 */
#ifndef PYFLAME_TEST_UCREGS_H
#define PYFLAME_TEST_UCREGS_H

#include <stdint.h>
#include <ucontext.h>

#include "native.h"

static inline void ucregs(const ucontext_t *uc, uint64_t regs[NATIVE_N_REGS])
{
        const greg_t *r = uc->uc_mcontext.gregs;
        static const int order[NATIVE_N_REGS] = {
            REG_RAX, REG_RDX, REG_RCX, REG_RBX, REG_RSI, REG_RDI, REG_RBP, REG_RSP, REG_R8,
            REG_R9,  REG_R10, REG_R11, REG_R12, REG_R13, REG_R14, REG_R15, REG_RIP};
        for (int i = 0; i < NATIVE_N_REGS; i++)
                regs[i] = (uint64_t)r[order[i]];
}

#endif
