/**
 * The Project index (konfidence.cloud/v1alpha1 `projects`, cluster-scoped) of the one cluster that
 * holds Konfidence, fed by a watch with the PluginInstallation index's restart and readiness rules
 * (src/kube-watch/watched-index.ts): while unsynced, every lookup throws DependencyUnavailable.
 *
 * Projects are indexed by metadata.name, which is the `{projectId}` of the API's URLs: the name is
 * what the Project controller derives the namespace from (kden-project-<name>) and what users type,
 * and unlike metadata.uid it survives a delete-and-recreate from the same manifest.
 *
 * roleBindings are compiled when the object arrives (subjects validated, globs compiled), never per
 * request. Subjects that never match are reported then: one log line each and a metric event.
 */
import type { KubernetesObject } from "#kubernetes-client";
import type { Logger } from "pino";
import type { CompiledProject, ProjectLookup } from "./ports.ts";
import { type BindingProblem, compileRoleBindings } from "../konfidence-model/role-bindings.ts";
import type { ProviderTrust } from "../konfidence-model/subjects.ts";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import type { Cluster } from "../kube-fleet/clusters.ts";
import { type ContestedClaim, logContested, SoleClaims, watchKey } from "../kube-watch/sole-claims.ts";
import { keepListWatchMetadata } from "../kube-watch/paged-list.ts";
import { type IndexStore, resolveWatchOptions, WatchedIndex, type WatchedIndexOptions } from "../kube-watch/watched-index.ts";
import { publishInvalidSubject } from "../metrics/events.ts";

export const PROJECTS = { group: "konfidence.cloud", version: "v1alpha1", plural: "projects" } as const;

export interface ProjectObject extends KubernetesObject {
  spec?: { namespace?: string; roleBindings?: unknown };
  status?: { namespace?: string };
}

export function compileProject(obj: ProjectObject, trusts: ProviderTrust): { project: CompiledProject; problems: BindingProblem[] } | undefined {
  const name = obj.metadata?.name;
  if (name === undefined) return undefined;
  const { bindings, problems } = compileRoleBindings(obj.spec?.roleBindings, trusts);
  return { project: { name, bindings }, problems };
}

/**
 * What the watch's own cache keeps of a Project: what compileProject() reads (metadata.name,
 * spec.roleBindings) and ListWatch's metadata; not managedFields, annotations or status.
 */
export function keepProjectFields(obj: ProjectObject): ProjectObject {
  const { metadata, spec } = obj;
  return { metadata: metadata && keepListWatchMetadata(metadata), spec: spec && { roleBindings: spec.roleBindings } };
}

/**
 * Compiled Projects, served by name, and how many jwks subjects name each (provider, audience).
 * Kept by ListWatch's key (watchKey). A name claimed by more than one object is served by none of
 * them (sole-claims.ts): the shipped CRD is cluster-scoped, where the API server keeps names
 * unique; under a namespaced one, a Project created elsewhere under another team's name would
 * otherwise take its roleBindings on the replicas that heard it last. A contested Project answers
 * `project-not-found`. Its jwks subjects still count for the providers and audiences named: that
 * answer is already a union over every Project, whatever order they came in.
 */
export class ProjectStore implements IndexStore<ProjectObject> {
  readonly #byKey = new Map<string, CompiledProject>();
  readonly #names = new SoleClaims();
  /** provider (discovery endpoint) → audience → number of jwks subjects naming both. */
  readonly #audienceUses = new Map<string, Map<string, number>>();
  readonly #trusts: ProviderTrust;
  readonly #report: (project: string, problems: readonly BindingProblem[]) => void;
  readonly #onContested: (contest: ContestedClaim) => void;

  constructor(
    trusts: ProviderTrust,
    report: (project: string, problems: readonly BindingProblem[]) => void = () => {},
    onContested: (contest: ContestedClaim) => void = () => {},
  ) {
    this.#trusts = trusts;
    this.#report = report;
    this.#onContested = onContested;
  }

  get size(): number {
    return this.#byKey.size;
  }

  /** Names claimed by more than one object now. */
  get contested(): number {
    return this.#names.contested;
  }

  byName(name: string): CompiledProject | undefined {
    const key = this.#names.owner(name);
    return key === undefined ? undefined : this.#byKey.get(key);
  }

  namesProvider(endpoint: string): boolean {
    return this.#audienceUses.has(endpoint);
  }

  namesAudience(endpoint: string, audiences: readonly string[]): boolean {
    const named = this.#audienceUses.get(endpoint);
    return named !== undefined && audiences.some((audience) => named.has(audience));
  }

  keep(obj: ProjectObject): ProjectObject {
    return keepProjectFields(obj);
  }

  put(obj: ProjectObject): void {
    const key = watchKey(obj.metadata);
    this.#forget(key);
    const compiled = compileProject(obj, this.#trusts);
    if (compiled === undefined) return;
    const { project, problems } = compiled;
    this.#byKey.set(key, project);
    this.#count(project, +1);
    const contest = this.#names.claim(project.name, key);
    if (contest !== undefined) this.#onContested(contest);
    if (problems.length > 0) this.#report(project.name, problems);
  }

  remove(obj: ProjectObject): void {
    this.#forget(watchKey(obj.metadata));
  }

  clear(): void {
    this.#byKey.clear();
    this.#names.clear();
    this.#audienceUses.clear();
  }

  #forget(key: string): void {
    const old = this.#byKey.get(key);
    if (old === undefined) return;
    this.#byKey.delete(key);
    this.#names.release(old.name, key);
    this.#count(old, -1);
  }

  #count(project: CompiledProject, delta: 1 | -1): void {
    for (const [endpoint, subjects] of project.bindings.jwks) {
      const named = this.#audienceUses.get(endpoint) ?? new Map<string, number>();
      for (const { subject } of subjects) {
        const uses = (named.get(subject.audience) ?? 0) + delta;
        if (uses <= 0) named.delete(subject.audience);
        else named.set(subject.audience, uses);
      }
      if (named.size === 0) this.#audienceUses.delete(endpoint);
      else this.#audienceUses.set(endpoint, named);
    }
  }
}

export interface ProjectIndexOptions extends WatchedIndexOptions {
  readonly trusts: ProviderTrust;
}

export class ProjectIndex implements ProjectLookup {
  readonly #store: ProjectStore;
  readonly #watch: WatchedIndex<ProjectObject>;
  readonly #clusterId: string;

  constructor(cluster: Cluster, options: ProjectIndexOptions) {
    const { logger } = options;
    this.#clusterId = cluster.id;
    this.#store = new ProjectStore(
      options.trusts,
      (project, problems) => reportProblems(logger, project, problems),
      (contest) => logContested(logger, { index: "projects", clusterId: cluster.id, claim: "name" }, contest),
    );
    this.#watch = new WatchedIndex(cluster, PROJECTS, this.#store, { index: "konfidence project", objects: "projects" }, resolveWatchOptions(options));
  }

  /** Resolves once the first list has been attempted, synced or not. */
  start(): Promise<void> {
    return this.#watch.start();
  }

  stop(): Promise<void> {
    return this.#watch.stop();
  }

  get synced(): boolean {
    return this.#watch.synced;
  }

  /** Synced at least once: the process's readiness. */
  get hasSynced(): boolean {
    return this.#watch.hasSynced;
  }

  /** Projects in the (one) cluster's index (and their contested names), for metrics; shaped like the installation index's. */
  sizes(): Array<{ clusterId: string; size: number; contested: number; synced: boolean; hasSynced: boolean; lastSyncedAt: Date | undefined }> {
    return [{ clusterId: this.#clusterId, size: this.#store.size, contested: this.#store.contested, synced: this.#watch.synced, hasSynced: this.#watch.hasSynced, lastSyncedAt: this.#watch.lastSyncedAt }];
  }

  byName(name: string): CompiledProject | undefined {
    this.#requireSynced();
    return this.#store.byName(name);
  }

  namesProvider(endpoint: string): boolean {
    this.#requireSynced();
    return this.#store.namesProvider(endpoint);
  }

  namesAudience(endpoint: string, audiences: readonly string[]): boolean {
    this.#requireSynced();
    return this.#store.namesAudience(endpoint, audiences);
  }

  #requireSynced(): void {
    if (!this.#watch.synced) throw new DependencyUnavailable("konfidence-project-index", "not synced");
  }
}

/** One warning line and one metric event per roleBindings entry that never matches. */
export function reportProblems(logger: Logger, project: string, problems: readonly BindingProblem[]): void {
  for (const { role, index, problem } of problems) {
    logger.warn({ project, role, subject_index: index, problem }, "konfidence roleBindings entry never matches");
    publishInvalidSubject(problem);
  }
}
