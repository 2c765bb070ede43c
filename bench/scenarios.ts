/** The scenarios the runner measures, and the shape of one run's results (bench/results.json). */
import type { ColdResult } from "./cold.ts";
import type { LoadResult } from "./ghz.ts";
import type { MemoryScenario } from "./memory.ts";
import type { ModuleStep } from "./module-memory.ts";
import type { SelfTime } from "./profile.ts";

export const HOT_SCENARIOS = [
  { id: "noop", label: "no-op ext_authz (grpc-js)", short: "no-op" },
  { id: "plugin-assets", label: "2. plugin-assets allow", short: "plugin-assets" },
  { id: "plugin-token", label: "3. kube-api-proxy PluginToken, warm", short: "PluginToken" },
  {
    id: "plugin-token-semi8",
    label: "3b. as 3, Node started with --max-semi-space-size=8",
    short: "PluginToken, semi-space 8 MB",
  },
  { id: "user-token", label: "4. kube-api-proxy UserToken, warm", short: "UserToken" },
  { id: "konfidence", label: "5. konfidence-api workload JWT, 1,000 Projects, warm", short: "konfidence" },
  { id: "opa", label: "7. OPA-Envoy, scenario 3's local work", short: "OPA-Envoy" },
] as const;
export type HotId = (typeof HOT_SCENARIOS)[number]["id"];

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
  /** The no-op measured again after every other scenario; the ceiling is the better of the two. */
  readonly noopAgain?: HotResult;
  readonly cold?: ColdResult;
  readonly memory?: MemoryScenario;
  readonly moduleMemory?: ModuleStep[];
  readonly profile?: { scenario: string; totalMs: number; rows: SelfTime[]; requests: number };
  readonly hotPath?: Array<{ scenario: string; cpuUsPerCheck: number; checks: number }>;
  readonly commands: string[];
}
