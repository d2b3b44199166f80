-- trace.sql - the pyflame trace file format, format version 2.
--
-- This comment is the specification; the statements below it create an
-- empty trace. libtrace embeds this file and runs it when it creates a trace
-- (`sqlite3 new.db < schema/trace.sql` makes the same empty trace).
--
-- A trace is ONE SQLite 3 database file, written with a rollback journal
-- (never WAL), so a finished trace is a single self-contained file that can
-- be copied. It is stamped in the SQLite header:
--   PRAGMA application_id = 1348027986  (0x50594652, ASCII "PYFR")
--   PRAGMA user_version   = 2           (TRACE_FORMAT_VERSION in trace.h)
-- Readers refuse a file with another application_id (not a trace) and a file
-- whose user_version is higher than the newest they know (written by a newer
-- pyflame). Any change a reader of version N could misread bumps the version.
-- Additions a version-1 reader ignores safely do not: the recordings and
-- recording_meta tables and the recording and source_pid columns of
-- processes came later within version 1 (a reader of a merged trace that
-- does not know them sees one recording with more processes). Readers take
-- files without them as single recordings. So did the sources table (and
-- source_encodings): a reader that does not know it shows no stored source,
-- and readers take a file without it as one that stores none.
-- Version 2 added asyncio task streams (threads.task_of, task_addr, frame
-- kind 3: a version-1 reader would count them as threads) and native
-- frames (frames.module and frames.module_offset, error kind 4: a version-1
-- reader would show them without the binary they belong to). Readers of
-- version 2 read version-1 files as traces without tasks or native frames.
--
-- Units and conventions
--   *_ns columns are nanoseconds. Sample, chunk, thread and process times are
--   relative to the recording's start: CLOCK_MONOTONIC minus meta start_mono_ns
--   (so they may in principle be slightly negative). Wall-clock times are
--   nanoseconds since the Unix epoch (UTC).
--   Integers are SQLite INTEGER (signed 64 bit). NULL means "unknown"
--   wherever a column allows it.
--   Ids are dense: strings and frames count from 1, stacks from 0, thread
--   references from 1, sample_chunks from 1, each with no gaps.
--   The writer commits about once a second in one transaction, so every
--   committed state is consistent: a trace whose recorder was killed holds
--   everything up to its last commit. A finished trace has meta end_wall_ns.
--
-- Frozen codes (numbers stored on disk; never renumbered, new ones appended)
--   frames.kind         0 python   a Python function frame
--                       1 native   a native (C) frame
--                       2 special  a pseudo frame made by pyflame, e.g. "<unknown>"
--                       3 task     an asyncio task (version 2): function its name,
--                                  file "<task>", line NULL
--   thread state flags  0x1 on_cpu     the OS thread was running (R) when sampled
--   (a bit set)         0x2 holds_gil  held the GIL (free-threaded: attached)
--                       0x4 no_gil     the interpreter runs without a GIL
--   errors.kind         0 torn   the stack changed under the reader; sample dropped
--                       1 read   a memory read failed
--                       2 late   the sampler missed its deadline (one per missed tick)
--                       3 other
--                       4 unmatched  a native stack (--native) that its Python stack could
--                                    not be merged into; sample dropped
--                       5 not_resident  --bpf: a page the in-kernel walk needed was not
--                                    resident (no page faults in an interrupt); sample dropped
--                       6 truncated  a stack cut short; the sample keeps the innermost
--                                    frames: --bpf, deeper than the in-kernel walk's bound
--                                    (256 frames); --native, a native unwind that could not
--                                    reach the stack's root (a register its CFI needs not
--                                    known) or deeper than 512 frames
--                       7 invalid    --bpf: a thread of the process whose thread state the
--                                    walk could not find or validate; sample dropped
--                       8 code_gone  --bpf: a code object of the stack was freed (or another
--                                    built at its address) before the recorder could read
--                                    it, as a module body's right after its import; dropped
--   sources.encoding    0 plain  data is the text itself
--                       1 zlib   data is a zlib stream (RFC 1950) of the text
--   Readers fold an errors.kind they do not know into 3 (other), and treat a
--   source whose encoding they do not know as absent.
--   The tables frame_kinds, state_flags, error_kinds and source_encodings
--   hold the same codes with their names, for joins in plain SQL.
--
-- Tables
--   meta(key, value)            one row per key; value is TEXT or INTEGER.
--     Written by libtrace at create:
--       format_version  INTEGER  = user_version
--       tool_version    TEXT     pyflame version that wrote the file, "0.1.0"
--       host            TEXT     host name (uname nodename)
--       kernel          TEXT     uname: sysname release version machine
--       start_wall_ns   INTEGER  wall clock at the start
--       start_mono_ns   INTEGER  CLOCK_MONOTONIC at the start (the time origin)
--     Kept current at every commit:
--       samples         INTEGER  samples committed so far
--       errors          INTEGER  sampling errors counted so far (all kinds)
--     Written by libtrace when the recording is finalized:
--       end_wall_ns     INTEGER  wall clock at the end
--       end_mono_ns     INTEGER  CLOCK_MONOTONIC at the end
--       duration_ns     INTEGER  end_mono_ns - start_mono_ns
--     Set by the recorder:
--       rate_hz         TEXT/INTEGER  requested sampling rate, samples/s per thread
--       mode            TEXT     "nonblocking" or "blocking" (target stopped per sample)
--       schedule        TEXT     the sampling instants: "stratified" (one uniform
--                                instant per period) or "poisson" (exponential
--                                gaps of one period on average: --blocking);
--                                absent in files written before 2026-12-04
--                                (stratified)
--       native          TEXT     "merged" (pyflame-record --native: native stacks
--                                merged in, the interpreter's plumbing hidden) or
--                                "all" (--native-all); absent without native stacks
--       pids            TEXT     recorded pids, space-separated
--       cmdline         TEXT     command line of the (first) target
--       python_version  TEXT     e.g. "3.12.1"
--       python_build    TEXT     e.g. "shared", "static,free-threaded"
--       source_files    INTEGER  source files stored in sources (absent with
--                                pyflame-record --no-source)
--       source_bytes    INTEGER  their text, bytes (before compression)
--       source_skipped  INTEGER  files of sampled frames not stored: not
--                                readable by the target's user, absent, not
--                                text, over the size limits
--       async           INTEGER  1: recorded with asyncio tasks (--async)
--       task_samples    INTEGER  samples of task streams committed so far
--       segment_set     TEXT     the recording this file is a part of, when the
--                                recorder rotates (--rotate, --ring, SIGUSR2): the
--                                same in every file of one recording
--       segment         INTEGER  this file's number in it, 2.. (absent: 1); each
--                                file starts where the one before ended (its
--                                start_mono_ns is the previous file's
--                                end_mono_ns) and shares its ids: every string,
--                                frame and stack of an earlier file has the
--                                same id and content here. Not threads: a file
--                                holds only the threads (and tasks' streams)
--                                with samples in it or named anew, refs dense
--                                from 1 in its own order (segment 1: in the
--                                recorder's order); the same stream is the same
--                                (pid, tid, python_thread_id) or, for a task's,
--                                the same thread and task_addr. Nor processes:
--                                those alive at its start, those that came or
--                                ended in it, and those of its threads; a
--                                later file's row of a pid is the newer
--       segments        TEXT     in a trace joined from such files
--                                (pyflame-report join, snapshots): "FIRST-LAST"
--       gaps            TEXT     in the temporary trace a reader joins to read
--                                a set with files missing (trace_reader_open_
--                                set; never in a file left on disk): per gap
--                                "FROM_NS,TO_NS,FIRST,LAST", ';' between gaps,
--                                the time no file covers on this trace's time
--                                line and the segments missing
--     Other keys may appear; readers ignore keys they do not know.
--
--   strings(id, value)          interned text (function names, file names).
--     id INTEGER 1.., value TEXT (UTF-8).
--
--   frames(id, function, qualname, file, line, first_line, kind, module,
--          module_offset)
--     One row per distinct (function, qualname, file, line, first_line, kind,
--     module, module_offset).
--     function, file: strings.id (NOT NULL); qualname: strings.id or NULL;
--     line: the current line number, NULL when unknown; first_line: the
--     function's first line, NULL when unknown; kind: frozen code above.
--     A native frame (kind 1) names its function by symbol (C++ names as
--     the symbol table holds them, mangled), or "MODULE+0xOFFSET" when no
--     symbol covers the address; file and line are the source position
--     from DWARF where the binary or its debug file has it, else file is the
--     module's path and line NULL. module: strings.id of the path of the
--     shared object or executable as the target mapped it; module_offset:
--     the ELF address in that file (as addr2line takes it) of the
--     function's start, or of the instruction when no symbol covers it.
--     Both are NULL for other kinds, and absent from files of format 1
--     (which hold no native frames).
--
--   stacks(id, parent, frame, depth)
--     A prefix tree of call stacks. Stack 0 is the empty stack (parent, frame
--     NULL, depth 0); every other stack is its parent stack (the callers,
--     parent < id) with `frame` called on top; depth = parent's depth + 1.
--     A stack's frames, root first, are found by following parent links.
--
--   processes(pid, cmdline, python_version, python_build, exit_status, end_ns,
--             recording, source_pid)
--     One row per recorded pid (host pid namespace). exit_status and end_ns
--     (relative time the process ended) are NULL while unknown.
--     recording and source_pid say where a process of a merged trace came
--     from: recordings.id, and its pid on that recording's host. Both are
--     NULL in a trace that is a single recording (then meta describes it and
--     pid is the real pid). In a merged trace pid is the trace-wide key of
--     the process: its source pid, unless an earlier recording already had
--     that pid; then a pid above 4194304 (Linux's PID_MAX_LIMIT, which no
--     real pid reaches) is made up, so that colliding pids stay distinct.
--
--   recordings(id, file, host, start_wall_ns, duration_ns, offset_ns, samples)
--     Empty unless the trace was merged from several (pyflame-report merge):
--     then one row per source recording, ids 1.. dense. file: the file it
--     was merged from, as named to the merge; host: its meta host;
--     start_wall_ns, duration_ns: its meta (NULL when unknown); offset_ns:
--     where its time 0 lies on this trace's time line (0 when the sources
--     were aligned at their starts, the difference of wall-clock starts when
--     aligned by wall clock); samples: its samples. The merged trace's meta
--     describes the whole: start_wall_ns the earliest start, duration_ns the
--     latest end, host (and kernel, mode, python_version, python_build,
--     cmdline) the sources' distinct values joined by ", ", rate_hz only when
--     every source had the same, pids the trace-wide pids.
--
--   recording_meta(recording, key, value)
--     Every meta row of each source recording, as it was in that file.
--
--   threads(ref, pid, tid, python_thread_id, name, first_ns, last_ns, samples,
--           task_of, task_addr)
--     Two rows may be one thread (the same pid, tid and python_thread_id):
--     the recorder lost sight of it and found it again; reports of a set of
--     files take them as one, a report of one file as two.
--     ref: the reference samples carry (1..); pid: processes.pid; tid: OS
--     thread id in the recorder's namespace or NULL; python_thread_id: the
--     threading.get_ident() value (a pthread_t, stored as signed 64 bit) or
--     NULL; name or NULL; first_ns/last_ns: relative times of its first and
--     last sample (NULL before the first); samples: its committed samples.
--     task_of, task_addr (version 2): NULL for a thread. A row with task_of
--     set is not a thread but the stream of an asyncio task (recorded with
--     pyflame-record --async) run by the event loop of thread task_of (a
--     thread's ref; pid, tid and python_thread_id are that thread's), name
--     the task's name, task_addr the address of its Task object in the
--     target (signed 64 bit). Each of its samples says that the task was
--     alive (pending) then, in the sample's stack: the frames of the tasks
--     awaiting it, root task first, each task's frames under a frame of kind
--     task naming it, ending with its own await chain (innermost last); a
--     task running at that instant has its thread's stack from its coroutine
--     on instead. Counting a task's samples weighs wall time per task, not
--     CPU: every live task counts once per sample. Task samples are in
--     sample_chunks like a thread's, but not in stack_counts nor in meta
--     samples (meta task_samples counts them).
--
--   errors(pid, kind, count)    sampling errors per process (pid 0: the
--     recorder itself) and kind; count is the total so far.
--
--   stack_counts(stack, state, samples)
--     Derived summary kept current at each commit: the number of samples,
--     of all threads, taken in stack `stack` with state flags `state` (rows
--     with 0 samples are absent). It lets plain SQL answer "hot frames" and
--     "hot stacks, on CPU only" without decoding sample blobs; the sum of
--     samples equals the number of samples in sample_chunks. Per-thread and
--     per-time questions need the samples themselves (pyflame_samples).
--
--   sources(file, size, mtime_ns, encoding, data)
--     The text of the source files of recorded frames, so that a report shows
--     the code on any machine. One row per file: file is the strings.id of
--     the name frames give it (frames.file); size the length of the text in
--     bytes, at most 16 MiB (TRACE_SOURCE_MAX_BYTES); mtime_ns the file's
--     modification time when it was read (for a member of a zip archive, the
--     member's time stamp), wall clock, NULL when unknown; encoding a frozen
--     code (above) saying how the BLOB data holds the text: plain, or zlib
--     when that is smaller (`CAST(data AS TEXT)` shows a plain one in SQL).
--     The text is the file's bytes as they were, usually UTF-8 (a coding
--     cookie may say otherwise), with no NUL byte; a row that inflates to
--     another size or holds a NUL is a damaged trace. Files are read when a
--     frame of theirs is first sampled, not when the process loaded them: a
--     file changed in between is stored as it is then, and nothing in the
--     trace can tell. mtime_ns and size are kept so that a reader can at
--     least see a change during the recording (an mtime_ns after meta
--     start_wall_ns). pyflame-record stores only what the target's own user
--     could read, at most 1 MiB a file and 64 MiB a trace by default.
--
--   A sample's origin is its thread's process: samples -> threads.pid ->
--   processes.recording -> recordings (host, file) and processes.source_pid.
--
--   sample_chunks(id, thread, first_ns, last_ns, count, data)
--     The samples. One row holds `count` (>= 1) consecutive samples of one
--     thread (threads.ref), in time order; first_ns and last_ns are the
--     relative times of its first and last sample. A thread's chunks do not
--     overlap in time and are stored in increasing id order.
--     data is a BLOB of `count` records, back to back, each:
--       A       unsigned LEB128 varint (7 bits per byte, least significant
--               group first, high bit set on every byte but the last; at
--               most 10 bytes) holding (dt << 1) | same, where dt >= 0 is
--               the sample time minus the previous sample's time in this
--               chunk, in ns (for the first record: minus first_ns, so 0).
--       B       present only when same = 0: a varint holding
--               (stack << 3) | state, stack being a stacks.id and state the
--               thread state flags.
--       same = 1 means stack and state are those of the previous record
--       (never on the first record of a chunk).
--     Example: a first sample in stack 5 with state 0x3, then one 10 ms later
--     in the same stack and state:
--       00 2B            A: dt 0, same 0;  B: 5<<3|3 = 43
--       81 DA C4 09      A: (10000000<<1)|1 = 20000001
--     A chunk is valid when its blob holds exactly `count` records, every
--     stack id is < the number of stacks, the last record's time is last_ns,
--     and first_ns <= last_ns. Anything else is a damaged trace.
--
-- Example queries in plain SQL and with the pyflame_sqlite extension (which
-- decodes sample_chunks as a table pyflame_samples(t_ns, thread, stack,
-- state)) are in libtrace/EXAMPLES-SQL.md.

PRAGMA page_size = 4096;

BEGIN;

PRAGMA application_id = 1348027986;
PRAGMA user_version = 2;

CREATE TABLE meta (
        key TEXT PRIMARY KEY NOT NULL,
        value
) WITHOUT ROWID;

CREATE TABLE strings (
        id INTEGER PRIMARY KEY,
        value TEXT NOT NULL
);

CREATE TABLE frames (
        id INTEGER PRIMARY KEY,
        function INTEGER NOT NULL REFERENCES strings(id),
        qualname INTEGER REFERENCES strings(id),
        file INTEGER NOT NULL REFERENCES strings(id),
        line INTEGER,
        first_line INTEGER,
        kind INTEGER NOT NULL,
        module INTEGER REFERENCES strings(id),
        module_offset INTEGER
);

CREATE TABLE stacks (
        id INTEGER PRIMARY KEY,
        parent INTEGER REFERENCES stacks(id),
        frame INTEGER REFERENCES frames(id),
        depth INTEGER NOT NULL
);
INSERT INTO stacks(id, parent, frame, depth) VALUES (0, NULL, NULL, 0);

CREATE TABLE processes (
        pid INTEGER PRIMARY KEY,
        cmdline TEXT,
        python_version TEXT,
        python_build TEXT,
        exit_status INTEGER,
        end_ns INTEGER,
        recording INTEGER REFERENCES recordings(id),
        source_pid INTEGER
);

CREATE TABLE recordings (
        id INTEGER PRIMARY KEY,
        file TEXT,
        host TEXT,
        start_wall_ns INTEGER,
        duration_ns INTEGER,
        offset_ns INTEGER NOT NULL,
        samples INTEGER NOT NULL
);

CREATE TABLE recording_meta (
        recording INTEGER NOT NULL REFERENCES recordings(id),
        key TEXT NOT NULL,
        value,
        PRIMARY KEY (recording, key)
) WITHOUT ROWID;

CREATE TABLE threads (
        ref INTEGER PRIMARY KEY,
        pid INTEGER NOT NULL REFERENCES processes(pid),
        tid INTEGER,
        python_thread_id INTEGER,
        name TEXT,
        first_ns INTEGER,
        last_ns INTEGER,
        samples INTEGER NOT NULL DEFAULT 0,
        task_of INTEGER REFERENCES threads(ref),
        task_addr INTEGER
);

CREATE TABLE errors (
        pid INTEGER NOT NULL,
        kind INTEGER NOT NULL,
        count INTEGER NOT NULL,
        PRIMARY KEY (pid, kind)
) WITHOUT ROWID;

CREATE TABLE stack_counts (
        stack INTEGER NOT NULL REFERENCES stacks(id),
        state INTEGER NOT NULL,
        samples INTEGER NOT NULL,
        PRIMARY KEY (stack, state)
) WITHOUT ROWID;

-- The blob is the last column so that scanning chunk headers (thread, times)
-- does not read the blobs' overflow pages.
CREATE TABLE sample_chunks (
        id INTEGER PRIMARY KEY,
        thread INTEGER NOT NULL REFERENCES threads(ref),
        first_ns INTEGER NOT NULL,
        last_ns INTEGER NOT NULL,
        count INTEGER NOT NULL,
        data BLOB NOT NULL
);

CREATE TABLE sources (
        file INTEGER PRIMARY KEY REFERENCES strings(id),
        size INTEGER NOT NULL,
        mtime_ns INTEGER,
        encoding INTEGER NOT NULL,
        data BLOB NOT NULL
);

CREATE TABLE frame_kinds (code INTEGER PRIMARY KEY, name TEXT NOT NULL);
INSERT INTO frame_kinds VALUES (0, 'python'), (1, 'native'), (2, 'special'), (3, 'task');

CREATE TABLE state_flags (bit INTEGER PRIMARY KEY, name TEXT NOT NULL);
INSERT INTO state_flags VALUES (1, 'on_cpu'), (2, 'holds_gil'), (4, 'no_gil');

CREATE TABLE error_kinds (code INTEGER PRIMARY KEY, name TEXT NOT NULL);
INSERT INTO error_kinds VALUES (0, 'torn'), (1, 'read'), (2, 'late'), (3, 'other'),
        (4, 'unmatched'), (5, 'not_resident'), (6, 'truncated'), (7, 'invalid'),
        (8, 'code_gone');

CREATE TABLE source_encodings (code INTEGER PRIMARY KEY, name TEXT NOT NULL);
INSERT INTO source_encodings VALUES (0, 'plain'), (1, 'zlib');

-- Frames with their names resolved, for plain SQL.
CREATE VIEW frame_info AS
SELECT f.id AS id, fn.value AS function, qn.value AS qualname, fl.value AS file,
       f.line AS line, f.first_line AS first_line, f.kind AS kind,
       md.value AS module, f.module_offset AS module_offset
FROM frames f
JOIN strings fn ON fn.id = f.function
JOIN strings fl ON fl.id = f.file
LEFT JOIN strings qn ON qn.id = f.qualname
LEFT JOIN strings md ON md.id = f.module;

COMMIT;
