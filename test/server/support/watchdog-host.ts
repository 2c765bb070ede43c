/**
 * A process that runs the watchdog and nothing else, for test/server/watchdog.process.test.ts:
 * `node watchdog-host.ts TIMEOUT_MS [exit-after-ms]`. It logs to stdout (pino), keeps its event loop
 * alive until told otherwise (SIGUSR2 blocks it for good; with exit-after-ms it exits by itself).
 */
import pino from "pino";
import { startWatchdog } from "../../../src/server/watchdog.ts";

const [timeoutMs, exitAfterMs] = process.argv.slice(2).map(Number);
startWatchdog({ timeoutMs: timeoutMs!, logger: pino(pino.destination({ dest: 1, sync: true })) });
if (exitAfterMs !== undefined) setTimeout(() => process.exit(0), exitAfterMs);
else setInterval(() => {}, 1_000);
process.on("SIGUSR2", () => {
  for (;;);
});
process.stdout.write("started\n");
