import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { folderImports, upwardImports } from "../scripts/folder-imports.ts";

/**
 * src/'s folders from the lowest to the highest: a folder imports only folders before it, but for
 * UPWARD below. Every import circle between folders goes through an upward import, so the list is
 * the circles still open; a new one fails this test, and one removed must leave the list.
 */
const LAYERS = [
  "redaction",
  "metrics",
  "config",
  "tracing",
  "dependencies",
  "cache",
  "tokens",
  "headers",
  "kube-reading",
  "kube-fleet",
  "kube-watch",
  "kube-calls",
  "fga",
  "konfidence",
  "audit",
  "authz",
  "deploy",
  "envoy",
  "server",
  "cli",
];

/** The upward imports left, each with why it is there (issue 44). */
const UPWARD = {
  // The adapters implement the ports authz declares (authz/ports.ts, revocations.ts,
  // kube-api-upstream.ts), while authz's policies read Kubernetes paths with kube's parsers.
  "kube-reading -> authz": "ports",
  "kube-fleet -> authz": "ports",
  "kube-watch -> authz": "ports",
  "kube-calls -> authz": "ports",
  "fga -> authz": "ports",
  // The audit line's record is the Decision's; the policies write it (items 1-2 of issue 44).
  "audit -> authz": "the Decision's type",
  // check.ts reads and answers Envoy's messages; the policies read the request's type.
  "authz -> envoy": "CheckRequest/CheckResponse",
  // The Check span reads Envoy's headers (tracedChecks would belong to the envoy adapter).
  "tracing -> envoy": "the Check span",
  // The configuration schema validates with the domain's own parsers and TLS loader.
  "config -> authz": "route table",
  "config -> konfidence": "permissions, discovery URL, role bindings",
  "config -> server": "TLS files",
  // The list slots' gauge reads kube's slot counts.
  "metrics -> kube-fleet": "list slots",
};

describe("imports between src/'s folders", () => {
  const edges = folderImports(resolve(import.meta.dirname, "../src"));

  it("go down the layers, but for the upward imports listed", () => {
    const upward = upwardImports(edges, LAYERS).map(({ from, to }) => `${from} -> ${to}`);
    expect(upward.sort()).toEqual(Object.keys(UPWARD).sort());
  });

  it("dependency calls and error redaction import nothing from authz, tokens, konfidence or the adapters", () => {
    const importedBy = (folder: string) => edges.filter(({ from }) => from === folder).map(({ to }) => to).sort();
    expect(importedBy("redaction")).toEqual([]);
    expect(importedBy("dependencies")).toEqual(["metrics", "redaction", "tracing"]);
  });
});
