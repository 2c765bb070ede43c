/**
 * Reloading the configuration without a restart (SIGHUP): the file is read again through the start's
 * validator, and only the settings that a running server can swap whole are applied; every other
 * change is logged as needing a restart and left alone. A file that does not validate changes
 * nothing. Either the whole live part of the new file is in force, or none of it.
 */
import { isDeepStrictEqual } from "node:util";
import type { Logger } from "pino";
import { Counter, type Registry } from "prom-client";
import type { Config } from "../config/schema.ts";

/**
 * The keys applied live. Each is read only when the policies are built (secrets, origins, the
 * OpenFGA store), or is the logger's own level: swapping the built policies is one assignment, so a
 * Check runs under the old settings or the new, never a mix. Caches, listeners, clusters, watches,
 * workers, TLS and tracing are built once at start and hold connections or entries made under the
 * old values; changing them live would need a rebuild that drops in-flight work.
 */
export const LIVE_KEYS: readonly string[] = ["logLevel", "tokens.secrets", "tokens.cookieOrigins", "openfga.storeId", "openfga.storeName"];

export interface ReloadPlan {
  /** Live keys whose value changed (secret files are re-read even when none did). */
  readonly live: string[];
  /** Changed keys that only a restart applies. */
  readonly restartRequired: string[];
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The dotted paths whose values differ; an array, or a section present on one side only, is one path. */
export function changedPaths(before: unknown, after: unknown, path = ""): string[] {
  if (isPlainObject(before) && isPlainObject(after)) {
    const keys = new Set([...Object.keys(before), ...Object.keys(after)]);
    return [...keys].sort().flatMap((key) => changedPaths(before[key], after[key], path === "" ? key : `${path}.${key}`));
  }
  return isDeepStrictEqual(before, after) ? [] : [path];
}

export function planReload(current: Config, next: Config): ReloadPlan {
  const changed = changedPaths(current, next);
  return { live: changed.filter((p) => LIVE_KEYS.includes(p)), restartRequired: changed.filter((p) => !LIVE_KEYS.includes(p)) };
}

/** The configuration in force after a reload: the current one, with the live keys taken from `next`. */
export function withLiveSettings(current: Config, next: Config): Config {
  const tokens =
    current.tokens === undefined || next.tokens === undefined
      ? current.tokens
      : { ...current.tokens, secrets: next.tokens.secrets, cookieOrigins: next.tokens.cookieOrigins };
  const openfga =
    current.openfga === undefined || next.openfga === undefined
      ? current.openfga
      : { ...current.openfga, storeId: next.openfga.storeId, storeName: next.openfga.storeName };
  return { ...current, logLevel: next.logLevel, tokens, openfga } as Config;
}

export type ReloadOutcome = "applied" | "invalid";

export interface ConfigReloaderOptions {
  readonly config: Config;
  readonly logger: Logger;
  readonly registry: Registry;
  /**
   * Builds everything the live keys feed (reading the secrets again) and swaps it in, or throws
   * having swapped nothing.
   */
  readonly apply: (config: Config, plan: ReloadPlan) => void;
}

export class ConfigReloader {
  #current: Config;
  #running: Promise<ReloadOutcome> | undefined;
  #again = false;
  readonly #options: ConfigReloaderOptions;
  readonly #reloads: Counter<"outcome">;

  constructor(options: ConfigReloaderOptions) {
    this.#current = options.config;
    this.#options = options;
    this.#reloads = new Counter({
      name: "portcullis_config_reloads_total",
      help: "Configuration reloads (SIGHUP) by outcome: applied, or invalid (the new file or a secret it names did not validate; nothing changed)",
      labelNames: ["outcome"],
      registers: [options.registry],
    });
    for (const outcome of ["applied", "invalid"] as const) this.#reloads.inc({ outcome }, 0);
  }

  get current(): Config {
    return this.#current;
  }

  /** One reload at a time; a signal during one runs one more after it, so the last file is the one in force. */
  reload(read: () => Promise<Config>): Promise<ReloadOutcome> {
    if (this.#running !== undefined) {
      this.#again = true;
      return this.#running;
    }
    this.#running = this.#reloadOnce(read).finally(() => {
      this.#running = undefined;
      if (this.#again) {
        this.#again = false;
        void this.reload(read);
      }
    });
    return this.#running;
  }

  async #reloadOnce(read: () => Promise<Config>): Promise<ReloadOutcome> {
    const { logger } = this.#options;
    let next: Config;
    try {
      next = await read();
    } catch (err) {
      // ConfigError messages name the field and the variable or file, never a secret's value.
      logger.error({ reason: (err as Error).message }, "configuration reload refused: the new file is invalid; the old configuration stays in force");
      this.#reloads.inc({ outcome: "invalid" });
      return "invalid";
    }
    const plan = planReload(this.#current, next);
    for (const field of plan.restartRequired) logger.warn({ field }, `restart required for ${field}: not applied`);
    const applied = withLiveSettings(this.#current, next);
    try {
      this.#options.apply(applied, plan);
    } catch (err) {
      logger.error({ reason: (err as Error).message }, "configuration reload refused: the old configuration stays in force");
      this.#reloads.inc({ outcome: "invalid" });
      return "invalid";
    }
    this.#current = applied;
    logger.level = applied.logLevel;
    logger.info({ applied: plan.live, restart_required: plan.restartRequired }, "configuration reloaded");
    this.#reloads.inc({ outcome: "applied" });
    return "applied";
  }
}
