/**
 * Replays issue 12's freeze: an API server restarts under review load (connections reset, TLS held,
 * request bodies left unread past the 300 ms review deadline, then 403/429, then ready), while a
 * child process fires SubjectAccessReviews the way portcullis does. The parent checks that the
 * child's event loop keeps answering a heartbeat.
 *
 * On HTTP/2 (undici's default) the first review aborted with its body still queued leaves Node's
 * native send loop writing empty DATA frames forever (docs/upstream/undici-h2-abort-freeze.md);
 * the control case shows the replay reaches that state. Through the cluster pool (HTTP/1.1) every
 * review is answered or refused by its deadline and the loop stays alive.
 */
import { fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { StartingApiServer } from "./support/starting-api-server.ts";

const STORM = fileURLToPath(new URL("./support/review-storm.ts", import.meta.url));
/** Heartbeats every 100 ms; this long without an answer is a frozen event loop. */
const FROZEN_AFTER_MS = 2_500;
const STORM_MS = 3_000;

interface Counts {
  fired: number;
  answered: number;
  unavailable: number;
  other: number;
  recovered: boolean;
}

interface Outcome {
  frozen: boolean;
  done: Counts | undefined;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let fake: StartingApiServer | undefined;
afterEach(async () => {
  await fake?.close();
  fake = undefined;
});

async function replay(server: StartingApiServer, mode: "pool" | "h2-default"): Promise<Outcome> {
  const child = fork(STORM, [server.kubeconfigPath, mode, String(STORM_MS)], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
  let lastAnswer = 0;
  let done: Counts | undefined;
  let exited = false;
  child.on("exit", () => (exited = true));
  const ready = new Promise<void>((resolve) => {
    child.on("message", (message: { ready?: true; pong?: Counts; done?: Counts }) => {
      lastAnswer = Date.now();
      if (message.ready) resolve();
      if (message.done) done = message.done;
    });
  });
  const heartbeat = setInterval(() => child.connected && child.send("ping"), 100);
  try {
    await ready;
    // The restart, as the API server answered it in issue 12.
    await sleep(300);
    server.restart();
    await sleep(600);
    server.phase = "unread";
    await sleep(1_000);
    server.phase = "starting";
    await sleep(500);
    server.phase = "ready";
    let frozen = false;
    while (done === undefined && !frozen && !exited) {
      await sleep(100);
      frozen = Date.now() - lastAnswer > FROZEN_AFTER_MS;
    }
    return { frozen, done };
  } finally {
    clearInterval(heartbeat);
    // A frozen child ignores SIGTERM and grows by hundreds of MB a second.
    child.kill("SIGKILL");
  }
}

describe("API server restart under review load (issue 12)", () => {
  it("through the cluster pool: every review answered or refused by its deadline, HTTP/1.1 only, the event loop alive", async () => {
    fake = await StartingApiServer.start();
    const { frozen, done } = await replay(fake, "pool");

    expect(frozen).toBe(false);
    expect(done).toBeDefined();
    const counts = done as Counts;
    const seen = JSON.stringify(counts);
    expect(counts.fired, seen).toBeGreaterThan(0);
    expect(counts.other, seen).toBe(0);
    expect(counts.answered + counts.unavailable, seen).toBe(counts.fired);
    // The replay did abort reviews mid-request, and the same pool reached the server after the restart.
    expect(counts.unavailable, seen).toBeGreaterThan(0);
    expect(counts.recovered, seen).toBe(true);
    expect(fake.h2Sessions).toBe(0);
    expect(new Set(fake.alpn)).toEqual(new Set(["http/1.1"]));
  }, 30_000);

  it("control: undici's default Agent (the old clusters.ts) negotiates HTTP/2 and freezes in the same replay", async () => {
    // If this starts failing, the Node/undici defect may be fixed upstream: see the upstream note.
    fake = await StartingApiServer.start();
    const { frozen } = await replay(fake, "h2-default");

    expect(fake.alpn).toContain("h2");
    expect(frozen).toBe(true);
  }, 30_000);
});
