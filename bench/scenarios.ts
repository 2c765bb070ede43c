/** The scenarios the runner measures, and the shape of one run's results (bench/results.json). */
import type { ColdResult } from "./cold.ts";
import type { FleetResult } from "./fleet.ts";
import type { LoadResult } from "./ghz.ts";
import type { MemoryScenario } from "./memory.ts";
import type { ModuleStep } from "./module-memory.ts";
import type { SelfTime } from "./profile.ts";

export const HOT_SCENARIOS = [
  { id: "noop", label: "no-op ext_authz (grpc-js)", short: "no-op" },
  { id: "noop-same-bytes", label: "same-bytes no-op (scenario 3's allow, encoded once)", short: "same-bytes no-op" },
  { id: "plugin-assets", label: "2. plugin-assets allow", short: "plugin-assets" },
  { id: "plugin-token", label: "3. kube-api-proxy PluginToken, warm", short: "PluginToken" },
  {
    id: "plugin-token-node-defaults",
    label: "3b. as 3, Node's default flags (not the shipped ones)",
    short: "PluginToken, Node defaults",
  },
  { id: "user-token", label: "4. kube-api-proxy UserToken, warm", short: "UserToken" },
  { id: "konfidence", label: "5. konfidence-api workload JWT, 1,000 Projects, warm", short: "konfidence" },
  { id: "opa", label: "7. OPA-Envoy, scenario 3's local work", short: "OPA-Envoy" },
] as const;
export type HotId = (typeof HOT_SCENARIOS)[number]["id"];

/**
 * One server process, in the order the runner started them. The no-op runs between every two
 * scenarios, so each scenario is compared with the no-op measured just before and just after it,
 * and the no-op's own repeats show how far one run of an unchanged server moves.
 */
export interface ProcessRun {
  readonly id: HotId;
  readonly loadAtStart: number;
  /** CPU ms of a fixed integer loop on the server's core just before the process started (bench/processes.ts coreCalibrationMs). */
  readonly calibrationMs: number;
  readonly rssIdleBytes: number;
  /** At the reference rate (settings.referenceRps, below every server's capacity): the primary CPU-per-check figure. */
  readonly reference: LoadResult;
  readonly saturationRuns: LoadResult[];
}

export interface HotResult {
  readonly id: HotId;
  readonly saturation: LoadResult;
  /** Every saturation repetition; `saturation` is the one with the highest throughput. */
  readonly saturationRuns: LoadResult[];
  readonly rates: LoadResult[];
  readonly rssIdleBytes: number;
  /** The 1-minute load average when the scenario started (the runner's own load is ~2 while it runs). */
  readonly loadAtStart?: number;
}

export interface Results {
  readonly date: string;
  readonly mode: "full" | "quick";
  readonly machine: Record<string, string>;
  readonly settings: Record<string, string | number>;
  readonly hot: HotResult[];
  /** Every server process in run order (the no-op between every two scenarios). */
  readonly processes: ProcessRun[];
  /** The Node flags portcullis ran with (src/cli/node-flags.ts), and the environment shipped beside them. */
  readonly shippedFlags: { readonly node: readonly string[]; readonly env: Record<string, string> };
  readonly cold?: ColdResult;
  readonly memory?: MemoryScenario;
  readonly moduleMemory?: ModuleStep[];
  readonly profile?: { scenario: string; totalMs: number; rows: SelfTime[]; requests: number };
  /** bench/hot-path.ts per scenario; bytesPerCheck: V8 heap allocated per check (absent in runs before 2026-12-06). */
  readonly hotPath?: Array<{ scenario: string; cpuUsPerCheck: number; bytesPerCheck?: number; checks: number }>;
  readonly fleet?: FleetResult;
  /** Why the fleet benchmark did not finish, when it did not. */
  readonly fleetError?: string;
  readonly commands: string[];
  /** The previous full run's headline figures (report.ts headlineFigures), for the comparison between runs. */
  readonly previous?: { readonly date: string; readonly figures: Record<string, number> };
}
