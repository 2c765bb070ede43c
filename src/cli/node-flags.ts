/**
 * The Node flags and environment portcullis ships with. V8 sizes its heap when Node starts, so
 * these are given on Node's command line (`v8.setFlagsFromString` later does not resize the young
 * generation already reserved). `npm start` (package.json), the Dockerfile's ENTRYPOINT and ENV,
 * and the benchmark (bench/run.ts) all run exactly these; test/deploy/node-flags.test.ts holds
 * each of them to this list. The measurement behind each: bench/RESULTS.md, "Shipped Node flags".
 */

/**
 * `--max-semi-space-size` (MiB): V8's young generation. Node's default lets it grow to 16 MiB per
 * semi-space under a high allocation rate, and each scavenge of a full one pauses the event loop
 * long enough to dominate a check's p99; smaller semi-spaces scavenge more often, each briefly.
 */
export const NODE_FLAGS: readonly string[] = ["--max-semi-space-size=8"];

/** Environment variables shipped beside the flags (none today). */
export const NODE_ENV: Readonly<Record<string, string>> = {};
