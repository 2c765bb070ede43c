/**
 * What the PluginInstallation watch keeps of each object in ListWatch's cache
 * (keepInstallationFields): every field installationOf() reads, and ListWatch's own metadata — so
 * an object through the projection gives the same Installation, and the same cache key and change
 * detection, as the whole object, for real-looking objects and for odd and hostile ones.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { installationOf, keepInstallationFields } from "../../src/kube-watch/installation-index.ts";
import { ids, PINNED_HASH } from "../support/tokens.ts";
import { appliedAndReconciled } from "../support/wire-fakes/realistic-objects.ts";

type Raw = Parameters<typeof installationOf>[0];

/** As the wire fake and a real API server serve one after `kubectl apply` and a reconcile. */
function realistic(overrides: { metadata?: Record<string, unknown>; spec?: Record<string, unknown>; status?: Record<string, unknown> } = {}): Raw {
  const extra = appliedAndReconciled({ name: "cert-manager", definitionHash: PINNED_HASH });
  return {
    apiVersion: "plugins.fundament.io/v1",
    kind: "PluginInstallation",
    metadata: { name: "cert-manager", uid: ids.installation, resourceVersion: "4711", ...extra.metadata, ...overrides.metadata },
    spec: {
      organizationId: "7d2e5e4a-9b5c-4f0a-8c73-4f1b2e3a0c03",
      definitionRef: { pluginName: "cert-manager", pluginVersion: "1.4.0", definitionHash: PINNED_HASH },
      ...overrides.spec,
    },
    status: { phase: "Running", ...extra.status, ...overrides.status },
  } as Raw;
}

/** What ListWatch reads of an object: its cache key (namespace, name) and its change detection (resourceVersion). */
function listWatchView(obj: Raw): unknown {
  const m = obj.metadata as Record<string, unknown> | undefined;
  return { namespace: m?.["namespace"] || "", name: m?.["name"] || "", resourceVersion: m?.["resourceVersion"] };
}

describe("keepInstallationFields", () => {
  it("keeps exactly the fields installationOf and ListWatch read of a real-looking object", () => {
    const raw = realistic({ metadata: { deletionTimestamp: "2026-11-30T10:00:00Z" } });
    expect(keepInstallationFields(raw)).toStrictEqual({
      metadata: { name: "cert-manager", namespace: undefined, uid: ids.installation, resourceVersion: "4711", deletionTimestamp: "2026-11-30T10:00:00Z" },
      spec: {
        organizationId: "7d2e5e4a-9b5c-4f0a-8c73-4f1b2e3a0c03",
        definitionRef: { pluginName: "cert-manager", pluginVersion: "1.4.0", definitionHash: PINNED_HASH },
      },
      status: { phase: "Running" },
    });
    // The fields left out are most of the object: several KiB of managedFields and annotations.
    expect(JSON.stringify(keepInstallationFields(raw)).length * 5).toBeLessThan(JSON.stringify(raw).length);
  });

  // Each row: an object, as the API server could send it, whose Installation must not change.
  const rows: Array<[string, unknown]> = [
    ["real-looking", realistic()],
    ["being deleted", realistic({ metadata: { deletionTimestamp: "2026-11-30T10:00:00Z" } })],
    ["deletionTimestamp null", realistic({ metadata: { deletionTimestamp: null } })],
    ["phase Terminating", realistic({ status: { phase: "Terminating" } })],
    ["no status", { ...realistic(), status: undefined }],
    ["status null", { ...realistic(), status: null }],
    ["no spec", { metadata: { name: "a", uid: ids.installation } }],
    ["spec null", { metadata: { name: "a", uid: ids.installation }, spec: null }],
    ["definitionRef null", realistic({ spec: { definitionRef: null } })],
    ["definitionRef a string", realistic({ spec: { definitionRef: "sha256:x" } })],
    ["hash not pinned", realistic({ spec: { definitionRef: { pluginName: "p", pluginVersion: "1", definitionHash: "sha256:unknown" } } })],
    ["hash a number", realistic({ spec: { definitionRef: { definitionHash: 7 } } })],
    ["no uid", { metadata: { name: "a" }, spec: {} }],
    ["no name", { metadata: { uid: ids.installation }, spec: {} }],
    ["metadata null", { metadata: null, spec: {} }],
    ["metadata a string", { metadata: "cert-manager", spec: {} }],
    ["metadata an array", { metadata: ["cert-manager"], spec: {} }],
    ["namespaced (not expected)", realistic({ metadata: { namespace: "kube-system" } })],
    ["__proto__ keys", JSON.parse(`{"metadata":{"name":"a","uid":"u","__proto__":{"deletionTimestamp":"x"}},"spec":{"__proto__":{"organizationId":"o"}},"status":{"__proto__":{"phase":"Terminating"}}}`)],
    ["spec a number", { metadata: { name: "a", uid: "u" }, spec: 0 }],
  ];
  it.each(rows)("%s: the same Installation and the same ListWatch key and version", (_name, obj) => {
    const raw = obj as Raw;
    const kept = keepInstallationFields(raw);
    expect(installationOf(kept)).toStrictEqual(installationOf(raw));
    expect(listWatchView(kept)).toStrictEqual(listWatchView(raw));
    expect(kept.metadata?.uid).toBe(raw.metadata?.uid);
  });

  // Anything at every level the projection reads, beside real-looking values and extra fields.
  const value = fc.oneof(fc.anything(), fc.string(), fc.constant(null), fc.constant(undefined));
  const part = <T extends Record<string, fc.Arbitrary<unknown>>>(fields: T) =>
    fc.oneof({ weight: 4, arbitrary: fc.tuple(fc.record(fields, { requiredKeys: [] }), fc.dictionary(fc.string(), fc.anything())).map(([f, extra]) => ({ ...extra, ...f })) }, value);
  const arbitraryObject = part({
    metadata: part({
      name: fc.oneof(fc.string(), value),
      namespace: fc.oneof(fc.string(), value),
      uid: fc.oneof(fc.uuid(), value),
      resourceVersion: fc.oneof(fc.nat().map(String), value),
      deletionTimestamp: fc.oneof(fc.date().map((d) => (Number.isNaN(d.getTime()) ? null : d.toISOString())), value),
      managedFields: fc.array(fc.object()),
      annotations: fc.dictionary(fc.string(), fc.string()),
    }),
    spec: part({
      organizationId: fc.oneof(fc.uuid(), value),
      definitionRef: part({ pluginName: fc.oneof(fc.string(), value), pluginVersion: fc.oneof(fc.string(), value), definitionHash: fc.oneof(fc.constant(PINNED_HASH), value) }),
    }),
    status: part({ phase: fc.oneof(fc.constantFrom("Running", "Terminating", "Pending"), value), conditions: fc.array(fc.object()) }),
  });

  it("property: any object gives the same Installation, key and version through the projection", () => {
    fc.assert(
      fc.property(arbitraryObject, (obj) => {
        // WatchedIndex hands the projection objects only (anything else reaches ListWatch as it came).
        fc.pre(typeof obj === "object" && obj !== null);
        const raw = obj as Raw;
        const kept = keepInstallationFields(raw);
        expect(installationOf(kept)).toStrictEqual(installationOf(raw));
        expect(listWatchView(kept)).toStrictEqual(listWatchView(raw));
      }),
      { numRuns: 1_000 },
    );
  });
});
