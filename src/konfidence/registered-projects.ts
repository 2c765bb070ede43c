/**
 * The Project index of a Konfidence cluster the cluster registry registers (`konfidence.cluster.clusterId`
 * not in clusters[]): a ProjectIndex on whichever `Cluster` the registry last registered under that id.
 * A changed Secret (another server or credential) is a new Cluster: the old watch stops and the
 * Projects are listed again from the new server, never served from what the old one said. With no
 * cluster registered (not yet, or its Secret deleted) every lookup throws DependencyUnavailable (503).
 */
import type { CompiledProject, ProjectLookup } from "./ports.ts";
import { ProjectIndex, type ProjectIndexOptions } from "./project-index.ts";
import { DependencyUnavailable } from "../dependencies/unavailable.ts";
import type { Cluster } from "../kube-fleet/clusters.ts";

export class RegisteredProjects implements ProjectLookup {
  readonly #clusterId: string;
  readonly #options: ProjectIndexOptions;
  #index: { readonly projects: ProjectIndex; readonly gatesReadiness: boolean } | undefined;

  constructor(clusterId: string, options: ProjectIndexOptions) {
    this.#clusterId = clusterId;
    this.#options = options;
  }

  /** The Konfidence cluster's id (`konfidence.cluster.clusterId`). */
  get clusterId(): string {
    return this.#clusterId;
  }

  /**
   * Watches the Projects of `cluster` in place of any earlier one. `gatesReadiness`: it came with the
   * registry's first list, so the process is not ready before its Projects have synced once.
   */
  attach(cluster: Cluster, options: { readonly gatesReadiness: boolean }): void {
    this.detach();
    const projects = new ProjectIndex(cluster, this.#options);
    this.#index = { projects, gatesReadiness: options.gatesReadiness };
    projects.start().catch((err: unknown) => this.#options.logger.error({ err, cluster_id: this.#clusterId }, "konfidence project index failed to start"));
  }

  /** Stops the watch: lookups answer 503 until a cluster is attached again. */
  detach(): void {
    const old = this.#index;
    this.#index = undefined;
    old?.projects.stop().catch((err: unknown) => this.#options.logger.error({ err, cluster_id: this.#clusterId }, "konfidence project index failed to stop"));
  }

  async stop(): Promise<void> {
    const old = this.#index;
    this.#index = undefined;
    await old?.projects.stop();
  }

  /** The process's readiness: waits only for a cluster that came with the registry's first list. */
  get hasSynced(): boolean {
    return this.#index === undefined || !this.#index.gatesReadiness || this.#index.projects.hasSynced;
  }

  sizes(): Array<{ clusterId: string; size: number; contested: number; synced: boolean; hasSynced: boolean; gatesReadiness: boolean; lastSyncedAt: Date | undefined }> {
    const index = this.#index;
    if (index === undefined) return [{ clusterId: this.#clusterId, size: 0, contested: 0, synced: false, hasSynced: false, gatesReadiness: false, lastSyncedAt: undefined }];
    return index.projects.sizes().map((s) => ({ ...s, gatesReadiness: index.gatesReadiness }));
  }

  byName(name: string): CompiledProject | undefined {
    return this.#attached().byName(name);
  }

  namesProvider(endpoint: string): boolean {
    return this.#attached().namesProvider(endpoint);
  }

  namesAudience(endpoint: string, audiences: readonly string[]): boolean {
    return this.#attached().namesAudience(endpoint, audiences);
  }

  #attached(): ProjectIndex {
    if (this.#index === undefined) throw new DependencyUnavailable("konfidence-project-index", "its cluster is not registered");
    return this.#index.projects;
  }
}
