/*
 * capture.h - a live interpreter's memory as the walker read it, kept in a
 * file so that a fuzzer can walk it again and again (fuzz_pytasks.c).
 *
 * capture_tasks.c stops a real asyncio program of each installed
 * interpreter, opens a walker on it with --async's task walk, samples it a
 * few times through a memory source that keeps every range it read, and
 * writes what it found (the interpreter as pyfind described it, and each
 * range merged into regions) to a file. The file is only ever read by the
 * build that wrote it (the target description is raw struct bytes).
 *
 * File: "PFCAP1\0\0"; u32 sizeof(struct pyfind_target); the struct; u32
 * samples taken; u32 tasks and u32 threads the last sample found; u32
 * regions; per region, sorted by address and disjoint: u64 address, u64
 * length, the bytes. Little-endian, as the host.
 */
#ifndef PYFLAME_TEST_CAPTURE_H
#define PYFLAME_TEST_CAPTURE_H

#include <stdint.h>

#define CAPTURE_MAGIC   "PFCAP1\0\0"
#define CAPTURE_SAMPLES 3 /* samples taken: the walker's first and steady reads */

#endif
