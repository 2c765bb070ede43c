/**
 * The Node flags and environment portcullis ships with. V8 sizes its heap when Node starts, so
 * these are given on Node's command line (`v8.setFlagsFromString` later does not resize the young
 * generation already reserved). `npm start` (package.json), the Dockerfile's ENTRYPOINT and ENV,
 * and the benchmark (bench/run.ts) all run exactly these; test/deploy/node-flags.test.ts holds
 * each of them to this list. The measurement behind each: bench/RESULTS.md, "Shipped Node flags".
 */

/**
 * `--max-semi-space-size=8` (MiB): V8's young generation. Left to itself, Node sizes it from the
 * machine's memory (32 MiB semi-spaces on a 24 GiB host, so it differs from machine to machine),
 * and each scavenge of a full one pauses the event loop long enough to dominate a check's p99 (11.3
 * vs 4.3 ms at half the no-op's saturation rate, bench/RESULTS.md of 2026-11-29). Smaller is not
 * better: bench/hot-path.ts (PluginToken, CPU time, 2 runs each) cost 40-41 µs per check with Node's
 * default, 62-68 with 1 MiB, 47-48 with 2, 42-43 with 4, 35-37 with 8, 40-41 with 16 — with
 * 1-2 MiB most young objects are still alive at each scavenge and get copied and promoted.
 * Rechecked after the CPU work (batched audit line, token checked once; with the flags below):
 * Node's default 31.4, 2 MiB 48.0, 4 MiB 40.7, 8 MiB 30.9, 16 MiB 30.8 µs — 8 is still the
 * smallest young generation that costs nothing. A larger one buys throughput only at saturation, and
 * pays for it in the tail and in memory. The benchmark's PluginToken server under ghz, side by side
 * (bench/under-load.ts, 2026-12-07, with checks decided in batches):
 *  - 16 MiB: 9,439–9,700 checks/s at saturation against 8,831–9,756 with 8 (+6%);
 *  - 32 MiB: 9,636–10,012 checks/s (+7%);
 *  - at 3,000/s: unchanged, 265–273 µs CPU per check;
 *  - at 7,500/s offered: p99 6.9–7.3 ms with 16 and 9.8–11.0 ms with 32, against 4.6–6.6 with 8; RSS +15–19
 *    and +49–53 MiB (bench/FINDINGS.md). 2026-12-05, before the batching, 16 bought nothing at saturation.
 */
/**
 * `--heap-growing-percent=100`: after each full GC V8 lets the old generation grow to 2× what
 * survived, instead of up to 4× when the GC keeps up with the allocation; and it keeps the pages it
 * grew into — V8's memory reducer never shrinks an idle heap here (`--trace-memory-reducer`: "high
 * alloc" at every check), so the RSS after a burst of cold checks is the heap's peak. Without a
 * fixed factor bench/memory.ts (100,000 users, 10,000 installations) ended at 450-588 MB RSS; with
 * 50 (1.5×, shipped until 2026-12-01) at 332 MB after the fill, 344 a minute later; with 100 at
 * 322 and 346 (cap below in both). 50 cost the tail: under load grpc-js and the checks in flight
 * promote ~50 MB/s to the old generation, and at 1.5× V8 marked and compacted 11-13 times in 10 s,
 * every pause a p99 sample. The benchmark's PluginToken server under ghz at 5,835 checks/s offered (8 in flight, two runs
 * each, --trace-gc): p99 13.7-18.4 ms with 50, 7.2-8.4 with 100, 7.4-7.7 with 200, 6.3-7.8 with no
 * fixed factor; checks/s at saturation 4,410-5,032 with 50, 4,088-5,706 with 100 (noisy).
 */
/**
 * `--max-old-space-size=256` (MiB): what Node gives V8 in the shipped pod anyway — Node sizes the
 * old generation from the cgroup's memory limit, and for the Deployment's 512Mi that is V8's
 * minimum, 256 MiB (`heap_size_limit` 259 MiB in a 512 MiB memory cgroup; 4,288 on the 24 GiB
 * benchmark host). Spelled out so the benchmark, `npm start` and the pod run one heap, not one per
 * machine, and so a heap past it ends in V8's last-resort GC and a clear "heap out of memory" exit
 * rather than the kernel's OOM kill. The scale target's live heap is ~120 MiB, so 2× still fits.
 * test/deploy/node-flags.test.ts holds it inside the Deployment's memory limit.
 */
/**
 * `--no-allocation-site-pretenuring`: V8 allocates every object young. Left to itself it watches
 * which allocation sites' objects survive scavenges and allocates theirs straight in the old
 * generation. Under load every grpc-js call outlives a scavenge (in the same-bytes no-op too: ~6 KB
 * per call promoted against ~1.7 KB for bare node:http2), so the sites of the request's decoding
 * and the call's own objects get pretenured. Those objects die within a millisecond, but only a
 * full GC frees them, and each full GC marks portcullis's whole heap (346k objects, 3× the no-op's).
 * The benchmark's PluginToken server at 3,000/s, 8 s (`--trace-gc-nvp`, four runs with the flag,
 * three without): promoted 153–156 → 15–73 MB, scavenges 403–447 → 110–237 ms, major GCs 5 → 1–3.
 * Side by side with the same server without the flag (bench/under-load.ts, 2026-12-07, four runs of
 * 3–4 rounds, `--variant pretenure:--allocation-site-pretenuring` in the last two):
 *  - at 3,000/s, medians: 254.6 against 273.0, 262.6 against 274.0, 255.9 against 273.0, 257.9 against
 *    268.2 µs CPU per check;
 *  - at saturation, best of each run: 11,333 against 9,383, 10,603 against 8,790, 9,255 against
 *    8,789, 10,043 against 9,363 checks/s (+5–21%);
 *  - at 7,500/s offered (8 in flight): p99 4.8–4.9 against 5.5–5.7 ms, RSS +5–22 MiB under load;
 *  - bench/memory.ts (`--quick`, 20,000 users, two runs each): fill CPU 15.2 / 15.1 against 15.7 /
 *    15.0 s, heap after the fill the same (68.3–68.9 MiB); RSS after it 304 / 296 against 318 / 315
 *    MiB, idle after a GC 254 / 227 against 224 / 222.
 * With it, a young generation of 16 MiB still costs the tail: p99 6.0 against 5.0 ms at 7,500/s
 * offered, RSS +13–22 MiB.
 */
/**
 * `--expose-gc`: gives portcullis V8's `gc()`, for one memory-reducing collection when the server
 * has gone quiet after its heap grew (src/server/idle-gc.ts, `idleGc` in the configuration). V8
 * keeps the pages a burst grew into, and its own memory reducer did not run after one: after
 * bench/memory.ts's 100,000 cold checks, RSS 286 MiB after a full GC, 199 after that collection.
 * Nothing else calls it. Without the flag the idle GC is off (and says so at start).
 */
/**
 * Measured and not shipped: `--use-largepages=on` (Node's code remapped onto 2 MiB pages; these
 * hosts' transparent huge pages are `madvise`). The benchmark's `--only noop,plugin-token`, two runs
 * each way (2026-12-05): PluginToken at 3,000/s 254–272 µs CPU per check against 270–278 without,
 * best saturation run 8,393–8,746 against 7,792–8,460 checks/s — under 5%, inside what the no-op
 * moved between the same runs (115–137 µs). It turns ~30 MiB of the binary's file-backed pages, which
 * the kernel can drop, into 40 MiB of anonymous memory it cannot, and where a node's transparent
 * huge pages are `never` it only warns. Side by side again (bench/under-load.ts, 2026-12-07, two runs of 4
 * rounds): 249 against 256 and 235.5 against 242.6 µs, rounds overlapping; +11-14 MiB RSS idle.
 */
export const NODE_FLAGS: readonly string[] = ["--max-semi-space-size=8", "--heap-growing-percent=100", "--max-old-space-size=256", "--no-allocation-site-pretenuring", "--expose-gc"];

/**
 * LD_PRELOAD=libjemalloc.so.2 and MALLOC_CONF=background_thread:true: jemalloc (Debian's
 * libjemalloc2, installed in the image) instead of glibc's malloc. glibc gives a free page in the
 * middle of its heap back only on malloc_trim(), which nothing in Node calls: after bench/memory.ts's
 * 100,000 cold checks, ~30 MiB of what they allocated outside V8 stayed resident as holes, for good.
 * jemalloc purges pages it no longer uses after ~10 s (its decay), and its background thread does
 * so while no allocation happens, i.e. on an idle server too (under CPU contention jemalloc 5.3 can
 * leave part of them for over a minute: test/deploy/jemalloc.test.ts). bench/memory.ts, one process each, in
 * one batch: idle once quiet 139.3 → 126.6 MiB RSS, 60 s after the fill 206.3 → 185.8 MiB, fill CPU
 * 117.7 → 118.8 s. Preloaded by name, so the dynamic loader finds it where the system keeps it (the
 * image; scripts/deps/install.sh installs it for `npm test` and the benchmark); where it is missing
 * the loader says so on stderr and Node runs on glibc, with the two settings below.
 * test/deploy/jemalloc.test.ts shows it loaded, its setting accepted and its background thread running.
 */
/**
 * MALLOC_ARENA_MAX=2 (glibc, when jemalloc is not loaded): glibc gives each thread that allocates (libuv's pool, V8's GC helpers) an
 * arena of its own and rarely returns their pages; two arenas bound that. The MEMORY helper's fills
 * (100,000 users): 688 → 582 MB RSS with --max-semi-space-size=1; CPU per check unchanged within
 * noise in bench/hot-path.ts.
 */
/**
 * NODE_COMPILE_CACHE: Node keeps each module's type-stripped source and V8 code cache in this
 * directory and reuses them on the next start. With every .ts module found there, Node never
 * loads amaro (swc as WebAssembly) to strip types: bench/module-memory.ts, RSS after a full GC,
 * everything imported: 160-167 MiB cold, 149-152 MiB warm ("node itself" 62 → 42-44 MiB; the code
 * cache costs back ~5 MiB on the .js packages, which are eagerly deserialized). An entry is used
 * only if the source's hash matches (an edited file is stripped and compiled again), under a
 * subdirectory named for the Node version, the V8 flags and the uid. A directory that is missing
 * and cannot be made, or not writable, only means no cache; a read-only one still serves its
 * entries (test/deploy/compile-cache.test.ts). Relative to the working directory, which is the
 * package root for `npm start` and the benchmark, and /app in the image and the Deployment; the
 * image warms it at build (Dockerfile, src/cli/warm-compile-cache.ts) because the pod's root
 * filesystem is read-only. node_modules/.cache is where tools keep a checkout's caches: one per
 * checkout, gone with `rm -rf node_modules`, never shared with another user as the OS temp dir is.
 * Whoever can write the directory can change the code Node runs, as with node_modules itself (the
 * image's is root-owned). NODE_DISABLE_COMPILE_CACHE=1 turns it off.
 */
/**
 * MALLOC_MMAP_THRESHOLD_=262144 (glibc, when jemalloc is not loaded): glibc serves blocks of 256 KiB and more with mmap, and unmaps
 * them when freed. Left to itself it raises that threshold to the size of each large mmapped block
 * freed (list pages, response bodies; up to 32 MiB), after which such blocks come from the brk heap,
 * whose freed pages stay resident. An idle server (shipped caches, 10,000 installations listed, after
 * a full GC) held 45-49 MiB of `[heap]` with 16 MB of it in use (gdb, `malloc_stats`): RSS 186-191
 * MiB as before, 156-162 with the threshold fixed (three processes each); bench/memory.ts at the scale
 * target after the fill 309-319 → 290-303 MiB, fill CPU and CPU per check unchanged. Not 64 KiB:
 * that mmaps each of Node's 64 KiB socket read buffers. Setting the threshold turns the dynamic
 * adjustment off; test/deploy/malloc-threshold.test.ts shows glibc honours the spelling.
 */
export const NODE_ENV: Readonly<Record<string, string>> = {
  LD_PRELOAD: "libjemalloc.so.2",
  MALLOC_CONF: "background_thread:true",
  MALLOC_ARENA_MAX: "2",
  MALLOC_MMAP_THRESHOLD_: "262144",
  NODE_COMPILE_CACHE: "node_modules/.cache/node-compile-cache",
};
