/**
 * Replays issue 12's freeze: an API server restarts under review load while a child process fires
 * SubjectAccessReviews the way portcullis does (300 ms deadlines through the cluster's pool). The
 * parent checks that the child's event loop keeps answering a heartbeat.
 *
 * On HTTP/2 (undici's default) a review aborted with its body still queued leaves Node's native send
 * loop writing empty DATA frames forever (docs/upstream/undici-h2-abort-freeze.md); the control
 * case shows the unread-bodies replay reaches that state every time. Through the cluster pool (HTTP/1.1) every review is
 * answered or refused by its deadline, and the loop stays alive.
 */
import { afterEach, describe, expect, it } from "vitest";
import { KUBE_APISERVER_SETTINGS, type StartingApiServer, StartingApiServer as Fake } from "./support/starting-api-server.ts";
import { type StormCounts, sleep, stormThroughRestart } from "./support/storm-replay.ts";

const STORM_MS = 3_000;

/** How a restarted API server answered: each replay is one way the freeze was reached. */
interface Restart {
  readonly name: string;
  readonly start: () => Promise<StartingApiServer>;
  readonly restart: (server: StartingApiServer) => Promise<void>;
}

const CAPTURED: Restart = {
  // Loopback capture of kube-apiserver v1.37.2 (TLS key log): the new process accepted the
  // connection, answered the TLS handshake 1.46 s later, then sent SETTINGS and answered the first
  // review; the client never sent another byte, not even the SETTINGS ACK.
  name: "as captured: TLS stalled 1.5 s, then kube-apiserver's SETTINGS and answers",
  start: () => Fake.start({ settings: KUBE_APISERVER_SETTINGS }),
  restart: async (server) => {
    server.restart();
    await sleep(1_500);
    server.phase = "ready";
  },
};

const UNREAD_BODIES: Restart = {
  // As issue 12 describes the starting server: not answering, then bodies not read in time, then 403/429.
  name: "TLS held, request bodies unread past the deadline, then LIST 403 / WATCH 429",
  start: () => Fake.start(),
  restart: async (server) => {
    server.restart();
    await sleep(600);
    server.phase = "unread";
    await sleep(1_000);
    server.phase = "starting";
    await sleep(500);
    server.phase = "ready";
  },
};

const RESTARTS = [CAPTURED, UNREAD_BODIES];

let fake: StartingApiServer | undefined;
afterEach(async () => {
  await fake?.close();
  fake = undefined;
});

function replay(server: StartingApiServer, restart: (server: StartingApiServer) => Promise<void>, mode: "pool" | "h2-default") {
  return stormThroughRestart(server.kubeconfigPath, mode, STORM_MS, () => restart(server));
}

describe("API server restart under review load (issue 12)", () => {
  it.each(RESTARTS)("$name: through the cluster pool every review is answered or refused by its deadline, HTTP/1.1 only, the event loop alive", async ({ start, restart }) => {
    fake = await start();
    const { frozen, done } = await replay(fake, restart, "pool");

    expect(frozen).toBe(false);
    expect(done).toBeDefined();
    const counts = done as StormCounts;
    const seen = JSON.stringify(counts);
    expect(counts.fired, seen).toBeGreaterThan(0);
    expect(counts.other, seen).toBe(0);
    expect(counts.answered + counts.unavailable, seen).toBe(counts.fired);
    // The replay did abort reviews mid-request, and the same pool reached the server after the restart.
    expect(counts.unavailable, seen).toBeGreaterThan(0);
    expect(counts.recovered, seen).toBe(true);
    expect(fake.h2Sessions).toBe(0);
    expect(new Set(fake.alpn)).toEqual(new Set(["http/1.1"]));
  }, 60_000);

  // The captured replay freezes the old setup only when a deadline expires in the instant between a
  // stream's opening and its body reaching Node's native queue (most runs, not all); unread bodies
  // behind a 16-byte window reach the same state every time, so that replay is the control.
  it("control: undici's default Agent (the old clusters.ts) negotiates HTTP/2 and freezes when bodies are left unread", async () => {
    // If this starts failing, the Node/undici defect may be fixed upstream: see the upstream note.
    fake = await UNREAD_BODIES.start();
    const { frozen } = await replay(fake, UNREAD_BODIES.restart, "h2-default");

    expect(fake.alpn).toContain("h2");
    expect(frozen).toBe(true);
  }, 60_000);
});
